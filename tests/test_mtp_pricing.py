"""What an MTP depth costs beside its decoder layer, in which precision, and where the
breakdown counts it (issue 31).

Megatron-LM's ``MultiTokenPredictionLayer`` (megatron/core/transformer/
multi_token_prediction.py at d98e8a64dd): ``enorm`` / ``hnorm`` (:1157-1167) on the
embedding and the hidden state, ``eh_proj`` a column-parallel ``2h -> h`` linear with
``gather_output=False`` (:1174-1186) whose output ``gather_from_tensor_model_parallel_region``
all-gathers (:1353) and, under sequence parallelism, ``scatter_to_sequence_parallel_region``
splits again (:1358); ``final_layernorm`` (:1247).  ``_proj_and_transformer_layer``
(:1386-1394) enters the FP8 context only under ``config.fp8`` and "currently ignor[es] FP4
in MTP layers": under FP4 the block runs at 16 bits.  Every expected value below is derived
here from those shapes and the datasheet figures, not copied from memsym's output.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from memsym.hardware import cluster_for, gpu
from memsym.model import preset
from memsym.timing.gemm import shape_of
from memsym.timing.mtp import mtp_depth, mtp_settings
from memsym.timing.records import Overlap, Settings
from memsym.timing.step import step_time_grid

_LAYER_PARTS = ("compute", "memory", "tp", "ep", "cp")


def _ring(kind, nbytes, n, bw=450e9 * 370 / 450, lat=5e-6):
    """NCCL's ring on NVLink (DGX H100: 450 GB/s per direction, NCCL's 370 of it, 5 us a
    step): all-gather / reduce-scatter (n-1)/n S / bw + (n-1) lat, all-reduce twice that."""
    k = 2 if kind == "all-reduce" else 1
    return k * ((n - 1) / n * nbytes / bw + (n - 1) * lat)


@pytest.mark.parametrize("sp", [True, False])
def test_eh_proj_gemms_norms_and_tp_collectives_by_hand(sp):
    # Llama-3-8B's h = 4096, one sequence of s = 4096 tokens, TP 2 on one DGX H100 node, a
    # fixed GEMM efficiency of 1/2, no async backward (every collective exposed), no output
    # layer or embedding (ends 0): what one depth adds beside its decoder layer
    h, T, t, eta = 4096, 4096, 2, 0.5
    dev = gpu("h100")
    peak, hbm = dev.peak("bf16"), dev.hbm_bandwidth
    # eh_proj: forward, dgrad and wgrad each 2 T (2h) (h/t) FLOPs (math-bound here: 137 GFLOP
    # at 495 TFLOP/s = 278 us against 117 MB of operands in 35 us), plus the 4 us launch
    gemm = 2 * T * 2 * h * (h / t) / (peak * eta) + 4e-6
    # three norms, read + write of the bf16 hidden state (split over TP under SP)
    norms = 3 * 4 * T * h / (t if sp else 1) / hbm
    wide, narrow = 2 * T * 2 * h, 2 * T * h          # bf16 [T, 2h] input, [T, h] output
    if sp:   # input AG and output AG; back: the scatter's AG, the input grad's RS, re-gather
        f_tp = _ring("all-gather", wide, t) + _ring("all-gather", narrow, t)
        b_tp = (_ring("all-gather", narrow, t) + _ring("reduce-scatter", wide, t)
                + _ring("all-gather", wide, t))
    else:    # the output AG; back: the input gradient's all-reduce (copy_to_tp's backward)
        f_tp, b_tp = _ring("all-gather", narrow, t), _ring("all-reduce", wide, t)
    f, b = mtp_depth(shape_of(preset("llama3-8b")),
                     Settings(seq_length=T, sequence_parallel=sp), dev, cluster_for("h100"),
                     Overlap(tp_async_backward=False), (t, 1, 1, 1), (0.0, 0.0, 0.0),
                     eta_gemm=eta)
    assert float(f) == pytest.approx(gemm + norms + f_tp, rel=1e-12)
    assert float(b) == pytest.approx(2 * gemm + 1.5 * norms + b_tp, rel=1e-12)


def test_mtp_block_precision_fp8_recipe_kept_fp4_at_16_bits():
    # config.fp8 set: get_fp8_context(self.config), the run's own recipe; FP4: nullcontext
    assert mtp_settings(Settings(precision="fp8", fp8_recipe="mxfp8")).precision == "fp8"
    assert mtp_settings(Settings(precision="fp8", fp8_recipe="mxfp8")).fp8_recipe == "mxfp8"
    assert mtp_settings(Settings(precision="fp4")).precision == "bf16"
    assert mtp_settings(Settings(precision="bf16")).precision == "bf16"


def _growth(arch, precision, **kw):
    """How much one MTP layer lengthens a one-stage pipeline of m = 4 on a GB300 [s]."""
    kw = dict(p=1, m=4, settings=Settings(seq_length=4096, precision=precision), **kw)
    return float(step_time_grid(arch, "gb300", mtp_layers=1, **kw)["pipeline"]) \
        - float(step_time_grid(arch, "gb300", **kw)["pipeline"])


@pytest.mark.parametrize("name, freq", [("llama3-8b", None), ("mixtral-8x7b", (0, 1, 1, 1))])
def test_fp4_run_prices_its_mtp_block_as_the_bf16_run_does(name, freq):
    # The MTP block runs at 16 bits whatever the decoder runs (bf16 or FP4): its layer
    # (the last layer's kind), eh_proj, norms, embedding and output layer (16-bit in both)
    # are the same work, so one MTP layer lengthens the FP4 and the BF16 run by the same
    # seconds; an FP4-priced MTP layer would have lengthened the FP4 run by less
    arch = dataclasses.replace(preset(name), num_layers=4)
    if freq is not None:
        arch = dataclasses.replace(arch, moe_layer_freq=freq)
    fp4, bf16 = _growth(arch, "fp4"), _growth(arch, "bf16")
    assert fp4 == pytest.approx(bf16, rel=1e-9)


def test_breakdown_counts_the_mtp_layer_at_the_last_layers_kind():
    # Mixtral's shapes, 4 layers, dense first and MoE after (DeepSeek-V3's kind): the MTP
    # layer is an MoE layer.  One stage, m = 4: each layer part grows by m times an MoE
    # layer's part, which is a quarter of the all-MoE model's part (4 equal layers), not a
    # quarter of the mixed model's (its mean layer)
    base = dataclasses.replace(preset("mixtral-8x7b"), num_layers=4)
    mixed = dataclasses.replace(base, moe_layer_freq=(0, 1, 1, 1))
    alike = dataclasses.replace(base, moe_layer_freq=(1, 1, 1, 1))
    kw = dict(p=1, m=4, settings=Settings(seq_length=4096))
    plain = step_time_grid(mixed, "h100", **kw)
    with_mtp = step_time_grid(mixed, "h100", mtp_layers=1, **kw)
    moe_model = step_time_grid(alike, "h100", **kw)
    for part in _LAYER_PARTS:
        grown = float(with_mtp[part]) - float(plain[part])
        assert grown == pytest.approx(float(moe_model[part]) / 4, rel=1e-9, abs=1e-15), part
    mean_layer = float(plain["compute"]) / 4
    assert float(with_mtp["compute"]) - float(plain["compute"]) != pytest.approx(mean_layer,
                                                                                 rel=1e-3)


def test_breakdown_leaves_the_mtp_layer_out_where_another_stage_is_busier():
    # p = 2, 3 layers first and 1 + the MTP layer last: the busiest stage (3 layers) is the
    # first, which holds no MTP layer, so the layer parts are those without MTP
    arch = dataclasses.replace(preset("mixtral-8x7b"), num_layers=4,
                               moe_layer_freq=(0, 1, 1, 1))
    kw = dict(p=2, m=4, first_stage_layers=3, last_stage_layers=1,
              settings=Settings(seq_length=4096))
    plain = step_time_grid(arch, "h100", **kw)
    with_mtp = step_time_grid(arch, "h100", mtp_layers=1, **kw)
    for part in _LAYER_PARTS:
        assert float(with_mtp[part]) == pytest.approx(float(plain[part]), rel=1e-12), part


def test_mtp_depth_is_zero_tp_traffic_on_one_gpu():
    # t = 1: no TP group, no collective; the backward is the two GEMMs and the norms only
    dev = gpu("h100")
    f1, b1 = mtp_depth(shape_of(preset("llama3-8b")), Settings(seq_length=4096), dev,
                       cluster_for("h100"), Overlap(tp_async_backward=False), (1, 1, 1, 1),
                       (0.0, 0.0, 0.0), eta_gemm=0.5)
    gemm = 2 * 4096 * 2 * 4096 * 4096 / (dev.peak("bf16") * 0.5) + 4e-6
    norms = 12 * 4096 * 4096 / dev.hbm_bandwidth
    assert np.isclose(f1, gemm + norms, rtol=1e-12) and np.isclose(b1, 2 * gemm + 1.5 * norms,
                                                                   rtol=1e-12)


# Full recompute (multi_token_prediction.py at d98e8a64dd): forward (:1705-1706) checkpoints
# _proj_and_transformer_layer whole under recompute_method uniform (:1621-1629, which asserts
# recompute_num_layers == 1) and under block warns "not supported for MTP yet. Skipping
# recompute." and runs it plainly (:1630-1649).  What the checkpoint holds: _concat_embeddings
# (enorm, hnorm, eh_proj, its output all-gather and the SP scatter, :1335-1358) and the layer;
# the shifted tokens' embedding (_get_embeddings, before :1705), final_layernorm and the output
# layer run outside it.

@pytest.mark.parametrize("sp", [True, False])
def test_uniform_recompute_reruns_the_checkpointed_projection_by_hand(sp):
    # the figures of test_eh_proj_gemms_norms_and_tp_collectives_by_hand; the backward adds
    # the rerun forward of the checkpoint beside the layer: eh_proj's GEMM, two of the three
    # norms (enorm, hnorm; final_layernorm is outside) and eh_proj's forward collectives
    h, T, t, eta = 4096, 4096, 2, 0.5
    dev = gpu("h100")
    gemm = 2 * T * 2 * h * (h / t) / (dev.peak("bf16") * eta) + 4e-6
    norm = 4 * T * h / (t if sp else 1) / dev.hbm_bandwidth         # one norm, read + write
    wide, narrow = 2 * T * 2 * h, 2 * T * h
    if sp:
        f_tp = _ring("all-gather", wide, t) + _ring("all-gather", narrow, t)
        b_tp = (_ring("all-gather", narrow, t) + _ring("reduce-scatter", wide, t)
                + _ring("all-gather", wide, t))
    else:
        f_tp, b_tp = _ring("all-gather", narrow, t), _ring("all-reduce", wide, t)
    plain = 2 * gemm + 1.5 * 3 * norm + b_tp
    for st, rerun in ((Settings(recompute="full"), gemm + 2 * norm + f_tp),
                      # uniform with a decoder share below 1 (torchtitan-like): the MTP
                      # checkpoint still reruns all of it
                      (Settings(recompute="full", recompute_fraction=0.5), gemm + 2 * norm + f_tp),
                      (Settings(recompute="full", recompute_fraction=0.25, mtp_recompute=False),
                       0.0),
                      (Settings(recompute="selective"), 0.0)):
        st = dataclasses.replace(st, seq_length=T, sequence_parallel=sp)
        _, b = mtp_depth(shape_of(preset("llama3-8b")), st, dev, cluster_for("h100"),
                         Overlap(tp_async_backward=False), (t, 1, 1, 1), (0.0, 0.0, 0.0),
                         eta_gemm=eta)
        assert float(b) == pytest.approx(plain + rerun, rel=1e-12), st


def test_block_recompute_runs_the_mtp_layer_as_without_recompute():
    # one stage, m = 4: an MTP layer lengthens the pipeline by m (its layer + its depth's
    # work), forward and backward.  Under block (Megatron skips the MTP recompute) that is
    # what it adds without any recompute, whatever share of the decoder the block reruns;
    # under uniform (the whole checkpoint rerun) it is that plus m times the rerun forward:
    # the layer's forward (the growth's forward half under no recompute, less the depth's
    # own forward beside it) and the projection's (test above)
    arch = dataclasses.replace(preset("llama3-8b"), num_layers=4)

    def growth(**st):
        kw = dict(p=1, m=4, eta_gemm=0.5, settings=Settings(seq_length=4096, **st))
        return float(step_time_grid(arch, "h100", mtp_layers=1, **kw)["pipeline"]) \
            - float(step_time_grid(arch, "h100", **kw)["pipeline"])

    none = growth()
    blocked = growth(recompute="full", recompute_fraction=0.25, mtp_recompute=False)
    assert blocked == pytest.approx(none, rel=1e-12)
    # against the decoder's share: a quarter of the MTP layer's forward would have been rerun
    assert growth(recompute="full", recompute_fraction=0.25) > none * 1.05
