"""The distributed optimizer's parameter all-gather moves each weight at its storage dtype
(issue 30): 2 B for bf16, 1 B for FP8 linear weights under ``--fp8-param-gather``, 1/2 B for
NVFP4 ones under ``--fp4-param-gather``, 2 B for MXFP8 (gathered as bf16 through the
gradient buffer and re-quantized).

Sources: Megatron-LM d98e8a64dd ``distributed/param_and_grad_buffer.py``
(``group_params_for_buffers``: ``param_dtype = torch.uint8`` for FP8 / NVFP4 parameters;
the MXFP8 branch makes ``param_data`` a bf16 view of the gradient buffer; NVFP4's
``param_data`` has ``nvfp4_packed_numel`` = numel / 2 uint8 elements),
``optimizer/distrib_optimizer.py`` ``_copy_main_params_to_param_buffer``; Transformer
Engine d0067d0da6 ``pytorch/tensor/utils.py`` ``replace_raw_data`` (MXFP8Tensor refused).

Expected bytes are derived here: Llama-2-7B's decoder layers hold
32 x (4 h^2 + 3 h f + 2 h) = 6,476,267,520 parameters (h = 4096, f = 11008), its embedding,
output layer and final norm 2 V h + h = 262,148,096 (V = 32000); a ring all-gather over d
ranks sends (d - 1)/d x N x b bytes per GPU, the reduce-scatter of fp32 gradients
(d - 1)/d x N x 4.
"""

from fractions import Fraction

import pytest

from memsym.errors import InvalidValueError
from memsym.hardware import cluster_for
from memsym.model import preset
from memsym.terms.widths import param_gather_bytes
from memsym.timing.records import Overlap, Settings
from memsym.timing.step import step_time, step_time_grid
from memsym.training import Layout, Training

LAYERS = 32 * (4 * 4096 ** 2 + 3 * 4096 * 11008 + 2 * 4096)
ENDS = 2 * 32000 * 4096 + 4096
D = 8


def _dp_bytes(gpu, **settings):
    out = step_time_grid(preset("llama2-7b"), gpu, t=1, p=1, d=D, m=1, communication=True,
                         settings=Settings(seq_length=4096, **settings))
    return float(out["comm_dp_bytes"])


def _hand(linear_bytes, other_bytes=2, grad_bytes=4):
    ring = Fraction(D - 1, D)
    return float(ring * (LAYERS + ENDS) * grad_bytes
                 + ring * (LAYERS * Fraction(linear_bytes) + ENDS * other_bytes))


def test_widths_are_the_buffer_dtypes():
    assert param_gather_bytes("bf16") == 2
    assert param_gather_bytes("fp16") == 2
    assert param_gather_bytes("fp32") == 4
    assert param_gather_bytes("fp8") == 2                         # bf16 weights, FP8 GEMMs
    assert param_gather_bytes("fp8", "tensorwise", True) == 1     # uint8 param_data
    assert param_gather_bytes("fp8", "delayed", True) == 1
    assert param_gather_bytes("fp8", "mxfp8", True) == 2          # bf16 via the grad buffer
    assert param_gather_bytes("fp4") == 2
    assert param_gather_bytes("fp4", None, False, True) == Fraction(1, 2)   # numel/2 uint8
    # embeddings, output layer and norms are not TE linear weights: 16 bits
    assert param_gather_bytes("fp4", None, False, True, linear=False) == 2


def test_bf16_step_moves_two_bytes_per_parameter():
    assert _dp_bytes("h100") == pytest.approx(_hand(2), rel=1e-12)


def test_fp8_param_gather_halves_the_linear_weights_only():
    assert _dp_bytes("h100", precision="fp8") == pytest.approx(_hand(2), rel=1e-12)
    got = _dp_bytes("h100", precision="fp8", fp8_param_gather=True)
    assert got == pytest.approx(_hand(1), rel=1e-12)
    # the difference is (d-1)/d x the linear weights x 1 B
    assert _dp_bytes("h100", precision="fp8") - got == pytest.approx(7 / 8 * LAYERS, rel=1e-9)


def test_mxfp8_param_gather_still_moves_bf16():
    got = _dp_bytes("b200", precision="fp8", fp8_recipe="mxfp8", fp8_param_gather=True)
    assert got == pytest.approx(_hand(2), rel=1e-12)


def test_fp4_param_gather_moves_packed_nibbles():
    got = _dp_bytes("gb200", precision="fp4", fp4_param_gather=True)
    assert got == pytest.approx(_hand(Fraction(1, 2)), rel=1e-12)


def test_the_step_time_prices_the_same_bytes():
    # nothing overlapped, one micro-batch: the exposed DP seconds fall with the bytes
    base = step_time_grid(preset("llama2-7b"), "h100", t=1, p=1, d=D, m=1,
                          settings=Settings(seq_length=4096, precision="fp8"))
    fp8 = step_time_grid(preset("llama2-7b"), "h100", t=1, p=1, d=D, m=1,
                         settings=Settings(seq_length=4096, precision="fp8",
                                           fp8_param_gather=True))
    none = Overlap.none()
    base_n = step_time_grid(preset("llama2-7b"), "h100", t=1, p=1, d=D, m=1, overlap=none,
                            settings=Settings(seq_length=4096, precision="fp8"))
    fp8_n = step_time_grid(preset("llama2-7b"), "h100", t=1, p=1, d=D, m=1, overlap=none,
                           settings=Settings(seq_length=4096, precision="fp8",
                                             fp8_param_gather=True))
    assert float(fp8_n["dp"]) < float(base_n["dp"])
    assert float(fp8["dp"]) <= float(base["dp"])


def test_a_job_reads_the_flag():
    clu = cluster_for("h100", 8)
    tr = dict(seq_length=4096, micro_batch_size=1, global_batch_size=8, precision="fp8")
    base = step_time(preset("llama2-7b"), Layout(d=D), Training(**tr), "h100", clu)
    pg = step_time(preset("llama2-7b"), Layout(d=D), Training(**tr, fp8_param_gather=True),
                   "h100", clu)
    assert base.communication["dp"]["bytes"] - pg.communication["dp"]["bytes"] \
        == pytest.approx(7 / 8 * LAYERS, abs=2)


def test_settings_refuse_a_flag_without_its_precision():
    with pytest.raises(InvalidValueError, match="fp4_param_gather"):
        step_time_grid(preset("llama2-7b"), "gb200", d=D,
                       settings=Settings(precision="bf16", fp4_param_gather=True))
