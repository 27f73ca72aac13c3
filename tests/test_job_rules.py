"""The one job record (memsym.job) and the one rule table (memsym.rules), issue 12.

Expected values are hand arithmetic or the frameworks' own rules; the vectorised masks are
checked against the scalar checks on every layout of a grid (the same rule, two inputs).
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from memsym import rules
from memsym.cli import main
from memsym.errors import DivisibilityError, InvalidValueError, UnknownNameError
from memsym.job import DEFAULTS, Job, Training, job
from memsym.model import Resolved, preset, resolve
from in_process import run as cli


# --- the job: built once, validated once -----------------------------------------------------
def test_job_resolves_once_and_derives_d_and_m():
    j = job("llama2-70b", tp=8, pp=4, world_size=64, seq_length=4096, global_batch_size=64)
    assert isinstance(j, Job) and isinstance(j.model, Resolved)
    assert resolve(j.model) is j.model                      # nothing resolves it again
    # d = G / (t p c) = 64 / 32; m = B / (b d) = 64 / 2 (Megatron's num_microbatches)
    assert (j.layout.d, j.m) == (2, 32)


def test_one_set_of_defaults():
    # the same defaults reach every entry point: Training(), job(), the search space
    from memsym.search import make_space

    # dropout None: the model's recipe, else Megatron's 0.1 dropouts (memsym.job.resolve_dropout)
    assert DEFAULTS["flash_attention"] is True and DEFAULTS["dropout"] is None
    assert DEFAULTS["convention"] == "framework" and DEFAULTS["seq_length"] == 4096
    space = make_space("gpt3-175b", "h100-80gb")
    assert (space.flash_attention, space.dropout, space.seq_length, space.convention) == (
        DEFAULTS["flash_attention"], True, DEFAULTS["seq_length"], DEFAULTS["convention"])
    assert job("gpt3-175b", seq_length=2048).training == Training(seq_length=2048, dropout=True)
    # a preset with a recipe (memsym.model.RECIPES: Megatron-Bridge trains Llama 2 without
    # dropout) has it, on every entry point
    assert job("llama2-7b").training == Training(dropout=False)
    assert job("llama2-7b", training=Training()).training.dropout is False
    assert make_space("llama2-7b", "h100-80gb").dropout is False


@pytest.mark.parametrize("options,kind,needle", [
    (dict(tp=16), DivisibilityError, "KV heads"),                        # 8 KV heads
    (dict(pp=3), DivisibilityError, "pipeline-parallel size p=3"),        # 80 layers
    (dict(ep=2), DivisibilityError, "needs a model with experts"),
    (dict(cp=2, seq_length=4095), DivisibilityError, "2c to divide"),
    (dict(pp=2, offload="optimizer"), InvalidValueError, "CPU offload"),
    (dict(pp=2, sharding="zero3"), InvalidValueError, "ZeRO-2/3"),
    (dict(seq_length=10**5), InvalidValueError, "max_position_embeddings"),
    (dict(tensor_parallel=2), UnknownNameError, "job option"),
    (dict(tp=2, t=4), InvalidValueError, "twice"),
])
def test_job_refuses_what_the_framework_refuses(options, kind, needle):
    with pytest.raises(kind, match=needle):
        job("llama2-70b", **options)


# Megatron-LM's validate_args (megatron/training/arguments.py at d98e8a64dd): the
# use_megatron_fsdp block (l. 1118-1187) checks no pipeline or expert size and turns the
# distributed optimizer on itself (v1); --use-torch-fsdp2 asserts p = 1 (l. 1034) and e = 1
# (l. 1036).  DeepSpeed's PipelineEngine asserts ZeRO stage < 2.
@pytest.mark.parametrize("strategy", ["no_shard", "optim", "optim_grads", "optim_grads_params"])
def test_megatron_fsdp_runs_with_pipeline_and_expert_parallelism(strategy):
    from memsym.vocabulary import MEGATRON_FSDP_SCHEMES

    j = job("mixtral-8x7b", tp=2, pp=2, ep=2, world_size=16, sequence_parallel=True,
            sharding=MEGATRON_FSDP_SCHEMES[strategy], megatron_fsdp=strategy)
    assert (j.layout.p, j.layout.e, j.training.states.megatron_fsdp) == (2, 2, strategy)


@pytest.mark.parametrize("argv, rule", [
    (["--pp", "2", "--sharding", "zero2"], "ZeRO-2/3"),                 # DeepSpeed's ZeRO-2
    (["--pp", "2", "--use-torch-fsdp2"], "ZeRO-2/3 and FSDP need p = 1"),  # Torch-FSDP2
    (["--ep", "2", "--use-torch-fsdp2"], "--use-torch-fsdp2 needs e = 1"),
    # l. 1150: Megatron-FSDP steps sgd or adam only
    (["--use-megatron-fsdp", "--optimizer", "adafactor"], "does not support the adafactor"),
])
def test_fsdp_combinations_megatron_refuses_in_one_line(capsys, argv, rule):
    code, out, err = cli(capsys, "estimate", "mixtral-8x7b", "--world-size", "16",
                         "--untie-embeddings-and-output-weights", *argv)
    assert code == 2 and out == "" and rule in err and err.strip().count("\n") == 0


def test_megatron_fsdp_no_shard_reads_with_the_distributed_optimizer(capsys):
    # v1 turns --use-distributed-optimizer on itself: given too, no_shard is still no_shard
    code, out, err = cli(capsys, "estimate", "llama3-8b", "--world-size", "16", "--pp", "2",
                         "--use-megatron-fsdp", "--use-distributed-optimizer",
                         "--data-parallel-sharding-strategy", "no_shard", "--json")
    assert code == 0, err
    trn = json.loads(out)["training"]
    assert (trn["megatron_fsdp"], trn["sharding"]) == ("no_shard", "ddp")


@pytest.mark.parametrize("version, code", [("1", 0), ("2", 2)])
def test_megatron_fsdp_version_2_refuses_the_distributed_optimizer(capsys, version, code):
    # validate_args l. 1124-1126: v2 asserts not --use-distributed-optimizer; v1 turns it on
    got, out, err = cli(capsys, "estimate", "--num-layers", "32", "--hidden-size", "4096",
                        "--num-attention-heads", "32", "--ffn-hidden-size", "11008",
                        "--seq-length", "4096", "--max-position-embeddings", "4096",
                        "--vocab-size", "32000", "--micro-batch-size", "1", "--bf16",
                        "--global-batch-size", "64", "--world-size", "16", "--gpu", "h100-80gb",
                        "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "4",
                        "--use-megatron-fsdp", "--use-distributed-optimizer",
                        "--megatron-fsdp-version", version, "--ckpt-format", "fsdp_dtensor",
                        "--data-parallel-sharding-strategy", "no_shard")
    assert got == code, err
    if code:
        assert "--megatron-fsdp-version 2" in err and err.strip().count("\n") == 0


def test_interleaving_needs_m_a_multiple_of_p():
    # Megatron's interleaved schedule: p <= N <= m and m mod N in {0} or >= p, N = p by
    # default (schedules.py); p = 4, v = 2, m = 6 -> 6 mod 4 = 2 < 4: refused; m = 8 launches
    with pytest.raises(DivisibilityError, match="interleaved schedule"):
        job("llama2-7b", pp=4, vpp=2, global_batch_size=6)
    assert job("llama2-7b", pp=4, vpp=2, global_batch_size=8).m == 8


# --- one rule table: the vectorised masks equal the scalar checks -----------------------------
@pytest.mark.parametrize("name", ["llama2-70b", "mixtral-8x7b", "deepseek-v3"])
def test_masks_equal_the_scalar_rules(name):
    x = resolve(preset(name), seq_length=4096)
    t_, p_, c_, d_, e_, v_ = np.meshgrid([1, 2, 3, 8], [1, 2, 4, 5], [1, 2], [1, 3, 4], [1, 2, 8],
                                         [1, 2], indexing="ij")
    grid = {"t": t_.ravel(), "p": p_.ravel(), "c": c_.ravel(), "d": d_.ravel(), "e": e_.ravel(),
            "v": v_.ravel()}
    common = dict(s=4096, b=1, B=64, gpus=None, gpus_per_node=8, first_stage_layers=None,
                  last_stage_layers=None, microbatch_group_size=None, sequence_parallel=True,
                  offload=False, shards_gradients=False)
    k = dict(grid, t_e=grid["t"], m=64 // (grid["d"] * 1), **common)
    masks = rules.masks(x, k)
    for i in range(len(grid["t"])):
        row = {key: int(val[i]) for key, val in grid.items()}
        scalar = dict(row, t_e=row["t"], m=64 // row["d"], **common)
        expect = rules.broken(x, scalar, list(rules.RULES))
        got = [n for n, mask in masks.items() if mask[i]]
        assert got == expect, (row, got, expect)


def test_every_rule_names_its_source():
    for rule in rules.RULES.values():
        assert rule.source.key and rule.source.locator and rule.summary
        assert rule.kind in ("launch", "preference")


# --- the command line builds the same job -----------------------------------------------------
def test_custom_gpt_with_learned_positions(capsys):
    # issue 12: failed with "learned position embeddings need max_position_embeddings" after
    # the memory was computed.  By hand (Megatron GPT): per layer 12 h^2 + 13 h = 49,984
    # (QKV, projection, two MLP matrices with biases, two LayerNorms); the embedding's rows
    # padded to 128 (1000 -> 1024) x 64; the learned position table s x h = 32 x 64 (it
    # defaults to --seq-length, as Megatron requires); the final LayerNorm 2h.
    # without a MODEL the words are a Megatron-LM command, read with Megatron's defaults:
    # --micro-batch-size and the world size are required, weights fp32 unless --bf16
    code, out, err = cli(capsys, "estimate", "--num-layers", "2", "--hidden-size", "64",
                         "--num-attention-heads", "4", "--vocab-size", "1000", "--seq-length",
                         "32", "--micro-batch-size", "1", "--world-size", "1", "--bf16", "--json")
    assert code == 0, err
    data = json.loads(out)
    params = 2 * (12 * 64**2 + 13 * 64) + 1024 * 64 + 32 * 64 + 2 * 64
    assert params == 167_680
    assert data["bytes"]["weights"] == 2 * params              # bf16 weights, t = p = 1
    assert data["bytes"]["gradients"] == 4 * params            # Megatron's fp32 gradient buffer
    # the reported parameter count is the published (unpadded) one: 24 rows fewer
    assert data["params"] == params - 24 * 64


@pytest.mark.parametrize("argv,needle", [
    (["estimate", "mixtral-8x7b", "--seq-length", "2048", "--ep", "8", "--dp", "4",
      "--convention", "megatron-lm"], "e*t_e=8 must divide t*c*d=4"),
    (["estimate", "llama2-70b", "--tp", "16", "--convention", "megatron-lm"], "KV heads"),
    (["estimate", "llama2-70b", "--tp", "16", "--convention", "megatron-bridge"], "KV heads"),
])
def test_framework_conventions_refuse_what_the_framework_refuses(capsys, argv, needle):
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err
    assert "Traceback" not in err


def test_estimate_rows_carry_their_terms_sources(capsys):
    code, out, _ = cli(capsys, "estimate", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "4",
                       "--json")
    data = json.loads(out)
    assert code == 0
    # every row that has bytes has a source, the activations row its terms' sources
    for key in data["bytes"]:
        if key != "total":
            assert data["sources"].get(key), key
    assert "korthikanti" in data["sources"]["activations"]
    assert "megatron-core" in data["sources"]["gradients"]      # not a ZeRO citation


def test_search_and_min_gpus_take_the_job():
    # the job's model and training settings are the search's (its layout is what is searched);
    # seed 004: a 7B model needs two 80 GB GPUs
    from memsym.search import min_gpus, search

    j = job("llama2-7b", seq_length=2048, global_batch_size=64, gpu="a100-80gb")
    res = search(j, gpus=8, recompute=["selective"], sharding=["zero1"])
    assert (res.space.seq_length, res.space.global_batch_size) == (2048, 64)
    # the capacity is the A100 80GB's CUDA total, 79.14 GiB (lianqi1008/Control-GIC#6)
    assert res.space.capacity == int(Fraction("79.14") * 2**30) and len(res) > 0
    assert min_gpus(j).gpus == 2


def test_torchtitan_runs_fsdp_with_pipeline_parallelism_on_its_own_split():
    # Megatron-LM validate_args: "--use-torch-fsdp2 is not supported with pipeline
    # parallelism"; DeepSpeed's PipelineEngine asserts ZeRO stage < 2.  torchtitan composes
    # FSDP2 with torch.distributed.pipelining, and splits the layers itself
    # (pipeline_parallel.py generate_llm_fqn_per_model_part, embedding and output one layer
    # each): 126 + 2 = 128 effective layers over 8 ranks = 16 each, ends 15
    common = dict(t=8, p=8, d=8, sharding="fsdp", seq_length=8192, micro_batch_size=1,
                  num_microbatches=8)
    with pytest.raises(InvalidValueError, match="need p = 1"):
        job("llama3-405b", first_stage_layers=15, last_stage_layers=15, **common)
    j = job("llama3-405b", framework="torchtitan", **common)
    assert (j.layout.first_stage_layers, j.layout.last_stage_layers) == (15, 15)
    assert any("[15, 16, 16, 16, 16, 16, 16, 15]" in n for n in j.notes)
    # two stages per rank (Interleaved1F1B): 8 per stage, 7 + 8 on the end ranks; Megatron
    # would refuse 15 layers over v = 2, torchtitan's stages are uneven by design
    jv = job("llama3-405b", framework="torchtitan", v=2, **common)
    assert (jv.layout.first_stage_layers, jv.layout.v) == (15, 2)
    # Llama-3 8B over 4 ranks: 34 effective layers, 9, 9, 8, 8 -> 8, 9, 8, 7 layers: the
    # middle ranks differ, which memsym's stages do not represent (refused, not guessed)
    with pytest.raises(InvalidValueError, match=r"\[8, 9, 8, 7\]"):
        job("llama3-8b", framework="torchtitan", t=1, p=4, d=2, sharding="fsdp",
            seq_length=8192, micro_batch_size=1, num_microbatches=4)
    with pytest.raises(UnknownNameError, match="framework"):
        job("llama3-8b", framework="titan")


def test_torchtitan_pipeline_memory_keeps_the_stage_unsharded():
    # FSDP2 under PP keeps the stage's bf16 parameters gathered and accumulates its fp32
    # gradients unsharded: 2 + 4 bytes per stage parameter on one GPU in backward (beyond
    # the sharded 16/d), 2 in forward; memsym's estimate shows both in its phases (of the
    # tensors allocated: the reserved and device counts keep the sharded gradients' blocks in
    # the reduce-scatter stream's pool in every phase, tests/test_stream_pools.py)
    from memsym.model import layer_parameters, stage_parameters
    from memsym.training import training_memory

    j = job("llama3-405b", framework="torchtitan", t=8, p=8, d=8, sharding="fsdp",
            seq_length=8192, micro_batch_size=4, num_microbatches=8, recompute="full",
            dropout=False, metric="allocated")
    est = training_memory(j.model, j.layout, j.training, allowances={"workspace": 0, "nccl": 0,
                                                                      "fragmentation": 0})
    phases = dict(est.phase_bytes)
    sp_ = stage_parameters(j.model, t=8, p=8, stage=est.stage, first_stage_layers=15,
                           last_stage_layers=15)
    n_stage = sp_.tp // 8 + sp_.replicated                 # the stage on one GPU
    layer = layer_parameters(j.model)
    n_ll = layer["tp"] // 8 + layer["replicated"]          # one block on one GPU
    assert est.phase == "backward"
    # backward adds the fp32 accumulated gradients (4 N_stage) and, at the last micro-batch,
    # one block's bf16 gradient (2 N_ll) and its fp32 reduce-scatter input and output; the
    # forward has no sharded gradient yet (4 N_stage / 8: zero_grad(set_to_none) at the
    # step's start, the reduce-scatters make them); nor the full-recompute working set (one
    # block rematerialised, in the blocks' backward only)
    ws = int(next(t_ for t_ in est.total.terms if t_.key == "recompute_working_set")
             .evaluate(est.values))
    assert phases["backward"] - phases["forward"] == (4 * n_stage + 2 * n_ll + 4 * n_ll * 9 // 8
                                                      + 4 * n_stage // 8 + ws)
    # the working set is what torch's checkpoint rematerialises: ONE block's forward of one
    # micro-batch, i.e. the same job without recompute holds it once per layer of the stage
    # (15 on torchtitan's split) and per micro-batch in flight (p = 8 under 1F1B on stage 0)
    none = training_memory(job("llama3-405b", framework="torchtitan", t=8, p=8, d=8,
                               sharding="fsdp", seq_length=8192, micro_batch_size=4,
                               num_microbatches=8, recompute="none", dropout=False))
    assert none.stage == est.stage == 0
    assert ws > 0 and ws * 15 * 8 == none.breakdown()["layer_activations"]


def test_cli_framework_torchtitan(capsys):
    # memsym's own options: --framework torchtitan is the job torchtitan launches (FSDP2 with
    # PP on its own split); Megatron's rules refuse the same command, exit 2, one line
    base = ["estimate", "llama3-405b", "--tp", "8", "--pp", "8", "--dp", "8", "--sharding",
            "fsdp", "--seq-length", "8192", "--micro-batch-size", "1", "--num-microbatches",
            "8", "--recompute", "full", "--sequence-parallel", "--json"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "p=8 must divide the layers" in err
    assert main(base + ["--framework", "torchtitan"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["training"]["framework"] == "torchtitan"
    assert any("[15, 16, 16, 16, 16, 16, 16, 15]" in n for n in data["notes"])
    assert data["phases"]["peak"] == "backward"


def test_each_framework_runs_its_own_sharding():
    # torchtitan: FSDP2 (data_parallel_shard_degree) or replicas; DeepSpeed: ZeRO stages 0-3
    with pytest.raises(InvalidValueError, match="torchtitan shards with fsdp or ddp"):
        job("llama3-8b", framework="torchtitan", sharding="distributed-optimizer", seq_length=4096)
    with pytest.raises(InvalidValueError, match="deepspeed shards with ddp or zero1"):
        job("llama3-8b", framework="deepspeed", sharding="fsdp", seq_length=4096)
    assert job("llama3-8b", framework="deepspeed", sharding="zero3", seq_length=4096)
    # not given: the framework's own default (torchtitan FSDP2, DeepSpeed stage 0)
    assert job("llama3-8b", framework="torchtitan", seq_length=4096).training.sharding == "fsdp"
    assert job("llama3-8b", framework="deepspeed", seq_length=4096).training.sharding == "ddp"


def test_torchtitan_builds_no_dropout():
    # torchtitan's models have no dropout layers (models/llama3/model.py; models/attention.py
    # calls scaled_dot_product_attention without dropout_p): a torchtitan job keeps no masks
    # by default, says so, and refuses to be given them; Megatron keeps its 0.1 dropouts
    from memsym.search import make_space

    j = job("llama3-8b", framework="torchtitan", seq_length=4096)
    assert j.training.dropout is False
    assert any("torchtitan's models have no dropout" in n for n in j.notes)
    assert job("gpt3-175b", seq_length=2048).training.dropout is True
    assert job("llama3-8b", seq_length=4096).training.dropout is False   # its recipe
    with pytest.raises(InvalidValueError, match="no dropout layers"):
        job("llama3-8b", framework="torchtitan", seq_length=4096, dropout=True)
    assert make_space("llama3-8b", "h100-80gb", framework="torchtitan").dropout is False
    assert make_space("gpt3-175b", "h100-80gb").dropout is True
    assert make_space("llama3-8b", "h100-80gb").dropout is False   # its recipe
    with pytest.raises(InvalidValueError, match="no dropout layers"):
        make_space("llama3-8b", "h100-80gb", framework="torchtitan", dropout=True)


def test_torchtitan_dropout_refused_on_the_command_line(capsys):
    for cmd in ("estimate", "search"):
        args = [cmd, "llama3-8b", "--gpu", "h100-80gb", "--framework", "torchtitan"]
        args += ["--hidden-dropout", "0.1"] if cmd == "estimate" else ["--gpus", "8",
                                                                        "--dropout"]
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and "no dropout layers" in err


def test_torchtitan_tensor_parallelism_is_sequence_parallel():
    # torchtitan's apply_tp shards the norms and block outputs over the sequence, with no
    # switch: a torchtitan job with t > 1 is counted with sequence parallelism, and says so;
    # the rule names it for a layout given without
    from memsym import rules
    from memsym.model import preset
    from memsym.training import Layout

    j = job("llama3-8b", t=2, d=4, seq_length=8192, framework="torchtitan")
    assert j.layout.sequence_parallel is True
    assert any("torchtitan's tensor parallelism is sequence parallel" in n for n in j.notes)
    k = rules.knobs(Layout(t=2, d=4), j.training)
    assert bool(rules.RULES["torchtitan-tp-sp"].test(preset("llama3-8b"), k))
    assert not job("llama3-8b", t=2, d=4, seq_length=8192).layout.sequence_parallel


def test_v_placement_is_torchs_v_schedules_only():
    # torch's ZBVZeroBubble / DualPipeV place stages r and 2p-1-r on rank r, two per rank
    # (stage_index_to_group_rank "v"); memsym accepts the placement only there
    base = dict(p=2, v=2, d=4, seq_length=4096, num_microbatches=4, stage_placement="v")
    j = job("llama3-8b", framework="torchtitan", **base)
    assert j.training.stage_placement == "v"
    # the V split: rank 0 holds stages 0 and 3 ([8, 9, 8, 7] layers), 15 layers
    assert (j.layout.first_stage_layers, j.layout.last_stage_layers) == (15, 17)
    for bad, why in ((dict(framework="megatron", sharding="distributed-optimizer"),
                      "framework not torchtitan"),
                     (dict(framework="torchtitan", v=4, num_microbatches=8), "v=4"),
                     (dict(framework="torchtitan", schedule="gpipe"), "GPipe")):
        with pytest.raises(InvalidValueError, match=why):
            job("llama3-8b", **{**base, **bad})
    with pytest.raises(InvalidValueError, match="mixes dense and MoE layers"):
        job("deepseek-v3", framework="torchtitan", t=8, e=8, **{**base, "d": 8})
    with pytest.raises(UnknownNameError, match="stage placement"):
        job("llama3-8b", framework="torchtitan", **{**base, "stage_placement": "zigzag"})


def test_v_placement_puts_the_output_and_the_loss_on_rank_0():
    # rank 0 of a V pipeline runs the last stage: the logits, the loss's transients and the
    # output layer's weights are its, not the last rank's
    from memsym.training import phase_transients, stage_activations

    kw = dict(p=2, v=2, d=4, seq_length=4096, num_microbatches=4, framework="torchtitan")
    v_ = job("llama3-8b", stage_placement="v", **kw)
    loop = job("llama3-8b", **kw)
    for j, holder in ((v_, 0), (loop, 1)):
        for rank in (0, 1):
            keys = {t_.key for t_ in stage_activations(j.model, j.layout, j.training, rank)}
            loss = {t_.key for t_ in phase_transients(j, rank)["forward"]}
            assert ("output_activations" in keys) == (rank == holder), (holder, rank)
            assert bool(loss & {"logits_16bit", "logits_fp32"}) == (rank == holder), loss


def test_named_choices_are_kept_in_their_canonical_spelling():
    # choose() matches names case-insensitively: the job must then hold the canonical name,
    # since the rules and the step time compare the field with it ("GPipe" was priced as
    # 1F1B by the step time and escaped rule gpipe-chunks; "V" left the output on the last rank)
    from memsym.timing.step import step_time

    kw = dict(p=2, d=4, seq_length=4096, global_batch_size=64)
    j = job("llama3-8b", schedule="GPipe", **kw)
    assert j.training.schedule == "gpipe"
    with pytest.raises(InvalidValueError, match="GPipe runs one stage per rank"):
        job("llama3-8b", schedule="GPIPE", v=2, **kw)
    v_ = job("llama3-8b", framework="TorchTitan", stage_placement=" V ", v=2, **kw)
    assert (v_.training.framework, v_.training.stage_placement) == ("torchtitan", "v")
    raw = Training(**{**j.training.__dict__, "schedule": "GPipe"})
    assert step_time(j.model, j.layout, raw, "h100-80gb").assumptions["settings"].schedule \
        == "gpipe"


def test_positions_bound_the_sequence_only_where_the_framework_does():
    # Megatron-LM asserts max_position_embeddings >= seq_length; a transformers model under
    # DeepSpeed computes RoPE's angles for any position (LlamaRotaryEmbedding.forward), and
    # only a learned table (GPT-2's wpe) bounds the sequence there
    import dataclasses

    from memsym.model import resolve_model

    llama = resolve_model("llama2-7b")     # RoPE, 4096 positions
    with pytest.raises(InvalidValueError, match="exceeds max_position_embeddings"):
        job(llama, d=8, seq_length=8192)
    assert job(llama, framework="deepspeed", d=8, seq_length=8192).training.seq_length == 8192
    learned = dataclasses.replace(llama, position_embedding_type="learned_absolute")
    with pytest.raises(InvalidValueError, match="exceeds max_position_embeddings"):
        job(learned, framework="deepspeed", d=8, seq_length=8192)


# --- the quantized-parameter flags (issue 31): Megatron-LM d98e8a64dd validate_args -----------
# arguments.py:1099-1105: --fp4-format and --fp8-format exclude each other, and
# --fp4-param-gather must be used together with --fp4-format; transformer_config.py:1566-1567:
# fp8_param (--fp8-param-gather) must be used together with fp8 mode.
@pytest.mark.parametrize("flags, rule, needle", [
    (("--precision", "bf16", "--fp4-param-gather"), "fp4-param-gather-format",
     "fp4_param_gather needs precision fp4, not bf16"),
    (("--precision", "fp8", "--fp4-param-gather"), "fp4-param-gather-format",
     "fp4_param_gather needs precision fp4, not fp8"),
    (("--precision", "bf16", "--fp8-param-gather"), "fp8-param-gather-format",
     "fp8_param_gather needs precision fp8, not bf16"),
    (("--precision", "fp4", "--fp4-param-gather", "--fp8-param-gather"), "fp4-fp8-param-gather",
     "cannot be used together"),
])
def test_quantized_parameter_flags_are_refused_in_one_line(capsys, flags, rule, needle):
    code, out, err = cli(capsys, "estimate", "llama3-8b", "--dp", "8", "--seq-length", "8192",
                         *flags)
    assert code == 2 and not out
    assert err.count("\n") == 1 and needle in err, err
    assert rule in rules.LAUNCH


def test_quantized_parameter_flags_pass_with_their_format():
    k = {"precision": "fp4", "fp4_param_gather": True, "fp8_param_gather": False}
    assert not rules.broken(None, k, ["fp4-param-gather-format", "fp4-fp8-param-gather",
                                      "fp8-param-gather-format"])
    k = {"precision": "fp8", "fp4_param_gather": False, "fp8_param_gather": True}
    assert not rules.broken(None, k, ["fp4-param-gather-format", "fp4-fp8-param-gather",
                                      "fp8-param-gather-format"])


def test_biased_experts_run_with_expert_tp_one_only():
    """transformer_config.py:2612-2615 (Megatron-core d98e8a64dd): "Bias in Moe is only
    supported when ETP==1".  GPT-OSS 120B's experts carry biases (add_bias_linear): at t = 2
    the default t_e = t is refused, t_e = 1 is taken (Megatron-Bridge's GPT-OSS recipes set
    expert_tensor_parallel_size = 1 beside TP 2, recipes/gpt_oss/h100/gpt_oss.py:58-65 at
    067f987df0); torchtitan has no such rule.  A search offers only the t_e = 1 rows."""
    from memsym.search import search
    with pytest.raises(InvalidValueError, match="--expert-tensor-parallel-size 1"):
        job("gpt-oss-120b", t=2, e=8, d=8, sequence_parallel=True)
    assert job("gpt-oss-120b", t=2, t_e=1, e=8, d=8, sequence_parallel=True).layout.expert_tp == 1
    res = search("gpt-oss-120b", "h100-80gb", 16, tp=[2], pp=[1], cp=[1], vpp=[1],
                 micro_batch_sizes=[1], global_batch_size=64, sharding=["distributed-optimizer"])
    # by hand: e in the 8 divisors of 128 experts x t_e in {2, 1}; at t_e = 1, e t_e | t c d
    # = 16 leaves e in 1, 2, 4, 8, 16 (5 pass); the bias rule breaks all 8 rows at t_e = 2
    # (each rule counts every row it breaks)
    assert {res.row(i)["t_e"] for i in range(len(res))} == {1}
    assert (res.raw, res.valid, res.excluded["moe-bias-etp"]) == (16, 5, 8)
