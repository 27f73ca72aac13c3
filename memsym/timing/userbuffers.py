r"""Transformer Engine's userbuffer overlaps of a dense layer's TP GEMMs, per named config.

Under ``--tp-comm-overlap`` with sequence parallelism Transformer Engine runs each of a
layer's ten TP GEMMs with one of three overlaps (``initialize_ub``): ``ring_exchange``
(the GEMM split into t chunks, each chunk's operand or output passed to a peer on the copy
engines while the next chunk runs), ``pipeline`` (the GEMM split into ``num_splits`` chunks,
each chunk's output reduce-scattered by a kernel on ``num_sm`` SMs) and ``bulk`` (one GEMM
beside one whole collective).  ``set_sm_margin`` takes the communication kernel's
``num_sm`` SMs from the GEMM (``_math_sms = set_sm_margin ? sm_count - num_comm_sm :
sm_count``); without it the GEMM keeps every SM.

:data:`UB_CONFIGS` holds Transformer Engine's default (``"te-default"``, what Megatron-core
passes when a recipe gives no config) and the Megatron-Bridge configs the measured runs
name (``comm_overlap.tp_comm_overlap_cfg``).  :func:`memsym.timing.layer.layer_time`
prices the layer's GEMMs and exposed TP traffic with the config :func:`ub_config` returns.

References
----------
.. [te-ub] Transformer Engine d0067d0da6, transformer_engine/pytorch/module/base.py
   (``initialize_ub``: ``get_default_config``, the user config merged over it) and
   transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp:143 (``_math_sms``),
   ``split_overlap_rs`` of ``CommOverlapP2PBase`` (t chunk GEMMs, t - 1 sends, one reduce).
.. [bridge-ub] Megatron-Bridge 067f987df0, src/megatron/bridge/training/comm_overlap.py
   (``userbuffers_*`` TransformerLayerTPOverlapCfg, lines 97-284: the ones its recipes name).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidValueError

__all__ = ["UbOverlap", "UB_CONFIGS", "UB_GEMMS", "UB_COMM_SMS", "UB_PIPELINE_SPLITS",
           "ub_config"]

#: Transformer Engine's default userbuffer overlaps (``initialize_ub`` without a user
#: config, as Megatron-Bridge passes it when ``tp_comm_overlap_cfg`` is None): the SMs the
#: pipelined reduce-scatter and the bulk collectives take from the GEMM beside them.
UB_COMM_SMS = 16
#: ... and the chunks a pipelined GEMM + reduce-scatter is split into.
UB_PIPELINE_SPLITS = 4

#: The ten TP GEMMs Transformer Engine overlaps (TransformerLayerTPOverlapCfg's fields);
#: ``proj_wgrad`` and ``fc2_wgrad`` run on the gathered gradient of their ring ("external").
UB_GEMMS = ("qkv_fprop", "proj_fprop", "fc1_fprop", "fc2_fprop", "qkv_dgrad", "qkv_wgrad",
            "fc1_dgrad", "fc1_wgrad", "proj_dgrad", "fc2_dgrad")


@dataclass(frozen=True)
class UbOverlap:
    """How one TP GEMM overlaps its collective (one entry of a userbuffers config).

    Attributes
    ----------
    method : {"ring_exchange", "pipeline", "bulk"}
        Transformer Engine's overlap method.
    num_sm : int
        SMs the communication kernel runs on [SMs].
    set_sm_margin : bool
        The GEMM gives those SMs up (else it keeps every SM).
    num_splits : int
        Chunks of a ``pipeline`` GEMM [1] (a ring uses t).
    """

    method: str
    num_sm: int
    set_sm_margin: bool
    num_splits: int = 4

    def math_sms(self, sm_count: int) -> int:
        """SMs the GEMM runs on [SMs] (TE's ``_math_sms``).

        Examples
        --------
        >>> UbOverlap("bulk", 16, True).math_sms(132), UbOverlap("bulk", 8, False).math_sms(160)
        (116, 160)
        """
        return sm_count - self.num_sm if self.set_sm_margin else sm_count


def _ring(num_sm=1, margin=False):
    return UbOverlap("ring_exchange", num_sm, margin)


def _bulk(num_sm, margin=False):
    return UbOverlap("bulk", num_sm, margin)


def _pipe(num_sm, splits=UB_PIPELINE_SPLITS):
    return UbOverlap("pipeline", num_sm, True, splits)


def _bridge(bulk_sms, rs):
    """A Bridge config: qkv/fc1 dgrad and wgrad bulk without SM margin (``bulk_sms`` in the
    order qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad), the AG GEMMs and data gradients as
    rings, ``rs`` the (proj_fprop, fc2_fprop) overlaps."""
    out = {k: _ring() for k in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")}
    out.update(zip(("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"), map(_bulk, bulk_sms)))
    out.update(zip(("proj_fprop", "fc2_fprop"), rs))
    return out


_FP8_RS = (_ring(1, True), _ring(1, True))   # RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True)

#: Userbuffer configs by name: Transformer Engine's default and Megatron-Bridge's
#: (comm_overlap.py at 067f987df0, the line of each in the comment above it).
UB_CONFIGS = {
    # base.py get_default_config: rings on 1 SM without margin, pipeline and bulk on 16 SMs
    # with margin, pipeline in 4 splits
    "te-default": {
        **{k: _ring() for k in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")},
        **{k: _pipe(UB_COMM_SMS) for k in ("proj_fprop", "fc2_fprop")},
        **{k: _bulk(UB_COMM_SMS, True) for k in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")}},
    # comm_overlap.py:98
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192":
        _bridge((4, 24, 2, 4), (_pipe(24), _pipe(16))),
    # comm_overlap.py:111
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192":
        _bridge((4, 24, 2, 4), _FP8_RS),
    # comm_overlap.py:124
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192":
        _bridge((16, 24, 2, 4), (_pipe(32), _pipe(16))),
    # comm_overlap.py:137
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192":
        _bridge((4, 24, 2, 4), _FP8_RS),
    # comm_overlap.py:151
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192":
        _bridge((2, 24, 2, 2), (_pipe(24), _pipe(8))),
    # comm_overlap.py:164
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192":
        _bridge((2, 24, 2, 2), _FP8_RS),
    # comm_overlap.py:177
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192":
        _bridge((8, 24, 2, 2), (_pipe(32), _pipe(8))),
    # comm_overlap.py:190
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192":
        _bridge((8, 32, 2, 8), _FP8_RS),
    # comm_overlap.py:259
    "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048":
        _bridge((4, 4, 2, 4), (_pipe(24), _ring(1, True))),
    # comm_overlap.py:272
    "userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048":
        _bridge((4, 4, 2, 4), _FP8_RS),
}


def ub_config(name: str | None = None) -> dict:
    """The userbuffers config ``name`` (None: Transformer Engine's default), GEMM -> UbOverlap.

    Parameters
    ----------
    name : str, optional
        A key of :data:`UB_CONFIGS` (a Megatron-Bridge ``userbuffers_*`` name).

    Returns
    -------
    dict of str to UbOverlap
        One entry per name of :data:`UB_GEMMS`.

    Examples
    --------
    >>> cfg = ub_config("userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192")
    >>> cfg["fc2_fprop"].method, cfg["fc1_wgrad"].math_sms(160), ub_config()["fc1_wgrad"].math_sms(160)
    ('ring_exchange', 160, 144)

    References
    ----------
    Transformer Engine base.py ``initialize_ub``; Megatron-Bridge comm_overlap.py.
    """
    key = "te-default" if name is None else name
    if key not in UB_CONFIGS:
        raise InvalidValueError(f"unknown userbuffers config {name!r} (known: "
                                f"{', '.join(sorted(UB_CONFIGS))})")
    return UB_CONFIGS[key]
