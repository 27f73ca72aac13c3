"""The step's overlaps as the frameworks default them and as a launch sets them: Megatron-LM's
--overlap-grad-reduce / --overlap-param-gather / --tp-comm-overlap (store_true: off unless
given) with their validate_args rules, DeepSpeed's overlap_comm, torchtitan's FSDP2."""

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers.deepspeed import read_deepspeed_config
from memsym.readers.jobs import deepspeed_job, megatron_job
from memsym.readers.megatron import read_megatron_args
from memsym.timing.step import step_time
from memsym.timing.step_settings import overlap_of

LAUNCH = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
          "--ffn-hidden-size", "14336", "--seq-length", "4096", "--max-position-embeddings",
          "8192", "--micro-batch-size", "1", "--global-batch-size", "128",
          "--tensor-model-parallel-size", "2", "--sequence-parallel", "--bf16",
          "--use-distributed-optimizer", "--swiglu", "--normalization", "RMSNorm",
          "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights",
          "--disable-bias-linear", "--group-query-attention", "--num-query-groups", "8",
          "--vocab-size", "128256", "--world-size", "64"]


def _job(*extra):
    return megatron_job(read_megatron_args(LAUNCH + list(extra)), gpu="h100-80gb")


def test_megatron_flags_reach_the_step_time():
    # without the flags Megatron runs the DP reduce-scatter and all-gather after the
    # backward / before the forward: all of it is exposed; with them only what exceeds the
    # last backward / first forward.  Nothing else in the step changes
    off, on = _job(), _job("--overlap-grad-reduce", "--overlap-param-gather")
    assert (off.training.overlap_grad_reduce, on.training.overlap_grad_reduce) == (False, True)
    assert on.training.overlap_param_gather and not off.training.overlap_param_gather
    st_off = step_time(off.model, off.layout, off.training, "h100-80gb")
    st_on = step_time(on.model, on.layout, on.training, "h100-80gb")
    assert st_off.parts["dp"] > st_on.parts["dp"] >= 0
    assert st_off.total - st_on.total == pytest.approx(st_off.parts["dp"] - st_on.parts["dp"],
                                                       rel=1e-12)
    for key in ("compute", "tp", "bubble", "optimizer"):
        assert st_off.parts[key] == pytest.approx(st_on.parts[key], rel=1e-12)
    # --tp-comm-overlap hides TP communication behind the GEMMs
    tpo = _job("--tp-comm-overlap")
    assert tpo.training.tp_comm_overlap
    assert step_time(tpo.model, tpo.layout, tpo.training, "h100-80gb").parts["tp"] < \
        st_off.parts["tp"]


def test_megatron_validate_args_rules():
    with pytest.raises(InvalidValueError, match="needs --overlap-grad-reduce"):
        job("llama3-8b", d=8, overlap_param_gather=True)
    with pytest.raises(InvalidValueError, match="distributed optimizer"):
        job("llama3-8b", d=8, sharding="ddp", overlap_grad_reduce=True, overlap_param_gather=True)
    with pytest.raises(InvalidValueError, match="--sequence-parallel"):
        job("llama3-8b", t=2, d=4, tp_comm_overlap=True)
    with pytest.raises(InvalidValueError, match="not a torchtitan option"):
        job("llama3-8b", d=8, framework="torchtitan", sharding="fsdp", tp_comm_overlap=True)
    with pytest.raises(InvalidValueError, match="true or false"):
        job("llama3-8b", d=8, overlap_grad_reduce="yes")
    with pytest.raises(InvalidValueError, match="--overlap-grad-reduce"):
        _job("--overlap-param-gather")          # the reader applies the same rule


def test_framework_defaults():
    # Megatron: off; torchtitan's FSDP2 / DDP: on; DeepSpeed: overlap_comm, on for ZeRO-3 only
    assert not overlap_of(job("llama3-8b", d=8).training).grad_reduce
    for shard in ("fsdp", "ddp"):
        o = overlap_of(job("llama3-8b", d=8, framework="torchtitan", sharding=shard).training)
        assert o.grad_reduce and o.param_gather
    for shard, on in (("zero1", False), ("zero2", False), ("zero3", True)):
        o = overlap_of(job("llama3-8b", d=8, framework="deepspeed", sharding=shard).training)
        assert (o.grad_reduce, o.param_gather) == (on, on)


def test_deepspeed_overlap_comm_is_read():
    # overlap_comm overlaps the gradient reduction; only ZeRO-3 prefetches the parameter
    # all-gather (ZeRO-1/2 gather the updated parameters inside the step)
    for stage in (2, 3):
        for value in (True, False):
            cfg = read_deepspeed_config({"train_micro_batch_size_per_gpu": 1,
                                         "train_batch_size": 8, "bf16": {"enabled": True},
                                         "zero_optimization": {"stage": stage,
                                                               "overlap_comm": value}},
                                        world_size=8)
            o = overlap_of(deepspeed_job(cfg, "llama3-8b", seq_length=2048).training)
            assert (o.grad_reduce, o.param_gather) == (value, value and stage == 3)


def test_tp_comm_overlap_holds_transformer_engines_userbuffers():
    # initialize_ub(shape=[s b / c, h]): one buffer of that shape per overlapped GEMM, 12 by
    # default; under FP8 the 8 all-gather inputs are 1-byte, the 4 reduce-scatter outputs
    # 2-byte.  By hand for this command (s 4096, b 1, c 1, h 4096, bf16): 12 x 4096 x 4096 x
    # 2 bytes = 384 MiB, outside PyTorch's allocator (no fragmentation margin on it)
    from memsym.training import job_memory

    off, on = _job(), _job("--tp-comm-overlap")
    a, b = job_memory(off), job_memory(on)
    assert b.grouped()["tp_comm_userbuffers"] == 12 * 4096 * 4096 * 2 == 384 * 2**20
    assert b.bytes_total - a.bytes_total == 384 * 2**20
    assert "tp_comm_userbuffers" not in a.grouped()
    assert sum(v for k, v in b.grouped().items() if k != "total") == b.grouped()["total"]
    fp8 = job("llama3-70b", t=4, d=2, sequence_parallel=True, seq_length=4096, precision="fp8",
              global_batch_size=32, tp_comm_overlap=True)
    assert job_memory(fp8).grouped()["tp_comm_userbuffers"] == (8 * 1 + 4 * 2) * 4096 * 8192


def test_expert_and_p2p_overlaps():
    # --overlap-moe-expert-parallel-comm: TransformerConfig's requirements, then the EP
    # all-to-all is hidden (Overlap.ep_a2a); --no-overlap-p2p-communication exposes the
    # interleaved p2p and makes interleaving need PP > 2 (arguments.py)
    kw = dict(e=8, d=8, seq_length=4096, global_batch_size=64)
    j = job("mixtral-8x7b", overlap_moe_expert_parallel_comm=True, **kw)
    assert overlap_of(j.training).ep_a2a
    on = step_time(j.model, j.layout, j.training, "h100-80gb")
    off = step_time(j.model, j.layout, job("mixtral-8x7b", **kw).training, "h100-80gb")
    assert on.parts["ep"] < off.parts["ep"]
    with pytest.raises(InvalidValueError, match="EP > 1"):
        job("mixtral-8x7b", d=8, overlap_moe_expert_parallel_comm=True)
    with pytest.raises(InvalidValueError, match="virtual-pipeline"):
        job("mixtral-8x7b", e=8, p=2, d=4, overlap_moe_expert_parallel_comm=True)
    with pytest.raises(InvalidValueError, match="full recomputation"):
        job("mixtral-8x7b", e=8, d=8, recompute="full", overlap_moe_expert_parallel_comm=True)
    with pytest.raises(InvalidValueError, match="> 2 with --no-overlap-p2p"):
        job("llama3-8b", p=2, v=2, d=4, overlap_p2p_comm=False)
    assert not overlap_of(job("llama3-8b", p=4, v=2, d=2, overlap_p2p_comm=False).training).pp_p2p
    m = _job("--pipeline-model-parallel-size", "4", "--num-layers-per-virtual-pipeline-stage",
             "4", "--no-overlap-p2p-communication")
    assert m.training.overlap_p2p_comm is False


def test_deferred_embedding_wgrad_keeps_the_output_layers_tensors_on_the_last_stage():
    # Megatron-core: with --defer-embedding-wgrad-compute the output layer (ColumnParallel
    # Linear) appends its input to embedding_activation_buffer in forward and the logits'
    # gradient to grad_output_buffer in backward while fewer than --wgrad-deferral-limit are
    # held (layers.py), until finish_embedding_wgrad_compute drains them at the flush: per
    # micro-batch the sequence-parallel input s b h / t and the gradient s b V / t, 16-bit.
    # PP 4 x TP 2 x DP 8: 128 / 8 = 16 micro-batches; limit 5 keeps 5, limit 0 all 16
    from memsym.symbols import m
    from memsym.training import phase_transients, training_values

    base = ["--pipeline-model-parallel-size", "4"]
    off = _job(*base)
    for extra, n in (([], 16), (["--wgrad-deferral-limit", "5"], 5)):
        j = _job(*base, "--defer-embedding-wgrad-compute", *extra)
        assert j.training.defer_embedding_wgrad_compute
        x, lay, trn = j.model, j.layout, j.training
        for stage in range(4):
            ph = phase_transients(j, stage)
            keys = {ph_: [t_.key for t_ in ph[ph_]] for ph_ in ph}
            held = [ph_ for ph_, k in keys.items() if "deferred_wgrad_buffers" in k]
            assert held == (["forward", "loss-backward", "backward"] if stage == 3 else []), \
                (stage, keys)
        vals = {**training_values(x, lay, trn), m: j.m}
        inp, grad = 2 * 4096 * 4096 // 2, 2 * 4096 * 128256 // 2     # bf16, per micro-batch
        per_mb = inp + grad
        held = {ph_: next(t_ for t_ in terms if t_.key == "deferred_wgrad_buffers").expr.subs(vals)
                for ph_, terms in phase_transients(j, 3).items() if ph_ != "optimizer"}
        # at the last deferred backward all n; before it (the last micro-batch's forward and
        # its loss's backward, whose logits gradient is the loss's own term) one gradient fewer
        assert held["backward"] == n * per_mb
        assert held["forward"] == held["loss-backward"] == n * inp + min(n, 16 - 1) * grad
    # the last stage's total rises by them (and its allowance share); the first's does not
    from memsym.training import training_memory

    on = _job(*base, "--defer-embedding-wgrad-compute")
    tot = {name: [float(x_) for x_ in training_memory(j.model, j.layout, j.training).stage_bytes]
           for name, j in (("off", off), ("on", on))}
    assert tot["on"][0] == tot["off"][0] and tot["on"][-1] >= tot["off"][-1] + 16 * per_mb


def test_deferred_embedding_wgrad_rules():
    # ModelParallelConfig.__post_init__: no deferral without pipeline parallelism; a Megatron
    # flag, not torchtitan's; the limit a whole number >= 0
    with pytest.raises(InvalidValueError, match="needs pipeline parallelism"):
        _job("--defer-embedding-wgrad-compute")
    with pytest.raises(InvalidValueError, match="not a torchtitan option"):
        job("llama3-8b", p=2, d=4, seq_length=4096, global_batch_size=64,
            framework="torchtitan", defer_embedding_wgrad_compute=True)
    with pytest.raises(InvalidValueError, match="wgrad_deferral_limit"):
        job("llama3-8b", p=2, seq_length=4096, global_batch_size=64, wgrad_deferral_limit=-1)
