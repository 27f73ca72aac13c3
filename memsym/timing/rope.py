r"""RoPE's memory-bound passes over the queries and keys: Transformer Engine's fused kernel or
Megatron-core's eager PyTorch fallback.

Megatron-core applies rotary embeddings through TE's fused kernel under ``apply_rope_fusion``
unless the embedding carries a scale: ``apply_rotary_pos_emb`` falls back to the unfused
``_apply_rotary_pos_emb_bshd`` when ``mscale != 1.0`` (rope_utils.py:351-356 at Megatron-LM
d98e8a64dd), and attention passes YaRN's concentration factor as that ``mscale``
(attention.py:1508-1533), :math:`0.1 \ln(\text{factor}) + 1` when ``yarn_mscale`` is None
(yarn_rotary_pos_embedding.py:275-294): 1.347 for GPT-OSS, whose Bridge sets
``position_embedding_type = "yarn"`` and ``yarn_rotary_scaling_factor = 32.0`` with
``yarn_mscale = None`` (Megatron-Bridge 067f987df0 gpt_oss_bridge.py:65, 94, 99).

References
----------
.. [megatron-rope] Megatron-LM d98e8a64dd megatron/core/models/common/embeddings/rope_utils.py
   (``apply_rotary_pos_emb``, ``_apply_rotary_pos_emb_bshd``, ``_rotate_half``),
   yarn_rotary_pos_embedding.py (``_yarn_get_concentration_factor``).
"""

from __future__ import annotations

__all__ = ["ROPE_FUSED_PASSES", "ROPE_UNFUSED_PASSES", "rope_passes"]

#: Element passes of TE's fused RoPE over q or k, forward: read and write each element once.
ROPE_FUSED_PASSES = 2

#: Element passes of the unfused RoPE over q or k, forward (rope_utils.py:139-152 and
#: ``_rotate_half``:73-90, d = rot_dim so ``t_pass`` is empty): ``t * cos_`` reads and writes
#: (2); ``_rotate_half`` negates one half (read and write half: 1) and concatenates the two
#: halves (read and write: 2); ``* sin_`` (2); the add reads two and writes one (3); the final
#: ``torch.cat((t, t_pass))`` copies (2).  The cos / sin tables are one row per position,
#: shared by the heads (not counted).
ROPE_UNFUSED_PASSES = 12


def rope_passes(unfused: bool) -> int:
    r"""Forward element passes of RoPE over one query or key element [1].

    .. math:: n = \begin{cases} 12 & \text{unfused (eager)} \\ 2 & \text{TE fused}\end{cases}

    The backward is priced as every memory-bound pass of the layer, 1.5 times its forward
    bytes (:data:`memsym.timing.layer.BACKWARD_MEMORY`): 18 passes unfused, against autograd's
    10 of the graph above (``* sin_`` 2, the negation 1, ``chunk``'s gradient concatenated 2,
    ``* cos_`` 2, the two gradients of ``t`` added 3) and the slice backwards (zero-filled
    gradient of the full input, 7).

    Parameters
    ----------
    unfused : bool
        RoPE runs as Megatron-core's eager ops (a YaRN ``mscale`` other than 1).

    Returns
    -------
    int
        Element passes, each reading or writing every element of q or k once [1].

    Examples
    --------
    By hand from rope_utils.py: 2 + (1 + 2) + 2 + 3 + 2 = 10 + 2 = 12 eager, 2 fused.

    >>> rope_passes(True), rope_passes(False)
    (12, 2)

    References
    ----------
    .. [megatron-rope] Megatron-LM d98e8a64dd rope_utils.py:316-390.
    """
    return ROPE_UNFUSED_PASSES if unfused else ROPE_FUSED_PASSES
