r"""RoPE's memory-bound passes over the queries and keys: Transformer Engine's fused kernel or
Megatron-core's eager PyTorch fallback.

Megatron-core applies rotary embeddings through TE's fused kernel under ``apply_rope_fusion``
unless the embedding carries a scale: ``apply_rotary_pos_emb`` falls back to the unfused
``_apply_rotary_pos_emb_bshd`` when ``mscale != 1.0`` (rope_utils.py:351-356 at Megatron-LM
d98e8a64dd), and attention passes YaRN's concentration factor as that ``mscale``
(attention.py:1508-1533), :math:`0.1 \ln(\text{factor}) + 1` when ``yarn_mscale`` is None,
1 when ``yarn_mscale`` equals ``yarn_mscale_all_dim`` (yarn_rotary_pos_embedding.py:275-304;
:func:`yarn_concentration`): 1.347 for GPT-OSS, whose Bridge sets
``position_embedding_type = "yarn"`` and ``yarn_rotary_scaling_factor = 32.0`` with
``yarn_mscale = None`` (Megatron-Bridge 067f987df0 gpt_oss_bridge.py:65, 94, 99).

References
----------
.. [megatron-rope] Megatron-LM d98e8a64dd megatron/core/models/common/embeddings/rope_utils.py
   (``apply_rotary_pos_emb``, ``_apply_rotary_pos_emb_bshd``, ``_rotate_half``),
   yarn_rotary_pos_embedding.py (``_yarn_get_concentration_factor``).
"""

from __future__ import annotations

import math

__all__ = ["ROPE_FUSED_PASSES", "ROPE_UNFUSED_PASSES", "rope_passes", "yarn_concentration"]

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


def yarn_concentration(extra: dict) -> float:
    r"""YaRN's concentration factor, the ``mscale`` attention hands to RoPE [1].

    .. math::

        m(s, \mu) = \begin{cases} 0.1\,\mu \ln s + 1 & s > 1 \\ 1 & s \le 1 \end{cases},
        \qquad \text{mscale} = \begin{cases} m(s, 1) & \mu \text{ or } \mu_{all}
        \text{ unset} \\ m(s, \mu) / m(s, \mu_{all}) & \text{else} \end{cases}

    with the factor :math:`s` = ``yarn_rotary_scaling_factor`` (1 when unset: no YaRN),
    :math:`\mu` = ``yarn_mscale`` and :math:`\mu_{all}` = ``yarn_mscale_all_dim``, in floats
    as Megatron-core computes it (``_yarn_get_concentration_factor_from_config``).  TE's
    fused RoPE runs only where it is exactly 1: with :math:`\mu = \mu_{all}` (DeepSeek-V3's
    1.0 and 1.0), or no factor above 1.

    Parameters
    ----------
    extra : dict
        The architecture's ``extra`` fields, by Megatron's TransformerConfig names:
        ``yarn_rotary_scaling_factor`` [1], ``yarn_mscale`` [1], ``yarn_mscale_all_dim`` [1].

    Returns
    -------
    float
        The factor the cos and sin tables are scaled by [1].

    Examples
    --------
    GPT-OSS (factor 32, ``yarn_mscale`` None): 0.1 ln 32 + 1 = 1.3466; equal mscales: 1.

    >>> round(yarn_concentration({"yarn_rotary_scaling_factor": 32.0}), 4)
    1.3466
    >>> yarn_concentration({"yarn_rotary_scaling_factor": 40.0, "yarn_mscale": 1.0,
    ...                     "yarn_mscale_all_dim": 1.0})
    1.0

    References
    ----------
    .. [megatron-rope] Megatron-LM d98e8a64dd yarn_rotary_pos_embedding.py:275-304
       (``_yarn_get_mscale``, ``_yarn_get_concentration_factor``, ``..._from_config``);
       attention.py:326 (passed as ``mscale``), rope_utils.py:351-356 (fused only at 1.0).
    """
    if extra.get("yarn_rotary_scaling_factor") is None:
        return 1.0
    scale = float(extra["yarn_rotary_scaling_factor"])
    mu, mu_all = extra.get("yarn_mscale"), extra.get("yarn_mscale_all_dim")
    if mu is None or mu_all is None:
        return _yarn_mscale(scale)
    return _yarn_mscale(scale, float(mu)) / _yarn_mscale(scale, float(mu_all))


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    # Megatron-core's _yarn_get_mscale (yarn_rotary_pos_embedding.py:275-278), in floats
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0
