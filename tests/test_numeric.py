"""Compiled evaluation agrees with exact SymPy and broadcasts."""

import numpy as np
import pytest
import sympy as sp

from memsym import byte_widths, model_state, numeric
from memsym.errors import InvalidValueError
from memsym.numeric import compile_total


def test_compile_is_cached_and_broadcasts():
    total = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000"))
    assert compile_total(total) is compile_total(total)
    fn = total.compile()
    d = np.arange(1, 9)[:, None]
    n = np.array([7e9, 70e9])[None, :]
    out = fn(N=n, d=d, t=1, p=1)
    assert out.shape == (8, 2)
    assert np.allclose(out, 16 * n / d, rtol=1e-15)
    bd = fn.breakdown(N=n, d=d, t=1, p=1)
    assert set(bd) == {"weights", "gradients", "optimizer", "total"}
    assert all(v.shape == (8, 2) for v in bd.values())


def test_compiled_arguments_are_checked():
    fn = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000")).compile()
    with pytest.raises(InvalidValueError, match="missing d"):
        fn(N=1, t=1, p=1)
    with pytest.raises(InvalidValueError, match="unexpected"):
        fn(N=1, d=1, t=1, p=1, q=3)


def test_min_max_ceiling_compile_on_both_back_ends():
    # Min/Max of three arguments print as functools.reduce(...): the namespace must have it
    from memsym.numeric import compile_expr
    from memsym.symbols import d, p, t

    expr = sp.Min(d, t, p) + sp.Max(d, t) + sp.ceiling(d / t)
    fn, names = compile_expr(expr, "numpy")
    assert names == ("d", "p", "t")
    out = fn(np.array([1.0, 2.0]), np.array([2.0, 2.0]), np.array([3.0, 1.0]))[0]
    # hand: min(1,3,2) + max(1,3) + ceil(1/3) = 5; min(2,1,2) + max(2,1) + ceil(2/1) = 5
    assert out.tolist() == [5.0, 5.0]
    fn_math, _ = compile_expr(expr, "math")
    assert fn_math(1, 2, 3)[0] == 5


# --- memsym's code generation against SymPy's lambdify (the oracle) ------------------------
def _generation_cases():
    import sympy as sp

    from memsym.symbols import N, b, d, h, p, s, t

    return [
        (16 * N / (d * p * t),),
        (sp.Max(16 * N / (d * p * t), 2 * N / t, 3) + N / p ** 2, sp.Min(d, p, t) * s),
        (sp.Rational(11, 10) * (N / t + 34 * s * b * h / t) + sp.floor(N / d),
         sp.Piecewise((N / d, d > 2), (N, True))),
        ((N / t + h) ** 2 / d, (N / t + h) ** 3 * p, sp.sqrt(N) * sp.ceiling(h / t)),
    ]


@pytest.mark.parametrize("backend", ["numpy", "math"])
@pytest.mark.parametrize("cse", [True, False])
def test_generated_code_equals_lambdify(backend, cse, monkeypatch):
    # what memsym.numeric writes itself (to skip lambdify's namespace and overhead) computes
    # what SymPy's lambdify computes from the same expressions, printer and CSE
    import sympy as sp

    monkeypatch.setenv("MEMSYM_CACHE_DIR", "off")
    point = {"N": 7e9, "b": 2, "d": 8, "h": 4096, "p": 4, "s": 2048, "t": 2}
    for exprs in _generation_cases():
        names = numeric._argnames(exprs)
        assert numeric._generate(exprs, names, backend, cse) is not None
        fn = numeric._lambdify.__wrapped__(exprs, names, backend, cse)
        ref = sp.lambdify([numeric.lookup(n) for n in names], list(exprs),
                          cse=numeric._cse if cse else False,
                          **numeric._lambdify_options(backend))
        args = [point[n] for n in names]
        assert [float(v) for v in fn(*args)] == [float(v) for v in ref(*args)]
        if backend == "numpy":     # broadcasting, as lambdify's numpy functions do
            arr = [np.array([v, 2 * v]) for v in args]
            for got, want in zip(fn(*arr), ref(*arr)):
                assert np.array_equal(np.broadcast_to(got, (2,)), np.broadcast_to(want, (2,)))


def test_generation_leaves_unusable_names_to_lambdify():
    # a name that cannot be an argument (a keyword, a module of the namespace) is left to
    # lambdify, which renames it (no registered memsym symbol is such a name)
    import keyword

    from memsym.symbols import registry

    assert all(n.isidentifier() and not keyword.iskeyword(n) and n not in numeric._namespace("numpy")
               for n in registry())
    import sympy as sp

    from memsym.symbols import N

    for bad in ("lambda", "numpy", "functools"):
        x = sp.Symbol(bad, positive=True)
        assert numeric._generate((2 * x,), (bad,), "numpy", False) is None
    assert numeric._generate((2 * N,), ("N",), "numpy", False).startswith(
        "def _lambdifygenerated(N):")


# --- the printer that prints each subexpression once -----------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "math"])
def test_memo_printer_writes_what_the_plain_printer_writes(backend):
    # the oracle: SymPy's own printer class (memsym's FastPowPrinter) without the memo, on
    # expressions that share subexpressions, and Floats at the top (full_prec="auto" keeps
    # their zeros there: '2.00000000000000') and below it ('2.0*x')
    from memsym.symbols import N, d, h, p, t

    plain = numeric._lambdify_options(backend)["printer"]()
    memo = numeric._memo_printer(numeric._lambdify_options(backend)["printer"])()
    shared = N / (p * t) + 34 * h / t
    cases = [exprs for group in _generation_cases() for exprs in group] + [
        shared, shared * d + sp.Max(shared, d), sp.Float(2.0), sp.Float(2.0) * N,
        sp.Float(2.0) + sp.Float(2.5) * N, sp.Max(N, sp.Float(1.0)), sp.floor(N / 3) * sp.Float(3.0)]
    for expr in cases + cases[::-1]:      # and again, from the memo
        assert memo.doprint(expr) == plain.doprint(expr)
    assert memo.doprint(sp.Float(2.0)) == "2.00000000000000"     # the top keeps its zeros
    assert memo.doprint(sp.Float(2.0) * N) == "2.0*N"


def test_memo_printer_prints_a_shared_subexpression_once(monkeypatch):
    # N/(p*t) + 34*h/t in three sums: its Mul N/(p*t) is printed by _print_Mul once
    from memsym.symbols import N, d, h, p, s, t

    memo = numeric._memo_printer(numeric._lambdify_options("numpy")["printer"])()
    part = N / (p * t)
    seen = []
    original = type(memo).__mro__[1]._print_Mul

    def counting(self, expr):
        seen.append(expr)
        return original(self, expr)

    monkeypatch.setattr(type(memo), "_print_Mul", counting)
    for other in (h, d, s):
        memo.doprint(part + 34 * other / t)
    assert seen.count(part) == 1


def test_compiled_call_takes_exactly_its_names_and_registered_extras():
    # the fast path (exactly the total's names) and the checked one (a registered symbol the
    # total does not read, d for DDP, is ignored) give the same value: 16 N / d by hand
    fn = model_state("zero3", convention="seed000").subs(byte_widths("zero3", convention="seed000")).compile()
    assert fn(N=8e9, d=4, t=1, p=1) == 16 * 8e9 / 4
    assert fn(N=8e9, d=4, t=1, p=1, s=2048) == 16 * 8e9 / 4
    arr = fn(N=np.array([8e9, 16e9]), d=4, t=1, p=1)
    assert isinstance(arr, np.ndarray) and arr.tolist() == [16 * 8e9 / 4, 16 * 16e9 / 4]
    zero_d = fn(N=np.float64(8e9), d=np.array(4.0), t=1, p=1)
    assert isinstance(zero_d, np.ndarray) and zero_d.ndim == 0 and float(zero_d) == 3.2e10
    with pytest.raises(InvalidValueError, match="missing d"):
        fn(N=1, t=1, p=1, s=2)          # as many names as the total's, one of them wrong
    # a list or tuple is a sweep like an array (it was list arithmetic: a TypeError, or a
    # repeated list where the code multiplies it by an integer)
    assert fn(N=[8e9, 16e9], d=4, t=1, p=1).tolist() == [16 * 8e9 / 4, 16 * 16e9 / 4]
    assert fn(N=(8e9, 16e9), d=[1, 2], t=1, p=1).tolist() == [16 * 8e9, 16 * 16e9 / 2]
    assert fn.breakdown(N=[8e9], d=(4,), t=1, p=1)["total"].tolist() == [16 * 8e9 / 4]
