"""Every source a user reads is public (issue 33): a paper (arXiv id or DOI), a framework file
at a pinned commit or a vendor document (a URL), or memsym's own derivation, never the
project's internal design notes (the seeds under shared/seeds/).

The Terms of representative jobs (dense, MoE, LoRA, QLoRA, torchtitan, DeepSpeed, offload, the
textbook conventions), the step-time breakdown and every formula of formulas/ name a key whose
references.toml entry is public; the estimate text report's References and the LaTeX
document's bibliography list no seed.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from memsym.bibliography import references
from memsym.cli import main
from memsym.job import job
from memsym.terms.adapters import lora, qlora
from memsym.terms.model_state import model_state
from memsym.timing.step import SOURCES
from memsym.training import job_memory

from catalogue import FORMULAS

#: The internal design notes: what a user reads never cites them.
SEEDS = {"seed000", "seed001", "seed002", "seed004"}

#: memsym's own derivation: cited with a locator into memsym's code or docs, the derivation
#: itself being public with memsym.
DERIVATION = "memsym-derivation"

#: (file, key) of Sources still citing a seed: none (the last two, the cost in GPU-hours and the
#: tensor-parallel bytes per step, now cite DeepSeek-V3's Table 1 and Narayanan §3.2).
ALLOWED = set()

#: A public locator of an entry: a URL, an arXiv id or a DOI.
_PUBLIC = re.compile(r"https://\S+|arXiv:\d{4}\.\d{4,5}|doi:10\.\d+/\S+")


def _public(key: str) -> bool:
    """Whether ``key``'s entry says where the public can read it."""
    if key == DERIVATION:
        return True
    entry = references().get(key)
    if entry is None or key in SEEDS:
        return False
    return bool(_PUBLIC.search(" ".join(str(entry.get(f, "")) for f in ("where", "url", "doi"))))


def test_the_check_can_fail():
    # the seeds and an entry without a URL are refused; a paper and a pinned file pass
    assert not any(_public(k) for k in SEEDS)
    assert not _public("no-such-key")
    assert _public("zero") and _public("megatron-core") and _public("mbridge-memory-tuning")


_JOBS = {
    "dense-megatron": dict(model="llama3-70b", tp=8, pp=4, dp=4, seq_length=8192),
    "dense-ddp": dict(model="llama3-8b", dp=8, seq_length=4096, sharding="ddp"),
    "moe": dict(model="mixtral-8x7b", tp=2, ep=4, dp=4, seq_length=4096, sequence_parallel=True),
    "torchtitan": dict(model="llama3-8b", framework="torchtitan", dp=8, seq_length=4096),
    "deepspeed": dict(model="llama3-8b", framework="deepspeed", dp=8, seq_length=4096,
                      sharding="zero3"),
    "lora": dict(model="llama3-8b", dp=8, seq_length=4096, finetune="lora", lora_rank=16),
    "qlora": dict(model="llama3-8b", dp=1, seq_length=4096, finetune="qlora", lora_rank=16),
    "offload": dict(model="llama3-8b", framework="deepspeed", dp=8, seq_length=4096,
                    sharding="zero3", offload="optimizer"),
}


@pytest.mark.parametrize("name", sorted(_JOBS))
def test_every_term_of_a_job_cites_a_public_source(name):
    opts = dict(_JOBS[name])
    est = job_memory(job(opts.pop("model"), **opts))
    bad = {(t.key, t.source.key) for t in est.total if not _public(t.source.key)}
    assert not bad, bad


@pytest.mark.parametrize("convention", ["framework", "seed000", "zero-paper", "megatron-lm"])
@pytest.mark.parametrize("scheme", ["ddp", "distributed-optimizer", "zero2", "zero3"])
def test_model_state_conventions_cite_public_sources(scheme, convention):
    if convention == "megatron-lm" and scheme in ("zero2", "zero3"):
        pytest.skip("Megatron-LM's estimator has no ZeRO-2/3 accounting (refused)")
    bad = {(t.key, t.source.key) for t in model_state(scheme, convention=convention)
           if not _public(t.source.key)}
    assert not bad, bad


@pytest.mark.parametrize("total", [lora(), lora("int8"), lora("int4"), qlora(),
                                   qlora(double_quant=False)],
                         ids=["lora-bf16", "lora-int8", "lora-int4", "qlora-nf4-dq", "qlora-nf4"])
def test_adapter_terms_cite_public_sources(total):
    bad = {(t.key, t.source.key) for t in total if not _public(t.source.key)}
    assert not bad, bad


def test_step_time_parts_cite_public_sources():
    assert {part: src.key for part, src in SOURCES.items() if not _public(src.key)} == {}


def _catalogue():
    for path in sorted(FORMULAS.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for table, rows in data.items():
            for row in rows if isinstance(rows, list) else ():
                if isinstance(row, dict) and "source" in row:
                    yield path.name, table, row.get("id", "?"), row["source"]


def test_every_catalogue_entry_cites_a_public_source():
    # formulas, published tables, measured memory and time: every row with a source
    rows = list(_catalogue())
    assert len(rows) > 100          # the glob and the tables were read
    assert [r for r in rows if not _public(r[3])] == []


def test_seed_citations_left_only_in_the_allowed_modules():
    # a Source(...) naming a seed anywhere in memsym/ outside ALLOWED fails
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent
    found = set()
    for path in sorted((root / "memsym").rglob("*.py")):
        for key in re.findall(r"Source\(\s*\"(seed\d{3})\"", path.read_text(encoding="utf-8")):
            found.add((path.relative_to(root).as_posix(), key))
    assert found <= ALLOWED, found - ALLOWED


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0
    return out


def test_estimate_report_references_no_seed(capsys):
    # a job's text report numbers its sources under "references:"
    out = _run(capsys, "estimate", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "4")
    refs = out[out.rindex("\nreferences:"):]
    assert "megatron-core," in refs          # the section was found
    assert not [k for k in SEEDS if k in refs], refs


def test_model_state_report_cites_no_seed(capsys):
    # the model-state report (--params) prints each term's source in its table; the
    # convention is still *named* seed000, but no row cites the seed
    out = _run(capsys, "estimate", "--params", "7B", "--sharding", "distributed-optimizer",
               "--dp", "8", "--convention", "seed000")
    rows = [line for line in out.splitlines() if line.startswith(("weights", "gradients",
                                                                   "optimizer"))]
    assert len(rows) == 3 and all("nemo-distributed-optimizer, " in r for r in rows), rows
    assert not [r for r in rows for k in SEEDS if k in r]


@pytest.mark.parametrize("argv, cited", [
    (("--params", "7B", "--sharding", "distributed-optimizer", "--dp", "8", "--convention",
      "seed000"), "NeMo distributed optimizer"),
    (("llama3-8b", "--dp", "8"), "Reducing Activation Recomputation"),
], ids=["model-state", "job"])
def test_latex_document_bibliography_has_no_seed(capsys, argv, cited):
    out = _run(capsys, "latex", *argv, "--document")
    refs = out[out.index("\\section*{References}"):]
    assert cited in refs   # the bibliography was found
    assert not [k for k in SEEDS if k in refs] and "shared/seeds" not in refs


def test_time_command_cites_no_seed(capsys):
    # memsym time's one-line source (Narayanan's Eq. 4; the cost is price x GPU-hours)
    import json

    out = json.loads(_run(capsys, "time", "7B", "--tokens", "1T", "--price-per-gpu-hour", "2",
                          "--json"))
    assert out["source"].startswith("narayanan, ")
    assert not [k for k in SEEDS if k in out["source"]]
