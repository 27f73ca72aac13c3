r"""Megatron-Core's custom pipeline layout: which layers each pipeline stage builds.

``--pipeline-model-parallel-layout`` names, stage by stage, the layers each virtual pipeline
stage holds: ``E`` the embedding, ``t`` a decoder ("transformer") layer, ``m`` an MTP layer,
``L`` the loss (output layer); ``|`` ends a stage, ``x*n`` and ``(...)*n`` repeat, commas
are cosmetic.  With p pipeline ranks and S stages, v = S / p, and stage
:math:`j p + r` is chunk j of rank r (``PipelineParallelLayerLayout.__init__``).  DeepSeek-V3's
Megatron-Bridge recipe on 16 ranks reads ``Et*4|(tttt|)*14,tmL``.

``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``
count the embedding / loss as one layer of the split: :math:`(L + 1 + 1)/p` per rank and
:math:`/v` per chunk, the first chunk of rank 0 and the last chunk of rank p−1 building one
decoder layer fewer (``transformer_block.py``, ``get_num_layers_to_build``);
:meth:`PipelineLayout.from_account_flags` writes that split as a layout.

References
----------
.. [megatron-lm] megatron/core/transformer/pipeline_parallel_layer_layout.py
   (``PipelineParallelLayerLayout``: ``parse_str_to_list``, ``__init__``,
   ``validate_layer_layout``, ``get_layer_offset``); transformer_config.py ``__post_init__``
   (the layout excludes the uneven and account-for arguments; the account-for divisibility
   rules); transformer_block.py ``get_num_layers_to_build`` (rev d98e8a6).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..errors import DivisibilityError, InvalidValueError
from ..limits import LIMITS

__all__ = ["PipelineLayout", "parse_layout_string", "LAYER_CHARS", "MAX_LAYOUT_CHARS"]

#: The layout string's layer characters (``parse_str_to_list``'s ``char2layer_type``).
LAYER_CHARS = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}
#: Longest layout accepted, as given and once its repeats are unrolled [characters]
#: (:data:`memsym.limits.LIMITS` ``"layout"``): 10^6 layers (the layer limit) unrolled fit.
MAX_LAYOUT_CHARS = LIMITS["layout"].maximum

_REPEATS = (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)")   # Megatron's two patterns, in its order


def _unroll(text: str, pattern: str) -> str:
    # re.sub with Megatron's patterns, refusing an expansion past the bound before building it
    total = len(text)
    for match in re.finditer(pattern, text):
        if len(match.group(2)) > 7:
            raise InvalidValueError(f"pipeline layout: repeat count {match.group(2)[:12]}... is "
                                    "larger than 10^7")
        total += len(match.group(1)) * int(match.group(2)) - len(match.group(0))
        if total > MAX_LAYOUT_CHARS:
            raise InvalidValueError(f"pipeline layout unrolls to more than {MAX_LAYOUT_CHARS} "
                                    "characters")
    return re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text)


def parse_layout_string(text: str) -> list:
    """A layout string as Megatron parses it: one list of layer kinds per stage.

    Parameters
    ----------
    text : str
        ``--pipeline-model-parallel-layout`` (``E``, ``t``, ``m``, ``L``, ``|``, ``*n``,
        ``(...)*n``, commas).

    Returns
    -------
    list of list of str
        Per stage, its layers (``"embedding"``, ``"decoder"``, ``"mtp"``, ``"loss"``).

    Examples
    --------
    Megatron's docstring example:

    >>> stages = parse_layout_string("Ettt|(tt|)*29,m|L")
    >>> len(stages), stages[0], stages[1], stages[-2:]
    (32, ['embedding', 'decoder', 'decoder', 'decoder'], ['decoder', 'decoder'], [['mtp'], ['loss']])
    """
    if not isinstance(text, str):
        raise InvalidValueError("a pipeline layout is a string such as 'Et*4|(tttt|)*14,tmL'")
    if len(text) > MAX_LAYOUT_CHARS:
        raise InvalidValueError(f"pipeline layout longer than {MAX_LAYOUT_CHARS} characters")
    text = text.replace(",", "")
    for pattern in _REPEATS:
        text = _unroll(text, pattern)
    stages = []
    for stage in text.split("|"):
        bad = next((ch for ch in stage if ch not in LAYER_CHARS), None)
        if bad is not None:
            raise InvalidValueError(f"pipeline layout: invalid layer character {bad!r} (known: "
                                    f"{', '.join(LAYER_CHARS)}, with | * ( ) and commas)")
        stages.append([LAYER_CHARS[ch] for ch in stage])
    return stages


@dataclass(frozen=True)
class PipelineLayout:
    """Which layers each pipeline rank's model chunks build.

    Attributes
    ----------
    p : int
        Pipeline-parallel size [GPUs].
    v : int
        Model chunks per rank [1] (1: not interleaved).
    stages : tuple
        ``stages[r][j]``: the layer kinds of chunk j of rank r, in order.
    text : str or None
        The layout as given (shown in notes).

    Examples
    --------
    >>> lay = PipelineLayout.from_spec("Et*4|(tttt|)*14,tmL", 16)
    >>> lay.v, lay.rank_layers(0), lay.rank_layers(7), lay.rank_layers(15)
    (1, 4, 4, 1)
    >>> PipelineLayout.from_spec("Et*4|(tttt|)*14,tmL", 8).chunk_layers(7)   # v = 2
    (4, 1)
    """

    p: int
    v: int
    stages: tuple
    text: str | None = None

    @classmethod
    def from_spec(cls, spec, p: int) -> "PipelineLayout":
        """From a layout string or a list of per-stage lists (Megatron-Bridge recipes write
        lists of ``"embedding"`` / ``"decoder"`` / ``"mtp"`` / ``"loss"``)."""
        if isinstance(spec, PipelineLayout):
            return spec
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise InvalidValueError(f"pipeline-parallel size must be a whole number >= 1, got {p!r}")
        text = spec if isinstance(spec, str) else None
        flat = parse_layout_string(spec) if text is not None else _from_lists(spec)
        if len(flat) % p:
            raise DivisibilityError(f"the pipeline layout's {len(flat)} stages must be divisible "
                                    f"by the pipeline-parallel size p={p}")
        v = len(flat) // p
        stages = tuple(tuple(tuple(flat[j * p + r]) for j in range(v)) for r in range(p))
        return cls(p, v, stages, text)

    @classmethod
    def from_account_flags(cls, num_layers: int, p: int, v: int | None = None, *,
                           embedding: bool = False, loss: bool = False) -> "PipelineLayout":
        r"""Megatron's ``--account-for-embedding/loss-in-pipeline-split`` as a layout.

        .. math:: k = \frac{L + [\text{embedding}] + [\text{loss}]}{p\,v}

        decoder layers per chunk, one fewer in rank 0's first chunk (embedding) and in rank
        p−1's last (loss); refused, as ``TransformerConfig`` refuses it, unless p (and v)
        divide.

        Examples
        --------
        Llama 3 405B on 16 ranks, v = 4 (the paper's 7 + 14 x 8 + 7 with interleaving):

        >>> lay = PipelineLayout.from_account_flags(126, 16, 4, embedding=True, loss=True)
        >>> lay.chunk_layers(0), lay.chunk_layers(1), lay.chunk_layers(15)
        ((1, 2, 2, 2), (2, 2, 2, 2), (2, 2, 2, 1))
        """
        vv = v or 1
        total = num_layers + int(bool(embedding)) + int(bool(loss))
        if total % p:
            raise DivisibilityError(f"num_layers {num_layers} with the embedding/loss counted "
                                    f"({total}) must be divisible by p={p} (Megatron's "
                                    "account_for_embedding/loss_in_pipeline_split)")
        if (total // p) % vv:
            raise DivisibilityError(f"the {total // p} layers per pipeline rank (embedding/loss "
                                    f"counted) must be divisible by v={vv}")
        k = total // (p * vv)
        stages = []
        for r in range(p):
            row = []
            for j in range(vv):
                n = k - (embedding and r == 0 and j == 0) - (loss and r == p - 1 and j == vv - 1)
                if n < 0:
                    raise InvalidValueError("not enough layers for the embedding/loss stage "
                                            "(Megatron's get_num_layers_to_build)")
                kinds = (["embedding"] if r == 0 and j == 0 else []) + ["decoder"] * n \
                    + (["loss"] if r == p - 1 and j == vv - 1 else [])
                row.append(tuple(kinds))
            stages.append(tuple(row))
        return cls(p, vv, tuple(stages), None)

    def validate(self, num_layers: int, mtp_layers: int = 0) -> None:
        """Megatron's ``validate_layer_layout``; an MTP stage apart from the loss's rank
        (``mtp_standalone``) is refused as not modelled.

        Raises
        ------
        InvalidValueError
            With Megatron's reason.
        """
        flat = [kind for j in range(self.v) for r in range(self.p) for kind in self.stages[r][j]]
        if not flat or flat[0] != "embedding":
            raise InvalidValueError("pipeline layout: the first layer must be the embedding (E)")
        if flat[-1] != "loss":
            raise InvalidValueError("pipeline layout: the last layer must be the loss (L)")
        if flat.count("embedding") != 1 or flat.count("loss") != 1:
            raise InvalidValueError("pipeline layout: give the embedding (E) and the loss (L) "
                                    "exactly once")
        if flat.count("decoder") != num_layers:
            raise InvalidValueError(f"pipeline layout: {flat.count('decoder')} decoder layers "
                                    f"(t), the model has num_layers={num_layers}")
        if flat.count("mtp") != (mtp_layers or 0):
            raise InvalidValueError(f"pipeline layout: {flat.count('mtp')} MTP layers (m), the "
                                    f"model has {mtp_layers or 0}")
        if "mtp" in flat and "decoder" in flat[flat.index("mtp"):]:
            raise InvalidValueError("pipeline layout: decoder layers must come before the MTP "
                                    "layers")
        for r in range(self.p):
            if any("mtp" in self.stages[r][j] for j in range(self.v - 1)):
                raise InvalidValueError("pipeline layout: MTP must be in the last virtual stage "
                                        "of its rank")
        if any("mtp" in self.stages[r][-1] for r in range(self.p - 1)):
            raise InvalidValueError("pipeline layout: an MTP stage apart from the loss's rank "
                                    "(Megatron's mtp_standalone) is not modelled")

    def chunk_layers(self, rank: int) -> tuple:
        """Decoder layers of each of ``rank``'s chunks [layers]."""
        return tuple(chunk.count("decoder") for chunk in self.stages[rank])

    def chunk_timed_layers(self, rank: int) -> tuple:
        """Decoder and MTP layers of each of ``rank``'s chunks [layers]: what the step time
        runs there, an MTP layer as one decoder layer (Megatron-LM's
        ``MultiTokenPredictionLayer`` holds one ``TransformerLayer`` of the decoder's spec,
        beside two norms and its ``eh_proj``; multi_token_prediction.py, rev d98e8a6).

        Examples
        --------
        >>> lay = PipelineLayout.from_spec("Et*4|(tttt|)*14,tmL", 16)
        >>> lay.chunk_layers(15), lay.chunk_timed_layers(15), lay.chunk_timed_layers(0)
        ((1,), (2,), (4,))
        """
        return tuple(chunk.count("decoder") + chunk.count("mtp") for chunk in self.stages[rank])

    def without_mtp(self) -> "PipelineLayout":
        """The layout with its MTP layers (m) dropped and every stage's decoder layers kept:
        what Megatron-Bridge's DeepSeek-V3 builder gives at ``mtp_num_layers = 0`` (its last
        stage ``["mtp"] * mtp_layers + ["loss"]`` becomes ``["loss"]``;
        recipes/deepseek/h100/deepseek_v3.py ``_get_deepseek_v3_pipeline_layout`` at
        Megatron-Bridge 067f987df0).

        Examples
        --------
        >>> lay = PipelineLayout.from_spec("Et*4|(tttt|)*14,tmL", 16).without_mtp()
        >>> lay.chunk_timed_layers(15), lay.chunk_layers(15), lay.text
        ((1,), (1,), 'Et*4|(tttt|)*14,tL')
        """
        stages = tuple(tuple(tuple(k for k in chunk if k != "mtp") for chunk in row)
                       for row in self.stages)
        # "m" is the MTP layer's only character in Megatron's layout string
        text = None if self.text is None else self.text.replace("m", "")
        return PipelineLayout(self.p, self.v, stages, text)

    def rank_layers(self, rank: int) -> int:
        """Decoder layers on ``rank`` [layers]."""
        return sum(self.chunk_layers(rank))

    @functools.cached_property
    def _offsets(self) -> tuple:
        # Megatron's get_layer_offset for every (rank, chunk) at once: the decoder layers of
        # the stages before, in layer order (chunk-major, rank-minor), one pass
        out = [[0] * self.v for _ in range(self.p)]
        total = 0
        for j in range(self.v):
            for r in range(self.p):
                out[r][j] = total
                total += self.stages[r][j].count("decoder")
        return tuple(tuple(row) for row in out)

    def layer_ids(self, rank: int) -> tuple:
        """0-based decoder-layer indices of each of ``rank``'s chunks (Megatron's
        ``get_layer_offset``: all of chunk j's layers on ranks before r, after every rank's
        earlier chunks)."""
        return tuple(tuple(range(start, start + self.stages[rank][j].count("decoder")))
                     for j, start in enumerate(self._offsets[rank]))

    def describe(self) -> str:
        """The layout in one line: decoder layers per rank (chunks joined by +), equal
        neighbouring ranks counted once.

        Examples
        --------
        >>> PipelineLayout.from_spec("Et*4|(tttt|)*14,tmL", 16).describe()
        '4 x15, 1'
        """
        runs = []
        for r in range(self.p):
            text = "+".join(str(n) for n in self.chunk_layers(r))
            if runs and runs[-1][0] == text:
                runs[-1][1] += 1
            else:
                runs.append([text, 1])
        return ", ".join(text if n == 1 else f"{text} x{n}" for text, n in runs)


def _from_lists(spec) -> list:
    if isinstance(spec, (str, bytes)) or not hasattr(spec, "__iter__"):
        raise InvalidValueError("a pipeline layout is a string or a list of per-stage lists")
    flat, count = [], 0

    def one_more(count):
        # a layer or a stage mark counted against the layout's bound, as its text would be
        if count + 1 > MAX_LAYOUT_CHARS:
            raise InvalidValueError(f"pipeline layout with more than {MAX_LAYOUT_CHARS} "
                                    "layers and stages")
        return count + 1

    for stage in spec:
        if isinstance(stage, (str, bytes)) or not hasattr(stage, "__iter__"):
            raise InvalidValueError("pipeline layout: each stage is a list of layer names")
        names = []
        for name in stage:
            count = one_more(count)
            key = name.strip().lower() if isinstance(name, str) else None
            if key not in LAYER_CHARS.values():
                raise InvalidValueError(f"pipeline layout: unknown layer {str(name)!r:.40} "
                                        f"(known: {', '.join(LAYER_CHARS.values())})")
            names.append(key)
        flat.append(names)
        count = one_more(count)
    return flat
