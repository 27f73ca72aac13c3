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


# ------------------------------------------------------------------------------------------------
# issue 34: every file verifies (format, memsym version, SHA-256 of key, version and source)
# before it is compiled; one that does not is never executed, and is rebuilt and rewritten
# ------------------------------------------------------------------------------------------------
_ARGS = (7e9, 8, 1, 2)
# independent of memsym: max(16 N/(d p t), 2 N/t) + N/p^2 at N = 7e9, d = 8, p = 1, t = 2
_WANT = max(16 * 7e9 / (8 * 1 * 2), 2 * 7e9 / 2) + 7e9 / 1**2


def _planted(entry, marker):
    # valid Python defining the function, which would leave ``marker`` behind if executed
    return (f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
            "def _lambdifygenerated(N, d, p, t):\n    return [0.0]\n")


def _rebuilt_after(cache, damage):
    numeric.compile_expr(_expr())
    (entry,) = cache.glob("*.py")
    marker = cache.parent / f"{cache.name}-ran"
    entry.write_bytes(damage(entry.read_bytes(), entry, marker))
    numeric._lambdify.cache_clear()                      # a new process
    fn, _ = numeric.compile_expr(_expr())
    assert not marker.exists()                           # the unverified file never ran
    assert fn(*_ARGS)[0] == pytest.approx(_WANT)          # the result is still right
    raw = entry.read_bytes()                              # rewritten, and it verifies again
    assert compile_cache._verified(entry.stem, raw) is not None
    return raw


def test_a_tampered_byte_is_not_executed_and_is_rewritten(cache):
    def flip(raw, entry, marker):
        i = raw.index(b"return") + 8                      # one byte of the source
        return raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:]

    _rebuilt_after(cache, flip)


def test_planted_code_under_the_old_seal_is_not_executed(cache):
    def plant(raw, entry, marker):
        header = raw.split(b"\n", 1)[0]
        return header + b"\n" + _planted(entry, marker).encode()

    _rebuilt_after(cache, plant)


def test_a_truncated_file_is_not_executed_and_is_rewritten(cache):
    _rebuilt_after(cache, lambda raw, entry, marker: raw[: len(raw) // 2])
    _rebuilt_after(cache, lambda raw, entry, marker: raw[:10])           # inside the header
    _rebuilt_after(cache, lambda raw, entry, marker: b"")


def test_another_memsym_version_is_not_executed_and_is_rewritten(cache):
    def other_version(raw, entry, marker):
        source = _planted(entry, marker)
        # a correctly sealed file, but written by another memsym
        return (compile_cache._seal(entry.stem, source, "0.0.0-other") + source).encode()

    _rebuilt_after(cache, other_version)


def test_a_file_sealed_for_another_key_is_not_executed(cache):
    def moved(raw, entry, marker):
        source = _planted(entry, marker)
        return (compile_cache._seal("0" * 64, source) + source).encode()

    _rebuilt_after(cache, moved)


def test_an_unsealed_file_of_an_older_memsym_is_not_executed(cache):
    # what memsym wrote before files were sealed: plain source, now refused and rewritten
    _rebuilt_after(cache, lambda raw, entry, marker: _planted(entry, marker).encode())


@pytest.mark.skipif(not hasattr(__import__("os"), "getuid"), reason="POSIX permissions")
def test_the_directory_is_made_0700_and_a_shared_one_falls_back(tmp_path, monkeypatch):
    import os
    import stat

    root = tmp_path / "new" / "compiled"
    monkeypatch.setenv("MEMSYM_CACHE_DIR", str(root))
    old = os.umask(0)                       # even with no umask the directory is private
    try:
        numeric._lambdify.cache_clear()
        numeric.compile_expr(_expr())
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and len(list(root.glob("*.py"))) == 1
    for mode in (0o770, 0o707, 0o777):      # group- or world-writable: no disk cache, no crash
        root.chmod(mode)
        numeric._lambdify.cache_clear()
        fn, _ = numeric.compile_expr(_expr())
        assert fn(*_ARGS)[0] == pytest.approx(_WANT)
        (entry,) = root.glob("*.py")
        assert compile_cache.load(entry.stem, numeric._namespace("numpy")) is None
    root.chmod(0o700)
    numeric._lambdify.cache_clear()


@pytest.mark.skipif(not hasattr(__import__("os"), "getuid") or __import__("os").getuid() != 0,
                    reason="changing a file's owner needs root")
def test_a_foreign_owned_directory_is_not_used(cache):
    import os

    numeric.compile_expr(_expr())
    (entry,) = cache.glob("*.py")
    os.chown(cache, 12345, -1)
    try:
        assert compile_cache.load(entry.stem, numeric._namespace("numpy")) is None
        assert not compile_cache.store("a" * 64, "def _lambdifygenerated(x):\n    return [x]\n")
        numeric._lambdify.cache_clear()
        fn, _ = numeric.compile_expr(_expr())
        assert fn(*_ARGS)[0] == pytest.approx(_WANT)
    finally:
        os.chown(cache, os.getuid(), -1)


def test_a_link_in_place_of_an_entry_is_not_followed(cache):
    numeric.compile_expr(_expr())
    (entry,) = cache.glob("*.py")
    target = cache.parent / f"{cache.name}-elsewhere.py"
    target.write_bytes(entry.read_bytes())          # even a valid file is not read via a link
    entry.unlink()
    entry.symlink_to(target)
    assert compile_cache.load(entry.stem, numeric._namespace("numpy")) is None


def _new_process():
    # what a new process starts with: no template, table or count in memory
    from memsym.search import templates

    templates._TABLES.clear()
    templates._COUNTS.clear()
    for fn in (templates.stage_function, templates.stage_count_floats, templates.fast_template,
               templates._act_template, templates.stage_count_items, templates._root):
        fn.cache_clear()


def test_a_search_in_a_new_process_builds_no_template_it_met(cache):
    """The search's stage table (memsym.search.templates.StageTable): a second process loads
    every template and parameter count of the first from the cache and prices every layout
    the same to the last bit; another space (another sequence length) builds its own."""
    from memsym.search import search, templates

    kw = dict(seq_length=4096, global_batch_size=512)
    _new_process()
    first = search("mixtral-8x7b", "h100-80gb", 64, **kw)     # MoE, uneven end stages
    assert templates.fast_template.cache_info().misses > 0
    assert len(list(cache.glob("*.py"))) >= 1
    _new_process()
    second = search("mixtral-8x7b", "h100-80gb", 64, **kw)
    assert templates.fast_template.cache_info().misses == 0
    assert templates.stage_count_items.cache_info().misses == 0
    assert first.columns.keys() == second.columns.keys()
    for key, col in first.columns.items():
        assert np.array_equal(col, second.columns[key],
                              equal_nan=np.asarray(col).dtype.kind == "f"), key
    _new_process()
    search("mixtral-8x7b", "h100-80gb", 64, **dict(kw, seq_length=2048))
    assert templates.fast_template.cache_info().misses > 0
    _new_process()


def test_the_table_byte_code_is_sealed_to_its_source(cache):
    """The stage table's functions are read back as byte code (compile_cache.store_companion)
    only where the companion verifies for that very source: a changed byte, or a source
    rewritten under the same key, and it is not loaded; the table is then compiled from its
    source, written anew, and every layout is priced the same to the last bit."""
    from memsym.search import search

    kw = dict(seq_length=4096, global_batch_size=512)
    _new_process()
    first = search("mixtral-8x7b", "h100-80gb", 64, **kw)
    (code,) = cache.glob("*.code")
    assert compile_cache.load_companion(code.stem) is not None
    raw = code.read_bytes()
    code.write_bytes(raw[:-1] + bytes([raw[-1] ^ 0x01]))
    assert compile_cache.load_companion(code.stem) is None
    _new_process()
    second = search("mixtral-8x7b", "h100-80gb", 64, **kw)
    assert compile_cache.load_companion(code.stem) is not None      # rewritten
    for key, col in first.columns.items():
        assert np.array_equal(col, second.columns[key],
                              equal_nan=np.asarray(col).dtype.kind == "f"), key
    # another source under the same key: the companion sealed to the old one is not read
    entry = cache / f"{code.stem}.py"
    source = entry.read_text().split("\n", 1)[1]
    assert compile_cache.store(code.stem, source + "\n")
    assert compile_cache.load_companion(code.stem) is None
    _new_process()


def test_data_is_read_back_only_under_its_seal(cache):
    value = {(2, 4, 2, 2): (b"\x00\x01\x02", 17, None), "n": 1.5}
    assert compile_cache.store_data("d" * 64, value)
    assert compile_cache.load_data("d" * 64) == value
    entry = cache / ("d" * 64 + ".data")
    raw = entry.read_bytes()
    entry.write_bytes(raw[:-1] + bytes([raw[-1] ^ 0x01]))        # a changed byte
    assert compile_cache.load_data("d" * 64) is None
    (cache / ("e" * 64 + ".data")).write_bytes(raw)                # under another key
    assert compile_cache.load_data("e" * 64) is None
    assert compile_cache.load_data("not a key") is None


def test_kept_schedule_levels_are_the_ordered_ones(cache):
    """The interleaved schedules a process keeps for the next (memsym.timing.interleaved)
    read back as the same levels, index arrays, last passes and pass count."""
    from memsym.timing import interleaved

    for shape in ((2, 4, 2, 2), (4, 8, 3, 4), (3, 6, 2, 3)):
        fresh = interleaved._ordered(*shape)
        assert compile_cache.store_data("f" * 64, {shape: interleaved._packed(fresh)})
        back = interleaved._unpacked(compile_cache.load_data("f" * 64)[shape])
        (levels, ends, n), (levels2, ends2, n2) = fresh, back
        assert n == n2 and np.array_equal(ends, ends2) and len(levels) == len(levels2)
        for a, b in zip(levels, levels2):
            assert a[:2] == b[:2] and all(np.array_equal(x, y) and x.dtype == y.dtype
                                          for x, y in zip(a[2:], b[2:]))
