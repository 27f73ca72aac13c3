"""Option types and option groups shared by the subcommands.

Every type function validates strictly and explains what is accepted; no argument text is
ever evaluated.
"""

from __future__ import annotations

import argparse
import math
import sys

from ..errors import MemsymError, UnknownNameError

__all__ = [
    "positive_int", "count", "capacity", "choice", "number_in", "efficiency",
    "bandwidth", "tflops", "price", "top_count", "margin", "margin_bytes",
    "model_state_setup", "model_state_convention", "emit_json", "number_out",
    "optimizer_choice", "expand_dist_muon", "DIST_MUON",
]


def positive_int(text: str) -> int:
    """A whole number >= 1 (degrees, sizes)."""
    raw = str(text).strip()
    if not (raw.isascii() and raw.isdigit()):  # str.isdigit alone accepts "²" and "٨"
        raise argparse.ArgumentTypeError(
            f"expected a whole number >= 1, got {raw[:40]!r}")
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {raw!r}")
    return value


def log_lines(text: str) -> int:
    """A count of log lines, 0 .. memsym.limits.MAX_LOG_LINES (``check --warmup-lines``)."""
    from ..limits import MAX_LOG_LINES

    raw = str(text).strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 8 or int(raw) > MAX_LOG_LINES:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of lines 0..{MAX_LOG_LINES}, got {raw[:40]!r}")
    return int(raw)


def top_count(text: str) -> int:
    """``memsym search --top K``: a whole number 1 <= K <= memsym.limits.MAX_TOP (1000).

    Examples
    --------
    >>> top_count("10")
    10
    >>> top_count("1000000")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a whole number 1 <= K <= 1000 (layouts shown: top), got '1000000'
    """
    from ..limits import MAX_TOP

    raw = str(text).strip()
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 7 and 1 <= int(raw) <= MAX_TOP):
        raise argparse.ArgumentTypeError(f"expected a whole number 1 <= K <= {MAX_TOP} (layouts "
                                         f"shown: top), got {raw[:40]!r}")
    return int(raw)


def count(text: str) -> int:
    """A parameter count: 7000000000, 7e9, 7B, 1.5T."""
    from ..units import parse_count

    try:
        return parse_count(text)
    except MemsymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def capacity(text: str) -> int:
    """A memory size: 80GB, 80GiB or bytes."""
    from ..units import parse_bytes

    try:
        return parse_bytes(text)
    except MemsymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def number_in(lo: float, hi: float, what: str, unit: str = "", example: str = ""):
    """An argparse type: a finite decimal number with ``lo <= x <= hi`` (a physical range).

    The range keeps every derived time, rate and price finite: 1/1e-310 overflows a float to
    inf, and inf - inf is NaN.  The text is read by ``float`` only (never evaluated), at most
    :data:`memsym.limits.MAX_DIGITS` characters.

    Examples
    --------
    >>> efficiency("0.5"), bandwidth("900")
    (0.5, 900.0)
    >>> efficiency("1e-310")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an efficiency with 0.01 <= x <= 1 (e.g. 0.5), got '1e-310'
    """
    from ..limits import MAX_DIGITS

    shown = f"{lo:g} <= x <= {hi:g}" + (f" [{unit}]" if unit else "")
    hint = f" (e.g. {example})" if example else ""

    def parse(text: str) -> float:
        raw = str(text).strip()
        try:
            value = float(raw) if len(raw) <= MAX_DIGITS else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and lo <= value <= hi):
            raise argparse.ArgumentTypeError(f"expected {what} with {shown}{hint}, got "
                                             f"{raw[:40]!r}")
        return value

    parse.__name__ = what.split()[-1]
    return parse


def _ranges():
    from ..limits import BANDWIDTH_RANGE, EFFICIENCY_RANGE, PRICE_RANGE, TFLOPS_RANGE

    return EFFICIENCY_RANGE, BANDWIDTH_RANGE, TFLOPS_RANGE, PRICE_RANGE


_EFF, _BW, _TF, _PRICE = _ranges()
#: --efficiency: an achieved fraction of peak FLOP/s in memsym.limits.EFFICIENCY_RANGE.
efficiency = number_in(*_EFF, "an efficiency", example="0.5")
#: --intra-node-bandwidth / --inter-node-bandwidth [GB/s]: memsym.limits.BANDWIDTH_RANGE.
bandwidth = number_in(*_BW, "a bandwidth", "GB/s", "50 for 400 Gb/s InfiniBand")
#: --tflops [TFLOP/s per GPU]: memsym.limits.TFLOPS_RANGE.
tflops = number_in(*_TF, "an achieved throughput", "TFLOP/s", "400")
#: --price-per-gpu-hour: memsym.limits.PRICE_RANGE.
price = number_in(*_PRICE, "a price per GPU-hour", example="2.5")


def choice(kind: str, names):
    """A type that accepts one of ``names`` (case-insensitive) and suggests on a miss."""
    names = tuple(names)
    table = {n.lower().replace("_", "-"): n for n in names}   # Megatron's no_shard as typed

    def parse(text: str) -> str:
        key = str(text).strip().lower().replace("_", "-")
        if key in table:
            return table[key]
        raise argparse.ArgumentTypeError(str(UnknownNameError(kind, text, names)))

    parse.__name__ = kind
    return parse


# ---------------------------------------------------------------------------------------------
# the types of the job options (memsym.cli.option_table): each validates and says what it takes
# ---------------------------------------------------------------------------------------------
def exact_number(what: str, **bounds):
    """An option type: an exact decimal number within ``bounds`` (memsym.units.parse_number)."""

    def parse(text: str):
        from ..units import parse_number

        try:
            return parse_number(text, what, **bounds)
        except MemsymError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = what
    return parse


#: Dropout is a probability p with 0 <= p < 1 (torch.nn.Dropout refuses p = 1 as a training
#: setting that drops everything); the fragmentation margin a fraction in [0, 1]; the expert
#: capacity factor a positive load ratio (bounded: 2^20, as the experts).
dropout_option = exact_number("dropout", low=0, high=1, include_high=False)
fragmentation = exact_number("fragmentation", low=0, high=1)
capacity_factor = exact_number("capacity factor", low=0, include_low=False, high=2**20)


def layer_count(text: str) -> int:
    """A whole number 0 .. 10^6: ``--recompute-num-layers`` (Megatron accepts 0) and
    ``--wgrad-deferral-limit`` (0: every micro-batch).

    >>> layer_count("0"), layer_count("12")
    (0, 12)
    """
    raw = str(text).strip()
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 7 or int(raw) > 10**6:
        raise argparse.ArgumentTypeError(f"expected a whole number 0 .. 1000000, got "
                                         f"{raw[:40]!r}")
    return int(raw)


def lora_targets(text: str) -> tuple:
    """``--lora-targets q,k,v``: the names, checked when the job is built; ``none`` no
    target module (PEFT's ``target_parameters`` alone, ``--lora-expert-params``).

    >>> lora_targets("q, v"), lora_targets("none")
    (('q', 'v'), ())
    """
    if str(text).strip().lower() == "none":
        return ()
    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    if not names or len(names) > 16 or any(len(n) > 16 for n in names):
        raise argparse.ArgumentTypeError(f"expected names such as q,k,v,o,gate,up,down, got "
                                         f"{str(text)[:40]!r}")
    return names


def tokens(text: str) -> int:
    """A token count (300B, 15T, 3e11), bounded by memsym.limits' ``tokens`` limit."""
    from ..units import parse_count

    try:
        return parse_count(text, "--tokens", limit="tokens")
    except MemsymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bytes_or_zero(text: str) -> int:
    """An allowance: a memory size (:func:`capacity`) or 0 to drop it."""
    return 0 if str(text).strip() in ("0", "0B") else capacity(text)


def margin(text: str):
    """``--margin``: a fraction 0 .. 1/2 of the capacity (a plain number, kept exact as a
    :class:`~fractions.Fraction`) or a memory size with a unit (whole bytes, an ``int``).

    Examples
    --------
    >>> margin("0.05"), margin("4GB"), margin("0")
    (Fraction(1, 20), 4000000000, Fraction(0, 1))
    >>> margin("0.6")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a fraction 0 .. 1/2 of the capacity (0.05) or a size with a unit (4GB, 4GiB), got '0.6'
    """
    from fractions import Fraction

    from ..limits import MAX_MARGIN_FRACTION
    from ..units import parse_bytes, parse_number

    raw = str(text).strip()
    accepted = (f"expected a fraction 0 .. {MAX_MARGIN_FRACTION} of the capacity (0.05) or a "
                f"size with a unit (4GB, 4GiB), got {raw[:40]!r}")
    if raw[-1:].isalpha():
        try:
            return parse_bytes(raw)
        except MemsymError:
            raise argparse.ArgumentTypeError(accepted) from None
    try:
        value = parse_number(raw, "--margin", high=MAX_MARGIN_FRACTION)
    except MemsymError:
        raise argparse.ArgumentTypeError(accepted) from None
    return Fraction(value)


def margin_bytes(args, capacity) -> int:
    """The bytes ``--margin`` keeps free on a GPU of ``capacity`` bytes: 0 when absent, a
    fraction of the capacity rounded up to whole bytes (an allocation is whole bytes), a size
    as given.  A layout fits when its device total is at most ``capacity - margin_bytes``.

    Raises
    ------
    InvalidValueError
        A margin without a capacity, or one that leaves no memory.

    Examples
    --------
    >>> from fractions import Fraction
    >>> from types import SimpleNamespace as NS
    >>> margin_bytes(NS(margin=Fraction(1, 3)), 10), margin_bytes(NS(margin=None), None)
    (4, 0)
    """
    import math
    from fractions import Fraction

    from ..errors import InvalidValueError

    value = getattr(args, "margin", None)
    if value is None or value == 0:
        return 0
    if capacity is None:
        raise InvalidValueError("--margin needs a capacity: give --gpu NAME or --gpu-memory C")
    out = math.ceil(value * Fraction(int(capacity))) if isinstance(value, Fraction) else int(value)
    if out >= capacity:
        raise InvalidValueError(f"--margin {out / 1e9:.3f} GB leaves nothing of the "
                                f"{capacity / 1e9:.3f} GB capacity: give less than the capacity")
    return out


#: ``memsym plot --candidates``: the most values drawn, and the largest.
MAX_CANDIDATES = 64
MAX_CANDIDATE_VALUE = 1 << 20


def candidates(text: str) -> list[int]:
    """``"1,2,4,8"`` or ``"1:16"`` (inclusive) as whole numbers (argparse type; never evaluated).

    >>> candidates("1,2,4"), candidates("3:6")
    ([1, 2, 4], [3, 4, 5, 6])
    """
    raw = str(text).strip()
    try:
        if ":" in raw:
            lo, hi = (int(x) for x in raw.split(":", 1))
            vals = list(range(lo, hi + 1)) if 0 < lo <= hi and hi - lo < MAX_CANDIDATES else None
        else:
            vals = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        vals = None
    if not vals or len(vals) > MAX_CANDIDATES or any(not 0 < v <= MAX_CANDIDATE_VALUE for v in vals):
        raise argparse.ArgumentTypeError(
            f"expected up to {MAX_CANDIDATES} whole numbers 1..{MAX_CANDIDATE_VALUE} as 1,2,4 or "
            f"1:16, got {raw[:40]!r}")
    return sorted(set(vals))


_RECOMPUTE_MODES = choice("recompute", ("none", "selective", "full", "selective-op", "block-N",
                                        "every-N"))


def recompute_mode(text: str) -> str:
    """``memsym search --recompute``: a granularity, or ``block-N`` / ``every-N`` (Megatron's
    --recompute-method block --recompute-num-layers N; torchtitan's selective_ac_option N)."""
    from ..search.choices import recompute_layers

    key = str(text).strip().lower()
    if recompute_layers(key) is not None:
        return key
    if key in ("block-n", "every-n"):      # the placeholders the help names, not choices
        raise argparse.ArgumentTypeError(f"{key[:-2]}-N takes a number of layers, e.g. "
                                         f"{key[:-2]}-2")
    return _RECOMPUTE_MODES(text)


#: Megatron-LM's deprecated ``--optimizer dist_muon``: Muon with the layer-wise distributed
#: optimizer (arguments.py:1727-1733 at d98e8a64dd turn it into ``muon`` with
#: ``use_layer_wise_distributed_optimizer``; Megatron-Bridge training/optim.py:103-110 at
#: 067f987df0: ``layer_wise_distributed_optimizer="dist" in optimizer``).
DIST_MUON = "dist_muon"


def optimizer_choice(names):
    """The ``--optimizer`` type: one of ``names``, or :data:`DIST_MUON` (kept as typed, for
    :func:`expand_dist_muon`)."""
    plain = choice("optimizer", names)

    def parse(text: str) -> str:
        if str(text).strip().lower().replace("-", "_") == DIST_MUON:
            return DIST_MUON
        try:
            return plain(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                str(UnknownNameError("optimizer", text, (*names, DIST_MUON)))) from None

    parse.__name__ = "optimizer"
    return parse


def expand_dist_muon(args, listed: bool) -> None:
    """``--optimizer dist_muon`` as Megatron-LM reads it: ``muon`` with the distributed
    optimizer (under Muon, the layer-wise one), the sharding set to ``distributed-optimizer``
    (a list of it where the command searches, ``listed``); a ``--sharding`` that says otherwise
    is refused.

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> a = NS(optimizer="dist_muon", sharding=None); expand_dist_muon(a, False)
    >>> a.optimizer, a.sharding
    ('muon', 'distributed-optimizer')
    """
    from ..errors import InvalidValueError

    if getattr(args, "optimizer", None) != DIST_MUON:
        return
    given = getattr(args, "sharding", None)
    wrong = [s for s in (given if isinstance(given, list) else [given])
             if s not in (None, "distributed-optimizer")]
    if wrong:
        raise InvalidValueError(f"--optimizer dist_muon is muon with the (layer-wise) distributed "
                                f"optimizer (Megatron-LM: --optimizer muon "
                                f"--use-distributed-optimizer): it contradicts --sharding "
                                f"{wrong[0]}")
    args.optimizer = "muon"
    args.sharding = ["distributed-optimizer"] if listed else "distributed-optimizer"


def resolve_scheme(args) -> str:
    """The sharding scheme from --sharding / --use-distributed-optimizer (they must agree)."""
    from ..errors import InvalidValueError

    scheme = args.sharding
    if args.use_distributed_optimizer:
        if scheme not in (None, "distributed-optimizer"):
            raise InvalidValueError(f"--use-distributed-optimizer contradicts --sharding {scheme}")
        scheme = "distributed-optimizer"
    return scheme or "distributed-optimizer"


def model_state_convention(args) -> str:
    """The model-state convention of --convention: megatron-bridge uses megatron-lm's bytes."""
    # same byte model for model states (18 or 6 + 12/n)
    return "megatron-lm" if args.convention == "megatron-bridge" else args.convention


def model_state_setup(args, *, need_params: bool = True, keep_symbolic: bool = False):
    """(Total with byte widths substituted, values dict, scheme, widths) from parsed args,
    their precision, optimizer and offload filled in first
    (:func:`memsym.cli.option_table.fill_model_state_defaults`).

    ``keep_symbolic``: :math:`b_{hp}` stays a symbol in the total, so a solved closed form
    reads as seed 000 writes it, d >= 16N/(Cpt - N b_hp); its width goes into
    ``values["b_hp"]`` and ``widths`` holds only the widths substituted.
    """
    from ..errors import InvalidValueError
    from ..symbols import b_hp
    from ..terms.model_state import byte_widths, model_state

    scheme = resolve_scheme(args)
    convention = model_state_convention(args)
    if None in (args.precision, args.optimizer, args.offload):
        raise TypeError("model_state_setup: fill the defaults first "
                        "(memsym.cli.option_table.fill_model_state_defaults)")
    if args.offload != "none" and (args.pp or 1) > 1:
        # REF: megatron-lm-arguments, transformer_config.py: "no support for Pipeline parallelism
        # with CPU offloading" (seed 001 quotes it)
        raise InvalidValueError("CPU offload needs --pp 1: Megatron-Core refuses pipeline parallelism "
                                "with CPU offloading")
    widths = byte_widths(scheme, args.precision, args.optimizer, convention)
    values = {"t": args.tp or 1, "p": args.pp or 1}
    if keep_symbolic:
        values["b_hp"] = widths[b_hp]
        widths = {k: v for k, v in widths.items() if k != b_hp}
    total = model_state(scheme, convention=convention, offload=args.offload).subs(widths)
    if hasattr(args, "dp"):  # `solve dp` has no --dp: d is the unknown
        values["d"] = args.dp or 1
    if args.params is not None:
        values["N"] = args.params
    elif need_params:
        raise InvalidValueError("give the parameter count with --params N (e.g. --params 175B)")
    return total, values, scheme, widths


def number_out(value, *, round_up: bool = False):
    """A JSON-friendly number: an int when exact and whole, else a float — or, with
    ``round_up`` (whole bytes, as every ``--json`` byte count is reported), the next int up.

    The one place this rounding lives (estimate, solve, search and min-gpus use it).

    Examples
    --------
    >>> number_out(3), number_out(0.5), number_out(7 / 2, round_up=True)
    (3, 0.5, 4)
    """
    import sympy as sp

    value = sp.sympify(value)
    if value.is_Integer:
        return int(value)
    return int(sp.ceiling(value)) if round_up else float(value)


def emit_json(obj) -> None:
    """Print one JSON object on stdout: finite numbers only (an infinity or NaN is refused,
    naming its key, never written as the invalid JSON ``Infinity``), exact integers exactly."""
    from ..text import finite_json

    sys.stdout.write(finite_json(obj, indent=2) + "\n")
