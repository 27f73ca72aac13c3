"""Memory estimates of hybrid Mamba / attention models (issue 32, deliverable 4).

Nemotron-H-8B (the config of ``tests/test_hf_hybrid.py``: 24 Mamba-2 layers, 4 attention
layers, 24 MLP layers, one pre-norm each, as Megatron-core's ``hybrid_override_pattern``
counts layers) at s = 8192, b = 1.  The expectations are written out here from the module
shapes (the Mamba-2 mixer: in_proj to z, x, B, C, dt, conv1d over x, B, C, dt_bias, A_log, D,
a gated RMSNorm, out_proj; Dao & Gu 2024 §7) and from the tensors each part saves for its
backward (Korthikanti §4.1 for attention and MLP, mamba_ssm's fused kernel for Mamba, see
``memsym/terms/mamba.py``), never copied from memsym's output.
"""

from __future__ import annotations

import pytest
import sympy as sp_

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.model import from_hf_config, parameter_count, stage_parameters
from memsym.training import job_memory

from hf_oracle import write_config
from test_hf_hybrid import NEMOTRON_H_8B, SMALL
from in_process import estimate

PATTERN = NEMOTRON_H_8B["hybrid_override_pattern"]
H, V, F = 4096, 131072, 21504                  # hidden, vocabulary (a multiple of 128), MLP
D_SSM, G, N, HEADS = 128 * 64, 8, 128, 128     # Mamba: inner size, groups, state, heads
A, KV, D_H = 32, 8, 128                        # attention heads, KV heads, head size
S = 8192

# one layer's parameters by module (no biases; conv1d with bias; RMSNorm: h weights)
MAMBA = (H * (2 * D_SSM + 2 * G * N + HEADS) + (D_SSM + 2 * G * N) * 4 + (D_SSM + 2 * G * N)
         + 3 * HEADS + D_SSM + D_SSM * H + H)
ATTENTION = H * A * D_H + 2 * H * KV * D_H + A * D_H * H + H
MLP = 2 * H * F + H                            # up and down (squared ReLU, not gated)
BY_CHAR = {"M": MAMBA, "*": ATTENTION, "-": MLP}


def _layers(chars: str) -> int:
    return sum(BY_CHAR[ch] for ch in chars)


@pytest.fixture(scope="module")
def nemotron(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("nh"), NEMOTRON_H_8B)


def test_the_pattern_is_counted_as_written():
    assert (PATTERN.count("M"), PATTERN.count("*"), PATTERN.count("-")) == (24, 4, 24)


def test_one_stage_holds_what_transformers_builds(nemotron):
    arch = from_hf_config(nemotron)
    whole = _layers(PATTERN) + 2 * V * H + H   # embedding, output layer, final norm
    assert parameter_count(arch) == whole      # transformers' count (tests/test_hf_hybrid.py)
    assert stage_parameters(arch, pad_vocab=False).total == whole


@pytest.mark.parametrize("p", [2, 4])
def test_each_pipeline_stage_holds_its_share_of_the_pattern(nemotron, p):
    # Megatron-core (hybrid_layer_allocation.select_pipeline_segment, no '|' in the pattern)
    # gives rank r the characters r L/p .. (r + 1) L/p - 1
    n = len(PATTERN) // p
    j = job(nemotron, seq_length=S, micro_batch_size=1, pp=p, global_batch_size=8)
    for stage in range(p):
        chars = PATTERN[stage * n:(stage + 1) * n]
        by_hand = _layers(chars) + (V * H if stage == 0 else 0) + (V * H + H if stage == p - 1
                                                                     else 0)
        weights = job_memory(j, stage=stage).grouped()["weights"]
        assert weights == 2 * by_hand            # bf16 weights, t = 1


def test_tensor_parallelism_splits_the_mamba_mixer(nemotron):
    # t = 2: every weight but the norms (replicated) is split, the vocabulary included
    j = job(nemotron, seq_length=S, micro_batch_size=1, tp=2, global_batch_size=8)
    norms = len(PATTERN) * H + H
    split = _layers(PATTERN) + 2 * V * H + H - norms
    assert split % 2 == 0
    by_hand = split // 2 + norms
    assert job_memory(j, stage=0).grouped()["weights"] == 2 * by_hand


def _layer_bytes(t: int, sp: bool, bx=2) -> dict:
    """Bytes each layer kind keeps for its backward, per micro-batch (s = 8192, b = 1, flash
    attention, hidden and attention dropout 0.1 kept as 1-byte masks, RMSNorm).  ``bx``: the
    bytes per element of a GEMM input saved for the weight gradient (2 in bf16; Transformer
    Engine FP8 saves the quantized input, 1 byte, MXFP8 1 + 1/32: linear.py saved_inputmat,
    layernorm_linear.py ln_out, columnwise only)."""
    tok, sig = sp_.Integer(S), (t if sp else 1)       # exact: SymPy rationals
    stats = 4 * tok / sig                            # fp32 rstd of one RMSNorm per token
    mamba = (2 * tok * H / sig + bx * tok * H / sig  # norm input, in_proj input
             + 2 * tok * (2 * D_SSM + 2 * G * N + HEADS) / t   # zxBCdt (kernel input)
             + 2 * tok * D_SSM / t                   # scan output (out_x)
             + (2 * tok * D_SSM + 4 * G * tok) / t   # gated RMSNorm input and rstd
             + bx * tok * D_SSM / t                  # out_proj input
             + tok * H / sig + stats)                # dropout mask, the fused norm's rstd
    # under FP8 the fused attention keeps its own 16-bit output beside the FP8 copy
    proj = bx + (2 if bx != 2 else 0)
    attention = (2 * tok * H / sig + stats + bx * tok * H / sig    # norm in, rstd, QKV input
                 + 2 * tok * (A + KV) * D_H / t + 2 * tok * KV * D_H / t   # Q, K and V
                 + 4 * A * tok / t                   # flash: logsumexp per row and head
                 + proj * tok * A * D_H / t + tok * H / sig)       # proj input, dropout mask
    mlp = (2 * tok * H / sig + stats + bx * tok * H / sig          # norm in, rstd, fc1 input
           + 2 * tok * F / t + bx * tok * F / t + tok * H / sig)   # fc1 out, fc2 in, mask
    return {"M": mamba, "*": attention, "-": mlp}


@pytest.mark.parametrize("t,sp", [(1, False), (2, True), (2, False)])
def test_the_activations_sum_the_per_layer_terms(nemotron, t, sp):
    j = job(nemotron, seq_length=S, micro_batch_size=1, tp=t, sequence_parallel=sp,
            global_batch_size=8)
    per = _layer_bytes(t, sp)
    by_hand = sum(per[ch] for ch in PATTERN)         # p = 1: one micro-batch in flight
    assert job_memory(j, stage=0).activations()["layer_activations"] == by_hand


@pytest.mark.parametrize("recipe,bx", [(None, 1), ("mxfp8", 1 + sp_.Rational(1, 32))])
def test_fp8_saves_the_mamba_projections_inputs_quantized(nemotron, recipe, bx):
    # in_proj (TELayerNormColumnParallelLinear) and out_proj (TERowParallelLinear) keep their
    # inputs in FP8 as the attention's and MLP's linears do; zxBCdt, out_x, the gated norm's
    # input stay 16-bit (no GEMM input)
    j = job(nemotron, seq_length=S, micro_batch_size=1, precision="fp8", fp8_recipe=recipe,
            global_batch_size=8)
    per = _layer_bytes(1, False, bx)
    by_hand = sum(per[ch] for ch in PATTERN)
    assert job_memory(j, stage=0).activations()["layer_activations"] == by_hand


def test_the_first_of_two_stages_holds_its_layers_for_two_micro_batches(nemotron):
    # 1F1B: stage 0 of 2 keeps min(p, m) = 2 micro-batches in flight, stage 1 one
    j = job(nemotron, seq_length=S, micro_batch_size=1, pp=2, global_batch_size=8)
    per = _layer_bytes(1, False)
    for stage, inflight in ((0, 2), (1, 1)):
        chars = PATTERN[stage * 26:(stage + 1) * 26]
        got = job_memory(j, stage=stage).activations()["layer_activations"]
        assert got == inflight * sum(per[ch] for ch in chars)


def test_full_recompute_keeps_each_layers_input(nemotron):
    j = job(nemotron, seq_length=S, micro_batch_size=1, recompute="full", global_batch_size=8)
    assert job_memory(j, stage=0).activations()["layer_activations"] == 52 * 2 * S * H


# --------------------------------------------------------------------------------------------
# what stays unmodelled or unlaunchable, refused in one line
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("over,match", [
    ({"n_groups": 1}, "must divide the Mamba groups"),
    ({"mamba_num_heads": 129, "mamba_head_dim": 64}, "must divide the Mamba heads"),
])
def test_megatron_splits_mamba_heads_and_groups_over_tp(tmp_path, over, match):
    path = write_config(tmp_path, {**NEMOTRON_H_8B, **over})
    with pytest.raises(InvalidValueError, match=match) as err:
        job_memory(job(path, seq_length=S, micro_batch_size=1, tp=2, global_batch_size=8))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kw,match", [
    (dict(pp=2, vpp=2), "no virtual pipeline stages"),
    (dict(cp=2), "context parallelism"),
])
def test_unmodelled_layouts_are_refused(nemotron, kw, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        job_memory(job(nemotron, seq_length=S, micro_batch_size=1, global_batch_size=8, **kw))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name,match", [("jamba", "Mamba-1 mixers"),
                                        ("falcon_h1", "side by side")])
def test_mixers_megatron_does_not_train_are_refused(tmp_path, name, match):
    path = write_config(tmp_path, SMALL[name])
    with pytest.raises(InvalidValueError, match=match) as err:
        job_memory(job(path, seq_length=64, micro_batch_size=1, global_batch_size=8))
    assert "\n" not in str(err.value)



def test_the_cli_estimates_a_hybrid_and_its_step_time(nemotron, capsys):
    code, out, err = estimate(capsys, nemotron, "--seq-length", "8192", "--micro-batch-size", "1")
    assert code == 0 and "activations" in out, err
    # Mamba-2 layers are priced (memsym.timing.ssm): the step time is printed
    code, out, err = estimate(capsys, nemotron, "--seq-length", "8192", "--micro-batch-size", "1",
                              "--gpu", "h100", "--global-batch-size", "8", "--tp", "4",
                              "--world-size", "4")
    assert code == 0, err
    assert "step time:" in out


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_stages_of_every_hybrid_sum_to_transformers_count(tmp_path, name):
    # parameter_count equals transformers' sum(p.numel()) (tests/test_hf_hybrid.py): the
    # stages' layers by kind, the embedding and the head must add up to it, split or not
    arch = from_hf_config(write_config(tmp_path, SMALL[name]))
    for p in [q for q in (1, 2, 3) if arch.num_layers % q == 0]:
        stages = [stage_parameters(arch, p=p, stage=i, pad_vocab=False, tied_output_copy=False)
                  for i in range(p)]
        assert sum(sp.total for sp in stages) == parameter_count(arch)


def test_a_moe_hybrid_with_expert_parallelism(tmp_path):
    # Nemotron-H "M-M*EM" (4 experts): e = 2 holds half the routed experts of the one E layer
    arch = from_hf_config(write_config(tmp_path, SMALL["nemotron_h"]))
    whole = stage_parameters(arch, pad_vocab=False)
    split = stage_parameters(arch, e=2, pad_vocab=False)
    assert whole.experts == split.experts > 0 and split.experts_per_gpu * 2 == whole.experts
    j = job(write_config(tmp_path, SMALL["nemotron_h"], "e"), seq_length=64, micro_batch_size=1,
            ep=2, dp=2, global_batch_size=8)
    assert job_memory(j).activations()["layer_activations"] > 0


def test_lora_on_a_hybrid_is_refused(nemotron):
    with pytest.raises(InvalidValueError, match="LoRA adapters of") as err:
        job_memory(job(nemotron, seq_length=S, micro_batch_size=1, finetune="lora",
                       global_batch_size=8))
    assert "\n" not in str(err.value)


def test_bamba_layers_hold_a_mixer_and_a_gated_mlp(tmp_path):
    # Bamba-9B (tests/test_hf_hybrid.py): every layer a mixer and a SwiGLU MLP, two pre-norms;
    # attention at layers 9, 18, 27 (a = 32, g = 8, d_h = 128), Mamba-2 elsewhere (d_inner =
    # 2h = 8192, one group, N = 128, 128 heads); f = 14336; s = 4096, t = 1
    from test_hf_hybrid import BAMBA_9B

    tok, h, f = sp_.Integer(4096), 4096, 14336
    mlp = 2 * tok * h + 4 * tok + 2 * tok * h + 4 * tok * f + 2 * tok * f + tok * h
    mamba = (4 * tok * h + 2 * tok * (2 * 8192 + 2 * 128 + 128) + 2 * tok * 8192
             + 2 * tok * 8192 + 4 * tok + 2 * tok * 8192 + tok * h + 4 * tok)
    attention = (2 * tok * h + 4 * tok + 2 * tok * h + 2 * tok * 40 * 128 + 2 * tok * 8 * 128
                 + 4 * 32 * tok + 2 * tok * 32 * 128 + tok * h)
    j = job(write_config(tmp_path, BAMBA_9B), seq_length=4096, micro_batch_size=1,
            global_batch_size=8)
    got = job_memory(j, stage=0).activations()["layer_activations"]
    assert got == 29 * (mamba + mlp) + 3 * (attention + mlp)


def test_the_estimate_takes_the_most_loaded_stage(nemotron):
    # stages of different make-up (Mamba, attention, MLP counts): the estimate's stage is the
    # largest of all four, found among the candidate stages
    j = job(nemotron, seq_length=S, micro_batch_size=1, pp=4, global_batch_size=16)
    each = [job_memory(j, stage=i).bytes_total for i in range(4)]
    assert job_memory(j).bytes_total == max(each)


def test_the_hybrid_rules_mask_a_grid_as_they_refuse_one_job(nemotron):
    import numpy as np

    from memsym import rules
    from memsym.model import resolve

    path = write_config(nemotron.parent.parent, {**NEMOTRON_H_8B, "n_groups": 4}, "g4")
    x = resolve(from_hf_config(path))
    names = ["tp-mamba-heads", "tp-mamba-groups", "hybrid-pipeline", "hybrid-cp"]
    grid = {"t": np.array([1, 2, 4, 8]), "p": np.array([1, 2, 2, 2]),
            "v": np.array([1, 1, 2, 1]), "c": np.array([1, 2, 1, 1]), "pipeline_layout": False}
    masks = rules.masks(x, grid, names)
    for i in range(4):
        one = {key: (val[i] if hasattr(val, "shape") else val) for key, val in grid.items()}
        assert [n for n in names if masks[n][i]] == rules.broken(x, one, names)
    assert masks["tp-mamba-groups"].tolist() == [False, False, False, True]   # 4 groups
    assert masks["hybrid-pipeline"].tolist() == [False, False, True, False]
    # the activation terms refuse a Mamba mixer at c > 1 (memsym.terms.mamba): so does the grid
    assert masks["hybrid-cp"].tolist() == [False, True, False, False]


def test_search_emits_no_layout_the_estimate_refuses_under_cp(nemotron):
    # every c > 1 layout of a Mamba hybrid is refused by the estimate; the search's grid
    # excludes them by the same rule, and its ranked rows keep c = 1
    from memsym.search import search

    with pytest.raises(InvalidValueError, match="context parallelism") as err:
        job_memory(job(nemotron, seq_length=S, micro_batch_size=1, global_batch_size=8, cp=2))
    assert "\n" not in str(err.value)
    res = search(str(nemotron), "h100-80gb", 8, global_batch_size=8, seq_length=S,
                 recompute=["full"], sharding=["distributed-optimizer"],
                 sequence_parallel=[False], uneven=False)
    assert res.excluded["hybrid-cp"] > 0
    assert len(res.columns["c"]) and set(res.columns["c"].tolist()) == {1}


# Megatron-LM's own hybrid example (examples/mamba/train.sh at d98e8a64dd, MODEL_SCALE 8B), as
# its script launches it: pretrain_hybrid.py, TP 4 with SP, GQA 32/8, h 4096, ffn 4h (Megatron's
# default), GeLU not gated, Megatron's Mamba defaults (state 128, head 64, 8 groups, expand 2).
MAMBA_EXAMPLE = """torchrun --nproc_per_node 8 ../../pretrain_hybrid.py \\
  --tensor-model-parallel-size 4 --sequence-parallel --pipeline-model-parallel-size 1 \\
  --use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce \\
  --untie-embeddings-and-output-weights --position-embedding-type none \\
  --hybrid-layer-pattern M-M-M--M-M*-M-M-M-M--M*-M-M-M-M-M*--M-M-M-M-M*-M--M-M-M- \\
  --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 \\
  --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 4 --global-batch-size 8 \\
  --disable-bias-linear --normalization RMSNorm --bf16 --attention-dropout 0.0 \\
  --hidden-dropout 0.0 --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model /tok/model
"""


def test_megatron_mamba_example_is_read_as_pretrain_hybrid(capsys, tmp_path):
    import json

    script = tmp_path / "train.sh"
    script.write_text(MAMBA_EXAMPLE)
    code, out, err = estimate(capsys, "--launch-script", script, "--vocab-size", "256000",
                              "--gpu", "h100-80gb", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["read_as"].startswith("Megatron-LM arguments (pretrain_hybrid.py")
    t, h, v, f = 4, 4096, 256000, 4 * 4096
    d_ssm, g, n, heads = 2 * h, 8, 128, 2 * h // 64
    # one TP rank (megatron/core/ssm/mamba_mixer.py:263-437): in_proj, conv1d (+bias), dt_bias,
    # A_log, D and the gated norm all split over TP; the pre-norm fused into in_proj is whole
    mamba = ((2 * d_ssm + 2 * g * n + heads) * h + 5 * (d_ssm + 2 * g * n) + 3 * heads
             + d_ssm + d_ssm * h) // t + h
    mlp = 2 * h * f // t + h
    attention = (h * 32 * 128 + 2 * h * 8 * 128 + 32 * 128 * h) // t + h
    rank = 24 * mamba + 28 * mlp + 4 * attention + 2 * v * h // t + h
    assert got["bytes"]["weights"] == 2 * rank == 4_327_608_832
    whole = (24 * (mamba - h) * t + 24 * h + 28 * ((mlp - h) * t + h)
             + 4 * ((attention - h) * t + h) + 2 * v * h + h)
    assert got["params"] == whole == 8_654_517_248


def test_a_pattern_beside_moe_layer_freq_sets_the_layers(capsys):
    # Megatron-LM d98e8a64dd validate_args (arguments.py:787-797): --hybrid-layer-pattern
    # sets num_layers (4 here, not Qwen3-30B-A3B's 48) and its E symbols are the MoE layers;
    # the hybrid model never reads --moe-layer-freq, so a list of another length than the
    # model's 48 layers is no error and changes nothing
    import json

    base = ("qwen3-30b-a3b", "--world-size", "8", "--expert-model-parallel-size", "8",
            "--hybrid-layer-pattern", "*E*E", "--json")
    code, out, err = estimate(capsys, *base, "--moe-layer-freq", "[1,0,1,0]")
    assert code == 0, err
    with_freq = json.loads(out)
    assert any("moe_layer_freq (1, 0, 1, 0) ignored" in n for n in with_freq["notes"])
    code, out, err = estimate(capsys, *base)
    assert code == 0, err
    assert json.loads(out)["bytes"] == with_freq["bytes"]


def test_a_pattern_over_a_preset_says_which_layers_are_priced(capsys):
    # arguments.py:787-797 at d98e8a64dd: the pattern's count replaces --num-layers (with a
    # warning); Llama-3-8B's sizes (h 4096, 8 KV heads of 128, f 14336, vocabulary 128256,
    # untied) over "*-*-*-*-": 4 attention layers (input norm, Q, K, V, O) and 4 MLP layers
    # (pre-MLP norm, gate, up, down), the two embeddings and the final norm
    import json

    code, out, err = estimate(capsys, "llama3-8b", "--hybrid-layer-pattern", "*-*-*-*-",
                              "--world-size", "8", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert "--hybrid-layer-pattern sets 8 layers: the model's 32 are not the ones priced" \
        in " ".join(data["notes"])
    h, f, kv, vocab = 4096, 14336, 8 * 128, 128256
    attention = h + h * h + 2 * h * kv + h * h
    mlp = h + 3 * h * f
    assert data["params"] == 2 * vocab * h + 4 * attention + 4 * mlp + h


@pytest.mark.parametrize("command", ["estimate", "min-gpus"])
def test_muon_settings_under_adam_are_noted(capsys, command):
    # Megatron-core reads --muon-tp-mode / --muon-nesterov only to build Muon
    # (optimizer/emerging_optimizers.py:554-561 at d98e8a64dd): ignored under the default Adam
    from memsym.cli import main

    extra = ["--world-size", "8"] if command == "estimate" else []
    # estimate's exit status 1: the job does not fit (the note is printed all the same)
    assert main([command, "llama3-8b", "--gpu", "h100-80gb", "--muon-tp-mode", "blockwise",
                 "--muon-nesterov", *extra]) in (0, 1)
    out = " ".join(capsys.readouterr().out.split())
    assert ("muon_tp_mode (--muon-tp-mode), muon_nesterov (--muon-nesterov) have effect only "
            "with optimizer muon") in out
    assert main([command, "llama3-8b", "--gpu", "h100-80gb", "--optimizer", "muon",
                 "--muon-nesterov", *extra]) in (0, 1)
    assert "effect only with optimizer muon" not in capsys.readouterr().out
