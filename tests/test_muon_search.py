"""Muon in the search (issue 31): ``memsym search`` and ``memsym min-gpus`` say a Muon layout's
scheme as ``memsym estimate`` says it, and price its states and step as estimate prices the
same job.  Expected wording from Megatron-LM d98e8a64dd (arguments.py:1724-1737: the
distributed optimizer under an emerging optimizer is the layer-wise one), expected numbers
from ``memsym estimate`` / ``memsym time`` of the row's own job (the other path), or by hand.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from memsym.cli import main
from memsym.hardware import cluster_for, gpu
from memsym.model import Architecture
from memsym.timing.muon import muon_step_time


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


# ----------------------------------------------------------------------------------------------
# --muon-tp-mode at TP size 1
# ----------------------------------------------------------------------------------------------
#: h 64, 4 heads of 16, 2 KV groups, SwiGLU f 128, 2 layers (test_muon.py's TINY)
TINY = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                    ffn_hidden_size=128, vocab_size=256, swiglu=True, normalization="RMSNorm",
                    untie_embeddings_and_output_weights=True, max_position_embeddings=4096,
                    position_embedding_type="rope", add_bias_linear=False)


def _step(mode, t):
    dev = gpu("h100")
    return float(muon_step_time(TINY, dev, cluster_for(dev.name), 2, t=np.array(float(t)), e=1,
                                t_e=1, ndp=1, edp=1, layer_wise=False, tp_mode=mode))


def test_tp_modes_at_tp_1_cost_their_element_wise_passes_and_no_collective():
    # At t = 1 the source still runs each mode's TP branch: Transformer Engine sets
    # partition_dim on every linear weight whatever the TP size (TE d0067d0da linear.py:1857-1862),
    # orthogonalize passes it on unless blockwise (emerging_optimizers.py:403), and
    # newton_schulz_tp (Emerging-Optimizers muon_utils.py:317-343) then
    #   duplicated: all-gathers over the one-rank group and torch.cat's the single shard: one
    #     fp32 copy, read 4 + write 4 = 8 bytes per element;
    #   distributed: distributed_normalize_p2 (x * x: 8, sum: 4, x / norm: 8) = 20 bytes per
    #     element for F.normalize's 12 (read, read + write): 8 more.
    # A group of one moves nothing: no collective time.  The Newton-Schulz GEMMs are the same
    # (the whole matrix, the long side split over 1 rank), so each mode exceeds blockwise by
    # 8 bytes per element of its TP-split matrices at HBM bandwidth, by hand:
    # q 64x64, k 32x64, v 32x64, proj 64x64, fc1 (SwiGLU) 256x64, fc2 64x128 per layer
    split = 64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 256 * 64 + 64 * 128
    assert split == 36864
    extra = 2 * 8 * split / gpu("h100").hbm_bandwidth      # 2 layers
    block = _step("blockwise", 1)
    assert _step("duplicated", 1) - block == pytest.approx(extra, rel=1e-9)
    assert _step("distributed", 1) - block == pytest.approx(extra, rel=1e-9)

