"""The typed job record (issue 28, deliverable 5): Training's sub-records, the flat keywords kept
for users, memsym's own code reading the sub-records, and one estimate resolving its model and
computing its micro-batch count once."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import pathlib
import sys
import typing

import pytest

import memsym
from memsym.errors import InvalidValueError
from memsym.job_record import (FIELD_PARTS, PARTS, Adapters, Batch, CommOverlap, Layout, Memory,
                               ModelStates, PipelineSchedule, Training)
from tools.rename_job_fields import flat_reads, rewrite

PACKAGE = pathlib.Path(memsym.__file__).resolve().parent


# ---------------------------------------------------------------------------------------------
# the record
# ---------------------------------------------------------------------------------------------
def test_flat_keywords_build_the_same_record_as_the_sub_records():
    flat = Training(seq_length=8192, global_batch_size=64, schedule="gpipe", precision="fp8",
                    recompute="full", lora_rank=8, finetune="lora", tp_comm_overlap=True,
                    framework="torchtitan")
    parts = Training(batch=Batch(seq_length=8192, global_batch_size=64),
                     pipeline=PipelineSchedule(schedule="gpipe"),
                     states=ModelStates(precision="fp8"), memory=Memory(recompute="full"),
                     adapters=Adapters(finetune="lora", lora_rank=8),
                     comm=CommOverlap(tp_comm_overlap=True), framework="torchtitan")
    assert flat == parts and hash(flat) == hash(parts)
    assert flat.memory.recompute == flat.recompute == "full"     # the users' flat reading


def test_every_flat_field_has_one_owner_and_the_defaults_are_unchanged():
    owned = [f.name for cls in PARTS.values() for f in dataclasses.fields(cls)]
    assert sorted(owned + ["framework"]) == sorted(FIELD_PARTS)
    assert len(set(owned)) == len(owned)
    # the published defaults (memsym.job_record.DEFAULTS, docs/options.md)
    from memsym.job_record import DEFAULTS as defaults
    assert (defaults["seq_length"], defaults["precision"], defaults["sharding"],
            defaults["recompute"], defaults["framework"]) == (
        4096, "bf16", "distributed-optimizer", "none", "megatron")


def test_replace_takes_flat_names_and_sub_records():
    t = Training(seq_length=2048)
    assert t.replace(recompute="full").memory.recompute == "full"
    assert t.replace(recompute="full").batch.seq_length == 2048
    assert t.replace(batch=Batch(seq_length=1024)).batch.seq_length == 1024
    assert dataclasses.replace(t, recompute="selective").memory.recompute == "selective"
    with pytest.raises(TypeError):
        t.replace(no_such_field=1)
    with pytest.raises(TypeError):
        Training(no_such_field=1)


def test_a_dict_for_a_sub_record_is_refused_in_one_line():
    with pytest.raises(InvalidValueError, match="training memory must be"):
        Training(memory={"recompute": "full"})


def test_no_field_is_typed_object():
    for cls in (Layout, *PARTS.values(), Training):
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
        assert object not in hints.values(), cls.__name__


# ---------------------------------------------------------------------------------------------
# memsym's own code reads the sub-records
# ---------------------------------------------------------------------------------------------
def test_no_package_module_reads_a_flat_alias():
    # the same recognition tools/rename_job_fields.py rewrites with: a receiver named as memsym
    # names a Training (training, trn, tr, ...) or any <expr>.training
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in flat_reads(path.read_text()):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text.strip()}")
    assert not found, "read through the sub-record (python3 -m tools.rename_job_fields " \
                      "memsym/):\n" + "\n".join(found)


def test_the_rename_script_rewrites_each_kind_of_access_once():
    src = ("import dataclasses\n"
           "def f(training, j):\n"
           "    a = training.seq_length + j.training.micro_batch_size\n"
           "    b = getattr(training, 'recompute', 'none'), getattr(training, name)\n"
           "    c = dataclasses.replace(training, recompute='full')\n"
           "    return training.framework, '.seq_length'\n")
    new, changes, left = rewrite(src)
    assert "training.batch.seq_length + j.training.batch.micro_batch_size" in new
    assert "b = training.memory.recompute, training.value(name)" in new
    assert "c = training.replace(recompute='full')" in new
    assert "training.framework, '.seq_length'" in new      # Training's own field; a string
    assert len(changes) == 5 and not left
    assert rewrite(new)[1] == []                            # idempotent


def _flat_reads_at_run_time(monkeypatch, argv):
    """The memsym modules that read a flat name of a Training while ``memsym argv`` runs."""
    from memsym.cli import main

    seen = set()
    flat = Training.__getattr__

    def spy(self, name):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("memsym.") and name in FIELD_PARTS:
            seen.add(f"{caller}.{name}")
        return flat(self, name)

    monkeypatch.setattr(Training, "__getattr__", spy)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    return seen


@pytest.mark.parametrize("argv", [
    ["estimate", "llama3-70b", "--tp", "8", "--pp", "4", "--world-size", "64",
     "--global-batch-size", "64", "--gpu", "h100", "--json"],
    ["estimate", "mixtral-8x7b", "--tp", "2", "--sequence-parallel", "--ep", "4", "--pp", "2",
     "--world-size", "32", "--recompute", "selective", "--json"],
])
def test_no_flat_read_at_run_time(monkeypatch, argv):
    # the AST scan above sees only names it recognises; this one sees every read an estimate
    # makes (getattr with a computed name included)
    assert _flat_reads_at_run_time(monkeypatch, argv) == set()


# ---------------------------------------------------------------------------------------------
# built once, resolved once
# ---------------------------------------------------------------------------------------------
def _count_one_estimate(monkeypatch, argv) -> tuple:
    """(resolutions, microbatches calls) of one ``memsym estimate``: a resolution is the making
    of a :class:`memsym.model.architecture.Resolved` (``resolve`` of an already resolved model
    returns it unchanged and makes nothing)."""
    from memsym.cli import main
    from memsym.job_record import microbatches
    from memsym.model.architecture import Resolved

    made, counted = [], []
    post = Resolved.__post_init__
    monkeypatch.setattr(Resolved, "__post_init__", lambda self: (made.append(1), post(self))[1])

    def counting(*a, **k):
        counted.append(1)
        return microbatches(*a, **k)

    for name, mod in list(sys.modules.items()):
        if name.startswith("memsym") and getattr(mod, "microbatches", None) is microbatches:
            monkeypatch.setattr(mod, "microbatches", counting)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0
    return len(made), len(counted)


def test_one_estimate_resolves_the_model_once_and_computes_m_once(monkeypatch):
    # the count at 931b382: resolve called 92 times, microbatches 4 times
    import memsym.cli.job_report  # noqa: F401  (bound before counting)
    import memsym.timing.report  # noqa: F401
    argv = ["estimate", "llama3-70b", "--tp", "8", "--pp", "4", "--world-size", "64",
            "--global-batch-size", "64", "--gpu", "h100", "--json"]
    assert _count_one_estimate(monkeypatch, argv) == (1, 1)


def test_a_learned_position_model_is_resolved_once_more_as_its_rope_variant(monkeypatch):
    # memsym.model.stages._layer_parameters counts one layer on the model's rope variant (no
    # position table needed), a different architecture, cached per model: made by
    # dataclasses.replace, which Resolved.__post_init__ checks by resolving a plain copy (two
    # more Resolved made, neither of them the job's model)
    from memsym.model.stages import _layer_parameters  # noqa: PLC2701 (a test may look inside)

    _layer_parameters.cache_clear()
    argv = ["estimate", "gpt3-175b", "--tp", "8", "--pp", "8", "--world-size", "128",
            "--global-batch-size", "256", "--json"]
    assert _count_one_estimate(monkeypatch, argv) == (3, 1)


def test_a_list_option_is_held_as_a_tuple():
    # argparse gives nargs options as lists (--cuda-graph-modules moe_router moe_preprocess);
    # the records are cache keys (memsym.training.layer_model), so they must hash, and a job
    # said either way is the same job
    listed = Training(cuda_graph_impl="transformer_engine",
                      cuda_graph_modules=["moe_router", "moe_preprocess"])
    tupled = Training(cuda_graph_impl="transformer_engine",
                      cuda_graph_modules=("moe_router", "moe_preprocess"))
    assert listed.memory.cuda_graph_modules == ("moe_router", "moe_preprocess")
    assert listed == tupled and hash(listed) == hash(tupled)
    # and a sub-record built with a list, given whole
    from memsym.job_record import Memory
    given = Training(memory=Memory(cuda_graph_impl="transformer_engine",
                                   cuda_graph_modules=["moe_router", "moe_preprocess"]))
    assert given == tupled and hash(given) == hash(tupled)
