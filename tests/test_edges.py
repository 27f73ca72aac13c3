"""Edge configurations give finite, sensible answers or a clear refusal (issue 9, part 4).

Expected numbers are derived by hand from the published architectures (Llama 2: Touvron et al.
2023, Table/config: 32 layers, h = 4096, 32 heads, ffn 11008, V = 32000; Mixtral 8x7B: Jiang et
al. 2024: 32 layers, h = 4096, 8 KV heads, 8 experts of ffn 14336, top-2) and from ZeRO §5
(mixed-precision Adam: 2 + 2 + 12 bytes per parameter).
"""

from __future__ import annotations

import json
import math

import pytest
import sympy as sp

import memsym
from memsym import errors
from memsym.cli import main
from memsym.model import parameter_count, preset
from memsym.terms.model_state import byte_widths, model_state
from memsym.training import Layout, Training, training_memory

GB = 10**9
LLAMA7_PARAMS = 6738415616          # Llama-2-7B, Hugging Face model card / config


def finite_positive(x) -> bool:
    x = sp.sympify(x)
    return x.is_finite and x.is_positive and math.isfinite(float(x))


def sensible(est):
    """Finite positive bytes in every term, the total their sum, the stage count right."""
    bd = est.breakdown()
    assert all(sp.sympify(v).is_finite and v >= 0 for v in bd.values()), bd
    assert finite_positive(bd["total"])
    assert bd["total"] == sum(v for k, v in bd.items() if k != "total")
    return bd


def cli_json(capsys, *argv):
    rc = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


# ------------------------------------------------------------------------------------------------
# a single GPU
# ------------------------------------------------------------------------------------------------
def test_single_gpu_model_states_by_hand():
    # one GPU, every scheme degenerates to the unsharded 16 bytes/param (ZeRO §5, N_d = 1)
    vals = dict(N=LLAMA7_PARAMS, d=1, t=1, p=1)
    for scheme in ("ddp", "zero1", "zero2", "zero3", "fsdp"):
        M = model_state(scheme, convention="zero-paper").subs(byte_widths(scheme, convention="zero-paper"))
        assert M.evaluate(vals) == 16 * LLAMA7_PARAMS, scheme


def test_single_gpu_training_total(capsys):
    est = training_memory("llama2-7b", Layout(), Training(seq_length=4096, flash_attention=True,
                                                          recompute="selective"))
    bd = sensible(est)
    assert est.stage == 0 and est.role == "only" and len(est.stage_bytes) == 1
    # model states: the exact parameter count x 2 bytes of weights
    assert bd["weights"] == 2 * LLAMA7_PARAMS
    data = cli_json(capsys, "estimate", "llama2-7b", "--seq-length", "4096", "--world-size", "1",
                    "--use-flash-attn", "--recompute-granularity", "selective")
    assert data["layout"]["world_size"] == 1 and data["bytes"]["total"] > 16 * LLAMA7_PARAMS


def test_single_gpu_smallest_d_is_1_when_it_fits():
    M = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))
    sol = memsym.smallest(M, "d", 80 * GB, {"N": 10**9, "t": 1, "p": 1})  # 16 GB fits on one
    assert sol.value == 1 and sol.memory == 16 * 10**9
    gpus = memsym.smallest_gpus(M, 80 * GB, {"N": 10**9, "t": 1, "p": 1})
    assert gpus.value == 1


# ------------------------------------------------------------------------------------------------
# p = L: one layer per pipeline stage
# ------------------------------------------------------------------------------------------------
def test_one_layer_per_stage():
    est = training_memory("llama2-7b", Layout(p=32), Training(seq_length=2048, global_batch_size=64))
    bd = sensible(est)
    assert len(est.stage_bytes) == 32
    assert est.stage in (0, 31)          # the embedding or the output layer makes an end heavier
    assert all(finite_positive(x) for x in est.stage_bytes)
    # a middle stage holds one layer: 4h^2 attention + 3hf MLP + 2h norms (Llama, no biases)
    h, f = 4096, 11008
    one_layer = 4 * h * h + 3 * h * f + 2 * h
    middle = training_memory("llama2-7b", Layout(p=32), Training(seq_length=2048,
                                                                global_batch_size=64), stage=5)
    assert middle.breakdown()["weights"] == 2 * one_layer
    assert bd["total"] == max(est.stage_bytes)


def test_more_stages_than_layers_refused(capsys):
    with pytest.raises(errors.DivisibilityError, match="p=64"):
        training_memory("llama2-7b", Layout(p=64), Training(seq_length=128))
    assert main(["estimate", "llama2-7b", "--seq-length", "128", "--pp", "64"]) == 2
    assert "p=64" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# t = heads
# ------------------------------------------------------------------------------------------------
def test_t_equals_heads():
    # Llama-2-7B: 32 heads, 32 KV heads, ffn 11008 = 32 x 344: t = 32 is a valid layout
    est = training_memory("llama2-7b", Layout(t=32, sequence_parallel=True),
                          Training(seq_length=4096, flash_attention=True))
    bd = sensible(est)
    one = training_memory("llama2-7b", Layout(t=1), Training(seq_length=4096, flash_attention=True))
    assert bd["total"] < one.bytes_total


def test_t_equals_heads_but_not_kv_heads_refused():
    # Llama-2-70B: 64 heads but 8 KV heads: t = 64 is refused, t = 8 (= KV heads) works
    with pytest.raises(errors.DivisibilityError, match="KV heads"):
        training_memory("llama2-70b", Layout(t=64, sequence_parallel=True), Training(seq_length=128))
    sensible(training_memory("llama2-70b", Layout(t=8, sequence_parallel=True),
                             Training(seq_length=128)))


# ------------------------------------------------------------------------------------------------
# d = 1 with ZeRO-3
# ------------------------------------------------------------------------------------------------
def test_zero3_at_d1_equals_ddp():
    # nothing to shard over: ZeRO-3 at N_d = 1 is the DDP baseline (ZeRO §5, Figure 1)
    common = dict(seq_length=2048, flash_attention=True)
    z3 = training_memory("llama2-7b", Layout(d=1), Training(sharding="zero3", **common))
    ddp = training_memory("llama2-7b", Layout(d=1), Training(sharding="ddp", **common))
    assert sensible(z3)["total"] == sensible(ddp)["total"]


def test_zero3_at_huge_d_is_finite_and_above_activations():
    est = training_memory("llama2-7b", Layout(d=2**20), Training(seq_length=2048, sharding="zero3"))
    bd = sensible(est)
    acts = sum(est.activations().values())
    assert acts < bd["total"] < acts * sp.Rational(11, 10) + 2 * 2**30 + 2 * 10**6


# ------------------------------------------------------------------------------------------------
# MoE with e = experts
# ------------------------------------------------------------------------------------------------
def test_moe_one_expert_per_gpu():
    # Mixtral 8x7B on e = 8, d = 8: each GPU holds one expert of every layer.
    est = training_memory("mixtral-8x7b", Layout(e=8, d=8), Training(seq_length=4096))
    bd = sensible(est)
    expert_params = 32 * 3 * 4096 * 14336          # L x (gate, up, down) x h x f_e
    assert bd["expert_weights"] == 2 * expert_params
    # the expert data-parallel group is t*c*d/(e*t_e) = 1: expert states are not sharded
    assert bd["expert_optimizer"] == 12 * expert_params
    # dense part by hand: embedding + output (untied) 2Vh, attention q,o: h^2, k,v: h*h/4 (8 of
    # 32 heads), 2 norms and a router (8h) per layer, final norm (bf16 weights are not sharded)
    h, V = 4096, 32000
    dense = 2 * V * h + 32 * (2 * h * h + 2 * h * h // 4 + 2 * h + 8 * h) + h
    assert bd["weights"] == 2 * dense


def test_moe_e_equals_experts_needs_enough_ranks():
    # e * t_e must divide t * c * d (experts are carved out of the data-parallel ranks)
    with pytest.raises(errors.DivisibilityError, match="e\\*t_e=8"):
        training_memory("mixtral-8x7b", Layout(e=8, d=4), Training(seq_length=128))


def test_moe_many_experts():
    est = training_memory("qwen3-30b-a3b", Layout(e=128, d=128), Training(seq_length=4096,
                                                                           flash_attention=True))
    bd = sensible(est)
    # Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 128 experts of ffn 768 (SwiGLU: gate,
    # up, down).  e = 128 puts one expert of every layer on each GPU; the expert data-parallel
    # group is t*c*d/(e*t_e) = 128/128 = 1, so the distributed optimizer shards nothing:
    # bf16 weights 2 B, fp32 gradients 4 B, fp32 master + Adam moments 12 B per parameter
    expert_params = 48 * 3 * 2048 * 768
    assert bd["expert_weights"] == 2 * expert_params
    assert bd["expert_gradients"] == 4 * expert_params
    assert bd["expert_optimizer"] == 12 * expert_params


# ------------------------------------------------------------------------------------------------
# sequence of 1 and of 1M tokens
# ------------------------------------------------------------------------------------------------
def test_sequence_of_one_token(capsys):
    est = training_memory("llama2-7b", Layout(), Training(seq_length=1))
    bd = sensible(est)
    acts = sum(est.activations().values())
    assert 0 < acts < 10**8                         # a few MB for one token
    assert bd["weights"] == 2 * LLAMA7_PARAMS
    data = cli_json(capsys, "estimate", "llama2-7b", "--seq-length", "1")
    assert data["bytes"]["activations"] > 0


def test_sequence_of_a_million_tokens(capsys):
    s = 2**20
    flash = training_memory("llama2-7b", Layout(), Training(seq_length=s, flash_attention=True,
                                                            recompute="full"))
    sensible(flash)
    # flash attention keeps no s^2 scores: the layer activations are linear in s
    half = training_memory("llama2-7b", Layout(), Training(seq_length=s // 2, flash_attention=True,
                                                           recompute="full"))
    assert flash.activations()["layer_activations"] == 2 * half.activations()["layer_activations"]
    # without flash attention the 5as^2 scores of Korthikanti Eq. 1 dominate: still exact, finite
    plain = training_memory("llama2-7b", Layout(), Training(seq_length=s))
    bd = sensible(plain)
    assert bd["total"] > 32 * 5 * 32 * s * s          # L x 5 a s^2 bytes (b = 1)
    data = cli_json(capsys, "estimate", "llama2-7b", "--seq-length", str(s), "--use-flash-attn",
                    "--context-parallel-size", "8", "--dp", "1")
    assert data["layout"]["cp"] == 8 and data["bytes"]["total"] > 0


def test_context_parallel_must_divide_sequence():
    with pytest.raises(errors.DivisibilityError, match="c=3"):
        training_memory("llama2-7b", Layout(c=3), Training(seq_length=2**20))


# ------------------------------------------------------------------------------------------------
# sizes at the extremes of the number line
# ------------------------------------------------------------------------------------------------
def test_quadrillion_parameters_exact():
    M = model_state("distributed-optimizer", convention="seed000").subs(byte_widths(convention="seed000"))
    val = M.evaluate(N=10**15, d=3, t=1, p=1)
    assert val == 2 * 10**15 + sp.Rational(16 * 10**15, 3)   # seed 000: N (2 + 16/d)
    assert isinstance(val, sp.Rational)


def test_smallest_d_with_enormous_models_is_exact():
    M = model_state("zero3", convention="zero-paper").subs(byte_widths("zero3", convention="zero-paper"))
    sol = memsym.smallest(M, "d", 80 * GB, {"N": 10**15, "t": 1, "p": 1})
    assert sol.value == 200_000                       # 16e15 / 80e9 exactly
    assert M.evaluate(N=10**15, d=sol.value, t=1, p=1) == 80 * GB


def test_parameter_count_of_the_largest_preset_is_an_exact_int():
    n = parameter_count(preset("llama3-405b"))
    assert isinstance(n, int) and 400 * 10**9 < n < 410 * 10**9
