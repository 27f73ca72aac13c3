"""The readers set ``bias_activation_fusion`` as the frameworks do (issue 30's follow-up).

Megatron-LM d98e8a64dd: ``--no-bias-swiglu-fusion`` is ``store_false`` with dest
``bias_swiglu_fusion`` (arguments.py:2895-2898: fused unless given), and
``core_transformer_config_from_args`` sets ``bias_activation_fusion = args.bias_swiglu_fusion``
under ``--swiglu`` (argument_utils.py:314-317).  Unfused, ``MLP.forward`` keeps silu(x_glu) and
``x_linear + 0.0`` (transformer/mlp.py:320-334): 2 bf16 tensors of s b f / t elements per layer.
Every expected value is that count written out by hand.
"""

from __future__ import annotations

import contextlib
import io
import json

from memsym.cli import main
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.jobs import megatron_job
from memsym.readers.megatron import read_megatron_args, read_megatron_overrides
from memsym.training import training_memory

L, H, HEADS, F, S, T = 4, 1024, 8, 2816, 2048, 2
_CMD = ["--num-layers", str(L), "--hidden-size", str(H), "--num-attention-heads", str(HEADS),
        "--ffn-hidden-size", str(F), "--seq-length", str(S), "--max-position-embeddings", str(S),
        "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000",
        "--tokenizer-type", "NullTokenizer", "--bf16", "--swiglu", "--disable-bias-linear",
        "--position-embedding-type", "rope", "--normalization", "RMSNorm",
        "--tensor-model-parallel-size", str(T), "--sequence-parallel", "--world-size", "8",
        "--use-distributed-optimizer"]


def _acts(*extra: str) -> float:
    return training_memory(megatron_job(read_megatron_args(_CMD + list(extra)))
                           ).grouped()["activations"]


def test_megatron_default_is_fused():
    # arguments.py:2895-2898: store_false, so fused when the flag is absent
    assert read_megatron_args(_CMD).training["bias_activation_fusion"] is True


def test_no_bias_swiglu_fusion_adds_two_products_per_layer():
    mj = read_megatron_args(_CMD + ["--no-bias-swiglu-fusion"])
    assert mj.training["bias_activation_fusion"] is False
    assert "--no-bias-swiglu-fusion" not in mj.ignored
    # fc1's output is all-gathered to the whole sequence and split by t along f: each product
    # is S x F / T bf16 elements, 2 x 2 x S x F / T bytes per layer, L layers (p = 1)
    delta = _acts("--no-bias-swiglu-fusion") - _acts()
    assert delta == L * 2 * 2 * S * F // T


def test_gelu_flag_leaves_a_swiglu_model_fused():
    # argument_utils.py:314-319: --no-bias-gelu-fusion sets only a non-SwiGLU model's fusion
    assert _acts("--no-bias-gelu-fusion") == _acts()


def test_override_with_a_model_turns_the_fusion_off():
    o = read_megatron_overrides(["--no-bias-swiglu-fusion"], num_layers=36)
    assert o.options["bias_activation_fusion"] is False
    assert o.ignored == ()


# Megatron-Bridge 067f987df0: Qwen3's model bridges leave bias_activation_fusion unset
# (qwen/qwen3_bridge.py:43-55), so TransformerConfig's False stands unless the recipe sets it;
# Llama's sets it True (llama/llama_bridge.py:56); the Qwen3-MoE perf recipes set it True
# (e.g. perf_recipes/qwen/h100/qwen3_moe.py:72).

def _bridge(name, *overrides):
    return bridge_job_options(read_bridge_recipe(name, list(overrides)))


def test_bridge_qwen3_keeps_the_eager_gate_llama_fuses():
    assert _bridge("qwen3_8b_pretrain_config")[1]["bias_activation_fusion"] is False
    assert _bridge("llama3_8b_pretrain_config")[1]["bias_activation_fusion"] is True
    assert _bridge("qwen3_235b_a22b_pretrain_256gpu_h100_fp8cs_config")[1][
        "bias_activation_fusion"] is True
    on = _bridge("qwen3_8b_pretrain_config", "model.bias_activation_fusion=true")
    assert on[1]["bias_activation_fusion"] is True


def test_bridge_qwen3_8b_recipe_by_hand():
    # qwen3_8b_pretrain_config: TP 1, PP 1, s 4096, MBS 1, no recompute; Qwen3-8B has 36 dense
    # layers of f = 12288: 36 x 2 tensors x 2 bytes x 4096 x 12288 more than fused
    model, opts, _ = _bridge("qwen3_8b_pretrain_config")
    assert (opts["t"], opts["p"], opts["seq_length"], opts["micro_batch_size"],
            opts["recompute"]) == (1, 1, 4096, 1, "none")
    eager = training_memory(job(model, **opts)).grouped()["activations"]
    fused = training_memory(job(model, **{**opts, "bias_activation_fusion": True})
                            ).grouped()["activations"]
    assert eager - fused == 36 * 2 * 2 * 4096 * 12288


def _cli_activations(*extra: str) -> int:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["estimate", "qwen3-8b", "--tp", "2", "--seq-length", "8192",
                     "--micro-batch-size", "1", "--json", *extra]) == 0
    return json.loads(out.getvalue())["bytes"]["activations"]


def test_cli_no_bias_swiglu_fusion_by_hand():
    # Qwen3-8B at TP 2, s 8192: 36 layers x 2 tensors x 2 bytes x 8192 x 12288 / 2
    delta = _cli_activations("--no-bias-swiglu-fusion") - _cli_activations()
    assert delta == 36 * 2 * 2 * 8192 * 12288 // 2
