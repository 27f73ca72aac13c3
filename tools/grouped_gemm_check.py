"""memsym's GEMM and grouped-GEMM rates against published microbenchmarks, by shape.

``formulas/grouped_gemm_bench.toml`` holds the published points as printed (DeepGEMM's
README tables on H800, torchao's torch._grouped_mm benchmark on H100, ...).  This module
prices the same shapes on the same GPU with :func:`memsym.timing.moe.grouped_gemm_time`
(one expert per group, as memsym prices Megatron-core's routed experts) and
:func:`memsym.timing.efficiency.gemm_time`, and writes the comparison into the "Known gaps"
section of ``docs/time-accuracy.md`` (:func:`gaps_lines`).  Nothing is fitted to these
points; :func:`k0_fit` only says what the short-K constant would be if it were.

Run ``python tools/grouped_gemm_check.py`` for the full table.
"""

from __future__ import annotations

import pathlib
import sys
import tomllib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from memsym.hardware import gpu  # noqa: E402
from memsym.timing.efficiency import K0, LAUNCH_OVERHEAD, ceiling, gemm_time  # noqa: E402
from memsym.timing.moe import grouped_gemm_time  # noqa: E402

BENCH = ROOT / "formulas" / "grouped_gemm_bench.toml"
#: The point each source's ratios are normalised to (memsym's ceiling is fixed on whole
#: training runs, not on these kernels, so a source's absolute level is not the check; its
#: shape trend is): DeepGEMM's grouped DeepSeek-V3 fc1 shape, the shape the blackwell/bf16
#: calibration run's expert GEMMs have; torchao's B200 tables at their DeepSeek-V3 forward
#: (MXFP8) and their one-group DeepSeek-V3 forward + backward (BF16).
REFERENCE = {"deepgemm-readme-2504": ("grouped", 4, 8192, 4096, 7168),
             "torchao-readme-mxfp8-b200": ("grouped", 8, 16384, 2048, 7168),
             "torchao-readme-bf16-b200": ("grouped-fwd-bwd", 1, 128000, 2048, 7168)}
#: FLOPs of a point's kind in units of 2 G m n k: the forward, input-gradient and
#: weight-gradient GEMMs of ``grouped-fwd-bwd`` are three GEMMs of the same size.
PASSES = {"dense": 1, "grouped": 1, "grouped-fwd-bwd": 3}


def load(path=BENCH) -> tuple:
    """(sources by key, points) of the benchmark file."""
    data = tomllib.loads(pathlib.Path(path).read_text())
    return {s["key"]: s for s in data["source"]}, tuple(data["point"])


def published_tflops(p) -> float:
    """The point's rate [TFLOP/s]: as printed, or 2 G m n k / seconds where a time is printed
    (three times that for a forward + backward, :data:`PASSES`).

    >>> published_tflops({"groups": 2, "m": 1000, "n": 1000, "k": 1000, "seconds": 4e-6})
    1000.0
    >>> published_tflops({"kind": "grouped-fwd-bwd", "groups": 2, "m": 1000, "n": 1000,
    ...                   "k": 1000, "seconds": 12e-6})
    1000.0
    """
    if "tflops" in p:
        return float(p["tflops"])
    passes = PASSES[p.get("kind", "grouped")]
    return passes * 2.0 * p["groups"] * p["m"] * p["n"] * p["k"] / p["seconds"] / 1e12


def memsym_tflops(p, device, precision) -> float:
    """memsym's rate for the point's shape [TFLOP/s].

    A forward + backward is priced as memsym prices an expert's three GEMMs: the forward
    [m, k] x [k, n], the input gradient [m, n] x [n, k] and the weight gradient
    [n, m] x [m, k], each grouped over the G experts.
    """
    g, m, n, k = p["groups"], p["m"], p["n"], p["k"]
    if p["kind"] == "grouped":
        t = grouped_gemm_time(m, n, k, g, device, precision)
    elif p["kind"] == "grouped-fwd-bwd":
        t = (grouped_gemm_time(m, n, k, g, device, precision)
             + grouped_gemm_time(m, k, n, g, device, precision)
             + grouped_gemm_time(n, k, m, g, device, precision))
    else:
        t = gemm_time(m, n, k, device, precision)
    return float(PASSES[p["kind"]] * 2.0 * g * m * n * k / t / 1e12)


def compare(path=BENCH) -> list:
    """One dict per used point: shape, published and memsym rates, their ratio, and the ratio
    over the source's reference point's (``norm``; None where the source has none)."""
    sources, points = load(path)
    rows = []
    for p in points:
        if not p.get("use", True):
            continue
        s = sources[p["source"]]
        pub = published_tflops(p)
        mem = memsym_tflops(p, s["device"], s["precision"])
        rows.append(dict(source=p["source"], kind=p["kind"], groups=p["groups"], m=p["m"],
                         n=p["n"], k=p["k"], gpu=s["gpu"], precision=s["precision"],
                         published=pub, memsym=mem, ratio=mem / pub))
    for key, ref in REFERENCE.items():
        base = next(r["ratio"] for r in rows if r["source"] == key
                    and (r["kind"], r["groups"], r["m"], r["n"], r["k"]) == ref)
        for r in rows:
            if r["source"] == key:
                r["norm"] = r["ratio"] / base
    for r in rows:
        r.setdefault("norm", None)
    return rows


def k0_fit(path=BENCH, candidates=range(0, 1025, 32)) -> tuple:
    """The short-K constant that flattens DeepGEMM's M = 4096 dense and contiguous grouped
    rows best, in FP8 elements: ``(K0, scatter at memsym's K0, scatter at the fit)``, scatter
    the standard deviation of log(memsym / published).

    memsym's math time carries ``(K + K0) / K`` (:data:`memsym.timing.efficiency.K0`); every
    point used is math-bound, so re-pricing at another K0 scales the time less its launch.
    """
    sources, points = load(path)
    rows = [p for p in points if p["source"] == "deepgemm-readme-2504"
            and p["m"] >= 4096 and p.get("layout", "contiguous") == "contiguous"]
    s = sources["deepgemm-readme-2504"]
    dev = gpu(s["device"])
    k = np.array([p["k"] for p in rows], float)
    pub = np.array([published_tflops(p) for p in rows])
    work = np.array([2.0 * p["groups"] * p["m"] * p["n"] * p["k"] for p in rows])
    launch = np.array([p["groups"] * LAUNCH_OVERHEAD for p in rows])
    t = work / np.array([memsym_tflops(p, dev, s["precision"]) for p in rows]) / 1e12
    mem = np.array([(p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"]) * p["groups"]
                    for p in rows]) / dev.hbm_bandwidth
    assert np.all(t - launch > mem), "a point is memory-bound: rescaling the math time is wrong"

    def scatter(k0):
        tk = launch + (t - launch) * (k + k0) / (k + K0)
        return float(np.std(np.log(work / tk / 1e12 / pub)))

    best = min(candidates, key=scatter)
    return int(best), scatter(K0), scatter(best)


def _fmt(r) -> str:
    shape = (f"{r['groups']} x {r['m']} x {r['n']} x {r['k']}" if r["kind"] != "dense"
             else f"{r['m']} x {r['n']} x {r['k']}")
    norm = "" if r["norm"] is None else f"{r['norm']:.2f}"
    return (f"| {r['source']} | {r['gpu'].split(' (')[0]} {r['precision']} | {r['kind']} | "
            f"{shape} | {r['published']:.0f} | {r['memsym']:.0f} | {r['ratio']:.2f} | {norm} |")


def table(rows, *, grouped_only=True) -> list:
    """Markdown table lines of :func:`compare` rows."""
    out = ["| source | GPU / precision | kind | G x m x n x k | published TFLOP/s | "
           "memsym TFLOP/s | memsym / published | over reference |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    out += [_fmt(r) for r in rows if r["kind"] != "dense" or not grouped_only]
    return out


#: Forward fc1 of the routed experts in the MoE validation runs, balanced routing, as
#: ``(label, device, local experts, rows per expert, n, k)``: GPT-OSS 120B (h 2880, expert FFN
#: 2880, GLU: n 5760; 128 experts top-4, seq 4096) at EP 8 with MBS 4 (B200), EP 64 with
#: MBS 4 (GB200) and EP 8 with MBS 1 (H100); DeepSeek-V3 (h 7168, expert FFN 2048; 256
#: experts top-8) at EP 64 with MBS 1, the blackwell/bf16 calibration run (GB200).
EXPERT_FC1 = (("GPT-OSS B200 EP 8", "b200", 16, 4096, 5760, 2880),
              ("GPT-OSS GB200 EP 64", "gb200", 2, 32768, 5760, 2880),
              ("GPT-OSS H100 EP 8", "h100-80gb", 16, 1024, 5760, 2880),
              ("DeepSeek-V3 GB200 EP 64", "gb200", 4, 8192, 4096, 7168))


def expert_fractions() -> dict:
    """memsym's bf16 rate for each :data:`EXPERT_FC1` GEMM over its class's ceiling x peak [1]."""
    out = {}
    for label, dev, g, m, n, k in EXPERT_FC1:
        t = grouped_gemm_time(m, n, k, g, dev, "bf16")
        out[label] = float(2.0 * g * m * n * k / t / (gpu(dev).peak("bf16") * ceiling(dev)))
    return out


def blackwell_lines(rows) -> tuple:
    """The "Known gaps" lines on torchao's B200 points and on the validation runs' expert
    sizes (Markdown); ``rows`` are :func:`compare`'s."""
    mx = {(r["m"], r["n"], r["k"]): r["ratio"] for r in rows
          if r["source"] == "torchao-readme-mxfp8-b200"}
    # the same points at the fp8 ceiling (per-tensor FP8's): what the mxfp8 one adds
    at_fp8 = {(r["m"], r["n"], r["k"]): r["ratio"] * memsym_tflops(r, "b200", "fp8")
              / r["memsym"] for r in rows if r["source"] == "torchao-readme-mxfp8-b200"}
    bf = {(r["n"], r["k"]): r for r in rows if r["source"] == "torchao-readme-bf16-b200"}
    return (
        "  On Blackwell (torchao's B200 tables, issue 31): MXFP8 grouped GEMMs of DeepSeek-V3's",
        "  experts (8 groups, 16384 rows each): memsym / published "
        f"{mx[(16384, 2048, 7168)]:.2f}",
        f"  forward and {mx[(16384, 7168, 2048)]:.2f} input gradient at the blackwell/mxfp8 "
        "ceiling fixed on a dense training run's",
        f"  FP8-MX value, {at_fp8[(16384, 2048, 7168)]:.2f} and "
        f"{at_fp8[(16384, 7168, 2048)]:.2f} at the fp8 one fixed on its FP8-CS value: the "
        "MXFP8 kernels",
        "  run at memsym's per-tensor FP8 price, and the slowdown the MXFP8 ceiling carries is not in "
        "these GEMMs",
        "  (where it is, casts or scale layout, is open)",
        f"  ({mx[(2048, 7168, 16384)]:.2f} for the weight gradient's 2D-2D kernel, the case "
        "torchao's README says is slow);",
        "  torch._grouped_mm BF16, forward + backward in one group, runs "
        f"{1 / bf[(2048, 7168)]['ratio']:.2f} of memsym's rate at",
        f"  DeepSeek-V3's shape and {1 / bf[(8192, 5120)]['ratio']:.2f} at Llama 4's "
        "(n 8192, k 5120): the larger expert is the",
        "  slower, no small-expert penalty.  Nor are the validation runs' experts small:",
        "  balanced routing gives 1024-32768 rows per local expert and micro-batch (Qwen3-30B-A3B",
        "  2048-16384, Nemotron-3 Nano 3072-12288), and the MoE rows miss most where the rows",
        "  are most (Qwen3-30B-A3B on GB300: -17 to -21 % at MBS 8, +6 % at MBS 4; GPT-OSS on",
        "  GB200: -27 to -33 % at MBS 4, +3.5 % at MBS 1), the opposite of a small-M penalty.",
        "  Priced without the host floor, closing the B200 / GB300 Qwen3-30B-A3B, B200 GPT-OSS",
        "  and GB300 Nemotron-3 Nano rows with the expert GEMMs alone would take them 2.2-4x",
        "  slower than memsym prices them (1.1-1.6 s of those steps; the shortfall 1.7-4.7 s);",
        "  every expert GEMM 1.5x slower, all ceilings and the host floor re-derived, moves MoE",
        "  15.1 -> 13.4 % and B300 22.5 -> 20.1 % (one-off checks at 9b57b82, not kept).  The",
        "  MoE layer's streaming memory-bound kernels (casts, activation) are priced at the",
        "  datasheet HBM rate (its row permutes at a gather's, `memsym.timing.moe_copies`);",
        "  torchao's B200 kernel table has its MXFP8 cast kernels at 68-82 %",
        "  of 0.92 x 8 TB/s (63-75 % of the datasheet).  At 0.694 of it on Blackwell (their",
        "  mean; ceilings and floor re-derived) MoE goes 15.1 -> 13.6 %, dense 7.2 -> 8.0 %,",
        "  B300 22.5 -> 20.9 % (one-off check at 9b57b82, not kept): neither is the gap.",
    )


def gaps_lines() -> tuple:
    """The "Known gaps" lines on grouped-GEMM rates (Markdown), computed from the file."""
    rows = compare()
    small = [r["norm"] for r in rows if r["norm"] is not None and r["kind"] == "grouped"
             and r["m"] <= 1024]
    mid = [r["norm"] for r in rows if r["norm"] is not None and r["kind"] == "grouped"
           and r["m"] == 4096]
    ao = [r["ratio"] for r in rows if r["source"] == "torchao-pr2490"]
    best, before, after = k0_fit()
    fr = expert_fractions()
    return (
        "* Grouped-GEMM rates by shape, checked against published microbenchmarks",
        "  (`formulas/grouped_gemm_bench.toml`, `python tools/grouped_gemm_check.py`): do",
        "  GPT-OSS's expert GEMMs (hidden 2880, expert FFN 2880) run well below DeepSeek-V3's",
        "  at one ceiling?  They are not small: balanced routing gives each local expert 4096",
        "  rows per micro-batch at EP 8 with MBS 4, 32768 at EP 64, 1024 on H100 (MBS 1).",
        "  memsym prices their fc1 at " + " / ".join(
            f"{v:.2f}" for k, v in fr.items() if k.startswith("GPT")) + " of the class's",
        "  large-GEMM rate (tile and wave quantisation, short K) and DeepSeek-V3's at "
        f"{fr['DeepSeek-V3 GB200 EP 64']:.2f};",
        "  closing the -15 to -50 % would take the expert GEMMs about 1.2x to over 2x slower.  The",
        "  published points show no shape effect of that size.  memsym / published,",
        "  normalised to DeepGEMM's 4 x 8192 x 4096 x 7168 (DeepSeek-V3's fc1), is",
        f"  {min(mid):.2f}-{max(mid):.2f} at 4096 rows per group and "
        f"{min(small):.2f}-{max(small):.2f} (mean {np.mean(small):.2f}) at",
        "  256-1024 rows in 1-4 groups (1024 rows in all: memsym up to 15 % fast there, a",
        "  GPU filled less than in any validation run); torch._grouped_mm bf16 on H100 at 512 rows",
        "  per expert (uneven routing, 16 experts) is within "
        f"{100 * (min(ao) - 1):+.0f} to {100 * (max(ao) - 1):+.0f} % of memsym's",
        "  hopper/bf16 price; tgale96/grouped_gemm#37's H100 points are kept, not compared",
        "  (host time included, token count ambiguous).",
        *blackwell_lines(rows),
        "",
        *("  " + line for line in table(rows)),
        "",
        "  What the points do show is a short-K penalty memsym underprices: DeepGEMM's",
        "  M = 4096 rows (K 512-16384) scatter by "
        f"{100 * before:.0f} % around memsym's shape trend with",
        f"  K0 = {K0} and by {100 * after:.0f} % with K0 = {best} FP8 elements (a fixed per-tile",
        "  prologue/epilogue time; about half as many BF16 elements).  Priced that way (K0",
        "  225 bf16 / 450 fp8, every ceiling re-derived on its calibration run; a one-off",
        "  check at 22b6a2d, not kept) the GPT-OSS rows move by under 2 points (GPT-OSS's K",
        "  is 2880 and 5760, DeepSeek-V3's 2048-7168) and the mean absolute error over the",
        "  validation runs goes from 13.1 to 13.4 %, so K0 stays a stated assumption.",
    )


def main() -> int:
    rows = compare()
    print("\n".join(table(rows, grouped_only=False)))
    best, before, after = k0_fit()
    print(f"\nK0 fit on DeepGEMM's M = 4096 rows: K0 = {best} (scatter {before:.3f} at "
          f"K0 = {K0}, {after:.3f} at the fit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
