r"""Multi-token prediction (MTP): what each depth runs beside its decoder layer, and in what
precision.

Megatron-LM's ``MultiTokenPredictionLayer`` (megatron/core/transformer/
multi_token_prediction.py at rev d98e8a64dd) runs, per depth: the embedding of the shifted
tokens (``_get_embeddings``); ``enorm`` on it and ``hnorm`` on the incoming hidden state
(:1157-1167, ``_concat_embeddings`` :1335-1337); ``eh_proj``, a column-parallel linear of the
concatenated ``[T, 2h]`` to ``h`` with ``gather_output=False`` (:1174-1186), whose output is
all-gathered over TP (``gather_from_tensor_model_parallel_region``, :1353) and, under sequence
parallelism, scattered back (``scatter_to_sequence_parallel_region``, :1358); one
``TransformerLayer`` of the decoder's last layer spec (a hybrid model's: a ``HybridStack`` of
its MTP pattern's layers, :1199-1214, :func:`mtp_block`); ``final_layernorm`` (:1247, applied
in ``_postprocess`` :1439); and one more output layer + loss (``process_mtp_loss``).

Precision (``_proj_and_transformer_layer``, :1386-1394): under FP8 the projection and the
layer each enter ``get_fp8_context(self.config)``, the run's own FP8 recipe; otherwise
``nullcontext()``, and "currently ignoring FP4 in MTP layers" (:1394): FP4 and FP8 exclude each
other (transformer_config.py:1581), so under FP4 ``config.fp8`` is unset and the MTP block runs
in the 16-bit compute dtype while the decoder's layers each enter ``get_fp4_context``
(transformer_block.py:358 when built, :692-694 in the forward).

References
----------
.. [megatron-lm] core/transformer/multi_token_prediction.py, core/tensor_parallel/layers.py
   (LinearWithGradAccumulationAndAsyncCommunication), core/tensor_parallel/mappings.py, all
   at rev d98e8a64dd.
.. [deepseek-v3] arXiv:2412.19437 §2.2 (the MTP modules: RMSNorm on both inputs, the
   projection M_k of the concatenation, a Transformer block, the shared output head).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .collectives import collective_time, group_bandwidth
from .efficiency import gemm_precision, gemm_time, memory_time
from .efficiency import as_array
from .layer import BACKWARD_MEMORY, layer_time
from .records import Overlap, Settings

__all__ = ["mtp_settings", "mtp_depth", "mtp_block"]

#: Norms of one MTP depth: ``enorm``, ``hnorm`` and ``final_layernorm``.
MTP_NORMS = 3


def mtp_settings(st: Settings) -> Settings:
    r"""The settings an MTP depth's block runs under: 16 bits under FP4, rerun whole or not.

    The run's settings, at 16 bits where it runs FP4; under full recompute its whole forward
    rerun in backward, or none of it.

    .. math:: \text{precision}_{MTP} = \begin{cases} \text{bf16} & \text{FP4 run} \\
        \text{precision} & \text{otherwise (FP8: the global FP8 recipe)} \end{cases},\qquad
        r_{MTP} = \begin{cases} 1 & \text{full, uniform} \\ 0 & \text{full, block}
        \end{cases}

    Under ``recompute_granularity == 'full'`` the layer checkpoints ``_proj_and_transformer_
    layer`` whole (:1705-1706, its ``recompute_method == 'uniform'`` branch :1621-1629, which
    asserts ``recompute_num_layers == 1``), whatever share of the decoder's layers the method
    reruns; ``block`` "is not supported for MTP yet.  Skipping recompute." (:1630-1649): the
    block runs as without recompute.  The same object where nothing changes.

    Parameters
    ----------
    st : Settings
        The run's settings (``precision``, ``recompute``, ``recompute_fraction``,
        ``mtp_recompute``).

    Examples
    --------
    >>> mtp_settings(Settings(precision="fp4")).precision, mtp_settings(Settings(
    ...     precision="fp8", fp8_recipe="mxfp8")).fp8_recipe
    ('bf16', 'mxfp8')
    >>> blk = Settings(recompute="full", recompute_fraction=0.25, mtp_recompute=False)
    >>> mtp_settings(blk).recompute, mtp_settings(Settings(recompute="full",
    ...     recompute_fraction=0.25)).recompute_fraction
    ('none', 1.0)
    >>> st = Settings(recompute="full"); mtp_settings(st) is st
    True

    References
    ----------
    Megatron-LM megatron/core/transformer/multi_token_prediction.py:1386-1394
    ``_proj_and_transformer_layer``, :1621-1649 ``_checkpointed_forward``, :1705-1706
    ``forward`` (rev d98e8a64dd).
    """
    changes = {}
    if st.precision == "fp4":
        changes["precision"] = "bf16"
    if st.recompute == "full" and not st.mtp_recompute:
        changes["recompute"] = "none"
    elif st.recompute == "full" and not np.all(np.asarray(st.recompute_fraction) == 1.0):
        changes["recompute_fraction"] = 1.0
    return dataclasses.replace(st, **changes) if changes else st


def mtp_block(x, st: Settings, dev, clu, t, c, e, t_e, b, d, *, eta_gemm, overlap: Overlap) -> tuple:
    r"""Forward and backward parts of one hybrid MTP depth's block: its pattern's layers [s].

    .. math:: t^{\text{fwd}}_{\text{block},q} = \sum_{\ell \in \text{pattern}}
        t^{\text{fwd}}_{q}(\text{kind}_\ell), \qquad
        t^{\text{bwd}}_{\text{block},q} = \sum_{\ell \in \text{pattern}}
        t^{\text{bwd}}_{q}(\text{kind}_\ell)

    per part q (``gemm``, ``attention``, ``memory``, ``tp``, ``ep``, ``cp``), one
    :func:`memsym.timing.layer.layer_time` per letter of ``x.mtp_kinds``: ``*`` an
    attention-only layer, ``E`` an MoE-only layer, ``-`` an MLP-only layer, ``M`` a Mamba-2
    layer, each as the decoder's layers of that kind, under ``st`` (the caller passes
    :func:`mtp_settings`' 16 bits under FP4).

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape, ``x.mtp_kinds`` non-empty.
    st : Settings
        The settings the MTP block runs under.
    dev, clu : GPU, Cluster
        The GPU and the interconnect.
    t, c, e, t_e, d : array_like
        Tensor-, context-, expert-, expert-tensor- and data-parallel sizes [GPUs].
    b : array_like
        Micro-batch size [sequences].
    eta_gemm : float or None
        A fixed achieved GEMM efficiency in (0, 1] [1] (None: the efficiency curve).
    overlap : Overlap
        Which communication hides behind compute.

    Examples
    --------
    Nemotron 3 Super's "*E" block is its attention-only layer plus its MoE-only layer:

    >>> from dataclasses import replace
    >>> from memsym.hardware import cluster_for, gpu; from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> dev, x = gpu("h100"), shape_of(replace(preset("nemotron-3-super"), mtp_num_layers=1))
    >>> x.mtp_kinds
    (('attention', None), ('none', True))
    >>> kw = dict(eta_gemm=0.5, overlap=Overlap())
    >>> st, clu, one = Settings(seq_length=4096), cluster_for(dev.name), np.array(1.0)
    >>> f, _ = mtp_block(x, st, dev, clu, one, one, one, one, one, one, **kw)
    >>> att, _ = layer_time(x, st, dev, clu, one, one, one, one, one, moe=False, dp=one,
    ...                     mixer="attention", mlp=False, **kw)
    >>> moe, _ = layer_time(x, st, dev, clu, one, one, one, one, one, moe=True, dp=one,
    ...                     mixer="none", **kw)
    >>> bool(np.isclose(f["gemm"], att["gemm"] + moe["gemm"]))
    True

    References
    ----------
    Megatron-LM megatron/core/transformer/multi_token_prediction.py:1199-1214 (rev
    d98e8a64dd): a hybrid model's ``MultiTokenPredictionLayer`` builds its inner layers as a
    ``HybridStack`` of ``mtp_layer_pattern``, one layer per symbol.
    """
    fwd, bwd = {}, {}
    for (mixer, ffn), n in _counts(x.mtp_kinds):
        f, bw = layer_time(x, st, dev, clu, t, c, e, t_e, b, moe=bool(ffn), eta_gemm=eta_gemm,
                           overlap=overlap, dp=d, mixer=mixer, mlp=ffn is not None)
        for key in f:
            fwd[key] = fwd.get(key, 0.0) + n * f[key]
            bwd[key] = bwd.get(key, 0.0) + n * bw[key]
    return fwd, bwd


def _counts(kinds: tuple) -> tuple:
    """Each distinct kind of ``kinds`` and how often it occurs, in first-seen order."""
    return tuple((k, kinds.count(k)) for k in dict.fromkeys(kinds))


def mtp_depth(x, st: Settings, dev, clu, overlap: Overlap, knobs: tuple, ends: tuple, *,
              eta_gemm=None) -> tuple:
    r"""Forward and backward seconds of one MTP depth beyond its decoder layer [s].

    .. math::

        t^{\text{fwd}} = t_{\text{GEMM}}(T, h/t, 2h) + t_{\text{emb}} + t^{\text{fwd}}_{\text{out}}
            + t_{\text{norms}} + t^{\text{fwd}}_{\text{TP}},\qquad
        t^{\text{bwd}} = t_{\text{GEMM}}(T, 2h, h/t) + t_{\text{GEMM}}(2h, h/t, T)
            + t^{\text{bwd}}_{\text{out}} + 1.5\,t_{\text{norms}} + t^{\text{bwd}}_{\text{TP}}
            + r_{MTP}\,\bigl(t_{\text{GEMM}}(T, h/t, 2h) + \tfrac{2}{3}\,t_{\text{norms}}
            + t^{\text{fwd}}_{\text{TP}}\bigr)

    with :math:`T = bs/c` tokens: ``eh_proj`` forward, dgrad and wgrad (FLOPs
    :math:`2\,T\,2h\,h/t` each) at the MTP block's precision (:func:`mtp_settings`); the
    shifted tokens' embedding and the output layer + loss as the model's own (``ends``);
    :math:`t_{\text{norms}}` three norms reading and writing the bf16 hidden state,
    :math:`3 \cdot 4\,T h` bytes (/t under sequence parallelism), the backward 1.5 times
    (:data:`memsym.timing.layer.BACKWARD_MEMORY`); and eh_proj's TP collectives (t > 1) on
    bf16 tensors: without SP the output all-gather of ``[T, h]`` forward and the input
    gradient's all-reduce of ``[T, 2h]`` backward; with SP also the input all-gather of
    ``[T, 2h]`` forward, and backward its reduce-scatter, the input re-gather and the
    all-gather of ``[T, h]`` that undoes ``scatter_to_sequence_parallel_region``.  Under
    ``overlap.tp_async_backward`` the input gradient's reduction hides under the wgrad GEMM
    and the re-gather under the dgrad GEMM, as the decoder's column-parallel layers
    (:mod:`memsym.timing.layer`); the rest is exposed.  Not priced: the concatenation copy,
    the quantization casts of eh_proj's input under FP8, the embedding's and output layer's
    own TP collectives (as for the model's).  Under full recompute with the block
    checkpointed (:math:`r_{MTP} = 1`, :func:`mtp_settings`) the backward reruns what the
    checkpointed ``_proj_and_transformer_layer`` runs beside the layer: ``_concat_embeddings``'
    ``enorm`` and ``hnorm`` (two of the three norms), eh_proj's forward GEMM and its forward
    TP collectives; the embedding (``_get_embeddings``), ``final_layernorm`` and the output
    layer run outside the checkpoint (multi_token_prediction.py:1335-1358, :1695-1737).

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape.
    st : Settings
        The run's settings.
    dev, clu : GPU, Cluster
        The GPU and the interconnect.
    overlap : Overlap
        Which communication hides behind compute.
    knobs : tuple of array_like
        ``(t, c, d, b)``: tensor-, context- and data-parallel sizes [GPUs] and the
        micro-batch size [sequences].
    ends : tuple of array_like
        The output layer + loss forward and backward and the embedding [s]
        (:func:`memsym.timing.pipeline.end_layers`).
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1].

    Examples
    --------
    No output layer or embedding, one GPU: eh_proj's three GEMMs and the norms alone (by
    hand: 3 x 4 x 4096 x 4096 bytes forward, 1.5 times that backward):

    >>> from memsym.hardware import cluster_for, gpu; from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> dev, x = gpu("h100"), shape_of(preset("llama3-8b"))
    >>> f, b = mtp_depth(x, Settings(seq_length=4096), dev, cluster_for(dev.name), Overlap(),
    ...                  (1, 1, 1, 1), (0.0, 0.0, 0.0), eta_gemm=0.5)
    >>> norms = memory_time(12 * 4096 * 4096, dev)
    >>> eh = gemm_time(4096, 4096, 8192, dev, "bf16", eta_gemm=0.5)
    >>> bool(np.isclose(f, eh + norms)), bool(np.isclose(b, 2 * eh + 1.5 * norms))
    (True, True)

    References
    ----------
    Megatron-LM megatron/core/transformer/multi_token_prediction.py (rev d98e8a64dd):
    ``MultiTokenPredictionLayer.__init__`` (enorm, hnorm, eh_proj, final_layernorm),
    ``_concat_embeddings``, ``_proj_and_transformer_layer``, ``_postprocess``.
    """
    t, c, d, b = knobs
    out_f, out_b, emb = ends
    ms = mtp_settings(st)
    prec = gemm_precision(ms.precision, ms.fp8_recipe)
    tt = as_array(t)
    T = as_array(b) * st.seq_length / as_array(c)
    n = x.h / tt
    eh_f = gemm_time(T, n, 2 * x.h, dev, prec, eta_gemm=eta_gemm)
    dgrad = gemm_time(T, 2 * x.h, n, dev, prec, eta_gemm=eta_gemm)
    wgrad = gemm_time(2 * x.h, n, T, dev, prec, eta_gemm=eta_gemm)
    hidden = T * x.h / (tt if st.sequence_parallel else 1)
    norms = memory_time(MTP_NORMS * 4 * hidden, dev)     # read + write, 2 bytes each
    f_tp, b_tp = _eh_proj_tp(x, st, clu, overlap, T, (t, c, d), dgrad, wgrad)
    fwd = eh_f + emb + out_f + norms + f_tp
    bwd = dgrad + wgrad + out_b + BACKWARD_MEMORY * norms + b_tp
    if mtp_settings(st).recompute == "full":
        # the checkpointed projection reruns: enorm and hnorm, eh_proj and its forward TP
        bwd = bwd + eh_f + norms * 2 / MTP_NORMS + f_tp
    return fwd, bwd


def _eh_proj_tp(x, st: Settings, clu, overlap: Overlap, T, sizes, dgrad, wgrad) -> tuple:
    """eh_proj's exposed TP seconds, forward and backward (:func:`mtp_depth`)."""
    t, c, d = sizes
    tt = as_array(t)
    bw, lat = group_bandwidth("tp", t, clu, t=t, c=c, d=d)
    wide, narrow = 2 * T * 2 * x.h, 2 * T * x.h         # bf16 [T, 2h] input, [T, h] output
    # gather_from_tensor_model_parallel_region: the [T, h/t] outputs all-gathered forward
    gather_out = collective_time("all-gather", narrow, tt, bw, lat)
    if st.sequence_parallel:
        gather_in = collective_time("all-gather", wide, tt, bw, lat)
        reduce_in = collective_time("reduce-scatter", wide, tt, bw, lat)
        f_tp = gather_in + gather_out
        # the scatter's backward all-gathers [T, h]; the input gradient's reduce-scatter
        # under wgrad and the input re-gather under dgrad where the backward is async
        b_tp = gather_out + (np.maximum(0, reduce_in - wgrad) + np.maximum(0, gather_in - dgrad)
                             if overlap.tp_async_backward else reduce_in + gather_in)
    else:
        f_tp = gather_out
        reduce_in = collective_time("all-reduce", wide, tt, bw, lat)
        b_tp = np.maximum(0, reduce_in - wgrad) if overlap.tp_async_backward else reduce_in
    return np.where(tt > 1, f_tp, 0.0), np.where(tt > 1, b_tp, 0.0)
