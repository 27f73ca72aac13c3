"""The "Scaling" section of ``docs/time-accuracy.md`` (:func:`tools.time_accuracy.
accuracy_markdown` appends it): published strong-scaling series, the measured scaling
efficiency against memsym's, kept beside the generator so that stays short.

A series is the runs of one source that differ only in the data-parallel size ``d`` (same
model, global batch, sequence, TP, PP, CP, interleaving and settings).  Efficiency of a row
against the series' smallest run :math:`(N_0, T_0)`: :math:`E = T_0 N_0 / (T N)` [1].
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
)


def _series_key(run) -> str:
    lay = {k: v for k, v in run["layout"].items() if k != "d"}
    model = run.get("gpt") or run.get("preset")
    return json.dumps([run["source"], model, run.get("vocab"), lay, run["settings"],
                       run["gpu"], run["cluster"]], sort_keys=True, default=str)


def scaling_series(runs, results) -> list:
    """Strong-scaling series: lists of (run, result) sorted by GPUs, two rows or more.

    ``runs``: the ``[[run]]`` entries; ``results``: :func:`tools.time_accuracy.validate`'s
    Results in the same order.  Ratio rows are left out (their absolute step is not compared).
    """
    groups: dict = {}
    for run, res in zip(runs, results):
        if run["role"] not in ("validation", "calibration"):
            continue
        groups.setdefault(_series_key(run), []).append((run, res))
    out = []
    for rows in groups.values():
        if len({r["layout"]["d"] for r, _ in rows}) > 1:
            out.append(sorted(rows, key=lambda rr: _gpus(rr[0])))
    return sorted(out, key=lambda rows: rows[0][0]["id"])


def _gpus(run) -> int:
    lay = run["layout"]
    return lay["t"] * lay["p"] * lay["d"] * lay.get("c", 1)


def scaling_lines(runs, results) -> list:
    """The section's Markdown lines (measured and memsym's efficiency per series row)."""
    lines = ["", "## Scaling at fixed global batch (strong scaling)", "",
             "Each series: one source's runs that differ only in the data-parallel size.",
             "Efficiency against the series' first row: T0 N0 / (T N), measured and memsym's.",
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
            e_meas = res0.measured * n0 / (res.measured * n)
            e_pred = res0.predicted * n0 / (res.predicted * n)
            lines.append(f"| `{run['id']}` | {n:,} | {lay['d']} | {m} | {res.measured:.2f} | "
                         f"{res.predicted:.2f} | {100 * e_meas:.1f} % | {100 * e_pred:.1f} % | "
                         f"{100 * res.error:+.1f} % | {res.measured - res.predicted:+.2f} |")
    return lines + list(SCALING_NOTES)
