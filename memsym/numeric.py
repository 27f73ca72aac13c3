"""The numeric boundary: totals compiled once into broadcasting numpy (or math) functions.

``lambdify`` costs milliseconds to build and microseconds to call, while ``subs().evalf()``
costs about a millisecond per point; so each expression is compiled once, with common
subexpression elimination, and cached by the (hashable) expression itself.  numpy is
imported only when a numpy function is built, which keeps ``import memsym`` lean.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Mapping
import inspect
import keyword
import linecache
import operator

import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter

from .errors import InvalidValueError
from .symbols import lookup, registry
from .values import as_expr
from .text import approx, float_or_inf, short
from .compile_cache import FUNC_NAME
from . import compile_cache

__all__ = ["CompiledTotal", "compile_expr", "compile_total", "finite_float", "expression_code",
           "function_namespace"]


def _extreme(inputs: Mapping) -> str:
    """The inputs most likely to blame for an out-of-range result: those farthest from 1 in
    orders of magnitude (1e-320, 1e200), or all of them when none stands out."""
    def mag(v) -> float:
        try:
            frac = v if isinstance(v, Fraction) else Fraction(v) if not isinstance(v, sp.Basic) \
                else Fraction(int(sp.Rational(v).p), int(sp.Rational(v).q))
        except (TypeError, ValueError, OverflowError):
            return 0.0
        if frac == 0:
            return 400.0
        num, den = abs(frac.numerator), frac.denominator
        return abs(math.log10(num) - math.log10(den)) if num and den else 0.0

    scored = sorted(((mag(v), str(k), v) for k, v in inputs.items()), reverse=True)
    if not scored:
        return "the inputs"
    top = [x for x in scored if x[0] >= 100] or scored
    return ", ".join(f"{k} = {short(v)}" for _, k, v in top[:3])


def finite_float(value, what: str = "result", inputs: Mapping | None = None) -> float:
    """``value`` (exact or float) as a finite Python float, or an error naming the inputs.

    memsym computes exactly, so ``--efficiency 1e-320`` or ``--tokens 1e200`` give a finite
    exact time; only its conversion to a float (for printing or JSON) overflows to ``inf`` or
    underflows to 0.  This refuses both instead of printing ``inf`` or ``Infinity``.

    Parameters
    ----------
    value : int, float, fractions.Fraction or sympy number
        The result.
    what : str
        What it is, with its unit (``"training time [s]"``).
    inputs : mapping, optional
        The inputs it came from (name to value); the extreme ones are named in the error.

    Examples
    --------
    >>> finite_float(sp.Rational(3, 2), "step time [s]")
    1.5
    >>> finite_float(sp.Integer(10)**400, "training time [s]", {"tokens": 10**200, "eta": 0.5})
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: training time [s] = 1e+400 is outside the float range (about 1e-308 to 1e308); it comes from tokens = 100000000000...(201 digits)
    """
    blame = f"; it comes from {_extreme(inputs)}" if inputs else ""
    if isinstance(value, sp.Basic):
        if value.has(sp.nan, sp.zoo, sp.oo, -sp.oo) or not value.is_number:
            raise InvalidValueError(f"{what} is not a finite number ({value}){blame}")
        exact_val = value
    else:
        exact_val = value
    out = float_or_inf(exact_val)
    if not math.isfinite(out):
        shown = approx(exact_val) if not isinstance(exact_val, float) else repr(exact_val)
        raise InvalidValueError(f"{what} = {shown} is outside the float range (about 1e-308 to "
                                f"1e308){blame}")
    if out == 0 and exact_val != 0:
        raise InvalidValueError(f"{what} = {approx(exact_val)} is below the float range (it would "
                                f"print as 0){blame}")
    return out


def _argnames(exprs) -> tuple[str, ...]:
    free = set().union(*(as_expr(x).free_symbols for x in exprs)) if exprs else set()
    return tuple(sorted(s.name for s in free))


def _fast_printer(base):
    """A code printer that writes small integer powers as products and reciprocals as
    divisions: ``t**(-1.0)`` goes through numpy's generic ``pow`` loop, several times slower
    than ``1/t`` on arrays, and the CSE of memory totals is full of ``1/t``, ``1/p``."""

    class FastPowPrinter(base):
        # terms printed in SymPy's internal order: sorting every Add (the default "lex"
        # order) is a fifth of lambdify's time on the search's templates, and the sum is the
        # same to rounding
        _default_settings = {**base._default_settings, "order": "none"}

        def _print_Pow(self, expr, rational=False):
            b, e = expr.as_base_exp()
            if e.is_Integer and 1 <= abs(int(e)) <= 3:
                x = self.parenthesize(b, 1000)  # atom-level precedence: always bracketed
                prod = "*".join([x] * abs(int(e)))
                return f"({prod})" if e > 0 else f"(1/({prod}))"
            return super()._print_Pow(expr, rational=rational)

    return FastPowPrinter


def _cse(exprs):
    """``sympy.cse``, with reciprocals of single symbols put back inline.

    CSE extracts ``x0 = 1/t`` because ``1/t`` occurs in every term of a memory total; on
    arrays that costs an extra pass (a reciprocal, then multiplications) where ``N/(p*t)``
    divides directly.  Inlining them brings the compiled P1 sweep from about 0.8x to about
    0.95x of the hand-written numpy (see ``memsym bench``).
    """
    replacements, reduced = sp.cse(exprs)
    keep, inline = [], {}
    for sym, expr in replacements:
        expr = expr.xreplace(inline)
        if expr.is_Pow and expr.exp == -1 and expr.base.is_Symbol:
            inline[sym] = expr
        else:
            keep.append((sym, expr))
    return keep, [r.xreplace(inline) for r in reduced]


def _lambdify_options(backend: str) -> dict:
    printer = _fast_printer(NumPyPrinter if backend == "numpy" else PythonCodePrinter)
    # the printer writes Min/Max of several arguments as functools.reduce(...): lambdify
    # imports what its own printers need, not what a printer class passed in needs
    extra = {"functools": functools, "math": math}
    return {"modules": [extra, backend], "printer": printer}


@functools.lru_cache(maxsize=4)
def _namespace(backend: str) -> dict:
    """The globals a compiled function of ``backend`` runs in.

    The printers qualify every name they write (``numpy.maximum``, ``math.sqrt``,
    ``functools.reduce``), so the modules themselves are all the code needs.  lambdify's own
    namespace adds ``from numpy import *``: a tenth of a second in a new process (it loads
    numpy's lazy submodules), spent for names the printed code never uses.
    """
    if backend == "numpy":
        import numpy

        return {"numpy": numpy, "math": math, "functools": functools}
    return {"math": math, "functools": functools}


#: The most subexpressions a code printer keeps printed (:func:`_memo_printer`).
_MEMO_MAX = 1 << 16


def _memo_printer(base):
    """``base`` (a code printer class) that prints each subexpression once.

    A search's templates are a hundred and more sums of the same few hundred products (the
    DeepSeek-V3 search: 143 distinct expressions, 4,792 operations, 389 distinct ones), and
    SymPy's printers print every occurrence again (printing those 143 took 170 ms, 55 ms with
    this, on a loaded 2-core machine, in one process).
    The code of a subexpression does not depend on where it stands (its parent brackets it),
    except a bare Float at the top (``full_prec="auto"`` strips zeros only below it): nested
    calls only are kept, and none whose printing recorded something unsupported (those
    records are made anew for each ``doprint``).
    """

    class MemoPrinter(base):

        def __init__(self, settings=None):
            super().__init__(settings)
            self._memo = {}

        def _handle_UnevaluatedExpr(self, expr):
            # SymPy's doprint rewrites re(UnevaluatedExpr(...)) with a replace() that walks
            # every node of the tree (shared subexpressions again and again); without an re
            # in it the tree comes back unchanged
            return super()._handle_UnevaluatedExpr(expr) if expr.has(sp.re) else expr

        def _print(self, expr, **kwargs):
            if kwargs or not self._print_level or not isinstance(expr, sp.Basic) \
                    or getattr(self, "_not_supported", None) \
                    or getattr(self, "_number_symbols", None):
                return super()._print(expr, **kwargs)
            got = self._memo.get(expr)
            if got is None:
                got = super()._print(expr)
                if not getattr(self, "_not_supported", None) \
                        and not getattr(self, "_number_symbols", None):
                    if len(self._memo) >= _MEMO_MAX:
                        self._memo.clear()
                    self._memo[expr] = got
            return got

    return MemoPrinter


@functools.lru_cache(maxsize=4)
def _printer(backend: str):
    # memsym's own code generation (_generate, _printed); sp.lambdify gets the plain class,
    # whose records of what the code imports (module_imports) it reads after printing
    return _memo_printer(_lambdify_options(backend)["printer"])()


def _renamed(names: tuple, backend: str) -> bool:
    # lambdify renames an argument that is not an identifier, a keyword or a module name

    return any(not n.isidentifier() or keyword.iskeyword(n) or n in _namespace(backend)
               or n == FUNC_NAME for n in names)


@functools.lru_cache(maxsize=4096)
def _printed(expr, backend: str) -> str:
    # one expression's code, printed once: the search's stage table writes the same code
    # to its file that its compiled function runs (expression_code)
    return _printer(backend).doprint(expr)


def _generate(exprs: tuple, names: tuple, backend: str, cse: bool) -> str | None:
    """The source of ``def _lambdifygenerated(<names>): return [<exprs>]``, as lambdify
    writes it (common subexpressions first when ``cse``), or None where lambdify must
    rename the arguments (a name that is not an identifier, a keyword or a module).

    Examples
    --------
    >>> from memsym.symbols import N, d
    >>> print(_generate((16 * N / d,), ("N", "d"), "numpy", False), end="")
    def _lambdifygenerated(N, d):
        return [16*N/d]
    """
    if _renamed(names, backend):
        return None
    printer = _printer(backend)
    replacements, reduced = _cse(list(exprs)) if cse else ([], list(exprs))
    lines = [f"def {FUNC_NAME}({', '.join(names)}):"]
    lines += [f"    {sym.name} = {printer.doprint(e)}" for sym, e in replacements]
    lines.append(f"    return [{', '.join(_printed(e, backend) for e in reduced)}]")
    return "\n".join(lines) + "\n"


def _run(source: str, backend: str, where: str):
    # memsym's own generated code, run as lambdify runs what it writes
    ns = dict(_namespace(backend))
    exec(compile(source, where, "exec"), ns)
    return ns[FUNC_NAME]


@functools.lru_cache(maxsize=512)
def _lambdify(exprs: tuple, names: tuple, backend: str, cse: bool = True):
    source = None if cse else _generate(exprs, names, backend, cse)
    if source is not None:
        # without CSE, printing the code costs what hashing the expressions for the disk
        # cache would (both walk the tree once): such functions are not kept on disk
        return _run(source, backend, "<memsym>")
    # the cache key names the code generation (with or without common subexpressions)
    k = compile_cache.key(exprs, names, backend if cse else backend + ":no-cse")
    cached = compile_cache.load(k, _namespace(backend))
    if cached is not None:
        return cached
    source = _generate(exprs, names, backend, cse)
    if source is None:   # lambdify renames what cannot be an argument name
        syms = [lookup(name) for name in names]
        fn = sp.lambdify(syms, list(exprs), cse=_cse if cse else False,
                         **_lambdify_options(backend))
        source = _source(fn)
    else:
        fn = _run(source, backend, f"<memsym {k[:12]}>")
    if compile_cache.cache_dir() is not None:
        try:
            compile_cache.store(k, source)
        except (OSError, TypeError):   # nothing kept: the function still works
            pass
    return fn


def expression_code(expr) -> str | None:
    """The numpy code of one expression as :func:`compile_expr` writes it without CSE (the
    search's templates, :mod:`memsym.search.templates`), or None where lambdify would have
    to rename an argument (see :func:`_generate`).

    Examples
    --------
    >>> from memsym.symbols import N, d
    >>> expression_code(16 * N / d)
    '16*N/d'
    """
    expr = as_expr(expr)
    return None if _renamed(_argnames((expr,)), "numpy") else _printed(expr, "numpy")


def function_namespace() -> dict:
    """A copy of the globals a generated numpy function runs in."""
    return dict(_namespace("numpy"))


def _source(fn) -> str:
    # lambdify registers its generated module, one function, in linecache: reading it back
    # is what inspect.getsource does, without tokenizing it to find the block

    entry = linecache.cache.get(fn.__code__.co_filename)
    return "".join(entry[2]) if entry and entry[2] else inspect.getsource(fn)


def compile_expr(expr, backend: str = "numpy", cse: bool = True):
    """Compile one expression; returns ``(function, argument names)``; cached.

    ``cse=False`` skips common-subexpression elimination: cheaper to compile, for the
    search's many one-expression templates, whose evaluation it does not speed up
    (``memsym bench`` P2 times both paths).

    Examples
    --------
    >>> from memsym.symbols import N, d
    >>> fn, names = compile_expr(16 * N / d, "math")
    >>> names, fn(7e9, 8)[0]
    (('N', 'd'), 14000000000.0)
    """
    expr = as_expr(expr)
    names = _argnames((expr,))
    return _lambdify((expr,), names, backend, cse), names


def _scalars(args) -> bool:
    # Python numbers only (bool is not one): the math back end
    for x in args:
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            return False
    return True


def _sequences_as_arrays(args, np):
    # a list or tuple is a sweep, as an array is: the generated code's arithmetic would
    # repeat or concatenate it (2 * [1.0, 2.0] is a list of four)
    if any(type(x) in (list, tuple) for x in args):
        return [np.asarray(x, dtype=float) if type(x) in (list, tuple) else x for x in args]
    return args


class CompiledTotal:
    """A :class:`~memsym.term.Total` compiled to a function of keyword arguments.

    Calling it returns the total; :meth:`breakdown` returns every term too, from one
    compiled function with shared subexpressions.  Arguments broadcast as numpy arrays do.

    Examples
    --------
    >>> from memsym import model_state, byte_widths
    >>> M = model_state("zero3", convention="zero-paper").subs(
    ...     byte_widths("zero3", convention="zero-paper")).compile()
    >>> M.names
    ('N', 'd', 'p', 't')
    >>> M(N=7.5e9, d=64, p=1, t=1) / 1e9
    1.875
    """

    def __init__(self, total):
        self.total = total
        self.keys = total.keys
        exprs = tuple(term.expr for term in total) + (total.expr,)
        self.names = _argnames(exprs)
        # the arguments in order, taken from the keywords in one call (a tuple)
        self._take = operator.itemgetter(*self.names) if len(self.names) > 1 else None
        self._exprs = exprs

    def _args(self, kwargs: Mapping):
        if len(kwargs) == len(self.names) and self._take is not None:
            # the usual call, exactly the total's names: no other name to check
            try:
                return self._take(kwargs)
            except KeyError:
                pass
        missing = [n for n in self.names if n not in kwargs]
        # registered symbols the total does not depend on are ignored (d for DDP, say),
        # so one sweep can feed several totals; unknown names are errors.
        extra = [k for k in kwargs if k not in self.names and k not in registry()]
        if missing or extra:
            msg = []
            if missing:
                msg.append("missing " + ", ".join(missing))
            if extra:
                msg.append("unexpected " + ", ".join(repr(str(k)[:40]) for k in extra))  # quoted, short
            raise InvalidValueError(f"{self.total.name}: {'; '.join(msg)} "
                                    f"(arguments: {', '.join(self.names)})")
        return [kwargs[n] for n in self.names]

    @functools.cached_property
    def _total_fn(self):
        return _lambdify((self._exprs[-1],), self.names, "numpy")

    @functools.cached_property
    def _all_fn(self):
        return _lambdify(self._exprs, self.names, "numpy")

    @functools.cached_property
    def _scalar_fn(self):
        return _lambdify((self._exprs[-1],), self.names, "math")

    def __call__(self, **kwargs):
        """The total [unit] for the given values: a float for Python scalars (the ``math``
        back end, no numpy overhead), an array broadcast from numpy arrays otherwise."""
        args = self._args(kwargs)
        if _scalars(args):
            try:
                out = float(self._scalar_fn(*args)[0])
            except (OverflowError, ZeroDivisionError):
                out = math.inf
            if not math.isfinite(out):  # never hand back inf/nan as if it were an answer
                raise InvalidValueError(f"{self.total.name} is outside the float range (got {out}); "
                                        f"it comes from {_extreme(dict(zip(self.names, args)))}")
            return out
        import numpy as np

        out = self._total_fn(*_sequences_as_arrays(args, np))[0]
        if type(out) is np.ndarray and out.ndim:   # a sweep: handed back as computed
            return out
        return np.asarray(out, dtype=float) if np.ndim(out) == 0 else out

    def breakdown(self, **kwargs) -> dict:
        """Each term and ``"total"`` [unit], broadcast to a common shape."""
        import numpy as np

        values = self._all_fn(*_sequences_as_arrays(self._args(kwargs), np))
        arrays = np.broadcast_arrays(*[np.asarray(x, dtype=float) for x in values])
        return dict(zip(self.keys + ("total",), arrays))


@functools.lru_cache(maxsize=256)
def compile_total(total) -> CompiledTotal:
    """The cached :class:`CompiledTotal` of a total (totals are hashable records)."""
    return CompiledTotal(total)
