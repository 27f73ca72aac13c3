"""Nothing evaluates user strings (issue 9, part 3).

Three kinds of proof:

1. *Dynamic*: SymPy turns a string into an expression only through
   ``sympy.parsing.sympy_parser.parse_expr`` (which calls ``eval``).  The fixture ``trap`` replaces
   it by a function that raises a ``BaseException`` (so no ``except Exception`` in memsym can
   swallow it); hostile strings are then fed everywhere a user can put text -- model and GPU
   names, option values, symbol names, allowance names, config.json values and keys -- and every
   one must be refused as an unknown name or a bad value, with the trap never sprung and the
   marker file never created.
2. *A sweep of the public API*: every function in a memsym module's ``__all__`` is called with a
   hostile string in each parameter; none may reach the parser.
3. *Static*: ``memsym/`` is searched for ``eval(``, ``exec(``, ``sympify(``, ``parse_expr(`` and
   ``sp.S(``; each call site must be listed below with the reason its argument is never user text.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pathlib
import pkgutil
import re

import pytest

import memsym
from memsym import errors
from memsym.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]


class ParserReached(BaseException):
    """Raised when any string reaches SymPy's parser (it would have been eval'ed)."""


@pytest.fixture
def trap(monkeypatch):
    import sympy.parsing.sympy_parser as spp

    def parse_expr(text, *args, **kwargs):
        raise ParserReached(text)

    monkeypatch.setattr(spp, "parse_expr", parse_expr)
    yield


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "a hostile string was executed"


def hostile_strings(marker):
    return [
        f"__import__('os').system('touch {marker}')",
        f"__import__(\"os\").system(\"touch {marker}\")",
        f"exec(\"open('{marker}', 'w')\")",
        "lambda: 0",
        "().__class__.__bases__[0].__subclasses__()",
        "${HOME}",
        "$(touch " + str(marker) + ")",
        "N*d; import os",
        "x" * 100_000,
        "d" * 5000 + "+1",
    ]


def refused_as_name(fn, text):
    """fn(text) must raise memsym's own error, a one-line message that quotes at most 80 chars."""
    with pytest.raises(errors.MemsymError) as info:
        fn(text)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 1000
    return info.value


# ------------------------------------------------------------------------------------------------
# 1. names and values a user types, through the Python API
# ------------------------------------------------------------------------------------------------
def test_model_names(trap, marker):
    from memsym.model import resolve_model
    from memsym.training import Layout, Training, training_memory

    for text in hostile_strings(marker):
        exc = refused_as_name(memsym.preset, text)
        assert isinstance(exc, errors.UnknownNameError) and exc.kind == "model"
        refused_as_name(resolve_model, text)
        refused_as_name(lambda x: training_memory(x, Layout(), Training(seq_length=8)), text)


def test_gpu_and_cluster_names(trap, marker):
    from memsym.hardware import cluster, cluster_for, gpu

    for text in hostile_strings(marker):
        exc = refused_as_name(gpu, text)
        assert isinstance(exc, errors.UnknownNameError) and exc.kind == "GPU"
        refused_as_name(cluster, text)
        refused_as_name(cluster_for, text)


def test_scheme_precision_optimizer_convention_names(trap, marker):
    from memsym.terms.model_state import byte_widths, model_state

    for text in hostile_strings(marker):
        for fn in (lambda x: model_state(x), lambda x: model_state("zero3", convention=x),
                   lambda x: model_state("zero3", offload=x), lambda x: byte_widths(x),
                   lambda x: byte_widths("zero3", precision=x),
                   lambda x: byte_widths("zero3", optimizer=x)):
            exc = refused_as_name(fn, text)
            assert isinstance(exc, errors.UnknownNameError)


def test_symbol_names(trap, marker):
    from memsym.symbols import lookup
    from memsym.terms.model_state import byte_widths, model_state

    M = model_state("zero3").subs(byte_widths("zero3"))
    vals = {"N": 7 * 10**9, "d": 8, "t": 1, "p": 1}
    for text in hostile_strings(marker):
        assert isinstance(refused_as_name(lookup, text), errors.UnknownNameError)
        for fn in (lambda x: M.subs({x: 1}), lambda x: M.evaluate({**vals, x: 1}),
                   lambda x: M.breakdown({**vals, x: 1}), lambda x: M.sensitivity(x),
                   lambda x: M.elasticity(x), lambda x: M.collect(x),
                   lambda x: memsym.as_values({x: 1}),
                   lambda x: memsym.smallest(M, x, 80 * 10**9, vals),
                   lambda x: M[x], lambda x: M.without(x)):
            exc = refused_as_name(fn, text)
            assert isinstance(exc, errors.UnknownNameError), exc
        # the compiled evaluator: an unexpected argument, quoted and cut short
        exc = refused_as_name(lambda x: M.compile()(**{**vals, x: 1}), text)
        assert "unexpected" in str(exc)


def test_symbol_values_that_are_text(trap, marker):
    from memsym.terms.model_state import byte_widths, model_state

    M = model_state("zero3").subs(byte_widths("zero3"))
    for text in hostile_strings(marker):
        with pytest.raises(errors.InvalidValueError, match="must be a number"):
            M.evaluate(N=text, d=8, t=1, p=1)
        with pytest.raises(errors.InvalidValueError):
            memsym.exact(text)
        with pytest.raises(errors.InvalidValueError):
            memsym.smallest(M, "d", text, {"N": 7 * 10**9, "t": 1, "p": 1})


def test_term_expressions_that_are_text(trap, marker):
    # a Term's expression, and anything printed or compiled, must be SymPy: never text to parse
    from memsym.numeric import compile_expr
    from memsym.printing import latex

    for text in hostile_strings(marker):
        for fn in (lambda x: memsym.Term("evil", x, "d", memsym.Source("zero", "§5")),
                   latex, compile_expr, memsym.values.as_expr):
            with pytest.raises(errors.InvalidValueError, match="never parses text"):
                fn(text)


def test_allowance_names(trap, marker):
    from memsym.training import Layout, Training, allowance_values, training_memory

    for text in hostile_strings(marker):
        exc = refused_as_name(lambda x: allowance_values({x: 0}), text)
        assert isinstance(exc, errors.UnknownNameError) and exc.kind == "allowance"
        refused_as_name(lambda x: training_memory("llama2-7b", Layout(), Training(seq_length=8),
                                                  allowances={x: 0}), text)
        # and as a value
        with pytest.raises(errors.InvalidValueError):
            allowance_values({"workspace": text})


def test_training_settings_that_are_text(trap, marker):
    from memsym.training import Layout, Training, training_memory

    for text in hostile_strings(marker)[:6]:
        for training in (Training(seq_length=8, recompute=text), Training(seq_length=8, schedule=text),
                         Training(seq_length=8, sharding=text), Training(seq_length=8, precision=text),
                         Training(seq_length=8, optimizer=text),
                         Training(seq_length=8, convention=text),
                         Training(seq_length=8, capacity_factor=text),
                         Training(seq_length=text)):
            with pytest.raises(errors.MemsymError):
                training_memory("llama2-7b", Layout(), training)
        for layout in (Layout(t=text), Layout(p=text), Layout(d=text), Layout(v=text)):
            with pytest.raises(errors.MemsymError):
                training_memory("llama2-7b", layout, Training(seq_length=8))


# ------------------------------------------------------------------------------------------------
# config.json values and keys
# ------------------------------------------------------------------------------------------------
LLAMA_CFG = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 1000}


def test_config_field_values(trap, marker, tmp_path):
    from memsym.model import from_hf_config

    for text in hostile_strings(marker):
        for field in ("hidden_size", "num_hidden_layers", "vocab_size", "num_key_value_heads",
                      "head_dim", "tie_word_embeddings", "model_type"):
            path = tmp_path / "config.json"
            path.write_text(json.dumps({**LLAMA_CFG, field: text}), encoding="utf-8")
            with pytest.raises(errors.MemsymError):
                from_hf_config(str(path))
        # "architectures" is consulted only when model_type is absent: then it is an unknown name
        cfg = {k: v for k, v in LLAMA_CFG.items() if k != "model_type"}
        path.write_text(json.dumps({**cfg, "architectures": [text]}), encoding="utf-8")
        with pytest.raises(errors.MemsymError, match="model_type"):
            from_hf_config(str(path))


def test_config_keys_and_names_are_data(trap, marker, tmp_path):
    # hostile *keys* are ignored (never looked up as code); a hostile _name_or_path is only a label
    from memsym.model import from_hf_config

    cfg = dict(LLAMA_CFG)
    for text in hostile_strings(marker)[:8]:
        cfg[text] = text
    cfg["_name_or_path"] = hostile_strings(marker)[0]
    cfg["auto_map"] = {"AutoModel": hostile_strings(marker)[0]}
    cfg["torch_dtype"] = hostile_strings(marker)[1]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    arch = from_hf_config(str(path))
    assert arch.num_layers == 2 and arch.hidden_size == 64
    assert len(arch.name) <= 80


def test_config_path_that_is_hostile(trap, marker):
    from memsym.model import resolve_model

    for text in hostile_strings(marker):
        with pytest.raises(errors.MemsymError):
            resolve_model(text + ".json")


# ------------------------------------------------------------------------------------------------
# the command line
# ------------------------------------------------------------------------------------------------
def _cli(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (argv[:4], out, err)
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    return err


def test_cli_hostile_names_and_values(trap, marker, capsys, tmp_path):
    for text in hostile_strings(marker)[:8]:
        err = _cli(capsys, ["estimate", text, "--seq-length", "8"])
        assert "unknown model" in err or "config" in err
        for opt in ("--sharding", "--precision", "--optimizer", "--convention", "--offload"):
            assert "unknown" in _cli(capsys, ["estimate", "--params", "7B", opt, text])
        for opt in ("--tp", "--pp", "--dp", "--params", "--gpu-memory"):
            _cli(capsys, ["estimate", "--params", "7B", f"{opt}={text}"])
        for opt in ("--seq-length", "--world-size", "--fragmentation", "--workspace",
                    "--hidden-dropout", "--moe-expert-capacity-factor"):
            _cli(capsys, ["estimate", "llama2-7b", "--seq-length", "8", f"{opt}={text}"])
        assert "unknown GPU" in _cli(capsys, ["time", "7B", "--tokens", "1T", "--gpu", text])
        _cli(capsys, ["time", text, "--tokens", "1T"])
        _cli(capsys, ["time", "7B", f"--tokens={text}"])
        _cli(capsys, ["solve", text])


def test_cli_hostile_config(trap, marker, capsys, tmp_path):
    path = tmp_path / "config.json"
    for text in hostile_strings(marker)[:6]:
        path.write_text(json.dumps({**LLAMA_CFG, "hidden_size": text}), encoding="utf-8")
        assert "hidden_size" in _cli(capsys, ["estimate", str(path), "--seq-length", "8"])


# ------------------------------------------------------------------------------------------------
# 2. the public API, swept: a hostile string in every parameter never reaches the parser
# ------------------------------------------------------------------------------------------------
_SWEEP_SKIP = {"memsym.bench", "memsym.measure", "memsym.reference_layers",
               "memsym.plotting"}   # benchmarks, torch measurements, plots


def _public_functions():
    names = ["memsym"] + [m.name for m in pkgutil.walk_packages(memsym.__path__, prefix="memsym.")
                          if not m.name.startswith("memsym.cli") and "__" not in m.name]
    for mod_name in sorted(set(names) - _SWEEP_SKIP):
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:  # an optional dependency (numpy, matplotlib) is missing
            continue
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if callable(obj) and not (inspect.isclass(obj) and issubclass(obj, BaseException)):
                yield mod_name, name, obj


def test_public_api_sweep(trap, marker):
    texts = hostile_strings(marker)[:2]
    calls, reached = 0, set()
    for mod_name, name, fn in _public_functions():
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            continue
        params = [p for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)]
        for i, par in enumerate(params):
            for text in texts:
                attempts = []
                if par.kind is not par.POSITIONAL_ONLY:
                    attempts.append(((), {par.name: text}))
                if i == 0 and par.kind is not par.KEYWORD_ONLY:
                    attempts.append(((text,), {}))
                for args, kwargs in attempts:
                    calls += 1
                    try:
                        fn(*args, **kwargs)
                    except ParserReached:
                        reached.add(f"{mod_name}.{name}({par.name}=<text>)")
                    except (Exception, SystemExit):
                        pass  # refused (or needs other arguments): either way nothing was parsed
    assert not reached, "text reached SymPy's parser (eval): " + ", ".join(sorted(reached))
    assert calls > 600  # the sweep really covered the API
    assert {"memsym.terms.adapters", "memsym.terms.schedule", "memsym.training",
            "memsym.search"} <= {mod for mod, _, _ in _public_functions()}


def test_functions_with_required_arguments(trap, marker):
    # the sweep above cannot reach parameters behind a required argument: these are called here
    from memsym.terms import schedule

    for text in hostile_strings(marker)[:2]:
        for fn in (lambda x: schedule.stage_microbatches("first", "1f1b", pp=x),
                   lambda x: schedule.stage_microbatches("first", "1f1b", pp=4, vv=x),
                   lambda x: schedule.stage_microbatches("first", "1f1b", pp=4, mm=x),
                   lambda x: schedule.embedding_microbatches("1f1b", pp=x),
                   lambda x: schedule.logits_microbatches("gpipe", mm=x),
                   lambda x: memsym.bubble_fraction(False, x),
                   lambda x: memsym.global_batch(x),
                   lambda x: memsym.terms.collectives.collective_bytes("all-reduce", x),
                   lambda x: memsym.terms.collectives.collective_time("all-reduce", 1, 8, x)):
            with pytest.raises(errors.MemsymError):
                fn(text)


# ------------------------------------------------------------------------------------------------
# 3. static: every eval / exec / sympify / parse_expr call site in memsym/ is reviewed
# ------------------------------------------------------------------------------------------------
_CALL = re.compile(r"(?<![\w.])(eval|exec)\(|\bsympify\(|\bparse_expr\(|\bsp\.S\(|\bS\(\"|"
                   r"\bliteral_eval\(|(?<![\w.])__import__\(")

#: (file, the call line stripped) -> why its argument is never user text.
REVIEWED = {
    ("tools/muon_workspace_check.py", 'exec(compile(text, PATH, "exec"), mod.__dict__)'):
        "load_muon_utils: runs Emerging-Optimizers' muon_utils.py at the pinned COMMIT, read "
        "from the local git mirror (the oracle the check compares memsym with); a repository "
        "tool, never given user input",
    ("tools/data/megatron-lm-d98e8a64dd/megatron/training/arguments.py", "return eval(pattern)"):
        "Megatron-LM's _eval_pattern, vendored unmodified (blob-checked) as the input of "
        "tools/megatron_flags.py: a type= converter argparse calls only to parse a --*-freq "
        "value; the generator builds the parser and parses nothing",
    ("memsym/values.py", "expr = sp.sympify(value, strict=True)  # strict: no string parsing, no eval"):
        "as_expr: strings are refused just above, and strict=True never parses text",
    ("memsym/model/counts.py", "value = sp.sympify(expr).xreplace(vals)"):
        "as_int: expr is parameter_expression()'s SymPy expression, built by memsym",
    ("memsym/analysis.py", "if not sp.sympify(tp).is_Integer:"):
        "smallest_gpus: tp is the product of values that as_values() validated as numbers",
    ("memsym/cli/options.py", "value = sp.sympify(value)"):
        "number_out: value is a computed SymPy number (a total's byte count)",
    ("memsym/cli/search.py", "val = sp.sympify(val)"):
        "bytes_json: val is a computed byte count from the search's exact re-evaluation",
    ("memsym/cli/training_options.py", "value = sp.sympify(value)"):
        "_num: value is a computed SymPy number (training_memory's bytes)",
    ("memsym/compile_cache.py",
     'exec(compile(source, str(path), "exec"), ns)   # memsym\'s own generated code, verified'):
        "compile_cache.load: lambdify source memsym wrote, from a file named by its SHA-256 "
        "key in a directory and file only this user owns and can write, executed only once "
        "its seal (memsym version, SHA-256 of key, version and source) verifies "
        "(tests/test_compile_cache.py)",
    ("memsym/numeric.py", 'exec(compile(source, where, "exec"), ns)'):
        "numeric._run: the source numeric._generate printed with SymPy's code printer from "
        "SymPy expressions, argument names checked as identifiers that are no keyword or "
        "module; what lambdify itself execs (tests/test_numeric.py compares the two)",
}


def _call_sites():
    # the package and the repository tooling beside it (tools/ reads the checked-in catalogue)
    for path in sorted([*(ROOT / "memsym").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0] if not line.lstrip().startswith("...") else line
            if _CALL.search(code):
                yield rel, lineno, line.strip()


def test_every_parser_call_site_is_reviewed():
    unreviewed = [f"{rel}:{lineno}: {text}" for rel, lineno, text in _call_sites()
                  if (rel, text) not in REVIEWED]
    assert not unreviewed, ("unreviewed eval/exec/sympify/parse_expr call sites (use "
                            "memsym.values.as_expr for library arguments, or review and list "
                            "the site in REVIEWED with the reason):\n" + "\n".join(unreviewed))


def test_static_pattern_finds_what_it_should():
    # the search itself is tested: it sees the calls it must see and ignores methods/comments
    for text in ("eval(x)", "exec(code)", "sp.sympify(s)", "sympify(s)", "parse_expr(s)",
                 "sp.S(s)", "ast.literal_eval(s)", "__import__('os')"):
        assert _CALL.search(text), text
    for text in ("total.evaluate(values)", "fn.compile()", "self._evaluate(x)", "as_expr(x)"):
        assert not _CALL.search(text), text


def test_no_shell_or_pickle_in_memsym():
    # nothing in the library runs a shell or unpickles data it was given; the one marshal
    # reader is the compile cache's, of what memsym itself wrote into its private directory
    # (0700, owned by the user, the entries exec'd there already) and only after the file's
    # SHA-256 seal over this memsym, this Python and every byte matches (_unsealed, for
    # load_companion and load_data): a file of another origin or a changed byte is not read
    bad = re.compile(r"\bos\.system\(|\bshell=True|\bpickle\.loads?\(|\byaml\.load\(|"
                     r"\bmarshal\.loads?\(")
    hits = [(rel, line.strip()) for rel, n, line in
            ((p.relative_to(ROOT).as_posix(), i, line)
             for p in (ROOT / "memsym").rglob("*.py")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if bad.search(line.split("#", 1)[0]))]
    assert all(hit == ("memsym/compile_cache.py", "return marshal.loads(body)")
               for hit in hits), hits
    source = (ROOT / "memsym" / "compile_cache.py").read_text(encoding="utf-8")
    assert len(hits) == 1
    body = source.split("def _unsealed(", 1)[1].split("\ndef ", 1)[0]
    assert body.index("first != seal(body)") < body.index("marshal.loads(body)")   # seal first


# --- every file a reader opens is a bounded regular file ------------------------------------
_FILE_OPTIONS = (["--launch-script"], ["--args-file"], ["llama2-7b", "--deepspeed-config"],
                 ["llama2-7b", "--torchtitan-config"])


@pytest.mark.parametrize("opts", _FILE_OPTIONS, ids=lambda o: o[-1])
def test_reader_refuses_a_fifo_without_blocking(opts, tmp_path, capsys):
    # a FIFO has size 0 and open() would wait for a writer forever: refused before opening
    import os

    from memsym.cli import main

    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert main(["estimate", *opts, str(fifo)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "not a regular file" in err and err.count("\n") == 1


@pytest.mark.parametrize("opts", _FILE_OPTIONS, ids=lambda o: o[-1])
def test_reader_refuses_a_file_above_the_limit(opts, tmp_path, capsys):
    # 1 MiB is the documented limit (readers._values.MAX_BYTES_INPUT); the launch script was
    # once read with fh.read(1 << 20 + 1), i.e. 2 MiB, and silently truncated beyond that
    from memsym.cli import main
    from memsym.readers._values import MAX_BYTES_INPUT

    big = tmp_path / "big"
    big.write_text("#" * (MAX_BYTES_INPUT + 1))
    assert main(["estimate", *opts, str(big)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"larger than {MAX_BYTES_INPUT} bytes" in err
