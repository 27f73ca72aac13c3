"""The on-disk compile cache (memsym.compile_cache): what a new process loads equals what
lambdify builds, and every bound and failure falls back to compiling."""

import numpy as np
import pytest

from memsym import compile_cache, numeric
from memsym.symbols import N, d, p, t


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(tmp_path))
    numeric._lambdify.cache_clear()          # as a new process would start
    yield tmp_path
    numeric._lambdify.cache_clear()




def _expr():
    import sympy as sp

    # a Max as the phase peak has, and reciprocals the printer rewrites
    return sp.Max(16 * N / (d * p * t), 2 * N / t) + N / p ** 2


def test_a_new_process_loads_what_lambdify_built(cache):
    args = (np.array([7e9, 70e9]), np.array([8, 64]), np.array([1, 4]), np.array([2, 8]))
    fresh, names = numeric.compile_expr(_expr())
    files = list(cache.glob("*.py"))
    assert len(files) == 1 and names == ("N", "d", "p", "t")
    numeric._lambdify.cache_clear()
    loaded, _ = numeric.compile_expr(_expr())
    assert loaded is not fresh and loaded.__code__.co_filename == str(files[0])
    assert np.array_equal(loaded(*args)[0], fresh(*args)[0])
    # the math backend is its own entry
    numeric.compile_expr(_expr(), "math")
    assert len(list(cache.glob("*.py"))) == 2


def test_a_broken_entry_is_rebuilt(cache):
    numeric.compile_expr(_expr())
    (entry,) = cache.glob("*.py")
    entry.write_text("def not_the_function(:\n")
    numeric._lambdify.cache_clear()
    fn, _ = numeric.compile_expr(_expr())
    assert fn(7e9, 8, 1, 2)[0] == pytest.approx(16 * 7e9 / 16 + 7e9)
    assert "def _lambdifygenerated(" in entry.read_text()      # rewritten
    # an entry that defines no function is ignored too
    entry.write_text("x = 1\n")
    assert compile_cache.load(entry.stem, numeric._namespace("numpy")) is None


def test_off_bounded_and_only_keys_are_read(cache, monkeypatch):
    src = "def _lambdifygenerated(x):\n    return [x]\n"
    assert compile_cache.store("a" * 64, src)
    monkeypatch.setattr(compile_cache, "MAX_FILES", 1)
    assert not compile_cache.store("b" * 64, src)              # the directory is full
    monkeypatch.setattr(compile_cache, "MAX_FILES", 4096)
    assert not compile_cache.store("c" * 64, "x" * (compile_cache.MAX_BYTES + 1))
    assert not compile_cache.store("c" * 64, "print('not generated code')\n")
    # names that are not a SHA-256 key are never opened
    assert compile_cache.load("../../etc/passwd", {}) is None
    assert compile_cache.load("a" * 64, {})(3) == [3]
    monkeypatch.setenv("MEMSYM_CACHE_DIR", "off")
    assert compile_cache.cache_dir() is None
    assert not compile_cache.store("d" * 64, src)
    numeric._lambdify.cache_clear()
    fn, _ = numeric.compile_expr(_expr())                       # still compiles
    assert fn(7e9, 8, 1, 2)[0] == pytest.approx(7e9 + 7e9)


def test_an_unwritable_directory_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(blocker / "sub"))   # a file in the path
    numeric._lambdify.cache_clear()
    fn, _ = numeric.compile_expr(_expr())
    assert fn(7e9, 8, 1, 2)[0] == pytest.approx(14e9)
    numeric._lambdify.cache_clear()


@pytest.mark.skipif(not hasattr(__import__("os"), "getuid"), reason="POSIX permissions")
def test_a_directory_others_can_write_is_not_trusted(cache):
    # as ssh treats ~/.ssh: code in a group- or world-writable place is never executed
    src = "def _lambdifygenerated(x):\n    return [x]\n"
    assert compile_cache.store("e" * 64, src)
    cache.chmod(0o777)
    try:
        assert compile_cache.load("e" * 64, {}) is None
        assert not compile_cache.store("f" * 64, src)
    finally:
        cache.chmod(0o700)
    (cache / ("e" * 64 + ".py")).chmod(0o666)
    assert compile_cache.load("e" * 64, {}) is None
