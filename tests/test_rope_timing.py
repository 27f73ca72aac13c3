"""RoPE's memory-bound passes (memsym.timing.rope): GPT-OSS's YaRN embedding runs Megatron-core's
eager RoPE, not Transformer Engine's fused kernel.  Each expectation is derived by hand from the
cited code (Megatron-LM d98e8a64dd rope_utils.py, yarn_rotary_pos_embedding.py; Megatron-Bridge
067f987df0 gpt_oss_bridge.py), never copied from memsym's output."""

import dataclasses
import math

from memsym.model import preset
from memsym.model.architecture import Architecture
from memsym.timing.gemm import memory_bytes, shape_of
from memsym.timing.rope import rope_passes


def test_eager_rope_counts_each_torch_op():
    # _apply_rotary_pos_emb_bshd (rope_utils.py:139-152) with rot_dim = d (t_pass empty):
    # t * cos_ (read + write: 2), _rotate_half's -x2 (half read + half written: 1) and
    # cat((-x2, x1)) (2), * sin_ (2), the add (2 reads + 1 write: 3), cat((t, t_pass)) (2)
    assert rope_passes(True) == 2 + 1 + 2 + 2 + 3 + 2
    # TE's fused kernel reads q or k once and writes it once
    assert rope_passes(False) == 2


def test_yarn_factor_32_makes_an_mscale_the_fused_kernel_refuses():
    # _yarn_get_mscale(32) = 0.1 * ln 32 + 1 (yarn_mscale None: gpt_oss_bridge.py:99); not 1,
    # so apply_rotary_pos_emb takes the unfused path (rope_utils.py:351-356)
    assert abs(0.1 * math.log(32.0) + 1 - 1.3466) < 1e-4
    assert shape_of(preset("gpt-oss-120b")).rope_unfused
    assert not shape_of(preset("llama3-8b")).rope_unfused
    flat = Architecture(num_layers=2, hidden_size=64, num_attention_heads=8,
                        extra={"yarn_rotary_scaling_factor": 1.0})
    assert not shape_of(flat).rope_unfused      # factor 1: mscale 1, the fused kernel runs


def test_gpt_oss_layer_moves_ten_more_passes_of_q_and_k():
    # one B200-like micro-batch of 4 x 4096 tokens, t = 1: q and k hold (64 + 8) heads of 64,
    # bf16; eager RoPE moves 12 - 2 = 10 more element passes over them than the fused kernel
    x = shape_of(preset("gpt-oss-120b"))
    kw = dict(moe=True, sequence_parallel=False, flash=True, dropout=False)
    eager = float(memory_bytes(x, 4096, 4, **kw))
    fused = float(memory_bytes(dataclasses.replace(x, rope_unfused=False), 4096, 4, **kw))
    assert eager - fused == 10 * (4 * 4096) * (64 + 8) * 64 * 2


def test_equal_yarn_mscales_keep_the_fused_kernel():
    # _yarn_get_concentration_factor (yarn_rotary_pos_embedding.py:282-294) with yarn_mscale
    # and yarn_mscale_all_dim set: (0.1 mu ln s + 1) / (0.1 mu_all ln s + 1).  DeepSeek-V3's
    # rope_scaling (factor 40, mscale 1.0, mscale_all_dim 1.0): (0.1 ln 40 + 1) / itself = 1,
    # so apply_rotary_pos_emb keeps TE's fused RoPE (rope_utils.py:351: only mscale != 1.0
    # falls back).  Megatron's CLI defaults (--mscale 1.0, --mscale-all-dim 0.0,
    # argument_utils.py:411-412): (0.1 ln 40 + 1) / (0 + 1) = 1.3689, the eager path.
    def arch(**extra):
        return Architecture(num_layers=2, hidden_size=64, num_attention_heads=8, extra=extra)

    assert not shape_of(arch(yarn_rotary_scaling_factor=40.0, yarn_mscale=1.0,
                             yarn_mscale_all_dim=1.0)).rope_unfused
    assert not shape_of(arch(yarn_rotary_scaling_factor=40.0, yarn_mscale=0.707,
                             yarn_mscale_all_dim=0.707)).rope_unfused
    assert abs((0.1 * math.log(40.0) + 1) / 1 - 1.3689) < 1e-4
    assert shape_of(arch(yarn_rotary_scaling_factor=40.0, yarn_mscale=1.0,
                         yarn_mscale_all_dim=0.0)).rope_unfused
    # one of the two unset: the factor alone, 0.1 ln 40 + 1 (yarn_rotary_pos_embedding.py:290)
    assert shape_of(arch(yarn_rotary_scaling_factor=40.0, yarn_mscale=1.0)).rope_unfused
