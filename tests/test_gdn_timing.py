"""Step time of hybrid Gated DeltaNet / attention models (memsym.timing.linear_attention, the
GDN paths of memsym.timing.gemm / layer).  Each expectation is derived by hand from the cited
sources, never copied from memsym's output: Megatron-core's GatedDeltaNet
(megatron/core/ssm/gated_delta_net/gdn.py and common.py at Megatron-LM d98e8a64dd: in_proj of
``qk_dim * 2 + v_dim * 2 + num_value_heads * 2`` outputs, ColumnParallel; out_proj of
``v_dim`` inputs, RowParallel; ``chunk_size = 64``; q and k repeated to the value heads) and
the chunked gated delta rule (Yang et al. 2024, arXiv:2412.06464 §3) as fla's kernels run it
(flash-linear-attention bc3b101dcb: fla/ops/gated_delta_rule/chunk.py, wy_fast.py,
fla/ops/common/chunk_delta_h.py, chunk_o.py, chunk_scaled_dot_kkt.py,
fla/ops/utils/solve_tril.py)."""

import json

import numpy as np
import pytest

from memsym.cli import main
from memsym.errors import StepTimeNotModelledError
from memsym.hardware import cluster_for, gpu
from memsym.model import Architecture
from memsym.timing.gemm import layer_gemms, shape_of
from memsym.timing.model_counts import forward_flops_per_token
from memsym.timing.layer import layer_time
from memsym.timing.linear_attention import GDN_CHUNK, gdn_flops, gdn_kernels
from memsym.timing.records import Overlap, Settings

from test_mamba_timing import assert_priced_and_tp_shortens_it

# a small GDN mixer: 2 key heads of 16, 4 value heads of 32 (q, k repeated twice), C = 64
HK, HV, DK, DV, C = 2, 4, 16, 32, 64
GDN = (HK, HV, DK, DV, 4)


def _chunk_matmuls(T):
    """Forward and backward matmul FLOPs of the chunked gated delta rule on T tokens, each
    matmul of one chunk and one value head written as 2 m n k (whole C x C blocks)."""
    n = (T // C) * HV                              # (chunk, head) pairs
    kkt = 2 * C * DK * C                           # beta K K^T: [C, d_k] x [d_k, C]
    solve = 16 * 2 * 16 ** 3                       # solve_tril: 16 products of 16 x 16 blocks
    w_u = 2 * C * C * DK + 2 * C * C * DV          # W = A (beta e^g K), U = A (beta V)
    h = 2 * C * DK * DV + 2 * DK * C * DV          # V' = U - W S, S += K^T V'
    o = 2 * C * DK * DV + 2 * C * DK * C + 2 * C * C * DV   # Q S, Q K^T, (Q K^T) V'
    dv_local = 2 * C * DK * C + 2 * C * C * DV     # K Q^T, A dO
    dhu = 3 * 2 * C * DK * DV                      # K dS, Q^T dO, W^T dV
    dqkwg = 2 * C * DV * C + 3 * 2 * C * DV * DK + 2 * 2 * C * C * DK   # dO V'^T; dq, dk, dw
    # prepare_wy_repr_bwd: dA from dw, A^T dw, dA from du, A^T du, two C x C x C products,
    # the recomputed beta K K^T and its two gradients
    wy_bwd = 2 * 2 * C * C * DK + 2 * 2 * C * C * DV + 2 * 2 * C ** 3 + 3 * 2 * C * C * DK
    fwd = n * (kkt + solve + w_u + h + o)
    bwd = n * (w_u + h + dv_local + dhu + dqkwg + wy_bwd)   # w, u and the states recomputed
    return fwd, bwd


def test_gdn_flops_are_the_chunked_algorithms_matmuls():
    T = 4 * C
    f, b = gdn_flops(GDN, T)
    assert (float(f), float(b)) == _chunk_matmuls(T)


def test_tensor_parallel_splits_the_value_heads():
    one, two = gdn_flops(GDN, 2 * C, 1), gdn_flops(GDN, 2 * C, 2)
    assert [float(a) for a in two] == [float(a) / 2 for a in one]


def test_megatrons_chunk_size():
    # gdn.py:73: self.chunk_size = 64
    assert GDN_CHUNK == 64


def _qwen3_next_like(layers=4, moe=False):
    # Qwen3-Next's layout at a small width: three GDN layers, then gated attention
    return Architecture(
        name="gdn-small", num_layers=layers, hidden_size=256, num_attention_heads=4,
        num_query_groups=2, kv_channels=64, ffn_hidden_size=512,
        swiglu=True, vocab_size=1024, position_embedding_type="rope",
        layer_mixers=("gdn", "gdn", "gdn", "attention") * (layers // 4),
        gdn_key_heads=HK, gdn_value_heads=HV, gdn_key_head_dim=DK, gdn_value_head_dim=DV,
        attention_output_gate=True)


def test_gdn_projections_are_megatrons_in_and_out_proj():
    # common.py:201-224 and gdn.py:45: in_proj h -> 2 qk_dim + 2 v_dim + 2 H_v, split by t;
    # common.py:274-287: out_proj v_dim -> h, its input split by t
    x = shape_of(_qwen3_next_like())
    T, t = 512, 2
    got = [(q.name, int(q.M), int(q.N), int(q.K))
           for q in layer_gemms(x, T, 1, t=t, mixer="gdn", mlp=False)]
    assert got == [("in_proj", T, (2 * 2 * 16 + 2 * 4 * 32 + 2 * 4) // t, 256),
                   ("out_proj", T, 256, 4 * 32 // t)]


def test_gated_attention_projects_its_gate_with_qkv():
    # attention.py:1689-1691: linear_qkv_out_dim = a d + 2 g d (+ a d with the output gate)
    x = shape_of(_qwen3_next_like())
    qkv = layer_gemms(x, 128, 1, mixer="attention", mlp=False)[0]
    assert (qkv.name, int(qkv.N)) == ("qkv", (4 + 2 * 2 + 4) * 64)


def test_forward_flops_of_a_gdn_hybrid_sum_its_layers():
    s = 4 * C
    x = shape_of(_qwen3_next_like())
    h, f, V = 256, 512, 1024
    gdn_proj = 2 * h * (2 * HK * DK + 2 * HV * DV + 2 * HV) + 2 * HV * DV * h
    att_proj = 2 * h * (2 * 4 + 2 * 2) * 64 + 2 * 4 * 64 * h
    att_core = 2 * s * 4 * (64 + 64) / 2            # causal half of QK^T and AV, per token
    mlp = 2 * h * 2 * f + 2 * f * h
    gdn_core = _chunk_matmuls(s)[0] / s
    want = 3 * (gdn_proj + gdn_core + mlp) + (att_proj + att_core + mlp) + 2 * h * V
    assert forward_flops_per_token(x, s) == pytest.approx(want, rel=1e-12)


def test_the_chunk_kernels_run_at_the_ssd_rate_or_at_hbm_bandwidth():
    # each fla matmul kernel: the longer of its FLOPs at the measured Triton share of the
    # 16-bit peak (mamba_ssm's _chunk_scan_fwd at about 91 TFLOP/s on an H800 SXM of dense
    # BF16 peak 989.4 TFLOP/s, tilelang benchmark/mamba2, the one chunked-kernel rate
    # measured) and its bytes at the H100's 3.35 TB/s
    dev = gpu("h100")
    x = shape_of(_qwen3_next_like())
    one = np.array(1.0)
    s = 1024
    f, b = layer_time(x, Settings(seq_length=s, precision="bf16"), dev, cluster_for(dev.name),
                      one, one, one, one, 1, moe=False, eta_gemm=None, overlap=Overlap(),
                      dp=one, mixer="gdn", mlp=False)
    rate, hbm = dev.peak("bf16") * 91 / 989.4, 3.35e12
    w, S = 2, DK * DV / C
    chunk_h = (4 * DK * DV, 2 * w * (DK + DV) + w * S + 4)      # per head and token
    chunk_o = (2 * DK * DV + 2 * C * (DK + DV), 2 * w * (DK + DV) + w * S + 4)
    kkt = (2 * C * DK + C * C / 2, w * DK + w + 4 + w * C)
    wy = (2 * C * (DK + DV), 2 * w * (DK + DV) + w * C + w + 4)
    want = sum(max(s * HV * fl / rate, s * HV * by / hbm) for fl, by in (kkt, wy, chunk_h, chunk_o))
    assert float(f["attention"]) == pytest.approx(want)
    assert float(b["attention"]) > 2 * float(f["attention"])
    streamed = sum(by for _, fl, by in gdn_kernels(GDN)[0] if not fl)
    norm_res = 2 * 5 * 256                          # the layer's own norm and residual add
    assert float(f["memory"]) == pytest.approx(s * (norm_res + streamed) / hbm)


def test_a_gdn_hybrid_step_is_priced_and_tp_shortens_it():
    # (the Mamba-1 refusal naming Mamba-2 and Gated DeltaNet: tests/test_mamba_timing.py)
    assert_priced_and_tp_shortens_it(_qwen3_next_like(8))

def test_a_zamba2_shared_block_is_still_refused(tmp_path):
    from memsym.model.hf_config import from_hf_config
    from hf_oracle import write_config
    from test_hf_zamba import SMALL
    with pytest.raises(StepTimeNotModelledError, match="shared-block"):
        shape_of(from_hf_config(write_config(tmp_path, SMALL["zamba2"])))


# Qwen3-Next's config.json fields (Qwen/Qwen3-Next-80B-A3B-Instruct) at a small width
_QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 256,
    "num_hidden_layers": 4, "vocab_size": 1024, "head_dim": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
    "linear_num_key_heads": HK, "linear_key_head_dim": DK, "linear_num_value_heads": HV,
    "linear_value_head_dim": DV, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
    "tie_word_embeddings": False, "intermediate_size": 512, "max_position_embeddings": 4096}


def test_cli_estimate_of_a_qwen3_next_config_gives_a_step_time(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_QWEN3_NEXT))
    code = main(["estimate", str(path), "--gpu", "h100-80gb", "--dp", "2",
                 "--seq-length", "1024", "--micro-batch-size", "1", "--global-batch-size", "8"])
    out, err = capsys.readouterr()
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("step time:"))
    assert float(line.split()[2]) > 0
