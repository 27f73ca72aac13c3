"""PEFT's LoRA and DoRA activations (memsym.terms.peft_lora) in the job, by hand, without torch.

tests/test_peft_activations.py measures them on transformers' layers; here the cases it cannot
run (bitsandbytes' 4-bit base) and the refusals.  Sources: peft v0.20.0 (line numbers of the
installed release's files).  Bytes per layer and micro-batch.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.job import Training, job
from memsym.model import preset
from memsym.model.lora_counts import lora_layer_adapters
from memsym.symbols import lookup
from memsym.training.layer_model import layer_model_of

#: A Llama-style shape: tau = s b = 2048 tokens, h = 256 (4 heads of 64, 4 KV heads), f = 512.
SHAPE = dict(s=1024, b=2, c=1, t=1, h=256, a=4, g=4, d_h=64, f=512)
TAU, H, F = 2048, 256, 512


def _per_layer(**adapters) -> int:
    training = Training(seq_length=1024, framework="deepspeed", precision=adapters.pop(
        "precision", "bf16"), dropout=False, lora_targets=("q", "v"), lora_rank=16, **adapters)
    expr = layer_model_of(preset("llama3-8b"), False, training, "none")[0](False)
    return int(expr.subs({lookup(k): v for k, v in SHAPE.items()}))


def test_qlora_under_autocast_keeps_the_norm_output_itself_without_dropout():
    """PEFT's lora.bnb.Linear4bit casts x to the adapters' fp32 only outside autocast
    (``requires_conversion = not torch.is_autocast_enabled()``, bnb.py:543-546), so q's and
    v's lora_A keep the bf16 norm output itself, one storage 2 tau h, where lora.Linear
    (layer.py:1056) keeps autocast's bf16 cast of an fp32 copy, one per adapter: 2 x 2 tau h."""
    lora = _per_layer(finetune="lora")
    qlora = _per_layer(finetune="qlora")
    assert lora - qlora == 2 * 2 * TAU * H - 2 * TAU * H
    # with dropout both keep their own dropped copies: the same count
    assert _per_layer(finetune="lora", lora_dropout=True) == _per_layer(finetune="qlora",
                                                                         lora_dropout=True)


def test_an_fp32_job_without_dropout_shares_the_groups_input():
    """fp32 adapters on fp32 weights: _cast_input_dtype returns x (tuners_utils.py:1790), so
    lora_A keeps the norm output the frozen q/v would not: memsym keeps qkv_input and drops
    mlp_input and fc2_input (frozen gate/up/down keep no input) and the norms' normalised
    tensors; the adapters add lora_A's outputs 4 tau r each.  Against full training the
    change is -(4 x 2 tau h) for the two norms' 4-byte tensors, -4 tau h, -4 tau f, +2 x 4 tau r."""
    full = Training(seq_length=1024, framework="deepspeed", precision="fp32", dropout=False)
    whole = layer_model_of(preset("llama3-8b"), False, full, "none")[0](False)
    whole = int(whole.subs({lookup(k): v for k, v in SHAPE.items()}))
    lora = _per_layer(finetune="lora", precision="fp32")
    assert lora - whole == -2 * 4 * TAU * H - 4 * TAU * H - 4 * TAU * F + 2 * 4 * TAU * 16


@pytest.mark.parametrize("fields, said", [
    (dict(framework="megatron", finetune="lora", lora_dropout=True), "PEFT's"),
    (dict(framework="torchtitan", finetune="lora", dora=True), "PEFT's"),
    (dict(framework="deepspeed", finetune="qlora", dora=True), "dora with QLoRA"),
    (dict(framework="deepspeed", lora_dropout=True), "give finetune lora"),
    (dict(framework="deepspeed", finetune="lora", dora="yes"), "True or False"),
])
def test_peft_options_elsewhere_are_refused_in_one_line(fields, said):
    with pytest.raises(InvalidValueError) as err:
        job("llama2-7b", world_size=8, seq_length=1024, micro_batch_size=1,
            global_batch_size=8, **fields)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_dora_is_peft_only():
    """DoRA is PEFT's lora.Linear variant: Megatron's fused modules and transformers 5's
    fused MoE experts (PEFT's ParamWrapper) take none."""
    with pytest.raises(InvalidValueError, match="DoRA"):
        lora_layer_adapters(preset("llama3-8b"), 8, "all", fused=True, dora=True)
    with pytest.raises(InvalidValueError, match="DoRA"):
        lora_layer_adapters(preset("mixtral-8x7b"), 8, ("gate", "up"), moe=True, dora=True)
    # attention adapters of an MoE layer are nn.Linear ones: q (h -> h) magnitudes h
    got = lora_layer_adapters(preset("mixtral-8x7b"), 8, ("q",), moe=True, dora=True)["tp"]
    assert got == 8 * (4096 + 4096) + 4096
