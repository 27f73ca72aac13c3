"""A step-time calibration: the one factor on the compute part of memsym's step time that
makes it equal a measured median (``memsym check LOG JOB --calibrate FILE``), read back by
``check`` and ``estimate`` with ``--calibration FILE``.

The factor ``k`` solves ``T - C + k C = T_measured`` for the predicted step time ``T`` and its
compute part ``C`` (the GEMMs and attention of the busiest stage,
:func:`memsym.timing.step.step_time`): ``k = 1 + (T_measured - T) / C``.  Applying it adds
``(k - 1) C`` to the step time and to its compute part; the bubble and the overlaps are not
priced again (first order: the compute part is what a GPU's efficiency moves).  A calibration
is made on one GPU and refused on another; an applied calibration is always stated.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["FORMAT", "factor_for", "calibration_record", "write_calibration",
           "read_calibration", "apply_calibration"]

#: The ``format`` key of a calibration file (its version).
FORMAT = "memsym-calibration/1"


def factor_for(step_s, compute_s, measured_s) -> Fraction:
    """The factor ``k`` on the compute part (see the module's docstring), exact.

    Examples
    --------
    >>> factor_for(Fraction(10), Fraction(8), Fraction(12))
    Fraction(5, 4)
    """
    from ..errors import InvalidValueError
    from ..limits import CALIBRATION_RANGE

    step, compute, measured = Fraction(step_s), Fraction(compute_s), Fraction(measured_s)
    if compute <= 0:
        raise InvalidValueError("the predicted step time has no compute part to calibrate")
    k = 1 + (measured - step) / compute
    lo, hi = CALIBRATION_RANGE
    if not lo <= k <= hi:
        raise InvalidValueError(
            f"the measured step time {float(measured):.4g} s would need the compute part "
            f"({float(compute):.4g} s of {float(step):.4g} s) scaled by {float(k):.3g}, "
            f"outside {lo}..{hi} (memsym.limits.CALIBRATION_RANGE): is the job the one that ran?")
    return k


def calibration_record(k: Fraction, *, gpu: str, gpu_class, job: dict, log_sha256: str,
                       log_name: str, framework: str, measured_s, predicted_s, date: str) -> dict:
    """The JSON object of a calibration file (``gpu_class``: the catalogue's ``arch_class``,
    whose GEMM-efficiency curve the factor corrects, :mod:`memsym.timing.efficiency`)."""
    return {"format": FORMAT, "compute_factor": f"{k.numerator}/{k.denominator}",
            "compute_factor_float": float(k), "gpu": gpu, "gpu_class": gpu_class, "job": job,
            "log": {"sha256": log_sha256, "name": log_name, "framework": framework},
            "measured_step_time_s": float(measured_s),
            "predicted_step_time_s": float(predicted_s), "date": date}


def write_calibration(path, record: dict) -> None:
    """Write ``record`` to ``path`` as JSON (an OSError is the CLI's one-line error)."""
    import json

    with open(path, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2)
        fh.write("\n")


def read_calibration(path) -> dict:
    """A calibration file read back and checked: ``{"factor": Fraction, "gpu": str, ...}``.

    Raises
    ------
    InvalidValueError
        Not a calibration file, a factor that is not a fraction ``p/q`` or outside
        :data:`memsym.limits.CALIBRATION_RANGE`.
    """
    from ..errors import InvalidValueError
    from ..limits import CALIBRATION_RANGE
    from ..readers._values import load_json, read_bounded
    from ..text import printable

    shown = printable(str(path), 120)
    data = load_json(read_bounded(path, "calibration file"), "calibration file")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidValueError(f"calibration file {shown!r} is not a memsym calibration "
                                f"(format {FORMAT!r}, written by memsym check --calibrate)")
    raw, gpu = data.get("compute_factor"), data.get("gpu")
    num, slash, den = str(raw).partition("/")
    if not (isinstance(raw, str) and slash and num.isascii() and num.isdigit()
            and den.isascii() and den.isdigit() and len(raw) <= 40 and int(den) > 0):
        raise InvalidValueError(f"calibration file {shown!r}: compute_factor must be a "
                                f"fraction 'p/q', got {printable(str(raw), 40)!r}")
    k = Fraction(int(num), int(den))
    lo, hi = CALIBRATION_RANGE
    if not lo <= k <= hi:
        raise InvalidValueError(f"calibration file {shown!r}: compute_factor {float(k):.3g} "
                                f"outside {lo}..{hi} (memsym.limits.CALIBRATION_RANGE)")
    if not isinstance(gpu, str) or not gpu:
        raise InvalidValueError(f"calibration file {shown!r}: no 'gpu'")
    log = data.get("log") if isinstance(data.get("log"), dict) else {}
    gpu_class = data.get("gpu_class")
    return {"factor": k, "gpu": gpu, "file": shown, "date": printable(str(data.get("date")), 40),
            "gpu_class": gpu_class if isinstance(gpu_class, str) else None,
            "log_sha256": printable(str(log.get("sha256")), 64)}


def apply_calibration(rep: dict, cal: dict, gpu_name: str, gpu_class=None) -> Fraction:
    """Scale the compute part of ``rep``'s step time by the calibration's factor, in place:
    ``step_time_s``, ``step_time_parts_s["compute"]`` (and ``pipeline``), MFU and HFU; adds
    ``rep["calibration"]`` and a note.  Returns the calibrated step time [s], exact (the
    float in ``rep`` is its rounding).  A calibration applies on its own GPU or on another of
    the same class (``gpu_class``, said in the note); on any other it is refused.

    Examples
    --------
    >>> rep = {"step_time_s": 10.0, "step_time_parts_s": {"compute": 8.0, "pipeline": 9.0},
    ...        "mfu": 0.5, "hfu": 0.5, "notes": []}
    >>> cal = {"factor": Fraction(5, 4), "gpu": "h100-80gb", "file": "c.json", "date": "d",
    ...        "log_sha256": "0" * 64}
    >>> apply_calibration(rep, cal, "h100-80gb")
    Fraction(12, 1)
    >>> rep["step_time_s"], rep["step_time_parts_s"]["compute"], rep["mfu"]
    (12.0, 10.0, 0.4166666666666667)
    """
    from ..errors import InvalidValueError

    same_class = cal.get("gpu_class") is not None and cal.get("gpu_class") == gpu_class
    if cal["gpu"] != gpu_name and not same_class:
        raise InvalidValueError(f"calibration {cal['file']!r} was made on {cal['gpu']}, the "
                                f"job runs on {gpu_name}: calibrate on this GPU")
    where = cal["gpu"] if cal["gpu"] == gpu_name else \
        f"{cal['gpu']}, applied on {gpu_name} of the same class {gpu_class}"
    parts = rep["step_time_parts_s"]
    k = cal["factor"]
    before = Fraction(rep["step_time_s"])
    added = (k - 1) * Fraction(parts["compute"])
    after = before + added
    parts["compute"] = float(Fraction(parts["compute"]) + added)
    if "pipeline" in parts:
        parts["pipeline"] = float(Fraction(parts["pipeline"]) + added)
    rep["step_time_s"] = float(after)
    for key in ("mfu", "hfu"):
        if rep.get(key) is not None:
            rep[key] = float(Fraction(rep[key]) * before / after)
    rep["calibration"] = {"file": cal["file"], "compute_factor": float(k),
                          "compute_factor_exact": f"{k.numerator}/{k.denominator}",
                          "gpu": cal["gpu"], "gpu_class": cal.get("gpu_class"),
                          "date": cal["date"], "log_sha256": cal["log_sha256"],
                          "uncalibrated_step_time_s": float(before)}
    rep.setdefault("notes", []).append(
        f"calibration applied: compute part of the step time x {float(k):.4g} "
        f"({cal['file']}, made {cal['date']} on {where}); uncalibrated step time "
        f"{float(before):.4g} s")
    return after
