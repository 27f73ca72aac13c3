"""Bad input to the hybrid-layer activation functions of the Python API: memsym's own error
(a ValueError) with one line naming what is accepted, never a bare unpacking error, a
misspelt recipe priced as FP8 or negative bytes."""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.symbols import r_lora
from memsym.terms.mamba import hybrid_layer_activations
from memsym.terms.mamba2 import mamba_layer_activations
from memsym.terms.shared_block import shared_block_activations
from memsym.terms.low_precision import saved_input_bytes


@pytest.mark.parametrize("kind", ["mamba", ("mamba",), ("mamba", None, True), None])
def test_hybrid_layer_kind_must_be_a_pair(kind):
    with pytest.raises(InvalidValueError, match=r"kind must be a \(mixer, ffn\) pair") as err:
        hybrid_layer_activations(kind)
    assert issubclass(err.type, ValueError) and "\n" not in str(err.value)


def test_hybrid_layer_kind_as_a_list_is_the_pair():
    assert hybrid_layer_activations(["mamba", None]).expr == \
        hybrid_layer_activations(("mamba", None)).expr


@pytest.mark.parametrize("value", ["nvfp5", "fp8", "MXFP8", 2, 0.5])
def test_fp8_inputs_other_than_the_recipes_is_refused(value):
    with pytest.raises(InvalidValueError, match="fp8_inputs must be False .*'mxfp8' or 'nvfp4'"):
        mamba_layer_activations(fp8_inputs=value)
    with pytest.raises(InvalidValueError):
        saved_input_bytes(value)


def test_fp8_inputs_accepted_values_still_price():
    # 16-bit 2 bytes, FP8 1, MXFP8 1 + 1/32 (an E8M0 byte per 32), NVFP4 1/2 + 1/16
    import sympy as sp
    assert [saved_input_bytes(x) for x in (None, False, True, "mxfp8", "nvfp4")] == \
        [2, 2, 1, sp.Rational(33, 32), sp.Rational(9, 16)]


@pytest.mark.parametrize("rank", [-1, 1.5, "4"])
def test_adapter_rank_must_be_a_whole_count(rank):
    with pytest.raises(InvalidValueError, match="adapter_rank must be"):
        shared_block_activations(adapter_rank=rank)


def test_adapter_rank_symbol_and_zero_accepted():
    # the adapters' rank-r inputs are 2sb r (1 + 3) with attention adapters: r = 0 prices none
    with_r = shared_block_activations(adapter_rank=r_lora, attention_adapters=True)
    none = shared_block_activations(adapter_rank=0, attention_adapters=True)
    assert (with_r.expr - none.expr).subs(r_lora, 0) == 0
