r"""What Gemma 4's per-layer input embeddings (``hidden_size_per_layer_input`` p) keep for
backward, as transformers' code runs them.

transformers 5.25.0 ``Gemma4TextDecoderLayer.forward`` (``models/gemma4/modeling_gemma4.py``
lines 1408-1414), after the MLP's residual sum::

    residual = hidden_states
    hidden_states = self.per_layer_input_gate(hidden_states)     # h -> p
    hidden_states = self.act_fn(hidden_states)                   # gelu_pytorch_tanh
    hidden_states = hidden_states * per_layer_input
    hidden_states = self.per_layer_projection(hidden_states)     # p -> h
    hidden_states = self.post_per_layer_input_norm(hidden_states)
    hidden_states = residual + hidden_states

keeps, per layer and micro-batch with :math:`\tau = sb/c` tokens, in bf16: the gate's input
(the residual sum, kept by nothing else), :math:`2\tau h`; the activation's input, its output
and the layer's slice of ``per_layer_inputs`` the product keeps, and the product the projection
keeps, :math:`8\tau p`; the norm of h (``Gemma4RMSNorm``, lines 196-214: its input's fp32 copy,
the fp32 product with the fp32 weight, the mean square and its inverse root per row, the
weight's fp32 cast), :math:`8\tau h + 8\tau + 4h`:

.. math::

    A_{\mathrm{pl,layer}} = 10\tau h + 8\tau p + 8\tau + 4h \quad [\text{bytes}]

A layer under full recompute keeps its checkpoint's inputs: beside the hidden states its slice
of ``per_layer_inputs``, :math:`2\tau p`.  Under LoRA (PEFT's frozen base, the per-layer
modules unadapted) the frozen gate and projection keep no input and ``per_layer_inputs``
needs no gradient, so the product keeps the per-layer input alone, and the norm's frozen
weight keeps its fp32 product unkept: :math:`4\tau h + 4\tau p + 8\tau + 4h`.

``Gemma4TextModel`` (lines 1626-1629, ``get_per_layer_inputs`` and
``project_per_layer_inputs``, lines 1705-1784) once per micro-batch: the table's gather keeps
the input ids the word embedding keeps already; ``per_layer_model_projection`` keeps the scaled
word embedding, :math:`2\tau h`; ``per_layer_projection_norm`` (a ``Gemma4RMSNorm`` of p over
each of the L slices) :math:`8\tau L p + 8\tau L + 4p`:

.. math::

    A_{\mathrm{pl,model}} = 2\tau h + 8\tau L p + 8\tau L + 4p \quad [\text{bytes}]

on the first stage; nothing under LoRA, where none of it needs a gradient.  Its output, ``per_layer_inputs`` (:math:`2\tau L p`), is the storage whose
slices the layers keep, counted with them.  Both measured with saved-tensor hooks on
``Gemma4TextDecoderLayer`` and ``Gemma4TextModel`` (``tests/test_gemma4_ple.py``).  Under a
framework that runs its own layer (Megatron-LM builds no such module) memsym counts them as
transformers' code keeps them, and says so in the model's notes.

References
----------
.. [hf-transformers-5-25] transformers 5.25.0 ``models/gemma4/modeling_gemma4.py``.
"""

from __future__ import annotations

from ..symbols import L, h, p_pl
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["gemma4_ple_layer", "gemma4_ple_model"]

_LAYER_SOURCE = Source("hf-transformers-5-25",
                       "models/gemma4/modeling_gemma4.py Gemma4TextDecoderLayer.forward lines "
                       "1408-1414 (per_layer_input_gate, act_fn, * per_layer_input, "
                       "per_layer_projection, post_per_layer_input_norm); Gemma4RMSNorm lines "
                       "196-214")
_MODEL_SOURCE = Source("hf-transformers-5-25",
                       "models/gemma4/modeling_gemma4.py Gemma4TextModel.forward lines "
                       "1626-1629; get_per_layer_inputs lines 1705-1749; "
                       "project_per_layer_inputs lines 1751-1784 (per_layer_model_projection, "
                       "per_layer_projection_norm); Gemma4RMSNorm lines 196-214")


def gemma4_ple_layer(recompute: str = "none", tok=None, frozen: bool = False) -> Term:
    r"""What one Gemma 4 decoder layer's per-layer input path keeps, per micro-batch [bytes].

    .. math::

        10\tau h + 8\tau p_{\mathrm{pl}} + 8\tau + 4h
        \quad (\text{frozen: } 4\tau h + 4\tau p_{\mathrm{pl}} + 8\tau + 4h;
        \text{ full recompute: } 2\tau p_{\mathrm{pl}})

    Parameters
    ----------
    recompute : str
        The layer's recompute mode: ``"full"`` keeps the checkpoint's per-layer input alone.
    frozen : bool
        The base model frozen (LoRA): its gate, projection and norm weights need no gradient.
    tok : sympy.Expr, optional
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c`
        [tokens]; default :math:`sb/c`.

    Returns
    -------
    Term
        ``gemma4_per_layer_input``, per layer and micro-batch, per GPU [bytes].

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma4.py`` lines 196-214 and
    1408-1414.

    Examples
    --------
    10 tokens, h = 32, p = 4: 3,728 bytes.

    >>> gemma4_ple_layer().evaluate(s=5, b=2, c=1, h=32, p_pl=4)
    3728
    >>> gemma4_ple_layer(frozen=True).evaluate(s=5, b=2, c=1, h=32, p_pl=4)
    1648
    """
    if tok is None:
        tok, _ = token_split(False)
    expr = 2 * tok * p_pl if recompute == "full" else \
        (4 if frozen else 10) * tok * h + (4 if frozen else 8) * tok * p_pl + 8 * tok + 4 * h
    return Term("gemma4_per_layer_input", expr,
                "Gemma 4's per-layer input path: the gate's input, the activation's input and "
                "output, the per-layer input, the product, its norm of h", _LAYER_SOURCE,
                label="gemma4 per-layer input")


def gemma4_ple_model(n_layers=L, tok=None) -> Term:
    r"""What Gemma 4's model-level per-layer input projection keeps, per micro-batch [bytes].

    .. math::

        2\tau h + 8\tau L p_{\mathrm{pl}} + 8\tau L + 4p_{\mathrm{pl}}

    Parameters
    ----------
    n_layers : int or sympy.Expr
        The model's decoder layers L (all of them: the projection is of every layer's
        slice) [layers]; default the symbol L.
    tok : sympy.Expr, optional
        Tokens of one micro-batch on this context-parallel rank, :math:`\tau = sb/c`
        [tokens]; default :math:`sb/c`.

    Returns
    -------
    Term
        ``gemma4_per_layer_projection``, on the first stage, per micro-batch, per GPU [bytes].

    References
    ----------
    hf-transformers-5-25: transformers 5.25.0 ``modeling_gemma4.py`` lines 1626-1629 and
    1705-1784.

    Examples
    --------
    10 tokens, h = 32, two layers of p = 4: 1,456 bytes.

    >>> gemma4_ple_model().evaluate(s=5, b=2, c=1, h=32, L=2, p_pl=4)
    1456
    """
    if tok is None:
        tok, _ = token_split(False)
    return Term("gemma4_per_layer_projection",
                2 * tok * h + 8 * tok * n_layers * p_pl + 8 * tok * n_layers + 4 * p_pl,
                "Gemma 4's per-layer input projection: the scaled word embedding it reads and "
                "its norm of p over the L slices", _MODEL_SOURCE,
                label="gemma4 per-layer projection")
