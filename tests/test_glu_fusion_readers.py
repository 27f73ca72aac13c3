"""The readers set ``bias_activation_fusion`` as the frameworks do (issue 30's follow-up).

Megatron-LM d98e8a64dd: ``--no-bias-swiglu-fusion`` is ``store_false`` with dest
``bias_swiglu_fusion`` (arguments.py:2896-2898: fused unless given), and
``core_transformer_config_from_args`` sets ``bias_activation_fusion = args.bias_swiglu_fusion``
under ``--swiglu`` (argument_utils.py:314-317).  Unfused, ``MLP.forward`` keeps silu(x_glu) and
``x_linear + 0.0`` (transformer/mlp.py:320-334): 2 bf16 tensors of s b f / t elements per layer.
Every expected value is that count written out by hand.
"""

from __future__ import annotations

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
    # arguments.py:2896-2898: store_false, so fused when the flag is absent
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
