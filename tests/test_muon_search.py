"""Muon in the search (issue 31): ``memsym search`` and ``memsym min-gpus`` say a Muon layout's
scheme as ``memsym estimate`` says it, and price its states and step as estimate prices the
same job.  Expected wording from Megatron-LM d98e8a64dd (arguments.py:1724-1737: the
distributed optimizer under an emerging optimizer is the layer-wise one), expected numbers
from ``memsym estimate`` / ``memsym time`` of the row's own job (the other path), or by hand.
"""

from __future__ import annotations

import json

from memsym.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


#: estimate's own words for the distributed optimizer under Muon (memsym.cli.report_text)
LAYER_WISE = "distributed-optimizer (layer-wise under muon)"


def test_estimate_says_the_layer_wise_words(capsys):
    code, out, _ = run(capsys, "estimate", "llama2-7b", "--optimizer", "dist_muon",
                       "--world-size", "8")
    assert code == 0 and LAYER_WISE in out


def test_min_gpus_says_the_layout_as_estimate_does(capsys):
    code, out, _ = run(capsys, "min-gpus", "llama2-7b", "--gpu", "h100-80gb",
                       "--optimizer", "dist_muon")
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("layout: "))
    assert f"sharding {LAYER_WISE}" in line


def test_search_rows_say_the_scheme_as_estimate_does(capsys):
    code, out, _ = run(capsys, "search", "llama2-7b", "--gpus", "8", "--gpu", "h100-80gb",
                       "--optimizer", "dist_muon", "--global-batch-size", "64", "--top", "2")
    assert code == 0
    rows = [l for l in out.splitlines() if l[:3].strip() in ("1", "2")]
    assert len(rows) == 2 and all(LAYER_WISE in r for r in rows)


def test_adam_rows_keep_the_plain_scheme(capsys):
    code, out, _ = run(capsys, "min-gpus", "llama2-7b", "--gpu", "h100-80gb")
    assert code == 0 and "layer-wise" not in out


# ----------------------------------------------------------------------------------------------
# The optimizer states' Source under Muon: where Muon makes them, not DistributedOptimizer
# ----------------------------------------------------------------------------------------------
def _sources(capsys, *extra):
    code, out, _ = run(capsys, "estimate", "llama2-7b", "--world-size", "8", *extra, "--json")
    assert code == 0
    return json.loads(out)["sources"]


def test_muon_states_cite_the_momentum_buffer_and_megatrons_muon_wrapper(capsys):
    # Emerging-Optimizers fd77292 orthogonalized_optimizer.py:152-154:
    #   state["momentum_buffer"] = torch.zeros_like(p.data)
    # Megatron-LM d98e8a64dd optimizer/__init__.py:899-902: under bf16 TensorParallelMuon is
    # wrapped in Float16OptimizerWithFloat16Params (DDP); layer_wise_optimizer.py:576-589 wraps
    # it after shard_params (the layer-wise distributed optimizer)
    ddp = _sources(capsys, "--optimizer", "muon", "--sharding", "ddp")["optimizer"]
    assert "orthogonalized_optimizer.py:152-154" in ddp and "__init__.py:892-904" in ddp
    assert "distrib_optimizer.py" not in ddp
    lw = _sources(capsys, "--optimizer", "dist_muon")
    assert "layer_wise_optimizer.py:576-589" in lw["optimizer"]
    assert "orthogonalized_optimizer.py:152-154" in lw["optimizer"]
    assert "distrib_optimizer.py" not in lw["optimizer"]
    # layer_wise_optimizer.py:174-180: "Megatron DDP handle allreduce grad"
    assert "layer_wise_optimizer.py:174-180" in lw["gradients"]


def test_adam_keeps_the_distributed_optimizers_source(capsys):
    src = _sources(capsys, "--sharding", "distributed-optimizer")["optimizer"]
    assert "distrib_optimizer.py" in src
