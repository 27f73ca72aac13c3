"""Megatron-LM's --fp32-residual-connection and --softmax-type, counted from the source (issues
32, 30): the bytes each changes, by hand, for Llama 3 8B (h = 4096, 32 layers of 32 heads) at
s = 4096, b = 1.

Megatron-LM d98e8a64dd (``megatron/``), Transformer Engine d0067d0da6 (``transformer_engine/
pytorch/``); every expectation below is an arithmetic of the source's shapes, not memsym's
output.

--fp32-residual-connection: the embedding output, each layer's residual and bias-dropout-add
output are fp32 (core/models/common/embeddings/language_model_embedding.py:139-140,
core/transformer/transformer_layer.py:730-731, 890-891, core/fusions/fused_bias_dropout.py:
29-36), and the pipeline's dtype turns fp32 (core/transformer/transformer_config.py:1419-1430;
p2p receive buffers dtype=config.pipeline_dtype, core/pipeline_parallel/p2p_communication.py:
335-349).  The saved tensors of a layer do not change: TELayerNormColumnParallelLinear casts
its input to the 16-bit layer_norm_weight dtype first (core/extensions/transformer_engine.py:
1592-1597) and saves that cast, the final norm (TE's RMSNorm op) casts and saves the cast
(ops/basic/rmsnorm.py:188-209).  What changes: a stage input received in fp32 is kept by the
schedule for its backward (core/pipeline_parallel/schedules.py:2366, 2421) beside the first
layer's 16-bit copy, 4 s b h / (t under SP) bytes per received micro-batch in flight; and under
full recompute each checkpoint saves its fp32 hidden states (core/tensor_parallel/random.py:628),
2 s b h / sigma more than a 16-bit one.
"""

from __future__ import annotations

import json

import pytest

from in_process import run
from memsym.errors import InvalidValueError
from memsym.model import parameter_count
from memsym.readers.jobs import megatron_job
from memsym.readers.megatron import read_megatron_args, read_megatron_overrides
from memsym.training import job_memory

S, H, LAYERS, HEADS = 4096, 4096, 32, 32
LLAMA3_8B = ["--num-layers", LAYERS, "--hidden-size", H, "--num-attention-heads", HEADS,
             "--group-query-attention", "--num-query-groups", 8, "--ffn-hidden-size", 14336,
             "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
             "--disable-bias-linear", "--untie-embeddings-and-output-weights",
             "--vocab-size", 128256, "--tokenizer-type", "NullTokenizer", "--seq-length", S,
             "--max-position-embeddings", 8192, "--micro-batch-size", 1,
             "--global-batch-size", 16, "--bf16", "--hidden-dropout", 0,
             "--attention-dropout", 0, "--use-distributed-optimizer"]
WORDS = [str(w) for w in LLAMA3_8B]


def _stages(extra: list) -> tuple:
    """Each pipeline stage's total [bytes] as ``torch.cuda.max_memory_allocated`` would read
    it (metric allocated: no allocator margin, so an activation difference shows whole)."""
    job = megatron_job(read_megatron_args(WORDS + extra), metric="allocated")
    return job_memory(job).stage_bytes


def _difference(extra: list) -> list:
    return [b - a for a, b in zip(_stages(extra), _stages(extra + ["--fp32-residual-connection"]))]


# --- --fp32-residual-connection ----------------------------------------------------------------

def test_fp32_residual_keeps_the_received_stage_input_in_fp32():
    # p = 2, 1F1B: the last stage holds one micro-batch in flight, received from stage 0:
    # 4 bytes x s b h; stage 0 receives nothing (its embedding's fp32 output is cast by the
    # first layer's fused norm and not kept)
    assert _difference(["--pipeline-model-parallel-size", "2", "--world-size", "2"]) \
        == [0, 4 * S * H]


def test_fp32_residual_stage_input_is_sequence_sharded_under_sp():
    # t = 2 with SP: the p2p tensor is [s/t, b, h] (the hidden states sharded over t)
    assert _difference(["--pipeline-model-parallel-size", "2", "--tensor-model-parallel-size",
                        "2", "--sequence-parallel", "--world-size", "4"]) == [0, 4 * S * H // 2]


def test_fp32_residual_interleaved_counts_each_received_chunk_pass():
    # p = 2, v = 2 (8 layers a chunk), micro-batch group p: rank 0 runs chunk0 mb0, mb1,
    # chunk1 mb0, mb1, chunk0 mb2 before its first backward ((p-1)2 + (v-1)p warm-up + 1,
    # schedules.py's interleaved warm-up): 2 of those received (chunk 1); the last rank runs
    # (v-1)p + 1 = 3, all received from rank 0's chunks
    assert _difference(["--pipeline-model-parallel-size", "2", "--world-size", "2",
                        "--num-layers-per-virtual-pipeline-stage", "8"]) \
        == [2 * 4 * S * H, 3 * 4 * S * H]


def test_fp32_residual_full_recompute_checkpoints_fp32_hidden_states():
    # uniform 1: each of a stage's 16 layers is a checkpoint whose saved input is fp32, 2 s b h
    # more than the 16-bit one; stage 0 holds 2 micro-batches in flight, stage 1 one; the
    # received input is the first checkpoint's argument itself, nothing beside it
    full = ["--pipeline-model-parallel-size", "2", "--world-size", "2", "--recompute-granularity",
            "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    assert _difference(full) == [16 * 2 * 2 * S * H, 16 * 1 * 2 * S * H]


def test_fp32_residual_without_a_pipeline_changes_no_saved_tensor():
    assert _difference(["--world-size", "1"]) == [0]


def test_fp32_residual_needs_16_bit_weights():
    with pytest.raises(InvalidValueError, match="needs --bf16 or --fp16"):
        read_megatron_args([w for w in WORDS if w != "--bf16"] + ["--fp32-residual-connection"])


def test_pasted_command_with_fp32_residual_gives_the_hand_count(capsys):
    pasted = ["estimate", "--json", "--metric", "allocated", "--world-size", 2, "--",
              "pretrain_gpt.py", *WORDS, "--pipeline-model-parallel-size", 2]
    code, base, err = run(capsys, *pasted)
    assert code == 0, err
    code, out, err = run(capsys, *pasted, "--fp32-residual-connection")
    assert code == 0, err
    before, after = (json.loads(x)["stage"]["stage_totals"] for x in (base, out))
    assert [b - a for a, b in zip(before, after)] == [0, 4 * S * H]
    assert not any("fp32-residual" in n for n in json.loads(out)["notes"])


def test_fp32_residual_beside_a_model_and_as_memsym_option(capsys):
    over = read_megatron_overrides(["--fp32-residual-connection"], num_layers=32)
    assert over.options == {"fp32_residual_connection": True} and over.ignored == ()
    argv = ["estimate", "llama3-8b", "--pp", 2, "--seq-length", S, "--micro-batch-size", 1,
            "--metric", "allocated", "--json"]
    _, base, _ = run(capsys, *argv)
    code, out, err = run(capsys, *argv, "--fp32-residual-connection")
    assert code == 0, err
    before, after = (json.loads(x)["stage"]["stage_totals"] for x in (base, out))
    assert [b - a for a, b in zip(before, after)] == [0, 4 * S * H]


# --- --softmax-type --------------------------------------------------------------------------

def test_learnable_softmax_adds_one_parameter_per_head_and_layer():
    # TE DotProductAttention registers softmax_offset = zeros(num_attention_heads // tp_size)
    # (attention/dot_product_attention/dot_product_attention.py:779-784 at d0067d0da6): a per
    # layer in all, a/t per TP rank
    vanilla = megatron_job(read_megatron_args(WORDS + ["--world-size", "1"]))
    sinks = megatron_job(read_megatron_args(WORDS + ["--world-size", "1",
                                                     "--softmax-type", "learnable"]))
    assert parameter_count(sinks.model) - parameter_count(vanilla.model) == HEADS * LAYERS


@pytest.mark.parametrize("t", [1, 2])
def test_learnable_softmax_states_per_rank(t):
    # each parameter of the rank's a/t per layer: bf16 weight (2), fp32 main gradient (4),
    # distributed optimizer at d = 1: fp32 master copy and two Adam moments (12)
    extra = ["--tensor-model-parallel-size", str(t), "--world-size", str(t)]
    before = _stages(extra)
    after = _stages(extra + ["--softmax-type", "learnable"])
    assert [b - a for a, b in zip(before, after)] == [HEADS // t * LAYERS * (2 + 4 + 12)]


def test_pasted_command_with_learnable_softmax_counts_the_sinks(capsys):
    pasted = ["estimate", "--json", "--world-size", 1, "--", "pretrain_gpt.py", *WORDS]
    _, base, _ = run(capsys, *pasted)
    code, out, err = run(capsys, *pasted, "--softmax-type", "learnable")
    assert code == 0, err
    data = json.loads(out)
    assert data["params"] - json.loads(base)["params"] == HEADS * LAYERS
    assert data["ignored"] == [] and not any("softmax" in n for n in data["notes"])


def test_off_by_one_adds_no_parameter_and_keeps_the_fused_attention():
    # off-by-one: a zero tensor, not a parameter (dot_product_attention.py:775-778); cuDNN's
    # fused attention runs it (utils.py:1122-1124 turns only FlashAttention off)
    mj = read_megatron_args(WORDS + ["--softmax-type", "off-by-one"])
    assert "attention_sinks" not in mj.architecture and mj.training["flash_attention"]
    # ... but it is a sink to TE's backend choice (utils.py:1122, softmax_type != "vanilla"):
    # the model carries it, so the rule sinks-cp sees it
    assert mj.architecture["off_by_one_softmax"]


@pytest.mark.parametrize("extra, reason", [
    (["--attention-backend", "flash"], "fused or unfused attention"),
    (["--deterministic-mode", "--attention-backend", "fused"], "deterministic mode"),
])
@pytest.mark.parametrize("kind", ["off-by-one", "learnable"])
def test_a_sink_without_an_attention_backend_is_refused(extra, reason, kind):
    # Transformer Engine's get_attention_backend (utils.py:1122-1155, 1169-1173, 1535-1545):
    # no backend runs the sink there, so Megatron's run stops
    with pytest.raises(InvalidValueError, match=reason):
        read_megatron_args(WORDS + ["--softmax-type", kind] + extra)


def test_a_sink_under_a2a_context_parallelism_is_read():
    mj = read_megatron_args(WORDS + ["--softmax-type", "learnable", "--context-parallel-size",
                                     "2", "--cp-comm-type", "a2a", "--world-size", "2"])
    assert mj.architecture["attention_sinks"] and mj.training["flash_attention"]


def test_a_sink_in_deterministic_mode_runs_the_unfused_attention():
    # utils.py:1535-1545: fused attention off for a sink in deterministic mode; TE's unfused
    # DotProductAttention keeps the s x s softmax (memsym's scores)
    mj = read_megatron_args(WORDS + ["--softmax-type", "learnable", "--deterministic-mode"])
    assert mj.training["flash_attention"] is False
    assert any("unfused attention" in n for n in mj.notes)


def test_fp32_residual_doubles_the_pipeline_p2p_bytes():
    # both directions use config.pipeline_dtype, fp32 (the recv_prev and recv_next buffers,
    # p2p_communication.py:335-349): per micro-batch a [s, b, h] activation forward and its
    # gradient back, 4 bytes an element; m = 16 micro-batches (B 16, b 1, d 1)
    from memsym.job import job
    from memsym.timing.step import step_time

    sent = {}
    for on in (False, True):
        j = job("llama3-8b", pp=2, seq_length=S, micro_batch_size=1, global_batch_size=16,
                fp32_residual_connection=on)
        sent[on] = step_time(j.model, j.layout, j.training, "h100").communication["pp"]["bytes"]
    assert sent == {False: 16 * 2 * 2 * S * H, True: 16 * 2 * 4 * S * H}


@pytest.mark.parametrize("kind", ["learnable", "off-by-one"])
@pytest.mark.parametrize("cp", [["--cp", 2], ["--context-parallel-size", 2]])
def test_sinks_under_p2p_context_parallelism_are_refused_beside_a_model(capsys, kind, cp):
    # memsym's own --cp or the pasted --context-parallel-size beside the MODEL, a learnable or
    # an off-by-one sink: the one rule sinks-cp over the job, one line, exit 2 (TE: FlashAttention
    # off for softmax_type != vanilla, utils.py:1122-1124; fused off under CP but a2a,
    # :1148-1155; unfused runs no CP, :1169-1173); cp_comm_type a2a runs it
    argv = ["estimate", "llama3-8b", "--seq-length", S, "--micro-batch-size", 1, *cp,
            "--softmax-type", kind]
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "cp_comm_type a2a" in err
    assert ("off-by-one" in err) == (kind == "off-by-one")
    code, out, err = run(capsys, *argv, "--cp-comm-type", "a2a")
    assert code == 0, err


@pytest.mark.parametrize("kind", ["learnable", "off-by-one"])
def test_a_pasted_command_with_a_sink_under_p2p_context_parallelism_is_refused(capsys, kind):
    pasted = ["estimate", "--world-size", 2, "--", "pretrain_gpt.py", *WORDS,
              "--softmax-type", kind, "--context-parallel-size", 2]
    code, out, err = run(capsys, *pasted)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "cp_comm_type a2a" in err
    code, out, err = run(capsys, *pasted, "--cp-comm-type", "a2a")
    assert code == 0, err


def test_a_bridge_off_by_one_override_under_p2p_context_parallelism_is_refused(capsys):
    # llama3_8b_pretrain_config's own c = 2 (recipes/llama/h100/llama3.py:235-263 at
    # 067f987df0) with model.softmax_type=off-by-one: the same rule; at c = 1 it runs
    recipe = ["estimate", "--bridge-recipe", "llama3_8b_pretrain_config",
              "model.softmax_type=off-by-one"]
    code, out, err = run(capsys, *recipe)
    assert (code, out) == (2, "") and "off-by-one softmax needs cp_comm_type a2a" in err
    code, out, err = run(capsys, *recipe, "model.context_parallel_size=1")
    assert code == 0, err


def test_the_search_excludes_sinks_under_te_context_parallelism():
    # gpt-oss's sinks: Megatron's default cp_comm_type p2p has no TE backend at c > 1
    # (the rule sinks-cp, over a search grid as over one job); torchtitan's torch CP is not TE's
    import numpy as np

    from memsym import rules
    from memsym.frameworks import FRAMEWORK
    from memsym.job import job
    from memsym.model import preset

    import dataclasses

    from memsym.model import resolve

    x = preset("gpt-oss-120b")
    grid = {"c": np.array([1, 2, 4]), "t": np.array([1, 1, 1])}
    for framework, broken in (("megatron", [False, True, True]), ("torchtitan", [False] * 3)):
        k = dict(grid, te_cp_without_a2a=rules.te_cp_without_a2a(FRAMEWORK[framework], None))
        assert rules.masks(x, k, ["sinks-cp"])["sinks-cp"].tolist() == broken
        # an off-by-one softmax (no sink parameter) is masked alike; vanilla is not
        plain = preset("llama3-8b")
        off = dataclasses.replace(plain, off_by_one_softmax=True)
        assert rules.masks(resolve(off), k, ["sinks-cp"])["sinks-cp"].tolist() == broken
        assert rules.masks(resolve(plain), k, ["sinks-cp"])["sinks-cp"].tolist() == [False] * 3
    assert not rules.te_cp_without_a2a(FRAMEWORK["megatron"], ("a2a", "a2a"))
    with pytest.raises(InvalidValueError, match="cp_comm_type a2a"):
        job("gpt-oss-120b", cp=2, ep=2, seq_length=S, micro_batch_size=1)


# --- the same fields in a Megatron-Bridge recipe (TransformerConfig's, overridden) -----------------
def _bridge(*overrides, world=8):
    from memsym.job import job
    from memsym.readers.bridge import bridge_job_options, read_bridge_recipe

    model, opts, _ = bridge_job_options(read_bridge_recipe(
        "llama3_8b_pretrain_config", list(overrides), world_size=world))
    return job_memory(job(model, metric="allocated", **opts))


def test_bridge_fp32_residual_override_keeps_the_received_stage_input():
    """model.fp32_residual_connection=true is Megatron's flag: at p 2, the last stage keeps its
    received fp32 input beside the 16-bit copy, 4 s b h for each micro-batch in flight (one:
    1F1B's last stage holds min(p - 1 - 1 + 1, m) = 1), the first stage nothing more."""
    base = _bridge("model.pipeline_model_parallel_size=2", "model.context_parallel_size=1")
    fp32 = _bridge("model.pipeline_model_parallel_size=2", "model.context_parallel_size=1",
                   "model.fp32_residual_connection=true")
    s, h = 8192, 4096      # the recipe's sequence (dataset.seq_length), Llama 3 8B's width
    assert [b - a for a, b in zip(base.stage_bytes, fp32.stage_bytes)] == [0, 4 * s * h]


def test_bridge_softmax_type_override_adds_or_removes_the_sinks():
    """model.softmax_type=learnable adds a parameter per head and layer (32 x 32 on Llama 3 8B)
    with its states under the distributed optimizer at d 8: bf16 weight (2 bytes), fp32
    gradient (the recipe's grad_reduce_in_fp32, 4) and fp32 master and moments over d (12 / 8);
    vanilla on GPT-OSS, whose model bridge sets learnable (gpt_oss_bridge.py:86), removes them."""
    from memsym.readers.bridge import bridge_job_options, read_bridge_recipe

    cp1 = "model.context_parallel_size=1"     # a sink runs under a2a context parallelism only
    vanilla = _bridge(cp1)
    sinks = _bridge(cp1, "model.softmax_type=learnable")
    assert sinks.bytes_total - vanilla.bytes_total == 32 * 32 * (2 + 4) + 32 * 32 * 12 // 8
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        "gpt_oss_120b_pretrain_64gpu_h100_bf16_config", ["model.softmax_type=vanilla"]))
    assert opts["attention_sinks"] is False
    with pytest.raises(InvalidValueError, match="model.softmax_type must be one of"):
        _bridge(cp1, "model.softmax_type=sigmoid")
