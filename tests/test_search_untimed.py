"""``memsym search`` on a model whose step time the timing layer refuses (Zamba2's shared
transformer block, memsym.timing.gemm): the rows are ranked by memory headroom with one note,
not refused; ``memsym estimate --gpu`` gives the memory and the fit with one note (so the
read-back command an ``--emit`` prints works), and ``memsym time`` / ``estimate`` with a time
option (``--efficiency``, the bandwidths, ``--gpus-per-node``) keep the refusal.

The search's command line always has a global batch (memsym.cli.search assumes about 4M tokens
per step), so before this it always priced the step time and stopped on the refusal.
"""

import json
import shlex

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError, StepTimeNotModelledError
from memsym.search import search

from hf_oracle import write_config
from test_hf_zamba import SMALL

# the shared block's selective recompute is refused by the memory terms (a separate refusal):
# full and none are what a Zamba2 search can run
_ARGS = ("--gpus", "8", "--gpu", "h100-80gb", "--seq-length", "64")


def _search(capsys, path, *more):
    code = main(["search", str(path), *_ARGS, *map(str, more)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_search_ranks_a_zamba2_by_headroom_with_a_note(tmp_path, capsys, recompute):
    path = write_config(tmp_path, SMALL["zamba2"])
    code, out, err = _search(capsys, path, "--recompute-granularity", recompute, "--top", 5)
    assert code == 0, err
    assert "note: step time not modelled for zamba2: ranked by headroom" in out
    assert "ranked by memory headroom" in out.splitlines()[0]
    # the rows: "  n t p c d e v b ends recompute sharding... SP GB free-GB [step s] binding"
    rows = [line.split() for line in out.splitlines()
            if line[:3].strip().isdigit() and recompute in line.split()]
    assert len(rows) == 5
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5]
    # the shared block runs on one pipeline stage (rule shared-block-pipeline): p = 1 on 8 GPUs
    assert all(r[2] == "1" for r in rows)
    # most headroom first: the printed free GB never rises down the table
    free = [float(r[-2]) for r in rows]
    assert free == sorted(free, reverse=True)


def test_search_json_rows_have_no_step_time_and_most_headroom_first(tmp_path, capsys):
    path = write_config(tmp_path, SMALL["zamba2"])
    code, out, err = _search(capsys, path, "--recompute-granularity", "full", "--global-batch-size",
                             16, "--top", 4, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) == 4
    assert all(r["step_time_s"] is None and r["step_time_parts_s"] is None for r in rows)
    heads = [r["headroom_bytes"] for r in rows]
    assert heads == sorted(heads, reverse=True)
    # the global batch still sets the micro-batches: B / (b d) with d = 8 on p = 1
    assert all(r["layout"]["num_microbatches"] == 16 // (r["layout"]["micro_batch_size"] * 8)
               for r in rows)


def test_the_library_search_says_so_and_other_refusals_still_stop(tmp_path):
    path = write_config(tmp_path, SMALL["zamba2"])
    res = search(str(path), "h100-80gb", 8, seq_length=64, global_batch_size=16,
                 recompute=["full"])
    assert res.ranked_by == "memory headroom"
    assert res.notes == ["step time not modelled for zamba2: ranked by headroom"]
    assert res.best()["step_time"] is None
    # only the timing layer's own refusal is caught: the memory terms' refusal of selective
    # recompute of the shared block is an InvalidValueError and still stops the search
    with pytest.raises(InvalidValueError, match="selective recompute") as info:
        search(str(path), "h100-80gb", 8, seq_length=64, global_batch_size=16,
               recompute=["selective"])
    assert not isinstance(info.value, StepTimeNotModelledError)


def test_time_and_estimate_with_a_time_option_keep_the_refusal(tmp_path, capsys):
    path = write_config(tmp_path, SMALL["zamba2"])
    for cmd in (["time", str(path), "--gpu", "h100-80gb", "--tokens", "1024"],
                ["estimate", str(path), "--gpu", "h100-80gb", "--global-batch-size", "8",
                 "--efficiency", "0.5"]):
        code = main([*cmd, "--seq-length", "64"])
        err = capsys.readouterr().err
        assert code == 2, cmd
        assert "step time of 'zamba2'" in err and "is not modelled" in err
        assert len(err.strip().splitlines()) == 1


def test_estimate_with_a_gpu_gives_the_memory_and_fit_with_a_note(tmp_path, capsys):
    # --gpu alone is the capacity too: the fit verdict of the same bytes as without it
    path = str(write_config(tmp_path, SMALL["zamba2"]))
    job = [path, "--seq-length", "64", "--global-batch-size", "8", "--json"]
    assert main(["estimate", *job]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["estimate", *job, "--gpu", "h100-80gb"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["bytes"] == plain["bytes"] and rep.get("step_time_s") is None
    assert rep["fits"] is (rep["bytes"]["total"] <= rep["gpu_memory_bytes"])
    assert "step time not modelled for zamba2: memory and fit only" in rep["notes"]


def test_an_emitted_untimed_row_reads_back_to_the_same_bytes(tmp_path, capsys):
    # the emitted read-back command carries --gpu: estimate answers it with the memory
    path = str(write_config(tmp_path, SMALL["zamba2"]))
    code, out, err = _search(capsys, path, "--emit", "megatron", "--recompute-granularity",
                             "full", "--top", 1)
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("# layout 1:"))
    searched = int(header.split(": ")[-1].split(" bytes")[0])
    back = next(line for line in out.splitlines() if line.startswith("# read back: "))
    words = shlex.split(back[len("# read back: "):])
    assert words[:2] == ["memsym", "estimate"] and "--gpu" in words
    assert main(words[1:]) == 0
    assert json.loads(capsys.readouterr().out)["bytes"]["total"] == searched


def test_min_gpus_sizes_a_zamba2_by_memory_with_the_note(tmp_path, capsys):
    # min-gpus searches through memsym.search.search: it no longer stops on the step time
    path = write_config(tmp_path, SMALL["zamba2"])
    code = main(["min-gpus", str(path), "--gpu", "h100-80gb", "--seq-length", "64",
                 "--global-batch-size", "16", "--recompute-granularity", "full"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "note: step time not modelled for zamba2: ranked by headroom" in out


def test_a_plain_zamba2_search_leaves_out_the_refused_selective_recompute(tmp_path, capsys):
    # without a recompute choice the search offers Megatron's three; a shared block's selective
    # recompute is refused by the memory terms (memsym.terms.mamba), so the default choices leave
    # it out, with a note, and the search runs on none and full
    path = write_config(tmp_path, SMALL["zamba2"])
    code, out, err = _search(capsys, path, "--top", 8)
    assert code == 0, err
    assert "note: selective recompute of a shared transformer block is not modelled" in out
    rows = [line.split() for line in out.splitlines() if line[:3].strip().isdigit()]
    modes = {w for r in rows for w in r if w in ("none", "selective", "full")}
    assert len(rows) == 8 and modes == {"none", "full"}


def test_a_space_with_selective_asked_for_is_not_rewritten(tmp_path):
    # only the default recompute choices drop selective: a Space built with selective asked
    # for (as min_gpus hands one over) is searched as asked, and the shared block refuses it
    from memsym.search.space import make_space

    path = write_config(tmp_path, SMALL["zamba2"])
    space = make_space(str(path), "h100-80gb", seq_length=64, global_batch_size=16,
                       recompute=["selective", "full"])
    with pytest.raises(InvalidValueError, match="selective recompute of a shared"):
        search(str(path), "h100-80gb", 8, space=space)


@pytest.mark.parametrize("cmd", [
    ["min-gpus", "--gpu", "h100-80gb", "--seq-length", "64"],
    ["search", "--gpus", "8", "--gpu", "h100-80gb", "--seq-length", "64", "--emit", "megatron"]])
def test_min_gpus_and_emit_leave_out_the_default_selective_too(tmp_path, capsys, cmd):
    # min-gpus and search --emit build their own Space (make_space): the default recompute
    # choices leave out the shared block's selective there as well, so neither stops on it
    path = write_config(tmp_path, SMALL["zamba2"])
    code = main([cmd[0], str(path), *cmd[1:]])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "--recompute-granularity selective" not in out
    if cmd[0] == "min-gpus":
        assert "note: selective recompute of a shared transformer block is not modelled" in out


def test_make_space_of_a_shared_block_model_defaults_to_none_and_full(tmp_path):
    from memsym.search.space import make_space

    path = write_config(tmp_path, SMALL["zamba2"])
    space = make_space(str(path), "h100-80gb", seq_length=64)
    assert set(space.recompute) == {"none", "full"}
    assert space.unmodelled_recompute == ("selective",)
    # asked for, it stays (and is refused by the memory terms when priced)
    asked = make_space(str(path), "h100-80gb", seq_length=64, recompute=["selective", "full"])
    assert asked.recompute == ("selective", "full") and asked.unmodelled_recompute == ()


# ---------------------------------------------------------------------------------------------
# Issue 32: --emit carries the search's notes; --efficiency on an untimed model is refused
# ---------------------------------------------------------------------------------------------
_NOTE = "step time not modelled for zamba2: ranked by headroom"


def test_emit_carries_the_notes_the_table_prints(tmp_path, capsys):
    # the same search as a table and as --emit megatron: every line the table prints under its
    # head (assumed settings and "note:" lines) is in the emitted text as a "#" comment, before
    # the first layout, so the emitted arguments stay what is pasted
    # (a global batch given: the one assumed without it is said in the emitted head line)
    path = write_config(tmp_path, SMALL["zamba2"])
    common = ("--recompute-granularity", "full", "--global-batch-size", 16, "--top", 1)
    code, table, err = _search(capsys, path, *common)
    assert code == 0, err
    said = [line for line in table.splitlines() if line.startswith(("note: ", "assumed: "))]
    assert f"note: {_NOTE}" in said
    code, out, err = _search(capsys, path, *common, "--emit", "megatron")
    assert code == 0, err
    head = out.split("\n# layout 1:")[0].splitlines()
    assert [line for line in head if line.startswith(("# note: ", "# assumed: "))] == \
        ["# " + line for line in said]
    # after the layout's own "#" lines, only Megatron-LM arguments: no note among them
    body = out.split("\n# layout 1:")[1].splitlines()[1:]
    assert all(line.startswith(("#", "--")) for line in body)
    assert not any(_NOTE in line for line in body)


def test_json_rows_carry_the_notes_with_and_without_emit(tmp_path, capsys):
    path = write_config(tmp_path, SMALL["zamba2"])
    for more in ((), ("--emit", "megatron")):
        code, out, err = _search(capsys, path, "--recompute-granularity", "full", "--top", 2,
                                 "--json", *more)
        assert code == 0, err
        rows = json.loads(out)
        assert len(rows) == 2 and all(_NOTE in r["notes"] for r in rows)


@pytest.mark.parametrize("command", ["search", "min-gpus"])
def test_efficiency_on_an_untimed_model_is_refused(tmp_path, capsys, command):
    # --efficiency prices nothing but the step time (memsym.timing); with no step time it
    # cannot act, so it is refused as estimate refuses it (one stderr line, exit 2, nothing on
    # stdout), in the timing layer's own words, naming the option
    path = write_config(tmp_path, SMALL["zamba2"])
    argv = [command, str(path), "--gpu", "h100-80gb", "--seq-length", "64",
            "--global-batch-size", "16", "--recompute-granularity", "full", "--efficiency", "0.5"]
    if command == "search":
        argv += ["--gpus", "8"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--efficiency" in err and "step time of 'zamba2'" in err and "is not modelled" in err


def test_the_library_search_refuses_an_efficiency_it_cannot_price(tmp_path):
    path = write_config(tmp_path, SMALL["zamba2"])
    with pytest.raises(StepTimeNotModelledError, match="efficiency 0.5"):
        search(str(path), "h100-80gb", 8, seq_length=64, global_batch_size=16,
               recompute=["full"], efficiency=0.5)
