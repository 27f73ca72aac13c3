"""``--margin`` (issue 33): a safety margin a job must leave free to be called "fits".

Every expectation is derived by hand from the bytes the same run reports in JSON: a layout
fits within the margin when its total is at most capacity - margin.
"""

import json
from fractions import Fraction

import pytest

from in_process import run

GB = 10**9
#: One small search: Llama-2-7B on 8 GPUs, t = p = c = 1, two shardings (zero3 needs far less
#: than the distributed optimizer), so that the capacity can be set just above the larger one.
SEARCH = ("search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", "8", "--seq-length", "2048",
          "--tp", "1", "--pp", "1", "--cp", "1", "--micro-batch-size", "1", "--recompute",
          "full", "--sharding", "zero3", "distributed-optimizer", "--no-sequence-parallel",
          "--json")
MIN_GPUS = ("min-gpus", "llama2-7b", "--gpu", "h100-80gb", "--seq-length", "2048", "--tp", "1",
            "--pp", "1", "--cp", "1", "--micro-batch-size", "1", "--recompute", "full",
            "--sharding", "zero3", "--no-sequence-parallel", "--json")


def _totals(rows):
    return {r["layout"]["sharding"]: r["bytes"]["total"] for r in rows}


def test_search_margin_excludes_a_layout_with_049_gb_free(capsys):
    code, out, _ = run(capsys, *SEARCH)
    assert code == 0
    totals = _totals(json.loads(out))
    big, small = totals["distributed-optimizer"], totals["zero3"]
    assert big - small > GB        # so that a 1 GB margin keeps zero3 and drops the other
    cap = big + 49 * GB // 100    # the distributed optimizer leaves 0.49 GB free
    code, out, _ = run(capsys, *SEARCH, "--gpu-memory", f"{cap}B")
    rows = json.loads(out)
    assert code == 0 and set(_totals(rows)) == {"zero3", "distributed-optimizer"}
    do = [r for r in rows if r["layout"]["sharding"] == "distributed-optimizer"][0]
    # (the headroom is against the exact total; the bytes are rounded up to whole bytes)
    assert do["fits"] and 0.49 * GB <= do["headroom_bytes"] < 0.49 * GB + 1
    assert do["margin_bytes"] == 0
    code, out, _ = run(capsys, *SEARCH, "--gpu-memory", f"{cap}B", "--margin", "1GB")
    rows = json.loads(out)
    # by hand: only the layouts whose total is at most cap - 1e9 are ranked
    assert code == 0 and _totals(rows) == {k: v for k, v in totals.items() if v <= cap - GB}
    assert _totals(rows) == {"zero3": small}
    assert rows[0]["margin_bytes"] == GB and rows[0]["gpu_memory_bytes"] == cap
    assert rows[0]["headroom_bytes"] == pytest.approx(cap - GB - small, abs=1)


def test_search_margin_text_names_it(capsys):
    code, out, _ = run(capsys, *SEARCH[:-1], "--gpu-memory", "80GB", "--margin", "0.05")
    assert code == 0
    # 5 % of 80 GB is 4 GB: the layouts must fit 76 GB
    assert "(80 GB each; less a 4 GB margin: fit within 76 GB)" in out


def test_min_gpus_answers_more_gpus_with_a_margin(capsys):
    code, out, _ = run(capsys, *MIN_GPUS, "--gpu-memory", "20GB")
    plain = json.loads(out)
    assert code == 0 and plain["margin_bytes"] == 0 and plain["bytes"]["total"] <= 20 * GB
    # the answer's own total leaves less than 1 GB free, so a 1 GB margin must refuse it
    assert plain["bytes"]["total"] > 19 * GB
    code, out, _ = run(capsys, *MIN_GPUS, "--gpu-memory", "20GB", "--margin", "1GB")
    kept = json.loads(out)
    assert code == 0 and kept["margin_bytes"] == GB
    assert kept["gpus"] > plain["gpus"] and kept["bytes"]["total"] <= 19 * GB


def test_estimate_judges_fits_against_capacity_less_margin(capsys):
    # model states alone, by hand: 7e9 params, distributed optimizer over d = 8 (framework
    # convention): 2 + 4 + 12/8 = 7.5 bytes/param = 52.5 GB; 56 GB fits, 56 GB less 4 GB not
    argv = ("estimate", "--params", "7B", "--dp", "8", "--gpu-memory", "56GB", "--json")
    code, out, _ = run(capsys, *argv)
    data = json.loads(out)
    assert data["bytes"]["total"] == Fraction(75, 10) * 7 * GB
    assert code == 0 and data["fits"] is True and data["margin_bytes"] == 0
    code, out, _ = run(capsys, *argv, "--margin", "4GB")
    data = json.loads(out)
    assert data["fits"] is False and data["margin_bytes"] == 4 * GB
    code, out, _ = run(capsys, *argv[:-1], "--margin", "0.05")
    # 5 % of 56 GB = 2.8 GB kept: 53.2 GB usable, 0.7 GB headroom
    assert "less a 2.800 GB margin (--margin): fits, headroom 0.700 GB" in out


def test_estimate_job_margin_and_advice(capsys):
    argv = ("estimate", "llama2-7b", "--seq-length", "2048", "--dp", "8", "--sharding", "zero3",
            "--recompute-granularity", "full", "--json")
    code, out, _ = run(capsys, *argv, "--gpu-memory", "80GB")
    device = json.loads(out)["metric"]["device_bytes_total"]
    cap = device + GB // 2
    # (0.5 GB over capacity - margin: "tight" or "does not fit"; --advise lists the levers)
    code, out, _ = run(capsys, *argv, "--gpu-memory", f"{cap}B", "--margin", "1GB", "--advise")
    data = json.loads(out)
    assert code == 1 and data["fits"] is False and data["margin_bytes"] == GB
    # every lever makes the job fit within capacity - margin, not the capacity alone
    assert data["advice"] and all(a["bytes_total"] <= cap - GB for a in data["advice"])


def test_solve_against_capacity_less_margin(capsys):
    argv = ("solve", "dp", "--params", "70B", "--gpu-memory", "80GB", "--sharding", "zero3",
            "--convention", "zero-paper", "--json")
    code, out, _ = run(capsys, *argv)
    # ZeRO-3 (ZeRO §5): 16 N / d <= C: d >= 16 * 70e9 / 80e9 = 14; with 0.25 margin
    # (60 GB usable) d >= 16 * 70e9 / 60e9 = 18.67 -> 19
    assert json.loads(out)["value"] == 14
    code, out, _ = run(capsys, *argv, "--margin", "0.25")
    data = json.loads(out)
    assert code == 0 and data["value"] == 19 and data["margin_bytes"] == 20 * GB
    assert data["gpu_memory_bytes"] == 80 * GB


@pytest.mark.parametrize("bad, said", [
    (("--margin", "0.6"), "expected a fraction 0 .. 1/2"),
    (("--margin", "3"), "expected a fraction 0 .. 1/2"),
    (("--margin", "80GB"), "leaves nothing of the 80.000 GB capacity"),
])
def test_margin_refused(capsys, bad, said):
    code, out, err = run(capsys, "estimate", "--params", "7B", "--gpu-memory", "80GB", *bad)
    assert code == 2 and out == "" and said in err and "Traceback" not in err


def test_margin_needs_a_capacity(capsys):
    code, out, err = run(capsys, "estimate", "--params", "7B", "--margin", "0.1")
    assert code == 2 and out == "" and "--margin needs a capacity" in err
