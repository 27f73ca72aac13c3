"""DeepSpeed AutoTP (``tensor_parallel.autotp_size``) and Ulysses (``sequence_parallel_size``)
read from a ds_config, against DeepSpeed's own code at ``edaa722126`` and by-hand counts.

What AutoTP shards (the oracle, read from DeepSpeed's and transformers' code, not memsym's):
``runtime/engine.py:816-848`` converts the model's transformers ``tp_plan`` with
``module_inject/tp_plan_converter.py:42-70``; transformers 5.25's Llama plan
(``models/llama/configuration_llama.py:48-56``) splits q/k/v/gate/up by columns and o/down by
rows, ``LlamaForCausalLM._tp_plan`` (``modeling_llama.py:414``) the ``lm_head`` by columns
(vocabulary rows of its weight) with its output gathered; ``auto_tp.py:716-729`` leaves an
embedding the plan does not name unchanged, ``auto_tp.py:488-535`` leaves a tied lm_head and
its embedding replicated.  Norms are in no plan: whole.  So one GPU holds, with L layers,
hidden h, MLP width f, vocabulary V:

    L (4 h^2 + 3 h f) / t  +  L 2 h + h  +  V h  +  V h / t   (untied)
    L (4 h^2 + 3 h f) / t  +  L 2 h + h  +  V h               (tied)

(Llama-2 7B: 32 heads of 128, no GQA, so q/k/v/o are h x h each.)
"""

from __future__ import annotations

import dataclasses
import json
import shlex

import numpy as np
import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.model import preset, resolve
from memsym.readers import read_deepspeed_config
from memsym.readers.jobs import deepspeed_job
from memsym.symbols import V as V_, b, c, s
from memsym.hardware import gpu
from memsym.timing.data_parallel import parameters_per_gpu
from memsym.timing.efficiency import memory_time
from memsym.timing.gemm import shape_of
from memsym.timing.pipeline import end_layers
from memsym.timing.records import Settings
from memsym.training.output_layer import output_layer_activations
from memsym.training.model_states import job_stage_parameters
from in_process import run

# Llama-2 7B (config.json: hidden_size 4096, intermediate_size 11008, 32 layers,
# vocab_size 32000, tie_word_embeddings false)
L, H, F, V = 32, 4096, 11008, 32000
LINEARS = L * (4 * H * H + 3 * H * F)          # 6,476,005,376
NORMS = L * 2 * H + H                          # 266,240

ZERO1_TP2 = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
             "zero_optimization": {"stage": 1}, "tensor_parallel": {"autotp_size": 2}}


def test_llama2_7b_autotp2_zero1_on_8_gpus_by_hand(capsys, tmp_path):
    per_gpu = LINEARS // 2 + NORMS + V * H + V * H // 2
    assert per_gpu == 3_434_876_928
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ZERO1_TP2))
    code, out, err = run(capsys, "estimate", "llama2-7b", "--deepspeed-config", path,
                         "--world-size", 8, "--seq-length", 4096, "--json")
    rep = json.loads(out)
    assert code == 0, err
    # d = 8 // 2: DeepSpeed's (data, tensor) mesh (utils/groups.py:146-155)
    assert (rep["layout"]["tp"], rep["layout"]["dp"], rep["layout"]["sequence_parallel"]) == (
        2, 4, False)
    # bf16 weights, 2 bytes each
    assert rep["bytes"]["weights"] == 2 * per_gpu == 6_869_753_856
    # ZeRO-1: the fp32 master copy and Adam's two fp32 moments, 12 bytes a parameter, split
    # over the data-parallel group of 4 (stage_1_and_2.py single_partition_of_fp32_groups)
    assert rep["bytes"]["optimizer"] == 12 * per_gpu // 4 == 10_304_630_784


def test_tied_output_and_embedding_stay_whole():
    x = dataclasses.replace(preset("llama2-7b"), untie_embeddings_and_output_weights=False)
    c = read_deepspeed_config(ZERO1_TP2, 8)
    sp_ = job_stage_parameters(deepspeed_job(c, x, seq_length=4096), 0)
    assert sp_.per_gpu == LINEARS // 2 + NORMS + V * H


def test_logits_gathered_on_every_tp_rank():
    # colwise_gather_output: every rank holds all V logits; the fp32 copy the loss keeps is
    # 4 s b V bytes, not Megatron's 4 s b V / t
    j = deepspeed_job(read_deepspeed_config(ZERO1_TP2, 8), "llama2-7b", seq_length=4096)
    x = resolve(j.model, seq_length=4096)
    terms = {t_.key: t_.expr for t_ in output_layer_activations(x, j.layout, j.training).terms}
    assert terms["logits"] == 4 * s * b * V_ / c


def test_autotp_zero_and_one_are_off():
    # TPTrainingConfig.autotp_size 0 by default, "0 ... disabled" (tensor_parallel/config.py:45-49);
    # the engine partitions only above 1 (engine.py:332)
    for size in (0, 1):
        c = read_deepspeed_config({**ZERO1_TP2, "tensor_parallel": {"autotp_size": size}}, 8)
        assert (c["layout"]["t"], c["layout"]["d"]) == (1, 8)


def test_train_batch_counts_every_gpu_a_step_trains_a_tp_groups_share():
    # DeepSpeedConfig without an mpu asserts 16 = 1 x 2 x 8 GPUs (config.py:720-724,
    # _batch_assertion); the 2 ranks of a TP group read the same micro-batches, so a step
    # trains 1 x 2 x 4 = 8 sequences
    c = read_deepspeed_config({**ZERO1_TP2, "train_batch_size": 16}, 8)
    assert c["training"]["gradient_accumulation_steps"] == 2
    assert c["training"]["global_batch_size"] == 8 and c["layout"]["d"] == 4


@pytest.mark.parametrize("cfg,said", [
    # Ulysses is read (tests/test_deepspeed_ulysses.py); beside AutoTP it is refused
    ({"sequence_parallel_size": 2}, "Ulysses beside AutoTP is not modelled"),
    ({"tensor_parallel": {"autotp_size": 3}}, "does not divide the world size 8"),
    ({"tensor_parallel": {"autotp_size": 2, "tp": {"tp_size": 4}}},
     "tensor_parallel.tp.tp_size 4 does not match"),
    ({"tensor_parallel": {"autotp_size": 2},
      "expert_parallel": {"enabled": True, "autoep_size": 2}}, "AutoEP"),
    ({"tensor_parallel": "2"}, "tensor_parallel must be an object"),
    ({"tensor_parallel": {"autotp_size": -1}}, "autotp_size must be between"),
])
def test_refusals_are_one_line(cfg, said):
    with pytest.raises(InvalidValueError, match=None) as err:
        read_deepspeed_config({**ZERO1_TP2, **cfg}, 8)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_uneven_shards_are_refused():
    # DeepSpeed splits unevenly (tp_shard.py:47-93); memsym counts even shards: 32000 rows
    # over 3 ranks are refused, and so are 32 heads over 3 (memsym.model.check_layout)
    c = read_deepspeed_config({**ZERO1_TP2, "tensor_parallel": {"autotp_size": 3}}, 6)
    with pytest.raises(InvalidValueError, match="does not divide the vocabulary"):
        deepspeed_job(c, "llama2-7b", seq_length=4096)
    tied = dataclasses.replace(preset("llama2-7b"), untie_embeddings_and_output_weights=False)
    with pytest.raises(ValueError, match="must divide"):
        deepspeed_job(c, tied, seq_length=4096)


def test_sequence_parallel_refused_on_the_command_line(capsys, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**ZERO1_TP2, "sequence_parallel_size": 4}))
    code, out, err = run(capsys, "estimate", "llama2-7b", "--deepspeed-config", path,
                         "--world-size", 8, "--seq-length", 4096)
    assert code == 2 and out == "" and "sequence_parallel_size 4" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_megatron_tp_still_splits_the_embedding():
    # the same job under Megatron-LM: VocabParallelEmbedding splits V h over t
    sp_ = job_stage_parameters(job("llama2-7b", t=2, d=4, seq_length=4096,
                                   global_batch_size=4), 0)
    assert sp_.per_gpu == LINEARS // 2 + NORMS + 2 * V * H // 2


def test_search_emits_autotp_and_reads_it_back(capsys, tmp_path):
    """--tp 2 4 on a DeepSpeed search: each row is AutoTP (no sequence parallelism), emitted
    as "tensor_parallel": {"autotp_size": t} with train_batch_size = b x GAS x every GPU
    (DeepSpeed's batch rule without an mpu), and estimating the emitted config gives the
    row's bytes and step time (the search's vectorized path against the reader's)."""
    code, out, err = run(capsys, "search", "llama2-7b", "--gpu", "h100-80gb", "--gpus", 8,
                         "--framework", "deepspeed", "--tp", 2, 4, "--pp", 1, "--cp", 1,
                         "--recompute", "none", "--sharding", "zero1", "zero3",
                         "--global-batch-size", 64, "--top", 6, "--emit", "deepspeed",
                         "--emit-dir", tmp_path, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert {r["layout"]["tp"] for r in rows} == {2, 4}
    for row in rows:
        lay = row["layout"]
        assert lay["sequence_parallel"] is False
        with open(row["emit"]["file"], encoding="utf-8") as fh:
            cfg = json.load(fh)
        assert cfg["tensor_parallel"] == {"autotp_size": lay["tp"]}
        assert any(n.startswith("tensor_parallel.autotp_size is DeepSpeed's AutoTP")
                   for n in row["emit"]["notes"])
        assert cfg["train_batch_size"] == lay["micro_batch_size"] * lay["num_microbatches"] * 8
        assert lay["micro_batch_size"] * lay["num_microbatches"] * lay["dp"] == 64
        words = shlex.split(row["emit"]["read_back"])
        code, got, err = run(capsys, *words[1:])
        assert code == 0, err
        est = json.loads(got)
        assert (est["layout"]["tp"], est["layout"]["dp"]) == (lay["tp"], lay["dp"])
        assert est["bytes"] == row["bytes"]
        assert est["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-12)


def test_a_config_with_autotp_is_searched_at_its_size(capsys, tmp_path):
    # the job's t is held (not 1) where the command line names no --tp; a train batch of 64
    # on 8 GPUs at autotp_size 2 trains 32 sequences a step
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**ZERO1_TP2, "train_micro_batch_size_per_gpu": "auto",
                                "train_batch_size": 64}))
    code, out, err = run(capsys, "search", "llama2-7b", "--deepspeed-config", path,
                         "--world-size", 8, "--seq-length", 4096, "--gpu", "h100-80gb",
                         "--top", 3, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows and all(r["layout"]["tp"] == 2 and r["layout"]["dp"] == 4 for r in rows)
    assert all(r["layout"]["micro_batch_size"] * r["layout"]["num_microbatches"] * 4 == 32
               for r in rows)


def test_step_time_reduces_the_whole_embedding():
    # the data-parallel reduction and the optimizer step see AutoTP's whole embedding: V h
    # (1 - 1/t) = 32000 x 4096 / 2 = 65,536,000 more parameters a GPU at t = 2 than Megatron's
    # split one
    x = shape_of(preset("llama2-7b"))
    got = [parameters_per_gpu(x, Settings(whole_embedding=w), np.array(1.0), 2.0, 1.0, 1.0,
                              (32, 32, 32)) for w in (False, True)]
    assert float(got[1][0] - got[0][0]) == V * H // 2 == 65_536_000
    assert float(got[1][3] - got[0][3]) == 65_536_000


def test_step_time_loss_works_on_all_logits():
    # the output layer's fp32 logits traffic (6 bytes a logit forward, 10 backward, memsym's
    # count) on all V logits of T = b s / c tokens under AutoTP, V / t under Megatron's TP;
    # the GEMMs are the same [T, h] x [h, V/t]
    h100, x = gpu("h100"), shape_of(preset("llama2-7b"))
    T = 1 * 4096
    mega = end_layers(x, Settings(seq_length=4096), h100, 1, 2.0, 1)
    auto = end_layers(x, Settings(seq_length=4096, gathered_logits=True), h100, 1, 2.0, 1)
    assert np.isclose(auto[0] - mega[0], memory_time(6 * T * V, h100)
                      - memory_time(6 * T * V / 2, h100))
    assert np.isclose(auto[1] - mega[1], memory_time(10 * T * V, h100)
                      - memory_time(10 * T * V / 2, h100))
    assert auto[2] == mega[2]
