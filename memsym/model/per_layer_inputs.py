"""Gemma 4's per-layer input embeddings (``hidden_size_per_layer_input``): their model-level
parameters; each layer's gate, projection and norm are :func:`memsym.model.counts.layer_parts`'s
``"per_layer_inputs"`` part."""

from __future__ import annotations


from .architecture import Architecture, norm_params
from ..symbols import L, V_pl, h, p_pl

__all__ = ["per_layer_model_parts"]


def per_layer_model_parts(x: Architecture):
    r"""The model-level parameters of per-layer input embeddings (Gemma 4's
    ``hidden_size_per_layer_input`` p): the packed table, the model projection and its norm.

    .. math::
        P_{\mathrm{pl}} = V_{\mathrm{pl}}\,L p_{\mathrm{pl}} + h\,L p_{\mathrm{pl}}
            + \eta\,p_{\mathrm{pl}}

    (each layer's gate h -> p, projection p -> h and norm of h are in :func:`memsym.model.counts.layer_parts`).

    Parameters
    ----------
    x : Architecture
        A model with ``per_layer_input_size``.

    Returns
    -------
    sympy.Expr
        Whole on every TP rank, on the first stage [parameters].

    References
    ----------
    transformers 5.25.0 ``models/gemma4/modeling_gemma4.py`` lines 1565-1580
    (``Gemma4TextModel.__init__``: ``embed_tokens_per_layer`` V_p x L p,
    ``per_layer_model_projection`` h -> L p without bias, ``per_layer_projection_norm`` of p)
    (hf-transformers-5-25).

    Examples
    --------
    >>> per_layer_model_parts(Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     normalization="RMSNorm", per_layer_input_size=4))
    L*V_pl*p_pl + L*h*p_pl + p_pl
    """
    return V_pl * L * p_pl + h * L * p_pl + norm_params(x) * p_pl
