r"""What Gemma 4's own norms keep beyond Gemma 3's, under a framework that runs transformers' code.

transformers 5.25.0 ``Gemma4RMSNorm`` (``models/gemma4/modeling_gemma4.py`` lines 196-214)::

    def _norm(self, hidden_states):
        mean_squared = hidden_states.pow(2).mean(-1, keepdim=True) + self.variance_epsilon
        return hidden_states * torch.pow(mean_squared, -0.5)

    def forward(self, hidden_states):
        normed_output = self._norm(hidden_states.float())
        if self.with_scale:
            normed_output = normed_output * self.weight.float()
        return normed_output.type_as(hidden_states)

Against ``Gemma3RMSNorm`` (:mod:`memsym.terms.hf_norms`: ``torch.rsqrt`` keeps its output, the
one fp32 statistic a row) ``torch.pow(mean_squared, -0.5)`` keeps its input, the fp32 mean
square, while the multiply keeps its output: one more fp32 scalar per normalised row,
:math:`4` bytes.  ``Gemma4TextDecoderLayer`` holds four such norms of h per token, and
``Gemma4TextAttention`` a q_norm and a k_norm per query and key head (lines 1168-1173), as
Gemma 3 does, and a third, ``v_norm`` (``with_scale=False``, line 1173, applied at line 1224),
on the values, which Gemma 3 has not: it keeps the fp32 copy of its input (in fp32 the input
itself) and the two fp32 statistics a row, while its ``type_as`` output is the value tensor
attention keeps, counted already.  Per layer and micro-batch, with :math:`\tau = sb/c` tokens:

.. math::

    \Delta = \frac{4 n\tau}{\sigma} + \frac{4\tau (a + g)}{t} + \frac{4\tau g d_h}{t}
             + \frac{8\tau g}{t} \quad [\text{bytes}]

with :math:`n = 4` norms of h.  The model's ``q_proj``, ``k_proj``, ``v_proj`` outputs, RoPE,
MLP and the other norms keep what Gemma 3's do (``tests/test_hf_gemma4.py`` measures
``Gemma4TextDecoderLayer`` against Gemma 3's terms plus this one).

References
----------
.. [hf-transformers-5-25] transformers 5.25.0 ``models/gemma4/modeling_gemma4.py``.
"""

from __future__ import annotations

from ..symbols import a, d_h, g, t
from ..term import Source, Term

__all__ = ["GEMMA4_NORM_TYPES", "gemma4_norm_excess"]

#: The config.json model types whose layers are ``Gemma4TextDecoderLayer``
#: (:mod:`memsym.model.hf_gemma4`): a ``gemma4`` file's language model too.
GEMMA4_NORM_TYPES = frozenset({"gemma4_text", "gemma4"})

_SOURCE = Source("hf-transformers-5-25",
                 "models/gemma4/modeling_gemma4.py Gemma4RMSNorm (lines 196-214: torch.pow("
                 "mean_squared, -0.5) keeps its input, the multiply its output); "
                 "Gemma4TextAttention (q_norm, k_norm, v_norm with_scale=False: lines 1168-1173; "
                 "v_norm applied at line 1224); Gemma4TextDecoderLayer (four norms of h)")


def gemma4_norm_excess(tok, sig, n_norms: int = 4) -> Term:
    r"""What one Gemma 4 decoder layer's norms keep beyond Gemma 3's norms [bytes].

    .. math::

        \frac{4 n\tau}{\sigma} + \frac{4\tau (a + g)}{t} + \frac{4\tau g d_h}{t}
        + \frac{8\tau g}{t}

    Parameters
    ----------
    tok : sympy.Expr
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c` [tokens].
    sig : int or sympy.Expr
        The sequence-parallel divisor :math:`\sigma` of the h-wide norms [1].
    n_norms : int
        The layer's norms of h [norms].

    Returns
    -------
    Term
        ``gemma4_norms``, per layer and micro-batch, per GPU [bytes].

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma4.py`` lines 196-214 and
    1168-1224.

    Examples
    --------
    >>> from memsym.symbols import s, b
    >>> gemma4_norm_excess(s * b, 1).expr
    4*b*d_h*g*s/t + 8*b*g*s/t + 16*b*s + 4*b*s*(a + g)/t
    """
    expr = 4 * n_norms * tok / sig + 4 * tok * (a + g) / t + 4 * tok * g * d_h / t \
        + 8 * tok * g / t
    return Term("gemma4_norms", expr, f"Gemma 4's norms beyond Gemma 3's: the fp32 mean square "
                f"torch.pow keeps per row ({n_norms} norms of h, q_norm, k_norm) and v_norm's "
                "fp32 input copy and statistics", _SOURCE, label="gemma4 norms")
