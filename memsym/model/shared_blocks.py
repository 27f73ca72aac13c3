"""Shared transformer blocks of Zamba and Zamba2: weights owned by a block, reused by layers.

A Zamba (Glorioso et al. 2024, arXiv:2405.16712) or Zamba2 model is a stack of Mamba layers in
which some layers (``"hybrid"`` in ``layers_block_type``; ``"shared"`` in ``layer_mixers``) first
run a shared transformer block on the concatenation of the hidden state and the word embedding
(2h wide), project its output through a linear layer h -> h of their own and add it to the
Mamba layer's input.  Zamba has one shared block; Zamba2 has ``num_mem_blocks`` of them, used in
turn, and gives each use its own LoRA adapters on the block's MLP gate/up projection (and, with
``use_shared_attention_adapter``, on Q, K and V).  Every weight is counted once: a block's own
weights once per block (:func:`shared_block_parts`), a use's linear layer and adapters once per
use (:func:`shared_use_parts`).

REF: transformers 5.25.0 ``models/zamba/modeling_zamba.py`` (ZambaAttention,
ZambaAttentionDecoderLayer, ZambaHybridLayer, ZambaModel: the hybrid layers' blocks are tied by
``_tied_weights_keys``) and ``models/zamba2/modeling_zamba2.py`` (Zamba2Attention's
``linear_{q,k,v}_adapter_list``, Zamba2MLP's ``gate_up_proj_adapter_list``,
Zamba2Model.get_layers: blocks tied cyclically every ``num_mem_blocks`` hybrid layers).
"""

from __future__ import annotations

import sympy as sp

from .architecture import Architecture, lenient
from .layer_patterns import mixer_layer_count
from ..symbols import a, d_h, f, g, h

__all__ = ["shared_block_parts", "shared_use_parts", "shared_model_parts",
           "shared_parameter_parts", "shared_block_count"]


def shared_block_count(arch: Architecture) -> int:
    """The distinct shared blocks transformers builds: ``shared_blocks``, or fewer when the
    model has fewer ``"shared"`` layers (a block is made at its first use).

    Examples
    --------
    >>> shared_block_count(Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("mamba", "shared"), shared_blocks=2,
    ...     mamba_inner_size=16, mamba_state_dim=4, mamba_num_heads=2))
    1
    """
    x = lenient(arch)
    return min(x.shared_blocks or 0, mixer_layer_count(x, "shared"))


def shared_block_parts(x: Architecture) -> dict:
    r"""One shared transformer block's parameters by component (attention, mlp, norms).

    .. math::
        P_{\mathrm{block}} = \underbrace{2h\,a d_h + 2\cdot 2h\,g d_h + a d_h\,h}_{\mathrm{attention}}
          + \underbrace{3hf + [\mathrm{bias}](2f + h)}_{\mathrm{gated\ MLP}}
          + \underbrace{2h + h}_{\mathrm{RMSNorms}}

    Q, K, V read the 2h-wide concatenation of hidden state and embedding, O writes h; the MLP is
    gated (Zamba2 fuses gate and up: the same count) with biases iff ``add_bias_linear``
    (Zamba2's ``add_bias_linear``); the input RMSNorm is 2h wide, the pre-MLP one h.

    Parameters
    ----------
    x : Architecture
        A model with shared blocks (``shared_blocks``).

    Returns
    -------
    dict of str to sympy.Expr
        ``{"attention", "mlp", "norms"}`` [parameters].

    References
    ----------
    transformers 5.25.0 ``modeling_zamba.py`` ZambaAttentionDecoderLayer, ``modeling_zamba2.py``
    Zamba2AttentionDecoderLayer (hf-transformers-5-25).

    Examples
    --------
    >>> shared_block_parts(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("shared",), shared_blocks=1,
    ...     add_bias_linear=False, mamba_inner_size=16, mamba_state_dim=4, mamba_num_heads=2))
    {'attention': 3*a*d_h*h + 4*d_h*g*h, 'mlp': 3*f*h, 'norms': 3*h}
    """
    attention = 2 * h * a * d_h + 2 * (2 * h * g * d_h) + a * d_h * h
    mlp = 3 * h * f + ((2 * f + h) if x.add_bias_linear else 0)
    return {"attention": attention, "mlp": mlp, "norms": 3 * h}


def shared_use_parts(x: Architecture, adapters_only: bool = False) -> dict:
    r"""One use of a shared block: the layer's own linear layer and LoRA adapters.

    .. math::
        P_{\mathrm{use}} = h^2 + r\,(h + 2f) + [\mathrm{attention\ adapters}]\;3\,r\,(2h + 2h)

    with r = ``shared_adapter_rank`` (no MLP adapter when None: Zamba).

    Parameters
    ----------
    x : Architecture
        A model with shared blocks.
    adapters_only : bool
        The adapters without the linear layer (one set of adapters).

    Returns
    -------
    dict of str to sympy.Expr
        ``{"attention", "mlp"}`` [parameters] (the linear layer counted with attention).

    References
    ----------
    transformers 5.25.0 ``modeling_zamba2.py`` Zamba2HybridLayer, Zamba2Attention,
    Zamba2MLP (hf-transformers-5-25).

    Examples
    --------
    >>> shared_use_parts(Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("shared",), shared_blocks=1,
    ...     shared_adapter_rank=4, shared_attention_adapters=True, mamba_inner_size=16,
    ...     mamba_state_dim=4, mamba_num_heads=2))
    {'attention': h**2 + 48*h, 'mlp': 8*f + 4*h}
    """
    rank = x.shared_adapter_rank or 0
    attention = (0 if adapters_only else h * h) + (
        3 * rank * (2 * h + 2 * h) if x.shared_attention_adapters else 0)
    return {"attention": attention, "mlp": rank * (h + 2 * f)}


def shared_model_parts(arch: Architecture) -> dict:
    r"""The shared parameters no single layer owns: every block once, and the adapter sets
    built beyond one per use.

    .. math:: n_{\mathrm{blocks}} P_{\mathrm{block}}
              + (n_{\mathrm{sets}} - n_{\mathrm{uses}}) P_{\mathrm{adapters}}

    n_sets = ``shared_adapter_sets`` (None: one per use).  transformers 5.25 ties a model's
    hybrid-layer blocks only when ``tie_word_embeddings`` is true
    (``PreTrainedModel.get_expanded_tied_weights_keys``); untied, every use builds its own block,
    and a Zamba2 block copy holds the adapters of every use of its block id.

    Returns
    -------
    dict of str to sympy.Expr
        ``{"attention", "mlp", "norms"}`` [parameters]; zeros without shared blocks.

    Examples
    --------
    >>> shared_model_parts(Architecture(num_layers=3, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("shared", "mamba", "shared"),
    ...     shared_blocks=1, add_bias_linear=False, mamba_inner_size=16, mamba_state_dim=4,
    ...     mamba_num_heads=2))["norms"]
    3*h
    """
    x = lenient(arch)
    blocks, uses = shared_block_count(x), mixer_layer_count(x, "shared")
    out = {key: sp.Integer(0) for key in ("attention", "mlp", "norms")}
    if not blocks:
        return out
    for key, expr in shared_block_parts(x).items():
        out[key] += blocks * expr
    extra = (x.shared_adapter_sets or uses) - uses
    for key, expr in shared_use_parts(x, adapters_only=True).items():
        out[key] += extra * expr
    return {key: sp.expand(val) for key, val in out.items()}


def shared_parameter_parts(arch: Architecture) -> dict:
    r"""All shared-block parameters by component: :func:`shared_model_parts` and every use's
    own linear layer and adapters.

    .. math:: N_{\mathrm{shared}} = N_{\mathrm{model}} + n_{\mathrm{uses}} P_{\mathrm{use}}

    Returns
    -------
    dict of str to sympy.Expr
        ``{"attention", "mlp", "norms"}`` [parameters]; zeros without shared blocks.

    Examples
    --------
    >>> shared_parameter_parts(Architecture(num_layers=3, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("shared", "mamba", "shared"),
    ...     shared_blocks=1, add_bias_linear=False, mamba_inner_size=16, mamba_state_dim=4,
    ...     mamba_num_heads=2))["attention"]
    3*a*d_h*h + 4*d_h*g*h + 2*h**2
    """
    x = lenient(arch)
    out = shared_model_parts(x)
    if not shared_block_count(x):
        return out
    uses = mixer_layer_count(x, "shared")
    for key, expr in shared_use_parts(x).items():
        out[key] += uses * expr
    return {key: sp.expand(val) for key, val in out.items()}
