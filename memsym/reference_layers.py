r"""Reference transformer layers to measure: Megatron-style GPT, Llama-style, and transformers' own.

Each factory returns ``(make, make_inputs)`` for :func:`memsym.measure.derive_saved_bytes`:
``make(**shape)`` builds one layer and ``make_inputs(**shape)`` its input activation
(``requires_grad=True``, as inside a model).  The layers are written op by op after the
code they imitate so that what autograd saves is what that code saves on this PyTorch
build; :func:`hf_layer` builds Hugging Face transformers' real decoder-layer classes instead.
PyTorch (and transformers) are imported only when a factory is called.

References
----------
.. [korthikanti] Korthikanti et al., arXiv:2205.05198, §4.1 (the layer of Eq. 1: LayerNorm,
   fused QKV, softmax attention with dropout, 4h GeLU MLP, dropout).
.. [llama] Touvron et al., "Llama 2", arXiv:2307.09288 (RMSNorm, SwiGLU, grouped-query
   attention); the op order follows Hugging Face transformers' ``modeling_llama.py``
   (``LlamaRMSNorm``, ``repeat_kv``, ``eager_attention_forward``).
.. [pytorch-sdpa] ``torch.nn.functional.scaled_dot_product_attention``.
.. [hf-transformers-layers] transformers' ``LlamaDecoderLayer``, ``Qwen2DecoderLayer``,
   ``Qwen3DecoderLayer`` (``modeling_*.py``: called with ``position_embeddings`` from the
   model's rotary embedding) and ``GPT2Block``.
"""

from __future__ import annotations

import math
import importlib

from .errors import InvalidValueError, choose
from .measure import MeasureError, import_torch

__all__ = ["gpt_layer", "llama_layer", "hf_layer", "DROPOUTS", "ATTENTIONS", "HF_FAMILIES"]

#: How dropout is run: ``functional`` is ``F.dropout`` (on the CPU it keeps a scaled noise
#: tensor in the activation dtype); ``native`` is ``torch.native_dropout``, the fused kernel
#: CUDA uses, which keeps a 1-byte bool mask.
DROPOUTS = ("functional", "native")
#: Attention kernels of the Llama-style layer.
ATTENTIONS = ("eager", "sdpa")

_CLASSES: dict = {}


def _dtype(torch, dtype):
    if isinstance(dtype, torch.dtype):
        return dtype
    names = ("bfloat16", "float16", "float32", "float64")
    return getattr(torch, choose("dtype", dtype, names))


def _classes() -> dict:
    """Define the layer classes on first use (so that importing this module needs no torch)."""
    if _CLASSES:
        return _CLASSES

    torch = import_torch()  # MeasureError with the install hint when PyTorch is missing
    F = torch.nn.functional
    nn = torch.nn

    def drop(x, p, impl, training):
        if not training or p == 0:
            return x
        if impl == "native":
            return torch.native_dropout(x, p, True)[0]
        return F.dropout(x, p, True)

    class MegatronAttention(nn.Module):
        """Megatron-LM ParallelAttention at t = 1: fused QKV, baddbmm, softmax, dropout, bmm."""

        def __init__(self, h, a, p_drop, dropout, causal):
            super().__init__()
            self.a, self.d = a, h // a
            self.p, self.impl, self.causal = p_drop, dropout, causal
            self.qkv = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)

        def forward(self, x):  # x: [s, b, h], Megatron's layout
            s, b, h = x.shape
            a, d = self.a, self.d
            # Megatron's per-head interleaved layout: Q, K, V stay views of one storage.
            mixed = self.qkv(x).view(s, b, a, 3 * d)
            q, k, v = mixed.split(d, dim=-1)
            q = q.view(s, b * a, d).transpose(0, 1)
            k = k.view(s, b * a, d).transpose(0, 1)
            v = v.view(s, b * a, d).transpose(0, 1)
            buf = torch.empty(b * a, s, s, dtype=x.dtype)
            # The 1/sqrt(d) scale inside baddbmm (as Megatron does) saves no extra tensor.
            scores = torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(d))
            scores = scores.view(b, a, s, s)
            if self.causal:
                mask = torch.ones(s, s, dtype=torch.bool).triu(1)
                scores = scores.masked_fill(mask, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            probs = drop(probs, self.p, self.impl, self.training)
            ctx = torch.bmm(probs.view(b * a, s, s), v)
            ctx = ctx.transpose(0, 1).reshape(s, b, h)
            return drop(self.proj(ctx), self.p, self.impl, self.training)

    class MegatronMLP(nn.Module):
        def __init__(self, h, p_drop, dropout):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
            self.p, self.impl = p_drop, dropout

        def forward(self, x):
            return drop(self.fc2(F.gelu(self.fc1(x))), self.p, self.impl, self.training)

    class GPTLayer(nn.Module):
        """Pre-LayerNorm GPT layer of Korthikanti et al. §4.1."""

        def __init__(self, h, a, p_drop=0.1, dropout="functional", causal=True):
            super().__init__()
            self.ln1 = nn.LayerNorm(h)
            self.attention = MegatronAttention(h, a, p_drop, dropout, causal)
            self.ln2 = nn.LayerNorm(h)
            self.mlp = MegatronMLP(h, p_drop, dropout)

        def forward(self, x):
            x = x + self.attention(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class LlamaRMSNorm(nn.Module):
        """transformers' LlamaRMSNorm: normalise in fp32, cast back, scale."""

        def __init__(self, h, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(h))
            self.eps = eps

        def forward(self, x):
            dtype = x.dtype
            x = x.to(torch.float32)
            var = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(var + self.eps)
            return self.weight * x.to(dtype)

    class LlamaAttention(nn.Module):
        """Grouped-query attention without RoPE; eager (repeat_kv + matmul) or SDPA."""

        def __init__(self, a, g, d, kernel):
            super().__init__()
            h = a * d
            self.a, self.g, self.d, self.kernel = a, g, d, kernel
            self.q_proj = nn.Linear(h, a * d, bias=False)
            self.k_proj = nn.Linear(h, g * d, bias=False)
            self.v_proj = nn.Linear(h, g * d, bias=False)
            self.o_proj = nn.Linear(a * d, h, bias=False)

        def forward(self, x):  # x: [b, s, h], transformers' layout
            b, s, _ = x.shape
            a, g, d = self.a, self.g, self.d
            q = self.q_proj(x).view(b, s, a, d).transpose(1, 2)
            k = self.k_proj(x).view(b, s, g, d).transpose(1, 2)
            v = self.v_proj(x).view(b, s, g, d).transpose(1, 2)
            if self.kernel == "sdpa":
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=g != a)
            else:
                rep = a // g
                if rep > 1:  # transformers' repeat_kv: expand then reshape (a copy)
                    k = k[:, :, None].expand(b, g, rep, s, d).reshape(b, a, s, d)
                    v = v[:, :, None].expand(b, g, rep, s, d).reshape(b, a, s, d)
                w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d)
                mask = torch.full((s, s), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1)
                w = w + mask
                w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
                out = torch.matmul(w, v)
            out = out.transpose(1, 2).reshape(b, s, a * d)
            return self.o_proj(out)

    class LlamaMLP(nn.Module):
        def __init__(self, h, f):
            super().__init__()
            self.gate_proj = nn.Linear(h, f, bias=False)
            self.up_proj = nn.Linear(h, f, bias=False)
            self.down_proj = nn.Linear(f, h, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class LlamaLayer(nn.Module):
        def __init__(self, a, g, d, f, kernel="eager"):
            super().__init__()
            h = a * d
            self.input_layernorm = LlamaRMSNorm(h)
            self.self_attn = LlamaAttention(a, g, d, kernel)
            self.post_attention_layernorm = LlamaRMSNorm(h)
            self.mlp = LlamaMLP(h, f)

        def forward(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            return x + self.mlp(self.post_attention_layernorm(x))

    _CLASSES.update(GPTLayer=GPTLayer, LlamaLayer=LlamaLayer)
    return _CLASSES


def _check_groups(a, g) -> None:
    """Refuse ``a`` query heads that ``g`` key/value heads do not divide (GQA)."""
    if a % g:
        raise InvalidValueError(f"a = {a} heads are not divisible by g = {g} key/value heads")


def _hidden_input(torch, dt):
    """``make_inputs`` of a transformers-layout layer: one ``[b, s, a d_h]`` activation of
    dtype ``dt`` that autograd tracks."""
    def make_inputs(s=None, b=None, a=None, d_h=None, **_):
        return (torch.randn(b, s, a * d_h, dtype=dt, requires_grad=True),)

    return make_inputs


def gpt_layer(*, dtype="bfloat16", p_drop: float = 0.1, dropout: str = "functional",
              causal: bool = True):
    r"""A Megatron-style GPT layer (Korthikanti et al. §4.1) as ``(make, make_inputs)``.

    ``make(s, b, h, a)`` builds the layer (``h`` divisible by ``a``); the input is
    ``[s, b, h]``.  Korthikanti's Eq. 1 for this layer, 16-bit activations and 1-byte
    dropout masks:

    .. math::

        A_{\text{layer}} = s b h \left(34 + 5 \frac{a s}{h}\right) \quad [\text{bytes}]

    Parameters
    ----------
    dtype : str
        ``"bfloat16"`` (default), ``"float16"``, ``"float32"`` or ``"float64"``.
    p_drop : float
        Dropout probability (attention probabilities and both block outputs).
    dropout : {"functional", "native"}
        See :data:`DROPOUTS`.
    causal : bool
        Apply a causal mask with ``masked_fill`` (which saves an s x s bool mask).

    Examples
    --------
    >>> from memsym.measure import torch_available, measure_saved
    >>> if torch_available():
    ...     make, inputs = gpt_layer(dropout="native", causal=False)
    ...     measure_saved(make, inputs, dict(s=4, b=2, h=8, a=2)).total
    ... else:  # by hand: 34 sbh + 5 a s^2 b + 2 LayerNorms x (mean, rstd) in bf16 = 8 sb
    ...     34 * 4 * 2 * 8 + 5 * 2 * 4**2 * 2 + 8 * 4 * 2
    2560
    """
    torch = import_torch()
    dt = _dtype(torch, dtype)
    dropout = choose("dropout", dropout, DROPOUTS)
    if not 0 <= p_drop < 1:
        raise InvalidValueError(f"p_drop must be in [0, 1), not {p_drop!r}")
    cls = _classes()["GPTLayer"]

    def make(s=None, b=None, h=None, a=None, **_):
        if h % a:
            raise InvalidValueError(f"h = {h} is not divisible by a = {a}")
        return cls(h, a, p_drop, dropout, causal).to(dt)

    def make_inputs(s=None, b=None, h=None, **_):
        return (torch.randn(s, b, h, dtype=dt, requires_grad=True),)

    return make, make_inputs


def llama_layer(*, dtype="bfloat16", attention: str = "eager"):
    r"""A Llama-style layer (RMSNorm, GQA, SwiGLU; no RoPE) as ``(make, make_inputs)``.

    ``make(s, b, a, g, d_h, f)`` builds it with hidden size :math:`h = a\,d_h`, ``g``
    key/value heads (``a`` divisible by ``g``) and SwiGLU width ``f``; the input is
    ``[b, s, h]``.  ``attention="sdpa"`` uses ``scaled_dot_product_attention``
    (``is_causal=True``, ``enable_gqa``), which on the CPU runs the flash kernel and keeps
    only Q, K, V, the output and an fp32 log-sum-exp per query row.

    Examples
    --------
    >>> from memsym.measure import torch_available, measure_saved
    >>> if torch_available():
    ...     make, inputs = llama_layer(attention="sdpa")
    ...     measure_saved(make, inputs, dict(s=4, b=1, a=2, g=1, d_h=4, f=8)).total
    ... else:  # by hand: 2 RMSNorms (6 sbh + 4 sb) + attention 6 sbh + 4 s b g d_h + 4 a s b
    ...     # (the o_proj input is a view of the saved SDPA output) + SwiGLU 2 sbh + 8 sbf
    ...     2 * (6 * 32 + 4 * 4) + 6 * 32 + 4 * 4 * 1 * 4 + 4 * 2 * 4 + 2 * 32 + 8 * 4 * 8
    1024
    """
    torch = import_torch()
    dt = _dtype(torch, dtype)
    attention = choose("attention", attention, ATTENTIONS)
    cls = _classes()["LlamaLayer"]

    def make(s=None, b=None, a=None, g=None, d_h=None, f=None, **_):
        _check_groups(a, g)
        return cls(a, g, d_h, f, attention).to(dt)

    return make, _hidden_input(torch, dt)


#: transformers decoder layers :func:`hf_layer` builds -> (module, class prefix).
HF_FAMILIES = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "gpt2": "GPT2"}


def hf_layer(family: str, *, attention: str = "sdpa", dtype="bfloat16", dropout: float = 0.0):
    r"""One of Hugging Face transformers' own decoder layers as ``(make, make_inputs)``.

    Built from a small config (no download) and called as its model calls it: Llama, Qwen2
    and Qwen3 layers get ``position_embeddings`` from the model's rotary-embedding module
    (computed without grad, as the model does once for all layers).  ``make(s, b, a, g, d_h,
    f)`` for the RoPE families (``h = a d_h``, ``g`` key/value heads, MLP width ``f``),
    ``make(s, b, a, d_h)`` for GPT-2 (``n_inner = 4h``); the input is ``[b, s, h]``.

    .. math::

        A_{\mathrm{HF}} = A_{\mathrm{memsym}} + \Delta_{\text{named}} \quad [\text{bytes}]

    (``tests/test_hf_activations.py`` derives each named difference.)

    Parameters
    ----------
    family : {"llama", "qwen2", "qwen3", "gpt2"}
    attention : {"eager", "sdpa"}
        transformers' ``_attn_implementation``.
    dtype : str
        Module dtype (``"bfloat16"`` for the 2-byte comparison).
    dropout : float
        Attention and residual dropout probability (GPT-2's ``attn_pdrop``/``resid_pdrop``;
        ``attention_dropout`` of the RoPE families) [1].

    Examples
    --------
    >>> import importlib.util
    >>> from memsym.measure import measure_saved
    >>> if importlib.util.find_spec("transformers") and importlib.util.find_spec("torch"):
    ...     make, inputs = hf_layer("llama")
    ...     measure_saved(make, inputs, dict(s=4, b=1, a=2, g=1, d_h=4, f=8)).total
    ... else:  # by hand: memsym's Llama layer 12sbh + 4sbgd_h + 4asb + 8sb + 6sbf (at g = 1,
    ...     # the MQA case) + RMSNorm fp32 copies 8sbh + SiLU output 2sbf + RoPE tables 4sbd_h
    ...     (12 + 8) * 32 + 4 * 4 * 4 + 4 * 2 * 4 + 8 * 4 + (6 + 2) * 4 * 8 + 4 * 4 * 4
    1088

    References
    ----------
    Hugging Face transformers, ``models/llama/modeling_llama.py`` and siblings.
    """
    torch = import_torch()
    dt = _dtype(torch, dtype)
    family = choose("transformers layer family", family, tuple(HF_FAMILIES))
    attention = choose("attention", attention, ATTENTIONS)
    if not 0 <= dropout < 1:
        raise InvalidValueError(f"dropout must be in [0, 1), not {dropout!r}")
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MeasureError("hf_layer needs transformers: pip install transformers") from exc
    name = HF_FAMILIES[family]

    # family is one of HF_FAMILIES (checked by choose above), never free text
    mod = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    config_cls = getattr(transformers, f"{name}Config")

    class CalledAsInTheModel(torch.nn.Module):
        def __init__(self, layer, rope=None):
            super().__init__()
            self.layer, self.rope = layer, rope

        def forward(self, x):
            kwargs = {}
            if self.rope is not None:
                pos = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
                with torch.no_grad():   # the model computes cos/sin once, outside the layers
                    kwargs = dict(position_embeddings=self.rope(x, pos), position_ids=pos)
            out = self.layer(x, **kwargs)
            return out[0] if isinstance(out, tuple) else out

    if family == "gpt2":
        def make(s=None, b=None, a=None, d_h=None, **_):
            cfg = config_cls(n_embd=a * d_h, n_head=a, n_layer=1, vocab_size=16, n_positions=64,
                             resid_pdrop=dropout, attn_pdrop=dropout, embd_pdrop=dropout,
                             bos_token_id=None, eos_token_id=None)
            cfg._attn_implementation = attention
            return CalledAsInTheModel(mod.GPT2Block(cfg, layer_idx=0)).to(dt)
    else:
        layer_cls = getattr(mod, f"{name}DecoderLayer")
        rope_cls = getattr(mod, f"{name}RotaryEmbedding")

        def make(s=None, b=None, a=None, g=None, d_h=None, f=None, **_):
            _check_groups(a, g)
            cfg = config_cls(hidden_size=a * d_h, num_attention_heads=a, num_key_value_heads=g,
                             head_dim=d_h, intermediate_size=f, num_hidden_layers=1,
                             vocab_size=16, max_position_embeddings=64, attention_dropout=dropout)
            cfg._attn_implementation = attention
            return CalledAsInTheModel(layer_cls(cfg, 0), rope_cls(cfg)).to(dt)

    return make, _hidden_input(torch, dt)
