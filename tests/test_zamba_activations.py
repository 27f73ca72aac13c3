"""Zamba's Mamba-1 mixers: the activations each keeps, measured and estimated.

Oracle: transformers' own ``ZambaForCausalLM`` (5.25.0 when checked), built from a small
``ZambaConfig`` in bf16 on the CPU, where neither ``mamba_ssm`` nor ``causal_conv1d`` runs and
``ZambaMambaMixer`` takes its torch path; a Mamba layer (its mixer alone, then with its
``input_layernorm``) runs under ``torch.autograd.graph.saved_tensors_hooks`` and the bytes of the
distinct storages autograd keeps are summed (the parameters left out).  The expected values are
derived by hand from the torch path's code (modeling_zamba.py lines 251-272, 376-481, 580-681),
tensor by tensor, in ``_by_hand``; memsym's :func:`~memsym.terms.mamba1.mamba1_mixer_activations`
must equal both.  A whole ``ZambaHybridLayer`` (the shared block's use, its linear and the
Mamba layer) measured equals memsym's layer plus SiLU's output, the difference named for Zamba2
in ``tests/test_zamba2_activations.py``.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.symbols import H_ssm, N_ssm, b, c, d_ssm, h, k_conv, r_dt, s, t
from memsym.terms.mamba import hybrid_layer_activations
from memsym.terms.mamba1 import mamba1_mixer_activations
from memsym.training import job_memory

from hf_oracle import write_config
from framework_ports import saved_storage_bytes
from in_process import estimate
from test_hf_zamba import SMALL


def _by_hand(s_, b_, h_, d_, n_, heads, r_, k_) -> int:
    """What ZambaMambaMixer's torch path keeps [bytes], read off transformers 5.25.0."""
    tok, p_ = s_ * b_, d_ // heads
    kept = 2 * tok * h_                          # in_proj's input (line 580)
    kept += 2 * tok * d_                         # conv1d's input: x .contiguous() (line 263)
    kept += 2 * b_ * d_ * (s_ + k_ - 1)          # the padded conv output, SiLU's input (271)
    kept += 2 * tok * d_                         # SiLU's output x (kept by x * D, line 472)
    kept += 2 * tok * heads * (r_ + 2 * n_)      # x_proj's output dt, B, C (611)
    # matmul broadcasting (611, 618): (b, H, P, s) transposed to (H, b, P, s) and the weights
    # expanded over b fold into H*b batches as views only when b or H is 1
    if b_ > 1 and heads > 1:
        kept += 2 * tok * d_ + 2 * b_ * heads * (r_ + 2 * n_) * p_ + 2 * b_ * heads * p_ * r_
    kept += 2 * 4 * d_ * n_                      # exp(A_log.float()) and its negation (620)
    kept += heads * (2 * 2 * b_ * p_ * s_)       # per head: dt + bias, softplus(dt) (406-408)
    kept += heads * (2 * 4 * b_ * p_ * s_ * n_)  # discrete_A, discrete_B in fp32 (415-416)
    kept += heads * (4 * b_ * s_ * n_ + 4 * b_ * p_ * s_)   # B.float(), x.float() (416-417)
    # the scan loop (453-467): the bf16 zero state, s bf16 copies, s - 1 fp32 states
    kept += heads * (2 * b_ * p_ * n_ + s_ * 2 * b_ * p_ * n_ + (s_ - 1) * 4 * b_ * p_ * n_)
    kept += heads * 4 * p_                       # D.float() (657)
    kept += 2 * tok * 2 * d_                     # z: a view of in_proj's output (580, 475)
    kept += heads * (2 * b_ * p_ * s_ + 4 * b_ * p_ * s_)   # silu(z), the fp32 scan output
    kept += 2 * tok * d_                         # out_proj's input (681)
    return kept


def _memsym(s_, b_, h_, d_, n_, heads, r_, k_) -> int:
    return mamba1_mixer_activations().expr.subs(
        {s: s_, b: b_, h: h_, d_ssm: d_, N_ssm: n_, H_ssm: heads, r_dt: r_, k_conv: k_})


def _measured(s_, b_, h_, d_, n_, heads, r_, k_, norm=False) -> int:
    """Bytes autograd keeps for transformers' ZambaMambaMixer (with ``norm``: and its layer's
    input_layernorm) on the CPU torch path."""
    import torch
    import transformers
    from transformers.models.zamba import modeling_zamba as mz

    cfg = transformers.ZambaConfig(
        hidden_size=h_, mamba_expand=d_ // h_, n_mamba_heads=heads, mamba_d_state=n_,
        mamba_dt_rank=r_, mamba_d_conv=k_, num_attention_heads=2, num_key_value_heads=2,
        intermediate_size=16, num_hidden_layers=2, layers_block_type=["mamba", "mamba"],
        vocab_size=16)
    torch.manual_seed(0)
    model = mz.ZambaForCausalLM(cfg).to(torch.bfloat16)
    layer = model.model.layers[0]
    assert isinstance(layer.mamba, mz.ZambaMambaMixer)
    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)

    def run():
        layer.mamba(layer.input_layernorm(x) if norm else x)

    return saved_storage_bytes(run, list(model.parameters()))


# (s, b, h, d_inner, N, n_mamba_heads, dt_rank, d_conv)
SHAPES = [(3, 2, 8, 16, 4, 2, 2, 4),
          (3, 1, 8, 16, 4, 2, 2, 4),       # b = 1: the matmuls copy nothing
          (5, 3, 8, 24, 2, 1, 3, 3),       # one head, expand 3: no copies either
          (4, 2, 12, 24, 3, 4, 1, 2)]


@pytest.mark.torch
@pytest.mark.parametrize("shape", SHAPES)
def test_the_torch_path_keeps_what_memsym_counts(shape):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    assert _measured(*shape) == _by_hand(*shape) == _memsym(*shape)


@pytest.mark.torch
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_a_mamba_layer_is_its_norm_and_its_mixer(shape):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    s_, b_, h_ = shape[:3]
    tok = s_ * b_
    # ZambaRMSNorm (modeling_zamba.py:60-75): the fp32 input copy (kept by pow and the rsqrt
    # product), the fp32 rsqrt per token, the bf16 normalised tensor kept by the weight product
    norm = 4 * tok * h_ + 4 * tok + 2 * tok * h_
    assert _measured(*shape, norm=True) == _by_hand(*shape) + norm
    layer = hybrid_layer_activations(("mamba1", None), shared_block={"mamba1": True},
                                     hf_norms=True, norm="rmsnorm", gated=True, dropout=False)
    s_, b_, h_, d_, n_, heads, r_, k_ = shape
    assert layer.expr.subs({s: s_, b: b_, h: h_, d_ssm: d_, N_ssm: n_, H_ssm: heads, r_dt: r_,
                            k_conv: k_, t: 1, c: 1}) == _by_hand(*shape) + norm


def test_the_formula_by_hand():
    # s = 3, b = 2, h = 8, d = 16, N = 4, H = 2, r = 2, k = 4 (tau = 6)
    by_hand = (2 * 6 * 8 + 2 * 6 * 16 + 2 * 2 * 16 * 6 + 2 * 6 * 16 + 2 * 6 * 2 * 10
               + (2 * 6 * 16 + 2 * 2 * 16 * 10 + 2 * 2 * 16 * 2) + 8 * 16 * 4 + 4 * 6 * 16
               + 8 * 6 * 16 * 4 + 4 * 6 * (2 * 4 + 16) + (6 * 6 * 16 * 4 - 2 * 2 * 16 * 4)
               + 4 * 16 + 4 * 6 * 16 + 6 * 6 * 16 + 2 * 6 * 16)
    assert _memsym(3, 2, 8, 16, 4, 2, 2, 4) == _by_hand(3, 2, 8, 16, 4, 2, 2, 4) == by_hand \
        == 9872


# --------------------------------------------------------------------------------------------
# the estimate
# --------------------------------------------------------------------------------------------

def _small_zamba_by_hand(s_: int) -> int:
    """The layer activations of SMALL["zamba"] (tests/test_hf_zamba.py) at b = 1, t = 1 under
    DeepSpeed (transformers' ZambaRMSNorms): h = 64, a = 4, g = 2 heads of d_h = 2h/a = 32,
    f = 96, 8 Mamba-1 layers (d_inner 128, 2 heads, N 16, dt_rank ceil(64/16) = 4, d_conv 4),
    3 of which run the shared block first (no adapters), no dropout."""
    tok, H, F, A, G, DH = s_, 64, 96, 4, 2, 32
    mamba = _by_hand(s_, 1, H, 128, 16, 2, 4, 4) + 4 * tok * H + 4 * tok + 2 * tok * H
    use = (4 * tok * H + 4 * tok + 4 * tok * H            # concatenation, rstd, QKV input
           + 2 * tok * DH * A + 2 * tok * DH * G + 2 * tok * DH * G   # Q, K, V
           + 4 * A * tok + 2 * tok * A * DH               # logsumexp, o_proj input
           + 2 * tok * H + 4 * tok + 2 * tok * H          # pre-MLP norm input, rstd, MLP input
           + 4 * tok * F + 2 * tok * F + 2 * tok * H      # SwiGLU, fc2 and linear inputs
           + 4 * tok * (2 * H + H))                       # the two norms' fp32 input copies
    return 8 * mamba + 3 * use


def test_the_estimate_holds_the_mamba1_layers(tmp_path):
    path = write_config(tmp_path, SMALL["zamba"])
    j = job(path, seq_length=64, micro_batch_size=1, global_batch_size=8, framework="deepspeed")
    assert job_memory(j).activations()["layer_activations"] == _small_zamba_by_hand(64)


@pytest.mark.parametrize("model", ["zamba", "zamba2"])
def test_full_recompute_keeps_each_layer_input(tmp_path, model):
    # ZambaHybridLayer and ZambaMambaDecoderLayer (modeling_zamba.py lines 749, 802), and
    # Zamba2HybridLayer and Zamba2MambaDecoderLayer, are GradientCheckpointingLayers: each of
    # the 8 layers keeps its 2sbh input, s = 64, h = 64 (Zamba2's embeddings it also reads are
    # the model's one tensor)
    path = write_config(tmp_path, SMALL[model])
    j = job(path, seq_length=64, micro_batch_size=1, global_batch_size=8,
            framework="deepspeed", recompute="full")
    assert job_memory(j).activations()["layer_activations"] == 8 * 2 * 64 * 64


def test_the_cli_estimates_zamba(tmp_path, capsys):
    code, out, err = estimate(capsys, write_config(tmp_path, SMALL["zamba"]), "--seq-length", 64,
                              "--framework", "deepspeed")
    assert code == 0, err
    assert "activations" in out and "torch path" in out


# Megatron-core builds no Mamba-1 mixer (its MambaMixer runs mamba_ssm's Mamba-2 SSD scan,
# megatron/core/ssm/mamba_mixer.py:71-74, 645 at d98e8a64dd) and no shared block (the hybrid
# layer symbols, megatron/core/models/hybrid/hybrid_layer_allocation.py:17-26): under it (and
# under torchtitan) the refusal names the framework, whatever t or p asks (rule mamba1-framework)
_NOT_BUILT = "run as transformers' own model code only (--framework deepspeed): Megatron-core " \
    "builds neither"


@pytest.mark.parametrize("argv,match", [
    (("--framework", "megatron"), _NOT_BUILT),
    (("--framework", "torchtitan"), _NOT_BUILT),
    (("--framework", "megatron", "--tensor-model-parallel-size", "2", "--world-size", "2"),
     _NOT_BUILT),
    (("--framework", "megatron", "--pipeline-model-parallel-size", "2", "--world-size", "2"),
     _NOT_BUILT),
    (("--framework", "megatron", "--tensor-model-parallel-size", "3", "--world-size", "3"),
     _NOT_BUILT),
    (("--framework", "torchtitan", "--tensor-model-parallel-size", "2", "--world-size", "2"),
     _NOT_BUILT),
    (("--framework", "deepspeed", "--tensor-model-parallel-size", "2", "--world-size", "2"),
     "tensor parallelism"),
    (("--framework", "deepspeed", "--pipeline-model-parallel-size", "2", "--world-size", "2"),
     "builds no pipeline stages"),
])
def test_what_is_not_modelled_is_refused_in_one_line(tmp_path, capsys, argv, match):
    code, out, err = estimate(capsys, write_config(tmp_path, SMALL["zamba"]), "--seq-length", 64,
                              *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and match in err


@pytest.mark.parametrize("kind,kw,match", [
    (("mamba1", False), dict(shared_block=None), "Jamba, Mamba, Falcon-Mamba"),
    (("mamba1", None), dict(shared_block=dict(mamba1=True)), "transformers' own model code"),
    (("shared", None), dict(shared_block=dict(mamba1=True), hf_norms=True,
                            recompute="selective"), "selective recompute"),
])
def test_the_terms_refuse_what_is_not_modelled(kind, kw, match):
    with pytest.raises(InvalidValueError, match=match) as err:
        hybrid_layer_activations(kind, **kw)
    assert "\n" not in str(err.value)


def _measured_hybrid(s_, b_, h_, a_, g_, f_, heads, n_, r_, k_) -> int:
    """Bytes autograd keeps for one ZambaHybridLayer: the shared block on the concatenation of
    hidden state and embeddings, the layer's linear, its Mamba layer (CPU torch path, SDPA)."""
    import torch
    import transformers
    from transformers.models.zamba import modeling_zamba as mz

    # two hybrid layers: ZambaModel ties layers 1.. to layer 0's block, and refuses no tie
    cfg = transformers.ZambaConfig(
        hidden_size=h_, num_attention_heads=a_, num_key_value_heads=g_, intermediate_size=f_,
        n_mamba_heads=heads, mamba_d_state=n_, mamba_dt_rank=r_, mamba_d_conv=k_,
        num_hidden_layers=2, layers_block_type=["hybrid", "hybrid"], vocab_size=16)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = mz.ZambaForCausalLM(cfg).to(torch.bfloat16)
    layer = model.model.layers[0]
    assert isinstance(layer, mz.ZambaHybridLayer)
    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    emb = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)

    def run():
        layer(x, original_hidden_states=emb, layer_idx=0, attention_mask=None, causal_mask=None)

    return saved_storage_bytes(run, list(model.parameters()))


@pytest.mark.torch
@pytest.mark.parametrize("shape", [(4, 2, 8, 2, 2, 12, 2, 4, 2, 4),
                                   (5, 1, 8, 4, 1, 10, 1, 3, 1, 3)])    # GQA, one Mamba head
def test_a_hybrid_layer_is_memsym_plus_the_silu_output(shape):
    # ZambaHybridLayer.forward (modeling_zamba.py:835-852): memsym's shared-block use (no
    # adapters: Zamba has none) and its Mamba layer under transformers' code (hf_norms); the
    # unfused ZambaMLP act_fn(gate_proj(x)) * up_proj(x) (line 697) keeps SiLU's output too,
    # 2f bytes a token, the difference tests/test_zamba2_activations.py names for Zamba2
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memsym.symbols import a, d_h, f, g

    s_, b_, h_, a_, g_, f_, heads, n_, r_, k_ = shape
    layer = hybrid_layer_activations(("shared", None), shared_block={"mamba1": True},
                                     hf_norms=True, norm="rmsnorm", gated=True, dropout=False)
    sizes = {s: s_, b: b_, h: h_, a: a_, g: g_, d_h: 2 * h_ // a_, f: f_, d_ssm: 2 * h_,
             N_ssm: n_, H_ssm: heads, r_dt: r_, k_conv: k_, t: 1, c: 1}
    assert _measured_hybrid(*shape) == layer.expr.subs(sizes) + 2 * s_ * b_ * f_
