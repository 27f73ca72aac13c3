"""The suite's own order (issue 29): tests/suite_order.py, used by tests/conftest.py."""

import pathlib

from suite_order import LONGEST_FIRST, longest_first

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_longest_first_names_files_of_the_suite_once():
    # a renamed or deleted file would only lose its place; a typo would go unnoticed
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    assert [name for name in LONGEST_FIRST if not (ROOT / name).is_file()] == []


def test_listed_files_first_then_most_tests_first():
    # by hand: test_search.py is first of LONGEST_FIRST, howto-search.md further down; then
    # b.py (3 tests) before a.py (2), a.py before README.md (1): each file's tests in order
    ids = ["a.py::x", "b.py::p", "README.md::README.md", "a.py::y",
           "docs/howto-search.md::howto-search.md", "b.py::q", "b.py::r",
           "tests/test_search.py::t1", "tests/test_search.py::t2"]
    assert [ids[i] for i in longest_first(ids)] == [
        "tests/test_search.py::t1", "tests/test_search.py::t2",
        "docs/howto-search.md::howto-search.md",
        "b.py::p", "b.py::q", "b.py::r", "a.py::x", "a.py::y", "README.md::README.md"]
