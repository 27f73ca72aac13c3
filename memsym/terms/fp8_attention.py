r"""What Transformer Engine's fused attention keeps for its backward under FP8 attention.

FP8 attention (TE's ``fp8_dpa``; Megatron-Bridge's ``mixed_precision.fp8_dot_product_attention``,
:func:`memsym.readers.bridge_precision.recipe_fp8_attention`) runs ``FusedAttnFunc`` on cuDNN's
FP8 backend: ``combine_and_quantize`` makes FP8 copies of the 16-bit Q, K and V, and the
forward saves (``ctx.save_for_backward``) those copies instead of the 16-bit tensors.  Per
element of Q, K, V and of the attention output O, and per query row and head for the softmax
statistics [bytes]:

=============================  =======================  ===========  =================
recipe (``fp8_recipe``)        Q, K, V                  O            statistics
=============================  =======================  ===========  =================
16-bit attention               2                        2            4 (Stats)
``delayed``                    1                        1            8 (M, ZInv)
``tensorwise`` (current)       1                        2            8 (M, ZInv)
``mxfp8``                      2 (1 + 1/32)             2            4 (S)
=============================  =======================  ===========  =================

Transformer Engine 2.14.1 (366798ef8a, Megatron-Bridge v0.4.2's pin; release_v2.9, Bridge
v0.2.2's, saves the same: backends.py:1240-1243 there), ``transformer_engine/pytorch/attention/
dot_product_attention/backends.py``:

* ``:1211``: the backward runs in FP8 unless ``NVTE_FP8_DPA_BWD=0`` (default 1); then
  ``:1314-1322`` save ``(q_fp8, k_fp8, v_fp8, out_fp8)`` under delayed scaling, and under
  current scaling ``(q_fp8, k_fp8, v_fp8)`` with the 16-bit ``out``
  (``NVTE_DPA_FP8CS_O_in_F16``, default 1, ``:154``); ``:1395`` ``ctx.save_for_backward``.
  No 16-bit Q, K or V is saved (``qkvo_tensors`` stays ``None``; ``:1326`` only when the
  backward is 16-bit), and under delayed scaling the 16-bit output handed to the output
  projection is a dequantized copy (``:1291``) that projection quantizes again for itself
  (``proj_input``'s FP8 copy), so only the FP8 O stays.  Each Float8Tensor carries one fp32
  ``scale_inv`` (Q, K, V share theirs): bytes per layer, neglected.
* ``csrc/extensions/attention.cpp:263-276`` and ``common/fused_attn/fused_attn_fp8.cu:2448-2461``:
  the FP8 backend's auxiliary tensors are M and ZInv, each fp32 ``[b, h, s_q, 1]``, and a
  2-element rng state: 8 bytes per query row and head where the 16-bit backend keeps one fp32
  ``Stats`` (4).
* ``dot_product_attention.py:676-680``: any recipe but delayed and current scaling with
  ``fp8_dpa`` stops (``DotProductAttention does not support MXFP8BlockScaling recipe``).

MXFP8 attention is Transformer Engine main's (d0067d0da6; the Megatron-Bridge recipes at
067f987df0 that set it pin no TE): ``get_attention_quantizers`` gives the QKV and O quantizers
columnwise usage besides the rowwise (``dot_product_attention/utils.py:2720-2724``),
``combine_and_quantize`` keeps both for a training forward (``used_in_backward=is_training``,
backends.py:1484; utils.py:3059-3072 narrow the usages only for forward-only or
backward-only), backends.py:1583-1584 save ``(q_fp8, k_fp8, v_fp8)`` with the 16-bit O, and
the FP8 backend keeps one fp32 ``S`` (attention.cpp:275): Q, K and V cost two MXFP8 copies,
each an E8M0 scale byte per 32 elements (:data:`memsym.terms.low_precision.MXFP8_BLOCK`), more than
their 16-bit tensors.

Context parallelism runs its own autograd functions (``context_parallel.py``), which save FP8
Q, KV and O the same way (``:1962-1999`` at 366798ef8a) and per-step statistics memsym counts
as above.  NVFP4 recipes run FP8 attention only where ``NVTE_DPA_FP8_RECIPE`` switches it to
an FP8 recipe (an environment variable memsym does not read): counted in 16 bits.
"""

from __future__ import annotations

import sympy as sp

from ..errors import choose
from ..term import Source
from ..vocabulary import FP8_RECIPES
from .low_precision import MXFP8_BLOCK

__all__ = ["FP8_ATTENTION_RECIPES", "fp8_attention_widths", "FP8_ATTENTION_SOURCE"]

#: The recipes whose FP8 attention memsym counts: every FP8 recipe (NVFP4's: 16-bit, see the
#: module docstring).
FP8_ATTENTION_RECIPES = FP8_RECIPES

_BACKENDS = "pytorch/attention/dot_product_attention/backends.py"
#: Where the FP8 attention's saved tensors are read.
FP8_ATTENTION_SOURCE = {
    "delayed": Source("transformer-engine-v2-14", f"{_BACKENDS}:1314-1322, 1395 (q_fp8, k_fp8, "
                      "v_fp8, out_fp8 saved); csrc/extensions/attention.cpp:263-276 (M, ZInv)"),
    "tensorwise": Source("transformer-engine-v2-14", f"{_BACKENDS}:154, 1317-1320, 1395 (q_fp8, "
                         "k_fp8, v_fp8 and the 16-bit out saved); csrc/extensions/"
                         "attention.cpp:263-276 (M, ZInv)"),
    "mxfp8": Source("transformer-engine", f"{_BACKENDS}:1484, 1583-1584 at d0067d0da6; "
                    "dot_product_attention/utils.py:2720-2724, 3059-3072 (rowwise and columnwise "
                    "MXFP8 Q, K, V); csrc/extensions/attention.cpp:275 (S)"),
}


def fp8_attention_widths(recipe: str) -> tuple:
    r"""Bytes the fused attention keeps under FP8 attention with TE recipe ``recipe``: per
    element of Q, K and V, per element of its output O, per query row and head of softmax
    statistics.

    .. math:: (b_{qkv}, b_o, b_{stats}) = (1, 1, 8)\ \text{delayed},\quad
              (1, 2, 8)\ \text{tensorwise},\quad (2 + 2/32, 2, 4)\ \text{mxfp8}

    Parameters
    ----------
    recipe : {"delayed", "tensorwise", "mxfp8"}
        The FP8 recipe the attention runs under.

    Returns
    -------
    tuple of sympy.Integer or sympy.Rational
        [bytes/element], [bytes/element], [bytes per query row and head].

    Examples
    --------
    >>> fp8_attention_widths("delayed"), fp8_attention_widths("mxfp8")
    ((1, 1, 8), (33/16, 2, 4))

    References
    ----------
    .. [te-2-14] Transformer Engine 366798ef8a (2.14.1) ``backends.py:1314-1322``,
       ``csrc/extensions/attention.cpp:263-276``; d0067d0da6 for MXFP8 (module docstring).
    """
    choose("FP8 attention recipe", recipe, FP8_ATTENTION_RECIPES)
    if recipe == "mxfp8":
        copy = 1 + sp.Rational(1, MXFP8_BLOCK)      # FP8 data and its E8M0 scales
        return 2 * copy, sp.Integer(2), sp.Integer(4)
    return sp.Integer(1), sp.Integer(1 if recipe == "delayed" else 2), sp.Integer(8)
