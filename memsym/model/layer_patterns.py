"""Which decoder layers are of which kind: the MoE pattern, the hybrid models' mixers and MLP
presence, read off a resolved :class:`~memsym.model.architecture.Architecture`."""

from __future__ import annotations

from .architecture import Architecture, lenient

__all__ = ["mixer_counts", "mixer_layer_count", "is_hybrid", "moe_layer_pattern", "layer_kinds",
           "moe_layer_count"]


def mixer_counts(arch: Architecture) -> tuple:
    """(layers with attention, layers with Mamba, layers with an MLP or MoE block).

    A ``"parallel"`` layer counts in both of the first two.

    Examples
    --------
    >>> mixer_counts(Architecture(num_layers=3, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("mamba", "attention", "none"),
    ...     ffn_layers=(0, 0, 1), mamba_inner_size=16, mamba_state_dim=4, mamba_num_heads=2))
    (1, 1, 1)
    """
    x = lenient(arch)
    n_layers = x.num_layers
    if x.layer_mixers is None:
        n_att, n_ssm = n_layers, 0
    else:
        n_att = sum(m in ("attention", "parallel") for m in x.layer_mixers)
        n_ssm = sum(m in ("mamba", "parallel", "shared") for m in x.layer_mixers)
    n_ffn = n_layers if x.ffn_layers is None else sum(x.ffn_layers)
    return n_att, n_ssm, n_ffn


def mixer_layer_count(arch: Architecture, mixer: str) -> int:
    """The number of layers whose ``layer_mixers`` entry is ``mixer`` (``"gdn"``, ``"conv"``).

    Examples
    --------
    >>> mixer_layer_count(Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...     position_embedding_type="rope", layer_mixers=("gdn", "attention"), gdn_key_heads=2,
    ...     gdn_value_heads=2, gdn_key_head_dim=4, gdn_value_head_dim=4), "gdn")
    1
    """
    mixers = lenient(arch).layer_mixers
    return 0 if mixers is None else sum(m == mixer for m in mixers)


def is_hybrid(arch: Architecture) -> bool:
    """Whether the layers differ in their mixers or MLP presence (``layer_mixers`` or
    ``ffn_layers`` given)."""
    return arch.layer_mixers is not None or arch.ffn_layers is not None


def moe_layer_pattern(arch: Architecture) -> tuple:
    """Which decoder layers are MoE layers: a tuple of L booleans (all False for a dense model).

    ``moe_layer_freq`` = q (int): layer i (0-based) is MoE iff i mod q = 0 (Megatron-LM);
    a tuple gives the pattern itself (DeepSeek-V3: three dense layers, then 58 MoE layers).

    Examples
    --------
    >>> from memsym.model import preset
    >>> moe_layer_pattern(preset("mixtral-8x7b"))[:3]
    (True, True, True)
    >>> sum(moe_layer_pattern(preset("deepseek-v3")))
    58
    """
    return _pattern_info(lenient(arch))[0]


def layer_kinds(arch: Architecture) -> frozenset:
    """The MLP kinds a model's layers have: ``{False}`` (dense), ``{True}`` (every layer MoE)
    or both.

    A hybrid Mamba / attention model (``layer_mixers`` or ``ffn_layers`` given) counts only its
    layers with an MLP or MoE block (none: the empty set); its layers' full kinds, mixers
    included, are :func:`memsym.model.stages.layer_kind_pattern`.

    Examples
    --------
    >>> from memsym.model import preset
    >>> sorted(layer_kinds(preset("deepseek-v3"))), sorted(layer_kinds(preset("llama2-7b")))
    ([False, True], [False])
    """
    x = lenient(arch)
    if is_hybrid(x):
        ffn = x.ffn_layers or (1,) * x.num_layers
        return frozenset(kind for kind, has in zip(_pattern_info(x)[0], ffn) if has)
    return _pattern_info(x)[1]


def moe_layer_count(arch: Architecture) -> int:
    """The number of MoE decoder layers, ``sum(moe_layer_pattern(arch))``.

    Examples
    --------
    >>> from memsym.model import preset
    >>> moe_layer_count(preset("deepseek-v3")), moe_layer_count(preset("llama2-7b"))
    (58, 0)
    """
    return _pattern_info(lenient(arch))[2]


# (is_moe, layers, freq or id of the freq tuple) -> (freq, pattern, kinds, count).  The pattern
# is asked for several times per pipeline stage (parameters, rules, activations): rebuilt each
# time, a job of p stages was O(p L) (1000 stages of 10^6 layers: 51 s).  Holding ``freq``
# keeps the id of a tuple from being reused while its entry lives.
_PATTERNS: dict = {}
_MAX_PATTERNS = 16


def _pattern_info(x) -> tuple:
    freq = x.moe_layer_freq
    tuple_freq = isinstance(freq, tuple)
    key = (bool(x.is_moe), x.num_layers, id(freq) if tuple_freq else freq)
    hit = _PATTERNS.get(key)
    if hit is not None and (hit[0] is freq if tuple_freq else hit[0] == freq):
        return hit[1:]
    if not x.is_moe:
        pattern = (False,) * x.num_layers
    elif tuple_freq:
        pattern = tuple(bool(v) for v in freq)
    else:
        pattern = tuple(i % freq == 0 for i in range(x.num_layers))
    info = (pattern, frozenset(pattern), sum(pattern))
    if len(_PATTERNS) >= _MAX_PATTERNS:
        _PATTERNS.clear()
    _PATTERNS[key] = (freq, *info)
    return info
