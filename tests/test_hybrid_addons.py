"""A hybrid model's layers take the add-ons of the parts they hold (issues 30 and 32).

What the framework and the recipe add to a plain transformer layer's activations
(``memsym.training.layer_model``: an eager SwiGLU's kept products, the checkpointed QKV view,
...) belongs to its attention or to its MLP / MoE part; a hybrid layer (Qwen3.5's Gated
DeltaNet or attention mixer with a dense MLP, Nemotron-H's one-part layers, Bamba's Mamba or
attention mixer with an MLP) takes those of the parts it holds, no more.

The oracle: transformers 5.25.0's own ``Qwen3_5DecoderLayer`` (CPU, bf16, SDPA, the PyTorch
``causal_conv1d_fn``), what autograd saves for its backward (``memsym.measure``), at several
shapes, against memsym's layer for a job running the model's code (framework deepspeed, as
the Hugging Face Trainer and TRL run it).  Its ``Qwen3_5MLP`` runs ``down(act(gate(x)) *
up(x))`` op by op (modeling_qwen3_5.py:911-913): SiLU's output, ``2 s b f`` bytes, is kept by
the product beside the gate and up outputs, which a fused SwiGLU does not keep.  The Gated
DeltaNet's chunked rule is replaced by a stand-in keeping nothing (as in
tests/test_hf_layer_kinds.py), so its ``kernel_*`` terms (derived from fla's kernel there) are
left out.  The one difference named: the RoPE cos/sin tables the model computes once for all
layers (``Qwen3_5TextRotaryEmbedding``, partial_rotary_factor 0.25: two ``[b, s, d_h / 4]``
bf16 tensors), which the attention layer's product with them saves.

The Megatron hybrids are checked by hand: Megatron-core's unfused SwiGLU
(``--no-bias-swiglu-fusion``, mlp.py:320-334 at d98e8a64dd) keeps ``2 * 2 tau f / t`` more in
every SwiGLU MLP (Bamba-9B's 32 layers), and its checkpointed core attention keeps the fused
QKV output, ``2 tau (a + g) d_h / t``, in every attention layer (Nemotron-H-8B's 4).
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.job import Training, job
from memsym.model import from_hf_config
from memsym.model.counts import parameter_values
from memsym.model.hybrid_layers import mamba_values
from memsym.model.token_mixers import mixer_values
from memsym.symbols import b, c, d_h, f, p, s, t
from memsym.terms.gated_deltanet import GDN_KERNEL_KEYS
from memsym.terms.mamba import hybrid_layer_activations
from memsym.training import job_memory, stage_activations
from memsym.training.layer_model import layer_model_of

from hf_oracle import write_config
from test_hf_hybrid import BAMBA_9B, NEMOTRON_H_8B

HF = Training(framework="deepspeed", dropout=False)     # transformers' own model code
SILU = 2 * s * b * f / (c * t)                          # the eager SwiGLU's SiLU output


def _qwen3_5(h, a_, g_, dh, f_, gk, gv, dgk, dgv, k):
    return {"model_type": "qwen3_5_text", "hidden_size": h, "num_attention_heads": a_,
            "num_key_value_heads": g_, "head_dim": dh, "intermediate_size": f_,
            "vocab_size": 16, "linear_num_key_heads": gk, "linear_num_value_heads": gv,
            "linear_key_head_dim": dgk, "linear_value_head_dim": dgv,
            "linear_conv_kernel_dim": k, "max_position_embeddings": 64,
            "layer_types": ["linear_attention", "full_attention"], "num_hidden_layers": 2,
            "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


def _measured(cfg: dict, layer_type: str, s_: int, b_: int, monkeypatch) -> int:
    """Bytes autograd saves for transformers' Qwen3_5DecoderLayer of ``layer_type``, called as
    its model calls it (the RoPE tables computed once, without grad)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mod

    from memsym.measure import measure_saved

    def rule(query, key, value, g=None, beta=None, **kwargs):
        return value.clone(), None

    monkeypatch.setattr(mod, "torch_chunk_gated_delta_rule", rule)
    conf = Qwen3_5TextConfig(**{**cfg, "layer_types": [layer_type], "num_hidden_layers": 1})
    conf._attn_implementation = "sdpa"

    class Called(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = mod.Qwen3_5DecoderLayer(conf, 0)
            self.rope = mod.Qwen3_5TextRotaryEmbedding(conf)

        def forward(self, x):
            pos = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
            with torch.no_grad():
                tables = self.rope(x, pos)
            return self.layer(x, position_embeddings=tables, position_ids=pos)

    def inputs(**_):
        return torch.randn(b_, s_, cfg["hidden_size"], dtype=torch.bfloat16, requires_grad=True)

    return measure_saved(lambda **_: Called(), inputs, {}, dtype="bfloat16",
                         group_by="none").total


@pytest.mark.torch
@pytest.mark.parametrize("sizes", [(6, 2, 24, 4, 2, 8, 20, 2, 4, 4, 6, 3),
                                   (5, 1, 16, 2, 1, 16, 36, 1, 3, 8, 4, 4),
                                   (3, 3, 32, 4, 4, 8, 12, 2, 2, 4, 8, 2)])
@pytest.mark.parametrize("layer_type", ["linear_attention", "full_attention"])
def test_qwen3_5_layers_keep_what_transformers_layer_keeps(tmp_path, monkeypatch, sizes,
                                                           layer_type):
    s_, b_, *model = sizes
    cfg = _qwen3_5(*model)
    x = from_hf_config(write_config(tmp_path, cfg))
    _, common, _, _, addons = layer_model_of(x, False, HF.replace(seq_length=s_), "none")
    kind = ("gdn" if layer_type == "linear_attention" else "attention", False)
    layer = hybrid_layer_activations(kind, **common)
    kernel = [term.expr for term in layer if term.key.removeprefix("gdn_") in GDN_KERNEL_KEYS]
    ours = layer.expr - sum(kernel, sp.Integer(0)) + addons(kind)
    rope = 2 * 2 * s * b * d_h / 4 if layer_type == "full_attention" else 0
    at = {**parameter_values(x), **mixer_values(x), s: s_, b: b_, c: 1, t: 1}
    assert _measured(cfg, layer_type, s_, b_, monkeypatch) == (ours + rope).xreplace(at)
    # what the layer adds to the hybrid term is the MLP's SiLU output, and only that
    assert sp.simplify(addons(kind) - SILU) == 0


def test_each_kind_takes_the_add_ons_of_its_own_parts(tmp_path):
    x = from_hf_config(write_config(tmp_path, _qwen3_5(64, 4, 2, 16, 96, 2, 4, 8, 16, 4)))
    per_layer, common, _, _, addons = layer_model_of(x, False, HF.replace(seq_length=64), "none")
    assert addons(("attention", None)) == 0 and addons(("gdn", None)) == 0
    assert sp.simplify(addons(("gdn", False)) - SILU) == 0
    assert sp.simplify(addons(("attention", False)) - SILU) == 0
    # a shared block's use (Zamba2) counts its own attention and MLP: nothing added
    assert addons(("shared", None)) == 0
    # under full recompute a layer keeps its input only: no add-on
    assert addons(("gdn", False), "full") == 0


def test_a_trainer_stage_keeps_the_silu_output_of_every_layer(tmp_path):
    # four layers, three Gated DeltaNet and one attention, each with a dense MLP; the first
    # 1F1B stage holds p micro-batches of them
    cfg = {**_qwen3_5(64, 4, 2, 16, 96, 2, 4, 8, 16, 4), "num_hidden_layers": 4}
    cfg.pop("layer_types")                  # full_attention_interval 4: attention last
    x = from_hf_config(write_config(tmp_path, cfg))
    common = layer_model_of(x, False, HF, "none")[1]
    plain = sum((hybrid_layer_activations(kind, **common).expr for kind in
                 (("gdn", False),) * 3 + (("attention", False),)), sp.Integer(0))
    held = stage_activations(x, training=HF)["layer_activations"].expr
    # c = 1: at a symbolic c the attention layer's a2a output is priced beside (c > 1 is
    # refused for a Gated DeltaNet mixer: memsym.rules_model_kinds)
    assert sp.simplify((held - p * (plain + 4 * SILU)).xreplace({c: 1})) == 0


S = 8192


def _megatron_layers(path, **kw) -> int:
    j = job(path, framework="megatron", seq_length=S, micro_batch_size=1, global_batch_size=8,
            gpu="h100-80gb", **kw)
    return int(job_memory(j).activations()["layer_activations"])


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_megatron_unfused_swiglu_in_every_bamba_layer(tmp_path, recompute):
    # Bamba-9B: 32 layers, each a Mamba-2 or attention mixer and a SwiGLU MLP of f = 14336;
    # --no-bias-swiglu-fusion keeps silu(gate) and the offset up product (2 x 2 tau f bytes,
    # t = 1), which the default core_attn recompute keeps too
    path = write_config(tmp_path, BAMBA_9B)
    eager = _megatron_layers(path, recompute=recompute, bias_activation_fusion=False)
    fused = _megatron_layers(path, recompute=recompute, bias_activation_fusion=True)
    assert eager - fused == 32 * 2 * 2 * S * 14336


def test_megatron_checkpointed_core_attention_keeps_the_qkv_output(tmp_path):
    # Nemotron-H-8B: 4 attention layers (a = 32, g = 8, d_h = 128) among 24 Mamba and 24 MLP
    # layers; under selective recompute of core_attn each attention layer keeps the fused QKV
    # output, 2 tau (a + g) d_h bytes (t = 1), and no other layer anything more
    path = write_config(tmp_path, NEMOTRON_H_8B)
    x = from_hf_config(path)
    pattern = NEMOTRON_H_8B["hybrid_override_pattern"]
    training = Training(framework="megatron", recompute="selective")
    common = layer_model_of(x, False, training, "selective")[1]
    kinds = {"M": ("mamba", None), "*": ("attention", None), "-": ("none", False)}
    plain = sum((hybrid_layer_activations(kinds[ch], recompute="selective",
                                          modules=("core_attn",), **common).expr
                 for ch in pattern), sp.Integer(0))
    at = {**parameter_values(x), **mamba_values(x), s: S, b: 1, c: 1, t: 1}
    qkv = 4 * 2 * S * (32 + 8) * 128
    assert pattern.count("*") == 4
    assert _megatron_layers(path, recompute="selective") == plain.xreplace(at) + qkv


def test_the_recompute_working_set_is_the_largest_layer_kind(tmp_path):
    # under full recompute one layer is rematerialised at a time: the working set is the
    # largest layer of the stage, here a Gated DeltaNet one (48 value heads, as Qwen3.5-27B's,
    # against 4 attention heads), each kind counted as test_qwen3_5_layers_keep_what_...
    # measures it on transformers' own layer (kernel terms included here, as they run)
    cfg = {**_qwen3_5(64, 4, 2, 16, 96, 4, 48, 16, 16, 4), "num_hidden_layers": 4}
    cfg.pop("layer_types")
    x = from_hf_config(write_config(tmp_path, cfg))
    full = HF.replace(recompute="full")
    _, common, _, _, addons = layer_model_of(x, False, full, "none")
    at = {**parameter_values(x), **mixer_values(x), s: 4096, b: 1, c: 1, t: 1}
    kinds = {kind[0]: (hybrid_layer_activations(kind, **common).expr + addons(kind)).xreplace(at)
             for kind in (("gdn", False), ("attention", False))}
    assert kinds["gdn"] > kinds["attention"]
    working = stage_activations(x, training=full)["recompute_working_set"].expr.xreplace(at)
    assert working == kinds["gdn"]
