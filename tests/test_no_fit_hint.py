"""A sizing question with no answer (issue 30): the one-line "nothing fits" message, then one
hint line naming what the search left out: the tight layouts the fragmentation margin excludes
(``--fragmentation 0`` admits them) and the memory-saving choices outside the space
(``--recompute full``, larger ``--tp``/``--pp``, ``--offload optimizer``); exit status 1.
Issue 32: both that hint and the estimate's empty advice name only the sizes a search of the
job's framework changes (DeepSpeed: AutoTP's ``--tp`` and Ulysses' ``--cp`` where named, never a
pipeline)."""

from memsym.cli import main
from in_process import run as run_

SMALL = ("llama2-7b", "--gpu", "h100-80gb", "--gpu-memory", "8GB", "--seq-length", "2048")


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def test_min_gpus_names_the_tight_layouts_and_the_knobs(capsys):
    code, out, err = _run(capsys, "min-gpus", *SMALL, "--tp", "1", "--pp", "1",
                          "--recompute", "none", "--max-gpus", "8")
    assert code == 1 and out == ""
    assert len(err) == 2 and err[0].startswith("memsym: nothing fits within 8 x h100-80gb")
    hint = err[1]
    assert hint.startswith("memsym: hint: layouts are judged with the fragmentation margin")
    assert "--fragmentation 0 admits it" in hint
    assert hint.endswith("more could fit with --recompute full, larger --tp/--pp, "
                         "--offload optimizer")


def test_search_leaves_out_what_it_already_searched(capsys):
    # the default space searches full recompute and every TP/PP: only the offload is left
    code, out, err = _run(capsys, "search", *SMALL, "--gpus", "1")
    assert code == 1 and out == ""
    assert len(err) == 2 and "no layout of 1 x h100-80gb fits" in err[0]
    # 7B on 8 GB: no layout comes within the GPU even without the margin (none is tight)
    assert err[1] == "memsym: hint: more could fit with --offload optimizer"


def test_nothing_left_to_say_no_hint(capsys):
    # no margin, full recompute, every TP/PP and the optimizer offload searched: one line
    code, out, err = _run(capsys, "min-gpus", *SMALL, "--fragmentation", "0", "--offload",
                          "none", "optimizer", "--max-gpus", "1")
    assert code == 1 and out == ""
    assert len(err) == 1 and err[0].startswith("memsym: nothing fits within 1 x h100-80gb")


def test_min_gpus_names_a_megatron_fsdp_row_by_its_strategy(capsys):
    """A Megatron answer whose scheme is Megatron-FSDP's says which strategy it launches
    (fsdp: Megatron-LM's --data-parallel-sharding-strategy optim_grads_params, the one that
    shards weights, gradients and optimizer states, megatron/core/distributed/fsdp at
    d98e8a64dd); a DeepSpeed answer, whose zero3 is DeepSpeed's own, names none."""
    import json

    for framework, want in (("megatron", {"fsdp": "optim_grads_params", "zero2": "optim_grads"}),
                            ("deepspeed", {})):
        code = main(["min-gpus", "llama3-70b", "--gpu", "h100-80gb", "--framework", framework,
                     "--json"])
        layout = json.loads(capsys.readouterr().out)["layout"]
        assert code == 0
        assert layout.get("megatron_fsdp") == want.get(layout["sharding"]), layout


def test_min_gpus_says_the_megatron_fsdp_strategy_as_search_does(capsys):
    """The text names a Megatron-FSDP row in Megatron-LM's words: the fsdp scheme is
    ``--data-parallel-sharding-strategy optim_grads_params`` (megatron/training/arguments.py:
    3190-3191 at d98e8a64dd, the strategy sharding weights, gradients and optimizer states);
    the JSON layout is the one ``memsym search --json`` gives the same row (the same keys, with
    the overlaps it launches and ``megatron_fsdp``)."""
    import json

    argv = ["llama3-70b", "--gpu", "h100-80gb", "--framework", "megatron", "--tp", "1",
            "--pp", "1", "--cp", "1", "--sharding", "fsdp", "--recompute", "full"]
    assert main(["min-gpus", *argv]) == 0
    text = capsys.readouterr().out.splitlines()
    layout_line = next(line for line in text if line.startswith("layout: "))
    assert "sharding fsdp (Megatron-FSDP optim_grads_params)" in layout_line
    assert "megatron_fsdp" not in layout_line
    assert main(["min-gpus", *argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lay = out["layout"]
    assert lay["sharding"] == "fsdp" and lay["megatron_fsdp"] == "optim_grads_params"
    assert main(["search", *argv, "--gpus", str(out["gpus"]), "--global-batch-size",
                 str(out["gpus"]), "--json"]) == 0
    searched = json.loads(capsys.readouterr().out)
    row = searched[0]["layout"]     # a list of rows, best first
    assert set(row) == set(lay) and row["megatron_fsdp"] == lay["megatron_fsdp"]


# ---------------------------------------------------------------------------------------------
# issue 32: the empty advice and the no-fit hint name what a search of the job's framework
# changes (FRAMEWORK[...].searched_sizes; DeepSpeed: AutoTP and Ulysses where named, no pipeline)
# ---------------------------------------------------------------------------------------------


def test_the_empty_advice_names_no_pipeline_or_context_for_deepspeed(capsys):
    # FRAMEWORK["deepspeed"].searched_sizes holds pp and cp (and tp) where the job sets none:
    # the advice tried d, recomputation, sharding and the offload; b = 1 has no smaller one
    code, out, err = run_(capsys, "estimate", *SMALL, "--framework", "deepspeed",
                         "--world-size", 1)
    assert code == 1, err          # an honest "does NOT fit"
    line = next(x for x in out.splitlines() if x.startswith("advice:"))
    assert line == ("advice: no single change of d, recomputation, sharding or offload makes "
                    "it fit")
    # the same job under Megatron-LM: every size is a lever
    code, out, err = run_(capsys, "estimate", *SMALL, "--world-size", 1, "--gpu-memory", "1GB")
    line = next(x for x in out.splitlines() if x.startswith("advice:"))
    assert code == 1 and line.startswith("advice: no single change of d, t, p, c, ")


def test_a_ulysses_job_keeps_its_c_as_a_lever(capsys):
    # a job that sets c > 1 (Ulysses) has it to change, as AutoTP's t
    code, out, err = run_(capsys, "estimate", "llama3-8b", "--gpu", "h100-80gb", "--gpu-memory",
                         "1GB", "--seq-length", 8192, "--framework", "deepspeed", "--cp", 2,
                         "--world-size", 2)
    assert code == 1, err
    line = next(x for x in out.splitlines() if x.startswith("advice:"))
    assert line == ("advice: no single change of d, c, recomputation, sharding or offload "
                    "makes it fit")


def test_the_search_hint_names_no_pipeline_for_deepspeed(capsys):
    code, out, err = run_(capsys, "search", *SMALL, "--gpus", 1, "--framework", "deepspeed")
    lines = err.strip().splitlines()
    assert code == 1 and out == "" and len(lines) == 2
    assert lines[1] == "memsym: hint: more could fit with larger --tp/--cp, --offload optimizer"
    assert "--pp" not in err
    # --emit deepspeed holds the sizes its file spells only when named: no size to enlarge
    code, out, err = run_(capsys, "search", *SMALL, "--gpus", 1, "--framework", "deepspeed",
                         "--emit", "deepspeed")
    assert code == 1 and err.strip().splitlines()[1] == (
        "memsym: hint: more could fit with --offload optimizer")
