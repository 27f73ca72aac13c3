"""Training logs of Megatron-LM, Megatron-Bridge and torchtitan: step times and peak memory.

``memsym check LOG`` compares a job's estimate with what its run printed.  This module reads
the lines the frameworks print, with bounded regular expressions, line by line, and never
evaluates anything.  The patterns are the frameworks' own format strings:

* Megatron-LM, ``training_log`` (megatron/training/training.py, d98e8a64dd, lines 3572-3578):
  ``iteration {:8d}/{:8d} |`` ... ``elapsed time per iteration (ms): {:.1f} |`` and, with
  ``--log-throughput``, ``throughput per GPU (TFLOP/s/GPU): {:.1f} |``.  The time is the mean
  over the ``--log-interval`` iterations since the previous line.
* Megatron-LM, ``report_memory`` (megatron/training/utils/common_utils.py, d98e8a64dd, lines
  313-334), called as ``report_memory(f'(after {iteration} iterations)')`` (training.py line
  3684): ``[Rank R] (after N iterations) memory (MB) | allocated: A | max allocated: MA |
  reserved: R | max reserved: MR``; MB is ``1024.0 * 1024.0`` bytes, ``max allocated`` is
  ``torch.cuda.max_memory_allocated()`` and ``max reserved`` ``torch.cuda.max_memory_reserved()``.
* Megatron-Bridge, ``training_log`` (src/megatron/bridge/training/utils/train_utils.py,
  067f987df0, lines 1093-1096): the same iteration line; its memory line (lines 1141-1150,
  ``report_memory`` lines 1160-1212, keys ``MEMORY_KEYS`` of
  src/megatron/bridge/training/utils/train_utils.py line 166) is ``[Rank R] (after N
  iterations) memory (GB) | ... | mem-max-allocated-gigabytes: X | ... |
  mem-max-reserved-gigabytes: Y | ...``: ``torch.cuda.memory_stats()`` peaks
  (``allocated_bytes.all.peak``, ``reserved_bytes.all.peak``) divided by 1.0e9 and rounded
  to 5 significant digits.
* torchtitan, ``MetricsProcessor.log`` (torchtitan/components/metrics.py, b5bcd76c66, lines
  478-536): ``step: {step:2}  loss: ...  memory: {max_reserved_gib:5.2f}GiB({pct:.2f}%)  tps:
  {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu}``, wrapped in ANSI colour codes.  The
  memory is ``reserved_bytes.all.peak`` over 2^30 (GiB), its peak reset after every log line
  (line 541); ``tps`` is ``ntokens_since_last_log / (time_delta * non_data_parallel_size)``
  (line 481, ``non_data_parallel_size = cp * tp * pp``, torchtitan/distributed/parallel_dims.py
  line 660), so one step takes ``tokens_per_step / (tps * G)`` seconds on G GPUs.

Warm-up: the first lines of a run are slower (allocator growth, NCCL set-up, compilation);
:func:`warmup_count` skips the first 10 % of the iteration lines, and at least 2, and the
step time is the median of the rest (:func:`steady_step`).

Examples
--------
>>> log = parse_log("iteration 1/ 9 | elapsed time per iteration (ms): 900.0 |\\n"
...                 "iteration 2/ 9 | elapsed time per iteration (ms): 510.0 |\\n"
...                 "iteration 3/ 9 | elapsed time per iteration (ms): 500.5 |\\n")
>>> log.framework, [str(i.step_time_s) for i in log.iterations]
('megatron', ['9/10', '51/100', '1001/2000'])
>>> warmup_count(3), str(steady_step(log)[1])
(2, '1001/2000')
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from fractions import Fraction
from statistics import median

from ..errors import InvalidValueError
from ..limits import MAX_LOG_BYTES, MAX_LOG_LINE_CHARS, MAX_LOG_LINES
from ..text import printable
from ._values import read_bounded

__all__ = ["Iteration", "MemoryReading", "TrainingLog", "parse_log", "read_log",
           "warmup_count", "steady_step", "WARMUP_FRACTION", "WARMUP_MIN", "METRIC_OF",
           "FRAMEWORK_NAMES"]

#: The share of the iteration lines skipped as warm-up (rounded up) ...
WARMUP_FRACTION = Fraction(1, 10)
#: ... and the fewest skipped.
WARMUP_MIN = 2

#: A number as the frameworks print it: digits, an optional fraction (bounded lengths).
_NUM = r"([0-9]{1,15}(?:\.[0-9]{1,20})?)"
_ANSI = re.compile(r"\x1b\[[0-9;]{0,20}m")
_ITERATION = re.compile(r"\biteration\s{1,20}([0-9]{1,12})/\s{0,20}[0-9]{1,12} \|")
_ELAPSED = re.compile(r"\| elapsed time per iteration \(ms\): " + _NUM + r" \|")
_THROUGHPUT = re.compile(r"\| throughput per GPU \(TFLOP/s/GPU\): " + _NUM + r" \|")
_MEMORY_HEAD = re.compile(r"(?:\[Rank ([0-9]{1,7})\] )?\(after ([0-9]{1,12}) iterations\) "
                          r"memory \((MB|GB)\)")
_MEGATRON_MAX = {"allocated": re.compile(r"\| max allocated: " + _NUM),
                 "reserved": re.compile(r"\| max reserved: " + _NUM)}
_BRIDGE_MAX = {"allocated": re.compile(r"\| mem-max-allocated-gigabytes: " + _NUM),
               "reserved": re.compile(r"\| mem-max-reserved-gigabytes: " + _NUM)}
_TITAN_STEP = re.compile(r"\bstep:\s{0,20}([0-9]{1,12})\s")
_TITAN_MEMORY = re.compile(r"\smemory:\s{0,20}" + _NUM + r"GiB\(")
_TITAN_TPS = re.compile(r"\stps: ([0-9]{1,3}(?:,[0-9]{3}){0,6}|[0-9]{1,21})(?:\s|$)")
_TITAN_TFLOPS = re.compile(r"\stflops: ([0-9]{1,3}(?:,[0-9]{3}){0,6}(?:\.[0-9]{1,20})?)(?:\s|$)")
_TITAN_RANK = re.compile(r"^\[rank([0-9]{1,7})\]:")

#: Bytes per printed unit: Megatron-LM's MB (1024.0 * 1024.0), Megatron-Bridge's GB (1.0e9),
#: torchtitan's GiB (1024^3).
_UNIT_BYTES = {"MB": 2**20, "GB": 10**9, "GiB": 2**30}

#: Log metric -> memsym's ``--metric`` (memsym.terms.allowances.METRICS): what the printed
#: peak counts.
METRIC_OF = {"max allocated": "allocated", "max reserved": "reserved"}

#: The framework names :attr:`TrainingLog.framework` takes.
FRAMEWORK_NAMES = {"megatron": "Megatron-LM", "megatron-bridge": "Megatron-Bridge",
                   "torchtitan": "torchtitan"}
#: What each framework's log prints per iteration: the step time (Megatron's "elapsed time
#: per iteration (ms)") or the throughput (torchtitan's "tps", tokens per second per GPU).
LOG_RATE = {"megatron": "step_time", "megatron-bridge": "step_time",
            "torchtitan": "tokens_per_s"}


@dataclass(frozen=True)
class Iteration:
    """One iteration line.

    Attributes
    ----------
    iteration : int
        The iteration (Megatron) or step (torchtitan) number printed.
    step_time_s : Fraction or None
        Megatron's ``elapsed time per iteration`` [s], exact from the printed digits; None for
        torchtitan, whose step time needs the job (:attr:`tokens_per_s`).
    tflops : Fraction or None
        The TFLOP/s per GPU the framework printed (its own FLOP count), when printed.
    tokens_per_s : Fraction or None
        torchtitan's ``tps`` (tokens per second per GPU).
    line : int
        The line number in the log (1-based).
    """

    iteration: int
    step_time_s: Fraction | None
    tflops: Fraction | None
    tokens_per_s: Fraction | None
    line: int


@dataclass(frozen=True)
class MemoryReading:
    """One peak-memory figure printed in the log.

    Attributes
    ----------
    metric : str
        memsym's metric it equals: ``"allocated"`` (torch.cuda.max_memory_allocated) or
        ``"reserved"`` (torch.cuda.max_memory_reserved).
    bytes : int
        The value in bytes (the printed number times its unit, rounded to a byte).
    printed : str
        The number and unit as printed, e.g. ``"63359.77001953125 MB (2^20 bytes)"``.
    iteration : int or None
        The iteration after which it was printed.
    rank : int or None
        The rank that printed it, when the line says.
    line : int
        The line number in the log.
    """

    metric: str
    bytes: int
    printed: str
    iteration: int | None
    rank: int | None
    line: int


@dataclass(frozen=True)
class TrainingLog:
    """What a training log says: its iteration lines and its peak-memory figures.

    Attributes
    ----------
    framework : str
        ``"megatron"``, ``"megatron-bridge"`` or ``"torchtitan"`` (:data:`FRAMEWORK_NAMES`).
    iterations : tuple of Iteration
        One per iteration number, in the order printed (a number printed again, by another
        rank or a restarted run, is kept once: its first line).
    memory : tuple of MemoryReading
        Every peak figure printed.
    sha256 : str
        The SHA-256 of the log's text (UTF-8), naming the log in a calibration.
    lines : int
        The log's line count.
    """

    framework: str
    iterations: tuple
    memory: tuple
    sha256: str
    lines: int
    notes: tuple = field(default=())

    def peak(self, metric: str) -> MemoryReading | None:
        """The largest figure of ``metric`` (peaks only grow, or are reset per log line, so
        the largest is the run's peak), or None when the log prints none."""
        found = [m for m in self.memory if m.metric == metric]
        return max(found, key=lambda m: (m.bytes, -m.line)) if found else None


def _number(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def _memory(line: str, number: int, metric_patterns, unit: str, head) -> list:
    out = []
    rank = None if head.group(1) is None else int(head.group(1))
    for metric, pattern in metric_patterns.items():
        got = pattern.search(line)
        if got:
            value = _number(got.group(1))
            shown = {"MB": "MB (2^20 bytes)", "GB": "GB (1e9 bytes)"}[unit]
            out.append(MemoryReading(metric, round(value * _UNIT_BYTES[unit]),
                                     f"{got.group(1)} {shown}", int(head.group(2)), rank, number))
    return out


def parse_log(text: str, name: str = "log") -> TrainingLog:
    """Read the iteration and memory lines of a training log (see the module's docstring).

    Raises
    ------
    InvalidValueError
        Too many lines, no iteration line of any of the three frameworks, lines of two
        frameworks, or a step time or throughput of zero.
    """
    lines = text.splitlines()
    if len(lines) > MAX_LOG_LINES:
        raise InvalidValueError(f"{name} has {len(lines)} lines, more than "
                                f"{MAX_LOG_LINES} (memsym.limits.MAX_LOG_LINES); keep its "
                                "iteration and memory lines (grep) and check those")
    iterations, memory, kinds, seen, titan_rank = [], [], set(), set(), None
    for number, raw in enumerate(lines, 1):
        if len(raw) > MAX_LOG_LINE_CHARS:
            continue
        line = _ANSI.sub("", raw)
        head = _MEMORY_HEAD.search(line)
        if head:
            if head.group(3) == "MB":
                kinds.add("megatron")
                memory += _memory(line, number, _MEGATRON_MAX, "MB", head)
            else:
                kinds.add("megatron-bridge")
                memory += _memory(line, number, _BRIDGE_MAX, "GB", head)
            continue
        it = _ITERATION.search(line)
        if it:
            elapsed = _ELAPSED.search(line)
            if not elapsed:
                continue
            kinds.add("megatron-iteration")
            step = int(it.group(1))
            seconds = _number(elapsed.group(1)) / 1000
            if seconds <= 0:
                raise InvalidValueError(f"{name} line {number}: iteration {step} took "
                                        f"{elapsed.group(1)} ms; a step time must be positive")
            if step not in seen:
                seen.add(step)
                tput = _THROUGHPUT.search(line)
                iterations.append(Iteration(step, seconds,
                                            _number(tput.group(1)) if tput else None,
                                            None, number))
            continue
        step_match, tps = _TITAN_STEP.search(line), _TITAN_TPS.search(line)
        if step_match and tps:
            rank = _TITAN_RANK.match(line)
            rank = None if rank is None else int(rank.group(1))
            if titan_rank is None:
                titan_rank = rank
            if rank != titan_rank:
                continue                          # the first rank's lines only
            kinds.add("torchtitan")
            step, rate = int(step_match.group(1)), _number(tps.group(1))
            if rate <= 0:
                raise InvalidValueError(f"{name} line {number}: step {step} printed tps: 0; "
                                        "a throughput must be positive")
            mem = _TITAN_MEMORY.search(line)
            if mem:
                memory.append(MemoryReading("reserved", round(_number(mem.group(1)) * 2**30),
                                            f"{mem.group(1)} GiB (2^30 bytes)", step, rank,
                                            number))
            if step not in seen:
                seen.add(step)
                flops = _TITAN_TFLOPS.search(line)
                iterations.append(Iteration(step, None,
                                            _number(flops.group(1)) if flops else None, rate,
                                            number))
    if "torchtitan" in kinds and kinds & {"megatron", "megatron-bridge", "megatron-iteration"}:
        raise InvalidValueError(f"{name} mixes torchtitan lines with Megatron lines; check "
                                "one run's log at a time")
    if not iterations:
        raise InvalidValueError(
            f"{name}: no iteration line of Megatron-LM or Megatron-Bridge ('iteration N/M | "
            "... | elapsed time per iteration (ms): T |') or of torchtitan ('step: N ... "
            "memory: X GiB(P%)  tps: T ...') found")
    framework = "torchtitan" if "torchtitan" in kinds else \
        "megatron-bridge" if "megatron-bridge" in kinds else "megatron"
    digest = hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()
    return TrainingLog(framework, tuple(iterations), tuple(memory), digest, len(lines))


def read_log(path) -> TrainingLog:
    """Read the training log at ``path`` (at most :data:`memsym.limits.MAX_LOG_BYTES` bytes,
    checked before it is read; undecodable bytes replaced) and :func:`parse_log` it."""
    text = read_bounded(path, "training log", limit=MAX_LOG_BYTES, errors="replace")
    return parse_log(text, f"training log {printable(str(path), 120)!r}")


def warmup_count(lines: int, warmup: int | None = None) -> int:
    """How many of ``lines`` iteration lines are warm-up: ``warmup`` when given, else the
    first 10 % (rounded up) and at least 2.

    Examples
    --------
    >>> [warmup_count(n) for n in (3, 20, 21, 100)]
    [2, 2, 3, 10]
    >>> warmup_count(10, warmup=0)
    0
    """
    if warmup is not None:
        return warmup
    return max(WARMUP_MIN, -(-lines * WARMUP_FRACTION.numerator // WARMUP_FRACTION.denominator))


def steady_step(log: TrainingLog, warmup: int | None = None, *,
                tokens_per_step: int | None = None, gpus: int | None = None):
    """``(skipped, median step time [s], kept iterations)``: the warm-up skipped
    (:func:`warmup_count`), the median of the rest, exact.

    torchtitan prints tokens per second per GPU: its step time is
    ``tokens_per_step / (tps * gpus)``, which needs the job's tokens per step and GPU count.

    Parameters
    ----------
    log : TrainingLog
        The parsed log.
    warmup : int, optional
        Iteration lines skipped as warm-up [1] (default: :func:`warmup_count`'s rule).
    tokens_per_step : int, optional
        The job's tokens per optimizer step [tokens] (torchtitan logs only).
    gpus : int, optional
        The job's GPU count [GPUs] (torchtitan logs only).
    """
    skipped = warmup_count(len(log.iterations), warmup)
    kept = log.iterations[skipped:]
    if not kept:
        raise InvalidValueError(
            f"the log has {len(log.iterations)} iteration line(s) and the first {skipped} are "
            f"warm-up (the first 10 %, at least {WARMUP_MIN}; --warmup-lines N to change): no "
            "steady iteration left to measure")
    if LOG_RATE[log.framework] == "tokens_per_s":
        if not tokens_per_step or not gpus:
            raise InvalidValueError("a torchtitan log prints tokens per second (tps): its step "
                                    "time needs the job's global batch size (--global-batch-"
                                    "size) and GPU count")
        times = [Fraction(tokens_per_step) / (i.tokens_per_s * gpus) for i in kept]
    else:
        times = [i.step_time_s for i in kept]
    return skipped, Fraction(median(times)), kept
