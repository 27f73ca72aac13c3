"""FP8 under Megatron-FSDP (issue 30): bytes counted by hand from the framework's buffers.

Megatron-LM 2a75ac12c5 (Megatron-Bridge 067f987df0's pin), ``core/distributed/fsdp/src/
megatron_fsdp/param_and_grad_buffer.py``: with ``fp8_param_gather`` Transformer Engine's
linear weights are FP8 tensors (2804 ``init_param_with_fp8``); their parameter group's
``model_weight_buffer`` is uint8 (2632), every other group's is the parameter's dtype (1798,
bf16); the ``main_weight_buffer`` is fp32 (``main_params_dtype``), the ``main_grad_buffer``
bf16 for an FP8 group (2322) and bf16 for a bf16 group under ``grad_reduce_in_fp32=False``;
Adam keeps two fp32 moments on the main weights.  Under ``optim_grads_params`` each buffer
is sharded over the data-parallel group (the buffers' padding to the bucket alignment is
neglected here and in memsym).  With ``fsdp_double_buffer`` two layers' model weights are
gathered at once (2526 ``UB_BUFFER_NUM = 2``), one byte per FP8 weight.

The model is Llama 3 8B (h 4096, 32 layers, FFN 14336, 32 heads, 8 KV heads, vocabulary
128256, untied); every count below is written from those numbers, not from memsym.
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
from memsym.training import job_memory, phase_transients, stage_counts

H, L, F, HEADS, KV, V = 4096, 32, 14336, 32, 8, 128256
D_HEAD = H // HEADS
#: One layer's linear weights: QKV, the attention's output projection, FC1 (gate and up),
#: FC2.
LINEAR = H * (H + 2 * KV * D_HEAD) + H * H + H * 2 * F + F * H
#: One layer's two RMSNorm weights.
NORMS = 2 * H
#: The whole model: the layers, the embedding, the untied output layer and the final norm.
TOTAL = L * (LINEAR + NORMS) + 2 * V * H + H
DP = 8
S = 1024


def _job(precision="fp8", **kw):
    # no grad_dtype for fp8: an FP8 group's main grads are bf16 by default (2322), Megatron-FSDP
    # reads no grad_reduce_in_fp32
    extra = {"fp8_param_gather": True} if precision == "fp8" else {"grad_dtype": "bf16"}
    return job("llama3-8b", d=DP, sharding="fsdp", precision=precision, seq_length=S,
               micro_batch_size=1, **extra, **kw)


def test_the_hand_counts_are_llama3_8b():
    # Meta's 8.03 B parameters; 218.1 M in one layer's linear weights
    assert TOTAL == 8_030_261_248 and LINEAR == 218_103_808


def test_sharded_buffers_by_hand():
    """optim_grads_params, d = 8: fp32 main weights 4 B, model weights 1 B (FP8 linears) or
    2 B (bf16 embeddings, norms, output layer), bf16 main grads 2 B, Adam 8 B, all / d."""
    states = job_memory(_job(), stage=0).grouped()
    main_weights = 4 * TOTAL // DP
    model_weights = (1 * L * LINEAR + 2 * (TOTAL - L * LINEAR)) // DP
    main_grads = 2 * TOTAL // DP
    adam = 8 * TOTAL // DP
    assert states["weights"] == main_weights
    assert states["fp8_weights"] == model_weights
    assert states["gradients"] == main_grads
    assert states["optimizer"] == adam
    # 16.06 GB at d = 1 for 8.03 B parameters: 15 B per linear weight, 16 B per other one
    assert main_weights + model_weights + main_grads + adam == \
        (15 * L * LINEAR + 16 * (TOTAL - L * LINEAR)) // DP


def test_a_megatron_lm_command_reads_the_same_buffers():
    """--use-megatron-fsdp --fp8-format hybrid --fp8-param-gather: the same four buffers."""
    argv = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
            "--group-query-attention --num-query-groups 8 --seq-length 1024 "
            "--max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 64 --bf16 "
            "--fp8-format hybrid --fp8-param-gather --use-megatron-fsdp --swiglu "
            "--normalization RMSNorm --untie-embeddings-and-output-weights --vocab-size 128256 "
            "--position-embedding-type rope --disable-bias-linear").split()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["estimate", *argv, "--world-size", str(DP), "--json"]) == 0
    got = json.loads(out.getvalue())["bytes"]
    assert (got["weights"], got["fp8_weights"], got["gradients"], got["optimizer"]) == (
        4 * TOTAL // DP, (L * LINEAR + 2 * (TOTAL - L * LINEAR)) // DP, 2 * TOTAL // DP,
        8 * TOTAL // DP)


def test_two_layers_gathered_in_fp8():
    """fsdp_double_buffer: the layer computing and the one prefetched, one byte per weight
    (bf16 Megatron-FSDP gathers two bytes)."""
    for precision, width in (("fp8", 1), ("bf16", 2)):
        j = _job(precision)
        counts = stage_counts(j, 0)
        for phase in ("forward", "loss-backward", "backward"):
            gathered = [term for term in phase_transients(j, 0)[phase]
                        if term.key == "unsharded_params"]
            assert len(gathered) == 1
            assert gathered[0].evaluate(counts) == 2 * (LINEAR + NORMS) * width


def test_fp8_saved_inputs_of_the_linears():
    """Transformer Engine saves each linear's input quantized (1 B for 2): the QKV and FC1
    inputs (the norms' outputs, h each) and the FC2 input (f); the output projection's FP8
    input is a copy beside the attention output the attention keeps in bf16 (+h).  Per token
    and layer: -(h + h + f) + h = -(h + f) bytes."""
    acts = {}
    for precision in ("bf16", "fp8"):
        e = job_memory(_job(precision), stage=0)
        acts[precision] = {t.key: t.evaluate(e.values) for t in e.total.terms}["layer_activations"]
    assert acts["bf16"] - acts["fp8"] == L * S * (H + F)


def test_the_bridge_recipe_is_read_as_fp8_parameters():
    """Bridge's llama3_70b_pretrain_64gpu_gb300_fp8cs_config: _perf_precision("fp8_cs")
    (bf16_with_fp8_current_scaling_mixed, fp8_param_gather True) under Megatron-FSDP
    optim_grads_params."""
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "llama3_70b_pretrain_64gpu_gb300_fp8cs_config"))
    assert opts["sharding"] == "fsdp" and opts["precision"] == "fp8"
    # no grad_dtype: Megatron-FSDP's main grads are its default (auto: bf16 for an FP8 group,
    # 2322), not the recipe's grad_reduce_in_fp32, which Megatron-FSDP does not read
    assert opts["fp8_param_gather"] is True and "grad_dtype" not in opts
    assert opts["megatron_fsdp"] == "optim_grads_params"
    assert any("FP8 parameters" in n for n in notes)


@pytest.mark.parametrize("overrides, why", [
    (["mixed_precision.fp8_param_gather=false"], "without fp8_param_gather"),
    (["mixed_precision=bf16_with_mxfp8_mixed"], "MXFP8"),
])
def test_what_is_not_modelled_is_counted_as_bf16_in_a_note(overrides, why):
    """bf16 parameters with FP8 GEMMs, and MXFP8's second (columnwise) weight buffer
    (param_and_grad_buffer.py:2634-2681), are not modelled: counted as bf16, said."""
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "llama3_70b_pretrain_64gpu_gb300_fp8cs_config", overrides))
    assert opts["precision"] == "bf16" and "fp8_param_gather" not in opts
    assert any(why in n and "bf16" in n for n in notes)


def test_fp8_under_fsdp_is_megatron_fsdp_only():
    with pytest.raises(InvalidValueError, match="fp8_param_gather"):
        job("llama3-8b", d=DP, sharding="fsdp", precision="fp8", seq_length=S,
            micro_batch_size=1)
    with pytest.raises(InvalidValueError, match="Megatron-FSDP"):
        job("llama3-8b", d=DP, sharding="fsdp", precision="fp8", fp8_param_gather=True,
            framework="torchtitan", seq_length=S, micro_batch_size=1)


def test_the_step_casts_the_bf16_grads_to_fp32():
    """update_main_grads (param_and_grad_buffer.py:3381 at d98e8a64dd): the bf16 main-grad
    shard cast to the fp32 main weights' dtype for the optimizer, 4 B per parameter / d, in
    the step only."""
    from memsym.training.transients import states_and_transients
    j = _job()
    values = job_memory(j, stage=0).values
    steady, phases = states_and_transients(j, 0)
    assert "main_gradients" not in {t.key for t in steady}
    cast = [t.evaluate(values) for t in phases["optimizer"] if t.key == "main_gradients"]
    assert cast == [4 * TOTAL // DP]
