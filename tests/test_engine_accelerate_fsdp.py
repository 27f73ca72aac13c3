"""Accelerate's FSDP2 as the Hugging Face Trainer builds it, on a CPU gloo group of 2 ranks,
against memsym's reading of the same launch (memsym.terms.accelerate_fsdp).

Each rank runs the library code itself, not a copy of it: transformers 5.25.0's
``TrainingArguments._process_fsdp_args`` turns the launch's ``--fsdp`` into the plugin's
arguments, Accelerate 1.16.0's ``FullyShardedDataParallelPlugin`` takes them and its
``set_mixed_precision`` the ``--bf16`` (as ``AcceleratorState`` does, state.py:975-976), and
Accelerate's ``fsdp2_prepare_model`` upcasts and wraps transformers' ``LlamaForCausalLM`` with
torch's ``fully_shard``.  Accelerate sets FSDP only for GPU-like devices (state.py:945-976 lists
no CPU), so ``fsdp2_prepare_model`` is called with a stand-in for the ``Accelerator`` holding
what it reads (the plugin, the mixed precision, the device; ``is_main_process`` False, which
only skips a log line).  The Trainer's own loop is not run: the optimizer is its default,
``torch.optim.AdamW(fused=True)``, and gradient accumulation is Accelerate's ``no_sync``
(``set_requires_gradient_sync(False)``, accelerator.py:1126-1131) around the first
micro-batch, as trainer.py:1941-1952 runs it.

Measured from the tensors: each rank's sharded parameters, gradients and AdamW moments (storage
bytes), the all-gather outputs alive at the loss and inside each decoder layer's backward, the
unsharded gradients held between micro-batches, and the dtypes and sizes of every all-gather
and reduce-scatter buffer FSDP2 allocates.  Counted at ``torch.distributed`` itself: every
collective the step issues (FSDP2 calls ``dist.all_gather_single`` and
``dist.reduce_scatter_single``, torch 2.13.0 ``_fsdp_collectives.py:111-191``) with its
buffer, against the estimate's step-time record of the same launch.  The tiny model's dim-0 sizes are even, so FSDP2
pads nothing and memsym's per-parameter forms must match to the byte.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from gloo_group import run_group  # noqa: E402
from in_process import json_report  # noqa: E402

pytestmark = pytest.mark.torch

#: The model every rank builds (LlamaConfig) and memsym reads (config.json): h 16, FFN 32,
#: 2 layers, 2 heads of 8, V 32; every dim 0 even.
V, H, F, LAYERS = 32, 16, 32, 2
BLOCK = 4 * H * H + 3 * H * F + 2 * H            # one decoder layer's parameters
WORLD, BATCH, SEQ = 2, 2, 8

#: The launches: --fsdp's words, --bf16 (Accelerate's mixed precision) or not, the dtype the
#: checkpoint is loaded in, a tied embedding, the accumulation.
CASES = {
    "mixed": dict(fsdp="full_shard auto_wrap", mixed="bf16", load="bfloat16", tied=False, gas=2),
    "plain-tied": dict(fsdp=True, mixed="no", load="bfloat16", tied=True, gas=1),
    "shard-grad-op": dict(fsdp="shard_grad_op", mixed="bf16", load="float32", tied=False, gas=2),
    # GPT-2: tied, a learned position table left in the root group, LayerNorms with biases
    "gpt2": dict(fsdp=True, mixed="bf16", load="float32", tied=True, gas=1, arch="gpt2"),
}
_PRELOAD = ("transformers.models.llama.modeling_llama", "transformers.models.gpt2.modeling_gpt2",
            "transformers.training_args", "accelerate.utils.fsdp_utils")
#: GPT-2's position table (rows) and one block: c_attn h x 3h and c_proj h x h with biases,
#: the MLP's h x 4h and 4h x h with biases, two LayerNorms (weight, bias).
POSITIONS = 32
GPT2_BLOCK = (3 * H * H + 3 * H) + (H * H + H) + (4 * H * H + 4 * H) + (4 * H * H + H) + 4 * H


def _params(case) -> int:
    if case.get("arch") == "gpt2":
        return V * H + POSITIONS * H + LAYERS * GPT2_BLOCK + 2 * H
    return (1 if case["tied"] else 2) * V * H + LAYERS * BLOCK + H


def _model(case):
    """transformers' model of the case, in the dtype the checkpoint loads in."""
    import transformers

    if case.get("arch") == "gpt2":
        cfg = transformers.GPT2Config(n_embd=H, n_layer=LAYERS, n_head=2, vocab_size=V,
                                      n_positions=POSITIONS)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(hidden_size=H, intermediate_size=F, num_hidden_layers=LAYERS,
                                       num_attention_heads=2, num_key_value_heads=2, vocab_size=V,
                                       tie_word_embeddings=case["tied"])
        model = transformers.LlamaForCausalLM(cfg)
    return model.to(getattr(torch, case["load"]))


def _workload(rank, case):
    """One launch on this rank: the bytes the module docstring lists."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as coll
    from transformers.training_args import TrainingArguments

    legacy = TrainingArguments._apply_legacy_fsdp_to_config
    ns = SimpleNamespace(fsdp=case["fsdp"], fsdp_config=None, activation_checkpointing=False,
                         _apply_legacy_fsdp_to_config=legacy)
    plugin = FullyShardedDataParallelPlugin(**TrainingArguments._process_fsdp_args(ns))
    if case["mixed"] != "no":
        plugin.set_mixed_precision(case["mixed"])          # state.py:975-976
    torch.manual_seed(0)
    model = _model(case)
    stand_in = SimpleNamespace(state=SimpleNamespace(fsdp_plugin=plugin),
                               mixed_precision=case["mixed"], is_main_process=False,
                               device=torch.device("cpu"), torch_device_mesh=None)
    model = fsdp2_prepare_model(stand_in, model)
    layers = model.transformer.h if case.get("arch") == "gpt2" else model.model.layers
    groups = {"tail": model.lm_head._get_fsdp_state()._fsdp_param_group,
              **{f"layer{i}": layer._get_fsdp_state()._fsdp_param_group
                 for i, layer in enumerate(layers)}}
    if not case["tied"]:
        groups["embed"] = model.model.embed_tokens._get_fsdp_state()._fsdp_param_group
    if model._get_fsdp_state()._fsdp_param_group is not None:    # what the root holds
        groups["root"] = model._get_fsdp_state()._fsdp_param_group

    def gathered():
        # each parameter's unsharded tensor (copied out of the group's flat all-gather
        # output) and a prefetched group's flat output not yet copied out
        out = {}
        for name, g in groups.items():
            pending = g._all_gather_result
            out[name] = sum(x.untyped_storage().nbytes() for fp in g.fsdp_params
                            for x in fp.all_gather_outputs) + (
                0 if pending is None else pending.all_gather_output.untyped_storage().nbytes())
        return out

    watched = []     # the tied output weight's gradient, waiting in autograd's input buffer
    if case["tied"]:
        _watch_output_weight_grad(model.lm_head, watched)

    def unsharded_grads():
        held = {"tail": sum(g.untyped_storage().nbytes() for g in (w() for w in watched)
                            if g is not None)}
        for name, g in groups.items():
            for fp in g.fsdp_params:
                for grad in (getattr(getattr(fp, "_unsharded_param", None), "grad", None),
                             fp.unsharded_accumulated_grad):
                    if grad is not None:
                        held[name] = held.get(name, 0) + grad.untyped_storage().nbytes()
        return held

    moments = {}

    def record(name):
        def hook(*_):          # returns None: the gradients pass unchanged
            moments.setdefault(name, (gathered(), unsharded_grads()))
        return hook

    for i, layer in enumerate(layers):   # inside each layer's backward
        (layer.mlp.c_proj if case.get("arch") == "gpt2" else layer.mlp.down_proj
         ).register_full_backward_hook(record(f"layer{i}"))
    allocations = []
    original = coll.DefaultAllocMixin.allocate

    def recording(self, size, *, dtype, device):
        allocations.append((type(self).__name__, int(torch.Size(size).numel()), str(dtype)))
        return original(self, size, dtype=dtype, device=device)

    coll.DefaultAllocMixin.allocate = recording
    issued = []                  # (kind, buffer bytes) of every collective, in order
    originals = _count_collectives(issued)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        ids = torch.randint(0, V, (BATCH, SEQ), generator=torch.Generator().manual_seed(rank))
        for micro in range(case["gas"]):
            last = micro == case["gas"] - 1
            model.set_requires_gradient_sync(last)   # Accelerate's no_sync but for the last
            loss = model(input_ids=ids, labels=ids).loss
            at_loss = (gathered(), unsharded_grads())
            moments.clear()
            loss.backward()
        opt.step()
    finally:
        coll.DefaultAllocMixin.allocate = original
        for name, fn in originals.items():
            setattr(dist, name, fn)
    states = {"params": 0, "grads": {}, "moments": 0, "dtypes": set()}
    for param in model.parameters():
        local = param.to_local()
        states["params"] += local.untyped_storage().nbytes()
        grad = param.grad.to_local().untyped_storage()
        states["grads"][grad.data_ptr()] = grad.nbytes()    # one flat output per group
        states["moments"] += sum(v.to_local().numel() * v.to_local().element_size()
                                 for k, v in opt.state[param].items() if k != "step")
        states["dtypes"].add((str(local.dtype), str(param.grad.dtype)))
    return {"params": states["params"], "grads": sum(states["grads"].values()),
            "moments": states["moments"], "dtypes": sorted(states["dtypes"]),
            "at_loss": at_loss, "moments_in_backward": moments, "allocations": allocations,
            "collectives": issued}


#: The torch.distributed collectives counted, each with the argument that is its full buffer
#: (the all-gathered output, the reduce-scatter input; None: any other collective, which the
#: step must not issue).
_COUNTED = {"all_gather_single": ("all-gather", 0, "output_tensor"),
            "reduce_scatter_single": ("reduce-scatter", 1, "input"),
            **{name: (name, None, None) for name in (
                "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_gather",
                "reduce_scatter", "broadcast", "all_to_all_single", "barrier")}}


def _count_collectives(issued: list) -> dict:
    """Replace each of :data:`_COUNTED` in ``torch.distributed`` by a wrapper appending
    ``(kind, buffer bytes)`` to ``issued`` (a collective called inside another is the outer
    one's, not counted again); return the originals."""
    originals = {name: getattr(dist, name) for name in _COUNTED}
    depth = [0]

    def wrap(name, fn):
        kind, at, key = _COUNTED[name]

        def call(*args, **kwargs):
            if depth[0] == 0:
                buf = None if at is None else (args[at] if len(args) > at else kwargs[key])
                issued.append((kind, None if buf is None else buf.numel() * buf.element_size()))
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
        return call

    for name, fn in originals.items():
        setattr(dist, name, wrap(name, fn))
    return originals


def _watch_output_weight_grad(lm_head, watched):
    """Route the output layer's weight through an identity whose backward keeps a weak
    reference to the weight's gradient: a tied weight's gradient from the output layer is not
    ``.grad`` until the embedding's backward adds its own (autograd accumulates a leaf's
    gradients in its input buffer before calling AccumulateGrad), yet it is held."""
    import weakref

    class Watch(torch.autograd.Function):
        @staticmethod
        def forward(ctx, weight):
            return weight.view_as(weight)

        @staticmethod
        def backward(ctx, grad):
            watched.append(weakref.ref(grad))
            return grad

    def forward(x):
        return torch.nn.functional.linear(x, Watch.apply(lm_head.weight), lm_head.bias)

    lm_head.forward = forward


def _worker(rank, world, port, cases, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        out = {key: _workload(rank, case) for key, case in cases.items()}
        queue.put((rank, out))
        dist.destroy_process_group()
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put((rank, repr(exc)))


@pytest.fixture(scope="module")
def runs():
    """rank -> case -> what the rank measured, every case in one 2-process group."""
    results = run_group(_worker, WORLD, CASES, timeout=600, preload=_PRELOAD)
    for rank, out in results.items():
        assert isinstance(out, dict), f"rank {rank} failed: {out}"
    return results


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The same models as config.json folders memsym reads, by case."""
    out = {}
    for key, case in CASES.items():
        folder = tmp_path_factory.mktemp(key)
        cfg = ({"model_type": "gpt2", "n_embd": H, "n_layer": LAYERS, "n_head": 2,
                "vocab_size": V, "n_positions": POSITIONS} if case.get("arch") == "gpt2" else
               {"model_type": "llama", "hidden_size": H, "intermediate_size": F,
                "num_hidden_layers": LAYERS, "num_attention_heads": 2, "num_key_value_heads": 2,
                "vocab_size": V, "max_position_embeddings": 64,
                "tie_word_embeddings": case["tied"]})
        (folder / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
        out[key] = str(folder)
    return out


def _launch(folder, case):
    fsdp = ["--fsdp"] + ([] if case["fsdp"] is True else [case["fsdp"]])
    return ["estimate", "torchrun", "--nproc_per_node", str(WORLD), "run_clm.py",
            "--model_name_or_path", folder, *fsdp,
            *(["--bf16"] if case["mixed"] == "bf16" else []), "--dtype", case["load"],
            "--per_device_train_batch_size", str(BATCH), "--block_size", str(SEQ),
            "--gradient_accumulation_steps", str(case["gas"]), "--output_dir", "o",
            "--metric", "allocated"]


def _phases(folder, case, rep):
    """memsym's phase transients of the launch's job, evaluated (key -> bytes per phase)."""
    from memsym.job import job
    from memsym.training.estimate import training_values
    from memsym.training.transients import phase_transients

    trn = rep["training"]
    j = job(folder, framework="deepspeed", sharding="fsdp", d=WORLD,
            accelerate_fsdp=trn["accelerate_fsdp"], precision=trn["precision"],
            fsdp_keep_gathered=trn["fsdp_keep_gathered"], micro_batch_size=BATCH,
            num_microbatches=case["gas"], seq_length=SEQ, metric="allocated")
    vals = training_values(j.model, j.layout, j.training)
    return {ph: {term.key: int(term.expr.subs(vals)) for term in terms}
            for ph, terms in phase_transients(j, 0).items()}


@pytest.mark.parametrize("key", list(CASES))
def test_per_rank_states_match_the_launchs_estimate(capsys, runs, checkpoints, key):
    """Sharded parameters, gradients and AdamW moments per rank, exactly memsym's model states
    of the pasted launch: fp32 under --bf16 (the bf16 checkpoint upcast), the weights' dtype
    without it (4 + 4 + 8 or 2 + 2 + 4 bytes over d)."""
    case = CASES[key]
    rep = json_report(capsys, _launch(checkpoints[key], case))
    n = _params(case)
    assert rep["params"] == n
    width = 4 if case["mixed"] != "no" or case["load"] == "float32" else 2
    for out in (runs[rank][key] for rank in range(WORLD)):
        assert out["dtypes"] == [(f"torch.{'float32' if width == 4 else 'bfloat16'}",) * 2]
        assert (out["params"], out["grads"], out["moments"]) == (
            width * n // WORLD, width * n // WORLD, 2 * width * n // WORLD)
        got = rep["bytes"]
        assert (got["weights"], got["gradients"], got["optimizer"]) == (
            out["params"], out["grads"], out["moments"])


def test_gathers_and_reductions_are_in_the_16_bit_dtype(runs):
    """Accelerate's policy gathers and reduces in bf16 (param_dtype = reduce_dtype), where
    torchtitan reduces in fp32: b_u = b_r = 2; a block's reduce-scatter input is the block and
    its output half of it (memsym's N_ll b_r (1 + 1/d))."""
    from memsym.symbols import N_ll, b_r, d
    from memsym.terms.transients import fsdp2_transients

    for key in ("mixed", "plain-tied"):
        allocs = runs[0][key]["allocations"]
        assert {a[2] for a in allocs} == {"torch.bfloat16"}, key
        rs = [a[1] for a in allocs if a[0] == "DefaultReduceScatter"]
        # once per block, in the last micro-batch only (no_sync before it)
        assert rs.count(BLOCK) == rs.count(BLOCK // WORLD) == LAYERS, (key, rs)
        term = fsdp2_transients()["reduce_scatter"]
        assert term.expr.subs({N_ll: BLOCK, b_r: 2, d: WORLD}) == 2 * (BLOCK + BLOCK // WORLD)


def test_groups_gathered_at_the_loss_and_in_the_backward(capsys, runs, checkpoints):
    """Which all-gathers are alive, against memsym's phase terms of each launch.

    * full_shard (untied): at the loss only ``[norm, output]`` (reshard_after_forward=False),
      memsym's forward net of its blocks' term; in the backward that group is resharded, the
      last layer's backward holds two blocks (itself and the prefetched first), the first
      layer's itself and the prefetched embedding (memsym's ``first_block_gathered``);
      between micro-batches every parameter's unsharded bf16 gradient is held (memsym's
      ``accumulated_grads``);
    * a tied embedding: ``[norm, embedding, output]`` gathered at the loss and through the
      whole backward with its unsharded gradients (memsym's ``output_group_gathered`` and
      ``output_grad_unsharded``);
    * shard_grad_op: every parameter gathered at the loss (memsym's ``kept_unsharded``).
    """
    tail = 2 * (V * H + H)            # bf16 [norm, output]; tied: the one matrix and the norm
    for key, case in CASES.items():
        rep = json_report(capsys, _launch(checkpoints[key], case))
        mem = _phases(checkpoints[key], case, rep)
        gathered = {"forward": sum(v for k, v in mem["forward"].items() if k in (
            "unsharded_params", "output_group_gathered", "blocks_gathered_at_the_loss",
            "kept_unsharded", "root_group_gathered"))}
        for out in (runs[rank][key] for rank in range(WORLD)):
            at_loss, grads_at_loss = out["at_loss"]
            assert sum(at_loss.values()) == gathered["forward"], key
            back = out["moments_in_backward"]
            if key == "mixed":
                assert at_loss["tail"] == tail and sum(at_loss.values()) == tail
                assert sum(grads_at_loss.values()) == mem["forward"]["accumulated_grads"] \
                    == 2 * _params(case)
                assert back["layer1"][0]["tail"] == 0
                assert sum(back["layer1"][0].values()) == mem["forward"]["unsharded_params"] \
                    == 2 * 2 * BLOCK
                assert sum(back["layer0"][0].values()) == mem["backward"]["unsharded_params"] \
                    == 2 * (BLOCK + V * H)
            elif key == "plain-tied":
                assert at_loss["tail"] == tail and mem["forward"]["accumulated_grads"] == 0
                for layer in ("layer1", "layer0"):
                    held, grads = back[layer]
                    assert held["tail"] + grads["tail"] == mem["backward"][
                        "output_group_gathered"] + mem["backward"]["output_grad_unsharded"] \
                        == 2 * tail
            elif key == "gpt2":
                # the root keeps the position table gathered at the loss and in the blocks'
                # backward, beside [ln_f, wte, lm_head]: V h + 2h and POSITIONS h, bf16
                assert at_loss["root"] == mem["forward"]["root_group_gathered"] \
                    == 2 * POSITIONS * H
                assert at_loss["tail"] == 2 * (V * H + 2 * H)
                for layer in ("layer1", "layer0"):
                    assert back[layer][0]["root"] == mem["backward"]["root_group_gathered"]
            else:
                assert sum(at_loss.values()) == mem["forward"]["kept_unsharded"] \
                    == 2 * _params(case)


def test_the_step_times_collectives_are_the_ones_torch_issues(capsys, runs, checkpoints):
    """Every collective one Trainer step issues (2 micro-batches under no_sync but the last in
    ``mixed`` and ``shard-grad-op``): the estimate's step-time record lists the same all-gathers
    and reduce-scatters, each buffer and count, sends (d - 1)/d of each buffer and prices each
    collective on its own (the DP seconds, latency steps included).

    By hand for ``mixed`` (bf16, untied, 2 layers): per micro-batch the forward gathers the
    embedding (V h), both blocks and ``[norm, output]`` (V h + h), the backward the blocks and
    the embedding again; the last backward reduce-scatters each group once.
    """
    import collections

    from memsym.hardware import cluster_for, gpu
    from memsym.timing.collectives import collective_time, group_bandwidth

    bw, lat = group_bandwidth("dp", WORLD, cluster_for(gpu("h100")), t=1, c=1, d=WORLD)
    for key, case in CASES.items():
        issued = runs[0][key]["collectives"]
        assert issued == runs[1][key]["collectives"], key
        assert {kind for kind, _ in issued} <= {"all-gather", "reduce-scatter"}, (key, issued)
        rep = json_report(capsys, _launch(checkpoints[key], case) + ["--gpu", "h100"])
        dp = rep["communication"]["dp"]
        assert collections.Counter({(x["kind"], x["buffer_bytes"]): x["count"]
                                    for x in dp["collectives"]}) == collections.Counter(issued)
        assert dp["bytes"] == sum(size for _, size in issued) * (WORLD - 1) // WORLD
        assert dp["seconds"] == pytest.approx(sum(
            float(collective_time(kind, size, WORLD, bw, lat)) for kind, size in issued), rel=1e-12)
        if key == "mixed":
            blocks, embed, tail = 2 * BLOCK, 2 * V * H, 2 * (V * H + H)
            assert sorted(issued) == sorted(
                [("all-gather", embed)] * 4 + [("all-gather", blocks)] * 8
                + [("all-gather", tail)] * 2
                + [("reduce-scatter", embed), ("reduce-scatter", tail)]
                + [("reduce-scatter", blocks)] * 2)
