r"""The pipeline part of the step: layers per stage, each stage's time, the bubble.

Each pipeline stage's forward + backward of one micro-batch (:func:`stage_times`) is its
layers' time plus the embedding (first stage) and the output layer (last, or first under the
V placement).  The pipeline runs ``m`` micro-batches of the slowest stage and the fill and
drain once through the others, weighted by the exact bubble of the schedule
(:func:`memsym.timing.bubble.bubble_in_stages`, or a simulation with each stage's own
durations, :func:`simulated_pipeline`).  An uneven custom layout (``--pipeline-model-parallel-layout``,
``--account-for-embedding/loss-in-pipeline-split``) is simulated chunk by chunk, each with
its own decoder layers, the embedding in the first virtual stage and the output layer in the
last (:func:`chunk_times`); the busiest stage is its heaviest rank (:func:`heaviest_middle`).

References
----------
.. [megatron-lm] core/pipeline_parallel/schedules.py (get_pp_rank_microbatches,
   get_schedule_table); arguments.py (decoder_first/last_pipeline_num_layers);
   core/transformer/transformer_block.py:76 get_num_layers_to_build (every chunk of a rank
   equal under first/last sizes; one fewer beside the embedding / loss under account-for);
   core/transformer/pipeline_parallel_layer_layout.py:153 get_num_layers_to_build (a custom
   layout's chunk); training/training.py:2391-2394 get_model (pre_process / post_process
   on the first / last virtual stage), all at rev d98e8a64dd.
.. [narayanan] arXiv:2104.04473 §2.2.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidValueError
from ..distinct_rows import distinct_layouts, spread
from ..terms.pipeline_order import simulate
from ..terms.schedule import torch_round_size
from .efficiency import gemm_time, memory_time
from .gemm import output_gemm
from .efficiency import as_array
from .one_f_one_b import alike_ranks, exact_one_f_one_b
from .records import Settings

__all__ = ["most_layers_per_rank"]


def stage_layers(L, p, first, last):
    r"""Decoder layers on (first, middle, last) stages (Megatron's uneven first/last option).

    .. math:: n_{\text{mid}} = \frac{L - f - l}{p - [f\ \text{given}] - [l\ \text{given}]}

    with :math:`n_{\text{first}} = f`, :math:`n_{\text{last}} = l` where given, else
    :math:`n_{\text{mid}}` (neither given: :math:`L/p` on every stage).

    Parameters
    ----------
    L : int
        Decoder layers [1].
    p : int or array_like
        Pipeline-parallel size [GPUs].
    first, last : int or array_like or None
        ``--decoder-first/last-pipeline-num-layers`` [1]; None when not given.

    Examples
    --------
    >>> # hand: (126 - 7 - 7) / (16 - 2) = 8 layers on each of the 14 middle stages
    >>> [float(n) for n in stage_layers(126, 16, 7, 7)]
    [7.0, 8.0, 7.0]

    References
    ----------
    Megatron-LM megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``
    (rev d98e8a64dd).
    """
    p = as_array(p)
    if first is None and last is None:
        per = L / p
        return per, per, per
    fl = as_array(first if first is not None else 0)
    ll = as_array(last if last is not None else 0)
    inner = p - (first is not None) - (last is not None)
    rest = (L - fl - ll) / np.maximum(inner, 1)
    return (fl if first is not None else rest), rest, (ll if last is not None else rest)


def heaviest_middle(chunks, middle):
    r"""Decoder layers of the heaviest middle rank [1].

    .. math:: n_{\max} = \max_{0 < r < p - 1} \sum_j n_{r,j}

    of ``chunks`` (``chunks[r][j]``: decoder layers of chunk j of rank r) where given (three
    ranks or more), else ``middle`` (the middle ranks are equal).

    Parameters
    ----------
    chunks : tuple of tuple of int or None
        Decoder layers of chunk j of rank r, ``chunks[r][j]`` [layers].
    middle : array_like
        The middle ranks' (mean) decoder layers [layers].

    Examples
    --------
    >>> # hand: middle ranks hold 6 and 10 layers, the heavier 10
    >>> heaviest_middle(((8,), (6,), (10,), (8,)), 8.0), heaviest_middle(None, 8.0)
    (10, 8.0)

    References
    ----------
    Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py
    ``get_num_layers_to_build`` (a custom layout's chunk) (rev d98e8a64dd).
    """
    if chunks is None or len(chunks) < 3:
        return middle
    return max(sum(row) for row in chunks[1:-1])


def microbatch_group(st: Settings, p: int, m: int, v: int) -> int:
    r"""The micro-batch group size N the simulated schedule runs for one layout [1].

    .. math:: N = \max\Bigl(p,\ \left\lfloor \frac{m}{\max(1, \lfloor m/p \rfloor)}
        \right\rfloor\Bigr)

    under ``torch_rounds`` (interleaved, v > 1, no group size set: torch's round size), else
    Megatron's ``microbatch_group_size_per_vp_stage`` as set (``st.group_size``), else
    Megatron's default p.  A group below p (torch's round of m < p micro-batches, or a set
    size Megatron refuses) runs as p: the simulated order is Megatron's, which takes
    N >= p.  The one place of that rule for the bubble, the exact simulation and the
    interleaved makespan.

    Parameters
    ----------
    st : Settings
        ``torch_rounds`` and ``group_size``.
    p : int
        Pipeline-parallel size [GPUs].
    m : int
        Micro-batches per step [1].
    v : int
        Virtual stages per rank [1].

    Returns
    -------
    int
        The group size N [1].

    Examples
    --------
    >>> # hand: m = 8, p = 4: floor(8 / max(1, floor(8/4))) = 4; m = 3 < p = 4: 3, below p
    >>> microbatch_group(Settings(torch_rounds=True), 4, 8, 2)
    4
    >>> microbatch_group(Settings(torch_rounds=True), 4, 3, 2), microbatch_group(Settings(), 4, 8, 2)
    (4, 4)
    >>> microbatch_group(Settings(group_size=8), 4, 8, 2)
    8

    References
    ----------
    .. [pytorch-pipelining] schedules.py ScheduleInterleaved1F1B (number_of_rounds).
    .. [megatron-schedules] forward_backward_pipelining_with_interleaving (N).
    """
    N = st.group_size
    if st.torch_rounds and v > 1 and st.group_size is None:
        N = int(torch_round_size(m, p))
    return p if N is None or N < p else N


def end_layers(x, st: Settings, dev, b, t, c, eta_gemm=None) -> tuple:
    r"""Seconds of the output layer + loss and of the embedding, one micro-batch on one GPU.

    .. math::

        t^{\text{fwd}}_{\text{out}} = t_{\text{GEMM}}(T, V/t, h) + \frac{6\,T V/t}{B_{HBM}},
        \quad t^{\text{bwd}}_{\text{out}} = t_{\text{GEMM}}(T, h, V/t) + t_{\text{GEMM}}(h, V/t, T)
            + \frac{10\,T V/t}{B_{HBM}},\quad t_{\text{emb}} = \frac{4\,T h}{B_{HBM}}

    with :math:`T = bs/c` tokens.  The output layer runs 16-bit (Transformer Engine keeps it
    out of FP8), its fp32 logits cost ~16 bytes per logit forward + backward (all V logits
    under DeepSpeed AutoTP, ``Settings.gathered_logits``); the embedding
    lookup and its gradient scatter 4 T h bytes.  The MTP depths' work beside their decoder
    layers is :func:`memsym.timing.mtp.mtp_depth`'s.

    Parameters
    ----------
    x : memsym.timing.gemm.Shape
        The model's shape.
    st : Settings
        Sequence length and precision.
    dev : GPU
        The GPU.
    b, t, c : float or numpy.ndarray
        Micro-batch size [sequences], tensor- and context-parallel sizes [GPUs].
    eta_gemm : float, optional
        A fixed achieved GEMM efficiency in (0, 1] [1].

    Returns
    -------
    tuple
        ``(out_f, out_b, emb)`` [s].

    Examples
    --------
    >>> from memsym.hardware import gpu
    >>> from memsym.model import preset
    >>> from memsym.timing.gemm import shape_of
    >>> x, h100 = shape_of(preset("llama3-8b")), gpu("h100")
    >>> f, b, emb = end_layers(x, Settings(), h100, 1, 1, 1)
    >>> bool(np.isclose(emb, memory_time(4 * 2048 * 4096, h100)))   # T h = 2048 x 4096
    True

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §3.2 (the output layer on the last stage).
    """
    # a search's grid holds few (b, t, c): each priced once (the same numbers on every row)
    found = distinct_layouts(b, t, c)
    if found is not None:
        uq, inv = found
        knobs = np.broadcast_arrays(b, t, c)
        got = _end_layers(x, st, dev, *(uq[:, i].astype(k.dtype) for i, k in enumerate(knobs)),
                          eta_gemm)
        return spread(got, inv, knobs[0].shape)
    return _end_layers(x, st, dev, b, t, c, eta_gemm)


def _end_layers(x, st: Settings, dev, b, t, c, eta_gemm) -> tuple:
    """:func:`end_layers` on every row as given."""
    s = st.seq_length
    prec = st.precision
    og = output_gemm(x, s, b, t, c)
    oprec = "bf16" if prec in ("fp8", "fp4") else prec    # TE: the output layer stays 16-bit
    out_f = gemm_time(og.M, og.N, og.K, dev, oprec, eta_gemm=eta_gemm)
    out_b = (gemm_time(og.M, og.K, og.N, dev, oprec, eta_gemm=eta_gemm)
             + gemm_time(og.K, og.N, og.M, dev, oprec, eta_gemm=eta_gemm))
    # AutoTP's loss works on the all-gathered logits (Settings.gathered_logits)
    logits = og.M * (og.N * t if st.gathered_logits else og.N)
    out_f = out_f + memory_time(6 * logits, dev)
    out_b = out_b + memory_time(10 * logits, dev)
    T = b * s / c
    emb = memory_time(4 * T * x.h, dev)   # embedding lookup + its gradient scatter
    return out_f, out_b, emb


def stage_times(st: Settings, layers: tuple, layer_f, layer_b, emb, out_f, out_b,
                emb_b=0.0) -> dict:
    r"""Forward and backward seconds of one micro-batch on the first, middle and last stages.

    ``layers``: their decoder layers, the middle ones' mean; a fourth entry: the heaviest
    middle stage's, ``middle_max``.  The embedding runs on the first stage and the output
    layer on the last (the first under the V placement), without PP p2p:

    .. math:: \tau^{\text{fwd}} = n\,t^{\text{fwd}}_{\text{layer}} + [\text{first}]\,
        t_{\text{emb}} + [\text{out}]\,t^{\text{fwd}}_{\text{out}},\qquad
        \tau^{\text{bwd}} = n\,t^{\text{bwd}}_{\text{layer}}
        + [\text{out}]\,t^{\text{bwd}}_{\text{out}}

    Parameters
    ----------
    st : Settings
        The run's settings (``output_first``: the V placement).
    layers : tuple of array_like
        Decoder layers n of the first, middle (mean), last (and heaviest middle) stages
        [layers].
    layer_f, layer_b : array_like
        One decoder layer's forward and backward [s].
    emb, out_f, out_b : array_like
        The embedding's, the output layer's forward and backward seconds [s].
    emb_b : array_like
        The first stage's own backward beyond its layers [s] (its BF16 layers' excess).

    Examples
    --------
    >>> # hand: last stage 1 layer: forward 1*1.0 + 0.25, backward 1*2.0 + 0.5
    >>> stage_times(Settings(), (1, 2, 1), 1.0, 2.0, 0.5, 0.25, 0.5)["last"]
    (1.25, 2.5)
    >>> stage_times(Settings(), (1, 2, 1, 3), 1.0, 2.0, 0.5, 0.25, 0.5)["middle_max"]
    (3.0, 6.0)

    References
    ----------
    Megatron-LM megatron/training/training.py ``get_model`` (``pre_process`` /
    ``post_process`` on the first / last stage) (rev d98e8a64dd).
    """
    tau = {}
    out_role = "first" if st.output_first else "last"
    for role, n in zip(("first", "middle", "last", "middle_max"), layers):
        fr = n * layer_f + (emb if role == "first" else 0) + (out_f if role == out_role else 0)
        br = n * layer_b + (emb_b if role == "first" else 0) + (out_b if role == out_role else 0)
        tau[role] = (fr, br)
    return tau


def busiest_stage(st: Settings, tau: dict, p, p2p_exposed, out_f, out_b) -> tuple:
    r"""The slowest stage's forward + backward of one micro-batch and their sum over stages [s].

    .. math:: \tau_{\max} = \max(\tau_{\text{first}}, \tau_{\text{last}},
        \tau_{\text{mid,max}}),\qquad \sum \tau = \tau_{\text{first}} + \tau_{\text{last}}
        + \max(p - 2, 0)\,\tau_{\text{mid}}

    each :math:`\tau = f + b + 2\,t^{\text{p2p}}_{\text{exposed}}` (one GPU, ``p = 1``: the
    whole model, output layer included, without p2p); the middle stages sum at their mean
    (``tau["middle"]``), the slowest is the heaviest one (``tau["middle_max"]`` where
    :func:`stage_times` has it).

    Parameters
    ----------
    st : Settings
        The run's settings (``output_first``: the V placement).
    tau : dict
        Each stage's (forward, backward) seconds [s] (:func:`stage_times`).
    p : array_like
        Pipeline-parallel size [GPUs].
    p2p_exposed : array_like
        Exposed PP p2p seconds per direction and stage-microbatch [s].
    out_f, out_b : array_like
        The output layer's forward and backward seconds [s].

    Examples
    --------
    >>> # hand: stages 3, 6, 6, 3 s: slowest 6, sum 3 + 3 + 2 * 6 = 18
    >>> tau = {"first": (1.0, 2.0), "middle": (2.0, 4.0), "last": (1.0, 2.0)}
    >>> [float(q) for q in busiest_stage(Settings(), tau, np.array(4.0), 0.0, 0.0, 0.0)]
    [6.0, 18.0]

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2 (the step is bounded by the slowest stage).
    """
    tau_first = sum(tau["first"]) + 2 * p2p_exposed
    tau_mid = sum(tau["middle"]) + 2 * p2p_exposed
    tau_mid_max = sum(tau["middle_max"]) + 2 * p2p_exposed if "middle_max" in tau else tau_mid
    tau_last = sum(tau["last"]) + 2 * p2p_exposed
    single = p == 1
    tau_first = np.where(single, sum(tau["first"]) + (0 if st.output_first else out_f + out_b),
                         tau_first)
    tau_max = np.where(single, tau_first,
                       np.maximum(np.maximum(tau_first, tau_last), tau_mid_max))
    total_tau = np.where(single, tau_first, tau_first + tau_last + np.maximum(p - 2, 0) * tau_mid)
    return tau_max, total_tau


def chunk_times(st: Settings, chunks: tuple, layer_f, layer_b, emb, out_f, out_b,
                p2p_exposed, emb_b=0.0) -> tuple:
    r"""Forward and backward seconds of each chunk pass of one micro-batch on each rank.

    .. math::

        d^{\text{fwd}}_{r,j} = n_{r,j}\,t^{\text{fwd}}_{\text{layer}}
            + [r = 0,\ j = 0]\,t_{\text{emb}}
            + [r = r_{\text{out}},\ j = v - 1]\,t^{\text{fwd}}_{\text{out}}
            + \frac{t^{\text{p2p}}_{\text{exposed}}}{v}

    (the backward alike, without the embedding), :math:`n_{r,j}` the decoder layers of
    chunk j of rank r (Megatron's ``get_num_layers_to_build``), the embedding in the first
    virtual stage and the output layer in the last (``pre_process`` / ``post_process``:
    ``is_vp_first_stage`` / ``is_vp_last_stage`` on the first / last pipeline rank;
    :math:`r_{\text{out}}` the last rank, the first under the V placement);
    ``p2p_exposed`` is v chunk passes' worth.  At v = 1 this is the whole-stage time of
    :func:`stage_times` plus the p2p, to the last bit.

    Parameters
    ----------
    st : Settings
        ``output_first`` places the output layer on rank 0.
    chunks : tuple of tuple of int
        ``chunks[r][j]``: decoder layers of chunk j of rank r [layers].
    layer_f, layer_b : float or numpy.ndarray
        One decoder layer's forward / backward of one micro-batch [s].
    emb, out_f, out_b : float or numpy.ndarray
        The embedding, the output layer's forward and backward [s].
    p2p_exposed : float or numpy.ndarray
        Exposed PP p2p of one stage-micro-batch (v chunk passes), each direction [s].
    emb_b : float or numpy.ndarray
        The first chunk's own backward beyond its layers [s] (as :func:`stage_times`).

    Returns
    -------
    tuple
        ``(forward, backward)``: per rank, a list of its v chunks' seconds [s].

    Examples
    --------
    >>> fw, bw = chunk_times(Settings(), ((1, 2), (2, 1)), 1.0, 2.0, 0.5, 1.0, 2.0, 0.0)
    >>> fw, bw
    ([[1.5, 2.0], [2.0, 2.0]], [[2.0, 4.0], [4.0, 4.0]])

    References
    ----------
    Megatron-LM transformer_block.py ``get_num_layers_to_build``;
    pipeline_parallel_layer_layout.py ``get_num_layers_to_build``; training/training.py
    ``get_model`` (``pre_process`` / ``post_process`` per virtual stage) (rev d98e8a6).
    """
    p, v = len(chunks), len(chunks[0])
    out_rank = 0 if st.output_first else p - 1
    fw, bw = [], []
    for r, row in enumerate(chunks):
        fw.append([]), bw.append([])
        for j, n in enumerate(row):
            # stage_times' terms in its order, times v, plus the p2p, over v: at v = 1 the
            # whole-stage expression term for term
            head, tail = r == 0 and j == 0, r == out_rank and j == v - 1
            fw[r].append(((v * n) * layer_f + (v * emb if head else 0)
                          + (v * out_f if tail else 0) + p2p_exposed) / v)
            bw[r].append(((v * n) * layer_b + (v * emb_b if head else 0)
                          + (v * out_b if tail else 0) + p2p_exposed) / v)
    return fw, bw


def simulated_pipeline(st: Settings, pipeline, tau: dict, p2p_exposed, p, m, v, chunk_tau=None):
    r"""The pipeline seconds of each layout simulated with each stage's own durations [s].

    .. math:: T = \text{makespan}\bigl(\text{schedule}(p, m, v, N);\ f_r + t^{\text{p2p}},
        b_r + t^{\text{p2p}}\bigr)

    the first, middle and last stages of ``tau`` plus the exposed p2p, or each chunk's own
    (``chunk_tau`` from :func:`chunk_times`); ``pipeline`` as given where p = 1.  Equal
    stages under 1F1B: :math:`(m + p - 1)(f + b)`.  1F1B without chunks (v = 1) takes the
    schedule's exact closed form (:func:`memsym.timing.one_f_one_b.one_f_one_b_makespan`,
    equal to the simulation), so any number of those layouts; at most 1,000 others.

    Parameters
    ----------
    st : Settings
        The schedule and the micro-batch group size.
    pipeline : array_like
        The closed form's pipeline seconds, kept where p = 1 [s].
    tau : dict
        Each stage's (forward, backward) seconds [s] (:func:`stage_times`).
    p2p_exposed : array_like
        Exposed PP p2p seconds per direction and stage-microbatch [s].
    p, m, v : array_like
        Pipeline-parallel size [GPUs], micro-batches [1] and model chunks per rank [1].
    chunk_tau : tuple, optional
        Each chunk's (forward, backward) seconds [s] (:func:`chunk_times`).

    Examples
    --------
    >>> # hand: (m + p - 1)(f + b) = (4 + 2 - 1)(1 + 2) = 15
    >>> tau = {"first": (1.0, 2.0), "middle": (1.0, 2.0), "last": (1.0, 2.0)}
    >>> p, m, v = np.array([2]), np.array([4]), np.array([1])    # 1F1B: (m + p - 1)(f + b)
    >>> float(simulated_pipeline(Settings(), np.array([0.0]), tau, 0.0, p, m, v)[0])
    15.0

    References
    ----------
    .. [narayanan] arXiv:2104.04473 §2.2.1.
    .. [megatron-schedules] forward_backward_pipelining_without_interleaving.
    """
    pipeline = np.array(pipeline, dtype=float)
    # 1F1B (v = 1) of a first, middle and last stage: its exact closed form, at numpy speed
    closed = np.zeros(p.shape, dtype=bool)
    if chunk_tau is not None and v.size == 1 and int(np.ravel(v)[0]) == 1:
        # a one-chunk custom layout whose middle ranks run alike: the same form, its stages
        # the ranks' own durations (the exposed p2p already in them), as its first/last spelling
        alike = alike_ranks(chunk_tau)
        if alike is not None:
            tau, p2p_exposed, chunk_tau = alike, 0.0, None
    if chunk_tau is None:
        pipeline = np.array(np.broadcast_to(
            exact_one_f_one_b(st, pipeline, tau, p2p_exposed, p, m, v), p.shape))
        closed = np.broadcast_to((v == 1) & (st.schedule != "gpipe"), p.shape)
    if np.count_nonzero(~closed & (p > 1)) > 1000:
        raise InvalidValueError("exact_schedule simulates each layout: at most 1,000")
    fwd = {r: np.broadcast_to(tau[r][0] + p2p_exposed, p.shape) for r in tau}
    bwd = {r: np.broadcast_to(tau[r][1] + p2p_exposed, p.shape) for r in tau}
    for idx in np.ndindex(p.shape):
        pp_ = int(p[idx])
        if pp_ == 1 or closed[idx]:
            continue
        if chunk_tau is not None:
            fw, bw = ([tuple(float(np.broadcast_to(d, p.shape)[idx]) for d in row) for row in side]
                      for side in chunk_tau)
        else:
            fw = [float(fwd["middle"][idx])] * pp_
            bw = [float(bwd["middle"][idx])] * pp_
            fw[0], bw[0] = float(fwd["first"][idx]), float(bwd["first"][idx])
            fw[-1], bw[-1] = float(fwd["last"][idx]), float(bwd["last"][idx])
        mm_, vv_ = int(m[idx]), int(v[idx])
        sim = simulate(pp_, mm_, vv_, microbatch_group(st, pp_, mm_, vv_), forward=fw,
                       backward=bw, gpipe=st.schedule == "gpipe")
        pipeline[idx] = sim.makespan
    return pipeline


def most_layers_per_rank(num_layers: int, p, first=0, last=0):
    r"""Decoder layers on the pipeline rank holding the most [1], vectorised.

    .. math:: \max\Big(f,\ l,\ \frac{L - f - l}{p - [f > 0] - [l > 0]}\Big)

    with the first / last stage sizes f, l (0: not given, the even split L/p).

    Parameters
    ----------
    num_layers : int
        Decoder layers L [1].
    p : int or array_like
        Pipeline-parallel size [GPUs].
    first, last : int or array_like
        Megatron's ``--decoder-first/last-pipeline-num-layers`` [1]; 0 when not given.

    Returns
    -------
    numpy.ndarray
        Layers on the most loaded rank [1].

    Examples
    --------
    >>> # hand: max(7, 7, (126 - 14) / 14) = 8; 80 / 4 = 20
    >>> float(most_layers_per_rank(126, 16, 7, 7)), float(most_layers_per_rank(80, 4))
    (8.0, 20.0)

    References
    ----------
    Megatron-LM megatron/core/transformer/transformer_block.py ``get_num_layers_to_build``
    (rev d98e8a64dd).
    """
    p, f_, l_ = as_array(p), as_array(first), as_array(last)
    mid = np.where((f_ == 0) & (l_ == 0), num_layers / p,
                   (num_layers - f_ - l_) / np.maximum(p - (f_ > 0) - (l_ > 0), 1))
    return np.maximum(np.maximum(f_, l_), mid)
