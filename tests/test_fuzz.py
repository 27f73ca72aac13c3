"""Property-based fuzzing of the public lower layers (issue 15, part 6).

Random sizes and strings go into the readers of numbers and byte sizes, the validators, the
text and JSON writers, the solvers and symbolic substitution.  The contract checked every
time: memsym's own error (a ``ValueError`` subclass, one short line) or a finite answer
that an independent check confirms -- Python's own ``unicode_escape`` codec undoes
:func:`memsym.text.printable`, ``json.loads`` with non-finite constants refused reads
:func:`memsym.text.finite_json`, integer arithmetic by hand gives the ZeRO/DDP answers
(ZeRO §5: 16 bytes per parameter, 2 + 2 + 12) -- within a per-example deadline.  One test
repeats a batch in a child process under an address-space limit (``ulimit -v``).
"""

from __future__ import annotations

import json
import math
import unicodedata
from fractions import Fraction

import sympy as sp
from hypothesis import HealthCheck, given, settings, strategies as st

from bounded import GiB, run_python
from memsym import errors, largest, smallest
from memsym.limits import LIMITS, SEARCH_BOUND
from memsym.symbols import registry
from memsym.terms.model_state import byte_widths, model_state
from memsym.text import finite_json, printable, short
from memsym.units import parse_bytes, parse_count, parse_number
from memsym.values import positive, whole

FAST = settings(max_examples=300, deadline=2000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=80, deadline=5000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
ZERO3 = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))
DDP = model_state("ddp", convention="zero-paper").subs(byte_widths("ddp", convention="zero-paper"))


def memsym_refusal(exc: BaseException) -> None:
    """The error contract: memsym's own ValueError subclass, one short line."""
    assert isinstance(exc, errors.MemsymError) and isinstance(exc, ValueError), repr(exc)[:300]
    msg = str(exc)
    assert msg and "\n" not in msg and len(msg) < 600, msg[:600]
    assert not any(unicodedata.category(ch) in ("Cc",) for ch in msg), msg


# text that looks like what people type, and hostile text
digits = st.text("0123456789", min_size=1, max_size=80)
typed_number = st.builds(lambda a, b, e, u: a + b + e + u, digits,
                         st.sampled_from(["", ".", ".5", ".25", ".0001"]),
                         st.sampled_from(["", "e3", "e-3", "e+2", "e1000", "E9", "e99999"]),
                         st.sampled_from(["", "B", "GB", "GiB", "TB", "kB", "K", "M", "T", "gb", " GB"]))
hostile = st.one_of(st.text(max_size=200), typed_number,
                    st.sampled_from(["inf", "nan", "-1", "1e308", "1e309", "0x10", "1_000", "١٢",
                                     "\x1b[2J80GB", "80GB\n", "9" * 5000, "1" * 4301 + "GB"]))


@FAST
@given(hostile)
def test_parse_bytes_contract(text):
    try:
        out = parse_bytes(text)
    except Exception as exc:  # noqa: BLE001 - the contract is what is checked
        memsym_refusal(exc)
    else:
        assert isinstance(out, int) and 1 <= out <= LIMITS["bytes"].maximum


@FAST
@given(hostile, st.sampled_from([None, "parameters", "tokens"]))
def test_parse_count_contract(text, limit):
    try:
        out = parse_count(text, "--params", limit=limit)
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
    else:
        assert isinstance(out, int) and out >= 1
        assert limit is None or out <= LIMITS[limit].maximum


@FAST
@given(hostile)
def test_parse_number_contract(text):
    try:
        out = parse_number(text, "--fragmentation", high=1)
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
    else:
        assert isinstance(out, Fraction) and 0 <= out <= 1


@FAST
@given(st.text(max_size=300), st.integers(8, 120))
def test_printable_is_inert_and_reversible(text, limit):
    shown = printable(text, limit)
    assert not any(unicodedata.category(ch) in HIDDEN for ch in shown)
    assert "\n" not in shown and "\x1b" not in shown
    if "...(+" not in shown or len(shown) <= limit:
        # not truncated: Python's unicode_escape codec gives the original back exactly
        back = shown.encode("ascii", "backslashreplace").decode("unicode_escape")
        assert back == text
    else:
        assert len(shown) <= limit + len(f"...(+{len(text)} chars)")


@FAST
@given(st.one_of(st.integers(-(10**6000), 10**6000), st.text(max_size=6000),
                 st.fractions(), st.floats(allow_nan=True, allow_infinity=True),
                 st.builds(lambda k: 10**k, st.integers(0, 20000))))
def test_short_is_short(value):
    shown = short(value)
    assert len(shown) <= 90 and "\n" not in shown


json_data = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**40), 10**40),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
              st.fractions(max_denominator=10**6)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)


def _non_finite(obj) -> bool:
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(_non_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_non_finite(v) for v in obj)
    return False


def _refuse_constant(name):
    raise AssertionError(f"non-finite JSON constant {name}")


@FAST
@given(json_data)
def test_finite_json_never_emits_infinity(obj):
    try:
        text = finite_json(obj)
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
        assert _non_finite(obj)
    else:
        assert not _non_finite(obj)
        json.loads(text, parse_constant=_refuse_constant)   # strict JSON: no Infinity, NaN


numbers_in = st.one_of(st.integers(-(10**30), 10**30), st.floats(allow_nan=True, allow_infinity=True),
                       st.booleans(), st.none(), st.text(max_size=10), st.fractions(),
                       st.builds(sp.Integer, st.integers(-5, 10**20)), st.just(sp.zoo),
                       st.just(sp.nan), st.just(sp.oo), st.builds(lambda k: 10**k, st.integers(0, 2000)))


@FAST
@given(numbers_in, st.sampled_from([None, "layers", "gpus", "parameters"]), st.booleans())
def test_whole_contract(value, limit, floats):
    try:
        out = whole(value, "--x", limit=limit, integral_floats=floats)
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
    else:
        assert type(out) is int and out >= 1 and not isinstance(value, (bool, str))
        assert limit is None or out <= LIMITS[limit].maximum
        assert out == value


@FAST
@given(numbers_in)
def test_positive_contract(value):
    try:
        out = positive(value, "--x")
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
    else:
        assert isinstance(out, sp.Rational) and out > 0 and not isinstance(value, (bool, str))


# --- solvers: answers checked by integer arithmetic, or an honest refusal -----------------------
@SLOW
@given(st.integers(1, 10**40), st.integers(1, 2**64), st.integers(1, 2**40), st.integers(1, 2**40))
def test_smallest_d_for_zero3_matches_hand_arithmetic(n_params, cap, t, p):
    # ZeRO-3 with mixed-precision Adam: 16 N / (d t p) bytes per GPU <= C  <=>
    # d >= 16 N / (C t p), so d = ceil(16 N / (C t p)) (integer arithmetic, no float)
    expected = max(1, -(-16 * n_params // (cap * t * p)))
    try:
        sol = smallest(ZERO3, "d", cap, {"N": n_params, "t": t, "p": p})
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
        assert isinstance(exc, errors.BeyondSearchBound) and expected > SEARCH_BOUND
    else:
        assert sol.value == expected


@SLOW
@given(st.integers(16, 2**64), st.integers(1, 2**40), st.integers(1, 2**40),
       st.integers(1, 10**6))
def test_largest_n_for_ddp_matches_hand_arithmetic(cap, t, p, d):
    # DDP keeps all 16 bytes per parameter replicated over d: 16 N / (t p) <= C
    expected = cap * t * p // 16
    try:
        sol = largest(DDP, "N", cap, {"d": d, "t": t, "p": p})
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
        assert expected > SEARCH_BOUND
    else:
        assert sol.value == expected


@SLOW
@given(st.integers(1, 10**12), st.integers(1, 2**40), st.integers(2, 97))
def test_smallest_with_a_divisibility_rule(n_params, cap, k):
    # the smallest multiple of k at or above the memory boundary (the rule "k divides d")
    boundary = max(1, -(-16 * n_params // cap))
    expected = -(-boundary // k) * k
    sol = smallest(ZERO3, "d", cap, {"N": n_params, "t": 1, "p": 1}, valid=lambda n: n % k == 0)
    assert sol.value == expected


# --- substitution keeps every symbol in its domain ----------------------------------------------
INTEGER_SYMS = [info.symbol for info in registry().values() if info.integer]
POSITIVE_SYMS = [info.symbol for info in registry().values() if info.domain == "positive"]
atoms = st.one_of(st.sampled_from(INTEGER_SYMS + POSITIVE_SYMS),
                  st.integers(-3, 5).map(sp.Integer),
                  st.sampled_from([sp.Rational(1, 3), sp.Rational(-1, 2), sp.Rational(5, 2)]))
exprs = st.recursive(atoms, lambda inner: st.one_of(
    st.builds(lambda x, y: x + y, inner, inner), st.builds(lambda x, y: x - y, inner, inner),
    st.builds(lambda x, y: x * y, inner, inner),
    st.builds(lambda x, y: x / y if y != 0 else x, inner, inner)), max_leaves=5)


def _admissible(sym, value: int):
    return sp.Integer(value) if registry()[sym.name].integer else sp.Rational(value, 3)


@SLOW
@given(st.sampled_from(["N", "d", "t", "p", "b_g", "b_o"]), exprs, st.integers(1, 6))
def test_substitution_result_stays_in_the_domain(name, expr, point):
    try:
        sub = ZERO3.subs({name: expr})
    except Exception as exc:  # noqa: BLE001
        memsym_refusal(exc)
        return
    # accepted: at admissible values of every remaining symbol the memory is a finite number
    # >= 0, and the substituted value itself is in the symbol's domain
    vals = {s_: _admissible(s_, point + i) for i, s_ in enumerate(sorted(sub.free_symbols, key=str))}
    total = sub.expr.xreplace(vals)
    assert total.is_finite and total >= 0, (name, expr, vals, total)
    val = sp.sympify(expr).xreplace({s_: _admissible(s_, point + i) for i, s_
                                     in enumerate(sorted(sp.sympify(expr).free_symbols, key=str))})
    info = registry()[name]
    if info.integer:
        assert val.is_Integer and val >= 1, (name, expr, val)
    elif info.domain == "positive":
        assert val > 0, (name, expr, val)
    else:
        assert val >= 0, (name, expr, val)


# --- a batch under an address-space limit (ulimit -v) and a timeout -----------------------------
CHILD = r"""
from hypothesis import given, settings, strategies as st
from memsym import errors, smallest
from memsym.terms.model_state import byte_widths, model_state
from memsym.units import parse_bytes, parse_count
M = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))

@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 10**300), st.integers(1, 10**300), st.integers(1, 10**6),
       st.text(max_size=5000))
def run(n, cap, t, text):
    for call in (lambda: smallest(M, "d", cap, {"N": n, "t": t, "p": 1},
                                  valid=lambda k: k % 3 == 0),
                 lambda: parse_bytes(text), lambda: parse_count(text)):
        try:
            call()
        except errors.MemsymError as exc:
            assert "\n" not in str(exc)

run()
print("ok")
"""


def test_fuzz_batch_in_bounded_memory_and_time():
    proc = run_python(CHILD, seconds=240, memory=3 * GiB)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
