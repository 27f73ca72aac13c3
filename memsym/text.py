"""Text that leaves memsym: names shown as data, bad values echoed short, JSON kept finite.

Anything that came from a user or a file (a config's ``_name_or_path``, a bad option value) is
passed through :func:`printable` or :func:`short` before it is printed, so a newline cannot
forge an output line and an ANSI escape cannot reach the terminal; :func:`finite_json` is the
one JSON writer, and it refuses ``inf``/``NaN`` naming the key instead of emitting ``Infinity``.
:func:`shared_doc` writes a block that several docstrings share (the same parameters) once.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
import unicodedata
from fractions import Fraction
from numbers import Integral, Rational as _PyRational
import sys

from .errors import InvalidValueError

__all__ = ["printable", "short", "finite_json", "jsonable", "approx", "float_or_inf",
           "looks_like_option", "option_values", "shared_doc"]

#: Unicode categories never printed raw: controls (newline, ESC, DEL, C1), format characters
#: (bidirectional overrides, zero-width joiners), separators of lines and paragraphs,
#: surrogates, private-use and unassigned code points.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escape(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    if unicodedata.category(ch) not in _HIDDEN:
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(name, limit: int = 80) -> str:
    """``name`` as one line of inert text: control characters escaped, long values truncated.

    Newlines become ``\\n``, the ESC that starts an ANSI sequence becomes ``\\x1b`` (so the
    sequence prints as text and does nothing), bidirectional overrides become ``\\u202e``;
    backslashes are doubled so the escaping cannot be forged either.  Text longer than
    ``limit`` characters (after escaping) is cut and marked with how much was left out.

    Parameters
    ----------
    name : object
        Any value; ``str(name)`` is shown.
    limit : int
        The most characters returned before the truncation marker (>= 8).

    Examples
    --------
    >>> printable("llama\\n7b: fits\\x1b[2J")
    'llama\\\\n7b: fits\\\\x1b[2J'
    >>> printable("x" * 100, limit=10)
    'xxxxxxxxxx...(+90 chars)'
    """
    text = name if isinstance(name, str) else str(name)
    limit = max(int(limit), 8)
    out, used = [], 0
    for i, ch in enumerate(text):
        piece = _escape(ch)
        if used + len(piece) > limit:
            return "".join(out) + f"...(+{len(text) - i} chars)"
        out.append(piece)
        used += len(piece)
    return "".join(out)


def _digits(n: int) -> int:
    """The number of decimal digits of ``abs(n)`` (exact, without ``str``)."""
    n = abs(n)
    if n < 10:
        return 1
    k = int((n.bit_length() - 1) * 0.30102999566398119521) + 1  # digits of 2^(bits-1), +-1
    if n < 10 ** (k - 1):
        k -= 1
    elif n >= 10**k:
        k += 1
    return k


def _int_text(n: int, limit: int) -> str:
    if n.bit_length() < 3.3 * limit:  # few digits: str is cheap and within Python's limit
        text = str(n)
        if len(text) <= limit:
            return text
    digits = _digits(n)
    head = abs(n) // 10 ** (digits - 12)
    sign = "-" if n < 0 else ""
    return f"{sign}{head}...({digits} digits)"


def short(value, limit: int = 40) -> str:
    """A bad value as echoed in an error message: at most about ``limit`` characters.

    Huge integers are shown by their first digits and their length (a 5,000-digit value is
    not echoed in full, and ``str`` of it would raise past Python's 4,300-digit limit);
    text goes through :func:`printable`.

    Examples
    --------
    >>> short(10**5000)
    '100000000000...(5001 digits)'
    >>> short("7B\\n")
    "'7B\\\\n'"
    >>> short(7.5)
    '7.5'
    """
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, Integral):
        return _int_text(int(value), limit)
    if isinstance(value, str):
        return "'" + printable(value, limit) + "'"
    if isinstance(value, float):
        return repr(value)
    try:
        import sympy as sp

        if isinstance(value, sp.Integer):
            return _int_text(int(value), limit)
        if isinstance(value, sp.Rational):
            return f"{_int_text(int(value.p), limit)}/{_int_text(int(value.q), limit)}"
    except ImportError:  # pragma: no cover - sympy is a dependency
        pass
    if isinstance(value, Fraction):
        return f"{_int_text(value.numerator, limit)}/{_int_text(value.denominator, limit)}"
    return printable(value, limit)


def float_or_inf(value) -> float:
    """``float(value)``, or ``inf`` of its sign where an exact number is too large for a float.

    Python's ``float`` raises :class:`OverflowError` for an integer, a fraction or a SymPy
    number beyond about 1.8e308 (either sign); the callers that print or refuse such a value
    take ``inf`` or ``-inf`` and test :func:`math.isfinite` once.

    Examples
    --------
    >>> float_or_inf(Fraction(3, 2)), float_or_inf(10**400), float_or_inf(-10**400)
    (1.5, inf, -inf)
    """
    try:
        return float(value)
    except OverflowError:
        return -math.inf if value < 0 else math.inf


def approx(value, digits: int = 4) -> str:
    """An exact number in ``%g`` style, safe beyond float range (no ``inf``, no overflow).

    Examples
    --------
    >>> approx(80 * 10**9), approx(2 * 10**400), approx(Fraction(1, 3))
    ('8e+10', '2e+400', '0.3333')
    """
    x = _as_fraction(value, "value")
    if x == 0:
        return "0"
    f = float_or_inf(x)
    if math.isfinite(f) and f != 0 and 1e-300 < abs(f) < 1e300:
        return f"{f:.{digits}g}"
    sign = "-" if x < 0 else ""
    x = abs(x)
    exp = _digits(x.numerator) - _digits(x.denominator)
    scaled = x / Fraction(10) ** exp
    if scaled < 1:
        scaled, exp = scaled * 10, exp - 1
    mant = f"{float(scaled):.{digits}g}"
    if mant.startswith("10"):  # rounding carried into the next power of ten
        mant, exp = "1", exp + 1
    return f"{sign}{mant}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"


def _as_fraction(value, where: str) -> Fraction:
    if isinstance(value, bool):
        raise InvalidValueError(f"{where} must be a number, got {value!r}")
    if isinstance(value, Integral):
        return Fraction(int(value))
    if isinstance(value, _PyRational):
        return Fraction(int(value.numerator), int(value.denominator))
    try:
        import sympy as sp

        if isinstance(value, sp.Basic):
            if isinstance(value, sp.Rational):
                return Fraction(int(value.p), int(value.q))
            if value.is_number and value.is_finite and value.is_real:
                # 30 significant digits, then exactly: no float overflow for 10^400
                num, den = sp.Rational(value.evalf(30)).as_numer_denom()
                return Fraction(int(num), int(den))
            else:
                raise InvalidValueError(f"{where} is not finite: {short(value)}")
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, float) or hasattr(value, "__float__") and not isinstance(value, str):
        f = float(value)
        if not math.isfinite(f):
            raise InvalidValueError(f"{where} is not finite: {f}")
        return Fraction(f)
    raise InvalidValueError(f"{where} must be a number, got {type(value).__name__}")


def jsonable(obj, path: str = ""):
    """``obj`` as plain JSON data, refusing non-finite numbers and naming their key.

    Exact integers (Python, numpy or SymPy) stay exact integers; other exact numbers and
    numpy floats become finite floats; keys become strings.

    Raises
    ------
    InvalidValueError
        For ``inf``/``NaN`` or a number outside float range, naming the path (``bytes.total``).

    Examples
    --------
    >>> jsonable({"a": [1, 2.5], "b": Fraction(1, 4)})
    {'a': [1, 2.5], 'b': 0.25}
    """
    where = printable(path, 60) if path else "the output"  # keys may come from a file
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, Integral):
        return int(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise InvalidValueError(f"{where} would be {obj}: the inputs give a non-finite result "
                                    "(refused rather than emitted as invalid JSON)")
        return obj
    if isinstance(obj, dict):
        out = {}
        for key, val in obj.items():
            name = key if isinstance(key, str) else str(key)
            out[name] = jsonable(val, f"{path}.{name}" if path else name)
        return out
    if isinstance(obj, (list, tuple)):
        return [jsonable(val, f"{path}[{i}]") for i, val in enumerate(obj)]

    sp = sys.modules.get("sympy")
    if sp is not None and isinstance(obj, sp.Basic):
        if isinstance(obj, sp.Integer):
            return int(obj)
        if obj.has(sp.nan, sp.zoo, sp.oo, -sp.oo) or not obj.is_number:
            raise InvalidValueError(f"{where} would be {short(obj)}: not a finite number")
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return jsonable(obj.tolist(), path)
    try:
        frac = _as_fraction(obj, where)
    except InvalidValueError:
        raise InvalidValueError(f"{where} would be {short(obj)}: not a finite number") from None
    val = float_or_inf(frac)
    if not math.isfinite(val):
        raise InvalidValueError(f"{where} = {approx(frac)} is outside the float range of JSON "
                                "numbers (refused rather than emitted as Infinity)")
    return val


def finite_json(obj, **kwargs) -> str:
    """JSON text of ``obj`` that never contains ``Infinity`` or ``NaN`` (see :func:`jsonable`).

    Examples
    --------
    >>> finite_json({"total": 10**30})
    '{"total": 1000000000000000000000000000000}'
    >>> finite_json({"time": {"days": float("inf")}})
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: time.days would be inf: the inputs give a non-finite result (refused rather than emitted as invalid JSON)
    """
    return json.dumps(jsonable(obj), allow_nan=False, **kwargs)


def looks_like_option(word: str) -> bool:
    """argparse's rule: a word starting with '-' is an option unless it is a negative number.

    One rule for the CLI's reading of a command line (:mod:`memsym.cli.reading`) and
    Megatron-LM's reader (:mod:`memsym.readers.megatron`).

    >>> looks_like_option("--lr"), looks_like_option("-1e-4"), looks_like_option("3e-4")
    (True, False, False)
    """
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
        return False
    except ValueError:
        return True


def option_values(words, i: int, arity, got=()) -> tuple:
    """argparse's reading of an option's values: ``(values, next index)``.

    The words from ``words[i]`` up to the next option (:func:`looks_like_option`), at most
    ``arity`` values in all (``got`` counted: the values already read, e.g. inline) when
    ``arity`` is a count; every one of them for ``"+"`` and ``"*"``.

    >>> option_values(["a", "b", "--x", "c"], 0, "+"), option_values(["a", "b"], 0, 2, ["z"])
    ((['a', 'b'], 2), (['z', 'a'], 1))
    """
    got = list(got)
    while i < len(words) and not looks_like_option(words[i]):
        if isinstance(arity, int) and len(got) == arity:
            break
        got.append(words[i])
        i += 1
    return got, i


_PLACEHOLDER = re.compile(r"^([ \t]*)\{([A-Za-z_]\w*)\}[ \t]*$", re.M)


def shared_doc(**blocks):
    """A decorator that writes shared blocks into a function's docstring.

    Functions that take the same parameters describe them once: a docstring line holding only
    ``{name}`` is replaced by the block ``name``, each of its lines indented as the
    placeholder is.  The docstring a reader, ``help`` or Sphinx sees is the whole one.

    Parameters
    ----------
    **blocks : str
        The blocks by placeholder name, written at the left margin (a common indentation
        is removed).

    Returns
    -------
    callable
        The decorator (a placeholder without a block raises KeyError at import).

    Examples
    --------
    >>> @shared_doc(params="x : int\\n    A number [1].")
    ... def twice(x):
    ...     '''Twice ``x``.
    ...
    ...     {params}
    ...     '''
    >>> print(twice.__doc__.strip())
    Twice ``x``.
    <BLANKLINE>
        x : int
            A number [1].
    """
    texts = {name: textwrap.dedent(text).strip("\n") for name, text in blocks.items()}

    def fill(fn):
        if fn.__doc__:          # None under python -OO
            fn.__doc__ = _PLACEHOLDER.sub(
                lambda m: textwrap.indent(texts[m.group(2)], m.group(1)), fn.__doc__)
        return fn

    return fill
