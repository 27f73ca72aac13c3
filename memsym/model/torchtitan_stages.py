"""torchtitan's pipeline split: how many decoder layers each rank and stage holds when
torchtitan is not told the split (``generate_llm_fqn_per_model_part``), and the stages per
rank its schedules take.  The Megatron split is :mod:`memsym.model.stages`."""

from __future__ import annotations

from ..errors import InvalidValueError
from ..text import shared_doc
from .architecture import pos_int

__all__ = ["torchtitan_rank_layers", "torchtitan_end_stages", "torchtitan_stages_per_rank",
           "torchtitan_layers_per_stage"]

_doc = shared_doc(torchtitan_params="""
    n_layers : int
        Decoder layers L [1].
    p : int
        Pipeline-parallel size [GPUs].
    """)


@_doc
def torchtitan_rank_layers(n_layers: int, p: int, stages_per_rank: int = 1,
                           input_weight: int = 1, output_weight: int = 1,
                           style: str = "loop") -> list:
    r"""Decoder layers on each pipeline rank as torchtitan splits a model it is not told how to.

    torchtitan (``generate_llm_fqn_per_model_part``) counts the embedding and the output as
    ``input_weight`` and ``output_weight`` layers (``pipeline_parallel_first/last_stage_less_
    layers``, default 1), splits the :math:`L + w_{in} + w_{out}` effective layers over the
    :math:`S = p\,v` stages as evenly as it can (the first :math:`(L + w_{in} + w_{out}) \bmod S`
    stages one more), and places stage :math:`i` on rank :math:`i \bmod p` (loop style) or,
    for the V schedules (ZBVZeroBubble, DualPipeV: two stages per rank), stages :math:`r` and
    :math:`2p - 1 - r` on rank :math:`r`:

    .. math:: n_r = \sum_{j<v} n^{\mathrm{stage}}_{r + j p}
              \qquad\text{or}\qquad n_r = n^{\mathrm{stage}}_r + n^{\mathrm{stage}}_{2p-1-r}

    Parameters
    ----------
    {torchtitan_params}
    stages_per_rank : int
        Stages per rank v [1]: 1 for single-stage schedules (1F1B, GPipe), 2 for the looped
        ones (Interleaved1F1B, ...) unless ``pipeline_parallel_layers_per_stage`` says otherwise.
    input_weight, output_weight : int
        Layers the embedding and the output count for [1]
        (``pipeline_parallel_first/last_stage_less_layers``).
    style : {"loop", "v"}
        Stage placement (``pipeline_module_split``'s ``_get_stage_indices``).

    Returns
    -------
    list of int
        Layers per rank, rank 0 first.

    Examples
    --------
    Llama-3 405B's 126 layers on 8 ranks: 128 effective layers, 16 per stage, the embedding and
    output taking one each; with 2 stages per rank, 8 per stage (7 + 8 on rank 0):

    >>> torchtitan_rank_layers(126, 8)
    [15, 16, 16, 16, 16, 16, 16, 15]
    >>> torchtitan_rank_layers(126, 8, 2)
    [15, 16, 16, 16, 16, 16, 16, 15]
    >>> torchtitan_rank_layers(126, 8, 2, style="v")    # rank 0: stages 0 and 15, 7 + 7
    [14, 16, 16, 16, 16, 16, 16, 16]

    References
    ----------
    torchtitan v0.2.2 ``torchtitan/distributed/pipeline_parallel.py``
    (``pipeline_llm``, ``generate_llm_fqn_per_model_part``, ``pipeline_module_split``).
    """
    n_layers, p = pos_int(n_layers, "num_layers"), pos_int(p, "p")
    v = pos_int(stages_per_rank, "stages per rank")
    if style not in ("loop", "v") or (style == "v" and v != 2):
        raise InvalidValueError(f"torchtitan places stages loop-style, or v-style with 2 per "
                                f"rank; got style {style!r} with {v}")
    for what, w in (("input_weight", input_weight), ("output_weight", output_weight)):
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w <= n_layers:
            raise InvalidValueError(f"{what} must be a whole number in 0..{n_layers}, got {w!r}")
    total = p * v
    if total == 1:
        return [n_layers]
    effective = n_layers + input_weight + output_weight
    per, extra = divmod(effective, total)
    if per == 0 or input_weight > per or output_weight > per:
        raise InvalidValueError(f"torchtitan cannot split {n_layers} layers (+{input_weight} "
                                f"+{output_weight} for embedding and output) over {total} stages")
    stage = [per + (i < extra) for i in range(total)]
    stage[0] -= input_weight
    stage[-1] -= output_weight
    # the last stage takes only the layers left (generate_llm_fqn_per_model_part stops at L)
    stage[-1] = n_layers - sum(stage[:-1]) if sum(stage[:-1]) <= n_layers else 0
    if sum(stage[:-1]) > n_layers or min(stage) < 0:
        raise InvalidValueError(f"torchtitan's split of {n_layers} layers over {total} stages "
                                "leaves a stage without layers")
    if style == "v":
        return [stage[r] + stage[2 * p - 1 - r] for r in range(p)]
    return [sum(stage[r + j * p] for j in range(v)) for r in range(p)]


@_doc
def torchtitan_stages_per_rank(n_layers: int, p: int, layers_per_stage: int | None = None,
                               multi_stage: bool = False, input_weight: int = 1,
                               output_weight: int = 1) -> int:
    r"""Stages per pipeline rank v as torchtitan derives them, with its refusals.

    Without ``pipeline_parallel_layers_per_stage`` n: 1 for the single-stage schedules (1F1B,
    GPipe), 2 for the multi-stage ones.  With it:

    .. math:: S = \left\lceil \frac{L + w_{in} + w_{out}}{n} \right\rceil, \qquad
              v = S / p

    refused unless p divides S, v = 1 for a single-stage schedule and v >= 2 for a
    multi-stage one.

    Parameters
    ----------
    {torchtitan_params}
    layers_per_stage : int, optional
        ``parallelism.pipeline_parallel_layers_per_stage`` n [layers].
    multi_stage : bool
        A multi-stage schedule (Interleaved1F1B, LoopedBFS, the zero-bubble ones).
    input_weight, output_weight : int
        ``pipeline_parallel_first/last_stage_less_layers`` [layers].

    Returns
    -------
    int
        Stages per rank v [1].

    Examples
    --------
    Llama-3 405B (126 layers + embedding + output = 128) on 16 ranks, 2 layers per stage: 64
    stages, 4 per rank (Meta's 7 + 14 x 8 + 7 split):

    >>> torchtitan_stages_per_rank(126, 16, 2, multi_stage=True)
    4
    >>> torchtitan_stages_per_rank(126, 16, multi_stage=True)
    2

    References
    ----------
    torchtitan v0.2.2 ``torchtitan/distributed/pipeline_parallel.py``, ``pipeline_llm``.
    """
    n_layers, p = pos_int(n_layers, "num_layers"), pos_int(p, "p")
    if layers_per_stage is None:
        return 2 if multi_stage else 1
    n = pos_int(layers_per_stage, "pipeline_parallel_layers_per_stage")
    stages = -(-(n_layers + input_weight + output_weight) // n)
    if stages % p:
        raise InvalidValueError(f"torchtitan: {stages} stages ({n_layers} layers + embedding and "
                                f"output weights, {n} per stage) must be divisible by the "
                                f"pipeline size {p}")
    v = stages // p
    if not multi_stage and v != 1:
        raise InvalidValueError(f"torchtitan: a single-stage schedule needs 1 stage per rank, "
                                f"got {v} ({n} layers per stage)")
    if multi_stage and v < 2:
        raise InvalidValueError(f"torchtitan: a multi-stage schedule needs at least 2 stages per "
                                f"rank, got {v} ({n} layers per stage)")
    return v


@_doc
def torchtitan_layers_per_stage(n_layers: int, p: int, stages_per_rank: int,
                                input_weight: int = 1, output_weight: int = 1):
    r"""The smallest ``pipeline_parallel_layers_per_stage`` that gives ``stages_per_rank``
    stages per rank (:func:`torchtitan_stages_per_rank`), or None when none does.

    .. math:: \lceil E / n \rceil = p v \iff \frac{E}{p v} \le n < \frac{E}{p v - 1},
              \qquad E = L + w_{in} + w_{out}

    Parameters
    ----------
    {torchtitan_params}
    stages_per_rank : int
        Stages per rank v [1].
    input_weight, output_weight : int
        ``pipeline_parallel_first/last_stage_less_layers`` [layers].

    Returns
    -------
    int or None
        Layers per stage n [layers].

    Examples
    --------
    >>> torchtitan_layers_per_stage(126, 16, 4), torchtitan_layers_per_stage(126, 16, 3)
    (2, None)
    """
    effective = n_layers + input_weight + output_weight
    want = p * stages_per_rank
    # ceil(E / n) = S  <=>  E / S <= n < E / (S - 1): the smallest candidate is ceil(E / S)
    n = -(-effective // want)
    return n if n >= 1 and -(-effective // n) == want else None


@_doc
def torchtitan_end_stages(n_layers: int, p: int, stages_per_rank: int = 1,
                          input_weight: int = 1, output_weight: int = 1,
                          style: str = "loop") -> tuple:
    """torchtitan's split (:func:`torchtitan_rank_layers`) as memsym's stage sizes.

    Returns ``(first, last, ranks)``: the first and last ranks' layers (None, None when every
    rank holds the same) and the split itself; a split whose middle ranks differ is refused,
    as memsym's stages between the ends hold equal layers.

    Parameters
    ----------
    {torchtitan_params}
    stages_per_rank, input_weight, output_weight, style
        As in :func:`torchtitan_rank_layers`.

    Examples
    --------
    >>> torchtitan_end_stages(126, 8)[:2]
    (15, 15)
    >>> torchtitan_end_stages(32, 2)[:2]       # 34 effective layers: 16 and 16
    (None, None)
    """
    ranks = torchtitan_rank_layers(n_layers, p, stages_per_rank, input_weight, output_weight,
                                   style)
    if len(set(ranks[1:-1])) > 1:
        raise InvalidValueError(f"torchtitan splits the {n_layers} layers over p={p} ranks as "
                                f"{ranks}: memsym models equal stages between the first and "
                                "last; give first_stage_layers/last_stage_layers (torchtitan: "
                                "module_fqns_per_model_part)")
    if len(set(ranks)) == 1:
        return None, None, ranks
    return ranks[0], ranks[-1], ranks
