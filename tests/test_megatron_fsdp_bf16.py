"""bf16 under Megatron-FSDP (issue 30): bytes counted by hand from the framework's buffers.

Megatron-LM d98e8a64dd (the same code at 2a75ac12c5, Megatron-Bridge 067f987df0's pin),
``core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py``:
``_init_each_parameter_group_buffers`` (2324-2345) shards, per strategy, the
``model_weight_buffer`` (the parameters' dtype, bf16 after ``Float16Module``; none under
``no_shard``, where the module keeps its own bf16 parameters: 2652), the fp32
``main_weight_buffer`` (``main_params_dtype``, 2694; Adam's two fp32 moments live on its
shards) and the ``main_grad_buffer`` (2713; its dtype ``megatron_fsdp_main_grads_dtype``, by
default the parameters' bf16, 2313-2322: Megatron-FSDP never reads ``grad_reduce_in_fp32``).

=====================  ==============  ============  ==========  =============
strategy               model weights   main grads    main wts    Adam
=====================  ==============  ============  ==========  =============
no_shard               2 Ψ             2 Ψ           4 Ψ         8 Ψ
optim                  2 Ψ             2 Ψ           4 Ψ/d       8 Ψ/d
optim_grads            2 Ψ             2 Ψ/d         4 Ψ/d       8 Ψ/d
optim_grads_params     2 Ψ/d           2 Ψ/d         4 Ψ/d       8 Ψ/d
=====================  ==============  ============  ==========  =============

At the step ``update_main_grads`` (3351-3381) casts the optimizer's gradient (the shard, or
the whole buffer under ``no_shard``) to the fp32 main weights' dtype: 4 B per parameter of it,
freed by the next ``zero_grad`` (3209).  A sharded buffer is gathered (weights) or reduced
(grads) through an unsharded bucket per layer: two gathered layers (the one computing and the
one prefetched), two gradient buckets (the one filled and the one reduce-scattering,
3924-3953).  With ``fsdp_double_buffer`` those buckets are two persistent pools of each
(2524-2576, ``FixedPoolAllocator``, ``get_global_memory_buffer`` 857), held in the optimizer
step too; without it they are freed on release (``StorageResizeBasedBucketAllocator``, 527).

The model is Llama 3 8B (h 4096, 32 layers, FFN 14336, 32 heads, 8 KV heads, vocabulary
128256, untied) at d = 8; every count below is written from those numbers, not from memsym.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.training import job_memory
from memsym.training.transients import states_and_transients

H, L, F, HEADS, KV, V = 4096, 32, 14336, 32, 8, 128256
D_HEAD = H // HEADS
#: One layer: QKV, the attention's output projection, FC1 (gate and up), FC2, two RMSNorms.
LAYER = H * (H + 2 * KV * D_HEAD) + H * H + H * 2 * F + F * H + 2 * H
#: The whole model: the layers, the embedding, the untied output layer and the final norm.
TOTAL = L * LAYER + 2 * V * H + H
DP = 8
SCHEMES = {"no_shard": "ddp", "optim": "distributed-optimizer", "optim_grads": "zero2",
           "optim_grads_params": "fsdp"}


def _job(strategy, **kw):
    return job("llama3-8b", d=DP, sharding=SCHEMES[strategy], megatron_fsdp=strategy,
               seq_length=1024, micro_batch_size=1, **kw)


def _counted(strategy, **kw):
    """(steady model-state bytes by key, phase -> {key: bytes}) of stage 0."""
    j = _job(strategy, **kw)
    counts = job_memory(j, stage=0).values
    steady, phases = states_and_transients(j, 0)
    return ({t.key: t.evaluate(counts) for t in steady},
            {ph: {t.key: t.evaluate(counts) for t in terms} for ph, terms in phases.items()})


def test_the_hand_counts_are_llama3_8b():
    assert TOTAL == 8_030_261_248 and LAYER == 218_112_000 and TOTAL % DP == 0


@pytest.mark.parametrize("strategy, weights, grads, main_and_adam, cast", [
    ("no_shard", 2 * TOTAL, 2 * TOTAL, 12 * TOTAL, 4 * TOTAL),
    ("optim", 2 * TOTAL, 2 * TOTAL, 12 * TOTAL // DP, 4 * TOTAL // DP),
    ("optim_grads", 2 * TOTAL, 2 * TOTAL // DP, 12 * TOTAL // DP, 4 * TOTAL // DP),
    ("optim_grads_params", 2 * TOTAL // DP, 2 * TOTAL // DP, 12 * TOTAL // DP, 4 * TOTAL // DP),
])
def test_buffers_by_hand(strategy, weights, grads, main_and_adam, cast):
    """The table above, bf16 main grads by default; the fp32 cast only in the step."""
    steady, phases = _counted(strategy)
    assert steady == {"weights": weights, "gradients": grads, "optimizer": main_and_adam}
    assert phases["optimizer"]["main_gradients"] == cast
    assert all("main_gradients" not in phases[ph] for ph in ("forward", "backward"))


def test_fp32_main_grads_make_no_cast():
    """--megatron-fsdp-main-grads-dtype fp32: a 4-byte main_grad_buffer, stepped on as it is."""
    steady, phases = _counted("optim_grads_params", grad_dtype="fp32")
    assert steady["gradients"] == 4 * TOTAL // DP
    assert "main_gradients" not in phases["optimizer"]


@pytest.mark.parametrize("strategy, gathered, grad_buckets", [
    ("no_shard", 0, 0), ("optim", 0, 0),
    ("optim_grads", 0, 2 * LAYER * 2),
    ("optim_grads_params", 2 * LAYER * 2, 2 * LAYER * 2),
])
def test_buckets_by_hand(strategy, gathered, grad_buckets):
    """Two gathered bf16 layers where the weights are sharded, two bf16 gradient buckets where
    the grads are; freed on release without the double buffer, held through the step with
    it."""
    for double in (False, True):
        _, phases = _counted(strategy, fsdp_double_buffer=double)
        fwd, bwd, step = (phases[ph] for ph in ("forward", "backward", "optimizer"))
        assert bwd.get("unsharded_params", 0) == gathered
        assert bwd.get("unsharded_grads", 0) == grad_buckets
        assert fwd.get("unsharded_params", 0) == gathered
        assert fwd.get("unsharded_grads", 0) == (grad_buckets if double else 0)
        assert step.get("unsharded_params", 0) + step.get("unsharded_grads", 0) == (
            gathered + grad_buckets if double else 0)
        # Megatron's FusedAdam steps in chunks: no torch AdamW temporary (FSDP2's)
        assert not any(key.startswith("adam") or "step_temp" in key for key in step)


_ARGV = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
         "--group-query-attention --num-query-groups 8 --seq-length 1024 "
         "--max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 64 --bf16 "
         "--use-megatron-fsdp --swiglu --normalization RMSNorm "
         "--untie-embeddings-and-output-weights --vocab-size 128256 "
         "--position-embedding-type rope --disable-bias-linear").split()


def _estimate(*extra):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["estimate", *_ARGV, *extra, "--world-size", str(DP), "--json"]) == 0
    return json.loads(out.getvalue())["bytes"]


def test_a_megatron_lm_command_reads_the_buffers():
    """The command line's default optim_grads_params; --bf16 makes Megatron's DDP accumulate
    in fp32, Megatron-FSDP's main grads stay bf16."""
    got = _estimate()
    assert (got["weights"], got["gradients"], got["optimizer"]) == (
        2 * TOTAL // DP, 2 * TOTAL // DP, 12 * TOTAL // DP)
    got = _estimate("--data-parallel-sharding-strategy", "optim_grads",
                    "--megatron-fsdp-main-grads-dtype", "fp32")
    assert (got["weights"], got["gradients"], got["optimizer"]) == (
        2 * TOTAL, 4 * TOTAL // DP, 12 * TOTAL // DP)


def test_the_double_buffer_flags():
    """--fsdp-double-buffer, and --use-nccl-ub which sets it (arguments.py:1173-1177)."""
    base, double, ub = (_estimate(*x) for x in ((), ("--fsdp-double-buffer",),
                                                ("--use-nccl-ub",)))
    assert double == ub != base


def test_a_bridge_recipe_is_read_as_megatron_fsdp():
    """llama3_70b_pretrain_64gpu_gb300_bf16_config: optim_grads_params, fsdp_double_buffer
    and nccl_ub, grad_reduce_in_fp32 False (which Megatron-FSDP does not read)."""
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "llama3_70b_pretrain_64gpu_gb300_bf16_config"))
    assert (opts["sharding"], opts["megatron_fsdp"], opts["fsdp_double_buffer"]) == (
        "fsdp", "optim_grads_params", True)
    assert "grad_dtype" not in opts
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        "llama3_70b_pretrain_64gpu_gb300_bf16_config",
        ["ddp.megatron_fsdp_main_grads_dtype=fp32", "ddp.fsdp_double_buffer=false",
         "ddp.nccl_ub=false"]))
    assert opts["grad_dtype"] == "fp32" and opts["fsdp_double_buffer"] is False


def test_refusals():
    with pytest.raises(InvalidValueError, match="shards as sharding fsdp"):
        job("llama3-8b", d=DP, sharding="zero2", megatron_fsdp="optim_grads_params")
    with pytest.raises(InvalidValueError, match="fsdp_double_buffer"):
        job("llama3-8b", d=DP, sharding="fsdp", fsdp_double_buffer=True)
    with pytest.raises(InvalidValueError, match="Megatron-LM"):
        job("llama3-8b", d=DP, sharding="fsdp", megatron_fsdp="optim_grads_params",
            framework="torchtitan")


def test_the_breakdown_names_what_the_step_holds():
    """The estimate's optimizer phase names the fp32 cast and, with the double buffer, the
    two pools (JSON ``optimizer_step_bytes``; the text report's "of which")."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["estimate", *_ARGV, "--fsdp-double-buffer", "--world-size", str(DP),
                     "--json"]) == 0
    step = json.loads(out.getvalue())["optimizer_step_bytes"]
    assert step == {"main_gradients": 4 * TOTAL // DP, "unsharded_params": 2 * LAYER * 2,
                    "unsharded_grads": 2 * LAYER * 2}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["estimate", *_ARGV, "--fsdp-double-buffer", "--world-size", str(DP)]) == 0
    assert "of which main gradients 4.015 GB, unsharded params 0.872 GB" in \
        " ".join(out.getvalue().split())


def test_the_precision_aware_optimizer_takes_the_grads_decoupled():
    """--use-precision-aware-optimizer sets megatron_fsdp_use_decoupled_grad (training.py:2650;
    Bridge config.py:1087-1092): the optimizer reads the bf16 shard, no fp32 cast (3377)."""
    steady, phases = _counted("optim_grads_params", precision_aware=True)
    assert steady == {"weights": 2 * TOTAL // DP, "gradients": 2 * TOTAL // DP,
                      "optimizer": 12 * TOTAL // DP}
    assert "main_gradients" not in phases["optimizer"]
