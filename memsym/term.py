"""Terms and totals: cited SymPy expressions and the sums they compose.

A :class:`Term` is one named, cited contribution (weights, gradients, the attention
scores, ...), a frozen record around a plain SymPy expression.  A :class:`Total` is an
ordered collection of terms that answers the questions asked of a memory or time budget:
its expression, a per-term breakdown, targeted factoring, substitution, sensitivities and
elasticities, LaTeX and compiled numeric evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping

import sympy as sp

from .errors import InvalidValueError, UnknownNameError
from .symbols import lookup
from .values import as_expr, as_values
from .printing import derivation_latex, latex
from .text import short
from .numeric import compile_total

__all__ = ["Source", "Term", "Total"]


@dataclass(frozen=True)
class Source:
    """Where a formula comes from: a key of ``memsym/references.toml`` and a locator.

    Examples
    --------
    >>> str(Source("zero", "§5, Figure 1"))
    'zero, §5, Figure 1'
    """

    key: str
    locator: str

    def __str__(self) -> str:
        return f"{self.key}, {self.locator}"


@dataclass(frozen=True)
class Term:
    """One cited contribution to a total.

    Parameters
    ----------
    key : str
        Short identifier, unique within a total (``"weights"``, ``"gradients"``, ...).
    expr : sympy.Expr
        The contribution, in registered symbols only [``unit``].
    description : str
        One line saying what it counts.
    source : Source
        Reference key and locator.
    unit : str
        ``"bytes"`` for memory terms, ``"s"`` for times, ...
    label : str, optional
        Short label for derivations (the text under the brace); defaults to ``key``.

    Examples
    --------
    >>> from memsym.symbols import N
    >>> w = Term("weights", 2 * N, "bf16 weights", Source("zero", "§3.1"))
    >>> w.evaluate(N=7 * 10**9)
    14000000000
    """

    key: str
    expr: sp.Expr
    description: str
    source: Source
    unit: str = "bytes"
    label: str = ""

    def __post_init__(self):
        object.__setattr__(self, "expr", as_expr(self.expr, f"term {self.key!r}"))  # text refused, never parsed

    @property
    def free_symbols(self) -> set:
        return self.expr.free_symbols

    def subs(self, values: Mapping | None = None, **kwargs) -> "Term":
        """This term with registered symbols replaced (exactly); the values and the result are
        checked against the symbols' domains (:func:`_checked`)."""
        vals = as_values(values, **kwargs)
        return replace(self, expr=_checked(self.expr.xreplace(vals), vals, self.key, self.unit))

    def evaluate(self, values: Mapping | None = None, **kwargs) -> sp.Expr:
        """The exact value [``unit``] for the given symbol values."""
        return _evaluate(self.expr, as_values(values, **kwargs), self.key)

    def latex(self) -> str:
        return latex(self.expr)

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"


def _named(vals: dict) -> str:
    return ", ".join(f"{k.name} = {short(v)}" for k, v in vals.items()) or "no values"


def _checked(expr: sp.Expr, vals: dict, what: str, unit: str) -> sp.Expr:
    """``expr`` (a term after substitution) if it is still finite and, for an amount such as
    bytes or seconds, not provably negative; otherwise an error naming the substitution.

    The values themselves were checked by :func:`memsym.values.as_values`; this catches what
    only the combination shows (a ``1/(d - 1)`` at ``d = 1`` becomes ``zoo``).
    """
    if expr.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
        bad = next(x for x in (sp.zoo, sp.nan, sp.oo, -sp.oo) if expr.has(x))
        raise InvalidValueError(f"{what} becomes {bad} (not a finite number) after {_named(vals)}")
    if unit in ("bytes", "s", "FLOP") and expr.is_negative:
        raise InvalidValueError(f"{what} [{unit}] becomes negative after {_named(vals)}")
    return expr


def _evaluate(expr: sp.Expr, vals: dict, what: str) -> sp.Expr:
    out = _checked(expr.xreplace(vals), vals, what, "")
    missing = out.free_symbols
    if missing:
        names = ", ".join(sorted(str(x) for x in missing))
        raise InvalidValueError(f"{what} needs values for: {names}")
    return out  # exact: terms and values hold no floats (values.as_expr, values.exact)


@dataclass(frozen=True)
class Total:
    """An ordered sum of :class:`Term` objects.

    Parameters
    ----------
    name : str
        What the total is, e.g. ``"model states per GPU"``.
    terms : tuple of Term
        The contributions, keys unique.

    Examples
    --------
    >>> from memsym.terms.model_state import model_state
    >>> M = model_state("distributed-optimizer", convention="seed000")
    >>> M.factored({"b_g": 4, "b_m": 4, "b_o": 8})
    N*(b_hp + 16/d)/(p*t)
    """

    name: str
    terms: tuple = field(default_factory=tuple)
    unit: str = "bytes"

    def __post_init__(self):
        terms = tuple(self.terms)
        keys = [t.key for t in terms]
        if len(set(keys)) != len(keys):
            raise InvalidValueError(f"duplicate term keys in {self.name}: {keys}")
        object.__setattr__(self, "terms", terms)

    # --- access -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Term]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    def __getitem__(self, key: str) -> Term:
        for term in self.terms:
            if term.key == key:
                return term
        raise UnknownNameError("term", key, self.keys)

    def __contains__(self, key) -> bool:
        return any(term.key == key for term in self.terms)

    @property
    def keys(self) -> tuple:
        return tuple(t.key for t in self.terms)

    @property
    def expr(self) -> sp.Expr:
        """The total as one expression (the plain sum of the terms)."""
        return sp.Add(*(t.expr for t in self.terms))

    @property
    def free_symbols(self) -> set:
        return self.expr.free_symbols

    # --- composition ------------------------------------------------------------------------
    def __add__(self, other) -> "Total":
        """This total with a term or another total appended; the name names every part
        (``"model states per GPU + activations"``), not only the first.

        Examples
        --------
        >>> from memsym.symbols import N
        >>> w = Term("weights", 2 * N, "bf16 weights", Source("zero", "§3.1"))
        >>> a = Term("activations", 3 * N, "kept for backward", Source("korthikanti", "§4"),
        ...          label="activations")
        >>> (Total("model states", (w,)) + a).name
        'model states + activations'
        """
        if isinstance(other, Term):
            part = other.label or other.key.replace("_", " ")
            return replace(self, name=f"{self.name} + {part}", terms=self.terms + (other,))
        if isinstance(other, Total):
            return Total(f"{self.name} + {other.name}", self.terms + other.terms, self.unit)
        return NotImplemented

    def without(self, *keys: str) -> "Total":
        """This total without the named terms."""
        for key in keys:
            self[key]  # raises with suggestions on a typo
        return replace(self, terms=tuple(t for t in self.terms if t.key not in keys))

    def map(self, fn) -> "Total":
        """Apply ``fn`` to every term's expression (e.g. a substitution or ``factor``)."""
        return replace(self, terms=tuple(replace(t, expr=fn(t.expr)) for t in self.terms))

    def subs(self, values: Mapping | None = None, **kwargs) -> "Total":
        """This total with registered symbols replaced exactly (names validated).

        Examples
        --------
        >>> from memsym.terms.model_state import model_state
        >>> model_state("zero3", convention="zero-paper").subs(d=8).expr
        N*b_g/(8*p*t) + N*b_hp/(8*p*t) + N*(b_m + b_o)/(8*p*t)
        """
        vals = as_values(values, **kwargs)
        return replace(self, terms=tuple(
            replace(term, expr=_checked(term.expr.xreplace(vals), vals, term.key, term.unit))
            for term in self.terms))

    # --- exact evaluation -------------------------------------------------------------------
    def evaluate(self, values: Mapping | None = None, **kwargs) -> sp.Expr:
        """The exact total [unit] for the given values."""
        return _evaluate(self.expr, as_values(values, **kwargs), self.name)

    def breakdown(self, values: Mapping | None = None, **kwargs) -> dict:
        """Exact value of each term and of the total, keyed by term key (and ``"total"``).

        Examples
        --------
        >>> from memsym.terms.model_state import model_state, byte_widths
        >>> bd = model_state("zero1", convention="zero-paper").subs(byte_widths("zero1", convention="zero-paper")).breakdown(
        ...     N=7 * 10**9, d=8, t=1, p=1)
        >>> [bd[k] / 10**9 for k in ("weights", "gradients", "optimizer", "total")]
        [14, 14, 21/2, 77/2]
        """
        vals = as_values(values, **kwargs)
        out = {t.key: _evaluate(t.expr, vals, t.key) for t in self.terms}
        out["total"] = sp.Add(*out.values())
        return out

    # --- symbolic analysis ------------------------------------------------------------------
    def factored(self, values: Mapping | None = None, **kwargs) -> sp.Expr:
        """The total with common factors pulled out (``factor_terms``; cheap and predictable).

        This is how the seed-000 form ``N/(p t)·(b_hp + 16/d)`` is *derived* from the three
        model-state terms rather than typed in.
        """
        expr = self.subs(values, **kwargs).expr
        return sp.factor_terms(sp.expand(expr))

    def collect(self, symbol, values: Mapping | None = None, **kwargs) -> sp.Expr:
        """The total collected in powers of ``symbol`` (after substitution)."""
        sym = lookup(symbol)
        return sp.collect(sp.expand(self.subs(values, **kwargs).expr), sym)

    def sensitivity(self, symbol, values: Mapping | None = None, **kwargs) -> sp.Expr:
        r"""The partial derivative :math:`\partial M/\partial x` [unit per unit of x].

        With ``values`` the derivative is evaluated there (exactly).

        Examples
        --------
        >>> from memsym.terms.model_state import model_state
        >>> model_state("zero3", convention="zero-paper").subs(b_hp=2, b_g=2, b_m=4, b_o=8).sensitivity("d")
        -16*N/(d**2*p*t)
        """
        sym = lookup(symbol)
        deriv = sp.diff(self.expr, sym)
        vals = as_values(values, **kwargs)
        return sp.factor_terms(deriv.xreplace(vals)) if vals else sp.factor_terms(deriv)

    def elasticity(self, symbol, values: Mapping | None = None, **kwargs) -> sp.Expr:
        r"""The elasticity :math:`(x/M)\,\partial M/\partial x` [dimensionless].

        The relative change of the total per relative change of ``x``: -1 means halving
        the memory when doubling ``x``.

        Examples
        --------
        >>> from memsym.terms.model_state import model_state
        >>> model_state("zero3", convention="zero-paper").elasticity("d")
        -1
        """
        sym = lookup(symbol)
        expr = self.expr
        el = sp.cancel(sym * sp.diff(expr, sym) / expr)
        vals = as_values(values, **kwargs)
        return sp.cancel(el.xreplace(vals)) if vals else el

    # --- output -----------------------------------------------------------------------------
    def latex(self, factored: bool = False) -> str:
        """LaTeX of the total (its plain sum, or the factored form)."""
        return latex(self.factored() if factored else self.expr)

    def derivation(self, values: Mapping | None = None, **kwargs) -> str:
        """An ``aligned`` LaTeX derivation: one underbrace per term, then the factored form."""
        return derivation_latex(self, values, **kwargs)

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"

    def compile(self):
        """The compiled numeric evaluator (cached; see :func:`memsym.numeric.compile_total`)."""
        return compile_total(self)

