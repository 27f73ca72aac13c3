"""The experts' parameter all-gather the first forward waits for (issue 31).

Megatron-core d98e8a64dd dispatches each bucket's all-gather one bucket ahead, from the
forward pre-hook that waits on the bucket before it (param_and_grad_buffer.py:538-567), and a
module's pre-hook waits on every bucket holding one of its parameters
(distributed_data_parallel.py:517-551); buckets are max(40e6, 1e6 x DP) elements
(distributed_data_parallel.py:133-134) and close at the parameter that fills them
(param_and_grad_buffer.py:986, distrib_optimizer.py:567-574); Transformer Engine's GroupedLinear keeps each local expert's
weight as its own parameter (grouped_linear.py:1740-1741).  Expected values by hand.
"""

import math

import numpy as np
import pytest

from memsym.hardware import cluster, gpu
from memsym.model import preset
from memsym.timing.data_parallel import data_parallel_sync, gather_wait_fraction
from memsym.timing.gemm import shape_of
from memsym.timing.records import Overlap, Settings


def test_gpt_oss_ep8_waits_on_all_but_the_first_bucket_of_each_expert_module():
    # GPT-OSS 120B: 128 experts, h = f_e = 2880, gated (SwiGLU-like) -> fc1 2 x 2880 x 2880,
    # fc2 2880 x 2880 per expert.  EP 8 -> 16 local experts; DP 64 -> bucket 64e6 elements.
    x = shape_of(preset("gpt-oss-120b"))
    w1, w2 = 2 * 2880 * 2880, 2880 * 2880
    k1, k2 = math.ceil(64e6 / w1), math.ceil(64e6 / w2)       # 4 and 8 experts a bucket
    assert (k1, k2) == (4, 8)
    want = (w1 * (16 - k1) + w2 * (16 - k2)) / (16 * (w1 + w2))
    assert float(gather_wait_fraction(x, 8, 1, 64)) == pytest.approx(want)
    assert want == pytest.approx(2 / 3)


def test_small_dp_uses_the_40m_floor_and_few_local_experts_wait_on_nothing():
    x = shape_of(preset("gpt-oss-120b"))
    # DP 8: max(40e6, 8e6) = 40e6 -> k1 = ceil(40e6 / 16588800) = 3, k2 = ceil(40e6 / 8294400) = 5
    w1, w2 = 2 * 2880 * 2880, 2880 * 2880
    want = (w1 * (16 - 3) + w2 * (16 - 5)) / (16 * (w1 + w2))
    assert float(gather_wait_fraction(x, 8, 1, 8)) == pytest.approx(want)
    # EP 64: 2 local experts fit one bucket a module, nothing waits beyond the prefetch
    assert float(gather_wait_fraction(x, 64, 1, 64)) == 0.0
    # a dense model has no expert buffer
    assert float(gather_wait_fraction(shape_of(preset("llama3-8b")), 1, 1, 64)) == 0.0


def test_exposed_gather_is_the_larger_of_the_wait_and_what_the_forward_leaves():
    dev, clu, one = gpu("h100"), cluster("dgx-h100"), np.array(1.0)
    st = Settings()
    kw = dict(p=one, m=one, t=one, c=one, d=8 * one, e=one, t_e=one)
    dense, expert = np.array(0.0), np.array(8e9)     # expert DP 8 x 1 / (1 x 1) = 8

    def sync(first_stage, overlap=Overlap()):
        return data_parallel_sync(st, dev, clu, overlap, dense, expert, first_stage, one, **kw,
                                  gather_wait=0.5)

    ag = float(sync((0.0, 0.0))["ag"])
    # the experts' share: the all-gather less the (empty) dense one's latency steps
    ag_dense = float(data_parallel_sync(st, dev, clu, Overlap(), dense, 0 * expert, (0.0, 0.0),
                                        one, **kw)["ag"])
    ag_expert = ag - ag_dense
    # the reduce-scatter hides behind a 10 s backward; the gather: max(0.5 ag_e, ag - fwd)
    assert float(sync((ag - 0.1 * ag_expert, 10.0))["dp"]) == pytest.approx(0.5 * ag_expert)
    assert float(sync((0.2 * ag, 10.0))["dp"]) == pytest.approx(0.8 * ag)
    # without overlap_grad_reduce one bucket a buffer: the first pre-hook waits on all of it
    out = sync((ag, 10.0), Overlap(grad_reduce=False))
    assert float(out["dp"]) == pytest.approx(float(out["rs"]) + ag)
