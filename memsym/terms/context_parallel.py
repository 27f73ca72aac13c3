r"""The buffers context-parallel attention allocates beyond a plain attention's, per method.

With context parallelism (CP size :math:`c`) each rank holds :math:`s/c` tokens of every
sequence; the activations divide by :math:`c` (:mod:`memsym.terms.activations`), and the
attention of one layer exchanges keys and values between the CP ranks.  That exchange
allocates, for the one attention call running, buffers a non-CP attention does not have.
What they are depends on the implementation and its method:

* **torch** (``torch.distributed.tensor.experimental.context_parallel``, what torchtitan
  runs): ring attention with the keys and values rotated by an all-gather (default,
  ``_cp_options.rotate_method = ALL_GATHER``) or by all-to-all permutes, the partial outputs
  merged in fp32, and the key/value gradients rotated in fp32 in backward
  (:func:`torch_ring_attention`);
* **Transformer Engine** (Megatron-LM's ``--cp-comm-type``, default ``p2p``): ``p2p``
  (``AttnFuncWithCPAndKVP2P``), ``all_gather`` (``AttnFuncWithCPAndKVAllGather``), ``a2a``
  (``AttnFuncWithCPAndQKVOA2A``, Ulysses) and the hierarchical ``a2a+p2p``
  (:func:`te_cp_attention`);
* **DeepSpeed Ulysses** (``sequence_parallel_size``: ``UlyssesSPAttentionHF`` around the
  transformers model's own attention kernel): the all-to-all of ``a2a``, with the copies of its
  own reshapes (:func:`ulysses_attention`).

Each method gives two Terms: the peak in an attention forward and in its backward, beyond
what a plain flash attention on the rank's :math:`s/c` tokens makes (its output and
logsumexp in forward, :math:`dQ, dK, dV` in backward), in bytes, with

.. math::

    Q = w\,b\,\frac{s}{c}\,\frac{a}{t}\,d_h,\qquad
    K = w\,b\,\frac{s}{c}\,\frac{n_{kv}}{t}\,d_h,\qquad
    \Lambda = 4\,b\,\frac{s}{c}\,\frac{a}{t}

the bytes of the rank's queries, of its keys (as many for its values) and of its fp32
logsumexp; :math:`w` the activations' width (2 for 16-bit), :math:`n_{kv}` the key/value
heads the kernel receives (torchtitan's Llama repeats the :math:`g` KV heads to :math:`a`
with ``repeat_kv`` before SDPA; Transformer Engine takes the :math:`g` groups as they are).
A rank runs one attention at a time, so one call's buffers are the transient; both the last
layer's attention forward and the first attention backward run with every block's
activations alive and the output layer's absent, so the larger of F and B joins the blocks'
backward phase (:func:`cp_attention_transients`).  None apply at :math:`c = 1`.

Not counted: torch's ``context_parallel`` also shards the buffers it is given (torchtitan:
the inputs, labels and ``freqs_cis``, the whole table kept to restore it: :math:`s\,d_h/2`
complex64 numbers, 128 MiB at s = 262144, d_h = 128) with a 1/c copy each; the
version torchtitan's December 2024 benchmark ran (torch ``1963fc8``) was not read here, the
terms follow torch 2.13's file.

References
----------
.. [pytorch-context-parallel] ``torch/distributed/tensor/experimental/_context_parallel/
   _attention.py`` of torch 2.13.0 (the installed copy): ``_templated_ring_attention``,
   ``_templated_ring_attention_backward``, ``_SDPAMerger``, ``_AllGatherRotater``,
   ``_AllToAllRotater``; the same algorithm and default at pytorch ``0123248a48``
   (``experimental/_attention.py``).
.. [te-context-parallel] NVIDIA/TransformerEngine ``d0067d0da6``,
   ``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``.
"""

from __future__ import annotations

import functools

import sympy as sp

from ..errors import InvalidValueError, choose
from ..frameworks import FRAMEWORK
from ..symbols import a, b, c, d_h, g, s, t
from ..term import Source, Term
from ..values import cached_max
from ..vocabulary import CP_METHODS

__all__ = ["cp_method", "torch_ring_attention", "te_cp_attention", "ulysses_attention",
           "cp_attention_transients", "attention_sizes", "add_phase_buffers",
           "a2a_attention_output"]

# Every CP method a job may name (Training.comm.cp_comm_type) is in memsym.vocabulary:
# Megatron-LM's --cp-comm-type values (Transformer Engine) and torch's rotate methods
# (torchtitan's experimental.context_parallel_rotate_method, later
# parallelism.context_parallel_rotate_method); which framework runs which is
# memsym.frameworks.FRAMEWORK's cp_attention (the first method its default).

_TORCH = Source("pytorch-context-parallel", "_templated_ring_attention (key/value "
                "contiguous copies, torch.cat of K and V, rotater buffers; _SDPAMerger: fp32 "
                "out - sigmoid(block_lse - lse) * (out - block_out)); "
                "_templated_ring_attention_backward (fp32 dQ accumulator, dK/dV rotated in fp32 "
                "by _AllToAllRotater)")
_TE = "context_parallel.py, "


def attention_sizes(n_kv, width=2) -> tuple:
    r"""(Q, K, Λ): bytes of one rank's queries, keys and fp32 logsumexp for one attention call.

    >>> attention_sizes(8)[1]
    16*b*d_h*s/(c*t)
    """
    tok = b * s / c
    return width * tok * a * d_h / t, width * tok * n_kv * d_h / t, 4 * tok * a / t


def torch_ring_attention(method: str, n_kv, width=2) -> tuple:
    r"""(forward, backward) Terms of torch's ring attention [bytes].

    Counted on CP rank :math:`c - 1` (the most: with torch's round-robin load balance every
    one of its steps runs the whole local query), beyond a plain attention's outputs:

    .. math::

        F = R_f + 8Q + 2\Lambda,\qquad B = R_b + 2Q + 17K

    * the merge of step :math:`i \ge 1`: the fp32 running output (2Q), the block output
      (Q, 16-bit) and its fp32 copy (2Q), ``out - block_out`` (2Q) and its product with the
      sigmoid (2Q), beside the running and block logsumexp and one temporary (3Λ); less the
      16-bit output and logsumexp a plain attention also makes: :math:`8Q + 2\Lambda`;
    * ``allgather``: the gathered keys and values of all c ranks, :math:`R_f = R_b = 2cK`,
      held from the first step to the last; ``alltoall``: the permuted K and V a step
      receives, the next one's ``torch.cat`` and its receive buffer, :math:`R_f = 6K`
      (:math:`2K` at c = 2, where one permute is made), :math:`R_b = 4K` (2K at c = 2);
    * backward: the fp32 dQ accumulator (2Q) and the step's dQ (Q); the ``torch.cat`` of K
      and V (2K, 16-bit); the step's dK and dV on half the keys (K); dK and dV in fp32
      received, partially updated (``_partial_update`` makes a copy), concatenated and sent
      (4 x 4K); less dQ, dK, dV: :math:`2Q + 17K`.

    ``tests/test_context_parallel.py`` runs ``_templated_ring_attention`` and its backward on
    a 2-process gloo group and counts the live tensors (a dispatch-mode tracker).

    Examples
    --------
    Hand count for b = a = d_h = t = 1, s = c = 4 (one token a rank: Q = K = 2 bytes,
    Λ = 4), all-gather: F = 2·4·2 + 8·2 + 2·4 = 40, B = 2·4·2 + 2·2 + 17·2 = 54:

    >>> f, bw = torch_ring_attention("allgather", a)
    >>> one = {b: 1, s: 4, c: 4, t: 1, a: 1, d_h: 1}
    >>> f.expr.subs(one), bw.expr.subs(one)
    (40, 54)
    """
    Q, K, lam = attention_sizes(n_kv, width)
    if choose("torch rotate method", method, ("allgather", "alltoall")) == "allgather":
        r_f = r_b = 2 * c * K
        how = "the all-gathered keys and values of all c ranks (2cK)"
    else:
        r_f = sp.Piecewise((2 * K, sp.Eq(c, 2)), (6 * K, True))
        r_b = sp.Piecewise((2 * K, sp.Eq(c, 2)), (4 * K, True))
        how = "the permuted keys and values in flight (6K forward, 4K backward; 2K at c = 2)"
    fwd = Term("cp_ring_forward", r_f + 8 * Q + 2 * lam,
               f"torch ring attention ({method}) forward: {how}, the fp32 merge of the "
               "partial outputs", _TORCH, label="CP ring attention (forward)")
    bwd = Term("cp_ring_backward", r_b + 2 * Q + 17 * K,
               f"torch ring attention ({method}) backward: {how}, the fp32 dQ accumulator, "
               "dK and dV rotated in fp32", _TORCH, label="CP ring attention (backward)")
    return fwd, bwd


def te_cp_attention(method: str, n_kv, width=2) -> tuple:
    r"""(forward, backward) Terms of Transformer Engine's CP attention [bytes].

    16-bit attention (no FP8), ``bshd``/``sbhd``, causal, on CP rank :math:`c - 1`, beyond a
    plain attention's outputs; read from the source (no run checks them):

    * ``p2p`` (``AttnFuncWithCPAndKVP2P.forward``): every step's KV receive buffer is kept in
      ``p2p_comm_buffers`` until the output correction (c of them, 2K each; the last is saved
      in place of the local K and V), with every step's output ``out_per_step`` (16-bit, Q
      each) and logsumexp ``softmax_lse_per_step`` (Λ each): :math:`F = 2cK + cQ + c\Lambda`.
      Backward: ``dq_buffer`` (Q), two ``(2, 2K)`` KV/dKV send and receive buffers (8K) and
      the step's dQ, dK, dV; less dQ, dK, dV: :math:`B = Q + 8K`;
    * ``a2a+p2p`` (hierarchical: an all-to-all inside ``--hierarchical-context-parallel-sizes``'
      inner group, then ``AttnFuncWithCPAndKVP2P`` across): counted as ``p2p`` over all c
      ranks, an upper bound (the ring spans fewer ranks after the all-to-all);
    * ``all_gather`` (``AttnFuncWithCPAndKVAllGather``): ``gather_along_first_dim`` of K and of
      V (cK each) and the ``index_select`` reordering copy of one, :math:`F = 3cK`; backward
      the same gather beside the full-length ``dk``, ``dv`` zeros (2cK): :math:`B = 5cK`;
    * ``a2a`` (``AttnFuncWithCPAndQKVOA2A``, Ulysses): ``flash_attn_a2a_communicate`` makes
      new Q, K, V re-sharded by heads (the same sizes) beside the inputs, and reorders each
      (one copy at a time): :math:`F = 2Q + 2K`; backward the re-sharded dO (Q), dQ, dK, dV
      and their all-to-all back: :math:`B = 2Q + 2K`.

    Examples
    --------
    Hand count for b = a = t = 1, s = c = 8, d_h = 2 (Q = K = 4 bytes, Λ = 4), p2p:
    F = 2·8·4 + 8·4 + 8·4 = 128, B = 4 + 8·4 = 36:

    >>> f, bw = te_cp_attention("p2p", a)
    >>> one = {b: 1, s: 8, c: 8, t: 1, a: 1, d_h: 2}
    >>> f.expr.subs(one), bw.expr.subs(one)
    (128, 36)
    """
    Q, K, lam = attention_sizes(n_kv, width)
    method = choose("Transformer Engine CP method", method, ("p2p", "all_gather", "a2a", "a2a+p2p"))
    fwd, bwd, where = {
        "p2p": (2 * c * K + c * Q + c * lam, Q + 8 * K,
                "AttnFuncWithCPAndKVP2P (p2p_comm_buffers, out_per_step, softmax_lse_per_step; "
                "backward dq_buffer and the two (2, *kv.shape) buffers)"),
        "a2a+p2p": (2 * c * K + c * Q + c * lam, Q + 8 * K,
                    "AttnFuncWithCPAndKVP2P after the a2a of the inner group (as p2p over all c "
                    "ranks: an upper bound)"),
        "all_gather": (3 * c * K, 5 * c * K,
                      "AttnFuncWithCPAndKVAllGather (k_ag, v_ag from gather_along_first_dim, "
                      "index_select; backward dk, dv zeros of cp_size times the length)"),
        "a2a": (2 * Q + 2 * K, 2 * Q + 2 * K,
                "AttnFuncWithCPAndQKVOA2A (flash_attn_a2a_communicate: empty_like outputs, "
                "reorder_seq_chunks_for_a2a_before_attn)"),
    }[method]
    src = Source("te-context-parallel", _TE + where)
    return (Term("cp_attention_forward", fwd, f"Transformer Engine CP attention ({method}) "
                 "forward buffers", src, label="CP attention (forward)"),
            Term("cp_attention_backward", bwd, f"Transformer Engine CP attention ({method}) "
                 "backward buffers", src, label="CP attention (backward)"))


def ulysses_attention(n_kv, width=2) -> tuple:
    r"""(forward, backward) Terms of DeepSpeed Ulysses' attention (``UlyssesSPAttentionHF``)
    [bytes].

    Read from DeepSpeed ``edaa722126`` ``runtime/sequence_parallel/ulysses_sp.py`` (no run
    checks them), :math:`c \le n_{kv}` (more SP ranks than KV heads is refused), beyond a plain
    attention's outputs; the re-sharded Q, K, V the kernel saves have the plain inputs' sizes:

    * forward: the rank's own Q, K, V stay alive through the call (``forward``'s ``query``,
      ``key``, ``value``: Q + 2K) while ``_combine_local_sequences`` makes each one's
      re-sharded copy by a ``contiguous`` rearrange and a ``_DimZeroAllToAll`` (one copy at a
      time); after the kernel, ``_partition_global_sequence`` reshapes its output (Q), all-to-alls
      it back (Q) and makes the ``[bs, s/c, h]`` output contiguous (Q), the output projection's
      input: :math:`F = 4Q + 2K`, every reshape counted as a copy (at b = 1 some are views: an
      upper bound);
    * backward: the output gradient all-to-alled and reordered for the kernel (2Q), then dQ, dK,
      dV all-to-alled back beside one reordering copy: :math:`B = 2Q + 2K` (at most).

    Examples
    --------
    Hand count for b = a = t = 1, s = c = 8, d_h = 2 (Q = K = 4 bytes): F = 4·4 + 2·4 = 24,
    B = 2·4 + 2·4 = 16:

    >>> f, bw = ulysses_attention(a)
    >>> one = {b: 1, s: 8, c: 8, t: 1, a: 1, d_h: 2}
    >>> f.expr.subs(one), bw.expr.subs(one)
    (24, 16)
    """
    Q, K, _ = attention_sizes(n_kv, width)
    src = Source("deepspeed-ulysses", "ulysses_sp.py, UlyssesSPAttentionHF.forward "
                 "(_combine_local_sequences, _partition_global_sequence, _DimZeroAllToAll)")
    return (Term("cp_attention_forward", 4 * Q + 2 * K, "DeepSpeed Ulysses attention forward: "
                 "the local Q, K, V beside their all-to-all copies, the output's all-to-all back "
                 "and its contiguous copies", src, label="CP attention (forward)"),
            Term("cp_attention_backward", 2 * Q + 2 * K, "DeepSpeed Ulysses attention backward: "
                 "the output gradient re-sharded, dQ, dK, dV all-to-alled back", src,
                 label="CP attention (backward)"))


def a2a_attention_output(kept: bool = True, *, mla: dict | None = None, width=2) -> Term:
    r"""The attention kernel's own output an all-to-all CP attention keeps [bytes per layer].

    Per micro-batch and layer, with :math:`\tau = sb/c` tokens on the rank and :math:`w` bytes
    an element:

    .. math:: w\,\tau\,\frac{a\,d_v}{t} \qquad (d_v = d_h \text{ without MLA})

    An all-to-all (Ulysses) attention runs its kernel on the whole sequence with
    :math:`a/(ct)` heads and all-to-alls the output back to the rank's :math:`s/c` tokens.  The
    kernel's output is saved for its backward and the all-to-all's result, a new tensor of as
    many elements, is what the output projection keeps (``proj_input``): two copies where a
    plain attention keeps one.  Transformer Engine's ``AttnFuncWithCPAndQKVOA2A`` saves
    ``out_part`` (the kernel's output) and returns ``flash_attn_a2a_communicate``'s result;
    DeepSpeed's ``UlyssesSPAttentionHF`` returns ``_partition_global_sequence``'s all-to-all of
    the kernel's output, which the transformers kernel saved.  0 when not kept (``kept``
    False: no a2a, or the core attention recomputed).

    Parameters
    ----------
    kept : bool
        The layer's attention runs the a2a method at c > 1 and is not recomputed [1].
    mla : dict, optional
        Multi-latent attention sizes (``v_head_dim`` sets the output's head width).
    width : {2, 4}
        Bytes of an element in the compute dtype (4 in fp32) [bytes/element].

    Examples
    --------
    Llama 3 8B (32 heads of 128) at s = 65536, b = 1, c = 8, t = 1: one 16-bit 8192 x 4096
    tensor a layer, 64 MiB:

    >>> a2a_attention_output().evaluate(s=65536, b=1, c=8, t=1, a=32, d_h=128) == \
    ...     2 * 8192 * 4096
    True

    References
    ----------
    .. [te-context-parallel] ``context_parallel.py`` at d0067d0da6,
       ``AttnFuncWithCPAndQKVOA2A.forward`` (lines 4428-4476: ``out_part = out_``; 4485-4500:
       ``out_ = flash_attn_a2a_communicate(out_, ...)``, returned; 4563-4576: ``out_part``
       saved).
    .. [deepspeed-ulysses] ``runtime/sequence_parallel/ulysses_sp.py`` at edaa722126,
       ``UlyssesSPAttentionHF.forward`` (lines 355-391) and ``_partition_global_sequence``
       (206-227).
    """
    if not kept:
        return Term("cp_a2a_attention_output", sp.Integer(0), "", _A2A_OUT, label="CP a2a output")
    head = sp.Integer(mla["v_head_dim"]) if mla else d_h
    return Term("cp_a2a_attention_output", width * s * b / c * a * head / t,
                "the attention kernel's own output, saved beside the all-to-all's copy the "
                "output projection keeps (a2a context parallelism)", _A2A_OUT,
                label="CP a2a output")


_A2A_OUT = Source("te-context-parallel", "transformer_engine/pytorch/attention/"
                  "dot_product_attention/context_parallel.py at d0067d0da6, "
                  "AttnFuncWithCPAndQKVOA2A.forward (out_part saved, lines 4428-4476, "
                  "4563-4576; the all-to-all's output returned, 4485-4500); DeepSpeed "
                  "edaa722126 ulysses_sp.py UlyssesSPAttentionHF.forward (355-391)")


def cp_method(framework: str, given) -> str | None:
    """The CP method a job of ``framework`` runs: ``given`` (one name, or Megatron's list of
    one per layer, all the same) or, None, the framework's default (the first of its
    ``cp_attention`` methods); None where memsym models none.

    >>> cp_method("megatron", None), cp_method("torchtitan", None), cp_method("torchtitan", "alltoall")
    ('p2p', 'allgather', 'alltoall')
    >>> cp_method("torchtitan", "p2p")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: torchtitan's context-parallel attention runs allgather or alltoall, not p2p
    >>> cp_method("megatron", ["a2a", "a2a"]), cp_method("megatron", "allgather")
    ('a2a', 'all_gather')
    """
    if isinstance(given, (list, tuple)):
        # Megatron's --cp-comm-type takes one type for every layer, or one per layer
        kinds = tuple(dict.fromkeys(given))
        if len(kinds) != 1:
            raise InvalidValueError("context-parallel types per layer (" + ", ".join(
                str(x)[:20] for x in kinds[:4]) + ") are not modelled: give one type")
        given = kinds[0]
    if given is not None:
        given = choose("context-parallel method", given, CP_METHODS)
    record = FRAMEWORK.get(framework)     # an unknown framework is refused by its own check
    if record is None or not record.cp_attention:
        return None
    methods = record.cp_attention[1]
    if given == "allgather" and "all_gather" in methods:
        # Megatron-core's DSA attention spells it so (transformer_config.py:3172 at d98e8a64dd
        # drops the underscore); Transformer Engine's does not: rule te-cp-allgather
        given = "all_gather"
    if given is not None and given not in methods:
        raise InvalidValueError(f"{record.title}'s context-parallel attention "
                                f"runs {' or '.join(methods)}, not {given}")
    return methods[0] if given is None else given


def cp_attention_transients(implementation: str, method: str, n_kv, width=2) -> dict:
    r"""Phase -> Terms of one attention call's CP buffers (:data:`memsym.training.PHASES`).

    ``implementation`` is ``"torch"`` (:func:`torch_ring_attention`),
    ``"transformer-engine"`` (:func:`te_cp_attention`) or ``"deepspeed-ulysses"``
    (:func:`ulysses_attention`).  The buffers live inside one attention
    call, forward or backward, so they never meet the loss's buffers (the ``forward`` and
    ``loss-backward`` phases are the end of the forward and the loss's backward, after the
    last attention forward and before the first attention backward).  Both calls run with
    every block's activations alive and the output layer's absent (not yet made in the last
    attention forward, freed before the first attention backward): the ``backward`` phase
    (activations less ``output_freed``) with :math:`\max(F, B)`.

    >>> ph = cp_attention_transients("transformer-engine", "p2p", a)
    >>> sorted(ph), ph["backward"][0].key
    (['backward'], 'cp_attention')
    """
    if implementation == "deepspeed-ulysses":
        fwd, bwd = ulysses_attention(n_kv, width)
    else:
        make = torch_ring_attention if implementation == "torch" else te_cp_attention
        fwd, bwd = make(method, n_kv, width)
    # B >= F wherever the sources order them (torch with K = Q, torchtitan's repeated KV
    # heads: B - F >= 9Q - 2Λ > 0; TE's all_gather 5cK > 3cK; a2a equal): B alone, so that
    # the total keeps one Max (the phases'); TE's p2p orders them by c and g/a; Ulysses'
    # F = 4Q + 2K exceeds its B = 2Q + 2K: F alone
    both = method in ("p2p", "a2a+p2p") or (implementation == "torch" and n_kv != a)
    one = fwd.expr if implementation == "deepspeed-ulysses" else bwd.expr
    peak = Term("cp_attention", cached_max(fwd.expr, bwd.expr) if both else one,
                "context-parallel attention ("
                f"{method}): the larger of one call's forward and backward buffers "
                f"({fwd.description}; {bwd.description})", bwd.source,
                label="CP attention buffers")
    return {"backward": (peak,)}


def add_phase_buffers(out: dict, cp_size: int, framework: str, given, width=2) -> None:
    """Add one attention call's CP buffers to the phase -> Terms lists ``out`` (nothing at
    ``cp_size`` 1 or for a framework memsym models none for; ``cp_size`` None: c is left a
    symbol, the Term 0 at c = 1).

    torchtitan's Llama (the "torch" implementation's models) repeats the :math:`g` KV heads
    to :math:`a` before SDPA (``repeat_kv`` in ``Attention.forward``), so the rotated keys
    are :math:`a d_h` wide; Transformer Engine takes the :math:`g` groups.

    >>> out = {"forward": [], "loss-backward": [], "backward": [], "optimizer": []}
    >>> add_phase_buffers(out, 2, "torchtitan", None)
    >>> [x.key for x in out["backward"]], out["forward"]
    (['cp_attention'], [])
    >>> add_phase_buffers(out, None, "megatron", None)
    >>> out["backward"][1].expr.subs(c, 1)
    0
    """
    method = cp_method(framework, given)
    if cp_size == 1 or method is None:
        return
    for phase, terms in _phase_buffers(FRAMEWORK[framework].cp_attention[0], method, width,
                                       cp_size is None):
        out[phase] += list(terms)


@functools.lru_cache(maxsize=256)
def _phase_buffers(implementation: str, method: str, width, symbolic: bool) -> tuple:
    # ((phase, Terms), ...) of add_phase_buffers, built once per argument set (Terms are
    # immutable): a cold search asks for the same buffers in each of its hundreds of templates
    n_kv = a if implementation == "torch" else g
    out = []
    for phase, terms in cp_attention_transients(implementation, method, n_kv, width).items():
        if symbolic:      # c stays a symbol (a search template): nothing at c = 1
            terms = [Term(x.key, sp.Piecewise((0, sp.Eq(c, 1)), (x.expr, True)),
                          x.description, x.source, label=x.label) for x in terms]
        out.append((phase, tuple(terms)))
    return tuple(out)
