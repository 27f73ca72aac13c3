"""The text report of ``memsym estimate MODEL ...``: what people read.

At most :data:`WIDTH` columns by default: each term with its bytes, GB and share of the
capacity (of the total when no capacity is given) and a numbered reference, the dominant terms
named, every note and default wrapped, the references listed at the end; ``--wide`` prints each
term's source on its line instead (the older, wider table).
"""

from __future__ import annotations

import textwrap

__all__ = ["WIDTH", "notes_and_defaults", "render_estimate", "render_step", "render_advice", "capacity_label",
           "tight_text",
           "margin_text", "render_markdown", "markdown_table",
           "markdown_references", "markdown_text", "render_sensitivity", "scheme_words"]

#: The widest line of the default report [columns].
WIDTH = 100


def _wrap(text: str) -> str:
    return textwrap.fill(text, WIDTH, subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False)


def _dominant(terms: dict, total: int) -> str:
    """The largest terms that together make more than half the total, with their shares."""
    out, run = [], 0
    for key, val in sorted(terms.items(), key=lambda kv: -kv[1]):
        if run * 2 > total or val <= 0:
            break
        out.append(f"{key} {100 * val / total:.0f} %")
        run += val
    return ", ".join(out)


def render_estimate(rep: dict, args, *, fits, device: int, wide: bool = False) -> str:
    """The whole text report of one estimate (``rep`` as ``--json`` prints it)."""
    cap = args.gpu_memory
    usable = None if cap is None else cap - rep.get("margin_bytes", 0)
    lines = []
    if rep.get("verdict") == "tight":
        lines += [_wrap(tight_text(rep, device, usable)), ""]
    elif fits is False:
        n = len(rep.get("advice", []))
        said = ("no single change makes it fit" if n == 0 else
                f"{n} single change{'' if n == 1 else 's'} that make{'s' if n == 1 else ''} "
                "it fit below")
        lines.append(f"does NOT fit: {device / 1e9:.3f} GB on the most-loaded GPU (device "
                     f"count) > {usable / 1e9:.3f} GB; {said}")
        lines.append("")
    lines.append(_title(rep))
    lines.append(_wrap(_job_line(rep)))
    lines.append("")
    terms = {k: v for k, v in rep["bytes"].items() if k != "total"}
    total = rep["bytes"]["total"]
    sources = rep.get("sources", {})
    key_w = max([len("term")] + [len(key) for key in rep["bytes"]]) + 2
    if wide:
        lines.append(f"{'term':<{key_w}}{'bytes':>22}{'GB':>12}{'GiB':>12}  source")
        for key, val in rep["bytes"].items():
            lines.append(f"{key:<{key_w}}{val:>22,}{val / 1e9:>12.3f}{val / 2**30:>12.3f}  "
                         f"{sources.get(key, '')}")
        refs = []
    else:
        base = cap if cap else total
        refs = _references(rep)
        lines.append(f"{'term':<{key_w}}{'bytes':>18}{'GB':>10}"
                     f"{'of ' + ('capacity' if cap else 'total'):>14}  ref")
        for key, val in rep["bytes"].items():
            ref = f"[{refs.index(sources[key]) + 1}]" if sources.get(key) else ""
            lines.append(f"{key:<{key_w}}{val:>18,}{val / 1e9:>10.3f}{100 * val / base:>12.1f} %"
                         f"  {ref}".rstrip())
        if total > 0 and terms:
            lines.append(f"dominant: {_dominant(terms, total)}")
    if rep.get("phases"):
        ph = rep["phases"]
        step = ", ".join(f"{key.replace('_', ' ')} {val / 1e9:.3f} GB"
                         for key, val in rep.get("optimizer_step_bytes", {}).items())
        step = f", of which {step}" if step else ""
        lines.append(_wrap(
            f"peak phase: {ph['peak']} (end of forward {ph['forward'] / 1e9:.3f} GB, loss "
            f"backward {ph['loss-backward'] / 1e9:.3f} GB, blocks' backward "
            f"{ph['backward'] / 1e9:.3f} GB, optimizer step {ph['optimizer'] / 1e9:.3f} GB"
            f"{step})") if not wide else
            f"peak phase: {ph['peak']} (end of forward {ph['forward'] / 1e9:.3f} GB, loss "
            f"backward {ph['loss-backward'] / 1e9:.3f} GB, blocks' backward "
            f"{ph['backward'] / 1e9:.3f} GB, optimizer step {ph['optimizer'] / 1e9:.3f} GB"
            f"{step})")
    if rep.get("peak_parts"):
        lines.append(_peak_parts(rep) if wide else _wrap(_peak_parts(rep)))
    said = _said(rep, device)
    lines += said if wide else [_wrap(x) for x in said]
    if fits is not None:
        text = _verdict(rep, args, fits, device)
        lines += ["", text if wide else _wrap(text)]
    if "communication" in rep:
        lines += ["", render_step(rep)]
    if "advice" in rep:
        lines += ["", render_advice(rep["advice"], rep.get("advice_tried"))]
    if "sensitivity" in rep:
        lines += ["", render_sensitivity(rep["sensitivity"])]
    if refs:
        lines += ["", "references:"]
        lines += [textwrap.fill(f"[{i}] {src}", WIDTH, subsequent_indent="    ",
                                break_long_words=True, break_on_hyphens=False)
                  for i, src in enumerate(refs, 1)]
    return "\n".join(lines)


def _peak_parts(rep: dict) -> str:
    """The transients row itemised: each part the peak phase adds or does not hold [GB]."""
    parts = ", ".join(f"{part['label']} {part['bytes'] / 1e9:.3f} GB"
                      if abs(part["bytes"]) >= 1e7 else
                      f"{part['label']} {part['bytes'] / 1e6:.3f} MB" for part in rep["peak_parts"])
    return (f"transients: what the peak phase ({rep['phases']['peak']}) adds to the steady "
            f"states and activations or does not hold: {parts}")


def _title(rep: dict) -> str:
    return (f"memsym estimate: {rep['model']} ({rep['convention']} convention), "
            f"most-loaded pipeline stage {rep['stage']['index']} ({rep['stage']['role']})")


def _job_line(rep: dict) -> str:
    """The layout and training in one line (``t = 1, p = 1, ...; s = 4096, b = 1, ...``)."""
    lay, trn = rep["layout"], rep["training"]
    rc = trn["recompute"] + ("" if not trn.get("recompute_method") else
                             f" ({trn['recompute_method']} {trn['recompute_num_layers']})")
    if trn.get("recompute_modules") is not None:   # Megatron's --recompute-modules
        rc += f" ({' '.join(trn['recompute_modules']) or 'no module'})"
    return (f"t = {lay['tp']}, p = {lay['pp']}, d = {lay['dp']}, c = {lay['cp']}, "
            f"e = {lay['ep']}; s = {trn['seq_length']}, b = {trn['micro_batch_size']}, "
            f"recompute {rc}, flash attention "
            f"{'on' if trn['flash_attention'] else 'off (s x s scores kept)'}, dropout "
            + ("on (--hidden-dropout 0 --attention-dropout 0 turns it off)" if trn["dropout"]
               else "off") + _states_text(trn))


def _states_text(trn: dict) -> str:
    """``; precision fp8 (mxfp8), sharding ...``: the precision and sharding the job reads,
    with the Megatron-FSDP strategy, its double buffer and a non-default MoE dispatcher."""
    if "precision" not in trn:
        return ""
    prec = trn["precision"] + (f" ({trn['fp8_recipe']})" if trn.get("fp8_recipe") else "") \
        + (f" weights under {trn['autocast']} autocast" if trn.get("autocast") else "") \
        + (" (NVFP4 parameters, fp4_param_gather)" if trn.get("fp4_param_gather") else "") \
        + (" (first {} / last {} layers in BF16)".format(*trn["bf16_layers"])
           if any(trn.get("bf16_layers") or ()) else "")
    out = f"; precision {prec}, sharding {scheme_words(trn['sharding'], trn.get('optimizer'))}"
    if trn.get("megatron_fsdp"):
        out += f" (Megatron-FSDP {trn['megatron_fsdp']}"
        out += ", double buffer)" if trn.get("fsdp_double_buffer") else ")"
    if trn.get("torch_ddp_buckets"):
        out += " (torch DDP: gradient buckets beside param.grad)"
    if trn.get("accelerate_fsdp"):
        out += (" (Accelerate's FSDP2, " + ("fp32 shards, 16-bit gathers" if
                trn["accelerate_fsdp"] == "mixed" else "no mixed precision")
                + (", kept gathered to the backward" if trn.get("fsdp_keep_gathered") else "")
                + ")")
    if trn.get("moe_dispatcher", "alltoall") != "alltoall":
        out += f", MoE dispatcher {trn['moe_dispatcher']}"
    return out


def scheme_words(sharding: str, optimizer: str | None) -> str:
    """A sharding scheme as the report says it: the distributed optimizer under Muon is
    Megatron-core's layer-wise one (:data:`memsym.cli.job_report.LAYER_WISE`).

    Examples
    --------
    >>> scheme_words("distributed-optimizer", "muon"), scheme_words("ddp", "muon")
    ('distributed-optimizer (layer-wise under muon)', 'ddp')
    """
    if sharding == "distributed-optimizer" and optimizer == "muon":
        return f"{sharding} (layer-wise under muon)"
    return sharding


def _references(rep: dict) -> list:
    """The distinct sources of the report's rows, in row order (numbered from 1)."""
    sources = rep.get("sources", {})
    return list(dict.fromkeys(sources[k] for k in rep["bytes"] if sources.get(k)))


def notes_and_defaults(rep: dict) -> list:
    """A report's ``note:`` and ``default:`` lines; a note that only repeats why a default
    was taken (the framework's dropout) is said once, on its default's line.

    Examples
    --------
    >>> notes_and_defaults({"notes": ["n", "why"],
    ...                     "defaults": [{"option": "o", "value": 1, "source": "why"}]})
    ['note: n', 'default: o = 1 (why)']
    """
    defaults = rep.get("defaults", [])
    said = {str(row["source"]) for row in defaults}
    return ([f"note: {note}" for note in rep.get("notes", []) if note not in said]
            + [f"default: {row['option']} = {row['value']} ({row['source']})" for row in defaults])


def _said(rep: dict, device: int) -> list:
    """How the job was read, its notes, the defaults applied and the memory metric."""
    said = [f"read as {rep['read_as']}"] if rep.get("read_as") else []
    if rep.get("ignored"):
        said.append("ignored (no effect on memory or time): " + " ".join(rep["ignored"]))
    said += notes_and_defaults(rep)
    said.append(f"memory metric: {rep['metric']['name']}, {rep['metric']['sees']}")
    if rep["metric"]["name"] != "device":
        said.append(f"device total (what must fit): {device:,} bytes = {device / 1e9:.3f} GB")
    return said


def _verdict(rep: dict, args, fits: bool, device: int) -> str:
    usable = args.gpu_memory - rep.get("margin_bytes", 0)
    if rep.get("verdict") == "tight":
        frag = rep["metric"]["device_fragmentation_bytes"]
        return (f"GPU memory {capacity_label(args)}{margin_text(rep)}: tight, fits only if the "
                f"allocator's reserve stays under {_percent(rep['reserve_fraction_that_fits'])} "
                f"of the peak-phase allocation (the fragmentation margin is "
                f"{_percent(rep['metric']['device_fragmentation_fraction'])}), headroom "
                f"{(usable - device) / 1e9:.3f} GB with the margin, "
                f"{(usable - device + frag) / 1e9:.3f} GB without it (device metric)")
    return (f"GPU memory {capacity_label(args)}{margin_text(rep)}: "
            f"{'fits' if fits else 'does NOT fit'}, headroom {(usable - device) / 1e9:.3f} GB "
            "(device metric)")


def _percent(fraction) -> str:
    """A fraction as a percentage with one decimal, rounded down (never more than fits)."""
    import math
    from fractions import Fraction

    return f"{math.floor(1000 * Fraction(str(fraction))) / 10:.1f} %"   # 0.29 is 29.0 %


def tight_text(rep: dict, device: int, usable: int) -> str:
    """The first line of a "tight" report: within ``usable`` without the fragmentation
    margin, not with it; the reserve that fits and what to do
    (:data:`memsym.terms.allowances.RESERVE_ADVICE`)."""
    from ..terms.allowances import RESERVE_ADVICE

    frag = rep["metric"]["device_fragmentation_bytes"]
    return (f"tight: fits only if the caching allocator's reserve stays under "
            f"{_percent(rep['reserve_fraction_that_fits'])} of the peak-phase allocation: "
            f"{(device - frag) / 1e9:.3f} GB on the most-loaded GPU (device count) without "
            f"the fragmentation margin, {device / 1e9:.3f} GB with its "
            f"{_percent(rep['metric']['device_fragmentation_fraction'])}, against "
            f"{usable / 1e9:.3f} GB; {RESERVE_ADVICE}; "
            + ("the single changes below make it fit with the margin" if "advice" in rep else
               "--advise lists the single changes that make it fit with the margin"))


#: Characters Markdown would read as markup (emphasis, code, links, HTML, a table cell's end).
_MARKUP = "\\`*_[]<>|#"


def markdown_text(text) -> str:
    r"""Text drawn literally in Markdown, on one line (in a table cell too): each markup
    character escaped with a backslash, a newline made a space (it would end the row).

    >>> print(markdown_text("_Buffer.__init__ | a*b"))
    \_Buffer.\_\_init\_\_ \| a\*b
    """
    return "".join("\\" + ch if ch in _MARKUP else " " if ch in "\r\n" else ch
                   for ch in str(text))


def markdown_table(rows: dict, *, base: int, base_name: str, sources: dict,
                   refs: list) -> list:
    """The Markdown table of ``rows`` (term -> bytes, ``total`` last): bytes, GB, the share of
    ``base`` (the capacity, else the total) and the reference number of the term's source."""
    lines = [f"| term | bytes | GB | % of {base_name} | source |", "|---|---:|---:|---:|---|"]
    for key, val in rows.items():
        ref = f"[{refs.index(sources[key]) + 1}]" if sources.get(key) in refs else ""
        name = f"**{key}**" if key == "total" else markdown_text(key)
        lines.append(f"| {name} | {val:,} | {val / 1e9:.3f} | {100 * val / base:.1f} % | {ref} |")
    return lines


def render_markdown(rep: dict, args, *, fits, device: int) -> str:
    """The report of one estimate as Markdown, for an issue or a design review: the job, a
    table of the terms (bytes, GB, share of the capacity, source reference), the dominant
    terms, the defaults applied, the metric and the verdict; the step and the advice as the
    text report prints them; the references last (``rep`` as ``--json`` prints it)."""
    cap = args.gpu_memory
    terms = {k: v for k, v in rep["bytes"].items() if k != "total"}
    total = rep["bytes"]["total"]
    refs = _references(rep)
    lines = [f"### {markdown_text(_title(rep))}", "", markdown_text(_job_line(rep)), ""]
    lines += markdown_table(rep["bytes"], base=cap or total or 1,
                            base_name="capacity" if cap else "total",
                            sources=rep.get("sources", {}), refs=refs)
    lines.append("")
    if total > 0 and terms:
        lines += [f"Dominant: {markdown_text(_dominant(terms, total))}.", ""]
    if rep.get("phases"):
        ph = rep["phases"]
        lines += [markdown_text(_peak_parts(rep)[:1].upper() + _peak_parts(rep)[1:] + ".")
                  if rep.get("peak_parts") else f"Peak phase: {ph['peak']}.", ""]
    lines += [f"- {markdown_text(x)}" for x in _said(rep, device)]
    if fits is not None:
        lines += ["", f"**{markdown_text(_verdict(rep, args, fits, device))}**"]
    if rep.get("verdict") == "tight":
        usable = cap - rep.get("margin_bytes", 0)
        lines += ["", markdown_text(tight_text(rep, device, usable))]
    for block in ([render_step(rep)] if "communication" in rep else []) + \
            ([render_advice(rep["advice"], rep.get("advice_tried"))] if "advice" in rep
             else []) + \
            ([render_sensitivity(rep["sensitivity"])] if "sensitivity" in rep else []):
        lines += ["", "```text", block, "```"]
    return "\n".join(lines + markdown_references(refs))


def markdown_references(refs: list) -> list:
    """The numbered list of the sources the table's ``[n]`` point at (none: no lines)."""
    return ["", "References:", ""] + [f"{i}. {markdown_text(src)}" for i, src in enumerate(refs, 1)] \
        if refs else []


def margin_text(rep: dict) -> str:
    """``, less a 4.000 GB margin (--margin)`` where a margin is kept free, else nothing."""
    margin = rep.get("margin_bytes", 0)
    return f", less a {margin / 1e9:.3f} GB margin (--margin)" if margin else ""


def capacity_label(args) -> str:
    """``84.944 GB (79.110 GiB; CUDA total 79.11 GiB, cuda-total-h100; datasheet 80 GB)``."""
    cap = args.gpu_memory
    return (f"{cap / 1e9:.3f} GB ({cap / 2**30:.3f} GiB; "
            f"{getattr(args, 'capacity_note', 'as given')})")


def _domain_text(asm: dict) -> str:
    """``, NVLink domain 72``: where the GPU's NVLink domain is wider than its node (an NVL72
    rack's compute tray holds 4 of the 72 GPUs one NVLink switch domain joins), else empty."""
    from ..hardware import gpu

    try:
        domain = gpu(asm["gpu"]).nvlink_domain or 0
    except (KeyError, ValueError):      # no GPU named: the node is the domain
        return ""
    return f", NVLink domain {domain}" if domain > int(asm.get("gpus_per_node") or 0) else ""


def render_step(rep: dict) -> str:
    """The communication / bubble / step-time / MFU block of a report (text output)."""
    comm = rep["communication"]
    asm = rep.get("assumptions", {})
    wide = max([len("group")] + [len(key) for key in comm]) + 2
    lines = [f"communication per GPU per step ({asm.get('gpu', '?')}, "
             f"{asm.get('gpus_per_node', '?')} GPUs per node{_domain_text(asm)}):",
             f"{'group':<{wide}}{'bytes':>22}{'GB':>12}{'seconds':>12}  link"]
    # on an NVL72 rack "intra" is the NVLink domain, which spans compute trays (nodes)
    domain = " (NVLink domain)" if _domain_text(asm) else ""
    for key, row in comm.items():
        link = row["link"] + (domain if row["link"] == "intra" else "")
        lines.append(f"{key:<{wide}}{row['bytes']:>22,}{row['bytes'] / 1e9:>12.3f}"
                     f"{row['seconds']:>12.4g}  {link}")
    m_ = rep["global_batch"] // max(1, rep["layout"]["dp"] * rep["training"]["micro_batch_size"])
    v_ = rep["layout"].get("vpp") or 1
    # the schedule whose bubble it is: (p-1)/m for 1F1B and GPipe, (p-1)/(v m) interleaved
    # or looped breadth-first where m fills the pipeline (simulated otherwise)
    sched = ("GPipe" if v_ == 1 else f"looped BFS, v = {v_}") \
        if rep["training"].get("schedule") == "gpipe" else \
        ("1F1B" if v_ == 1 else f"interleaved 1F1B, v = {v_}")
    if rep["training"].get("stage_placement") == "v":
        sched = f"V schedule priced as interleaved 1F1B, v = {v_}"
    lines.append(f"pipeline bubble: {100 * rep['bubble']:.3g} % of the compute time ({sched}, "
                 f"m = {m_} microbatches"
                 + ("; give --global-batch-size or --num-microbatches" if m_ == 1 and rep["layout"]["pp"] > 1
                    else "") + ")")
    eff = asm.get("efficiency")
    lines.append(f"step time: {rep['step_time_s']:.4g} s"
                 + ("" if eff is None else f" at efficiency {eff:.3g} of peak")
                 + (" (calibrated: see the note)" if rep.get("calibration") else "")
                 + f"; MFU {100 * rep['mfu']:.1f} %")
    lines += [f"warning: {w}" for w in rep.get("warnings", [])]
    return "\n".join(lines)


def render_advice(rows: list, tried=None) -> str:
    """The levers as a table: each alone makes the job fit (verified on the estimate); none,
    the knobs tried (``tried``: :func:`memsym.advice.tried_changes`, the sizes the job's
    framework's search changes) in one line."""
    if not rows:
        tried = list(tried or ("d", "t", "p", "c", "the micro-batch", "recomputation",
                               "sharding", "offload"))
        said = ", ".join(tried[:-1]) + " or " + tried[-1] if len(tried) > 1 else "".join(tried)
        return f"advice: no single change of {said} makes it fit"
    lines = ["advice: each change alone makes the job fit (verified on the estimate), fastest "
             "first:", f"{'change':<40}{'GB':>9}{'saved':>9}{'GPUs':>7}{'step s':>9}  add"]
    for r in rows:
        step = "-" if r["step_time_s"] is None else f"{r['step_time_s']:.3g}"
        lines.append(f"{r['change'][:39]:<40}{r['bytes_total'] / 1e9:>9.2f}"
                     f"{r['saved_bytes'] / 1e9:>9.2f}{r['gpus']:>7}{step:>9}  "
                     + " ".join(r["flags"]))
    return "\n".join(lines)


def render_sensitivity(rows: list) -> str:
    """The knobs as a table: the exact slope of the total at the job [GB per unit of the knob]
    and the change when the knob is doubled, the job estimated again [GB]."""
    lines = [_wrap("sensitivity of the per-GPU total (dM/dx: the formula's slope at the job, "
                   "the stage's counts and m held; doubled: the job estimated again):"),
             f"{'knob':<6}{'value':>8}{'dM/dx GB per unit':>20}{'doubled':>10}{'change GB':>12}"]
    for r in rows:
        slope = "-" if r["bytes_per_unit"] is None else f"{r['bytes_per_unit'] / 1e9:.6g}"
        change = "-" if r["doubled_change_bytes"] is None \
            else f"{r['doubled_change_bytes'] / 1e9:+.3f}"
        lines.append(f"{r['knob']:<6}{r['value']:>8}{slope:>20}{r['doubled_value']:>10}"
                     f"{change:>12}")
    lines += [_wrap(f"not doubled: {r['knob']} = {r['doubled_value']}: {r['note']}")
              for r in rows if r["note"]]
    return "\n".join(lines)
