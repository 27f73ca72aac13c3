"""The step-time model (memsym.timing) against published measurements and hand derivations."""

from __future__ import annotations

import pathlib
from fractions import Fraction

import numpy as np
import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.hardware import cluster, gpu
from memsym.model import preset
from memsym.model.architecture import Architecture
from memsym.terms.schedule import stage_microbatches
from memsym.timing import collectives, efficiency, schedule
from memsym.timing.gemm import layer_gemms, shape_of
from memsym.timing.layer import layer_time
from memsym.timing.step import Overlap, Settings, step_time_grid
from tools import time_accuracy

ROOT = pathlib.Path(__file__).resolve().parent.parent


# --- per-layer GEMMs: counted by hand from the shapes --------------------------------------

def test_llama3_70b_layer_gemm_flops_by_hand():
    # Llama 3 70B (Table 3): h 8192, 64 heads of 128, 8 KV heads, SwiGLU f 28672; t = 4,
    # s = 4096, b = 1.  Per GPU forward: 2 T [h (a + 2g) d + a d h + 3 h f] / t
    T, h, a, g, d, f, t = 4096, 8192, 64, 8, 128, 28672, 4
    hand = 2 * T * (h * (a + 2 * g) * d + a * d * h + 3 * h * f) / t
    got = sum(q.flops for q in layer_gemms(shape_of(preset("llama3-70b")), 4096, 1, t=t))
    assert float(got) == hand


def test_moe_expert_rows_balanced_by_hand():
    # Mixtral 8x7B: 8 experts, top-2, f_e 14336.  e = 8, t = t_e = 1, s = 4096, b = 1: each
    # GPU holds one expert and receives s k / 1 = 8192 rows (2 copies of every local token
    # spread over 8 experts, from 8 ranks).
    x = shape_of(preset("mixtral-8x7b"))
    gem = {q.name: q for q in layer_gemms(x, 4096, 1, t=1, c=1, e=8, moe=True)}
    assert float(gem["expert_fc1"].M) == 8192 and float(gem["expert_fc1"].count) == 1
    assert float(gem["expert_fc1"].N) == 2 * 14336


def test_cp_splits_gemm_rows():
    x = shape_of(preset("llama3-8b"))
    one = sum(q.flops for q in layer_gemms(x, 8192, 1, c=1))
    four = sum(q.flops for q in layer_gemms(x, 8192, 1, c=4))
    assert float(one) == 4 * float(four)


def test_three_times_forward_gemms_is_six_n_plus_logits():
    # independent check against memsym's parameter counter: 3 x forward GEMM FLOPs per token
    # without attention = 6 x (layer matrix parameters) (Kaplan's 6N per token)
    x = shape_of(preset("llama3-70b"))
    per_token = sum(q.flops for q in layer_gemms(x, 1, 1))
    mats = 8192 * (64 + 16) * 128 + 64 * 128 * 8192 + 3 * 8192 * 28672
    assert 3 * float(per_token) == 6 * mats


# --- GEMM efficiency: wave quantisation by hand ---------------------------------------------

def test_wave_quantisation_hand_values():
    sms = gpu("h100").sm_count
    assert sms == 132
    # 2816 x 1536 = 11 x 12 = 132 tiles of 256 x 128: exactly one wave
    assert efficiency._quantisation(np.array(2816.0), np.array(1536.0), sms) == pytest.approx(1.0)
    # 2816 x 1664: best is 64 x 128 tiles, 44 x 13 = 572 tiles in 5 waves of 132, at 0.85
    assert efficiency._quantisation(np.array(2816.0), np.array(1664.0), sms) == pytest.approx(
        572 / 660 * 0.85)


def test_eta_override_is_plain_roofline():
    M = N = K = 8192
    t = efficiency.gemm_time(M, N, K, "a100-80gb", eta_gemm=0.5)
    assert float(t) == pytest.approx(2 * M * N * K / (0.5 * 312e12) + efficiency.LAUNCH_OVERHEAD)
    with pytest.raises(InvalidValueError):
        efficiency.gemm_time(M, N, K, "a100-80gb", eta_gemm=1.5)
    with pytest.raises(InvalidValueError):
        efficiency.gemm_time(0, N, K, "a100-80gb")


def test_memory_bound_gemm_priced_by_hbm():
    # a GEMV-like [1, 8192] x [8192, 8192] in bf16 reads the 128 MiB weight: HBM-bound
    t = float(efficiency.gemm_time(1, 8192, 8192, "h100"))
    assert t == pytest.approx(2 * (8192 + 8192**2 + 8192) / 3.35e12 + efficiency.LAUNCH_OVERHEAD)


# --- collectives ------------------------------------------------------------------------

def test_collective_times_by_hand():
    S, n, bw, lat = 1e9, 8, 100e9, 1e-5
    assert float(collectives.collective_time("all-reduce", S, n, bw, lat)) == pytest.approx(
        2 * 7 / 8 * S / bw + 14 * lat)
    assert float(collectives.collective_time("all-gather", S, n, bw, lat)) == pytest.approx(
        7 / 8 * S / bw + 7 * lat)
    assert float(collectives.collective_time("all-reduce", S, 1, bw, lat)) == 0


def test_megatron_rank_order_links():
    # order tp-cp-ep-dp-pp on 8-GPU nodes: TP 4 x DP 2 fill a node; PP crosses nodes
    assert bool(collectives.group_link("tp", 4, 8, t=4, d=2))
    assert bool(collectives.group_link("dp", 2, 8, t=4, d=2))
    assert not bool(collectives.group_link("pp", 4, 8, t=4, d=2))
    # seed 001's PP 8 with DP 1: stride 4, so a PP group spans 4 nodes
    assert not bool(collectives.group_link("pp", 8, 8, t=4, d=1))


# --- the exact schedule ------------------------------------------------------------------

def test_1f1b_two_stages_two_microbatches_by_hand():
    # timeline (F = 1, B = 2): rank 1 F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7];
    # rank 0 F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9]: makespan 9 against 6 busy = (p-1)/m
    sim = schedule.simulate(2, 2)
    assert sim.makespan == 9 and sim.bubble == Fraction(1, 2)


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 16, 4), (8, 16, 5), (16, 16, 4), (2, 6, 3)])
def test_interleaved_closed_form_where_megatron_launches(p, m, v):
    # Narayanan §2.2.2: (p - 1)/(v m) when m is a multiple of p
    assert schedule.simulate(p, m, v).bubble == Fraction(p - 1, v * m)


@pytest.mark.parametrize("p,m", [(8, 2), (8, 4), (4, 3), (16, 1)])
def test_1f1b_bubble_is_p_minus_1_over_m_also_below_p(p, m):
    assert schedule.simulate(p, m).bubble == Fraction(p - 1, m)


def test_m_below_p_interleaved_is_priced_as_it_runs():
    # issue 17: p = 2, m = 1, v = 3 was priced (p-1)/(v m) = 33 %; it idles 100 %
    assert schedule.bubble_fraction("interleaved", 2, 1, 3) == 1
    with pytest.raises(InvalidValueError, match="microbatch_group_size_per_vp_stage"):
        schedule.bubble_fraction("interleaved", 2, 1, 3, strict=True)


def test_megatron_rules_verbatim():
    # schedules.py: N in [p, m]; m mod N in {0} or >= p
    assert schedule.schedule_rule(4, 9, 2, group_size=5) is None       # 9 = 5 + 4
    assert "m mod N" in schedule.schedule_rule(4, 7, 2, group_size=5)  # 7 = 5 + 2
    assert "must lie" in schedule.schedule_rule(4, 3, 2)
    # the launchable N = 5 layout (groups of 5 and 4) still runs at (p - 1)/(v m) ...
    assert schedule.bubble_fraction("interleaved", 4, 9, 2, 5) == Fraction(3, 18)
    # ... the refused one (groups of 5 and 2) idles longer: Megatron's "dependency bubbles"
    assert schedule.bubble_fraction("interleaved", 4, 7, 2, 5) > Fraction(3, 14)


@pytest.mark.parametrize("p,m,v,N", [(4, 8, 2, None), (4, 12, 3, None), (8, 16, 2, None),
                                     (4, 8, 2, 8), (4, 2, 1, None), (4, 8, 1, None)])
def test_in_flight_peak_matches_the_memory_formula(p, m, v, N):
    # two implementations: counting forwards not yet backwarded in the simulated order,
    # and terms.schedule's min(W + 1, m v) with W = 2(p - i - 1) + (v - 1) N
    sim = schedule.simulate(p, m, v, N)
    for i in range(p):
        formula = stage_microbatches(i, pp=p, vv=v if v > 1 else None, mm=m, group=N)
        assert sim.in_flight[i] == int(formula)


def test_uneven_stages_slowest_paces():
    # stage 0 twice as slow (F 2, B 4; stage 1: F 1, B 2), m = 4.  Rank 0: F0 [0,2] F1 [2,4],
    # waits for rank 1's B0 (F0 [2,3] B0 [3,5]), B0 [5,9] F2 [9,11] B1 [11,15] F3 [15,17]
    # B2 [17,21] B3 [21,25]: 24 busy + 1 idle
    sim = schedule.simulate(2, 4, forward=(2, 1), backward=(4, 2))
    assert sim.makespan == 25


# --- step time: published measurements -------------------------------------------------

@pytest.fixture(scope="module")
def results():
    return {r.id: r for r in time_accuracy.validate()}


def test_korthikanti_table5_at_or_below_calculon(results):
    errs = [abs(r.error) for k, r in results.items()
            if k.startswith("korthikanti.t5") and r.role == "validation"]
    assert len(errs) == 7
    assert np.mean(errs) <= 0.0365          # Calculon's 3.65 % on the same table
    assert max(errs) < 0.08          # worst: 22B, one micro-batch, no pipeline (-7 %)


def test_korthikanti_table4_per_layer_times():
    # Korthikanti Table 4 (22B, one layer, t = 8, b = 4): forward / backward [ms]
    x = shape_of(Architecture(name="22b", num_layers=48, hidden_size=6144, num_attention_heads=64,
                              vocab_size=51200, max_position_embeddings=2048))
    printed = {("none", False): (7.7, 11.9), ("none", True): (7.2, 11.8),
               ("full", False): (7.7, 19.5), ("selective", False): (7.7, 13.2),
               ("selective", True): (7.2, 13.1)}
    for (rec, sp_), (fw, bw) in printed.items():
        st = Settings(seq_length=2048, micro_batch_size=4, recompute=rec, sequence_parallel=sp_,
                      flash_attention=False, dropout=True)
        f, b = layer_time(x, st, gpu("a100-80gb"), cluster("dgx-a100"), 8, 1, 1, 8, 4, moe=False,
                      eta_gemm=None, overlap=Overlap(), dp=1)
        assert sum(float(q) for q in f.values()) * 1e3 == pytest.approx(fw, rel=0.06)
        assert sum(float(q) for q in b.values()) * 1e3 == pytest.approx(bw, rel=0.06)


def test_narayanan_throughput_rises_with_size(results):
    # Table 1: 137 TFLOP/s at 1.7B -> 163 at 1T; memsym's predicted throughput must rise too
    ids = ["narayanan.t1.1.7b", "narayanan.t1.18.4b", "narayanan.t1.145.6b", "narayanan.t1.1008b"]
    runs = {r["id"]: r for r in time_accuracy.runs()}
    tput = [runs[i]["measured"]["tflops"] * results[i].measured / results[i].predicted
            for i in ids]
    assert tput == sorted(tput)
    assert np.mean([abs(results[r].error) for r in results if r.startswith("narayanan")]) < 0.10


def test_llama3_405b_production_layout(results):
    # Table 4 row 2: 16M tokens, 400 TFLOP/s on 16,384 H100 -> about 6.5 s per step
    r = results["llama3.t4.16384"]
    assert 6.2 <= r.measured <= 6.6
    assert abs(r.error) < 0.05


def test_seed001_ratios_sign_and_size(results):
    base = results["seed001.baseline"].predicted
    pp8 = base / results["seed001.pp8"].predicted - 1     # measured -5.9 %
    tp8 = base / results["seed001.tp8"].predicted - 1     # measured -28.4 %
    assert -0.12 < pp8 < 0 and tp8 < pp8 < 0
    assert tp8 < -0.10


def test_torchtitan_interleaving_gain(results):
    # torchtitan's benchmark, Table 5 (Llama 3.1 405B, 512 H100s, FSDP 8 TP 8 PP 8): 1F1B 100
    # TPS/GPU, Interleaved 1F1B 128 (+28 %), the 500 W clock cancelling in the ratio; memsym's
    # torch rounds and FSDP2 pricing must give the gain within 5 % of the measured ratio
    base, inter = results["torchtitan.2412.t5.1f1b"], results["torchtitan.2412.t5.interleaved"]
    measured = base.measured / inter.measured
    predicted = base.predicted / inter.predicted
    assert measured == pytest.approx(1.28)
    assert predicted > 1 and abs(predicted / measured - 1) < 0.05
    # and the ratio-base rows count in no error summary
    assert not any(k.startswith("torchtitan") for k in time_accuracy.summary(tuple(
        results.values())))


def test_calibration_points_reproduce_the_stored_ceilings():
    for (klass, prec) in (("ampere", "bf16"), ("hopper", "bf16"), ("hopper", "fp8")):  # blackwell: test_time_validation.py
        assert time_accuracy.calibrate(klass, prec) == pytest.approx(
            efficiency.GEMM_CEILING[(klass, prec)], abs=0.002)


def test_time_accuracy_page_is_current():
    page = (ROOT / "docs" / "time-accuracy.md").read_text(encoding="utf-8")
    assert page == time_accuracy.accuracy_markdown(), "run python tools/time_accuracy.py"


# --- step time: switches, vectorisation, bad input ---------------------------------------

def _llama70(**kw):
    base = dict(t=4, p=4, d=2, v=5, m=16, settings=Settings(seq_length=4096, precision="fp8"))
    base.update(kw)
    return step_time_grid(preset("llama3-70b"), "h100", **base)


def test_overlap_switches_only_add_time():
    on = float(_llama70()["step"][()])
    off = float(_llama70(overlap=Overlap.none())["step"][()])
    assert off > on
    # "nothing overlapped" means every switch off, the TP dgrad collectives' async backward too
    assert not any(vars(Overlap.none()).values())
    async_off = float(_llama70(overlap=Overlap(tp_async_backward=False))["step"][()])
    assert async_off > on
    no_grad = _llama70(overlap=Overlap(grad_reduce=False))
    # the whole reduce-scatter is exposed: its ring time by hand (fp32 grads over d = 2,
    # inside the node at 450 GB/s, 1 step of 5 us)
    assert float(no_grad["dp"][()]) > float(_llama70()["dp"][()])


def test_grid_equals_one_by_one():
    ts, ps, ds, ms = [4, 8, 4], [4, 4, 8], [2, 1, 1], [16, 32, 32]
    grid = _llama70(t=ts, p=ps, d=ds, m=ms)["step"]
    for i in range(3):
        one = _llama70(t=ts[i], p=ps[i], d=ds[i], m=ms[i])["step"]
        assert float(grid[i]) == pytest.approx(float(one))


def test_launchable_flag_and_m_below_p_bubble():
    out = _llama70(p=2, d=16, m=1, v=3)
    assert not bool(out["launchable"][()])
    # with m = 1 < p = 2 the bubble is one full pass of the other stage (about 100 %, the
    # two stages differing only by the embedding and the output layer)
    busy = float(out["pipeline"][()]) - float(out["bubble"][()])
    assert float(out["bubble"][()]) / busy == pytest.approx(1, abs=0.05)


@pytest.mark.parametrize("kw", [dict(t=0), dict(p=2.5), dict(m=float("nan")), dict(d=-1)])
def test_bad_knobs_refused(kw):
    with pytest.raises(InvalidValueError, match="whole number"):
        _llama70(**kw)


def test_bad_settings_refused():
    with pytest.raises(InvalidValueError, match="seq_length"):
        _llama70(settings=Settings(seq_length=0))
    with pytest.raises(InvalidValueError, match="overlap"):
        _llama70(overlap=Overlap(tp_comm="yes"))
    with pytest.raises(InvalidValueError):
        collectives.collective_time("all-reduce", -1, 8, 1e9)
    with pytest.raises(InvalidValueError):
        efficiency.gemm_time(float("nan"), 1, 1, "h100")


def test_exact_schedule_matches_grid_on_equal_stages_and_bounds_uneven():
    kw = dict(t=8, p=8, d=1, m=64, v=1, settings=Settings(seq_length=2048, flash_attention=False,
                                                           dropout=True, sequence_parallel=True,
                                                           recompute="selective"))
    arch = Architecture(name="175b", num_layers=96, hidden_size=12288, num_attention_heads=96,
                        vocab_size=51200, max_position_embeddings=2048)
    grid = step_time_grid(arch, "a100-80gb", **kw)
    exact = step_time_grid(arch, "a100-80gb", exact_schedule=True, **kw)
    # stages differ only by the embedding / output layer: the bound is within 1 % and above
    assert float(exact["step"]) <= float(grid["step"]) * (1 + 1e-12)
    assert float(exact["step"]) == pytest.approx(float(grid["step"]), rel=0.01)


@pytest.mark.parametrize("p,m", [(4, 8), (8, 3)])
def test_gpipe_bubble_and_in_flight(p, m):
    # GPipe (Huang et al. 2019 §2.2): (p - 1)/m idle; every stage holds all m micro-batches
    sim = schedule.simulate(p, m, gpipe=True)
    assert sim.bubble == Fraction(p - 1, m)
    assert sim.in_flight == (m,) * p
    assert schedule.bubble_fraction("gpipe", p, m) == Fraction(p - 1, m)


def test_hardware_timing_fields_from_datasheets():
    # A100 datasheet: 80GB SXM 2,039 GB/s, 40GB 1,555 GB/s; H100 SXM 3.35 TB/s; H200 4.8 TB/s;
    # SMs: GA100 108, H100 SXM5 132 (whitepapers)
    assert gpu("a100-80gb").hbm_bandwidth == 2039e9 and gpu("a100-40gb").hbm_bandwidth == 1555e9
    assert gpu("h100").hbm_bandwidth == 3350e9 and gpu("h200").hbm_bandwidth == 4800e9
    assert (gpu("a100-80gb").sm_count, gpu("h100").sm_count) == (108, 132)
    assert gpu("h100").arch_class == "hopper"


def _torch_order(schedule_cls, p, v, m, v_shape=False):
    """torch's own schedule table (``pipeline_order``) of a rank with v stages (r, r + p, ...;
    the V schedules' r and 2p - 1 - r), from stand-in stages that carry only what the
    schedule reads."""
    import types

    import torch

    ids = [0, 2 * p - 1] if v_shape else [j * p for j in range(v)]
    stages = [types.SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0,
                                    stage_index=i, is_first=i == 0, is_last=i == p * v - 1,
                                    submod=torch.nn.Linear(1, 1)) for i in ids]
    return schedule_cls(stages if v > 1 else stages[0], n_microbatches=m).pipeline_order


def _torch_peaks(schedule_cls, p, v, m, v_shape=False):
    """Each rank's peak chunk passes in flight in torch's schedule table: a pass is live from
    its forward to its full backward (or, split, its weight gradient)."""
    from torch.distributed.pipelining.schedules import _ComputationType as C

    order = _torch_order(schedule_cls, p, v, m, v_shape)
    peaks = []
    for r in range(p):
        live = peak = 0
        for act in order.get(r, ()):
            if act is None:
                continue
            if act.computation_type == C.FORWARD:
                live += 1
                peak = max(peak, live)
            elif act.computation_type in (C.FULL_BACKWARD, C.BACKWARD_WEIGHT):
                live -= 1
        peaks.append(peak)
    return peaks


def test_torch_interleaved_schedule_in_flight_and_launch_rule():
    # torchtitan runs torch.distributed.pipelining's ScheduleInterleaved1F1B: its rounds of
    # m // max(1, m // p) micro-batches set the warm-up (memsym.terms.schedule.
    # torch_round_size), and it refuses m not a multiple of its rounds; Schedule1F1B refuses
    # m < p.  The oracle is torch's own schedule table and constructor.
    pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

    from memsym import rules
    from memsym.terms.schedule import torch_round_size

    x = preset("llama2-7b")
    refused = 0
    for p_ in (2, 3, 4):
        for v_ in (2, 3):
            for m_ in range(1, 14):
                k = {"p": p_, "v": v_, "m": m_, "torchtitan": True}
                broken = bool(rules.RULES["torch-pp-microbatches"].test(x, k))
                try:
                    peaks = _torch_peaks(ScheduleInterleaved1F1B, p_, v_, m_)
                except ValueError:
                    assert broken, k
                    refused += 1
                    continue
                assert not broken, k
                n_ = torch_round_size(m_, p_)
                assert peaks == [int(stage_microbatches(i, pp=p_, vv=v_, mm=m_, group=n_))
                                 for i in range(p_)], k
    assert refused > 0          # e.g. m = 9 on p = 4: two rounds, 9 mod 2 = 1


def test_torch_looped_bfs_order_memory_and_bubble():
    # torchtitan's pipeline_parallel_schedule = "LoopedBFS" is torch's ScheduleLoopedBFS:
    # breadth-first over a rank's v stages, every forward before any backward (GPipe looped),
    # so each rank holds all m v chunk passes (m micro-batches of L/p layers), not the
    # interleaved 1F1B warm-up memsym once counted.  Oracle: torch's own schedule table
    # (stand-in stages); the bubble is Lamy-Poirier's (p - 1)/(v m) once m >= p
    # (arXiv:2211.05953 §3), and torch has no micro-batch rule for it.
    pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import ScheduleLoopedBFS
    from torch.distributed.pipelining.schedules import _ComputationType as C

    from memsym import rules

    x = preset("llama2-7b")
    for p_ in (2, 3, 4):
        for v_ in (2, 3):
            for m_ in range(1, 10):
                order = _torch_order(ScheduleLoopedBFS, p_, v_, m_)
                for r in range(p_):
                    torch_ops = [("F" if a.computation_type == C.FORWARD else "B",
                                  a.microbatch_index, a.stage_index // p_)
                                 for a in order[r] if a is not None and a.computation_type in
                                 (C.FORWARD, C.FULL_BACKWARD)]
                    assert torch_ops == schedule.rank_order(r, p_, m_, v_, gpipe=True)
                assert _torch_peaks(ScheduleLoopedBFS, p_, v_, m_) == [
                    int(stage_microbatches(i, "gpipe", pp=p_, vv=v_, mm=m_)) for i in range(p_)]
                k = {"p": p_, "v": v_, "m": m_, "torchtitan": True, "gpipe": True}
                assert not rules.RULES["torch-pp-microbatches"].test(x, k)
                assert not rules.RULES["gpipe-chunks"].test(x, k)
                if m_ >= p_:
                    assert schedule.bubble_fraction("gpipe", p_, m_, v_) == Fraction(p_ - 1,
                                                                                    v_ * m_)
                else:           # fewer micro-batches than stages idle longer
                    assert schedule.bubble_fraction("gpipe", p_, m_, v_) > Fraction(p_ - 1,
                                                                                   v_ * m_)
    # Megatron has no GPipe: v stages per rank under it is refused, by name
    k = {"p": 4, "v": 2, "m": 8, "gpipe": True}
    assert rules.RULES["gpipe-chunks"].test(x, k)
    assert "LoopedBFS" in rules.RULES["gpipe-chunks"].message(x, k)


def test_zero_bubble_schedules_hold_no_more_than_memsym_counts():
    # torchtitan's InterleavedZeroBubble, ZBVZeroBubble and DualPipeV are counted as
    # interleaved 1F1B (memsym.readers.jobs says so in the notes): the first rank's chunk
    # passes in flight, at torch's round size, are at least what any rank of torch's own
    # tables holds (a pass live from its forward to its weight gradient), so the count is
    # an upper bound (ZBV holds min(2p, m + 1 + r, 2m), below the interleaved 3p - 1)
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules as S

    from memsym.terms.schedule import torch_round_size, v_stage_microbatches

    checked = 0
    for cls, v_shape, vs in ((S.ScheduleInterleavedZeroBubble, False, (2, 3)),
                             (S.ScheduleZBVZeroBubble, True, (2,)),
                             (S.ScheduleDualPipeV, True, (2,))):
        for p_ in (2, 3, 4, 8):
            for v_ in vs:
                for m_ in range(1, 3 * p_ + 1):
                    try:
                        peaks = _torch_peaks(cls, p_, v_, m_, v_shape)
                    except ValueError:          # DualPipeV needs m >= 2p
                        continue
                    n_ = int(torch_round_size(m_, p_))
                    first = int(stage_microbatches(0, pp=p_, vv=v_, mm=m_, group=n_))
                    assert first >= max(peaks), (cls.__name__, p_, v_, m_, peaks)
                    if cls is S.ScheduleZBVZeroBubble:
                        assert peaks == [min(2 * p_, m_ + 1 + r, 2 * m_) for r in range(p_)]
                    if v_shape:
                        # the V placement's own count (stage_placement "v"): DualPipeV's
                        # exactly, ZBV's but one pass more on the last rank
                        ours = [int(v_stage_microbatches(r, pp=p_, mm=m_)) for r in range(p_)]
                        extra = [0] * (p_ - 1) + [int(cls is S.ScheduleZBVZeroBubble)]
                        assert ours == [a + e for a, e in zip(peaks, extra)], \
                            (cls.__name__, p_, m_, peaks, ours)
                    checked += 1
    assert checked > 100


def test_torch_1f1b_needs_a_microbatch_per_stage():
    pytest.importorskip("torch")
    import types

    from torch.distributed.pipelining.schedules import Schedule1F1B

    from memsym import rules

    x = preset("llama2-7b")
    for p_ in (2, 4):
        for m_ in (1, p_ - 1, p_, p_ + 1):
            stage = types.SimpleNamespace(num_stages=p_, group_size=p_, group_rank=0,
                                          stage_index=0, is_first=True, is_last=False)
            try:
                Schedule1F1B(stage, n_microbatches=m_)
                ok = True
            except ValueError:
                ok = False
            k = {"p": p_, "v": 1, "m": m_, "torchtitan": True}
            assert bool(rules.RULES["torch-pp-microbatches"].test(x, k)) == (not ok), k
            # GPipe has no such rule, and Megatron jobs are not torch's
            assert not rules.RULES["torch-pp-microbatches"].test(x, dict(k, gpipe=True))
            assert not rules.RULES["torch-pp-microbatches"].test(x, dict(k, torchtitan=False))


def test_nvlink_runs_at_nccls_effective_bandwidth():
    # NVIDIA/nccl-tests#212 (NCCL maintainer): H100's 450 GB/s NVLink line rate delivers an
    # effective 370 GB/s to NCCL's ring protocol; the step-time model prices NVLink groups at
    # that, and leaves links with no cited figure (PCIe, Infinity Fabric, InfiniBand) at
    # their line rate
    from memsym.hardware import cluster_for

    bw, _ = collectives.group_bandwidth("tp", 8, cluster("dgx-h100"), t=8)
    assert float(bw) == pytest.approx(370e9)
    bw, _ = collectives.group_bandwidth("dp", 2, cluster("dgx-h100"), t=8, d=2)  # crosses nodes
    assert float(bw) == pytest.approx(50e9)
    bw, _ = collectives.group_bandwidth("tp", 8, cluster("mi300x-8"), t=8)
    assert float(bw) == pytest.approx(448e9)
    bw, _ = collectives.group_bandwidth("tp", 8, cluster_for("h100-pcie", 8), t=8)
    assert float(bw) == pytest.approx(64e9)
    assert cluster_for("mi300x-192gb").intra_link == "infinity-fabric"


def _torch_holdings(schedule_cls, p, v, m):
    """Per rank of torch's own schedule table: (the most stages holding gradients at once,
    the chunk passes in flight at the first backward, the most in flight ever), where a
    stage holds its gradients from its first backward to its last (FSDP2 without sync)."""
    from torch.distributed.pipelining.schedules import _ComputationType as C

    order = _torch_order(schedule_cls, p, v, m)
    out = []
    for r in range(p):
        live = peak = most = 0
        first_b, holding, done = None, set(), {}
        for act in order.get(r, ()):
            if act is None:
                continue
            if act.computation_type == C.FORWARD:
                live += 1
            elif act.computation_type == C.FULL_BACKWARD:
                holding.add(act.stage_index)
                most = max(most, len(holding))
                first_b = live if first_b is None else first_b
                live -= 1
                done[act.stage_index] = done.get(act.stage_index, 0) + 1
                if done[act.stage_index] == m:
                    holding.discard(act.stage_index)
            peak = max(peak, live)
        out.append((most, first_b, peak))
    return out


def test_stages_gradients_overlap_only_beyond_one_round():
    # memsym.terms.torch_moments.grads_as_stages_run: under FSDP2 + torch.distributed.pipelining a
    # rank holds one stage's gradients at a time where it runs each stage's backwards
    # together (LoopedBFS always; Interleaved1F1B with one round, m < 2p), and holds them at
    # its peak (the first backward sees every warm-up pass in flight); beyond one round
    # several stages' overlap.  The oracle is torch's own schedule tables; memsym's walk
    # (live_by_held_gradients over rank_order) agrees on every case
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules as S

    from memsym.terms.schedule import torch_round_size

    checked = 0
    for cls in (S.ScheduleInterleaved1F1B, S.ScheduleLoopedBFS):
        for p_ in (2, 3, 4, 8):
            for v_ in (2, 3):
                for m_ in range(1, 4 * p_ + 1):
                    try:
                        got = _torch_holdings(cls, p_, v_, m_)
                    except ValueError:             # m not a multiple of torch's rounds
                        continue
                    one_round = cls is S.ScheduleLoopedBFS or m_ < 2 * p_
                    gpipe = cls is S.ScheduleLoopedBFS
                    n_ = int(torch_round_size(m_, p_))
                    for r, (most, first_b, peak) in enumerate(got):
                        assert (most == 1) == one_round, (cls.__name__, p_, v_, m_, r, got)
                        assert first_b == peak, (cls.__name__, p_, v_, m_, r)
                        walk = schedule.live_by_held_gradients(r, p_, m_, v_, n_, gpipe=gpipe)
                        assert walk[0] == peak and (max(walk[1:]) == 0) == one_round
                    checked += 1
    assert checked > 100


def test_tp_comm_overlap_runs_as_transformer_engines_userbuffers():
    # TE's initialize_ub defaults (module/base.py), composed by hand from the GEMM roofline:
    # forward qkv and fc1 as t ring-exchange GEMMs of M/t rows, proj and fc2 as 4 pipelined
    # chunks on the 132 - 16 SMs the reduce-scatter leaves; backward proj / fc2 dgrad by ring
    # exchange, their wgrad whole, qkv / fc1 dgrad and wgrad whole on 116 SMs (bulk)
    import dataclasses

    from memsym.timing.efficiency import gemm_time
    from memsym.timing.gemm import layer_gemms, shape_of
    from memsym.timing.layer import layer_time

    x, dev, clu = shape_of(preset("llama3-70b")), gpu("h100-80gb"), cluster("dgx-h100")
    few = dataclasses.replace(dev, sm_count=116, bf16=dev.bf16 * 116 / 132,
                              fp16=dev.fp16 * 116 / 132, fp8=dev.fp8 * 116 / 132)
    st = Settings(seq_length=4096, micro_batch_size=1, sequence_parallel=True,
                  flash_attention=True, dropout=False, precision="fp8")
    t_ = 8
    g = {q.name: q for q in layer_gemms(x, 4096, 1, t_)}

    def run(M, N, K, on=dev, n=1):
        return n * float(gemm_time(M / n, N, K, on, "fp8"))

    fwd_by_hand = (run(4096, g["qkv"].N, g["qkv"].K, n=t_) + run(4096, g["proj"].N, g["proj"].K, few, 4)
                   + run(4096, g["fc1"].N, g["fc1"].K, n=t_) + run(4096, g["fc2"].N, g["fc2"].K, few, 4))
    bwd_by_hand = (run(4096, g["proj"].K, g["proj"].N, n=t_) + run(g["proj"].K, g["proj"].N, 4096)
                   + run(4096, g["fc2"].K, g["fc2"].N, n=t_) + run(g["fc2"].K, g["fc2"].N, 4096)
                   + sum(run(4096, g[k].K, g[k].N, few) + run(g[k].K, g[k].N, 4096, few)
                         for k in ("qkv", "fc1")))
    f, b = layer_time(x, st, dev, clu, t_, 1, 1, t_, 1, moe=False, eta_gemm=None,
                  overlap=Overlap(tp_comm=True), dp=1)
    assert float(f["gemm"]) == pytest.approx(fwd_by_hand, rel=1e-12)
    assert float(b["gemm"]) == pytest.approx(bwd_by_hand, rel=1e-12)
    # splitting costs GEMM time and hides most of the collectives (seed 001's TP 8 layer)
    f0, b0 = layer_time(x, st, dev, clu, t_, 1, 1, t_, 1, moe=False, eta_gemm=None,
                    overlap=Overlap(), dp=1)
    assert float(f["gemm"]) > float(f0["gemm"]) and float(f["tp"]) < float(f0["tp"]) / 2
    # the switch to the old reading: collectives hidden behind the whole, unsplit GEMMs
    fh, _ = layer_time(x, st, dev, clu, t_, 1, 1, t_, 1, moe=False, eta_gemm=None,
                   overlap=Overlap(tp_comm=True, tp_comm_split=False), dp=1)
    assert float(fh["gemm"]) == float(f0["gemm"]) and float(fh["tp"]) == 0.0
    # no userbuffers without tensor parallelism: t = 1 prices as without the overlap
    one = [layer_time(x, st, dev, clu, 1, 1, 1, 1, 1, moe=False, eta_gemm=None, overlap=o, dp=1)
           for o in (Overlap(tp_comm=True), Overlap())]
    assert one[0] == one[1]


def test_a_jobs_recompute_modules_reach_the_step():
    # memsym time / estimate --gpu: a Training's --recompute-modules are the step's Settings
    from memsym.timing.step import step_time
    from memsym.training import Layout, Training
    lay = Layout(d=8, e=8)
    trn = Training(seq_length=4096, global_batch_size=64, micro_batch_size=1,
                   recompute="selective", recompute_modules=("layernorm", "moe_act"))
    got = step_time(preset("gpt-oss-120b"), lay, trn, "b200")
    assert set(got.assumptions["settings"].recompute_modules) == {"layernorm", "moe_act"}
    default = step_time(preset("gpt-oss-120b"), lay,
                        Training(seq_length=4096, global_batch_size=64, micro_batch_size=1,
                                 recompute="selective"), "b200")
    assert default.assumptions["settings"].recompute_modules == ("core_attn",)
    with pytest.raises(UnknownNameError, match="did you mean mlp"):
        step_time_grid(preset("gpt-oss-120b"), "b200", e=8, d=8,
                       settings=Settings(recompute="selective", recompute_modules=("mpl",)))


def test_a_remembered_gemm_time_is_a_copy_and_follows_the_ceiling(monkeypatch):
    """gemm_time keeps its results by their inputs (a search's groups share GEMMs): what it
    hands out is the caller's to change, and a changed ceiling (tools/time_accuracy.calibrate
    re-derives it) prices anew.  By hand: an 8192-cube bf16 GEMM on an H100 is math-bound, so
    halving the ceiling doubles its time less the launch overhead."""
    from memsym.timing import efficiency

    M = np.array([8192.0, 8192.0])
    first = efficiency.gemm_time(M, 8192, 8192, "h100")
    first[:] = 0.0
    again = efficiency.gemm_time(M, 8192, 8192, "h100")
    assert np.all(again > 0)
    ceil = efficiency.GEMM_CEILING[("hopper", "bf16")]
    monkeypatch.setitem(efficiency.GEMM_CEILING, ("hopper", "bf16"), ceil / 2)
    halved = efficiency.gemm_time(M, 8192, 8192, "h100")
    launch = efficiency.LAUNCH_OVERHEAD
    assert halved - launch == pytest.approx(2 * (again - launch), rel=1e-12)
