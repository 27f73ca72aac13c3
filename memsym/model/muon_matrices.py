"""The weight matrices Muon orthogonalizes in one decoder layer, and the parameters it leaves
to its scalar Adam on one GPU.

Megatron-LM d98e8a64dd routes every 2-D parameter that is not an embedding or the output
layer to Muon (``megatron/core/optimizer/emerging_optimizers.py:140-147``,
``layer_wise_optimizer.py:38-53``): the attention and MLP projections, the router, the shared
and each routed expert's weights (Transformer Engine's grouped MLP keeps one ``weight<i>`` per
local expert).  Megatron stores a linear weight as ``[out_features, in_features]``; a
column-parallel one is split over TP by rows (``partition_dim`` 0), a row-parallel one by
columns (1).  ``linear_qkv`` is orthogonalized as its Q, K and V blocks unless
``--muon-no-split-qkv`` (``emerging_optimizers.py:407-437``, 788-803; MLA's projections are
separate weights already).
"""

from __future__ import annotations

from fractions import Fraction

from .architecture import Architecture, lenient
from .counts import norm_params
from .sizes import padded_vocab_size
from .stages import StageParameters

__all__ = ["muon_matrices", "scalar_adam_parameters"]


def muon_matrices(arch: Architecture, moe: bool, *, split_qkv: bool = True) -> tuple:
    """One decoder layer's Muon matrices: ``(name, rows, cols, split, count)`` each.

    ``rows, cols``: the whole matrix [elements]; ``split``: how TP divides it
    (``"rows"`` column-parallel, ``"cols"`` row-parallel, ``None`` replicated) and, for routed
    experts, ``"expert-rows"`` / ``"expert-cols"`` (expert TP); ``count``: such matrices in the
    layer (E routed experts, 3 for split Q, K, V...).

    Parameters
    ----------
    arch : Architecture
        The model.
    moe : bool
        An MoE layer (router, shared and routed experts) instead of a dense MLP.
    split_qkv : bool
        Orthogonalize ``linear_qkv`` as its Q, K and V blocks (not ``--muon-no-split-qkv``).

    Examples
    --------
    Llama-2-7B (h 4096, 32 heads of 128, f 11008, SwiGLU): Q, K, V 4096 x 4096 each,
    the output projection, fc1 2 x 11008 by 4096, fc2:

    >>> from memsym.model import preset
    >>> [(n, r, c) for n, r, c, _, _ in muon_matrices(preset("llama2-7b"), False)]
    [('q', 4096, 4096), ('k', 4096, 4096), ('v', 4096, 4096), ('proj', 4096, 4096), ('fc1', 22016, 4096), ('fc2', 4096, 11008)]
    """
    x = lenient(arch)
    h, a, g = x.hidden_size, x.num_attention_heads, x.num_query_groups
    out = []
    if x.multi_latent_attention:
        d_r = x.qk_pos_emb_head_dim
        d_qk, d_v, r_q, r_kv = x.qk_head_dim + d_r, x.v_head_dim, x.q_lora_rank, x.kv_lora_rank
        if r_q:
            out += [("q_down", r_q, h, None, 1), ("q_up", a * d_qk, r_q, "rows", 1)]
        else:
            out.append(("q", a * d_qk, h, "rows", 1))
        out += [("kv_down", r_kv + d_r, h, None, 1),
                ("kv_up", a * (x.qk_head_dim + d_v), r_kv, "rows", 1)]
    else:
        d_qk = d_v = x.kv_channels
        # an output gate is a fourth block after Q (emerging_optimizers.py:150-160)
        gate = bool(x.attention_output_gate)
        if split_qkv:
            out += [("q", a * d_qk, h, "rows", 1)] + ([("gate", a * d_qk, h, "rows", 1)]
                                                       if gate else [])
            out += [("k", g * d_qk, h, "rows", 1), ("v", g * d_qk, h, "rows", 1)]
        else:
            out.append(("qkv", ((2 if gate else 1) * a + 2 * g) * d_qk, h, "rows", 1))
    out.append(("proj", h, a * d_v, "cols", 1))
    mult = 2 if x.swiglu else 1

    def mlp(name, f, count, expert=""):
        return [(name + "_fc1", mult * f, h, expert + "rows", count),
                (name + "_fc2" if name else "fc2", h, f, expert + "cols", count)]

    if not moe:
        return tuple(out + [("fc1", mult * x.ffn_hidden_size, h, "rows", 1),
                            ("fc2", h, x.ffn_hidden_size, "cols", 1)])
    out.append(("router", x.num_experts, h, None, 1))
    if x.moe_shared_expert_intermediate_size:
        out += mlp("shared", x.moe_shared_expert_intermediate_size, 1)
    return tuple(out + mlp("expert", x.moe_ffn_hidden_size, x.num_experts, "expert-"))


def scalar_adam_parameters(arch: Architecture, sp_: StageParameters, t: int) -> Fraction:
    """Parameters of one GPU of a stage that Muon leaves to its scalar Adam [parameters].

    The word embedding on the first stage and the output layer on the last (untied, or the
    tied copy of a pipeline's last stage), each ``V_pad h / t``; every norm (``norms_per_layer``
    per layer, the final norm), replicated.  Biases and MLA's q/kv norms are counted with the
    matrices (neglected: none in the MoE presets this prices).

    Parameters
    ----------
    arch : Architecture
        The model.
    sp_ : StageParameters
        The stage (:func:`memsym.model.stage_parameters`).
    t : int
        Tensor-parallel size [GPUs].

    Examples
    --------
    Llama-2-7B on one GPU: 2 x 32000 x 4096 + (32 x 2 + 1) x 4096 (by hand):

    >>> from memsym.model import preset, stage_parameters
    >>> x = preset("llama2-7b")
    >>> scalar_adam_parameters(x, stage_parameters(x), 1) == 2 * 32000 * 4096 + 65 * 4096
    True
    """
    x = lenient(arch)
    vh = padded_vocab_size(x.vocab_size, t, x.make_vocab_size_divisible_by) * x.hidden_size
    mats = int(sp_.embedding) + int(sp_.output_layer and (
        bool(x.untie_embeddings_and_output_weights) or not sp_.embedding))
    norm = norm_params(x) * x.hidden_size
    norms = len(sp_.layers) * x.norms_per_layer * norm + (norm if sp_.output_layer else 0)
    return Fraction(mats * vh, t) + norms

