r"""Activation and model-state formulas derived by measuring a real PyTorch module.

Owns the measurement side of memsym: run tiny instances of a ``torch.nn.Module`` on the
CPU, count the bytes autograd saves for backward (through
``torch.autograd.graph.saved_tensors_hooks``), and fit the *exact* polynomial in the
registry's shape symbols with rational coefficients; also the bytes of parameters,
gradients and optimizer states after a real optimizer step.

PyTorch is the optional extra ``memsym[torch]``; it is imported only inside the functions
that need it, so ``import memsym.measure`` works without it (and :func:`fit_polynomial`
needs no PyTorch at all).

References
----------
.. [pytorch-saved-tensors-hooks] PyTorch documentation, "Hooks for saved tensors"
   (``torch.autograd.graph.saved_tensors_hooks``).
.. [korthikanti] Korthikanti et al., "Reducing Activation Recomputation in Large
   Transformer Models", arXiv:2205.05198, §4.1, Eq. 1: :math:`sbh(34 + 5as/h)`.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping

import sympy as sp

from .errors import InvalidValueError, MemsymError, choose
from .symbols import lookup
from .term import Source, Term, Total
from .values import as_expr

__all__ = [
    "MeasureError",
    "SavedTensor",
    "SavedBytes",
    "Fit",
    "ModelStateBytes",
    "torch_available",
    "monomial_basis",
    "fit_polynomial",
    "saved_bytes",
    "measure_saved",
    "derive_saved_bytes",
    "model_state_bytes",
]

#: The citation of every measured term (a key of memsym/references.toml).
SOURCE = Source("pytorch-saved-tensors-hooks", "measured with torch.autograd.graph.saved_tensors_hooks")

# A 61-bit Mersenne prime: the rank test during design selection runs modulo it (fast
# Python ints); full rank mod P implies full rank over Q, and the solve itself is exact.
_P = (1 << 61) - 1


class MeasureError(MemsymError):
    """A measurement that no polynomial of the chosen form explains, or that cannot run.

    Attributes
    ----------
    shape : dict or None
        The instance (symbol name -> value) where the fit failed, if any.
    measured, predicted : int or None
        The measured bytes there and what the fitted polynomial predicts.
    """

    def __init__(self, message: str, shape=None, measured=None, predicted=None):
        super().__init__(message)
        self.shape, self.measured, self.predicted = shape, measured, predicted


def torch_available() -> bool:
    """Whether PyTorch (the optional extra ``memsym[torch]``) can be imported.

    Examples
    --------
    >>> isinstance(torch_available(), bool)
    True
    """
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def import_torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MeasureError("memsym.measure needs PyTorch: pip install 'memsym[torch]'") from exc
    return torch


# ------------------------------------------------------------------ the polynomial fit


def _symbols(symbols) -> tuple:
    if isinstance(symbols, (str, sp.Symbol)):
        symbols = (symbols,)
    out = tuple(lookup(x) for x in symbols)  # validated against the registry, never parsed
    if not out:
        raise InvalidValueError("fit needs at least one shape symbol (e.g. s, b, h, a)")
    if len(set(out)) != len(out):
        raise InvalidValueError("fit symbols must be distinct")
    return out


def monomial_basis(symbols, degree: int, max_degree: Mapping | None = None) -> tuple:
    r"""All monomials in ``symbols`` of total degree at most ``degree``.

    .. math::

        \{\, x_1^{e_1}\cdots x_n^{e_n} : \textstyle\sum e_i \le D,\; e_i \le D_i \,\}

    Parameters
    ----------
    symbols : sequence of str or Symbol
        Registered shape symbols [1].
    degree : int
        Total degree :math:`D` [1].
    max_degree : mapping, optional
        Per-symbol caps :math:`D_i` (name -> int), e.g. ``{"b": 1}`` when the bytes are
        known to be linear in the micro-batch size.

    Returns
    -------
    tuple of sympy.Expr
        The monomials, constant first.

    Examples
    --------
    >>> monomial_basis(("s", "b"), 2)
    (1, s, b, s**2, b*s, b**2)
    >>> monomial_basis(("s", "b"), 2, {"b": 1})
    (1, s, b, s**2, b*s)
    """
    syms = _symbols(symbols)
    if not isinstance(degree, int) or isinstance(degree, bool) or degree < 0:
        raise InvalidValueError(f"degree must be a whole number >= 0, not {degree!r}")
    caps = {}
    for name, cap in (max_degree or {}).items():
        sym = lookup(name)
        if sym not in syms:
            raise InvalidValueError(f"max_degree names {sym}, which is not among the fit symbols "
                                    f"({', '.join(map(str, syms))})")
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
            raise InvalidValueError(f"max_degree[{sym}] must be a whole number >= 0, not {cap!r}")
        caps[sym] = cap
    ranges = [range(min(degree, caps.get(x, degree)) + 1) for x in syms]
    exps = sorted((e for e in itertools.product(*ranges) if sum(e) <= degree),
                  key=lambda e: (sum(e), tuple(reversed(e))))
    return tuple(sp.Mul(*(x**k for x, k in zip(syms, e))) for e in exps)


def _check_basis(basis, syms) -> tuple:
    out = []
    for mono in basis:
        mono = as_expr(mono, "basis entry") if isinstance(mono, int) else mono  # never text
        if not isinstance(mono, sp.Expr):
            raise InvalidValueError(f"basis entries must be SymPy monomials, not {type(mono).__name__}")
        if not mono.free_symbols <= set(syms):
            extra = ", ".join(sorted(str(x) for x in mono.free_symbols - set(syms)))
            raise InvalidValueError(f"basis monomial {mono} uses {extra}, not among the fit symbols")
        terms = sp.Poly(mono, *syms).terms() if mono.is_polynomial(*syms) else []
        if len(terms) != 1 or terms[0][1] != 1:
            raise InvalidValueError(f"basis entry {mono} is not a monomial with coefficient 1")
        out.append(mono)
    if len(set(out)) != len(out):
        raise InvalidValueError("basis monomials must be distinct")
    if not out:
        raise InvalidValueError("basis must not be empty")
    return tuple(out)


def _row(monos, syms, point) -> list[int]:
    vals = {x: sp.Integer(point[x.name]) for x in syms}
    return [int(mono.xreplace(vals)) if mono != 1 else 1 for mono in monos]


def _draw(rng, syms, ranges, valid):
    point = {x.name: rng.randint(*ranges[x.name]) for x in syms}
    return point if valid is None or valid(dict(point)) else None


def _select(monos, syms, ranges, valid, rng, tries) -> list[dict]:
    """Points whose monomial rows are linearly independent (a square, invertible design)."""
    n = len(monos)
    pivots: dict[int, list[int]] = {}
    chosen, seen = [], set()
    for _ in range(tries):
        if len(chosen) == n:
            break
        point = _draw(rng, syms, ranges, valid)
        if point is None or tuple(point.values()) in seen:
            continue
        seen.add(tuple(point.values()))
        r = [v % _P for v in _row(monos, syms, point)]
        for col in sorted(pivots):
            if r[col]:
                fac, prow = r[col], pivots[col]
                r = [(x - fac * y) % _P for x, y in zip(r, prow)]
        lead = next((j for j, x in enumerate(r) if x), None)
        if lead is None:
            continue  # adds nothing the design does not already pin down
        inv = pow(r[lead], _P - 2, _P)
        pivots[lead] = [(x * inv) % _P for x in r]
        chosen.append(point)
    if len(chosen) < n:
        raise MeasureError(
            f"the shapes allowed by the ranges cannot tell the {n} basis monomials apart "
            f"(rank {len(chosen)} of {n}); widen the ranges or lower the degree")
    return chosen


def _fresh(rng, syms, ranges, valid, count, exclude, tries) -> list[dict]:
    out, seen = [], {tuple(p.values()) for p in exclude}
    for _ in range(tries):
        if len(out) == count:
            break
        point = _draw(rng, syms, ranges, valid)
        if point is None or tuple(point.values()) in seen:
            continue
        seen.add(tuple(point.values()))
        out.append(point)
    if len(out) < count:
        raise MeasureError(f"found only {len(out)} of {count} further valid shapes; widen the ranges")
    return out


@dataclass(frozen=True)
class Fit:
    """An exact polynomial fitted to measurements, with the evidence it rests on.

    Attributes
    ----------
    expr : sympy.Expr
        The fitted total [bytes], rational coefficients.
    parts : dict
        Group name -> fitted polynomial [bytes] (the groups the measurement reported).
    symbols : tuple of Symbol
        The shape symbols.
    basis : tuple of sympy.Expr
        The monomials the fit could use.
    points, checks, holdout : tuple of dict
        Instances solved for, instances that over-determine the fit, and held-back
        instances (never seen by the solver) on which the fit was verified.
    measured : tuple of (dict, dict)
        Every instance with its measured bytes per group.
    """

    expr: sp.Expr
    parts: dict
    symbols: tuple
    basis: tuple
    points: tuple
    checks: tuple
    holdout: tuple
    measured: tuple = field(repr=False)

    def total(self, name: str = "measured bytes saved for backward", source: Source = SOURCE) -> Total:
        """The fit as a memsym :class:`~memsym.term.Total`, one term per group."""
        terms = tuple(Term(key or "(layer)", expr, f"measured: saved for backward in {key or 'the layer'}",
                           source, label=key or "(layer)") for key, expr in self.parts.items())
        return Total(name, terms)


def fit_polynomial(measure: Callable, symbols, *, degree: int | None = None, max_degree=None,
                   basis=None, ranges: Mapping | None = None, valid: Callable | None = None,
                   extra: int = 4, holdout: int = 4, holdout_ranges: Mapping | None = None,
                   seed: int = 0, tries: int = 20000) -> Fit:
    r"""The exact polynomial (rational coefficients) that reproduces ``measure`` on every instance.

    Picks instances whose monomial values are linearly independent, solves the square
    system exactly (SymPy ``DomainMatrix`` over the integers), checks ``extra`` further
    instances against the solution, then verifies ``holdout`` held-back instances drawn
    from ``holdout_ranges`` (by default up to twice the fitting ranges) that the solver
    never saw:

    .. math::

        \text{bytes}(x) = \sum_{m \in \text{basis}} c_m\, m(x), \qquad c_m \in \mathbb{Q}

    Parameters
    ----------
    measure : callable
        ``measure(shape) -> int`` or ``-> {group: int}`` [bytes]; ``shape`` maps symbol
        names to whole numbers.
    symbols : sequence of str
        Registered shape symbols (``s``, ``b``, ``h``, ``a``, ``g``, ``d_h``, ``f``, ...).
    degree : int, optional
        Total degree of the monomial basis (see :func:`monomial_basis`).
    max_degree : mapping, optional
        Per-symbol degree caps.
    basis : sequence of sympy.Expr, optional
        An explicit monomial basis instead of ``degree`` (e.g. ``[s*b*h, s**2*b*a]``).
    ranges : mapping, optional
        Symbol name -> ``(low, high)`` inclusive whole-number range; default ``(1, 8)``.
    valid : callable, optional
        ``valid(shape) -> bool`` for constraints such as ``h % a == 0``.
    extra, holdout : int
        Number of over-determining and of held-back instances.
    holdout_ranges : mapping, optional
        Ranges of the held-back instances; default ``(low, 2 high)``.
    seed : int
        Seed of the (deterministic) instance choice.

    Returns
    -------
    Fit

    Raises
    ------
    MeasureError
        When an over-determining or held-back instance disagrees with the fit (no
        polynomial in that basis explains the measurements), or when the ranges cannot
        identify the basis.

    Examples
    --------
    >>> from memsym.symbols import s, b, h
    >>> fit = fit_polynomial(lambda x: 2 * x["s"] * x["b"] * x["h"] + 4 * x["s"] * x["b"],
    ...                      ("s", "b", "h"), degree=3)
    >>> fit.expr
    2*b*h*s + 4*b*s
    >>> fit_polynomial(lambda x: x["s"] ** 3, ("s",), degree=2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memsym.measure.MeasureError: no polynomial of total degree 2 in s fits: at s=8 the measurement is 512 bytes but ...
    """
    syms = _symbols(symbols)
    if basis is None:
        if degree is None:
            raise InvalidValueError("give a total degree or an explicit monomial basis")
        monos = monomial_basis(syms, degree, max_degree)
        form = f"total degree {degree}"
    else:
        if degree is not None or max_degree is not None:
            raise InvalidValueError("give either a degree (with max_degree) or a basis, not both")
        monos = _check_basis(basis, syms)
        form = "basis {" + ", ".join(map(str, monos)) + "}"
    where = f"{form} in {', '.join(map(str, syms))}"
    rngs = {}
    for x in syms:
        lo, hi = (ranges or {}).get(x.name, (1, 8))
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            raise InvalidValueError(f"range of {x} must be whole numbers 1 <= low <= high, not {(lo, hi)}")
        rngs[x.name] = (lo, hi)
    unknown = set(ranges or {}) - {x.name for x in syms}
    if unknown:
        raise InvalidValueError(f"ranges name symbols not being fitted: {', '.join(sorted(unknown))}")
    hold = {x.name: (holdout_ranges or {}).get(x.name, (rngs[x.name][0], 2 * rngs[x.name][1]))
            for x in syms}
    for count, what in ((extra, "extra"), (holdout, "holdout")):
        if not isinstance(count, int) or count < 0:
            raise InvalidValueError(f"{what} must be a whole number >= 0, not {count!r}")

    rng = random.Random(seed)
    points = _select(monos, syms, rngs, valid, rng, tries)
    checks = _fresh(rng, syms, rngs, valid, extra, points, tries)
    held = _fresh(rng, syms, hold, valid, holdout, points + checks, tries)

    cache: dict[tuple, dict] = {}

    def run(point) -> dict:
        key = tuple(point.values())
        if key not in cache:
            got = measure(dict(point))
            got = dict(got) if isinstance(got, Mapping) else {"": got}
            for grp, val in got.items():
                if not isinstance(val, int) or isinstance(val, bool):
                    raise InvalidValueError(f"measure must return whole bytes, got {val!r} for {grp!r}")
            cache[key] = got
        return cache[key]

    from sympy import ZZ
    from sympy.polys.matrices import DomainMatrix

    measured = [run(pt) for pt in points]
    groups = sorted({grp for got in measured for grp in got})
    n = len(monos)
    A = DomainMatrix([[ZZ(v) for v in _row(monos, syms, pt)] for pt in points], (n, n), ZZ)
    rhs = DomainMatrix([[ZZ(got.get(grp, 0)) for grp in groups] for got in measured], (n, len(groups)), ZZ)
    sol, den = A.solve_den(rhs)  # exact: A sol = den rhs
    sol = sol.to_Matrix()
    den = sp.Integer(den.element if hasattr(den, "element") else den)
    parts = {grp: sp.Add(*(sp.Rational(sol[i, j]) / den * monos[i] for i in range(n)))
             for j, grp in enumerate(groups)}
    total = sp.expand(sp.Add(*parts.values()))

    def verify(point, label):
        got = run(point)
        new = set(got) - set(groups)
        meas = sum(got.values())
        pred = total.xreplace({x: sp.Integer(point[x.name]) for x in syms})
        bad = [g for g in groups if parts[g].xreplace({x: sp.Integer(point[x.name]) for x in syms})
               != got.get(g, 0)]
        if pred != meas or bad or new:
            at = ", ".join(f"{k}={v}" for k, v in point.items())
            detail = f" (group {(sorted(new) or bad)[0] or '(layer)'})" if pred == meas else ""
            shown = str(pred) if pred.is_Integer else f"about {float(pred):.6g}"
            raise MeasureError(
                f"no polynomial of {where} fits: at {at} the {label} is {meas} bytes but the fit "
                f"through the other instances predicts {shown}{detail} (raise the degree, add the "
                "missing monomial, or restrict the shapes where the layer changes behaviour)",
                point, meas, pred)

    for pt in checks:
        verify(pt, "measurement")
    for pt in held:
        verify(pt, "held-back measurement")
    every = [(dict(pt), dict(cache[tuple(pt.values())])) for pt in points + checks + held]
    return Fit(total, parts, syms, monos, tuple(points), tuple(checks), tuple(held), tuple(every))


# ------------------------------------------------------------------ saved tensors


@dataclass(frozen=True)
class SavedTensor:
    """One tensor autograd saved for backward.

    Attributes
    ----------
    group : str
        The (sub)module that was running when it was first saved.
    shape : tuple of int
    dtype : str
    storage_bytes : int
        The full size of the storage it lives in [bytes] (a view keeps its base alive).
    counted : bool
        ``False`` when its storage was already counted (shared, e.g. Q, K and V views of
        one fused QKV output, or one input saved by several operations).
    """

    group: str
    shape: tuple
    dtype: str
    storage_bytes: int
    counted: bool


@dataclass(frozen=True)
class SavedBytes:
    """Bytes saved for backward by one forward pass [bytes].

    Attributes
    ----------
    total : int
        Sum over distinct storages, parameters (and buffers) excluded.
    groups : dict
        Group -> bytes (each storage in the group that saved it first).
    tensors : tuple of SavedTensor
        Every saved tensor in the order autograd saved it, including those whose storage
        was already counted (``counted=False``); tensors of the module's parameters and
        buffers (and empty storages) are not listed.
    """

    total: int
    groups: dict
    tensors: tuple


def saved_bytes(module, inputs, *, group_by: str = "module", depth: int = 1) -> SavedBytes:
    r"""Run ``module(*inputs)`` and count the bytes autograd saves for backward.

    Each saved tensor is traced to its storage (``untyped_storage().data_ptr()`` and
    ``nbytes()``); every storage is counted once, in full, because a saved view keeps
    its whole base alive; storages of the module's parameters and buffers are left out
    (they are model state, not activations):

    .. math::

        A = \sum_{\text{distinct storages } u \text{ saved}} \mathrm{nbytes}(u)

    Parameters
    ----------
    module : torch.nn.Module
    inputs : tensor or tuple of tensors
        Give the activations ``requires_grad=True`` as a layer inside a model would have.
    group_by : {"module", "dtype", "none"}
        Attribute each storage to the submodule that saved it first (``depth`` levels of
        the module path, ``""`` for the module's own code), to its dtype, or to nothing.
    depth : int
        Levels of the submodule path kept in group names.

    Returns
    -------
    SavedBytes

    Examples
    --------
    >>> if torch_available():  # the optional extra memsym[torch]
    ...     import torch
    ...     x = torch.ones(3, 2, 8, dtype=torch.bfloat16, requires_grad=True)
    ...     saved_bytes(torch.nn.GELU(), (x,)).total   # GeLU keeps its input: 48 bf16 values
    ... else:
    ...     96
    96
    """
    torch = import_torch()
    group_by = choose("group_by", group_by, ("module", "dtype", "none"))
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    excluded = {t.untyped_storage().data_ptr() for t in itertools.chain(module.parameters(), module.buffers())}
    stack: list[str] = [""]
    handles = []
    if group_by == "module":
        for name, sub in module.named_modules():
            if not name:
                continue
            key = ".".join(name.split(".")[:depth])
            handles.append(sub.register_forward_pre_hook(_push(stack, key)))
            handles.append(sub.register_forward_hook(_pop(stack)))
    seen: dict[int, int] = {}
    groups: dict[str, int] = {}
    records: list[SavedTensor] = []
    keep = []  # hold the saved tensors so that no storage address is reused while counting

    def pack(t):
        storage = t.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if ptr in excluded or nbytes == 0:
            return t
        keep.append(t)
        grp = {"module": stack[-1], "dtype": str(t.dtype).replace("torch.", ""), "none": ""}[group_by]
        counted = ptr not in seen
        if counted:
            seen[ptr] = nbytes
            groups[grp] = groups.get(grp, 0) + nbytes
        records.append(SavedTensor(grp, tuple(t.shape), str(t.dtype).replace("torch.", ""), nbytes, counted))
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(*inputs)  # the output is not needed: ``keep`` holds every saved tensor
    finally:
        for hnd in handles:
            hnd.remove()
    return SavedBytes(sum(seen.values()), groups, tuple(records))


def _push(stack, key):
    def hook(module, args):
        stack.append(key)  # returns None: a hook's return value would replace the input

    return hook


def _pop(stack):
    def hook(module, args, out):
        stack.pop()  # returns None: a hook's return value would replace the output

    return hook


def _build(make, make_inputs, shape, dtype, seed):
    torch = import_torch()
    torch.manual_seed(seed)  # saved sizes do not depend on values; fixed anyway for repeatability
    module = make(**shape)
    if dtype is not None:
        module = module.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    module.train()
    inputs = make_inputs(**shape)
    return module, inputs if isinstance(inputs, (tuple, list)) else (inputs,)


def measure_saved(make, make_inputs, shape: Mapping, *, dtype=None, group_by: str = "module",
                  depth: int = 1, seed: int = 0) -> SavedBytes:
    """:func:`saved_bytes` of the instance ``make(**shape)`` on ``make_inputs(**shape)``.

    ``dtype`` (e.g. ``"bfloat16"``) converts the module; the inputs are used as given.
    """
    module, inputs = _build(make, make_inputs, dict(shape), dtype, seed)
    return saved_bytes(module, inputs, group_by=group_by, depth=depth)


def derive_saved_bytes(make, make_inputs, symbols, *, dtype=None, group_by: str = "module",
                       depth: int = 1, seed: int = 0, **fit) -> Fit:
    r"""The exact activation formula of a module family, derived by measurement.

    .. math::

        A(s, b, h, \dots) = \sum_m c_m\, m(s, b, h, \dots) \quad [\text{bytes}]

    Parameters
    ----------
    make : callable
        ``make(**shape) -> torch.nn.Module`` (shape: symbol name -> int).
    make_inputs : callable
        ``make_inputs(**shape) -> tensor or tuple of tensors``.
    symbols : sequence of str
        Registered shape symbols to fit in.
    dtype : str or torch.dtype, optional
        Convert each module to it (``"bfloat16"`` for the 2-byte comparison).
    group_by, depth
        As in :func:`saved_bytes`: each group gets its own exact polynomial.
    **fit
        ``degree``, ``max_degree``, ``basis``, ``ranges``, ``valid``, ``extra``,
        ``holdout``, ``holdout_ranges`` as in :func:`fit_polynomial`.

    Returns
    -------
    Fit

    Examples
    --------
    >>> if torch_available():
    ...     import torch
    ...     make = lambda **x: torch.nn.GELU()
    ...     inputs = lambda s, b, h: torch.ones(s, b, h, requires_grad=True)
    ...     derive_saved_bytes(make, inputs, ("s", "b", "h"), degree=3).expr
    ... else:  # by hand: GeLU keeps its fp32 input, 4 bytes per element
    ...     4 * lookup("s") * lookup("b") * lookup("h")
    4*b*h*s
    """
    import_torch()

    def measure(shape):
        return measure_saved(make, make_inputs, shape, dtype=dtype, group_by=group_by, depth=depth,
                             seed=seed).groups

    return fit_polynomial(measure, symbols, seed=seed, **fit)


# ------------------------------------------------------------------ model states


@dataclass(frozen=True)
class ModelStateBytes:
    """Parameter, gradient and optimizer-state bytes after a real optimizer step.

    Attributes
    ----------
    parameters : int
        Number of parameters (distinct storages) [parameters].
    tensors : int
        Number of parameter tensors.
    weights, gradients : int
        Bytes of the parameters and of their ``.grad`` [bytes].
    optimizer : dict
        Optimizer state name (``exp_avg``, ``exp_avg_sq``, ``step``, ``momentum_buffer``)
        -> bytes.
    """

    parameters: int
    tensors: int
    weights: int
    gradients: int
    optimizer: dict

    def per_parameter(self) -> dict:
        """Bytes per parameter of each state, exact [bytes/parameter]."""
        per = {"weights": sp.Rational(self.weights, self.parameters),
               "gradients": sp.Rational(self.gradients, self.parameters)}
        per.update({k: sp.Rational(v, self.parameters) for k, v in self.optimizer.items()})
        return per


def model_state_bytes(make, make_inputs, shape: Mapping, *, optimizer: str = "adam", dtype=None,
                      steps: int = 1, seed: int = 0, **options) -> ModelStateBytes:
    r"""Run ``steps`` real optimizer steps and count the model-state bytes they leave.

    .. math::

        M = \Psi\,(b_{hp} + b_g) + \textstyle\sum_{\text{states}} \mathrm{nbytes}

    Parameters
    ----------
    make, make_inputs, shape
        As in :func:`measure_saved`.
    optimizer : {"adam", "adamw", "sgd"}
        ``torch.optim.Adam``/``AdamW`` or ``SGD`` (give ``momentum=0.9`` for momentum).
    dtype : str or torch.dtype, optional
        Convert the module first (PyTorch's optimizers keep states in the parameter dtype).
    **options
        Passed to the optimizer (``lr`` defaults to ``1e-3``).

    Returns
    -------
    ModelStateBytes

    Examples
    --------
    >>> if torch_available():
    ...     import torch
    ...     lin = lambda **x: torch.nn.Linear(4, 4, bias=False)
    ...     inp = lambda **x: torch.ones(2, 4)
    ...     st = model_state_bytes(lin, inp, {}, optimizer="adam")
    ...     (st.weights, st.gradients, st.optimizer["exp_avg"], st.optimizer["exp_avg_sq"])
    ... else:
    ...     (64, 64, 64, 64)
    (64, 64, 64, 64)
    """
    torch = import_torch()
    kinds = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    key = choose("optimizer", optimizer, tuple(kinds))
    if not isinstance(steps, int) or steps < 1:
        raise InvalidValueError(f"steps must be a whole number >= 1, not {steps!r}")
    module, inputs = _build(make, make_inputs, dict(shape), dtype, seed)
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise MeasureError("the module has no trainable parameters")
    options.setdefault("lr", 1e-3)
    opt = kinds[key](params, **options)
    for _ in range(steps):
        opt.zero_grad()
        out = module(*inputs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        out.float().sum().backward()
        opt.step()

    def distinct(tensors):
        seen = {}
        for t in tensors:
            if t is not None and isinstance(t, torch.Tensor):
                u = t.untyped_storage()
                seen[u.data_ptr()] = u.nbytes()
        return sum(seen.values())

    count = {}
    for p in params:
        count[p.untyped_storage().data_ptr()] = p.numel()
    states: dict[str, list] = {}
    for p in params:
        for name, val in opt.state.get(p, {}).items():
            states.setdefault(name, []).append(val)
    return ModelStateBytes(sum(count.values()), len(params), distinct(params),
                           distinct(p.grad for p in params),
                           {name: distinct(vals) for name, vals in sorted(states.items())})
