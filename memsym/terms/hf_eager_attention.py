r"""transformers' model classes that run eager attention alone, and what it keeps beyond memsym's.

:data:`EAGER_ONLY` names the config.json model types whose transformers 5.25.0 model class
declares neither ``_supports_sdpa`` nor ``_supports_flash_attn`` (``PreTrainedModel``'s
defaults, ``modeling_utils.py:1125-1126``, are False): ``get_correct_attn_implementation``
(``modeling_utils.py:1855-1891``) then falls back from the default ``"sdpa"`` to ``"eager"``
and refuses a requested ``sdpa`` or ``flash_attention_*`` (``_sdpa_can_dispatch``,
``:1665-1670``; ``_flash_attn_can_dispatch``, ``:1592``).  A job running transformers' model
code on them keeps the :math:`s \times s` scores (``flash_attention`` False).

:func:`hf_eager_softmax_fp32` is what their eager attention keeps beyond memsym's eager
``scores`` term in 16 bits: the softmax runs in fp32 and its fp32 output is kept, besides the
16-bit cast the ``bmm`` with V keeps.
"""

from __future__ import annotations

import sympy as sp

from ..symbols import a, s, t
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["EAGER_ONLY", "hf_eager_softmax_fp32"]

#: config.json model_type -> the model class (transformers 5.25.0) that runs eager attention
#: alone; ``tests/test_hf_eager_attention.py`` checks each against the installed class and
#: that no other type memsym reads with attention lacks both SDPA and flash
EAGER_ONLY = {"bloom": "BloomPreTrainedModel (models/bloom/modeling_bloom.py:407)",
              "mpt": "MptPreTrainedModel (models/mpt/modeling_mpt.py:218)",
              "xglm": "XGLMPreTrainedModel (models/xglm/modeling_xglm.py:347)"}


def hf_eager_softmax_fp32(kept: bool = True) -> Term:
    r"""The fp32 softmax output transformers' eager BLOOM and MPT attention keeps [bytes].

    Per micro-batch and layer, with :math:`\tau = sb/c`:

    .. math:: 4\,a\,s\,\tau / t

    BLOOM's ``F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_layer.dtype)`` and
    MPT's ``softmax(attention_scores.float()).to(value_states.dtype)`` keep the fp32 softmax
    output (softmax's backward) and its 16-bit cast (the ``bmm`` / ``matmul`` with V); memsym's
    eager ``scores`` counts the 16-bit one.  In fp32 the cast is the tensor itself: 0 there
    (pass ``kept`` False).

    Parameters
    ----------
    kept : bool
        16-bit compute under transformers' eager BLOOM or MPT attention [1].

    Examples
    --------
    >>> hf_eager_softmax_fp32().evaluate(a=16, s=2048, b=1, c=1, t=1) == 4 * 16 * 2048 ** 2
    True
    >>> hf_eager_softmax_fp32(False).expr
    0

    References
    ----------
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/bloom/modeling_bloom.py:271-293``,
       ``models/mpt/modeling_mpt.py:129-132``; measured on both models' layers by
       ``tests/test_hf_eager_attention.py`` (6 a s tau kept in bf16, 4 a s tau in fp32).
    """
    tok, _ = token_split(False)
    expr = 4 * a * s * tok / t if kept else sp.Integer(0)
    return Term("hf_eager_softmax_fp32", expr, "the fp32 softmax output eager BLOOM / MPT "
                "attention keeps beside its 16-bit cast", _SOURCE, label="fp32 eager softmax")


_SOURCE = Source("hf-transformers-5-25", "models/bloom/modeling_bloom.py:284 (F.softmax dtype "
                 "float32 .to); models/mpt/modeling_mpt.py:129 (softmax(.float()).to)")
