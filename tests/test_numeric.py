"""Compiled evaluation agrees with exact SymPy and broadcasts."""

import numpy as np
import pytest
import sympy as sp

from memsym import byte_widths, model_state
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
