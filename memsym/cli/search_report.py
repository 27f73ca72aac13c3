"""How ``memsym search`` (and ``min-gpus``) report a layout: its knobs and bytes as JSON, its
sharding in words, and the table of the best layouts with each one's breakdown, notes and
torchtitan stages."""

from __future__ import annotations

from ..frameworks import FRAMEWORK
from .options import number_out
from .report_text import scheme_words

__all__ = ["layout_json", "megatron_fsdp_of", "sharding_words", "row_sharding", "bytes_json",
           "note_lines", "render", "torchtitan_stages"]


def layout_json(row: dict, framework: str | None = None, overlaps=None) -> dict:
    """The layout part of a JSON row (Megatron-like names; a block-N or every-N recompute
    choice also as its ``recompute_method`` / ``recompute_num_layers``; with ``framework``,
    the overlap options the search priced the step with, :func:`memsym.search.launch_overlaps`,
    or ``overlaps``, a job's own, :attr:`memsym.search.Space.overlaps`)."""
    from ..search import launch_overlaps
    from ..search.job_fields import row_overlaps
    from ..search.choices import recompute_fields

    out = {"tp": row["t"], "pp": row["p"], "cp": row["c"], "dp": row["d"], "ep": row["e"],
           "etp": row.get("t_e") or row["t"], "vpp": row["v"], "micro_batch_size": row["b"],
           "num_microbatches": row.get("m"),
           "decoder_first_pipeline_num_layers": row.get("first_stage_layers"),
           "decoder_last_pipeline_num_layers": row.get("last_stage_layers"),
           "recompute": row["recompute"], "sharding": row["sharding"],
           "sequence_parallel": bool(row["sequence_parallel"]), "offload": row["offload"]}
    fields = recompute_fields(row["recompute"])
    if "recompute_method" in fields:
        out.update(recompute_method=fields["recompute_method"],
                   recompute_num_layers=fields["recompute_num_layers"])
    if framework is not None:
        out.update(launch_overlaps(framework, row["sharding"]) if overlaps is None
                   else row_overlaps(overlaps, framework, row["sharding"]))
        out.update(megatron_fsdp_of(framework, row["sharding"]))
    return out


def megatron_fsdp_of(framework: str, sharding: str) -> dict:
    """``{"megatron_fsdp": strategy}`` where a Megatron-LM row's scheme is Megatron-FSDP's
    (zero2 as ``optim_grads``, fsdp as ``optim_grads_params``, :mod:`memsym.emit` spells them
    so), else empty: the row's sharding in Megatron's own word."""
    # imported here, not at the top: memsym.search's package pulls in SymPy and the search
    # (about a second), which `memsym --help` and `memsym search --help` would pay
    # (memsym.cli: SymPy-heavy imports stay inside the functions that run)
    from ..search.job_fields import MEGATRON_FSDP_STRATEGY

    if FRAMEWORK[framework].megatron_options and sharding in MEGATRON_FSDP_STRATEGY:
        return {"megatron_fsdp": MEGATRON_FSDP_STRATEGY[sharding]}
    return {}


def sharding_words(sharding: str, megatron_fsdp: str | None = None,
                   optimizer: str | None = None) -> str:
    """A layout's sharding as the text says it: a Megatron-FSDP scheme in Megatron-LM's words,
    its ``--data-parallel-sharding-strategy`` beside it (``megatron_fsdp``, as
    :func:`megatron_fsdp_of` gives it), what ``memsym search --emit megatron`` launches; any
    other scheme as ``memsym estimate`` says it under ``optimizer``
    (:func:`memsym.cli.report_text.scheme_words`: the layer-wise one under Muon).

    Examples
    --------
    >>> sharding_words("fsdp", "optim_grads_params"), sharding_words("zero3")
    ('fsdp (Megatron-FSDP optim_grads_params)', 'zero3')
    >>> sharding_words("distributed-optimizer", optimizer="muon")
    'distributed-optimizer (layer-wise under muon)'
    """
    if megatron_fsdp is None:
        return scheme_words(sharding, optimizer)
    return f"{sharding} (Megatron-FSDP {megatron_fsdp})"


def row_sharding(space, sharding: str) -> str:
    """A search row's sharding in words (:func:`sharding_words`) for its space's framework
    and optimizer."""
    return sharding_words(sharding, megatron_fsdp_of(space.framework, sharding)
                          .get("megatron_fsdp"), space.optimizer)


def bytes_json(grouped: dict) -> dict:
    """Whole bytes per term, rounded up as ``memsym estimate --json`` rounds them: each term
    up, the total the sum of the rounded terms (so that the parts add up, and a layout read
    back with ``memsym estimate`` reports the same total)."""
    out = {key: number_out(val, round_up=True) for key, val in grouped.items()}
    if "total" in out:
        out["total"] = sum(v for k, v in out.items() if k != "total")
    return out


def note_lines(res, *, job: bool = False) -> list:
    """What a search assumed and what it left out, one line each, as the table prints them
    under its head and ``--emit`` prints them as ``#`` lines (``job``: the settings are a
    job's): flash attention and dropout, the overlaps the step times are priced with, and the
    search's notes (:attr:`memsym.search.SearchResult.notes`)."""
    sp_ = res.space
    lines = [f"{'held' if job else 'assumed'}: flash attention "
             f"{'on' if sp_.flash_attention else 'off'}, dropout "
             f"{'on' if sp_.dropout else 'off'} ("
             + ("the job's)" if job else
                "torchtitan's models have none; --no-flash-attn to change)"
                if not FRAMEWORK[sp_.framework].dropout_layers else
                "memsym.job.DEFAULTS, as estimate; --no-flash-attn, --hidden-dropout 0 "
                "--attention-dropout 0 to change)")]
    launch = FRAMEWORK[sp_.framework].launch_overlaps
    if res.ranked_by == "step time" and launch != "always" and sp_.overlaps is None:
        lines.append("step times as launched with the data-parallel overlaps on ("
                     + ("--overlap-grad-reduce, and --overlap-param-gather with a sharded "
                        "optimizer" if launch == "flags" else "overlap_comm")
                     + "; Megatron's flags are off unless given)")
    return lines + ["note: " + note for note in res.notes]


def render(res, rows, *, margin: int = 0, job: bool = False) -> str:
    """A table of the best layouts and, under each, its breakdown in GB (``margin``: the
    bytes ``--margin`` keeps free; the space's capacity is already less it; ``job``: the
    settings are a job's, said by the caller, not assumed)."""
    sp_ = res.space
    full = sp_.capacity + margin
    whence = (f": CUDA total {sp_.gpu.cuda_total_gib:g} GiB"
              if full == sp_.gpu.capacity_bytes and sp_.gpu.cuda_total_gib else "")
    if margin:
        whence += f"; less a {margin / 1e9:.4g} GB margin: fit within {sp_.capacity / 1e9:.4g} GB"
    lines = [f"memsym search: {sp_.arch.name} on {res.gpus} x {sp_.gpu.name} "
             f"({full / 1e9:.4g} GB each{whence}), s = {sp_.seq_length}"
             + (f", B = {sp_.global_batch_size}" if sp_.global_batch_size else "")
             + f"; {res.valid} of {res.raw} layouts pass the rules, {len(res)} candidates with "
             f"the recompute/sharding/SP choices, "
             f"{int(res.columns['fits'].sum()) if len(res) else 0} of them fit; ranked by "
             f"{res.ranked_by}"]
    excl = [f"{k} {v}" for k, v in res.excluded.items() if v]
    if excl:
        lines.append("excluded by rule: " + ", ".join(excl))
    lines += note_lines(res, job=job)
    lines.append("")
    said = [row_sharding(sp_, row["sharding"]) for row, _ in rows]
    wide = max([22] + [len(w) + 1 for w in said])     # the column widens for the longest
    moe = bool(sp_.arch.num_experts)     # the experts' TP column where there are experts
    rc_w = max([10] + [len(str(row["recompute"])) + 1 for row, _ in rows])   # selective-op
    lines.append(f"{'#':>3} {'t':>3} {'p':>4} {'c':>4} {'d':>6} {'e':>3} "
                 + (f"{'t_e':>3} " if moe else "") + f"{'v':>3} {'b':>3} "
                 f"{'ends':>7} {'recompute':<{rc_w}}{'sharding':<{wide}}{'SP':<4}{'GB':>9}"
                 f"{'free GB':>9}{'step s':>10}  binding")
    for n, ((row, exact), words) in enumerate(zip(rows, said), 1):
        tot = float(exact["bytes"]["total"])
        st = "" if row["step_time"] is None else f"{row['step_time']:.4g}"
        f_, l_ = row.get("first_stage_layers"), row.get("last_stage_layers")
        ends = "even" if f_ is None and l_ is None else f"{f_ or '-'}/{l_ or '-'}"
        lines.append(f"{n:>3} {row['t']:>3} {row['p']:>4} {row['c']:>4} {row['d']:>6} {row['e']:>3} "
                     + (f"{row.get('t_e') or row['t']:>3} " if moe else "") +
                     f"{row['v']:>3} {row['b']:>3} {ends:>7} {row['recompute']:<{rc_w}}"
                     f"{words:<{wide}}"
                     f"{'yes' if row['sequence_parallel'] else 'no':<4}{tot / 1e9:>9.3f}"
                     f"{(sp_.capacity - tot) / 1e9:>9.3f}{st:>10}  {row['binding']}")
        parts = ", ".join(f"{k} {float(v) / 1e9:.3f}" for k, v in exact["bytes"].items()
                          if k != "total")
        lines.append(f"      stage {exact['stage']}: {parts} GB")
        if row.get("time"):
            # "other": the end stages' embedding, output layer and loss (TIME_PARTS)
            lines.append("      step: " + ", ".join(
                f"{'ends (embedding, output, loss)' if k == 'other' else k} {v:.3g}"
                for k, v in row["time"].items()) + " s")
        hint = torchtitan_stages(sp_, row)
        if hint:
            lines.append("      torchtitan: " + hint)
    return "\n".join(lines)


def torchtitan_stages(space, row) -> str | None:
    """How a torchtitan job gets the row's stages per rank (its TOML keys), or None."""
    if not FRAMEWORK[space.framework].torch_pipelining or row["p"] == 1:
        return None
    # the search's schedule="gpipe" is torch's ScheduleGPipe, looped: ScheduleLoopedBFS
    single, looped = ("GPipe", "LoopedBFS") if space.schedule == "gpipe" \
        else ("1F1B", "Interleaved1F1B")
    if row["v"] == 1:
        return f"a single-stage schedule (pipeline_parallel_schedule = \"{single}\")"
    if row["v"] == 2:
        return f"a looped schedule (\"{looped}\"): 2 stages per rank by default"
    from ..model.torchtitan_stages import torchtitan_layers_per_stage

    n = torchtitan_layers_per_stage(space.arch.num_layers, row["p"], row["v"])
    return (f"\"{looped}\" with pipeline_parallel_layers_per_stage = {n} "
            f"({row['v']} stages per rank)")
