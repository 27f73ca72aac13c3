"""Zamba2's shared transformer block: the activations each use keeps, measured and estimated.

Oracle: transformers' own ``Zamba2ForCausalLM`` (5.25.0 when checked), built from a small
``Zamba2Config`` in bf16 on the CPU; one hybrid layer's shared block and its per-use linear
(``Zamba2HybridLayer.forward``: ``self.shared_transformer(...)`` then ``self.linear(...)``)
run under ``torch.autograd.graph.saved_tensors_hooks``, the bytes of the distinct storages
autograd keeps summed (the parameters and the model's RoPE tables left out: they belong to the
model, not to a use).  The measurement equals memsym's
:func:`~memsym.terms.shared_block.shared_block_activations` plus differences derived by hand
from transformers' code, the same as ``tests/test_hf_activations.py`` names for Llama:

* ``Zamba2RMSNorm`` keeps an fp32 copy of its input (4 bytes an element) and the bf16
  normalised tensor (2), where memsym's Megatron-style norm keeps the bf16 input (2): +4 bytes
  per element, for input_layernorm (2h wide) and pre_ff_layernorm (h wide), which memsym
  counts under the model's own code (``hf_norms``: DeepSpeed);
* the unfused SwiGLU ``act_fn(gate) * up`` keeps SiLU's output (2f bytes a token), which
  Megatron's fused kernel recomputes;
* with eager attention (memsym's ``flash=False``), the fp32 softmax and, under GQA, K and V
  repeated to a heads (SDPA, memsym's flash terms, has neither).

Each holds exactly, at every shape tried (with and without adapters, RoPE, GQA).

The Mamba mixer of the hybrid layer is not measured here: on the CPU transformers runs its
torch path, not the CUDA kernel path memsym models (:mod:`memsym.terms.mamba2`).  Its pre-norm
is: ``Zamba2MambaDecoderLayer.input_layernorm`` and the mixer's ``in_proj`` that reads its
output, measured alone.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.symbols import a, b, c, d_h, f, g, h, s, t
from memsym.terms.mamba import hybrid_layer_activations
from memsym.terms.shared_block import shared_block_activations
from memsym.training import job_memory

from hf_oracle import write_config
from test_hf_zamba import SMALL, _ZAMBA2
from in_process import estimate
from framework_ports import saved_storage_bytes


def _memsym(s_, b_, h_, a_, g_, f_, r_, att, flash=True, hf_norms=False) -> int:
    expr = shared_block_activations(adapter_rank=r_, attention_adapters=att, flash=flash,
                                    hf_norms=hf_norms).expr
    return expr.subs({s: s_, b: b_, h: h_, a: a_, g: g_, d_h: 2 * h_ // a_, f: f_, t: 1, c: 1})


def _measured(s_, b_, h_, a_, g_, f_, r_, att, rope, attention="sdpa") -> int:
    """Bytes autograd keeps for one use of transformers' Zamba2 shared block and its linear."""
    import torch
    import transformers
    from transformers.models.zamba2 import modeling_zamba2 as mz

    cfg = transformers.Zamba2Config(
        hidden_size=h_, num_attention_heads=a_, num_key_value_heads=g_, intermediate_size=f_,
        adapter_rank=r_, use_shared_attention_adapter=att, use_mem_rope=rope,
        num_hidden_layers=2, layers_block_type=["hybrid", "mamba"], n_mamba_heads=2,
        mamba_d_state=4, mamba_headdim=h_, vocab_size=16, num_mem_blocks=1)
    cfg._attn_implementation = attention
    torch.manual_seed(0)
    model = mz.Zamba2ForCausalLM(cfg).to(torch.bfloat16)
    layer = model.model.layers[0]
    assert isinstance(layer, mz.Zamba2HybridLayer)
    x = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    emb = torch.randn(b_, s_, h_, dtype=torch.bfloat16, requires_grad=True)
    own = list(model.parameters())
    tables = None
    if rope:
        with torch.no_grad():
            tables = model.model.rotary_emb(x, torch.arange(s_)[None].expand(b_, s_))
        own += list(tables)

    def run():
        out = layer.shared_transformer(x, original_hidden_states=emb,
                                       layer_idx=cfg.hybrid_layer_ids[0],
                                       attention_mask=None, position_embeddings=tables)
        layer.linear(out)

    return saved_storage_bytes(run, own)


# (s, b, h, a, g, f, adapter rank, attention adapters, RoPE)
SHAPES = [(4, 2, 8, 2, 2, 12, 3, True, False),
          (5, 1, 8, 4, 2, 10, 2, False, True),      # GQA (no attention adapters: they need g = a)
          (3, 2, 12, 3, 3, 8, 4, True, True),
          (6, 1, 8, 2, 1, 16, 0, False, False)]     # no adapters at all


@pytest.mark.torch
@pytest.mark.parametrize("shape", SHAPES)
def test_a_use_of_the_shared_block_is_memsym_plus_named_differences(shape):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    s_, b_, h_, a_, g_, f_, r_, att, rope = shape
    rmsnorm_fp32 = 4 * s_ * b_ * (2 * h_ + h_)      # input_layernorm (2h), pre_ff_layernorm (h)
    silu_output = 2 * s_ * b_ * f_
    assert _measured(*shape) == _memsym(s_, b_, h_, a_, g_, f_, r_, att) \
        + rmsnorm_fp32 + silu_output
    # memsym counts the norms' fp32 copies under the model's own code
    assert _measured(*shape) == _memsym(s_, b_, h_, a_, g_, f_, r_, att, hf_norms=True) \
        + silu_output


@pytest.mark.torch
@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[1]])
def test_eager_attention_adds_the_fp32_softmax_and_the_repeated_kv(shape):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    s_, b_, h_, a_, g_, f_, r_, att, rope = shape
    d_ = 2 * h_ // a_
    rmsnorm_fp32 = 4 * s_ * b_ * (2 * h_ + h_)
    silu_output = 2 * s_ * b_ * f_
    # eager_attention_forward (modeling_zamba2.py:183-205): softmax(..., dtype=float32) keeps
    # its fp32 output (4 a s^2 b) besides the bf16 cast memsym counts; repeat_kv (lines 193-194)
    # makes K and V a heads wide for the matmuls, which keep those copies (none when g = a)
    softmax_fp32 = 4 * a_ * s_ * s_ * b_
    repeat_kv = 2 * 2 * s_ * b_ * (a_ - g_) * d_
    assert _measured(*shape, attention="eager") \
        == _memsym(s_, b_, h_, a_, g_, f_, r_, att, flash=False) \
        + rmsnorm_fp32 + silu_output + softmax_fp32 + repeat_kv


def test_the_formula_by_hand():
    # s = 4, b = 2, h = 8, a = g = 2 (d_h = 8), f = 12, r = 3, adapters on Q, K, V: 8 tokens
    tok = 8
    by_hand = (2 * tok * 16 + 4 * tok          # the concatenation (2h) and its rstd
               + 2 * tok * 16                   # the norm's output, Q/K/V input
               + 3 * 2 * tok * 3                # the Q, K, V adapters' rank-3 inputs
               + 2 * tok * 16 * 2 + 2 * tok * 16 + 4 * 2 * tok   # Q, K (2 x 8), V; logsumexp
               + 2 * tok * 16                   # o_proj input (a d_h = 16)
               + 2 * tok * 8 + 4 * tok          # pre_ff_layernorm input, rstd
               + 2 * tok * 8 + 2 * tok * 3      # gate_up input, its adapter's rank-3 input
               + 2 * tok * 24 + 2 * tok * 12    # SwiGLU input (2f), down_proj input (f)
               + 2 * tok * 8)                   # the use's linear's input
    assert _memsym(4, 2, 8, 2, 2, 12, 3, True) == by_hand == 2816


def test_a_shared_layer_is_its_block_use_and_its_mamba_layer():
    use = dict(adapter_rank=4, attention_adapters=True, mamba1=False)
    shared = hybrid_layer_activations(("shared", None), shared_block=use, dropout=False)
    mamba = hybrid_layer_activations(("mamba", None), dropout=False)
    block = shared_block_activations(adapter_rank=4, attention_adapters=True)
    assert sp.expand(shared.expr - mamba.expr - block.expr) == 0


# --------------------------------------------------------------------------------------------
# the estimate
# --------------------------------------------------------------------------------------------

def _by_hand_small(s_: int, r_: int = 128, att: bool = False, hf: bool = True) -> int:
    """The layer activations of SMALL["zamba2"] (tests/test_hf_zamba.py) at b = 1, t = 1: h = 64,
    a = g = 4 heads of d_h = 2h/a = 32, f = 96, 8 Mamba-2 layers (d_inner 128, 8 heads, one
    group, d_state 16) of which 4 run a use of the shared block first; no dropout kept.  ``hf``:
    transformers' Zamba2RMSNorms run (DeepSpeed), each keeping an fp32 copy of its input and the
    bf16 normalised tensor, 4 bytes an element beyond the bf16 input: the Mamba layer's
    input_layernorm (h wide), the block's input_layernorm (2h) and pre_ff_layernorm (h); and
    the mixer's gated norm and out_proj run inside mamba_ssm's fused kernel
    (``Zamba2MambaMixer.forward`` passes rmsnorm_weight and outproj_weight), which keeps the
    norm's rstd only: neither its bf16 input nor out_proj's input (D wide each)."""
    tok, H, D, N, HEADS, F, A, DH = s_, 64, 128, 16, 8, 96, 4, 32
    mamba = (2 * tok * H + 2 * tok * H + 4 * tok          # norm input, in_proj input, rstd
             + 2 * tok * (2 * D + 2 * N + HEADS)          # zxBCdt
             + 2 * tok * D + (2 * D + 4) * tok + 2 * tok * D)   # scan, gated norm, out_proj
    use = (4 * tok * H + 4 * tok + 4 * tok * H            # concatenation, rstd, QKV input
           + (3 if att else 0) * 2 * tok * r_             # Q, K, V adapters
           + 2 * tok * DH * 2 * A + 2 * tok * DH * A + 4 * A * tok + 2 * tok * A * DH
           + 2 * tok * H + 4 * tok + 2 * tok * H + 2 * tok * r_    # pre-MLP norm, MLP input
           + 4 * tok * F + 2 * tok * F + 2 * tok * H)     # SwiGLU, fc2 and linear inputs
    if hf:
        mamba += 4 * tok * H - 2 * tok * D - 2 * tok * D
        use += 4 * tok * (2 * H + H)
    return 8 * mamba + 4 * use


@pytest.mark.parametrize("framework", ["deepspeed", "torchtitan"])
def test_the_estimate_holds_the_shared_block_uses(tmp_path, framework):
    path = write_config(tmp_path, SMALL["zamba2"])
    j = job(path, seq_length=64, micro_batch_size=1, global_batch_size=8, framework=framework)
    assert job_memory(j).activations()["layer_activations"] == _by_hand_small(
        64, hf=framework == "deepspeed")


def test_attention_adapters_add_their_inputs(tmp_path):
    cfg = {**_ZAMBA2, "adapter_rank": 8, "use_shared_attention_adapter": True}
    path = write_config(tmp_path, cfg)
    j = job(path, seq_length=32, micro_batch_size=1, global_batch_size=8, framework="deepspeed")
    assert job_memory(j).activations()["layer_activations"] == _by_hand_small(32, 8, True)


def test_the_cli_estimates_zamba2(tmp_path, capsys):
    path = write_config(tmp_path, SMALL["zamba2"])
    for framework in ("deepspeed", "megatron"):
        code, out, err = estimate(capsys, path, "--seq-length", 64, "--framework", framework)
        assert code == 0, err
        assert "activations" in out


@pytest.mark.parametrize("kw,match", [
    (dict(shared_block=None), "without the block's sizes"),
    (dict(shared_block=dict(mamba1=True)), "Mamba-1"),
    (dict(recompute="selective"), "selective recompute of a shared"),
    (dict(fp8_inputs=True), "FP8 activations of a shared"),
    (dict(context_parallel=True), "context parallelism"),
])
def test_what_is_not_modelled_is_refused_in_one_line(kw, match):
    kw = {"shared_block": dict(adapter_rank=4), **kw}
    with pytest.raises(InvalidValueError, match=match) as err:
        hybrid_layer_activations(("shared", None), **kw)
    assert "\n" not in str(err.value)
