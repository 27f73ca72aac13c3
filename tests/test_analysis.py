"""The solver: closed forms, integers verified by substitution, and honest refusals."""

import pytest
import sympy as sp

from memsym import byte_widths, largest, model_state, smallest
from memsym.errors import InvalidValueError, NoFitError
from memsym.symbols import C, N, b_hp, p, t

GB = 10**9


def distopt():
    # seed 000 with fp32 widths substituted and b_hp kept symbolic
    return model_state("distributed-optimizer", convention="seed000").subs(b_g=4, b_m=4, b_o=8)


def test_closed_form_of_smallest_d():
    # hand: N/(pt)(b_hp + 16/d) <= C  <=>  d >= 16 N / (C p t - N b_hp)
    sol = smallest(distopt(), "d", 80 * GB, {"N": 175 * GB, "t": 4, "p": 2, "b_hp": 2})
    assert sp.simplify(sol.closed_form - 16 * N / (C * p * t - N * b_hp)) == 0
    # hand: 16*175e9 / (80e9*8 - 2*175e9) = 2800/290 = 9.655...  -> 10
    assert sol.bound == sp.Rational(2800, 290)
    assert sol.value == 10
    assert sol.memory <= 80 * GB


def test_nothing_fits_names_the_binding_term():
    # the replicated bf16 weights alone: 2 * 175e9 / 1 = 350 GB > 80 GB
    with pytest.raises(NoFitError) as err:
        smallest(distopt(), "d", 80 * GB, {"N": 175 * GB, "t": 1, "p": 1, "b_hp": 2})
    assert err.value.binding == ("weights",)
    assert err.value.floor == 350 * GB
    assert "weights" in str(err.value) and "350" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_smallest_t_and_p_with_divisibility():
    total = model_state("zero1", convention="zero-paper").subs(byte_widths("zero1", convention="zero-paper"))
    heads = 96
    sol = smallest(total, "t", 80 * GB, {"N": 175 * GB, "d": 64, "p": 1},
                   valid=lambda x: heads % x == 0)
    # hand: (4 + 12/64) * 175e9 / t <= 80e9  ->  t >= 9.16 -> 10, but 96 % 10 != 0 -> 12
    assert sol.value == 12
    sol_p = smallest(total, "p", 80 * GB, {"N": 175 * GB, "d": 64, "t": 8})
    # hand: 4.1875 * 175e9 / (8 p) <= 80e9 -> p >= 1.145 -> 2
    assert sol_p.value == 2


def test_largest_n():
    total = model_state("ddp", convention="zero-paper").subs(byte_widths("ddp", convention="zero-paper"))
    sol = largest(total, "N", 80 * GB, {"d": 1, "t": 1, "p": 1})
    assert sol.value == 5 * GB  # 80e9 / 16
    assert sol.relation == "<="


def test_bad_capacity_and_missing_values():
    with pytest.raises(InvalidValueError):
        smallest(distopt(), "d", 0, {"N": 1, "t": 1, "p": 1, "b_hp": 2})
    with pytest.raises(InvalidValueError, match="values needed"):
        smallest(distopt(), "d", 80 * GB, {"N": 175 * GB})


def test_fewest_gpus_seed004_7b_needs_two_80gb_cards():
    # seed 004: 7B full training = 16 x 7 = 112 GB of states -> at least 2 x 80 GB (sharded, ZeRO-3)
    from memsym import smallest_gpus

    total = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))
    sol = smallest_gpus(total, 80 * GB, {"N": 7 * GB, "t": 1, "p": 1})
    assert sol.value == 2
    # with t = 2 fixed, GPU counts come in multiples of t p = 2 and 2 still suffices
    assert smallest_gpus(total, 80 * GB, {"N": 7 * GB, "t": 2, "p": 1}).value == 2
    # 70B: 1120 GB / 80 GB = 14 exactly
    assert smallest_gpus(total, 80 * GB, {"N": 70 * GB, "t": 1, "p": 1}).value == 14


def test_bounds_and_values_are_checked():
    total = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))
    for bad in ({"lower": 0}, {"lower": "a"}, {"upper": 0}, {"lower": 5, "upper": 2}):
        with pytest.raises(InvalidValueError):
            smallest(total, "d", 80 * GB, {"N": 7 * GB, "t": 1, "p": 1}, **bad)
    with pytest.raises(InvalidValueError, match="mapping"):
        smallest(total, "d", 80 * GB, [("N", 7 * GB)])
    with pytest.raises(InvalidValueError, match="real"):
        smallest(total, "d", sp.I, {"N": 7 * GB, "t": 1, "p": 1})
