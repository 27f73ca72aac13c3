"""The registry is the only source of symbols."""

import itertools

import pytest

from memsym import model_state
from memsym.errors import UnknownNameError
from memsym.symbols import info, lookup, registry
from memsym.terms.model_state import CONVENTIONS, OFFLOADS, SCHEMES


def all_model_state_totals():
    for scheme, conv, off in itertools.product(SCHEMES, CONVENTIONS, OFFLOADS):
        try:
            yield model_state(scheme, convention=conv, offload=off)
        except ValueError:
            continue


def test_every_term_uses_registered_symbols_only():
    reg = {meta.symbol for meta in registry().values()}
    for total in all_model_state_totals():
        for term in total:
            assert term.free_symbols <= reg, (term.key, term.free_symbols - reg)


def test_registry_metadata_is_complete():
    for name, meta in registry().items():
        assert meta.name == name
        assert meta.latex and meta.meaning and meta.unit
        assert meta.symbol.is_positive or meta.symbol.is_nonnegative
        assert not meta.symbol.is_integer  # integer=True makes solve return []


def test_lookup_validates_and_never_parses():
    assert lookup("d") is info("d").symbol
    for hostile in ("__import__('os').system('true')", "lambda: 1", "d.__class__", "d + 1"):
        with pytest.raises(UnknownNameError):
            lookup(hostile)


def test_latex_names_use_roman_subscripts():
    assert info("b_hp").latex == r"b_{\mathrm{hp}}"
