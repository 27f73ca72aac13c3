r"""What Megatron-core's selective recompute (``--recompute-modules``) runs again in backward.

Each named module's forward is checkpointed (``tensor_parallel.checkpoint`` or
``CheckpointWithoutOutput``: its input kept, what runs inside it discarded and rerun when
the backward reaches it), so the backward of one layer and one micro-batch pays that
module's forward once more:

==================  =====================================================================
module              rerun in backward (one layer, one micro-batch, one GPU)
==================  =====================================================================
``core_attn``       the attention core's forward (flash or the unfused softmax);
                    :func:`memsym.timing.layer.layer_time` adds it
``layernorm``       each norm that is not fused into the next GEMM (before MLA, before an
                    MoE layer): read and write of :math:`T h` (:math:`/t` under sequence
                    parallelism) in bf16, :math:`4\,T h` bytes per norm
``moe_act``         the routed experts' activation over their :math:`R` rows: SwiGLU reads
                    :math:`2f` and writes :math:`f` (GeLU: :math:`f` and :math:`f`) per row,
                    :math:`2\cdot 3 R f` bytes, plus the clamped GLU's eager clamp
                    (:func:`memsym.timing.moe_eager.glu_clamp_bytes`)
``mlp``             dense layers: fc1 and fc2 forward GEMMs and the activation
``moe``             MoE layers: router, routed and shared experts' forward GEMMs, their
                    activations, the dispatcher's copies and the EP all-to-alls
``shared_experts``  MoE layers: the shared expert's forward GEMMs and activation
``mla_up_proj``     MLA: the q and kv up-projection GEMMs
==================  =====================================================================

The TP collectives inside a recomputed ``mlp`` (sequence parallelism's all-gather and
reduce-scatter around it) and MLA's RoPE on the recomputed q and k are not priced.

References
----------
.. [megatron-core] Megatron-LM at d98e8a64dd (the sources of
   :data:`memsym.terms.recompute_sources.RECOMPUTE_MODULE_SOURCES`):
   megatron/core/transformer/transformer_layer.py (``TransformerLayer.__init__``: a norm is
   recomputed only if it is not ``IdentityOp``; ``_run_mlp``: ``mlp`` not on MoE layers),
   megatron/core/transformer/mlp.py, megatron/core/transformer/moe/experts.py
   (``TEGroupedMLP``: ``CheckpointWithoutOutput`` of ``bias_act_func``, the clamp inside it),
   megatron/core/transformer/moe/moe_layer.py, megatron/core/transformer/multi_latent_attention.py.
"""

from __future__ import annotations

import numpy as np

from .efficiency import memory_time
from .moe import gemm_seconds
from .moe_eager import eager_glu_bytes, glu_clamp_bytes, swiglu_clamp_bytes

__all__ = ["MODULE_GEMMS", "norms_recomputed", "module_recompute"]

#: The forward GEMMs (:func:`memsym.timing.gemm.layer_gemms` names) each module reruns.
MODULE_GEMMS = {"mlp": ("fc1", "fc2"),
                "moe": ("router", "latent_fc1", "latent_fc2", "expert_fc1", "expert_fc2",
                        "shared_fc1", "shared_fc2"),
                "shared_experts": ("shared_fc1", "shared_fc2"),
                "mla_up_proj": ("q_up", "kv_up")}


def norms_recomputed(*, mla: bool, moe: bool, mla_fused: bool = False) -> int:
    r"""How many of a layer's norms ``layernorm`` recomputes [1].

    .. math:: n = [\text{MLA} \wedge \neg\,\text{fused}] + [\text{MoE}]

    Transformer Engine's layer spec fuses the input norm into ``linear_qkv`` and the
    pre-MLP norm into a dense MLP's ``linear_fc1`` (``IdentityOp`` in the layer, which
    Megatron-core does not checkpoint); MLA keeps a separate input norm (a ``TENorm``,
    Megatron's default) unless ``--mla-down-proj-fusion`` fuses it into the q/kv
    down-projection, an MoE layer a separate pre-MLP norm.

    Parameters
    ----------
    mla, moe : bool
        Multi-latent attention; an MoE layer.
    mla_fused : bool
        ``--mla-down-proj-fusion`` (``TransformerConfig.mla_down_proj_fusion``, default off).

    Examples
    --------
    >>> norms_recomputed(mla=False, moe=True), norms_recomputed(mla=True, moe=True)
    (1, 2)
    >>> norms_recomputed(mla=False, moe=False), norms_recomputed(mla=True, moe=True, mla_fused=True)
    (0, 1)

    References
    ----------
    [megatron-lm-arguments] ``--recompute-modules layernorm``; Megatron-LM d98e8a64dd
    megatron/core/models/gpt/gpt_layer_specs.py (the TE spec's submodules): lines 318-336
    (no ``input_layernorm``, ``linear_qkv`` a ``column_parallel_layer_norm_linear``;
    ``pre_mlp_layernorm`` only with experts), 295-313 (MLA:
    ``input_layernorm=backend.layer_norm``; an ``IdentityOp`` with ``mla_down_proj_fusion``,
    257-259, the q/kv down-projection then a ``TELayerNormColumnParallelLinear``, 260-264),
    542-543 (a dense MLP's fused ``linear_fc1``); transformer_config.py:3338
    (``mla_down_proj_fusion = False``);
    megatron/core/transformer/transformer_layer.py lines 278, 288 (``IdentityOp`` defaults),
    476-477, 523-527 (only a norm that is not an ``IdentityOp`` is recomputed).
    """
    return int(mla and not mla_fused) + int(moe)


def _activation_bytes(rows, f, gated: bool):
    # SwiGLU reads both halves of the fc1 output (2f) and writes f; GeLU reads f, writes f,
    # each element 2 bytes (bf16, as the module's table says)
    return 2 * (3 if gated else 2) * np.asarray(rows, float) * f


def module_recompute(x, modules, gemms, dev, prec: str, T, t, *, moe: bool, sequence_parallel: bool,
                     eta_gemm=None, mla_fused: bool = False) -> tuple:
    r"""Seconds one layer's backward spends rerunning the selective-recompute modules [s].

    Their forwards (``core_attn`` excepted), for one micro-batch on one GPU.

    .. math::

        t = \sum_{q \in \text{GEMMs rerun}} t_{\text{GEMM}}(q)
            + \frac{B_{\text{norm}} + B_{\text{act}}}{\text{HBM bandwidth}}

    with :math:`B_{\text{norm}} = n \cdot 4 T h` (:math:`/t` under sequence parallelism;
    :math:`n` from :func:`norms_recomputed`) and :math:`B_{\text{act}}` the rerun
    activations (routed: :math:`2 \cdot 3 R f_e/t_e` bytes for a GLU, plus the eager clamp).

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The architecture.
    modules : tuple of str
        The recomputed modules (:data:`memsym.vocabulary.RECOMPUTE_MODULES`).
    gemms : list of memsym.timing.gemm.Gemm
        The layer's forward GEMMs.
    dev : GPU
        The GPU.
    prec : str
        GEMM precision.
    T : array_like
        Tokens of one micro-batch on one CP rank [tokens].
    t : array_like
        Tensor-parallel size [GPUs].
    moe : bool
        An MoE layer.
    sequence_parallel : bool
        Megatron sequence parallelism.
    eta_gemm : float, optional
        A fixed GEMM efficiency [1].
    mla_fused : bool
        ``--mla-down-proj-fusion``: MLA's input norm fused, not recomputed.

    Returns
    -------
    tuple
        GEMM seconds and memory-bound seconds [s], and whether the MoE layer's dispatch
        (all-to-alls and copies) reruns (``moe`` on an MoE layer).

    Examples
    --------
    GPT-OSS-like MoE layer, ``layernorm`` only: one norm (pre-MLP), read + write of
    T h = 4096 x 2880 bf16 elements at the B200's 8 TB/s:

    >>> from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> x = shape_of(preset("gpt-oss-120b"))
    >>> g, m, rerun = module_recompute(x, ("layernorm",), [], "b200", "bf16", 4096, 1,
    ...                                moe=True, sequence_parallel=False)
    >>> float(g), bool(m == 4 * 4096 * 2880 / 8e12), rerun
    (0.0, True, False)

    References
    ----------
    .. [korthikanti] arXiv:2205.05198 §5 (selective activation recomputation).
    [megatron-lm-arguments] ``--recompute-modules``.
    """
    mods = set(modules)
    names = {n for mod in mods if mod in MODULE_GEMMS for n in MODULE_GEMMS[mod]}
    if not moe:
        names -= set(MODULE_GEMMS["moe"])
    else:
        names -= set(MODULE_GEMMS["mlp"])
    gemm = sum((gemm_seconds(q, "forward", dev, prec, eta_gemm=eta_gemm)
                for q in gemms if q.name in names), 0.0)
    nbytes = 0.0
    if "layernorm" in mods:
        hidden = np.asarray(T, float) * x.h / (np.asarray(t, float) if sequence_parallel else 1)
        nbytes = nbytes + norms_recomputed(mla=bool(x.mla), moe=moe,
                                                   mla_fused=mla_fused) * 4 * hidden
    by_name = {q.name: q for q in gemms}
    if not moe and "mlp" in mods and "fc1" in by_name:
        q = by_name["fc1"]
        nbytes = nbytes + _activation_bytes(q.M, q.N / (2 if x.gated else 1), x.gated) \
            + _swiglu_clamps(q, q.M)
    rerun_dispatch = moe and "moe" in mods
    if moe and (rerun_dispatch or "moe_act" in mods) and "expert_fc1" in by_name:
        q = by_name["expert_fc1"]     # moe subsumes moe_act: the activation reruns once
        rows, f = np.asarray(q.M, float) * q.count, q.N / (2 if x.gated else 1)
        nbytes = nbytes + _activation_bytes(rows, f, x.gated)
        if "clamp" in q.eager and not rerun_dispatch:   # moe: in the dispatcher's seconds
            nbytes = nbytes + glu_clamp_bytes(rows, f)[0]
        if "glu" in q.eager and not rerun_dispatch:     # unfused: the eager glu reruns
            nbytes = nbytes + eager_glu_bytes(rows, f)[0]
        if not rerun_dispatch:                          # moe: in the dispatcher's seconds
            nbytes = nbytes + _swiglu_clamps(q, rows)
    if moe and (rerun_dispatch or "shared_experts" in mods) and "shared_fc1" in by_name:
        q = by_name["shared_fc1"]
        nbytes = nbytes + _activation_bytes(q.M, q.N / (2 if x.gated else 1), x.gated) \
            + _swiglu_clamps(q, q.M)
    return gemm, memory_time(nbytes, dev), rerun_dispatch


def _swiglu_clamps(q, rows):
    """Forward bytes of the eager clamped SwiGLU's clamps on ``q``'s output, which rerun with
    its activation (:func:`memsym.timing.moe_eager.swiglu_clamp_bytes`; 0 without them)."""
    return swiglu_clamp_bytes(rows, q.N / 2)[0] if "swiglu_clamp" in q.eager else 0.0
