"""The installed package: a wheel built from this checkout works outside it (issue 12, items 5, 7).

The wheel is built from a copy of the checkout's package sources (``memsym/``,
``pyproject.toml``, ``README.md``) so that no ``build/`` folder is left in, or reused from, the
checkout; it is installed into a fresh virtual environment (``--system-site-packages`` for
sympy and numpy, ``--no-deps --no-index``: no network) and every command runs from a folder
outside the checkout, with ``PYTHONPATH`` removed, so nothing can come from the source tree.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from types import SimpleNamespace

import pytest

from memsym.cli import main as checkout_main

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 120  # [s] per step; the whole module takes about 15 s


def _run(cmd, cwd, env, timeout=TIMEOUT):
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hung build or command
        pytest.fail(f"timed out after {timeout} s: {' '.join(map(str, cmd))}")


def _pip_can_target(version: str) -> bool:
    """pip >= 22.3 installs into another interpreter with ``--python``."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) >= (22, 3)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A wheel of the checkout installed in a new venv; returns how to run it."""
    missing = [m for m in ("pip", "setuptools") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"cannot build a wheel here: {', '.join(missing)} not installed")
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH")}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", MPLBACKEND="Agg")

    src = tmp / "src"
    shutil.copytree(os.path.join(ROOT, "memsym"), src / "memsym",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    dist = tmp / "dist"
    proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--no-index", "-q", "-w", str(dist), str(src)], tmp, env)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = sorted(dist.glob("memsym-*.whl"))
    assert len(wheels) == 1, wheels

    prefix = tmp / "venv"
    can_target = _pip_can_target(importlib.metadata.version("pip"))
    try:
        venv.EnvBuilder(system_site_packages=True, with_pip=not can_target).create(prefix)
    except Exception as err:  # pragma: no cover - no venv/ensurepip on this Python
        pytest.skip(f"cannot create a virtual environment here: {err}")
    bindir = prefix / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / ("python.exe" if os.name == "nt" else "python")
    pip = ([sys.executable, "-m", "pip", "--python", str(python)] if can_target
           else [str(python), "-m", "pip"])
    # -I: the editable checkout memsym visible through --system-site-packages must not count
    # as "already installed"
    proc = _run(pip + ["install", "-q", "--no-deps", "--no-index", "-I", str(wheels[0])], tmp, env)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"

    outside = tmp / "elsewhere"
    outside.mkdir()
    return SimpleNamespace(wheel=wheels[0], prefix=prefix, python=str(python),
                           script=str(bindir / "memsym"), cwd=outside, env=env)


def _py(inst, code):
    return _run([inst.python, "-c", code], inst.cwd, inst.env)


def _memsym(inst, *args):
    return _run([inst.python, "-m", "memsym", *args], inst.cwd, inst.env)


def _checkout(capsys, *args) -> str:
    """The same command answered in this process by the checkout's memsym."""
    capsys.readouterr()
    assert checkout_main(list(args)) == 0
    return capsys.readouterr().out


def test_wheel_holds_the_package_and_no_repository_tooling(installed):
    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"memsym"}, tops
    assert "memsym/cli/__init__.py" in names and "memsym/terms/estimators.py" in names
    assert not any(n.startswith(("tools/", "tests/", "formulas/", "docs/")) for n in names)


def test_imported_from_site_packages_outside_the_checkout(installed):
    proc = _py(installed, "import memsym, sys; assert 'site-packages' in memsym.__file__; "
                          "assert memsym.__file__.startswith(sys.prefix), memsym.__file__; "
                          "print(memsym.__file__)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(installed.prefix))
    assert not proc.stdout.strip().startswith(ROOT)


def test_every_module_imports_from_the_wheel(installed):
    """No module of the installed package needs the checkout (formulas/, docs/) to import."""
    code = (
        "import importlib, pkgutil, memsym\n"
        "bad = []\n"
        "for m in pkgutil.walk_packages(memsym.__path__, prefix='memsym.'):\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "    except ModuleNotFoundError as err:\n"
        "        if (err.name or '').split('.')[0] == 'memsym': bad.append(f'{m.name}: {err}')\n"
        "    except Exception as err:\n"
        "        bad.append(f'{m.name}: {type(err).__name__}: {err}')\n"
        "assert not bad, bad\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('tools') is None, 'repository tooling was installed'\n")
    proc = _py(installed, code)
    assert proc.returncode == 0, proc.stderr


def test_estimate_gpt3_175b(installed, capsys):
    args = ("estimate", "--params", "175B", "--dp", "8", "--tp", "8", "--pp", "8",
            "--gpu-memory", "80GB")
    proc = _memsym(installed, *args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    total = next(line for line in proc.stdout.splitlines() if line.startswith("total"))
    per_gpu = int(total.split()[1].replace(",", ""))
    # plausible: at least the bf16 weights of this GPU's shard, 2 bytes x 175e9 / (t p), and
    # less than the 80 GB it is said to fit
    assert 2 * 175 * 10**9 // 64 < per_gpu < 80 * 10**9
    assert "fits" in proc.stdout
    assert proc.stdout == _checkout(capsys, *args)  # the wheel answers as the checkout does


def test_estimate_llama3_70b_json(installed, capsys):
    args = ("estimate", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "4",
            "--seq-length", "8192", "--json")
    proc = _memsym(installed, *args)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["model"] == "llama3-70b"
    assert {k: out["layout"][k] for k in ("dp", "tp", "pp", "world_size")} == \
        {"dp": 4, "tp": 8, "pp": 4, "world_size": 128}
    assert out["training"]["seq_length"] == 8192
    # Llama 3 70B: "70B" parameters (Llama Team 2024, Table 3)
    assert 70 * 10**9 <= out["params"] < 71 * 10**9
    shard = 2 * out["params"] / (8 * 4)  # bf16 weights of one (t, p) shard [bytes]
    assert 0.9 * shard < out["bytes"]["weights"] < 1.2 * shard
    assert out["bytes"]["total"] > out["bytes"]["weights"] > 0
    assert out == json.loads(_checkout(capsys, *args))


def test_console_script_help(installed):
    proc = _run([installed.script, "--help"], installed.cwd, installed.env)
    assert proc.returncode == 0, proc.stderr
    for command in ("estimate", "solve", "search", "min-gpus", "time", "latex", "bench"):
        assert command in proc.stdout


def test_bench_suite_refuses_without_a_checkout(installed):
    """``memsym bench --suite`` times the test suite: from a wheel it says so in one line."""
    proc = _py(installed, "from memsym import bench, errors\n"
                          "try:\n    bench.bench_p5()\n"
                          "except errors.InvalidValueError as err:\n    print(err)\n")
    assert proc.returncode == 0, proc.stderr
    assert "source checkout" in proc.stdout and proc.stdout.count("\n") == 1
