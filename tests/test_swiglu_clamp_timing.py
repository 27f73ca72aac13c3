"""The eager clamped SwiGLU's clamps in the step time, by hand.

A clamped ``--swiglu`` (``--activation-func-clamp-value``, memsym's ``swiglu_clamp``) under
``--no-bias-swiglu-fusion`` runs Megatron-core's eager ``glu``, which clamps both halves of
fc1's output in torch (mlp.py:327-329 for the dense and shared MLPs, moe/experts.py:1004-1006
for the routed experts, Megatron-LM d98e8a64dd): ``x_glu.clamp(max=c)`` and
``x_linear.clamp(-c, c)`` each read and write their half of the [R, 2f] tensor, forward
2 x 2f = 4f elements a row; backward each reads the gradient and its input and writes one
gradient, 2 x 3f = 6f.  In bf16 (2 bytes) at the H100 SXM's 3.35 TB/s (its datasheet).  Fused
(bias_swiglu_impl) the kernel clamps inside (fused_bias_swiglu.py:266-276): nothing more.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from memsym.hardware import cluster_for, gpu
from memsym.model import preset
from memsym.timing.gemm import shape_of
from memsym.timing.layer import layer_time
from memsym.timing.records import Overlap, Settings

HBM = 3.35e12


def _memory(x, moe, fusion):
    dev, one = gpu("h100"), np.array(1.0)
    st = Settings(seq_length=4096, micro_batch_size=1, sequence_parallel=False,
                  moe_host_sync=False, bias_activation_fusion=fusion)
    f, b = layer_time(x, st, dev, cluster_for(dev.name), one, one, one, one, one, moe=moe,
                      eta_gemm=0.5, overlap=Overlap(), dp=one)
    return float(f["memory"]), float(b["memory"])


def test_eager_swiglu_clamps_are_priced():
    assert gpu("h100").hbm_bandwidth == HBM
    plain = shape_of(preset("deepseek-v3"))
    assert not plain.swiglu_clamp
    clamped = dataclasses.replace(plain, swiglu_clamp=True)
    # MoE layer, t = c = e = t_e = 1, b = 1, s = 4096: the routed experts' rows b s k = 32768
    # of f_e = 2048, the shared expert's 4096 tokens of f_sh = 2048
    elems = 2048 * 32768 + 2048 * 4096
    (f0, b0), (f1, b1) = _memory(plain, True, False), _memory(clamped, True, False)
    assert f1 - f0 == pytest.approx(4 * 2 * elems / HBM, rel=1e-9)
    assert b1 - b0 == pytest.approx(6 * 2 * elems / HBM, rel=1e-9)
    # a dense layer (DeepSeek-V3's first three): 4096 tokens of f = 18432
    (f0, b0), (f1, b1) = _memory(plain, False, False), _memory(clamped, False, False)
    assert f1 - f0 == pytest.approx(4 * 2 * 18432 * 4096 / HBM, rel=1e-9)
    assert b1 - b0 == pytest.approx(6 * 2 * 18432 * 4096 / HBM, rel=1e-9)
    # fused: the kernel clamps inside, no eager pass
    assert _memory(clamped, True, True) == _memory(plain, True, True)


def test_the_architecture_carries_the_swiglu_clamp():
    # memsym.readers.megatron_architecture: --swiglu with --activation-func-clamp-value
    arch = preset("deepseek-v3")
    arch = dataclasses.replace(arch, extra={**(arch.extra or {}), "swiglu_clamp": 7.0})
    assert shape_of(arch).swiglu_clamp and not shape_of(arch).expert_clamp


def test_recomputed_mlp_reruns_the_clamps():
    # --recompute-modules mlp / moe_act / shared_experts rerun the eager glu, clamps included:
    # the backward gains their forward bytes (4 x 2 x f R) once more at HBM rate
    plain = shape_of(preset("deepseek-v3"))
    clamped = dataclasses.replace(plain, swiglu_clamp=True)
    dev, one = gpu("h100"), np.array(1.0)

    def bwd_memory(x, moe, mods):
        st = Settings(seq_length=4096, micro_batch_size=1, sequence_parallel=False,
                      moe_host_sync=False, bias_activation_fusion=False,
                      recompute="selective", recompute_modules=mods)
        _, b = layer_time(x, st, dev, cluster_for(dev.name), one, one, one, one, one, moe=moe,
                          eta_gemm=0.5, overlap=Overlap(), dp=one)
        return float(b["memory"])

    dense_fwd = 4 * 2 * 18432 * 4096 / HBM
    dense = bwd_memory(clamped, False, ("mlp",)) - bwd_memory(plain, False, ("mlp",))
    assert dense == pytest.approx(6 * 2 * 18432 * 4096 / HBM + dense_fwd, rel=1e-9)
    mods = ("moe_act", "shared_experts")
    moe = bwd_memory(clamped, True, mods) - bwd_memory(plain, True, mods)
    elems = 2048 * 32768 + 2048 * 4096
    assert moe == pytest.approx((6 + 4) * 2 * elems / HBM, rel=1e-9)
