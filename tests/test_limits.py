"""The documented limits (issue 15, part 1) and the one validator of numbers (memsym.values).

Expected values: the limits must exceed the largest published sizes, taken from the sources
themselves (Llama 3 405B: Dubey et al. 2024, Table 3 -- 126 layers, model dimension 16,384,
128 attention heads, vocabulary 128,000 (config.json 128,256); DeepSeek-V3: DeepSeek-AI 2024,
§4.2 -- 256 routed experts, 671B parameters; Llama 4 / Gemini 10M-token contexts are the
longest published; xAI Colossus ~2·10^5 GPUs) and exceed them by a wide margin; and each limit
is the round number the issue names (10^6 layers, 2^40 GPUs, ...), checked literally here.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from memsym import errors
from memsym.limits import LIMITS, MAX_CANDIDATES, MAX_DIGITS, SEARCH_BOUND, check_limit, describe
from memsym.units import parse_bytes, parse_count, parse_number
from memsym.values import boolean, exact, positive, whole

# the round numbers of issue 15 / the brief, written out independently of memsym.limits
ISSUE = {"layers": 10**6, "hidden": 2**24, "heads": 2**20, "vocab": 2**31, "sequence": 2**31,
         "micro_batch": 2**40, "global_batch": 2**40, "gpus": 2**40, "parameters": 10**16,
         "experts": 2**20, "bytes": 2**64}
# the largest published values (module docstring), each limit must exceed them 100-fold
PUBLISHED = {"layers": 126, "hidden": 16384, "heads": 128, "vocab": 262144, "sequence": 10**7,
             "gpus": 200_000, "parameters": 1_800_000_000_000, "experts": 256,
             "bytes": 141 * 10**9, "global_batch": 16384, "micro_batch": 64}


@pytest.mark.parametrize("name", sorted(ISSUE))
def test_limit_is_the_documented_round_number(name):
    assert LIMITS[name].maximum == ISSUE[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_limits_are_far_above_every_published_size(name):
    assert LIMITS[name].maximum >= 100 * PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_each_limit_has_a_reason_and_is_refused_one_above(name):
    lim = LIMITS[name]
    assert lim.reason and "\n" not in lim.reason
    assert describe(name).startswith(f"{name} <= {lim.shown}")
    assert check_limit(name, lim.maximum) == lim.maximum          # the limit itself is accepted
    with pytest.raises(errors.LimitError) as info:
        check_limit(name, lim.maximum + 1, f"--{name}")
    msg = str(info.value)
    assert isinstance(info.value, errors.InvalidValueError) and isinstance(info.value, ValueError)
    assert "\n" not in msg and f"--{name}" in msg and lim.shown in msg
    assert info.value.name == name and info.value.limit == lim.maximum


def test_shown_matches_maximum():
    # "10^6" / "2^40" as printed in the message is the number checked
    for lim in LIMITS.values():
        base, exp = lim.shown.split("^")
        assert int(base) ** int(exp) == lim.maximum, lim


def test_limit_message_of_a_5000_digit_value_is_short():
    with pytest.raises(errors.LimitError) as info:
        check_limit("parameters", 10**5000)
    assert len(str(info.value)) < 300 and "5001 digits" in str(info.value)


def test_check_limit_refuses_bools_and_unknown_names():
    with pytest.raises(errors.InvalidValueError, match="must be a number"):
        check_limit("layers", True)
    with pytest.raises(errors.UnknownNameError, match="did you mean layers"):
        check_limit("layer", 5)


def test_search_bounds_are_documented_constants():
    assert SEARCH_BOUND == 2**256 and MAX_CANDIDATES == 2**20 and MAX_DIGITS == 60
    # a search bound above every product of limits a solver can meet (d up to 16 N / 1 byte)
    assert SEARCH_BOUND > 16 * LIMITS["parameters"].maximum * LIMITS["bytes"].maximum


# ------------------------------------------------------------------------------------------------
# memsym.values: one validator for whole numbers and positive values
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [8, np.int64(8), np.int32(8), np.uint8(8), sp.Integer(8)])
def test_whole_accepts_every_integer_type(value):
    out = whole(value, "t")
    assert out == 8 and type(out) is int


@pytest.mark.parametrize("value, said", [
    (True, "a bool"), (False, "a bool"), (np.bool_(True), "a bool"), (8.0, "the float 8.0"),
    ("8", "never parses text"), (b"8", "never parses text"), (None, "NoneType"),
    (0, "got 0"), (-3, "got -3"), (Fraction(1, 2), "Fraction"), (sp.Rational(3, 2), "Half"),
    (float("nan"), "float nan"), (complex(8, 0), "complex"),
])
def test_whole_refuses(value, said):
    with pytest.raises(errors.InvalidValueError) as info:
        whole(value, "t")
    msg = str(info.value)
    assert msg.startswith("t must be a whole number >= 1") and "\n" not in msg
    if said not in ("Fraction", "Half", "complex"):
        assert said in msg, msg


def test_whole_integral_floats_only_where_asked():
    assert whole(8.0, "b", integral_floats=True) == 8
    assert whole(1e15, "N", integral_floats=True) == 10**15      # exact, not float-rounded
    for bad in (8.5, float("inf"), float("nan"), -1.0):
        with pytest.raises(errors.InvalidValueError):
            whole(bad, "b", integral_floats=True)


def test_whole_minimum_and_limit():
    assert whole(0, "f_sh", minimum=0) == 0
    assert whole(10**6, "num_layers", limit="layers") == 10**6
    with pytest.raises(errors.LimitError, match="num_layers = 1000001 .*10\\^6 layers"):
        whole(10**6 + 1, "num_layers", limit="layers")
    with pytest.raises(errors.LimitError, match="above the limit 10"):
        whole(11, "k", limit=10)


def test_whole_of_a_huge_value_is_echoed_short():
    with pytest.raises(errors.LimitError) as info:
        whole(10**5000, "--params", limit="parameters")
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("value, expected", [
    (0.45, sp.Rational(9, 20)), (2, 2), (np.float64(0.5), sp.Rational(1, 2)),
    (Fraction(1, 3), sp.Rational(1, 3)), (1e308, 10**308)])
def test_positive_exact(value, expected):
    out = positive(value, "x")
    assert out == expected and isinstance(out, sp.Rational)


@pytest.mark.parametrize("value", [0, -1, float("inf"), -float("inf"), float("nan"), True, "1",
                                   sp.oo, sp.zoo, sp.nan, sp.Float("1e1000")])
def test_positive_refuses(value):
    with pytest.raises(errors.InvalidValueError):
        positive(value, "efficiency")


def test_positive_allow_zero_and_limit():
    assert positive(0, "price", allow_zero=True) == 0
    with pytest.raises(errors.InvalidValueError, match=">= 0"):
        positive(-1, "price", allow_zero=True)
    with pytest.raises(errors.LimitError, match="10\\^18 tokens"):
        positive(10**200, "--tokens", limit="tokens")


def test_exact_refuses_numbers_of_more_than_4096_bits():
    assert exact(10**1000) == sp.Integer(10) ** 1000        # 3322 bits: fine
    with pytest.raises(errors.LimitError, match="more than 1233 digits"):
        exact(10**1300)
    with pytest.raises(errors.LimitError):
        exact(Fraction(1, 10**1300))


@pytest.mark.parametrize("value", ["false", "no", "0", 0, 1, None, [], "True"])
def test_boolean_refuses_truthy_and_falsy_non_bools(value):
    # "false" and "no" are truthy strings: used as a flag they would switch a feature on
    with pytest.raises(errors.InvalidValueError, match="must be True or False"):
        boolean(value, "flash_attention")


def test_boolean_accepts_bools():
    assert boolean(True, "x") is True and boolean(np.bool_(False), "x") is False


# ------------------------------------------------------------------------------------------------
# memsym.units: byte sizes and numbers as typed
# ------------------------------------------------------------------------------------------------
def test_bytes_at_and_above_the_2_64_limit():
    assert parse_bytes(str(2**64)) == 2**64
    assert parse_bytes("16EiB" if False else "16777216TiB") == 2**64     # 2^24 TiB = 2^64 B
    for text in (str(2**64 + 1), "18446744073709551617", "20000000PB", 2**65):
        with pytest.raises(errors.LimitError, match="2\\^64 bytes"):
            parse_bytes(text)


@pytest.mark.parametrize("text", ["1e309", "1e1000", "inf", "nan", "Infinity", "1" * 5000 + "GB",
                                  "1" * 61, "-80GB", "80GB\n80GB"])
def test_bytes_refused_one_line_short(text):
    with pytest.raises(errors.InvalidValueError) as info:
        parse_bytes(text)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 300


def test_count_of_4300_digits_is_refused_before_conversion():
    # int() of > 4300 digits raises a bare ValueError in Python >= 3.11: refused first
    for text in ("7" * 4301, "7" * 61, "1" * 5000 + "B"):
        with pytest.raises(errors.InvalidValueError, match="at most 60 digits") as info:
            parse_count(text)
        assert len(str(info.value)) < 300


def test_count_limit():
    assert parse_count("1e16", "--params", limit="parameters") == 10**16
    with pytest.raises(errors.LimitError, match="10\\^16 parameters"):
        parse_count("1e17", "--params", limit="parameters")
    assert parse_count("1e30") == 10**30                     # no limit unless asked
    # issue 15: `time 1e200 --tokens 1e200`: refused in one line that says why
    for text in ("1e200", "1e9999", "7e100B"):
        with pytest.raises(errors.InvalidValueError, match="exponents go up to e99"):
            parse_count(text, "--tokens")
    with pytest.raises(errors.LimitError, match="--tokens = 100000000000...\\(100 digits\\) .*10\\^18"):
        parse_count("1e99", "--tokens", limit="tokens")


@pytest.mark.parametrize("text, expected", [("0.1", Fraction(1, 10)), ("1e-3", Fraction(1, 1000)),
                                            ("45", 45), (".5", Fraction(1, 2)), ("2.", 2),
                                            ("1E+2", 100)])
def test_parse_number_exact(text, expected):
    assert parse_number(text, "x", high=None) == expected


@pytest.mark.parametrize("text, said", [
    ("1e1000", "must be in [0, 1], got 1e+1000"), ("2", "must be in [0, 1], got 2"),
    ("inf", "cannot read"), ("nan", "cannot read"), ("-0.1", "cannot read"), ("1e99999", "cannot read"),
    ("0x10", "cannot read"), ("1_000", "cannot read"), ("", "cannot read"), ("5" * 5000, "cannot read")])
def test_parse_number_refusals(text, said):
    with pytest.raises(errors.InvalidValueError) as info:
        parse_number(text, "--fragmentation", high=1)
    assert said in str(info.value) and len(str(info.value)) < 300


def test_parse_number_open_ends():
    with pytest.raises(errors.InvalidValueError, match=r"\(0, 1\]"):
        parse_number("0", "--efficiency", include_low=False, high=1)
    assert parse_number("1e-320", "--efficiency", include_low=False, high=1) == Fraction(1, 10**320)
    with pytest.raises(errors.InvalidValueError, match=r"\[0, 1\)"):
        parse_number("1", "--hidden-dropout", high=1, include_high=False)
    assert math.isclose(float(parse_number("0.999", "p", high=1, include_high=False)), 0.999)


# ------------------------------------------------------------------------------------------------
# the field tables the entry points use
# ------------------------------------------------------------------------------------------------
def test_field_limits_name_real_fields_and_known_limits():
    import dataclasses

    from memsym.limits import FIELD_LIMITS
    from memsym.model import Architecture
    from memsym.training import Layout, Training

    fields = {f.name for cls in (Architecture, Layout) for f in dataclasses.fields(cls)}
    fields |= set(Training().flat())   # the flat names of Training's sub-records
    # microbatch_group_size: a Training field added on main concurrently (issue 12)
    assert set(FIELD_LIMITS) - {"microbatch_group_size"} <= fields, set(FIELD_LIMITS) - fields
    assert set(FIELD_LIMITS.values()) <= set(LIMITS)
    # every int-valued size field of the three records has a limit
    # Training's own fields are its typed sub-records: their fields are the job's sizes
    parts = [type(getattr(Training(), f.name)) for f in dataclasses.fields(Training)
             if dataclasses.is_dataclass(getattr(Training(), f.name))]
    assert len(parts) >= 6
    sizes = {f.name for cls in (Architecture, Layout, Training, *parts)
             for f in dataclasses.fields(cls)
             if "int" in str(f.type) and "bool" not in str(f.type)}
    # not sizes, each bounded where it is checked: moe_layer_freq (a pattern), mamba_version
    # (1 or 2, memsym.model.architecture), capacity_factor (a load ratio in (0, 2^20],
    # memsym.training), zero_buckets ((name, size) pairs, job_record.check_zero_buckets),
    # bf16_layers (a (first, last) pair, each at most the model's layers, job_checks)
    others = {"moe_layer_freq", "mamba_version", "capacity_factor", "zero_buckets", "bf16_layers"}
    assert sizes <= set(FIELD_LIMITS) | others, sizes - set(FIELD_LIMITS) - others


def test_a_capacity_factor_beyond_its_bound_is_refused():
    """The library bounds the MoE capacity factor as the CLI does (``(0, 2^20]``)."""
    from memsym.errors import InvalidValueError
    from memsym.job import job
    from memsym.training import job_memory

    with pytest.raises(InvalidValueError, match="capacity_factor"):
        job_memory(job("mixtral-8x7b", ep=8, dp=8, capacity_factor=10**300))
