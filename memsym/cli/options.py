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
    "positive_int", "count", "capacity", "fraction", "choice", "number_in", "efficiency",
    "bandwidth", "tflops", "price", "top_count", "add_model_state_options",
    "model_state_setup", "model_state_convention", "emit_json", "number_out",
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
#: The names the pricing options of memsym.cli.training_options use: --efficiency is
#: ``fraction``, the two bandwidths [GB/s] are ``positive_number``.
fraction = efficiency
positive_number = bandwidth


def choice(kind: str, names):
    """A type that accepts one of ``names`` (case-insensitive) and suggests on a miss."""
    names = tuple(names)
    table = {n.lower(): n for n in names}

    def parse(text: str) -> str:
        key = str(text).strip().lower().replace("_", "-")
        if key in table:
            return table[key]
        raise argparse.ArgumentTypeError(str(UnknownNameError(kind, text, names)))

    parse.__name__ = kind
    return parse


def add_model_state_options(parser, *, dp: bool = True) -> None:
    """Options of the model-state family (issue 2), shared by estimate, solve and latex."""
    from ..terms.model_state import CONVENTIONS, OFFLOADS, OPTIMIZERS, PRECISIONS, SCHEMES

    grp = parser.add_argument_group("model states")
    grp.add_argument("--params", type=count, metavar="N",
                     help="total parameter count N (7000000000, 7e9, 7B, 1.5T)")
    if dp:
        grp.add_argument("--dp", "--data-parallel-size", dest="dp", type=positive_int,
                         default=None, metavar="D", help="data-parallel size d (default 1)")
    grp.add_argument("--tp", "--tensor-model-parallel-size", dest="tp", type=positive_int,
                     default=None, metavar="T", help="tensor-parallel size t (default 1)")
    grp.add_argument("--pp", "--pipeline-model-parallel-size", dest="pp", type=positive_int,
                     default=None, metavar="P", help="pipeline-parallel size p (default 1)")
    grp.add_argument("--sharding", type=choice("sharding", SCHEMES), default=None,
                     help="how model states are sharded over data parallel: " + ", ".join(SCHEMES)
                     + " (default distributed-optimizer)")
    grp.add_argument("--use-distributed-optimizer", action="store_true",
                     help="Megatron's flag: same as --sharding distributed-optimizer")
    grp.add_argument("--convention", type=choice("convention", CONVENTIONS + ("megatron-bridge",)),
                     default="framework",
                     help="framework (default: what Megatron-core / DeepSpeed / FSDP2 allocate; "
                     "the distributed optimizer keeps the whole fp32 gradient buffer, 6 + 12/d "
                     "bytes/param), seed000 (seed 000: 2 + 16/d; alias memsym), zero-paper "
                     "(ZeRO §5), megatron-lm or megatron-bridge (the frameworks' estimators)")
    # absent = None: the job's default (memsym.job.DEFAULTS) or the framework's, never a value
    # argparse would put in that looks given
    grp.add_argument("--precision", type=choice("precision", tuple(PRECISIONS)), default=None,
                     help="weight precision: " + ", ".join(PRECISIONS) + " (default bf16; a "
                     "Megatron-LM command without a MODEL: fp32 unless --bf16/--fp16)")
    grp.add_argument("--optimizer", type=choice("optimizer", tuple(OPTIMIZERS)), default=None,
                     help="optimizer: " + ", ".join(OPTIMIZERS) + " (default adam)")
    grp.add_argument("--offload", type=choice("offload", OFFLOADS), default=None,
                     help="CPU offload: " + ", ".join(OFFLOADS) + " (default none)")
    grp.add_argument("--gpu-memory", type=capacity, default=None, metavar="C",
                     help="GPU memory capacity: 80GB (1e9), 80GiB (2^30) or bytes")


def resolve_scheme(args) -> str:
    """The sharding scheme from --sharding / --use-distributed-optimizer (they must agree)."""
    from ..errors import InvalidValueError

    scheme = args.sharding
    if args.use_distributed_optimizer:
        if scheme not in (None, "distributed-optimizer"):
            raise InvalidValueError(f"--use-distributed-optimizer contradicts --sharding {scheme}")
        scheme = "distributed-optimizer"
    return scheme or "distributed-optimizer"


def fill_model_state_defaults(args) -> None:
    """The model-state estimate's precision, optimizer and offload where not given: the
    job's defaults (:data:`memsym.job.DEFAULTS`), one table for every path."""
    from ..job import DEFAULTS

    for name in ("precision", "optimizer", "offload"):
        if getattr(args, name, None) is None:
            setattr(args, name, DEFAULTS[name])


def model_state_convention(args) -> str:
    """The model-state convention of --convention: megatron-bridge uses megatron-lm's bytes."""
    # same byte model for model states (18 or 6 + 12/n)
    return "megatron-lm" if args.convention == "megatron-bridge" else args.convention


def model_state_setup(args, *, need_params: bool = True, keep_symbolic: bool = False):
    """(Total with byte widths substituted, values dict, scheme, widths) from parsed args.

    ``keep_symbolic``: :math:`b_{hp}` stays a symbol in the total, so a solved closed form
    reads as seed 000 writes it, d >= 16N/(Cpt - N b_hp); its width goes into
    ``values["b_hp"]`` and ``widths`` holds only the widths substituted.
    """
    from ..errors import InvalidValueError
    from ..symbols import b_hp
    from ..terms.model_state import byte_widths, model_state

    scheme = resolve_scheme(args)
    convention = model_state_convention(args)
    fill_model_state_defaults(args)
    if args.offload != "none" and (args.pp or 1) > 1:
        # REF: seed001 (MCore raises "no support for Pipeline parallelism with CPU offloading")
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
