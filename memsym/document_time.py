r"""The whole-job document's step-time and communication section, as LaTeX or Markdown.

Prints a cluster report of :func:`memsym.timing.report.step_report` (what ``memsym estimate
--gpu ... --json`` reports under ``step_time_s``, ``step_time_parts_s`` and
``communication``): the step time split into its parts, as
:func:`memsym.timing.step.step_time` adds them,

.. math:: T_{\mathrm{step}} = m\,\tau_{\max} + T_{\mathrm{bubble}} + T_{\mathrm{dp}}
    + T_{\mathrm{opt}},

and each parallel group's traffic per step: bytes, link, seconds before overlap and the
seconds left exposed.  The numbers are the report's own, only formatted.
"""

from __future__ import annotations

__all__ = ["step_lines", "step_rows", "comm_rows", "cluster_sentences", "GROUP_NAMES"]

#: The parallel groups in the order the document lists them, with their names.
GROUP_NAMES = {"tp": "TP (tensor)", "cp": "CP (context)", "ep": "EP (expert)",
               "pp": "PP (pipeline)", "dp": "DP (data)"}

#: The parts of ``step_time_parts_s`` inside :math:`m\,\tau_{\max}` (the busiest stage's
#: micro-batches), with the symbol and the meaning the document gives each
#: (:func:`memsym.timing.step.step_time_grid`'s ``out``).
_STAGE_PARTS = (("compute", r"T_{\mathrm{gemm}}", "GEMMs and attention"),
                ("memory", r"T_{\mathrm{mem}}", "memory-bound operations (HBM bandwidth)"),
                ("tp", r"T_{\mathrm{tp}}", "exposed tensor-parallel collectives"),
                ("ep", r"T_{\mathrm{ep}}", "exposed expert-parallel all-to-all"),
                ("cp", r"T_{\mathrm{cp}}", "exposed context-parallel ring"),
                ("pp", r"T_{\mathrm{pp}}", "exposed pipeline send/receive"))
#: The parts outside the stage's micro-batches.
_STEP_PARTS = (("bubble", r"T_{\mathrm{bubble}}", "pipeline fill and drain (exact schedule)"),
               ("dp", r"T_{\mathrm{dp}}", "exposed data-parallel gradient reduction and "
                                          "parameter gather"),
               ("optimizer", r"T_{\mathrm{opt}}", "optimizer step (HBM bandwidth)"))


def _parts(cluster: dict) -> dict:
    return {k: float(v) for k, v in (cluster.get("step_time_parts_s") or {}).items()}


def _rest(parts: dict) -> float:
    r"""Seconds of :math:`m\,\tau_{\max}` outside the per-layer parts: the busiest stage's
    embedding, output layer and loss (``pipeline - bubble`` minus the per-layer parts;
    never negative by construction, clipped for float residue)."""
    stage = parts.get("pipeline", 0.0) - parts.get("bubble", 0.0)
    return max(0.0, stage - sum(parts.get(k, 0.0) for k, _, _ in _STAGE_PARTS))


def step_rows(cluster: dict) -> list[tuple[str, str, str, str]]:
    r"""(LaTeX symbol, seconds, share of the step [%], meaning) of every part of the step.

    Empty when the report carries no breakdown (the closed-form step time).

    Examples
    --------
    >>> rep = {"step_time_s": 2.0, "step_time_parts_s": {
    ...     "pipeline": 1.5, "bubble": 0.5, "compute": 0.75, "memory": 0.25, "tp": 0.0,
    ...     "ep": 0.0, "cp": 0.0, "pp": 0.0, "dp": 0.25, "optimizer": 0.25}}
    >>> step_rows(rep)[0]
    ('T_{\\mathrm{gemm}}', '0.7500', '37.5', 'GEMMs and attention')
    >>> [r[1] for r in step_rows(rep)]
    ['0.7500', '0.2500', '0.0000', '0.0000', '0.0000', '0.0000', '0.0000', '0.5000', '0.2500', '0.2500']
    """
    parts = _parts(cluster)
    if not parts:
        return []
    total = float(cluster.get("step_time_s") or 0.0)
    rows = [(sym, parts.get(key, 0.0), meaning) for key, sym, meaning in _STAGE_PARTS]
    rows.append((r"T_{\mathrm{ends}}", _rest(parts),
                 "the busiest stage's embedding, output layer and loss"))
    rows += [(sym, parts.get(key, 0.0), meaning) for key, sym, meaning in _STEP_PARTS]
    return [(sym, f"{sec:.4f}", f"{100 * sec / total:.1f}" if total > 0 else "0.0", meaning)
            for sym, sec, meaning in rows]


def step_lines(cluster: dict) -> list[str]:
    r"""The step time as ``align*`` lines: its sum in symbols, the busiest stage's
    micro-batches in symbols, and the sum at the report's values [s].

    Examples
    --------
    >>> rep = {"step_time_s": 2.0, "step_time_parts_s": {
    ...     "pipeline": 1.5, "bubble": 0.5, "compute": 0.75, "memory": 0.25, "tp": 0.0,
    ...     "ep": 0.0, "cp": 0.0, "pp": 0.0, "dp": 0.25, "optimizer": 0.25}}
    >>> step_lines(rep)[-1]
    'T_{\\mathrm{step}} &= 1.0000 + 0.5000 + 0.2500 + 0.2500\\ \\mathrm{s} = 2.0000\\ \\mathrm{s}'
    """
    parts = _parts(cluster)
    if not parts:
        return []
    stage = parts.get("pipeline", 0.0) - parts.get("bubble", 0.0)
    outer = [stage] + [parts.get(k, 0.0) for k, _, _ in _STEP_PARTS]
    return [r"T_{\mathrm{step}} &= m\,\tau_{\max} + " + " + ".join(s for _, s, _ in _STEP_PARTS),
            r"m\,\tau_{\max} &= " + " + ".join(s for _, s, _ in _STAGE_PARTS)
            + r" + T_{\mathrm{ends}}",
            r"T_{\mathrm{step}} &= " + " + ".join(f"{x:.4f}" for x in outer)
            + rf"\ \mathrm{{s}} = {float(cluster['step_time_s']):.4f}\ \mathrm{{s}}"]


def _link(cluster: dict, link: str) -> str:
    """``intra-node, 450 GB/s`` from the report's assumptions (bandwidth per direction)."""
    a_ = cluster.get("assumptions") or {}
    bw = a_.get(f"{link}_node_bandwidth_bytes_per_s")
    name = {"intra": "intra-node", "inter": "inter-node"}.get(link, link)
    return f"{name}, {float(bw) / 1e9:g} GB/s" if bw else name


def comm_rows(cluster: dict) -> list[tuple[str, str, str, str, str]]:
    """(group, GB per step, ms before overlap, ms exposed, link) of every parallel group.

    Examples
    --------
    >>> comm_rows({"communication": {"tp": {"bytes": 7516192768, "seconds": 0.0167,
    ...     "exposed_seconds": 0.0167, "link": "intra"}},
    ...     "assumptions": {"intra_node_bandwidth_bytes_per_s": 4.5e11}})
    [('TP (tensor)', '7.516', '16.70', '16.70', 'intra-node, 450 GB/s')]
    """
    out = []
    for key, row in (cluster.get("communication") or {}).items():
        exposed = row.get("exposed_seconds")
        out.append((GROUP_NAMES.get(key, key), f"{float(row['bytes']) / 1e9:.3f}",
                    f"{float(row['seconds']) * 1e3:.2f}",
                    "" if exposed is None else f"{float(exposed) * 1e3:.2f}",
                    _link(cluster, row.get("link", ""))))
    return out


def cluster_sentences(cluster: dict) -> list[str]:
    """Plain sentences: the cluster assumed, the step time, bubble and MFU, the warnings."""
    out = []
    a_ = cluster.get("assumptions") or {}
    if a_:
        eff = a_.get("efficiency")
        # the links the traffic below is priced on, given or the GPU's own
        links = "".join(f", {name} {float(a_[key]) / 1e9:g} GB/s" for name, key in (
            ("intra-node", "intra_node_bandwidth_bytes_per_s"),
            ("inter-node", "inter_node_bandwidth_bytes_per_s")) if a_.get(key) is not None)
        out.append(f"Cluster: {a_.get('cluster', '')}, {a_.get('gpu', '')} GPUs, "
                   f"{a_.get('gpus_per_node', '')} per node{links}, "
                   f"{a_.get('precision', '')}; GEMM "
                   + ("efficiency from memsym.timing.efficiency's curve by shape"
                      if eff is None else f"efficiency {eff}")
                   + f"; {a_.get('microbatches', '')} micro-batches per step. Bandwidths are "
                   "per direction; seconds before overlap are the collective alone, exposed "
                   "seconds what the step waits for.")
    if "step_time_s" in cluster:
        out.append(f"Step time {float(cluster['step_time_s']):.3f} s, pipeline bubble "
                   f"{100 * float(cluster.get('bubble', 0)):.1f} %, MFU "
                   f"{100 * float(cluster.get('mfu', 0)):.1f} %.")
    for warn in cluster.get("warnings") or ():
        out.append(str(warn))
    return out

