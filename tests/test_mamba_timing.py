"""Step time of hybrid Mamba-2 / attention models (memsym.timing.ssm, the hybrid paths of
memsym.timing.gemm / layer / step).  Each expectation is derived by hand from the cited
sources: Dao & Gu 2024 (arXiv:2405.21060) §6, Listing 1 ``ssd_minimal_discrete`` (the chunked
SSD's four steps as einsums) and Megatron-core's MambaMixer (megatron/core/ssm/mamba_mixer.py
at Megatron-LM d98e8a64dd: in_proj of ``d_inner * 2 + 2 * ngroups * d_state + nheads``
outputs, ColumnParallel; out_proj of ``d_inner`` inputs, RowParallel; ``chunk_size=128``);
never copied from memsym's output."""

import numpy as np
import pytest

from memsym.errors import StepTimeNotModelledError
from memsym.hardware import cluster_for, gpu
from memsym.model import Architecture, active_parameter_count, parameter_count, preset
from memsym.timing.efficiency import ceiling
from memsym.timing.gemm import Shape, attention_flops, layer_gemms, memory_bytes, shape_of
from memsym.timing.layer import layer_time
from memsym.timing.model_counts import forward_flops_per_token
from memsym.timing.records import Overlap, Settings
from memsym.timing.efficiency import memory_time
from memsym.timing.ssm import (MAMBA_CHUNK, layout_copy_bytes, ssd_flops, ssd_kernel_flops,
                              ssd_kernels)
from memsym.timing.step import step_time_grid

# a small Mamba-2 mixer: d_inner = H P = 8 x 16 = 128, N = 32, G = 2, Q = 64
D, N, H, G, Q = 128, 32, 8, 2, 64
P = D // H


def _einsum_flops(T):
    """Listing 1's einsums on T tokens in T/Q chunks, each a batched matmul of 2 m n k FLOPs
    (per chunk; CB per group as the Triton kernel's _bmm_chunk_fwd, the rest per head)."""
    chunks = T // Q
    cb = chunks * G * 2 * Q * Q * N          # C B^T: [Q, N] x [N, Q] per group
    diag = chunks * H * 2 * Q * Q * P        # (L o CB^T) X: [Q, Q] x [Q, P] per head
    states = chunks * H * 2 * N * Q * P      # B^T X: [N, Q] x [Q, P] per head
    out = chunks * H * 2 * Q * N * P         # C S: [Q, N] x [N, P] per head
    return cb, diag, states, out


def test_ssd_forward_flops_are_listing_ones_matmuls():
    T = 4 * Q
    f, _ = ssd_flops((D, N, H, G, 4), T, chunk=Q)
    assert float(f) == sum(_einsum_flops(T))


def test_ssd_backward_is_both_gradients_and_the_recomputed_cb_and_states():
    # each forward matmul's two operand gradients (2x), plus CB and the chunk states that the
    # fused kernel recomputes in its backward (it keeps only zxBCdt and the output)
    T = 2 * Q
    cb, diag, states, out = _einsum_flops(T)
    _, b = ssd_flops((D, N, H, G, 4), T, chunk=Q)
    assert float(b) == 2 * (cb + diag + states + out) + cb + states


def test_tensor_parallel_splits_heads_and_groups():
    T = 2 * Q
    one = ssd_flops((D, N, H, G, 4), T, 1, chunk=Q)
    two = ssd_flops((D, N, H, G, 4), T, 2, chunk=Q)
    assert [float(a) for a in two] == [float(a) / 2 for a in one]


def test_megatrons_chunk_size():
    assert MAMBA_CHUNK == 128


def _shape(**kw):
    base = dict(L=1, h=256, a=4, g=2, d_qk=64, d_v=64, f=512, gated=False, V=1024, E=0, k=0,
                f_e=0, f_sh=0, L_moe=0, mla=(), untied=True, rope=False, ssm=(D, N, H, G, 4))
    base.update(kw)
    return Shape(**base)


def test_mamba_projections_are_megatrons_in_and_out_proj():
    x = _shape()
    T, t = 64, 2
    g = {q.name: (int(q.M), int(q.N), int(q.K)) for q in
         layer_gemms(x, T, 1, t=t, mixer="mamba", mlp=False)}
    assert g == {"in_proj": (T, (2 * D + 2 * G * N + H) // t, 256), "out_proj": (T, 256, D // t)}


def test_a_mixer_or_an_mlp_alone():
    x = _shape()
    names = {k: [q.name for q in layer_gemms(x, 64, 1, mixer=m, mlp=f)]
             for k, (m, f) in {"*": ("attention", False), "-": ("none", True),
                               "M": ("mamba", False)}.items()}
    assert names == {"*": ["qkv", "proj"], "-": ["fc1", "fc2"], "M": ["in_proj", "out_proj"]}


def test_memory_bytes_of_a_mamba_layer_are_its_norm_and_residual():
    # one norm (read + write) and one residual add (2 reads + 1 write) of h, 2 bytes each; the
    # mixer's own kernels are counted kernel by kernel (ssd_kernels), backward apart
    x = _shape()
    T = 64
    got = memory_bytes(x, T, 1, moe=False, sequence_parallel=False, flash=True,
                       dropout=False, mixer="mamba", mlp=False)
    assert float(got) == pytest.approx(T * 2 * 5 * 256)


def _kernel_bytes():
    """Bytes per token of the tensors each kernel reads and writes, from the buffers that
    mamba_ssm e9594ce allocates (ssd_combined.py, ssd_chunk_state.py, ssd_chunk_scan.py,
    ssd_state_passing.py, ssd_bmm.py): bf16 activations (2 bytes), fp32 chunk states of
    D N values per chunk of Q tokens, fp32 CB / dCB (G Q Q per chunk), fp32 dB / dC."""
    bf, f32 = 2, 4
    x = z = y = D
    xbc, b_ = D + 2 * G * N, G * N
    st = D * N / Q                                   # chunk-state values per token
    cb = G * Q                                       # CB values per token (G Q x Q per chunk)
    fwd = {"conv1d": bf * (xbc + xbc),               # xBC in, conv output out
           "chunk_state": bf * (b_ + x) + f32 * st,  # B, x in; fp32 states out
           "state_passing": f32 * st + bf * st,      # fp32 states in, bf16 (state_dtype) out
           "bmm_chunk": bf * 2 * b_ + f32 * cb,      # C, B in; fp32 CB out
           "chunk_scan": f32 * cb + bf * (x + z + b_ + st) + bf * (y + y),  # out, out_x
           "norm": bf * (y + y)}
    bwd = {"norm": bf * 3 * y,                       # y, dy in; dx out
           "conv1d": fwd["conv1d"], "bmm_chunk": fwd["bmm_chunk"],
           "chunk_state": fwd["chunk_state"],
           "state_passing": f32 * 2 * st,            # recomputed in fp32 (out_dtype None)
           "dz": bf * (x + z + y + y) + bf * (z + y),            # x, z, out, dout; dz, dout_x
           "dstates": bf * (b_ + y) + f32 * st,
           "state_passing_bwd": f32 * 2 * st + bf * 2 * st,     # states, dstates -> bf16
           "dx": bf * (x + b_ + y + st) + f32 * cb + bf * x,
           "db": bf * (x + st + b_) + f32 * b_, "dc": bf * (st + y + b_) + f32 * b_,
           "dc_sum": f32 * 2 * b_, "dcb": bf * (x + y) + f32 * cb, "dcb_sum": f32 * 2 * cb,
           "bmm_chunk_bwd": 2 * (bf * b_ + f32 * cb + f32 * b_ + bf * b_),
           "ddacs": bf * (x + y) + f32 * cb,
           "conv1d_bwd": bf * 3 * xbc}                # xBC, dxBC in; dxBC_given out
    return fwd, bwd


def test_the_mixer_kernels_read_and_write_their_buffers():
    fwd, bwd = ssd_kernels((D, N, H, G, 4), chunk=Q)
    want_f, want_b = _kernel_bytes()
    assert {k: by for k, _, by in fwd} == pytest.approx(want_f)
    assert {k: by for k, _, by in bwd} == pytest.approx(want_b)


def test_megatrons_layout_copies():
    # _ssm_training: rearrange(zxBCdt, "l b d -> b l d").contiguous() and the output back;
    # backward TE's grad_output_preprocess makes in_proj's permuted gradient contiguous
    zx = D + D + 2 * G * N + H
    assert layout_copy_bytes((D, N, H, G, 4)) == (2 * 2 * zx + 2 * 2 * D, 2 * 2 * zx)


def _hybrid(pattern="M*M-"):
    # Nemotron-H's layout: one norm and one mixer or MLP per layer (NemotronHBlock)
    mix = tuple({"M": "mamba", "*": "attention", "-": "none", "E": "none"}[c] for c in pattern)
    return Architecture(
        name="tiny-hybrid", num_layers=len(pattern), hidden_size=256, num_attention_heads=4,
        num_query_groups=2, kv_channels=64, ffn_hidden_size=512, normalization="RMSNorm",
        vocab_size=1024, untie_embeddings_and_output_weights=True, position_embedding_type="none",
        add_bias_linear=False, norms_per_layer=1, layer_mixers=mix, ffn_layers=tuple(int(c in "-E") for c in pattern),
        mamba_inner_size=D, mamba_state_dim=N, mamba_num_heads=H, mamba_num_groups=G,
        max_position_embeddings=4096)


def test_forward_flops_of_a_hybrid_sum_its_layers():
    s = 256
    x = shape_of(_hybrid())
    h, f, V = 256, 512, 1024
    mamba = 2 * h * (2 * D + 2 * G * N + H) + 2 * D * h \
        + (2 * MAMBA_CHUNK * (G * N + D) + 4 * N * D)
    att = 2 * h * (4 + 2 * 2) * 64 + 2 * 4 * 64 * h + 2 * s * 4 * 128 / 2   # causal half
    mlp = 2 * h * f + 2 * f * h
    assert forward_flops_per_token(x, s) == pytest.approx(2 * mamba + att + mlp + 2 * h * V)
    assert float(attention_flops(x, s, 1, causal_skip=True)) / s == 2 * s * 4 * 128 / 2


def test_kinds_carry_their_weights():
    x = shape_of(_hybrid())
    kinds = {kind: (n, dense, expert) for kind, n, dense, expert in x.kinds}
    h = 256
    mamba = h * (2 * D + 2 * G * N + H) + (D + 2 * G * N) * 5 + 3 * H + D + D * h + h
    assert kinds[("mamba", None)] == (2, mamba, 0)
    assert kinds[("none", False)] == (1, 2 * h * 512 + h, 0)


def test_a_mamba_layer_issues_the_tp_collectives_of_one_block():
    # MambaMixer: a ColumnParallel in_proj and a RowParallel out_proj, as attention's qkv and
    # proj: under SP one all-gather and one reduce-scatter forward, half a dense layer's
    dev = gpu("h100")
    clu = cluster_for(dev.name)
    st = Settings(seq_length=1024, precision="bf16", sequence_parallel=True)
    x = shape_of(_hybrid())
    raws = {}
    for key, (m, f) in {"M": ("mamba", False), "*": ("attention", False),
                        "-": ("none", True), "*-": ("attention", True)}.items():
        raws[key] = {}
        layer_time(x, st, dev, clu, np.array(4.0), np.array(1.0), np.array(1.0), np.array(4.0),
                   1, moe=False, eta_gemm=None, overlap=Overlap(), dp=np.array(1.0),
                   raw=raws[key], mixer=m, mlp=f)
    fwd = {k: float(v["tp"][2]) for k, v in raws.items()}
    assert fwd["M"] == fwd["*"] == fwd["-"] == fwd["*-"] / 2 > 0


def test_ssd_kernel_flops_are_the_launched_triton_kernels():
    # mamba_ssm ssd_combined.py: forward _bmm_chunk_fwd (CB, whole), _chunk_state_fwd (B^T X),
    # _chunk_scan_fwd (causal: half of (L o CB^T) X, plus C S); backward recomputes CB and the
    # states, then dstates (C^T dY), dx (half CB^T dY, plus B dS), dB (X dS), dC (dY S), dCB
    # (half dY X^T), two _bmm_chunk_bwd (dCB B, dCB^T C) and ddA (half dY X^T)
    T = 2 * Q
    cb, diag, states, out = _einsum_flops(T)
    f, b = ssd_kernel_flops((D, N, H, G, 4), T, chunk=Q)
    assert float(f) == cb + diag / 2 + states + out
    assert float(b) == 3 * cb + 3 * diag / 2 + 5 * states


def test_the_scan_runs_at_the_measured_triton_rate_or_at_hbm_bandwidth():
    # tilelang benchmark/mamba2: mamba_ssm's Triton _chunk_scan_fwd at about 91 TFLOP/s on an
    # H800 SXM (dense BF16 peak 989.4 TFLOP/s): that share of the H100's 16-bit peak, any
    # recipe; a matmul kernel takes at least its bytes at HBM bandwidth (3.35 TB/s), the
    # memory-bound kernels their bytes; at b = 2 Megatron's layout copies are streamed too
    dev = gpu("h100")
    x = shape_of(_hybrid())
    one = np.array(1.0)
    f, b = layer_time(x, Settings(seq_length=1024, precision="fp8"), dev,
                      cluster_for(dev.name), one, one, one, one, 2, moe=False, eta_gemm=None,
                      overlap=Overlap(), dp=one, mixer="mamba", mlp=False)
    f16, b16 = layer_time(x, Settings(seq_length=1024, precision="bf16"), dev,
                          cluster_for(dev.name), one, one, one, one, 2, moe=False,
                          eta_gemm=None, overlap=Overlap(), dp=one, mixer="mamba", mlp=False)
    rate, hbm = dev.peak("bf16") * 91 / 989.4, 3.35e12
    T = 2 * 1024
    chunks = T // MAMBA_CHUNK
    cb = chunks * G * 2 * MAMBA_CHUNK ** 2 * N
    diag = chunks * H * 2 * MAMBA_CHUNK ** 2 * P
    states = chunks * H * 2 * N * MAMBA_CHUNK * P
    fwd_flops = {"bmm_chunk": cb, "chunk_state": states, "chunk_scan": diag / 2 + states}
    # bytes per token at Q = 128 (as _kernel_bytes): B / C, CB per token, conv channels, states
    bc, cbv, xbc, sv = G * N, G * MAMBA_CHUNK, D + 2 * G * N, D * N / MAMBA_CHUNK
    fwd_by = {"bmm_chunk": 4 * bc + 4 * cbv, "chunk_state": 2 * (bc + D) + 4 * sv,
              "chunk_scan": 4 * cbv + 2 * (2 * D + bc + sv) + 4 * D}
    want_f = sum(max(fwd_flops[k] / rate, T * fwd_by[k] / hbm) for k in fwd_flops)
    assert float(f["attention"]) == pytest.approx(want_f) == float(f16["attention"])
    assert float(b["attention"]) == float(b16["attention"]) > float(f["attention"])
    # memory-bound: conv1d, state passing, norm (forward); norm, recomputed conv1d and fp32
    # state passing, dz, state_passing_bwd, the dC and dCB sums, conv1d backward (backward)
    fwd_mem = 4 * xbc + 6 * sv + 4 * D
    bwd_mem = 6 * D + 4 * xbc + 8 * sv + 12 * D + 12 * sv + 8 * bc + 8 * cbv + 6 * xbc
    copies_f, copies_b = layout_copy_bytes((D, N, H, G, 4))      # b = 2: Megatron's copies
    norm_res = 2 * 5 * 256                           # the layer's own norm and residual
    assert float(f16["memory"]) == pytest.approx(T * (norm_res + fwd_mem + copies_f) / hbm)
    assert float(b16["memory"]) == pytest.approx(T * (1.5 * norm_res + bwd_mem + copies_b) / hbm)
    assert float(f["cp"]) == 0.0



@pytest.mark.parametrize("name, rate", [
    # Blackwell: the measured rate per SM (91 TFLOP/s over the H800's 132 SMs) times the
    # GPU's SMs, below 9 % of its 2.25 / 2.5 PFLOP/s 16-bit peak (207 / 230 TFLOP/s)
    ("b200", 91e12 / 132 * 148), ("gb300", 91e12 / 132 * 160),
    # A100: the measured share of its 312 TFLOP/s peak (28.7), below 91 / 132 x 108 (74.5)
    ("a100-80gb", 312e12 * 91 / 989.4)])
def test_the_scan_runs_at_the_measured_rate_per_sm_where_tensor_cores_are_faster(name, rate):
    # mamba_ssm's _chunk_scan_fwd loop (ssd_chunk_scan.py:136-150 at e9594ce) spends, per
    # element of the chunk's CB block, an exp, two products, a mask and a cast on the SM's
    # other pipes beside one tl.dot: on an H800 it reaches 9 % of the tensor peak, and a GPU
    # whose tensor cores are faster per SM (Blackwell: twice Hopper's) does not speed it up
    dev = gpu(name)
    x = shape_of(_hybrid())
    one = np.array(1.0)
    f, _ = layer_time(x, Settings(seq_length=1024, precision="bf16"), dev,
                      cluster_for(dev.name), one, one, one, one, one, moe=False,
                      eta_gemm=None, overlap=Overlap(), dp=one, mixer="mamba", mlp=False)
    T = 1024
    chunks = T // MAMBA_CHUNK
    cb = chunks * G * 2 * MAMBA_CHUNK ** 2 * N
    diag = chunks * H * 2 * MAMBA_CHUNK ** 2 * P
    states = chunks * H * 2 * N * MAMBA_CHUNK * P
    flops = {"bmm_chunk": cb, "chunk_state": states, "chunk_scan": diag / 2 + states}
    bc, cbv, sv = G * N, G * MAMBA_CHUNK, D * N / MAMBA_CHUNK
    by = {"bmm_chunk": 4 * bc + 4 * cbv, "chunk_state": 2 * (bc + D) + 4 * sv,
          "chunk_scan": 4 * cbv + 2 * (2 * D + bc + sv) + 4 * D}
    want = sum(max(flops[k] / rate, T * by[k] / dev.hbm_bandwidth) for k in flops)
    assert float(f["attention"]) == pytest.approx(want)

def assert_priced_and_tp_shortens_it(arch):
    """``arch``'s step on 2 x H100 (s 2048, b 1, m 8) is finite and positive at t = 1 and 2,
    and TP 2 shortens its compute."""
    st = Settings(seq_length=2048, precision="bf16", micro_batch_size=1)
    out = step_time_grid(arch, "h100", t=[1, 2], d=[2, 1], m=8, settings=st)
    assert np.all(np.isfinite(out["step"])) and np.all(out["step"] > 0)
    assert out["compute"][1] < out["compute"][0]


def test_a_hybrid_step_is_priced_and_tp_shortens_it():
    assert_priced_and_tp_shortens_it(_hybrid("M*M-" * 4))


def test_mixers_without_a_price_are_refused_in_one_line_naming_what_is_priced():
    arch = Architecture(
        name="m1", num_layers=2, hidden_size=64, num_attention_heads=2,
        position_embedding_type="none", layer_mixers=("mamba", "attention"), mamba_version=1,
        mamba_inner_size=128, mamba_state_dim=16, mamba_dt_rank=4)
    with pytest.raises(StepTimeNotModelledError, match="Mamba-1") as err:
        shape_of(arch)
    assert "\n" not in str(err.value)
    assert "Mamba-2 and Gated DeltaNet are" in str(err.value)


def test_the_nemotron_3_nano_preset_is_its_card():
    # NVIDIA's model card of nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 and Megatron-Bridge's
    # docs/models/nemotron/nemotron3-nano.md (067f987df0): 52 layers, 23 Mamba-2, 23 MoE,
    # 6 attention; 31.6B parameters in total, 3.5B active ("3.6B including embeddings")
    arch = preset("nemotron-3-nano")
    kinds = {kind: n for kind, n, _, _ in shape_of(arch).kinds}
    assert kinds == {("mamba", None): 23, ("none", True): 23, ("attention", None): 6}
    assert abs(parameter_count(arch) - 31.6e9) <= 0.05e9
    assert abs(active_parameter_count(arch) - 3.6e9) <= 0.05e9



def test_context_parallel_mamba_sends_its_projections_and_output_all_to_all():
    # MambaContextParallel (megatron/core/ssm/mamba_context_parallel.py at d98e8a64dd):
    # pre_conv_ssm's all-to-alls of z, x, B, C, dt and post_conv_ssm's of y.  A rank of c = 2
    # holds T = s / 2 tokens and sends the other rank half of its bf16 payload
    # 2 T (3 d_ssm + 2 G N + H); the backward sends the gradients back the same way
    dev = gpu("h100")
    s = 1024
    raw = {}
    layer_time(shape_of(_hybrid()), Settings(seq_length=s, precision="bf16"), dev,
               cluster_for(dev.name), np.array(1.0), np.array(2.0), np.array(1.0),
               np.array(1.0), 1, moe=False, eta_gemm=None, overlap=Overlap(),
               dp=np.array(1.0), raw=raw, mixer="mamba", mlp=False)
    T = s / 2
    sent = 2 * T * (3 * D + 2 * G * N + H) / 2
    assert float(raw["cp"][2]) == pytest.approx(sent) == pytest.approx(float(raw["cp"][3]))
