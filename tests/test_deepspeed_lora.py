"""PEFT's LoRA trained by DeepSpeed's ZeRO engine (memsym.training.model_states,
``_deepspeed_adapter_terms``): memsym's options, a DeepSpeed config beside them, and TRL's
``--use_peft --deepspeed``, counted by hand on the two-layer Llama of tests/tiny_llama.py.

The sources: DeepSpeed edaa72212 ``runtime/engine.py:1537-1544`` (``_cast_module_mixed_precision``:
every floating-point parameter, the adapters PEFT made fp32 included, cast to the config's
dtype) and transformers 5.25.0 ``integrations/deepspeed.py:671`` (the optimizer gets the
parameters that require a gradient: the adapters); ZeRO's widths as for any trained model
(:func:`memsym.terms.model_state.model_state`: stage 1 shards the optimizer's 4 + 8 bytes of
fp32 master and Adam moments, stage 2 the 16-bit gradients too, stage 3 the weights too, every
parameter, the frozen base included).
"""

from __future__ import annotations

import json

import pytest

from in_process import json_report
from tiny_llama import F, H, LAYERS, TINY, tiny_llama

#: LoRA rank 8 on every linear: r (in + out) per matrix; q, k, v, o are h x h (4 heads of 64),
#: gate, up h -> f, down f -> h.
N_A = LAYERS * 8 * (4 * (H + H) + 3 * (H + F))
#: The frozen linear weights and the rest of the model (embeddings, norms).
N_Q = LAYERS * (4 * H * H + 3 * H * F)
N_U = TINY - N_Q
D = 4


@pytest.fixture
def tiny(tmp_path):
    return tiny_llama(tmp_path, dtype="bfloat16")


def _states(rep) -> tuple:
    """(frozen base, adapters, their gradients, their optimizer states) [bytes]: a 16-bit base
    keeps its embeddings and norms in its own dtype, so they are in the one ``weights`` row."""
    got = rep["bytes"]
    assert "weights_unquantized" not in got
    return tuple(got.get(k) for k in ("weights", "adapter_weights", "gradients", "optimizer"))


@pytest.mark.parametrize("stage, by_hand", [
    # base whole (2 B), adapters bf16 whole, bf16 gradients whole, (4 + 8) / d optimizer
    ("zero1", (2 * (N_Q + N_U), 2 * N_A, 2 * N_A, 12 * N_A // D)),
    # ZeRO-2 partitions the adapters' gradients
    ("zero2", (2 * (N_Q + N_U), 2 * N_A, 2 * N_A // D, 12 * N_A // D)),
    # ZeRO-3 partitions every parameter, the frozen base included
    ("zero3", (2 * (N_Q + N_U) // D, 2 * N_A // D, 2 * N_A // D, 12 * N_A // D)),
])
def test_zero_shards_the_adapters_as_a_trained_models_states(capsys, tiny, stage, by_hand):
    assert N_A == 69_632 and N_A % D == 0 and N_Q % D == 0 and N_U % D == 0
    rep = json_report(capsys, ["estimate", tiny, "--framework", "deepspeed", "--sharding", stage,
                               "--world-size", str(D), "--micro-batch-size", "2", "--precision",
                               "bf16", "--seq-length", "128", "--finetune", "lora",
                               "--lora-rank", "8", "--gpu", "h100-80gb"])
    assert _states(rep) == by_hand


def test_a_deepspeed_config_takes_the_adapters_beside_it(capsys, tiny, tmp_path):
    """The config says ZeRO-3 and bf16; the adapters are the script's (no config key says
    them): the same job as memsym's own options."""
    config = tmp_path / "ds_z3.json"
    config.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto", "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3}}), encoding="utf-8")
    lora = ["--finetune", "lora", "--lora-rank", "8", "--gpu", "h100-80gb"]
    rep = json_report(capsys, ["estimate", tiny, "--deepspeed-config", str(config),
                               "--world-size", str(D), "--micro-batch-size", "2",
                               "--num-microbatches", "1", "--precision", "bf16",
                               "--seq-length", "128", *lora])
    assert _states(rep) == (2 * (N_Q + N_U) // D, 2 * N_A // D, 2 * N_A // D, 12 * N_A // D)


def test_trls_use_peft_under_deepspeed_is_read(capsys, tiny, tmp_path):
    """``trl sft --use_peft --deepspeed ds.json``: TRL's LoRA (rank 16 on PEFT's default llama
    targets q_proj, v_proj: constants.py:85) trained by ZeRO-2 on 2 processes."""
    config = tmp_path / "ds_z2.json"
    config.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto", "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 2}}), encoding="utf-8")
    rep = json_report(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                               "--model_name_or_path", tiny, "--dataset_name", "x",
                               "--per_device_train_batch_size", "2", "--loss_type", "nll",
                               "--dtype", "bfloat16", "--use_peft", "--deepspeed", str(config)])
    n_a = LAYERS * 16 * ((H + 4 * 64) + (H + 4 * 64))
    assert _states(rep) == (2 * (N_Q + N_U), 2 * n_a, 2 * n_a // 2, 12 * n_a // 2)
    assert rep["training"]["sharding"] == "zero2"
    assert any("engine.py:1537-1544" in n for n in rep["notes"])
