"""Hugging Face Hub model ids as a MODEL (issue 32): ``org/name`` and ``org/name@revision``.

No test here uses the network.  The Hub cache is built in ``tmp_path`` in huggingface_hub's
layout (``models--org--name/refs/<ref>`` holding a commit, ``snapshots/<commit>/config.json``)
and read with ``HF_HUB_OFFLINE=1``; the online answers (gated, missing, too large, no network)
are fakes of ``get_hf_file_metadata`` and ``hf_hub_download``; every test that must not reach
the Hub replaces both with a function that fails the test.
"""

from __future__ import annotations

import json
import sys

import pytest

from memsym.errors import InvalidValueError
from memsym.limits import MAX_CONFIG_JSON_BYTES, MAX_HUB_NAME_CHARS
from memsym.model import parameter_count, resolve_model
from memsym.model.hub import from_hub, parse_hub_id
from in_process import run as _cli

hf = pytest.importorskip("huggingface_hub")
from huggingface_hub import constants as hf_constants   # noqa: E402
from huggingface_hub import errors as hf_errors         # noqa: E402
from huggingface_hub.utils import validate_repo_id      # noqa: E402

REPO = "meta-llama/Meta-Llama-3-8B"
COMMIT = "a" * 40          # a commit hash as the Hub writes them (40 hex digits)
COMMIT_V2 = "b" * 40
# meta-llama/Meta-Llama-3-8B config.json (the fields that matter), as tests/test_models.py
# HF_CASES["llama3-8b"] copies it from https://huggingface.co/meta-llama/Meta-Llama-3-8B
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
             "tie_word_embeddings": False, "rope_theta": 500000.0}
# the Hugging Face safetensors total of meta-llama/Meta-Llama-3-8B (tests/test_models.py
# PUBLISHED["llama3-8b"])
LLAMA3_8B_PARAMS = 8_030_261_248
# one Llama-3-8B decoder layer: (8,030,261,248 - 2 * 128256 * 4096 - 4096) / 32, the hand
# derivation formulas/models.toml checks
LLAMA3_8B_LAYER = 218_112_000


def _fail(*args, **kwargs):
    pytest.fail("the Hub was called")


def _snapshot(cache, repo, commit, cfg, refs=("main",)):
    folder = cache / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    (folder / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (folder / "refs" / ref).write_text(commit, encoding="utf-8")
    return snap / "config.json"


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """A Hub cache with Meta-Llama-3-8B at main and a 16-layer revision 'v2', read offline."""
    cache = tmp_path / "hub"
    local = _snapshot(cache, REPO, COMMIT, LLAMA3_8B)
    _snapshot(cache, REPO, COMMIT_V2, {**LLAMA3_8B, "num_hidden_layers": 16}, refs=("v2",))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # hf_hub_download's default cache folder is read when it is called
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf, "get_hf_file_metadata", _fail)   # offline: never asked
    return cache, local


@pytest.fixture
def no_hub(monkeypatch):
    monkeypatch.setattr(hf, "get_hf_file_metadata", _fail)
    monkeypatch.setattr(hf, "hf_hub_download", _fail)


def _hf_error(name, message="401 Client Error"):
    # the Hub's error classes take an HTTP response; an instance without one is enough here
    cls = getattr(hf_errors, name)
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    return exc


# ---------------------------------------------------------------------------------------------
# read from the cache
# ---------------------------------------------------------------------------------------------

def test_hub_id_estimate_equals_the_local_config(offline_cache, capsys):
    """`memsym estimate org/name` prints what the same config.json's path prints, named."""
    _, local = offline_cache
    code, by_path, err = _cli(capsys, "estimate", str(local), "--tp", "2", "--json")
    assert code == 0 and err == ""
    code, by_id, err = _cli(capsys, "estimate", REPO, "--tp", "2", "--json")
    assert code == 0 and err == ""
    by_path, by_id = json.loads(by_path), json.loads(by_id)
    assert by_id.pop("model") == REPO and by_path.pop("model") == "llama"
    assert by_id == by_path
    assert by_id["params"] == LLAMA3_8B_PARAMS
    assert parameter_count(resolve_model(REPO)) == LLAMA3_8B_PARAMS


def test_revision_reads_that_snapshot(offline_cache):
    """org/name@ref and org/name@commit read that revision's config.json."""
    cache, _ = offline_cache
    short = LLAMA3_8B_PARAMS - 16 * LLAMA3_8B_LAYER      # 16 of the 32 layers
    for text in (f"{REPO}@v2", f"{REPO}@{COMMIT_V2}"):
        arch = from_hub(text, cache_dir=cache)
        assert arch.num_layers == 16 and arch.name == text
        assert parameter_count(arch) == short
    assert parameter_count(from_hub(f"{REPO}@main")) == LLAMA3_8B_PARAMS


def test_offline_miss_is_one_line(offline_cache, capsys):
    code, out, err = _cli(capsys, "estimate", "meta-llama/Llama-3.1-8B")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "not in the Hugging Face cache" in err and "HF_HUB_OFFLINE" in err
    with pytest.raises(InvalidValueError, match="not in the Hugging Face cache"):
        from_hub(f"{REPO}@v3")                      # a revision the cache does not hold


def test_local_path_wins_over_the_hub(tmp_path, monkeypatch, no_hub):
    """A folder spelled like a Hub id is read as the local config.json, no Hub call."""
    folder = tmp_path / "meta-llama" / "Meta-Llama-3-8B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**LLAMA3_8B, "num_hidden_layers": 8}))
    monkeypatch.chdir(tmp_path)
    arch = resolve_model(REPO)
    assert arch.num_layers == 8
    assert parameter_count(arch) == LLAMA3_8B_PARAMS - 24 * LLAMA3_8B_LAYER


# ---------------------------------------------------------------------------------------------
# refused before any Hub call
# ---------------------------------------------------------------------------------------------

BAD_IDS = [
    "a/b/c", "/abs/config", "../etc/passwd", "./x/y", "org/", "/name", "org/na me",
    "org/name\x1b[31m", "org/name\n", "org/naïve", "org/-name", "org/name.", "org/.hidden",
    "ab--c/d", "org/na..me", "org/name.git", "org/name@", "org/name@../../x", "org/name@/abs",
    "org/name@a//b", "org/name@main.lock", "org/name@ma in", "org/name@x\x00",
    "org/" + "n" * (MAX_HUB_NAME_CHARS + 1), "o" * (MAX_HUB_NAME_CHARS + 1) + "/name",
    "org/name@" + "r" * 256, "x" * 10**6 + "/y",
]


@pytest.mark.parametrize("text", BAD_IDS, ids=range(len(BAD_IDS)))
def test_bad_ids_are_refused_before_the_hub(text, no_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)          # none of them names a file here
    with pytest.raises(InvalidValueError, match="not a Hugging Face Hub model id") as info:
        resolve_model(text)
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


@pytest.mark.parametrize("text, repo, rev", [
    ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B", None),
    ("Qwen/Qwen3-0.6B@refs/pr/1", "Qwen/Qwen3-0.6B", "refs/pr/1"),
    ("a/b@v1.0", "a/b", "v1.0"),
    ("o" * MAX_HUB_NAME_CHARS + "/n_1", "o" * MAX_HUB_NAME_CHARS + "/n_1", None),
])
def test_good_ids_parse(text, repo, rev):
    """The ids huggingface_hub's validate_repo_id accepts (its docstring's examples)."""
    hub = parse_hub_id(text)
    assert (hub.repo_id, hub.revision) == (repo, rev)
    validate_repo_id(hub.repo_id)           # huggingface_hub agrees


@pytest.mark.parametrize("text", ["org/name.git", "ab--c/d", "org/na..me", "org/-x"])
def test_refused_ids_are_refused_by_huggingface_hub_too(text):
    with pytest.raises(hf_errors.HFValidationError):
        validate_repo_id(text)
    with pytest.raises(InvalidValueError):
        parse_hub_id(text)


def test_preset_names_are_not_hub_ids(no_hub):
    assert resolve_model("llama3-8b").num_layers == 32


# ---------------------------------------------------------------------------------------------
# the Hub's answers, each one line
# ---------------------------------------------------------------------------------------------

def _online(monkeypatch, meta=None, download=_fail):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf, "get_hf_file_metadata", meta)
    monkeypatch.setattr(hf, "hf_hub_download", download)


@pytest.mark.parametrize("error, words", [
    ("GatedRepoError", ["meta-llama/Llama-3.1-8B is gated on the Hub", "log in",
                        "or pass its config.json"]),
    ("RepositoryNotFoundError", ["no model repository meta-llama/Llama-3.1-8B on the Hub"]),
    ("RevisionNotFoundError", ["has no revision 'main'"]),
    ("RemoteEntryNotFoundError" if hasattr(hf_errors, "RemoteEntryNotFoundError")
     else "EntryNotFoundError", ["has no config.json on the Hub"]),
    ("HfHubHTTPError", ["cannot fetch", "401 Client Error"]),
])
def test_hub_errors_are_one_line(error, words, monkeypatch, capsys):
    def meta(url, *args, **kwargs):
        raise _hf_error(error)

    _online(monkeypatch, meta)
    code, out, err = _cli(capsys, "estimate", "meta-llama/Llama-3.1-8B@main"
                          if error == "RevisionNotFoundError" else "meta-llama/Llama-3.1-8B")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_no_network_falls_back_to_the_cache(offline_cache, monkeypatch):
    """No answer from the Hub: the cached config.json is read (no second try online)."""
    cache, _ = offline_cache
    seen = []

    def meta(url, *args, **kwargs):
        raise ConnectionError("[Errno 111] Connection refused")

    def download(repo_id, filename, **kw):
        seen.append(kw["local_files_only"])
        return real(repo_id, filename, **kw)

    real = hf.hf_hub_download
    _online(monkeypatch, meta, download)
    assert parameter_count(from_hub(REPO, cache_dir=cache)) == LLAMA3_8B_PARAMS
    assert seen == [True]
    with pytest.raises(InvalidValueError, match=r"the Hub cannot be reached \(ConnectionError"):
        from_hub("meta-llama/Llama-3.1-8B", cache_dir=cache)


def test_config_over_the_limit_is_refused_before_download(monkeypatch):
    class Meta:
        size = MAX_CONFIG_JSON_BYTES + 1

    _online(monkeypatch, lambda url, *a, **k: Meta())
    with pytest.raises(InvalidValueError, match=f"refused above {MAX_CONFIG_JSON_BYTES} bytes"):
        from_hub(REPO)


def test_online_download_goes_through_the_bounded_reader(tmp_path, monkeypatch):
    """What hf_hub_download returns is read as a local file: a bad file is named by the id."""
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": }')

    class Meta:
        size = 40

    calls = []

    def download(repo_id, filename, **kw):
        calls.append((repo_id, filename, kw["revision"], kw["local_files_only"]))
        return str(bad)

    _online(monkeypatch, lambda url, *a, **k: Meta(), download)
    with pytest.raises(InvalidValueError, match=rf"^{REPO}@v1 \(its config.json from the Hub\):"
                                                 ".*not valid JSON"):
        from_hub(f"{REPO}@v1")
    assert calls == [(REPO, "config.json", "v1", False)]


def test_without_huggingface_hub_a_hub_id_is_refused(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)     # import fails
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "estimate", "meta-llama/Llama-3.1-8B")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "pip install huggingface_hub" in err and "config.json path" in err


def test_time_takes_a_hub_id(offline_cache, capsys):
    """`memsym time org/name` counts the cached config.json's parameters (Kaplan's N)."""
    code, out, err = _cli(capsys, "time", REPO, "--tokens", "1T", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["params"] == LLAMA3_8B_PARAMS and data["params_kind"] == f"parameters of {REPO}"
