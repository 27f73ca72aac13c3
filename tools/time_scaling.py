"""The "Scaling" section of ``docs/time-accuracy.md`` (:func:`tools.time_accuracy.
accuracy_markdown` appends it): published strong-scaling series, the measured scaling
efficiency against memsym's, kept beside the generator so that stays short.

A series is the runs of one source that differ only in the data-parallel size ``d`` (same
model, sequence, TP, PP, CP, interleaving and settings) with one global batch (strong) or one
batch per data-parallel rank (weak).  Efficiency of a row against the series' smallest run
:math:`(N_0, T_0, B_0)`: :math:`E = (B / (T N)) / (B_0 / (T_0 N_0))` [1].
"""

from __future__ import annotations

import json


#: What the MegaScale residual is and is not (Markdown lines after the table).
SCALING_NOTES = (
    "",
    "MegaScale's Megatron-LM baseline (Jiang et al., NSDI 2024, Table 2) runs commit",
    "285068c8 (2023-01-11), which overlaps neither the data-parallel reduce-scatter /",
    "all-gather (`--overlap-grad-reduce` came in 2d5220a424, 2023-09-05) nor the pipeline",
    "sends (`--overlap-p2p-communication` came in f9283c5a8a, 2023-05-31; that commit's",
    "p2p_communication.py waits on every batch_isend_irecv and calls",
    "torch.cuda.synchronize()): both are priced exposed.  The rest of memsym's shortfall",
    "(\"unpriced\") is not data-parallel communication growing with scale: rows with the",
    "same micro-batches per rank and eight times the data-parallel size (768 and 6,144",
    "GPUs, m = 64; 1,024 and 8,192 GPUs, m = 48) miss by about the same seconds, both ways,",
    "while the priced reduce-scatter + all-gather (fp32 gradients, bf16 weights, 25 GB/s",
    "per GPU on its own rail, §3.6: eight 200 Gb/s NICs per server) is 0.5-0.7 s at every",
    "size.  A bandwidth shortfall would need about a third of the NIC's line rate at",
    "d = 16 yet none at d = 4; a per-ring-step latency that closes d = 16 (about 7 ms per",
    "step) would add about 15 s at d = 192.  MegaScale's own account of the baseline at",
    "256 GPUs (Table 3: DP overlap +1.5 % MFU, about 0.3 s of a batch-256 step hidden) is",
    "of the order of the priced 0.5 s at d = 4.  Not priced, no microbenchmark to price from:",
    "stragglers (§5.1: about 0.5 % of machines markedly slower; §6.3: +0.7 % MFU once",
    "removed; the synchronous reduce-scatter waits for the slowest rank) and the per-step",
    "data-loading idle time §3.4 describes (Table 3: data pipeline + code fixes +1.1 % MFU).",
    "Weak scaling (Figure 9, 530B) is flat in both (98.0 % measured, 99.9 % memsym at",
    "11,200 GPUs); its rows miss by a level, not a trend: a 530B of the same depth and width",
    "(128 heads, V = 51,200) on 2,240 A100s at the same batch runs 39.15 s in Korthikanti et",
    "al. (v = 1, `korthikanti.530b.dp8`) against 43.1 s for MegaScale's baseline (v = 3).",
)


def _series_key(run) -> str:
    lay = {k: v for k, v in run["layout"].items() if k != "d"}
    st = {k: v for k, v in run["settings"].items() if k != "B"}
    model = run.get("gpt") or run.get("preset")
    return json.dumps([run["source"], model, run.get("vocab"), lay, st,
                       run["gpu"], run["cluster"]], sort_keys=True, default=str)


def scaling_series(runs, results) -> list:
    """Scaling series: lists of (run, result) sorted by GPUs, two rows or more each.

    Strong: one global batch, several data-parallel sizes; weak: the rows left, one batch
    per data-parallel rank.  ``runs``: the ``[[run]]`` entries; ``results``:
    :func:`tools.time_accuracy.validate`'s Results in the same order.  Ratio rows are left
    out (their absolute step is not compared).
    """
    groups: dict = {}
    for run, res in zip(runs, results):
        if run["role"] not in ("validation", "calibration"):
            continue
        groups.setdefault(_series_key(run), []).append((run, res))
    out = []
    for rows in groups.values():
        left = []
        for part in _split(rows, lambda r: r["settings"]["B"]):              # strong
            (out.append(part) if len(part) > 1 else left.extend(part))
        out += [part for part in _split(left, lambda r: r["settings"]["B"] / r["layout"]["d"])
                if len(part) > 1]                                                # weak
    return sorted(out, key=lambda rows: (rows[0][0]["id"], _gpus(rows[0][0])))


def _split(rows, key) -> list:
    """``rows`` grouped by ``key`` of the run, each group sorted by GPUs, one row per ``d``."""
    parts: dict = {}
    for rr in rows:
        parts.setdefault(key(rr[0]), {}).setdefault(rr[0]["layout"]["d"], rr)
    return [sorted(p.values(), key=lambda rr: _gpus(rr[0])) for p in parts.values()]


def _gpus(run) -> int:
    lay = run["layout"]
    return lay["t"] * lay["p"] * lay["d"] * lay.get("c", 1)


def scaling_lines(runs, results) -> list:
    """The section's Markdown lines (measured and memsym's efficiency per series row)."""
    lines = ["", "## Scaling: strong (fixed global batch) and weak (fixed batch per rank)", "",
             "Each series: one source's runs that differ only in the data-parallel size (and,",
             "weak, the global batch with it).  Efficiency against the series' first row: the",
             "per-GPU throughput ratio (B / (T N)) / (B0 / (T0 N0)), measured and memsym's.",
             "", "| run | GPUs | d | micro-batches per rank | measured step [s] | memsym [s] | "
             "measured efficiency | memsym efficiency | step error | unpriced [s] |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for rows in scaling_series(runs, results):
        run0, res0 = rows[0]
        n0 = _gpus(run0)
        for run, res in rows:
            n = _gpus(run)
            lay, st = run["layout"], run["settings"]
            m = st["B"] // (st["b"] * lay["d"])
            grow = st["B"] / run0["settings"]["B"]       # 1 at fixed batch
            e_meas = grow * res0.measured * n0 / (res.measured * n)
            e_pred = grow * res0.predicted * n0 / (res.predicted * n)
            lines.append(f"| `{run['id']}` | {n:,} | {lay['d']} | {m} | {res.measured:.2f} | "
                         f"{res.predicted:.2f} | {100 * e_meas:.1f} % | {100 * e_pred:.1f} % | "
                         f"{100 * res.error:+.1f} % | {res.measured - res.predicted:+.2f} |")
    return lines + list(SCALING_NOTES)
