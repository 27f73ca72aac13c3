"""Muon (issues 30, 31): its states, its Newton-Schulz work and its launch rules, each checked
against a value derived by hand here from Megatron-LM d98e8a64dd and Emerging-Optimizers
fd77292 (megatron/core/optimizer/emerging_optimizers.py, layer_wise_optimizer.py;
orthogonalized_optimizer.py, muon_utils.py)."""

from __future__ import annotations

import numpy as np
import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.hardware import cluster_for, gpu
from memsym.job import Layout, Training, job
from memsym.model import Architecture, stage_parameters
from memsym.model import preset as preset_of
from memsym.model.muon_matrices import muon_matrices, scalar_adam_parameters
from memsym.symbols import t, t_e
from memsym.terms.muon import largest_muon_elements, muon_scalar_moment, newton_schulz_flops
from memsym.timing.data_parallel import data_parallel_sync
from memsym.timing.muon import muon_parameters, muon_step_time, newton_schulz_time
from memsym.timing.records import Overlap, Settings
from memsym.training import job_memory

#: A small GQA transformer: h 64, 4 heads of 16, 2 KV heads, SwiGLU f 128, 2 layers, V 256
#: (a multiple of 128: no padding at t 1), untied, RMSNorm, RoPE.
TINY = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                    ffn_hidden_size=128, vocab_size=256, swiglu=True, normalization="RMSNorm",
                    untie_embeddings_and_output_weights=True, max_position_embeddings=4096,
                    position_embedding_type="rope", add_bias_linear=False)


def _states(training):
    bd = job_memory(job(TINY, layout=Layout(), training=training)).breakdown()
    return {k: int(bd[k]) for k in ("weights", "gradients", "optimizer", "muon_adam_moment")
            if k in bd}


def test_muon_matrices_of_a_small_model_by_hand():
    # Q [4*16, 64], K and V [2*16, 64] (split_qkv, the default), proj [64, 64], fc1 [2*128, 64],
    # fc2 [64, 128]
    got = [(n, r, c) for n, r, c, _, _ in muon_matrices(TINY, False)]
    assert got == [("q", 64, 64), ("k", 32, 64), ("v", 32, 64), ("proj", 64, 64),
                   ("fc1", 256, 64), ("fc2", 64, 128)]
    fused = muon_matrices(TINY, False, split_qkv=False)
    assert fused[0][:3] == ("qkv", 128, 64)


def test_muon_state_bytes_of_a_small_model_by_hand():
    # parameters: embedding and output 256*64 each = 32768; per layer q 4096 + k 2048 + v 2048 +
    # proj 4096 + fc1 16384 + fc2 8192 = 36864 matrix weights and 2 norms of 64; final norm 64
    matrices = 2 * 36864
    scalar = 2 * 256 * 64 + 2 * 2 * 64 + 64
    total = matrices + scalar
    assert scalar_adam_parameters(TINY, stage_parameters(TINY), 1) == scalar
    # DDP, bf16: weights 2 B, fp32 grads 4 B, fp32 master 4 B + momentum 4 B on every parameter
    # (Float16OptimizerWithFloat16Params + OrthogonalizedOptimizer's momentum_buffer), and the
    # scalar Adam's exp_avg_sq (4 B) on the embedding, output layer and norms
    got = _states(Training(optimizer="muon", sharding="ddp", seq_length=128))
    assert got == {"weights": 2 * total, "gradients": 4 * total, "optimizer": 8 * total,
                   "muon_adam_moment": 4 * scalar}
    # Adam keeps 4 + 8 everywhere: Muon saves 4 B per matrix weight
    adam = _states(Training(optimizer="adam", sharding="ddp", seq_length=128))
    assert adam["optimizer"] - got["optimizer"] - got["muon_adam_moment"] == 4 * matrices


def test_the_layer_wise_distributed_optimizer_splits_muon_states():
    st = _states(Training(optimizer="muon", sharding="distributed-optimizer", seq_length=128))
    ref = _states(Training(optimizer="muon", sharding="ddp", seq_length=128))
    # one GPU (d = 1): the same bytes; the term is 4 N_sc / (d c)
    assert st == ref
    assert muon_scalar_moment(1000, 8).expr == 500


def test_newton_schulz_flops_by_hand():
    # 3 x 5 matrix: m = 3, n = 5; per step A = X X^T 2*9*5 = 90, A A 2*27 = 54, B X 90: 234
    assert newton_schulz_flops(3, 5, 1) == 234
    assert newton_schulz_flops(5, 3) == 5 * 234
    # Llama-2-7B's fc1, 22016 x 4096: m = 4096, n = 22016
    m, n = 4096, 22016
    assert newton_schulz_flops(n, m) == 5 * (4 * m * m * n + 2 * m ** 3)


def test_newton_schulz_time_is_its_flops_at_the_gemm_rate():
    dev = gpu("h100")
    sec = float(newton_schulz_time(2048, 8192, dev, eta_gemm=0.5))
    flops = int(newton_schulz_flops(2048, 8192))
    # 15 GEMMs at half of the H100's 989 TFLOP/s dense bf16, plus their launches (< 0.1 ms)
    assert flops / (0.5 * 989e12) < sec < flops / (0.5 * 989e12) + 1e-4


def test_largest_muon_matrix_by_hand():
    # TINY's largest: fc1 256 x 64, halved by TP 2 unless gathered (duplicated mode); the
    # Newton-Schulz workspace of each mode: tests/test_muon_workspace.py
    def largest(tp, etp, gathered):
        return largest_muon_elements(muon_matrices(TINY, False), gathered=gathered).subs(
            {t: tp, t_e: etp})
    assert largest(1, 1, gathered=False) == 256 * 64
    assert largest(2, 2, gathered=False) == 128 * 64
    assert largest(2, 2, gathered=True) == 256 * 64


def test_layer_wise_shares_the_orthogonalization_over_data_parallel():
    dev = gpu("h100")
    clu = cluster_for(dev.name)
    kw = dict(t=1, e=1, t_e=1, edp=1, tp_mode="duplicated")
    one = float(muon_step_time(TINY, dev, clu, 2, ndp=1, layer_wise=True, **kw))
    eight = float(muon_step_time(TINY, dev, clu, 2, ndp=8, layer_wise=True, **kw))
    ddp = float(muon_step_time(TINY, dev, clu, 2, ndp=8, layer_wise=False, **kw))
    assert eight == pytest.approx(one / 8) and ddp == pytest.approx(one)
    # two layers of the six matrices, each priced once: the GEMMs, and the element-wise passes
    # around each iteration at 3.35 TB/s: duplicated mode, every matrix TP-split, 32 B an
    # element (F.normalize 12, the bf16 cast 6 and back 6, torch.cat of the gathered shards
    # 8; muon_utils.py:216, 262, 269, 330) and the split Q, K, V blocks' reshape and cat 16 B
    # an element (emerging_optimizers.py:426-437): q 64 x 64, k, v 32 x 64, proj 64 x 64,
    # fc1 256 x 64, fc2 64 x 128
    per_layer = sum(float(newton_schulz_time(r, c, dev)) for _, r, c, _, _ in
                    muon_matrices(TINY, False))
    elems = 64 * 64 + 2 * 32 * 64 + 64 * 64 + 256 * 64 + 64 * 128
    ew = (32 * elems + 16 * (64 * 64 + 2 * 32 * 64)) / 3.35e12
    assert one == pytest.approx(2 * (per_layer + ew), rel=1e-12)
    # blockwise at TP 2: each shard alone, cheaper than the whole matrix on every rank
    kw2 = dict(e=1, t_e=1, ndp=1, edp=1, layer_wise=False)
    block = muon_step_time(TINY, dev, clu, 2, t=np.array(2.0), tp_mode="blockwise", **kw2)
    dup = muon_step_time(TINY, dev, clu, 2, t=np.array(2.0), tp_mode="duplicated", **kw2)
    assert float(block) < float(dup)


@pytest.mark.parametrize("training, words", [
    (Training(optimizer="muon", precision="fp16"), "fp16"),
    (Training(optimizer="muon", sharding="zero3"), "Megatron-core's"),
    (Training(optimizer="muon", sharding="fsdp", megatron_fsdp="optim_grads_params"), "muon"),
    (Training(optimizer="muon", framework="deepspeed", sharding="zero1"), "Megatron-core's"),
    (Training(optimizer="muon", sharding="zero1"), "Megatron-core's"),
])
def test_muon_launches_megatron_refuses_are_refused(training, words):
    with pytest.raises(InvalidValueError, match=words):
        job(TINY, training=training)


def test_the_cli_prices_muon(capsys):
    from memsym.cli import main

    assert main(["estimate", "llama2-7b", "--optimizer", "muon", "--precision", "fp16"]) == 2
    assert "fp16" in capsys.readouterr().err


def test_the_search_keeps_muon_to_its_schemes(capsys):
    from memsym.cli import main

    argv = ["search", "llama2-7b", "--optimizer", "muon", "--gpus", "8", "--gpu", "h100"]
    assert main(argv + ["--sharding", "zero3"]) != 0
    out = capsys.readouterr()
    assert "muon-sharding" in out.out + out.err
    assert main(argv + ["--precision", "fp16"]) != 0
    out = capsys.readouterr()
    assert "muon-fp16" in out.out + out.err


def test_the_kimi_k2_recipe_reads_as_muon():
    # perf_recipes/kimi/gb300/kimi_k2.py:138 on kimi_k2_pretrain_config, whose
    # _apply_kimi_k2_optimizer(cfg, "muon") (recipes/kimi/h100/kimi_k2.py:200) sets
    # optimizer "dist_muon" (recipes/utils/optimizer_utils.py:79), ddp.use_distributed_optimizer
    # False: Bridge's layer-wise distributed optimizer (training/optim.py:103-110)
    from memsym.readers.bridge import bridge_job_options, read_bridge_recipe

    reading = read_bridge_recipe("kimi_k2_pretrain_256gpu_gb300_fp8mx_config")
    assert reading["values"]["optimizer.optimizer"] == "dist_muon"
    assert reading["values"]["ddp.use_distributed_optimizer"] is False
    preset, opts, _ = bridge_job_options(reading)
    assert (preset, opts["optimizer"], opts["sharding"]) == ("kimi-k2", "muon",
                                                             "distributed-optimizer")
    # _get_kimi_k2_pipeline_layout(4, 4) (kimi_k2.py:38): an embedding and 4 decoder layers,
    # 14 stages of 4, one decoder layer and the loss
    assert opts["pipeline_layout"] == "E" + "tttt|" * 15 + "tL"
    assert (opts["p"], opts["v"], opts["e"]) == (4, 4, 64)


def test_megatron_reads_dist_muon_as_muon_with_the_distributed_optimizer():
    # arguments.py:1727-1733: dist_muon is muon with the layer-wise distributed optimizer
    from memsym.readers.megatron_arguments import MegatronArguments, parse_megatron_argv
    from memsym.readers.megatron_precision import megatron_optimizer, megatron_precision

    for argv, distopt in ((["--optimizer", "dist_muon"], True), (["--optimizer", "muon"], False),
                          (["--optimizer", "muon", "--use-distributed-optimizer"], True)):
        r = MegatronArguments(*parse_megatron_argv(argv)[::2])
        out = megatron_optimizer(r, {"untie_embeddings_and_output_weights": False},
                                 {"sequence_parallel": False}, megatron_precision(r))
        assert (out["optimizer"], out["use_distributed_optimizer"]) == ("muon", distopt)


def test_an_unknown_tp_mode_is_refused():
    with pytest.raises(UnknownNameError, match="muon_tp_mode"):
        muon_step_time(TINY, gpu("h100"), cluster_for("h100"), 2, t=1, e=1, t_e=1, ndp=1, edp=1,
                       layer_wise=False, tp_mode="sideways")


def test_muon_steps_its_matrices_at_its_own_bytes_and_the_rest_at_adams():
    # Muon's element-wise step per fp32 parameter (Float16OptimizerWithFloat16Params around
    # TensorParallelMuon, Emerging-Optimizers orthogonalized_optimizer.py:185-210): grad-norm
    # read 4, decoupled decay p.add_(p) 4 + 4 (mixin.py:48), momentum lerp_ reads m, g and
    # writes m 12 (:193), two scalings of the update 2 x 8 (emerging_optimizers.py:237),
    # p.add_(update) 12 (:208), fp32 -> bf16 copy 6, grad-buffer zeroing 4: 62 B; Adam's 42
    # for the embeddings, output layer and norms (emerging_optimizers.py:140-147).
    # TINY on one H100, DDP: 2 layers of 36,864 matrix elements (q 4096, k, v 2048 each,
    # proj 4096, fc1 16384, fc2 8192) Muon; embedding and output 2 x 256 x 64, norms
    # 2 x (2 x 64) + 64 Adam.
    dev, one = gpu("h100"), np.array(1.0)
    clu = cluster_for(dev.name)
    muon_n = 2 * (4096 + 2 * 2048 + 4096 + 16384 + 8192)
    adam_n = 2 * 256 * 64 + 2 * 2 * 64 + 64
    kw = dict(p=one, m=one, t=one, c=one, d=one, e=one, t_e=one, muon=(TINY, 2.0))
    ns = float(muon_step_time(TINY, dev, clu, 2.0, t=1, e=1, t_e=1, ndp=1, edp=1,
                              layer_wise=False))
    for nesterov, per in ((False, 62), (True, 62 + 12)):   # --muon-nesterov: grad.lerp(m) 12
        st = Settings(optimizer="muon", distributed_optimizer=False, muon_nesterov=nesterov)
        out = data_parallel_sync(st, dev, clu, Overlap(), np.array(float(muon_n + adam_n)),
                                 np.array(0.0), (0.0, 0.0), one, **kw)
        want = (42 * adam_n + per * muon_n) / 3.35e12
        assert float(out["optimizer"]) - ns == pytest.approx(want, rel=1e-9)


def test_muon_parameters_of_an_moe_layer_by_hand():
    # Qwen3-30B-A3B (h 2048, 32 heads and 4 KV groups of 128, 128 experts of 768, SwiGLU, no
    # shared expert), one layer at TP 2, EP 8, expert TP 1: Q 4096 x 2048, K, V 512 x 2048,
    # proj 2048 x 4096 halved by TP; the router 128 x 2048 replicated (a plain parameter, not
    # TP-split); 128 / 8 = 16 local experts of 3 x 2048 x 768
    dense, expert = muon_parameters(preset_of("qwen3-30b-a3b"), 1, t=2, e=8, t_e=1)
    assert float(dense) == (4096 * 2048 + 2 * 512 * 2048 + 2048 * 4096) / 2 + 128 * 2048
    assert float(expert) == 16 * 3 * 2048 * 768
