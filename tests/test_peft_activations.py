"""PEFT's LoRA and DoRA on transformers' own LlamaDecoderLayer against memsym's per-layer count.

Each test builds transformers' real ``LlamaDecoderLayer`` (``memsym.reference_layers.hf_layer``,
called as the model calls it), wraps it with PEFT's own ``get_peft_model`` (``LoraConfig(r,
lora_dropout, target_modules, use_dora)``; PEFT's ``autocast_adapter_dtype`` keeps the adapters
fp32, as the Trainer gets them), runs the forward on the CPU under
``torch.autograd.graph.saved_tensors_hooks`` (``memsym.measure``: every storage once,
parameters left out) - in bf16 under ``torch.autocast`` as the Trainer's ``--bf16`` runs it,
or in fp32 - fits the exact per-layer polynomial over many shapes (checked on held-back
shapes), and proves

    measured = memsym's per-layer activations of the job (memsym.training.layer_model) + named

with the named differences derived by hand below.  Bytes per layer and micro-batch; t = c = 1;
h = a d_h.
"""

from __future__ import annotations

import pytest
import sympy as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
qm = pytest.importorskip("transformers.models.qwen3_moe.modeling_qwen3_moe")

from memsym.job import Training  # noqa: E402
from memsym.measure import derive_saved_bytes, saved_bytes  # noqa: E402
from memsym.model import preset  # noqa: E402
from memsym.reference_layers import hf_layer  # noqa: E402
from memsym.symbols import a, b, c, d_h, f, g, h, lookup, s, t  # noqa: E402
from memsym.training.layer_model import layer_model_of  # noqa: E402

H = a * d_h
SYMBOLS = ("s", "b", "a", "g", "d_h", "f")
RANK = 3
_RANGES = dict(s=(1, 6), b=(1, 3), a=(2, 8), g=(2, 4), d_h=(2, 4), f=(1, 6))
_VALID = lambda x: x["a"] % x["g"] == 0 and x["d_h"] % 2 == 0   # noqa: E731  (GQA, RoPE)
LORA_FIT = dict(degree=4, max_degree=dict(b=1, a=1, g=1, d_h=1, f=1), ranges=_RANGES,
                valid=_VALID, extra=2, holdout=3)
# DoRA keeps the d_in x d_in identity: (a d_h)^2 and f^2
DORA_FIT = dict(degree=4, max_degree=dict(b=1, a=2, g=1, d_h=2, f=2),
                ranges=dict(_RANGES, d_h=(2, 6)), valid=_VALID, extra=2, holdout=3)
#: PEFT's module names of memsym's targets.
MODULES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
           "up": "up_proj", "down": "down_proj"}
#: Each target's input width (the dropout acts on it).
IN = {"q": H, "k": H, "v": H, "o": H, "gate": H, "up": H, "down": f}
ALL = tuple(MODULES)


def _peft_layer(targets, *, dropout: float, dora: bool, dtype: str, family: str = "llama"):
    """(make, make_inputs) of a PEFT-wrapped decoder layer, run as the Trainer runs it."""
    make, inputs = hf_layer(family, attention="sdpa", dtype=dtype)

    class UnderAutocast(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.inner(x)

    def build(**shape):
        config = peft.LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=dropout,
                                 target_modules=[MODULES[m] for m in targets], use_dora=dora)
        model = peft.get_peft_model(make(**shape), config)   # autocast_adapter_dtype: fp32
        assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if "lora_" in n)
        return UnderAutocast(model) if dtype == "bfloat16" else model

    return build, inputs


def _memsym(targets, *, dropout: bool, dora: bool, precision: str,
            model: str = "llama3-8b") -> sp.Expr:
    """memsym's per-layer activations of the job (deepspeed: transformers' model code) at
    t = c = 1 in the fit's symbols (the model gives the layer's flags, not its sizes)."""
    training = Training(seq_length=8, framework="deepspeed", finetune="lora", lora_rank=RANK,
                        lora_targets=tuple(targets), lora_dropout=dropout, dora=dora,
                        precision=precision, dropout=False)
    per_layer = layer_model_of(preset(model), False, training, "none")[0]
    return sp.expand(per_layer(False).xreplace({t: sp.Integer(1), c: sp.Integer(1), h: H}))


# --- named differences, derived by hand ------------------------------------------------------
def rope_tables(width):
    """apply_rotary_pos_emb's cos and sin ([b, s, d_h] each, kept by its products): one
    storage shared by every layer of a model (tests/test_hf_activations.py)."""
    return 2 * width * s * b * d_h


def cpu_dropout(targets):
    """nn.Dropout on the CPU is ``input * noise`` (Dropout.cpp: the fused native_dropout is
    taken on CUDA only), which keeps the noise in the input's dtype - fp32, PEFT's cast of x to
    the fp32 adapters - where CUDA keeps a 1-byte bool mask: +3 bytes an element of each
    adapted matrix's input."""
    return sp.Add(*(3 * s * b * IN[m] for m in targets))


CASES = [
    # TRL's default: bf16 autocast, lora_dropout 0.05, every linear layer
    ("bfloat16", ALL, 0.05, False),
    # no dropout under autocast: lora_A keeps autocast's cast of PEFT's fp32 copy of x
    ("bfloat16", ("q", "v"), 0.0, False),
    # fp32, no dropout: lora_A keeps the group's own input (q, k, v share the norm output)
    ("float32", ("q", "k", "v", "o", "down"), 0.0, False),
    # DoRA under autocast, with and without dropout; in fp32 on every linear layer
    ("bfloat16", ("q", "v"), 0.05, True),
    ("bfloat16", ("k", "o", "up"), 0.0, True),
    ("float32", ALL, 0.05, True),
]


@pytest.mark.slow
@pytest.mark.parametrize("dtype, targets, p, dora", CASES)
def test_peft_llama_layer_is_memsym_plus_named_differences(dtype, targets, p, dora):
    build, inputs = _peft_layer(targets, dropout=p, dora=dora, dtype=dtype)
    fit = derive_saved_bytes(build, inputs, SYMBOLS, **(DORA_FIT if dora else LORA_FIT))
    width = 2 if dtype == "bfloat16" else 4
    ours = _memsym(targets, dropout=p > 0, dora=dora,
                   precision="bf16" if width == 2 else "fp32")
    differences = rope_tables(width) + (cpu_dropout(targets) if p > 0 else 0)
    assert sp.expand(fit.expr - ours - differences) == 0, sp.factor_terms(
        sp.expand(fit.expr - ours - differences))


@pytest.mark.slow
@pytest.mark.parametrize("family, model", [("qwen2", "llama3-8b"), ("qwen3", "qwen3-8b")])
def test_peft_qwen_layers_are_memsym_plus_named_differences(family, model):
    """Qwen2 is Llama with biases on q, k and v (a frozen bias keeps nothing: llama3-8b's
    flags); Qwen3's per-head q_norm and k_norm are LlamaRMSNorm's code, whose frozen weight
    keeps no normalised tensor either (memsym's qk_norm, qwen3-8b's flags).  TRL's default
    LoRA: every linear layer, lora_dropout 0.05, bf16 autocast."""
    build, inputs = _peft_layer(ALL, dropout=0.05, dora=False, dtype="bfloat16", family=family)
    fit = derive_saved_bytes(build, inputs, SYMBOLS, **LORA_FIT)
    ours = _memsym(ALL, dropout=True, dora=False, precision="bf16", model=model)
    differences = rope_tables(2) + cpu_dropout(ALL)
    assert sp.expand(fit.expr - ours - differences) == 0, sp.factor_terms(
        sp.expand(fit.expr - ours - differences))


def test_lora_dropout_by_hand_on_one_shape():
    """One shape by hand, TRL's q and v at r = 3 with dropout under bf16 autocast: s = 4,
    b = 2 (tau = 8), a = 4, g = 2, d_h = 4 (h = 16), f = 12.  The frozen layer (no PEFT)
    keeps the norms' fp32 copies 2 x 4 tau h = 1024 and statistics 2 x 4 tau = 64, Q, K, V
    after RoPE 2 tau (16 + 8 + 8) = 512, the attention output 2 tau h = 256 and fp32
    logsumexp 4 tau a = 128, the SwiGLU's gate and up 2 x 2 tau f = 384, SiLU's output
    2 tau f = 192, RoPE's cos and sin 2 x 2 tau d_h = 128: 2688.  Each adapter: its input's
    bf16 cast 2 tau h = 256, the CPU's fp32 noise 4 tau h = 512, lora_A's output 2 tau r = 48,
    the weight casts 2 r (16 + d_out): 192 for q (d_out 16), 144 for v (d_out 8)."""
    build, inputs = _peft_layer(("q", "v"), dropout=0.05, dora=False, dtype="bfloat16")
    torch.manual_seed(0)
    got = saved_bytes(build(s=4, b=2, a=4, g=2, d_h=4, f=12), inputs(s=4, b=2, a=4, d_h=4))
    frozen = 1024 + 64 + 512 + 256 + 128 + 384 + 192 + 128
    assert got.total == frozen + (256 + 512 + 48 + 192) + (256 + 512 + 48 + 144)


def _qwen3_moe_layer(shape, *, lora: bool):
    """transformers' Qwen3MoeDecoderLayer (bf16, called as the model calls it, under the bf16
    autocast), full-trained or wrapped by PEFT (q_proj, v_proj; dropout 0.05)."""
    s_, b_, a_, g_, dh_, e_, k_, fe_ = shape
    cfg = qm.Qwen3MoeConfig(hidden_size=a_ * dh_, num_attention_heads=a_,
                            num_key_value_heads=g_, head_dim=dh_, moe_intermediate_size=fe_,
                            num_experts=e_, num_experts_per_tok=k_, num_hidden_layers=1,
                            vocab_size=16, max_position_embeddings=64, decoder_sparse_step=1,
                            mlp_only_layers=[])
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = qm.Qwen3MoeDecoderLayer(cfg, 0).to(torch.bfloat16)
    rope = qm.Qwen3MoeRotaryEmbedding(cfg)
    torch.nn.init.normal_(layer.mlp.gate.weight)      # spread the routing over the experts

    class Called(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer, self.rope = layer, rope

        def forward(self, x):
            pos = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
            with torch.no_grad():
                emb = self.rope(x, pos)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = self.layer(x, position_embeddings=emb, position_ids=pos)
            return out[0] if isinstance(out, tuple) else out

    model = Called()
    if lora:
        model = peft.get_peft_model(model, peft.LoraConfig(
            r=RANK, lora_alpha=2 * RANK, lora_dropout=0.05, target_modules=["q_proj", "v_proj"]))
    return model, torch.randn(b_, s_, a_ * dh_, dtype=torch.bfloat16, requires_grad=True)


@pytest.mark.parametrize("shape", [(6, 2, 4, 2, 4, 8, 2, 12), (5, 3, 6, 3, 6, 4, 2, 10),
                                   (7, 1, 4, 4, 8, 6, 3, 5)])
def test_peft_on_a_qwen3_moe_layer_changes_what_memsym_changes(shape):
    """An MoE layer under PEFT's attention adapters: its frozen router, experts (transformers'
    eager expert loop) and norms keep no GEMM input nor normalised tensor (memsym drops
    moe_input, routed_tokens, expert_fc2_input, norm_inputs, qkv_input and the Q/K norms'),
    and q and v gain their adapters' tensors.  memsym's MoE layer is not transformers' (its
    routing indices: tests/fake_tracker.py), so the change from full training is compared:
    measured(PEFT) - measured(full) = memsym(LoRA) - memsym(full) + the CPU's fp32 dropout
    noise (3 bytes an element of q's and v's inputs, h each)."""
    s_, b_, a_, g_, dh_, e_, k_, fe_ = shape
    measured = []
    for lora in (True, False):
        model, x = _qwen3_moe_layer(shape, lora=lora)
        measured.append(saved_bytes(model, (x,)).total)
    values = {lookup(n): v for n, v in dict(s=s_, b=b_, a=a_, g=g_, d_h=dh_, h=a_ * dh_, E=e_,
                                            k=k_, f_e=fe_, c=1, t=1, t_e=1, c_f=1).items()}

    def memsym(finetune):
        training = Training(seq_length=8, framework="deepspeed", finetune=finetune,
                            lora_rank=RANK, lora_targets=("q", "v"),
                            lora_dropout=finetune == "lora", precision="bf16", dropout=False)
        per_layer = layer_model_of(preset("qwen3-30b-a3b"), False, training, "none")[0]
        return int(per_layer(True).subs(values))

    cpu_noise = 3 * s_ * b_ * (a_ * dh_) * 2
    assert measured[0] - measured[1] == memsym("lora") - memsym("full") + cpu_noise
