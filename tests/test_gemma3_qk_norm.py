"""Gemma 3's Q and K norms under a framework that trains the model's own code (DeepSpeed).

transformers' ``Gemma3RMSNorm.forward`` (``models/gemma3/modeling_gemma3.py`` lines 128-133,
5.24.0 and 5.25.0 alike) normalises in fp32 and multiplies by ``1.0 + self.weight.float()``
before ``type_as(x)``, as ``Qwen3NextRMSNorm`` does; ``Gemma3Attention`` applies one of d_h to
Q and one to K (lines 310-311, 329-330).  That multiply keeps its two fp32 operands: the
normalised Q and K, 4 bytes an element where a 16-bit norm output is 2, and ``1 + weight``,
4 d_h bytes per norm.  Per layer and micro-batch, with a query heads and g key/value heads of
d_h, on tau = s b / c tokens over t tensor-parallel ranks, the extra is

    2 tau (a + g) d_h / t + 2 * 4 d_h  [bytes].

gemma-3-1b (google/gemma-3-1b-pt config.json): a = 4, g = 1, d_h = 256, 26 layers, so per
layer 2 * (4 + 1) * 256 = 2560 bytes per token over c t, plus 2 * 4 * 256 = 2048 bytes.
Megatron-LM runs its own layer (Transformer Engine's norms): no such term there.
"""

import dataclasses

import sympy as sp

from memsym.model import from_hf_config
from memsym.symbols import L, a, b, c, d_h, g, s, t

from hf_oracle import write_config
from test_hf_configs import REAL


def _layers(x, framework):
    from memsym.training import Training, stage_activations

    return stage_activations(x, training=Training(framework=framework))["layer_activations"].expr


def test_gemma3_reads_fp32_scaled_qk_norms(tmp_path):
    arch = from_hf_config(write_config(tmp_path, REAL["gemma-3-1b"], "g3"))
    assert arch.qk_layernorm and arch.qk_norm_fp32_scale
    # Qwen3's Qwen3RMSNorm multiplies weight * x.to(input_dtype): 16-bit, no such term
    qwen3 = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 128}
    q3 = from_hf_config(write_config(tmp_path, qwen3, "q3"))
    assert q3.qk_layernorm and not q3.qk_norm_fp32_scale


def test_deepspeed_keeps_gemma3_fp32_qk_norm_outputs(tmp_path):
    arch = from_hf_config(write_config(tmp_path, REAL["gemma-3-1b"], "g3"))
    plain = dataclasses.replace(arch, qk_norm_fp32_scale=False)
    per_layer = 2560 * s * b / (c * t) + 2048          # by hand, see the module docstring
    # the first 1F1B stage holds p micro-batches of its L/p layers: L layer copies in all
    extra = (_layers(arch, "deepspeed") - _layers(plain, "deepspeed")).subs(
        {a: 4, g: 1, d_h: 256, L: 26})
    assert sp.simplify(extra - 26 * per_layer) == 0
    assert sp.simplify(_layers(arch, "megatron") - _layers(plain, "megatron")) == 0
