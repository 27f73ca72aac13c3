"""The three memory verdicts (issue 30): "fits", "tight", "does not fit".

memsym cannot know the caching allocator's reserve: its fragmentation allowance is a default
10 % of the peak phase's allocation, not measured with expandable segments
(formulas/allocator_reserve.toml).  So a job within the capacity only without that margin is
"tight", with the largest reserve that still fits; over the capacity even with no reserve it
"does not fit"; "fits" (and the conservative JSON ``fits``) keeps its meaning.

Each capacity below is chosen by hand from the allowance arithmetic
(:mod:`memsym.terms.allowances`): the device total is the allocation A (model states and
activations of the peak phase) plus the CUDA context and workspaces (500 + 2 x 32 MiB), NCCL's
buffers (4 communicators x 32 channels x 4 MiB = 512 MiB) and the fragmentation margin A / 10.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from memsym.terms.allowances import VERDICTS, reserve_verdict
from in_process import run

MIB, GB = 2**20, 10**9
#: Llama-2 7B, ZeRO-3 over 8 GPUs, full recompute (tests/test_margin.py's job): small and fast.
JOB = ("estimate", "llama2-7b", "--seq-length", "2048", "--dp", "8", "--sharding", "zero3",
       "--recompute-granularity", "full")
WS, NCCL = (500 + 2 * 32) * MIB, 4 * 32 * 4 * MIB


@pytest.fixture(scope="module")
def allocated():
    """A [bytes]: the job's allocated rows (no capacity given: no verdict)."""
    out = {}

    def get(capsys):
        if not out:
            code, text, err = run(capsys, *JOB, "--json")
            data = json.loads(text)
            assert code == 0 and data["verdict"] is None and data["fits"] is None, err
            b = data["bytes"]
            a = (b["weights"] + b["gradients"] + b["optimizer"] + b["activations"]
                 + b.get("transients", 0))
            # the allowances, by hand: this A is a multiple of 20, so A / 10 and A / 20 are
            # whole bytes
            assert a % 20 == 0
            assert (b["workspace"], b["nccl"], b["fragmentation"]) == (WS, NCCL, a // 10)
            assert b["total"] == a + WS + NCCL + a // 10
            out["a"] = a
        return out["a"]
    return get


def verdict(capsys, capacity, *extra):
    code, out, err = run(capsys, *JOB, "--gpu-memory", f"{capacity}B", *extra, "--json")
    data = json.loads(out)
    assert data["verdict"] in VERDICTS, err
    assert code == (0 if data["verdict"] == "fits" else 1), err      # exit 1 unless "fits"
    assert data["fits"] is (data["verdict"] == "fits")               # the conservative boolean
    return data


def test_fits_at_the_total_with_the_margin(capsys, allocated):
    a = allocated(capsys)
    data = verdict(capsys, a + WS + NCCL + a // 10)
    # exactly at the capacity: the whole 10 % reserve fits, and not a byte more
    assert data["verdict"] == "fits" and data["reserve_fraction_that_fits"] == 0.1


def test_tight_between_the_totals_without_and_with_the_margin(capsys, allocated):
    a = allocated(capsys)
    data = verdict(capsys, a + WS + NCCL + a // 20)      # room for a 5 % reserve
    assert data["verdict"] == "tight" and data["reserve_fraction_that_fits"] == 0.05
    assert "advice" not in data                          # the levers only on --advise
    # with no room for any reserve, it is still "tight": it fits only if the reserve is 0
    data = verdict(capsys, a + WS + NCCL)
    assert data["verdict"] == "tight" and data["reserve_fraction_that_fits"] == 0


def test_does_not_fit_below_the_total_without_the_margin(capsys, allocated):
    a = allocated(capsys)
    data = verdict(capsys, a + WS + NCCL - 1)
    assert data["verdict"] == "does not fit" and data["reserve_fraction_that_fits"] is None
    assert data["advice"]            # the levers come with a job that does not fit


def test_the_band_follows_the_fragmentation_given(capsys, allocated):
    a = allocated(capsys)
    # --fragmentation 0: no margin, no band; the total is A + WS + NCCL
    data = verdict(capsys, a + WS + NCCL + a // 20, "--fragmentation", "0")
    assert data["verdict"] == "fits" and data["reserve_fraction_that_fits"] is None
    # --fragmentation 0.2: the margin is A / 5; a capacity with room for A / 10 is tight at 10 %
    data = verdict(capsys, a + WS + NCCL + a // 10, "--fragmentation", "0.2")
    assert data["verdict"] == "tight" and data["reserve_fraction_that_fits"] == 0.1
    assert data["metric"]["device_fragmentation_bytes"] == a // 5


def test_the_verdict_is_on_the_device_count_whatever_the_metric(capsys, allocated):
    a = allocated(capsys)
    for metric in ("allocated", "reserved"):
        data = verdict(capsys, a + WS + NCCL + a // 20, "--metric", metric)
        # the allocated metric's own fragmentation is 0 (its view); the device's is A / 10
        assert data["bytes"]["fragmentation"] == (0 if metric == "allocated" else a // 10)
        assert data["metric"]["device_fragmentation_bytes"] == a // 10
        assert data["verdict"] == "tight" and data["reserve_fraction_that_fits"] == 0.05


def test_latex_compares_only_the_device_count_with_the_capacity(capsys, allocated):
    # a capacity between the allocated total (A + the workspaces) and the device's
    # (A + WS + NCCL + A / 10): the allocated metric's LaTeX once wrote "<= C" (a wrong fit);
    # it names its metric and compares nothing, the device's says ">" as estimate's "tight"
    a = allocated(capsys)
    capacity = a + WS + NCCL + a // 20
    latex = {}
    for metric in ("allocated", "device"):
        code, out, err = run(capsys, "latex", *JOB[1:], "--gpu-memory", f"{capacity}B",
                             "--metric", metric)
        assert code == 0, err
        latex[metric] = out.strip().splitlines()
    assert latex["allocated"][-2].startswith(r"M_{\mathrm{GPU}}^{\mathrm{allocated}} &=")
    assert r"\leq C" not in "".join(latex["allocated"]) and "> C" not in "".join(latex["allocated"])
    assert "max\\_memory\\_allocated; the fit is judged on the device's count" \
        in latex["allocated"][-2]
    assert "> C" in "".join(latex["device"]) and r"\leq C" not in "".join(latex["device"])


def test_the_margin_option_is_kept_free_first(capsys, allocated):
    a = allocated(capsys)
    data = verdict(capsys, a + WS + NCCL + a // 20 + GB, "--margin", "1GB")
    assert data["verdict"] == "tight" and data["reserve_fraction_that_fits"] == 0.05


def test_the_text_says_tight_the_reserve_and_what_to_do(capsys, allocated):
    a = allocated(capsys)
    code, out, err = run(capsys, *JOB, "--gpu-memory", f"{a + WS + NCCL + a // 20}B")
    assert code == 1, err
    first = " ".join(out.split("\n\n", 1)[0].split())        # the first paragraph, unwrapped
    assert first.startswith("tight: fits only if the caching allocator's reserve stays under "
                            "5.0 % of the peak-phase allocation")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in first
    assert "--advise lists the single changes" in first
    assert "does NOT fit" not in out
    assert max(len(line) for line in out.splitlines()) <= 100
    flat = " ".join(out.split())
    # headroom with the margin -A/20, without it A/20, in GB
    assert f"headroom {-(a // 20) / 1e9:.3f} GB with the margin, {(a // 20) / 1e9:.3f} GB " \
           "without it" in flat
    code, out, err = run(capsys, *JOB, "--gpu-memory", f"{a + WS + NCCL + a // 20}B",
                         "--markdown")
    assert code == 1 and "tight, fits only if the allocator's reserve stays under 5.0 %" in out


def test_model_states_alone_have_no_band(capsys):
    # by hand (tests/test_margin.py): 7e9 params, distributed optimizer over d = 8:
    # 2 + 4 + 12/8 = 7.5 bytes per parameter = 52.5 GB; no fragmentation term
    argv = ("estimate", "--params", "7B", "--dp", "8", "--json", "--gpu-memory")
    code, out, _ = run(capsys, *argv, "53GB")
    data = json.loads(out)
    assert (code, data["verdict"], data["reserve_fraction_that_fits"]) == (0, "fits", None)
    code, out, _ = run(capsys, *argv, "52GB")
    data = json.loads(out)
    assert (data["fits"], data["verdict"], data["reserve_fraction_that_fits"]) == \
        (False, "does not fit", None)


def test_reserve_verdict_by_hand():
    # 70 GB allocated, 7 GB margin, 1 GB of allowances (78 GB): on 77 GB, 6 GB are left for
    # the reserve, 6/70 of the allocation
    assert reserve_verdict(78 * GB, 7 * GB, Fraction(1, 10), 77 * GB) == ("tight",
                                                                        Fraction(6, 70))
    # the fraction as a float (as --json reports it) gives the same answer
    assert reserve_verdict(78 * GB, 7 * GB, 0.1, 77 * GB) == ("tight", Fraction(6, 70))
    assert reserve_verdict(78 * GB, 7 * GB, Fraction(1, 10), 78 * GB) == ("fits",
                                                                        Fraction(1, 10))
    assert reserve_verdict(78 * GB, 7 * GB, Fraction(1, 10), 71 * GB - 1)[0] == "does not fit"


def test_a_search_that_finds_nothing_says_how_many_layouts_are_tight(capsys, allocated):
    # the same job as the one layout of a search: judged with the margin (conservative), but
    # its one-line answer says when a layout would fit without it
    a = allocated(capsys)
    search = ("search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--seq-length", "2048",
              "--tp", "1", "--pp", "1", "--cp", "1", "--micro-batch-size", "1", "--recompute",
              "full", "--sharding", "zero3", "--no-sequence-parallel", "--gpu-memory")
    code, out, err = run(capsys, *search, f"{a + WS + NCCL + a // 20}B")
    assert code == 1 and out == "" and "no layout of 8 x h100-80gb fits" in err
    assert "; 1 layout would fit without the fragmentation margin (tight:" in err
    code, out, err = run(capsys, *search, f"{a + WS + NCCL - 1}B")
    assert code == 1 and "no layout" in err and "fragmentation margin" not in err


def test_solve_judges_the_fit_on_the_device_count_whatever_the_metric():
    # the allocated total of Llama 3 8B at t 4, b 5 is under an H100's 84.94 GB while its
    # device count is over: a solve under --metric allocated once answered b = 5 (a wrong fit)
    from memsym.job import job
    from memsym.job_solver import solve_job
    from memsym.training import job_memory

    kw = dict(tp=4, seq_length=4096, gpu="h100-80gb")
    at5 = {m: job_memory(job("llama3-8b", micro_batch_size=5, metric=m, **kw)).bytes_total
           for m in ("allocated", "device")}
    cap = job("llama3-8b", **kw).capacity
    assert at5["allocated"] <= cap < at5["device"]
    sol = solve_job(job("llama3-8b", metric="allocated", **kw), "micro-batch-size")
    assert sol.value == 4 and sol.memory <= cap
    assert any("solved on the device's count" in n for n in sol.notes)


def test_each_metric_says_its_counter_first():
    # the outputs label a total with METRIC_COUNTERS; the metric's description names the same
    from memsym.terms.allowances import METRIC_COUNTERS, METRICS

    assert set(METRIC_COUNTERS) == set(METRICS)
    for name in ("allocated", "reserved"):
        assert METRICS[name][1].startswith(METRIC_COUNTERS[name] + " (")
