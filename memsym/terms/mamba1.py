r"""Activations a Zamba Mamba-1 mixer keeps for its backward, as transformers' torch path runs it.

Zamba's ``ZambaMambaMixer`` (transformers 5.25.0 ``models/zamba/modeling_zamba.py``, lines
486-682) is Mamba-1 (Gu & Dao 2023, Algorithm 2) split into H = ``n_mamba_heads`` heads of
P = d/H channels after the convolution: in_proj h -> 2d (x and the gate z), a depthwise causal
conv1d of k taps and SiLU over x, per-head x_proj (P -> r + 2N: dt, B, C) and dt_proj
(r -> P), a selective scan per head with the D skip and the SiLU(z) gate, out_proj d -> h.
Without the ``mamba_ssm`` and ``causal_conv1d`` packages (a CPU, or a GPU without them, the
path memsym models) ``causal_conv1d_fn`` and ``mamba_selective_scan`` run their torch
fallbacks (lines 251-272 and 376-481): the scan is a loop over the s positions that keeps
every step's state.  What autograd keeps, per micro-batch of b sequences of s tokens
(:math:`\tau = sb`), d = d_ssm, N = N_ssm, r = r_dt, k = k_conv, H = H_ssm:

================================================  ============================  ====================
tensor kept for backward                          bytes                         memsym key
================================================  ============================  ====================
in_proj's input (the pre-norm's output)           :math:`2\tau h`               ``in_proj_input``
conv1d's input (x made contiguous)                :math:`2\tau d`               ``conv_input``
conv1d's padded output (SiLU's input, a slice)    :math:`2bd(s + k - 1)`        ``conv_output``
SiLU's output (x, kept by the D skip)             :math:`2\tau d`               ``conv_activation``
x_proj's output per head (dt, B, C)               :math:`2\tau H (r + 2N)`      ``x_proj_output``
x per head and the x_proj, dt_proj weights        :math:`[b, H > 1]\,2(\tau d`  ``batch_copies``
copied by the batched matmuls (b, H > 1 only)     :math:`+ bd (2r + 2N))`
A = -exp(A_log) and its exp, fp32 (per layer)     :math:`8dN`                   ``a_matrix``
dt + dt_bias and its softplus                     :math:`4\tau d`               ``dt``
exp(A dt) and dt B, fp32                          :math:`8\tau d N`             ``discretized``
B and x in fp32                                   :math:`4\tau (HN + d)`        ``scan_inputs_fp32``
each step's state: the zero initial state, the    :math:`6\tau dN - 2bdN`       ``scan_states``
fp32 states of steps 0..s-2, all 16-bit copies
D in fp32 (per layer)                             :math:`4d`                    ``skip_fp32``
z (a view: in_proj's whole 2d-wide output)        :math:`4\tau d`               ``gate``
SiLU(z) and the fp32 scan output it multiplies    :math:`6\tau d`               ``gated``
out_proj's input                                  :math:`2\tau d`               ``out_proj_input``
================================================  ============================  ====================

``tests/test_zamba_activations.py`` measures these under ``saved_tensors_hooks`` on transformers'
own mixer on the CPU, exactly.  The :math:`\tau d N` terms (about :math:`14 dN` bytes a token:
14 x 16 = 224 bytes per inner channel at N = 16) dominate: the torch path is a reference, not
what a GPU run with the kernels keeps.

With ``mamba_ssm`` installed transformers 5.25 swaps in its ``selective_scan_fn`` for the scan
alone (``use_kernel_func_from_hub_with_fallback("selective_scan_fn", "mamba_ssm")``; the
projections and the conv stay torch, or ``causal_conv1d``): mamba_ssm's ``SelectiveScanFn.
forward`` (``ops/selective_scan_interface.py`` lines 37-68 at e9594ce1c7) saves u, delta, A, B,
C, D, z, delta_bias, the chunk states x and the un-gated output, not the per-step states: x is
(b, P, :math:`\lceil s/2048 \rceil`, 2N) fp32 and out is delta-shaped (``csrc/selective_scan/
selective_scan.cpp`` lines 307-313), a few bytes a channel and token instead of ~14N.
Zamba does not use the fused ``mamba_inner_fn`` (``MambaInnerFn``, lines 196-291: xz, x_dbl,
the scan intermediates and out, conv1d_out and delta recomputed at ``checkpoint_lvl`` 1).
Neither kernel path is modelled: memsym prices the torch path only.

Conventions as :mod:`memsym.terms.mamba2`: bf16 weights and activations (2 bytes), per
micro-batch on one GPU; transformers does not shard the mixer (tensor parallelism is refused).
"""

from __future__ import annotations

import sympy as sp

from ..errors import InvalidValueError
from ..symbols import H_ssm, N_ssm, b, d_ssm, h, k_conv, r_dt, s
from ..term import Source, Term, Total

__all__ = ["mamba1_mixer_activations", "mamba1_layer_terms", "refuse_mamba1"]

_ZAMBA = "models/zamba/modeling_zamba.py"


def _src(where: str) -> Source:
    return Source("hf-transformers-5-25", f"{_ZAMBA}:{where}")


def mamba1_mixer_activations() -> Total:
    r"""Activations one Zamba Mamba-1 mixer keeps on transformers' torch path [bytes].

    Per micro-batch on one GPU, :math:`\tau = sb`, :math:`[b, H > 1]` = 1 for b > 1 and
    H > 1, else 0 (for integers b, H >= 1, :math:`\min(b - 1, 1)\,\min(H - 1, 1)`):

    .. math::

        A = 2\tau h + 2\tau d + 2bd(s + k - 1) + 2\tau d + 2\tau H(r + 2N)
            + [b, H > 1]\,(2\tau d + 2bd(r + 2N) + 2bdr) + 8dN + 4\tau d + 8\tau dN
            + 4\tau(HN + d) + 6\tau dN - 2bdN + 4d + 4\tau d + 2\tau d + 4\tau d + 2\tau d

    term by term as the module's table.  The ``[b, H > 1]`` copies come from
    ``torch.matmul``'s broadcasting: ``x_proj_weight[:, None] @ x`` (H, b, P, s) expands the
    (H, 1, r + 2N, P) weight over b and folds the batch dimensions H and b into one, a copy of
    both operands (x is (b, H, P, s) transposed) unless b = 1 or H = 1, where the fold is a
    view; the same for dt_proj's weight.

    Returns
    -------
    Total
        Cited terms in ``s, b, h, d_ssm, N_ssm, H_ssm, r_dt, k_conv`` [bytes].

    References
    ----------
    transformers 5.25.0 ``models/zamba/modeling_zamba.py`` ZambaMambaMixer.forward,
    causal_conv1d_fn, mamba_selective_scan (hf-transformers-5-25); Gu & Dao 2023, Algorithm 2
    (mamba1).

    Examples
    --------
    s = 3, b = 2, h = 8, d = 16, N = 4, H = 2, r = 2, k = 4: 9872 bytes, as measured on
    transformers' mixer (``tests/test_zamba_activations.py``); at b = 1, 4744

    >>> tot = mamba1_mixer_activations()
    >>> sizes = {s: 3, h: 8, d_ssm: 16, N_ssm: 4, H_ssm: 2, r_dt: 2, k_conv: 4}
    >>> tot.expr.subs({**sizes, b: 2}), tot.expr.subs({**sizes, b: 1})
    (9872, 4744)
    """
    tok, d = s * b, d_ssm
    # [b, H > 1] for integers b, H >= 1 as a product of Mins, not a Piecewise of Eq | Eq:
    # numpy's printing of an Or stacks its conditions into one array, which fails where the
    # search hands a scalar H and an array b; Min prints as numpy.minimum, which broadcasts
    many = sp.Min(b - 1, 1) * sp.Min(H_ssm - 1, 1)
    scan = "376-481 (mamba_selective_scan, the torch fallback)"
    terms = [
        Term("in_proj_input", 2 * tok * h, "in_proj's input (the pre-norm's output)",
             _src("580 (self.in_proj)"), label="in_proj"),
        Term("conv_input", 2 * tok * d, "conv1d's input, x made contiguous",
             _src("263-269 (causal_conv1d_fn: F.conv1d)"), label="conv in"),
        Term("conv_output", 2 * b * d * (s + k_conv - 1), "conv1d's padded output, SiLU's "
             "input (a slice of s positions keeps all s + k - 1)",
             _src("263-271 (F.conv1d(..., padding=k - 1)[:, :, :seq_len], ACT2FN)"),
             label="conv out"),
        Term("conv_activation", 2 * tok * d, "SiLU's output x, kept by the D skip product",
             _src("472 (hidden_states * D)"), label="x"),
        Term("x_proj_output", 2 * tok * H_ssm * (r_dt + 2 * N_ssm), "x_proj's per-head output "
             "dt, B, C (dt_proj's input; B and C read by the scan)",
             _src("611-618 (ssm_parameters, time_step)"), label="x_proj out"),
        Term("batch_copies", many * (2 * tok * d + 2 * b * d * (r_dt + 2 * N_ssm)
                                     + 2 * b * d * r_dt),
             "b > 1 and H > 1: x regrouped per head and the x_proj and dt_proj weights "
             "expanded over the batch by the broadcasting matmuls",
             _src("611, 618 (weight[:, None] @ ...)"),
             label="matmul copies"),
        Term("a_matrix", 8 * d * N_ssm, "exp(A_log) and A = -exp(A_log) in fp32, once per layer",
             _src("620 (A = -torch.exp(self.A_log.float()))"), label="A"),
        Term("dt", 4 * tok * d, "dt + dt_bias (softplus's input) and its softplus",
             _src("406-408"), label="dt"),
        Term("discretized", 8 * tok * d * N_ssm, "exp(A dt) and dt B, fp32",
             _src("415-416 (discrete_A, discrete_B)"), label="dA, dB"),
        Term("scan_inputs_fp32", 4 * tok * (H_ssm * N_ssm + d), "B (per head) and x in fp32",
             _src("416-417 (B.float(), hidden_states.float())"), label="B, x fp32"),
        Term("scan_states", 6 * tok * d * N_ssm - 2 * b * d * N_ssm, "each step's state: the "
             "zero initial state, the fp32 states of steps 0..s-2 and every step's 16-bit copy",
             _src("453-467 (ssm_state, ssm_state.to(input_dtype))"), label="states"),
        Term("skip_fp32", 4 * d, "D in fp32 (per head, once per layer)",
             _src("657 (D=self.D[head_idx].float())"), label="D"),
        Term("gate", 4 * tok * d, "z, a view keeping in_proj's whole 2d-wide output",
             _src("580-585, 475 (F.silu(z))"), label="z"),
        Term("gated", 2 * tok * d + 4 * tok * d, "SiLU(z) and the fp32 scan output it gates",
             _src("472-475 " + scan), label="gate"),
        Term("out_proj_input", 2 * tok * d, "out_proj's input", _src("681 (self.out_proj)"),
             label="out_proj"),
    ]
    return Total("activations of one Zamba Mamba-1 mixer (transformers' torch path)",
                 tuple(terms))


def mamba1_layer_terms(one_stat) -> list:
    r"""A Zamba Mamba layer's terms [bytes]: its pre-norm's input and statistics and the mixer.

    .. math:: 2\tau h + S + A_{\mathrm{mixer}}

    with S = ``one_stat`` and :math:`A_{\mathrm{mixer}}` :func:`mamba1_mixer_activations`
    (which holds the norm's output, in_proj's input).  ``ZambaMambaDecoderLayer`` applies no
    dropout (residual + mixer output).

    Parameters
    ----------
    one_stat : sympy.Expr
        One pre-norm's fp32 statistics [bytes] (0 without).

    Returns
    -------
    list of Term
        [bytes].

    References
    ----------
    transformers 5.25.0 ``models/zamba/modeling_zamba.py`` ZambaMambaDecoderLayer.forward
    (hf-transformers-5-25).

    Examples
    --------
    >>> [term.key for term in mamba1_layer_terms(0)][:3]
    ['mamba_norm_input', 'mamba_in_proj_input', 'mamba_conv_input']
    """
    src = _src("782-797 (ZambaMambaDecoderLayer.forward: input_layernorm, self.mamba)")
    terms = [Term("mamba_norm_input", 2 * s * b * h, "input of the Mamba layer's pre-norm",
                  src, label="mamba norm")]
    if one_stat != 0:
        terms.append(Term("mamba_norm_statistics", one_stat, "fp32 per-token statistics of "
                          "the Mamba layer's pre-norm", src, label="mamba norm stats"))
    return terms + [Term(f"mamba_{term.key}", term.expr, term.description, term.source,
                         label=f"mamba {term.label}") for term in mamba1_mixer_activations()]


def refuse_mamba1(recompute: str, context_parallel: bool, common: dict, shared_block) -> None:
    """Raise InvalidValueError, one line, where a Mamba-1 mixer's activations are not modelled:
    outside Zamba, outside transformers' own model code, or under what it does not run.

    Examples
    --------
    >>> refuse_mamba1("none", False, {"hf_norms": True}, {"mamba1": True})
    >>> refuse_mamba1("none", False, {}, {"mamba1": True})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: the activations of Zamba's Mamba-1 mixers are modelled as ...
    """
    what = None
    if not (shared_block or {}).get("mamba1"):
        what = ("the activations of Mamba-1 mixers (Jamba, Mamba, Falcon-Mamba) are not "
                "modelled (memsym models Zamba's, as transformers runs them)")
    elif not common.get("hf_norms"):
        what = ("the activations of Zamba's Mamba-1 mixers are modelled as transformers' own "
                "model code runs them (--framework deepspeed), not under Megatron-core or "
                "torchtitan (which build no Mamba-1 mixer)")
    elif shared_block.get("tensor_parallel"):
        what = ("tensor parallelism (t > 1) of Zamba's Mamba-1 mixers is not modelled "
                "(transformers does not shard them)")
    elif recompute in ("selective", "selective-op") or common.get("fp8_inputs") \
            or context_parallel or common.get("mla"):
        what = ("selective recompute, FP8, context parallelism and MLA of Zamba's Mamba-1 "
                "layers are not modelled")
    if what:
        raise InvalidValueError(what)
