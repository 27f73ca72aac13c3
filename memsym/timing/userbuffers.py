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
           "UB_METHODS", "UB_KEYS", "ub_config", "user_ub_config"]

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


def _pipe(num_sm):
    return UbOverlap("pipeline", num_sm, True, UB_PIPELINE_SPLITS)


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


#: The overlap methods memsym prices per GEMM (:func:`memsym.timing.layer.layer_time`): the
#: all-gather GEMMs as rings, proj/fc2 forward as a pipelined or ring reduce-scatter, the qkv
#: and fc1 data and weight gradients beside a bulk collective.  Transformer Engine turns a
#: non-bulk ``*_dgrad`` into a reduce-scatter overlap of its own (``initialize_ub``), which
#: memsym does not price.
UB_METHODS = {
    **{k: ("ring_exchange",) for k in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")},
    **{k: ("pipeline", "ring_exchange") for k in ("proj_fprop", "fc2_fprop")},
    **{k: ("bulk",) for k in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")}}

#: The keys of a GEMM's entry memsym reads (the others of ``initialize_ub``'s ``add_ub``, such
#: as ``aggregate``, ``cga_size``, ``atomic_gemm`` or ``fp8_buf``, are listed as ignored).
UB_KEYS = ("method", "num_sm", "set_sm_margin", "num_splits")

#: The most SMs or splits an entry may name (a GPU has ~10^2 SMs).
_UB_MAX = 1024


def _ub_whole(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _UB_MAX:
        raise InvalidValueError(f"{what} must be a whole number 1..{_UB_MAX}, got {value!r:.40}")
    return value


def user_ub_config(entries) -> tuple:
    r"""``(config, ignored)``: a user's userbuffers config merged over the default of each GEMM.

    .. math:: \text{cfg}_g = \text{default}_g \oplus \text{user}_g \quad
       (g \in \text{UB\_GEMMS}; \text{the user's keys replace the default's})

    A user's config (Megatron-LM's ``--tp-comm-overlap-cfg``
    YAML as read: GEMM name -> its entry) merged, as Transformer Engine's ``initialize_ub``
    merges it, over the default of each GEMM (:data:`UB_CONFIGS` ``"te-default"``), and the
    names memsym does not read (GEMMs outside :data:`UB_GEMMS`, keys outside :data:`UB_KEYS`).

    ``config`` is a tuple of ``(gemm, method, num_sm, set_sm_margin, num_splits)`` per GEMM
    of :data:`UB_GEMMS`, the form :func:`ub_config` and the job field ``tp_comm_overlap_cfg``
    take.  A method memsym does not price for a GEMM (:data:`UB_METHODS`) is refused.

    Parameters
    ----------
    entries : dict
        GEMM name -> its entry (``method``, ``num_sm`` [SMs], ``num_splits`` [1], ...).

    Examples
    --------
    >>> cfg, ignored = user_ub_config({"proj_fprop": {"method": "pipeline", "num_sm": 4,
    ...                                               "set_sm_margin": 0, "num_splits": 4},
    ...                                "qkv_fprop": {"method": "ring_exchange", "aggregate": 1}})
    >>> ub_config(cfg)["proj_fprop"], ignored
    (UbOverlap(method='pipeline', num_sm=4, set_sm_margin=False, num_splits=4), ['qkv_fprop.aggregate'])

    References
    ----------
    Transformer Engine d0067d0da6, transformer_engine/pytorch/module/base.py ``initialize_ub``
    (``get_default_config``, ``ub_cfg.update(user_ub_cfg[name])``).
    """
    if not isinstance(entries, dict):
        raise InvalidValueError("a userbuffers config is a mapping of GEMM names to entries")
    ignored, out = [], []
    for gemm in entries:
        if gemm not in UB_GEMMS:
            ignored.append(str(gemm)[:40])
    for gemm in UB_GEMMS:
        base = UB_CONFIGS["te-default"][gemm]
        given = entries.get(gemm) or {}
        if not isinstance(given, dict):
            raise InvalidValueError(f"userbuffers config {gemm}: give its entry as key: value lines")
        ignored += [f"{gemm}.{str(k)[:40]}" for k in given if k not in UB_KEYS]
        method = given.get("method", base.method)
        if method not in UB_METHODS[gemm]:
            raise InvalidValueError(f"userbuffers config {gemm}: method {str(method)[:40]} is not "
                                    f"modelled (memsym prices {' or '.join(UB_METHODS[gemm])})")
        margin = given.get("set_sm_margin", base.set_sm_margin)
        if margin not in (True, False, 0, 1):
            raise InvalidValueError(f"userbuffers config {gemm}.set_sm_margin must be true or "
                                    f"false, got {margin!r:.40}")
        out.append((gemm, method, _ub_whole(given.get("num_sm", base.num_sm), f"{gemm}.num_sm"),
                    bool(margin),
                    _ub_whole(given.get("num_splits", base.num_splits), f"{gemm}.num_splits")))
    return tuple(out), ignored


def ub_config(name=None) -> dict:
    """The userbuffers config ``name`` (None: Transformer Engine's default), GEMM -> UbOverlap.

    Parameters
    ----------
    name : str or tuple, optional
        A key of :data:`UB_CONFIGS` (a Megatron-Bridge ``userbuffers_*`` name), or a user's
        config as :func:`user_ub_config` gives it.

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
    Transformer Engine d0067d0da6 transformer_engine/pytorch/module/base.py ``initialize_ub``;
    [megatron-bridge] comm_overlap.py.
    """
    if isinstance(name, tuple):     # a user's config: checked as user_ub_config makes it
        if not all(isinstance(x, tuple) and len(x) == 5 for x in name) or \
                sorted(x[0] for x in name) != sorted(UB_GEMMS):
            raise InvalidValueError("a userbuffers config tuple holds (gemm, method, num_sm, "
                                    "set_sm_margin, num_splits) for each of "
                                    + ", ".join(UB_GEMMS))
        got, _ = user_ub_config({x[0]: dict(zip(UB_KEYS, x[1:])) for x in name})
        return {gemm: UbOverlap(method, num_sm, margin, splits)
                for gemm, method, num_sm, margin, splits in got}
    key = "te-default" if name is None else name
    if key not in UB_CONFIGS:
        raise InvalidValueError(f"unknown userbuffers config {name!r} (known: "
                                f"{', '.join(sorted(UB_CONFIGS))})")
    return UB_CONFIGS[key]
