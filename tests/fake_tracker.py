"""TEST-ONLY HARNESS: torch's own FSDP2 memory tracker on transformers' real models, faked.

What torchtitan's estimation script did (``scripts/estimate/estimation.py`` at pytorch/torchtitan
4a950eaabff274567873322c206ddb481dae3567, the last commit that ships it), on a CPU and without
allocating: a fake process group (``torch.testing._internal.distributed.fake_pg.FakeStore``,
``init_process_group("fake", ...)``), the model built on the meta device under
``FakeTensorMode`` and materialised with ``to_empty``, FSDP2 applied as torchtitan's
``apply_fsdp`` does (``torchtitan/models/llama3/infra/parallelize.py`` at that commit: the
embedding, each decoder block and ``[norm, output]`` their own ``fully_shard`` groups, the last
kept gathered after forward, then the root; bf16 parameters, fp32 reduce), full activation
checkpointing as its ``_apply_full_ac`` (``ptd_checkpoint_wrapper`` around each block), its
loss (``components/loss.py``: ``cross_entropy(pred.flatten(0, 1).float(), labels)``) and its
train step (forward, ``del pred``, backward, ``clip_grad_norm_(foreach=True)``, AdamW step,
``zero_grad()``) under ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker``, after one
untracked optimizer step (the script runs two steps and keeps the second's peak: the first has
no optimizer states; here the untracked step also keeps DTensor's sharding propagation out of
the count, see :func:`track`).  AdamW is torch's ``foreach`` implementation, not torchtitan's
default ``fused`` (CUDA only).

The model is transformers' own class (``LlamaForCausalLM``, ``Qwen3MoeForCausalLM``) built
from a config dict, so what is tracked is what Hugging Face's code keeps, not torchtitan's
model code.  The tracker counts tensor storages (on a CPU device it does not round to the CUDA
allocator's 512-byte blocks), so its peak is ``torch.cuda.max_memory_allocated`` less the
allocator's rounding and anything allocated outside tensors (cuBLAS workspaces).

Optionally tensor parallelism through DTensor (``tp > 1``): a 2-D ``(dp_shard, tp)`` mesh and
torchtitan's ``apply_tp`` plan written for Hugging Face's module names (column-wise q/k/v,
gate/up; row-wise o/down; the output column-wise), without sequence parallelism or loss
parallelism.

Under ``FakeTensorMode`` the tracker also counts what DTensor's sharding propagation allocates
on fake tensors of the *global* shape (mem_tracker.py ``__torch_dispatch__`` lets the
propagation's ops through when they run under the tracker's own fake mode): :func:`track`
steps the optimizer once untracked to fill that cache, and under ``loss_parallel()`` one fp32
tensor of the global logits shape remains (tests/test_fake_tracker_gaps.py measures it).

Every call initialises a fake process group of ``world`` ranks (destroying the previous one):
one process simulates rank 0 of any world size, since nothing is communicated.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect


#: What every tracker test module needs, each skipped cleanly without it.
NEEDS = ("torch", "transformers", "torch.distributed._tools.fsdp2_mem_tracker",
         "torch.testing._internal.distributed.fake_pg")


def tracker_marks() -> list:
    """Skip the calling test module unless :data:`NEEDS` import; its ``pytestmark``.

    FSDP2's note on view outputs (transformers' modules return views) and DTensor's on
    two-step all-reduces over the 2-D mesh are said by torch, not by these tests; so is
    ``ModTracker``'s "module hierarchy tracking maybe be messed up" (mod_tracker.py
    ``_get_append_fn``: transformers 5 wraps ``apply_rotary_pos_emb`` in a module of type
    ``Func``, ``use_kernel_forward_from_hub("rotary_pos_emb")`` in modeling_llama.py, and the
    tracker sees it entered while its name is still open).  The tests read only the global
    peak snapshot, which that module hierarchy does not feed; the per-module statistics it
    would misplace are unused.
    """
    import pytest

    for name in NEEDS:
        pytest.importorskip(name)
    return [pytest.mark.torch, pytest.mark.filterwarnings("ignore:FSDP2-wrapped module"),
            pytest.mark.filterwarnings("ignore:While redistributing"),
            pytest.mark.filterwarnings("ignore:The module hierarchy tracking maybe be messed up")]

#: Llama-3 8B and 70B (Meta's config.json of meta-llama/Meta-Llama-3-8B and -70B: hidden
#: 4096 / 8192, FFN 14336 / 28672, 32 / 64 heads, 8 KV heads, vocabulary 128256, RoPE theta
#: 500000, untied output) and a Qwen3-MoE (Qwen/Qwen3-30B-A3B's config.json: hidden 2048,
#: 32 heads of 128, 4 KV heads, 128 experts of FFN 768, top-8, vocabulary 151936, QK norm).
CONFIGS = {
    "llama3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336,
                      num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=32,
                      vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                      max_position_embeddings=8192, tie_word_embeddings=False),
    "llama3-70b": dict(model_type="llama", hidden_size=8192, intermediate_size=28672,
                       num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=80,
                       vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                       max_position_embeddings=8192, tie_word_embeddings=False),
    "qwen3-30b-a3b": dict(model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144,
                          moe_intermediate_size=768, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, num_hidden_layers=48,
                          num_experts=128, num_experts_per_tok=8, norm_topk_prob=True,
                          decoder_sparse_step=1, mlp_only_layers=[], vocab_size=151936,
                          rope_theta=1000000.0, rms_norm_eps=1e-6,
                          max_position_embeddings=40960, tie_word_embeddings=False),
}

#: The tracker's categories (``_FSDPRefType`` values) in the order the tests report them.
CATEGORIES = ("Sharded Param", "Unsharded Param", "Buffer", "Sharded Grad", "Unsharded Grad",
              "Activation", "Temp", "All Gather", "Reduce Scatter", "OptState", "Inputs")


def hf_config(name: str, layers: int):
    """transformers' config of ``CONFIGS[name]`` with ``layers`` decoder layers, SDPA
    attention and (for MoE) the ``grouped_mm`` experts, the static-shape path that
    ``FakeTensorMode`` can run (the eager loop's ``nonzero`` has a data-dependent shape)."""
    import transformers

    spec = dict(CONFIGS[name])
    cls = transformers.CONFIG_MAPPING[spec.pop("model_type")]
    cfg = cls(**{**spec, "num_hidden_layers": layers})
    cfg._attn_implementation = "sdpa"
    if hasattr(cfg, "num_experts"):
        cfg._experts_implementation = "grouped_mm"
        cfg.experts_implementation = "grouped_mm"
        cfg.output_router_logits = False
    cfg.use_cache = False
    return cfg


def _fake_group(world: int):
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())


def _apply_tp(model, tp_mesh, sequence_parallel: bool):
    # torchtitan's apply_tp (llama3/infra/parallelize.py at 4a950ea) in Hugging Face's names:
    # q/k/v and gate/up column-wise, o/down row-wise; with sequence parallelism (torchtitan's
    # only form) the norms are SequenceParallel, the blocks' outputs and the embedding's are
    # sequence-sharded, the attention's and MLP's inputs all-gathered, and the output keeps
    # its logits vocab-sharded for loss_parallel(); without, the output gathers its logits
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    if not sequence_parallel:
        parallelize_module(model, tp_mesh, {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
            "lm_head": ColwiseParallel(output_layouts=Replicate()),
        })
        for layer in model.model.layers:
            plan = {f"self_attn.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")}
            plan["self_attn.o_proj"] = RowwiseParallel()
            plan.update({f"mlp.{n}": ColwiseParallel() for n in ("gate_proj", "up_proj")})
            plan["mlp.down_proj"] = RowwiseParallel()
            parallelize_module(layer, tp_mesh, plan)
        return
    parallelize_module(model, tp_mesh, {
        # the residual stream stays a DTensor (torchtitan's is local tensors): transformers
        # reads the sequence length off it for the RoPE positions and the mask
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                              use_local_output=False),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                   use_local_output=False),
    })
    for layer in model.model.layers:
        plan = {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                      desired_input_layouts=(Replicate(),)),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        }
        plan.update({f"self_attn.{n}": ColwiseParallel() for n in ("q_proj", "k_proj", "v_proj")})
        plan.update({f"mlp.{n}": ColwiseParallel() for n in ("gate_proj", "up_proj")})
        parallelize_module(layer, tp_mesh, plan)


def _clip(model, torch):
    # torch's clip_grad_norm_(max_norm=1.0, foreach=True), torchtitan's max_norm; with TP the
    # norms' gradients live on the dp mesh and the rest on the (dp, tp) mesh, which one stack
    # cannot mix: the norm of each mesh's gradients, then of those (torchtitan's
    # dist_utils.clip_grad_norm_ does the same across its pipeline stages)
    params = [p for p in model.parameters() if p.grad is not None]
    meshes = {}
    for param in params:
        meshes.setdefault(param.grad.device_mesh, []).append(param.grad)
    if len(meshes) == 1:
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        return
    norms = [torch.nn.utils.get_total_norm(grads, foreach=True).full_tensor()
             for grads in meshes.values()]
    total = torch.linalg.vector_norm(torch.stack(norms))
    for grads in meshes.values():
        torch._foreach_mul_([g.to_local() for g in grads], (1.0 / (total + 1e-6)).clamp(max=1.0))


@contextlib.contextmanager
def _real_meshes():
    # fully_shard on a TP-sharded parameter concatenates the dp and tp meshes
    # (FSDPParam._init_sharding_spec_tp -> DeviceMesh._concatenate), which computes this
    # rank's coordinate with nonzero() on the real rank map: run it outside the fake mode, as
    # torchtitan's script builds its meshes before entering it
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    original = DeviceMesh.__dict__["_concatenate"]

    def concatenate(*args, **kwargs):
        with unset_fake_temporarily():
            return original.__func__(*args, **kwargs)

    DeviceMesh._concatenate = staticmethod(concatenate)
    try:
        yield
    finally:
        DeviceMesh._concatenate = original


def track(name: str, *, layers: int = 2, world: int = 8, tp: int = 1, batch: int = 1,
          seq: int = 4096, recompute: str = "none", sequence_parallel: bool = False,
          steps: int = 1) -> dict:
    """One torchtitan train step of transformers' ``name`` under ``FSDPMemTracker``.

    Parameters
    ----------
    name : str
        A key of :data:`CONFIGS`.
    layers : int
        Decoder layers built (fewer than the real model's: every block is its own FSDP group
        and the same shapes, so its terms repeat exactly).
    world : int
        Ranks of the fake process group (``dp_shard = world / tp``).
    tp : int
        Tensor-parallel degree (1: FSDP2 only).
    sequence_parallel : bool
        With ``tp > 1``: torchtitan's plan (sequence parallelism and ``loss_parallel()``);
        False: neither, the output gathering its logits.
    batch, seq : int
        Local batch and sequence length of the dummy batch.
    recompute : {"none", "full"}
        torchtitan's ``activation_checkpoint.mode``.
    steps : int
        Tracked train steps (after the untracked warm-up step that makes the AdamW states).

    Returns
    -------
    dict
        ``peak`` (bytes, the tracker's peak total on the device) and ``categories`` (the peak
        snapshot's bytes per :data:`CATEGORIES` name), ``params`` (the model's parameters) and
        ``tensors`` (its parameter tensors).
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        checkpoint_wrapper)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    import transformers

    if recompute not in ("none", "full"):
        raise ValueError(f"recompute {recompute!r}: none or full")
    cfg = hf_config(name, layers)
    _fake_group(world)
    if tp > 1:
        mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp_shard", "tp"))
        dp_mesh, tp_mesh = mesh["dp_shard"], mesh["tp"]
        for sub in (mesh, dp_mesh, tp_mesh):   # outside the fake mode, as the script does
            sub.mesh, sub.get_coordinate()
    else:
        dp_mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",))
    gc.disable()
    try:
        # the 2-D mesh keeps a real rank map that fully_shard slices lazily
        with FakeTensorMode(allow_non_fake_inputs=tp > 1), _real_meshes():
            with torch.device("meta"):
                model = transformers.AutoModelForCausalLM.from_config(cfg)
            n_params = sum(p.numel() for p in model.parameters())
            n_tensors = len(list(model.parameters()))
            if tp > 1:
                _apply_tp(model, tp_mesh, sequence_parallel)
            inner = model.model
            if recompute == "full":
                for i, block in enumerate(inner.layers):
                    inner.layers[i] = checkpoint_wrapper(block, preserve_rng_state=False)
            kw = {"mesh": dp_mesh, "mp_policy": MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}
            fully_shard(inner.embed_tokens, reshard_after_forward=True, **kw)
            for block in inner.layers:
                fully_shard(block, reshard_after_forward=True, **kw)
            fully_shard([inner.norm, model.lm_head], reshard_after_forward=False, **kw)
            fully_shard(model, **kw)
            model.to_empty(device="cpu")
            model.train()
            # foreach, not torchtitan's default "fused" (CUDA only, its docstring says): the
            # CPU fused kernel's fake implementation is not what a GPU runs
            opt = torch.optim.AdamW(model.parameters(), lr=8e-4, eps=1e-8, weight_decay=0.1,
                                    foreach=True)
            tokens = torch.randint(0, cfg.vocab_size, (batch, seq))
            labels = torch.randint(0, cfg.vocab_size, (batch, seq))

            from torch.distributed.tensor.parallel import loss_parallel

            def train_step():
                # torchtitan's train_context: the loss and its backward inside loss_parallel()
                with loss_parallel() if tp > 1 and sequence_parallel else contextlib.nullcontext():
                    pred = model(input_ids=tokens, use_cache=False).logits
                    loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(),
                                                             labels.flatten(0, 1))
                    del pred
                    loss.backward()
                _clip(model, torch)
                opt.step()
                opt.zero_grad()

            # One optimizer step outside the tracker first, on zero gradients: DTensor's
            # sharding propagation runs each op new to its cache on fake tensors of the
            # *global* shape under the same fake mode, and the tracker counts those
            # allocations (mem_tracker.py __torch_dispatch__: its test `active_fake_mode() is
            # self._fake_mode_on_entry` lets them through); without this the first AdamW
            # step shows three unsharded fp32 copies of the model.  It also makes the AdamW
            # states, so one tracked step is the steady state.
            for param in model.parameters():
                param.grad = torch.zeros_like(param)
            _clip(model, torch)
            opt.step()
            opt.zero_grad()
            tracker = FSDPMemTracker(mod=model, optm=opt)
            tracker.track_inputs((tokens, labels))
            with tracker:
                for step in range(steps):
                    train_step()
                    if step == 0:
                        tracker.reset_mod_stats()
            (snap,) = tracker.get_tracker_snapshot("peak").values()
    finally:
        gc.enable()
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    cats = {getattr(k, "value", k): v for k, v in snap.items()}
    return {"peak": cats.pop("Total"), "categories": cats, "params": n_params,
            "tensors": n_tensors}


# --- memsym's prediction of the same job ------------------------------------------------------
#: memsym's presets of the same models (their shapes equal :data:`CONFIGS`, checked by the tests)
PRESETS = {"llama3-8b": "llama3-8b", "llama3-70b": "llama3-70b",
           "qwen3-30b-a3b": "qwen3-30b-a3b"}


def memsym_job(name: str, *, layers: int = 2, world: int = 8, tp: int = 1, batch: int = 1,
               seq: int = 4096, recompute: str = "none"):
    """memsym's job for what :func:`track` runs: torchtitan, FSDP2 over ``world / tp`` ranks,
    one micro-batch, metric ``allocated`` and no allowances (the tracker counts tensors: no
    CUDA context, no cuBLAS workspace, no fragmentation); with ``tp > 1`` neither sequence
    nor loss parallelism, as :func:`_apply_tp` shards it."""
    from memsym.job import job

    d = world // tp
    return job(PRESETS[name], num_layers=layers, framework="torchtitan", sharding="fsdp",
               t=tp, p=1, d=d, seq_length=seq, micro_batch_size=batch,
               global_batch_size=batch * d, recompute=recompute, dropout=False,
               metric="allocated", workspace=0, loss_parallel=False, sequence_parallel=False)


def predict(name: str, **job):
    """memsym's estimate (:func:`memsym.training_memory`) of :func:`memsym_job`."""
    from memsym.training import training_memory

    return training_memory(memsym_job(name, **job))


def hf_differences(name: str, *, layers: int = 2, batch: int = 1, seq: int = 4096,
                   recompute: str = "none") -> dict:
    """What transformers' model code keeps beyond torchtitan's (which memsym counts), at the
    loss's backward, in bytes, each derived from transformers' code (t = 1):

    ``rmsnorm_fp32``
        ``LlamaRMSNorm`` / ``Qwen3MoeRMSNorm`` keep the fp32 copy of their input and its bf16
        cast where memsym counts the bf16 input: :math:`4\\tau h` per norm, two per layer
        (tests/test_hf_activations.py measures it on one layer).
    ``qk_norm_fp32``
        Qwen3's per-head ``q_norm``/``k_norm`` keep the fp32 copy of their input beside the
        bf16 input and the fp32 1/rms that memsym counts: :math:`4\\tau H + 4\\tau g d_h`,
        :math:`H = a d_h`.
    ``routing_indices``
        its routing keeps, per layer, the top-k indices (int64, :math:`8\\tau k`), the sort's
        permutation, ``perm // k`` and the inverse permutation (int64,
        :math:`3 \\cdot 8\\tau k`), the fp32 top-k weights and their sum (``norm_topk_prob``,
        :math:`4\\tau k + 4\\tau`), the bf16 sorted weights (:math:`2\\tau k`) and the int32
        offsets (:math:`4E`):
        :math:`38\\tau k + 4\\tau + 4E`, where torchtitan's MoE keeps the router's scores
        (memsym counts it, as :mod:`memsym.terms.hf_moe_routing`, for jobs that run
        transformers' model code; these jobs are torchtitan's, which does not keep it).
    ``repeat_kv``
        under ``FakeTensorMode`` transformers materialises the causal mask, and with a mask
        ``sdpa_attention_forward`` does not use SDPA's ``enable_gqa``
        (``integrations/sdpa_attention.py``, ``use_gqa_in_sdpa``): ``repeat_kv`` expands K
        and V to all heads before SDPA saves them: :math:`2(2\\tau H - 2\\tau g d_h)`.
    ``mask_cast``
        that mask is additive, in the model's dtype (fp32: FSDP2 keeps the sharded parameters
        in fp32), and FSDP2's ``MixedPrecisionPolicy`` (``cast_forward_inputs``) casts it to
        bf16 in every block's pre-forward: a new ``(b, 1, s, s)`` bf16 tensor per block, which
        its SDPA saves: :math:`2 b s^2` (measured: s = H in two of the shapes made it look
        like a copy of the attention output until s = 2048 and 8192 told them apart).
    ``rope_tables``
        the bf16 ``cos``/``sin`` of the model's rotary embedding, one pair shared by every
        layer and by the batch (``position_ids`` is ``arange(s)[None]``): :math:`4 s d_h`.
    ``labels``
        the batch's int64 labels, an input of the step memsym does not count: :math:`8\\tau`.
    ``causal_mask``
        with checkpointed blocks one storage of :math:`b s^2` bytes stays alive to the
        backward (by its size the boolean ``(b, 1, s, s)`` mask; measured at s = 4096 and 8192,
        b = 1 and 2, not traced to the line that keeps it).

    With full recomputation a block keeps only its input, so the per-layer terms vanish.
    """
    c = CONFIGS[name]
    tau, h = batch * seq, c["hidden_size"]
    a, g = c["num_attention_heads"], c["num_key_value_heads"]
    d_h = c.get("head_dim", h // a)
    H = a * d_h
    out = {"rope_tables": 4 * seq * d_h, "labels": 8 * tau}
    if recompute == "full":
        out["causal_mask"] = batch * seq * seq
        return out
    per = {"rmsnorm_fp32": 2 * 4 * tau * h,
           "repeat_kv": 2 * (2 * tau * H - 2 * tau * g * d_h),
           "mask_cast": 2 * batch * seq * seq}
    if "num_experts" in c:
        k, E = c["num_experts_per_tok"], c["num_experts"]
        per["qk_norm_fp32"] = 4 * tau * H + 4 * tau * g * d_h
        per["routing_indices"] = 38 * tau * k + 4 * tau + 4 * E
    out.update({k: layers * v for k, v in per.items()})
    return out


def compare(name: str, **job) -> dict:
    """The tracker's peak and memsym's prediction of one job, side by side (cached: a
    configuration runs once per process, however it is spelled: ``compare("llama3-8b")``
    and ``compare("llama3-8b", layers=2, batch=1, recompute="none")`` are one run; do not
    mutate the result).

    Returns
    -------
    dict
        ``tracker`` (:func:`track`'s result), ``memsym`` (the estimate's total, bytes),
        ``terms`` (memsym's terms, bytes), ``phase`` (memsym's peak phase), ``named``
        (:func:`hf_differences`) and ``expected``: memsym's total plus the named
        differences.
    """
    unknown = set(job) - set(_JOB_DEFAULTS)
    if unknown:
        raise TypeError(f"compare() got unexpected keywords {sorted(unknown)}")
    return _compare(name, tuple(sorted({**_JOB_DEFAULTS, **job}.items())))


def _compared(name: str, **job) -> dict:
    """compare's comparison, uncached."""
    tracked = track(name, **job)
    est = predict(name, **job)
    terms = {t.key: int(t.evaluate(est.values)) for t in est.total.terms}
    named = hf_differences(name, **{k: v for k, v in job.items() if k not in ("world", "tp")})
    total = int(est.bytes_total)
    return {"tracker": tracked, "memsym": total, "terms": terms, "phase": est.phase,
            "named": named, "expected": total + sum(named.values())}


#: memsym_job's keywords, each with its default (track's are the same): the cache key of
#: compare, so that a configuration given with and without its defaults runs once
_JOB_DEFAULTS = {k: p.default for k, p in inspect.signature(memsym_job).parameters.items()
                 if p.kind is p.KEYWORD_ONLY}


@functools.lru_cache(maxsize=None)
def _compare(name: str, job: tuple) -> dict:
    return _compared(name, **dict(job))


# --- the checks every configuration shares --------------------------------------------------
#: |memsym + named differences - tracker| / tracker: a few KiB of step counters and buffers
DECOMP_TOL = 1e-4
#: |memsym - tracker| / tracker at 2-3 layers: transformers' Llama keeps 45-60 % more per
#: layer than torchtitan's (the named differences); with the output layer's logits dominating
#: the peak that is at most 14 % here
RAW_TOL = 0.15


def check_against_tracker(name, layers, world, batch, seq, recompute):
    """The assertions every configuration shares; returns the comparison."""
    got = compare(name, layers=layers, world=world, batch=batch, seq=seq, recompute=recompute)
    tracked, terms, cats = got["tracker"], got["terms"], got["tracker"]["categories"]
    cfg = CONFIGS[name]
    V, h, tau = cfg["vocab_size"], cfg["hidden_size"], batch * seq
    # the peak is the loss's backward in both: the logits' fp32 gradient and the log-softmax
    # input's (8 bytes per logit), the [norm, output] group still gathered in bf16
    assert got["phase"] == "loss-backward"
    assert cats["Temp"] == 8 * tau * V
    assert cats["Unsharded Param"] == 2 * V * h + 2 * h
    # FSDP2's padded dim-0 shards, and AdamW's two fp32 moments plus its fp32 step counter
    assert cats["Sharded Param"] == terms["weights"] + terms.get("expert_weights", 0)
    assert cats["OptState"] == (terms["optimizer"] + terms.get("expert_optimizer", 0)
                                + 4 * tracked["tensors"])
    assert cats["Sharded Grad"] == 0          # zero_grad(set_to_none) before the step
    assert abs(got["expected"] - tracked["peak"]) <= DECOMP_TOL * tracked["peak"], got
    assert abs(got["memsym"] - tracked["peak"]) <= RAW_TOL * tracked["peak"], got
    return got
