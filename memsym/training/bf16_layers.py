r"""Megatron's first and last decoder layers in BF16 under FP8 or FP4 (``--first-last-layers-bf16``).

With ``first_last_layers_bf16``, the decoder layers of global index :math:`\ell < n_s` or
:math:`\ell \ge L - n_e` (``--num-layers-at-start-in-bf16`` :math:`n_s`,
``--num-layers-at-end-in-bf16`` :math:`n_e`, both 1 by default) run without an FP8 / NVFP4
context: ``is_first_last_bf16_layer`` (fp8_utils.py:711-728 at d98e8a64dd; FP4's own test in
``get_fp4_context``, fp4_utils.py:247-262) returns ``nullcontext()`` for them, "a global layer
index ... no additional checks on whether we are in the first or last pipeline-parallel rank".
That context is entered twice (transformer_block.py at d98e8a64dd):

* at build, ``get_fp8_context(..., is_init=True)`` / ``get_fp4_context`` around each layer
  (:354-364, the layer's global number from ``get_transformer_layer_offset``): with
  ``--fp8-param-gather`` (``config.fp8_param``) the other layers' linear weights are built under
  ``fp8_model_init`` (quantized parameters, a uint8 ``param_data`` in the distributed
  optimizer's buffer, param_and_grad_buffer.py:919-923), a BF16 layer's stay 16-bit tensors
  in the 16-bit buffer;
* in the forward, each layer under its own context (:685-697, all recipes but delayed, which
  Megatron refuses with BF16 layers: transformer_config.py:1528-1530), so a BF16 layer's
  GEMMs run in BF16: Transformer Engine casts no weight (no cached FP8 / NVFP4 copy,
  :func:`memsym.terms.model_state.te_weight_cache`) and saves its GEMM inputs 16-bit.

MTP layers enter the FP8 context without a layer number (multi_token_prediction.py:1388-1389,
``layer_no = -1``): never BF16.  Megatron validates the counts only under FP8:
:math:`0 \le n_s, n_e \le \lfloor L/p \rfloor` (transformer_config.py:1532-1557).

This module says which layers of a pipeline rank those are (:func:`rank_bf16_layers`, the
model chunks of an interleaved schedule placed as ``get_transformer_layer_offset`` places
them) and what they change in the activations a rank holds (:func:`bf16_activation_excess`).
"""

from __future__ import annotations

import sympy as sp

from .. import model as models
from ..term import Source, Term
from ..terms import mamba as hybrid_terms

__all__ = ["bf16_layer_ids", "chunk_layer_ids", "rank_bf16_layers", "bf16_activation_excess",
           "BF16_LAYERS"]

#: Where Megatron-LM (d98e8a64dd) decides which layers run in BF16.
BF16_LAYERS = Source("megatron-core", "fp8_utils.py:711-728, 836-850 (is_first_last_bf16_layer, "
                     "get_fp8_context: nullcontext for a BF16 layer); fp4_utils.py:247-262; "
                     "transformer_block.py:354-364, 685-697 at d98e8a64dd")


def bf16_layer_ids(num_layers: int, bf16_layers) -> frozenset:
    r"""The global decoder layers (0-based) that run in BF16 [layers].

    .. math:: \{\ell : \ell < n_s\} \cup \{\ell : \ell \ge L - n_e\}

    Parameters
    ----------
    num_layers : int
        Decoder layers L of the model [layers].
    bf16_layers : tuple of (int, int)
        :math:`(n_s, n_e)` [layers].

    Examples
    --------
    >>> sorted(bf16_layer_ids(32, (1, 1)))
    [0, 31]
    >>> sorted(bf16_layer_ids(88, (0, 2)))
    [86, 87]

    References
    ----------
    megatron-core: fp8_utils.py:711-728 at d98e8a64dd (``is_first_last_bf16_layer``).
    """
    start, end = bf16_layers
    return frozenset(i for i in range(num_layers) if i < start or i >= num_layers - end)


def chunk_layer_ids(x, layout, stage: int) -> tuple:
    r"""The global decoder layers (0-based) of each model chunk of pipeline rank ``stage``.

    Megatron's ``get_transformer_layer_offset``: chunk :math:`j` of rank :math:`r` starts
    after every rank's chunks before :math:`j` and the chunks :math:`j` of the ranks before
    :math:`r`, each rank's chunk :math:`L_r / v` layers (:math:`L_r` its layers, an even split
    or the first / last stage sizes); a custom pipeline layout's own ids.

    .. math:: \mathrm{offset}(r, j) = j \sum_{r'} \frac{L_{r'}}{v} + \sum_{r' < r} \frac{L_{r'}}{v}

    Examples
    --------
    >>> from memsym.job import Layout; from memsym.model import preset
    >>> chunk_layer_ids(preset("llama3-8b"), Layout(p=2, v=2), 1)
    ((8, 9, 10, 11, 12, 13, 14, 15), (24, 25, 26, 27, 28, 29, 30, 31))

    References
    ----------
    megatron-core: transformer_layer.py:65-170 at d98e8a64dd (``get_transformer_layer_offset``).
    """
    if layout.pipeline_layout is not None:
        return tuple(tuple(ids) for ids in layout.pipeline_layout.layer_ids(stage))
    sizes = [len(models.stage_layers(x, layout.p, r, layout.first_stage_layers,
                                     layout.last_stage_layers)) for r in range(layout.p)]
    v = layout.v if layout.v is not None and layout.v > 1 else 1
    per = [n // v for n in sizes]
    out = []
    for j in range(v):
        start = j * sum(per) + sum(per[:stage])
        out.append(tuple(range(start, start + per[stage])))
    return tuple(out)


def rank_bf16_layers(x, layout, training, stage: int) -> tuple:
    """``((chunk, position in the chunk, global layer), ...)``: the decoder layers of pipeline
    rank ``stage`` that run in BF16 (none unless the job trains in fp8 or fp4 with
    ``bf16_layers``).

    Examples
    --------
    >>> from memsym.job import Layout, Training; from memsym.model import preset
    >>> trn = Training(precision="fp8", fp8_recipe="tensorwise", bf16_layers=(1, 1))
    >>> [rank_bf16_layers(preset("llama3-8b"), Layout(p=2), trn, s) for s in (0, 1)]
    [((0, 0, 0),), ((0, 15, 31),)]
    """
    st = training.states
    if st.precision not in ("fp8", "fp4") or not any(st.bf16_layers):
        return ()
    ids = bf16_layer_ids(x.num_layers, st.bf16_layers)
    return tuple((j, k, i) for j, chunk in enumerate(chunk_layer_ids(x, layout, stage))
                 for k, i in enumerate(chunk) if i in ids)


def _layer_mode(training, recompute: str, position: int) -> str:
    """The recompute a layer at ``position`` in its chunk is under: Megatron's block method
    checkpoints the first N layers of each chunk, the others keep everything."""
    method, n_rec = training.memory.recompute_method, training.memory.recompute_num_layers
    if recompute == "full" and method == "block" and position >= n_rec:
        return "none"
    return recompute


def bf16_activation_excess(x, layout, training, stage: int, models_of, held,
                           recompute: str, hybrid_args=None) -> list:
    r"""What a rank's BF16 layers add to its activations: their GEMM inputs saved 16-bit [bytes].

    .. math:: \Delta A = \frac{n_{\mathrm{mb}}}{v} \sum_{\ell \in \mathrm{BF16}(i)}
        \bigl(A_{\mathrm{layer}}^{\mathrm{bf16}}(\ell) - A_{\mathrm{layer}}(\ell)\bigr)

    over the rank's BF16 layers (:func:`rank_bf16_layers`), each at its own recompute (under
    the block method a layer past the first N of its chunk keeps everything), times the
    chunk passes the rank holds per layer (``held``: :math:`n_{\mathrm{mb}}/v`, the count
    :func:`memsym.training.activations.stage_activations` gives every layer of the rank; a
    custom layout's chunk's own).  A checkpointed layer keeps its 16-bit input only: no excess.

    Parameters
    ----------
    x, layout, training, stage
        The job and the pipeline rank.
    models_of : callable
        ``models_of(training) -> (per_layer, common, mods, shared, addons)`` (the
        activations' layer model for a training: the job's, and the job's at bf16).
    held : callable
        ``held(chunk) -> expr``: the passes of that chunk the rank holds at its peak [1].
    recompute : str
        The job's recompute.
    hybrid_args : tuple, optional
        ``(context_parallel, shared_block)`` of a hybrid model (:mod:`memsym.terms.mamba`).

    Returns
    -------
    list of Term
        ``bf16_layer_activations`` when the rank holds a BF16 layer, else nothing.

    Examples
    --------
    >>> from memsym.job import Layout, Training; from memsym.model import preset
    >>> bf16_activation_excess(preset("llama3-8b"), Layout(), Training(), 0, None, None, "none")
    []

    References
    ----------
    megatron-core: fp8_utils.py:711-728, 836-850; transformer_block.py:685-697 at d98e8a64dd.
    """
    found = rank_bf16_layers(x, layout, training, stage)
    if not found:
        return []
    lowp, bf16 = models_of(training), models_of(training.replace(
        precision="bf16", fp8_recipe=None, fp8_param_gather=False, fp4_param_gather=False))
    pattern = models.stages.layer_kind_pattern(x)
    total = sp.Integer(0)
    for chunk, position, i in found:
        mode = _layer_mode(training, recompute, position)
        if hybrid_args is not None and models.stages.hybrid_kinds(x, [i]):
            kinds = models.stages.hybrid_kinds(x, [i])
            one = [hybrid_terms.hybrid_stack(kinds, mode, lm[2], lm[3], hybrid_args[0], lm[1],
                                             hybrid_args[1], lm[4]) for lm in (bf16, lowp)]
        else:
            one = [lm[0](bool(pattern[i]), mode) for lm in (bf16, lowp)]
        total += held(chunk) * (one[0] - one[1])
    if total == 0:
        return []
    ids = ", ".join(str(i) for _, _, i in found)
    return [Term("bf16_layer_activations", total,
                 f"decoder layers {ids} in BF16 (first_last_layers_bf16): their GEMM inputs "
                 "saved 16-bit, not quantized", BF16_LAYERS, label="bf16 layers")]
