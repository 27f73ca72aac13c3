"""The pure state-space ``config.json`` families: Mamba (``mamba``), Falcon-Mamba
(``falcon_mamba``) and Mamba-2 (``mamba2``).

Every layer is one RMSNorm and one Mamba mixer, with no attention and no MLP: the readers return
:class:`~memsym.model.architecture.Architecture` keyword arguments whose ``layer_mixers`` are all
``"mamba"`` and whose ``ffn_layers`` are all 0, so that the mixers are counted by
:func:`memsym.model.counts.mamba_parts` (Mamba-1: Gu & Dao 2023 Algorithm 2; Mamba-2: Dao & Gu
2024 section 7), read with the defaults of transformers' config class and the modules its
``modeling_<type>.py`` builds (transformers 5.25.0), so that the parameter count equals
``sum(p.numel())`` of ``AutoModelForCausalLM.from_config`` on the meta device
(``tests/test_hf_more_types.py``).  A Mamba-2 model's memory estimate takes the Mamba-2
activation term of :mod:`memsym.terms.mamba2`; a Mamba-1 model's is refused as Jamba's is.
:func:`memsym.model.hf_config.from_hf_config` dispatches here.

REF: transformers 5.25.0 ``models/mamba/modeling_mamba.py`` (MambaMixer, MambaBlock,
MambaModel), ``models/falcon_mamba/modeling_falcon_mamba.py`` (FalconMambaMixer: the same
modules plus weightless RMSNorms on dt, B and C), ``models/mamba2/modeling_mamba2.py``
(Mamba2Mixer, Mamba2RMSNormGated), and their ``configuration_<type>.py``.
"""

from __future__ import annotations

from .hf_fields import ConfigFields
from .hf_hybrid import mamba2_fields

__all__ = ["SSM_READERS", "SSM_TYPES"]


def _ssm_core(c: ConfigFields) -> dict:
    """One RMSNorm and one Mamba mixer a layer; no attention, no MLP, no position table."""
    n_layers = c.int("num_hidden_layers")
    # num_attention_heads is a required Architecture field; no attention layer reads it
    return dict(num_layers=n_layers, hidden_size=c.int("hidden_size"), num_attention_heads=1,
                vocab_size=c.int("vocab_size"), position_embedding_type="none",
                normalization="RMSNorm", add_bias_linear=False, attention_bias=False,
                norms_per_layer=1, layer_mixers=("mamba",) * n_layers,
                ffn_layers=(0,) * n_layers)


def _read_mamba(c: ConfigFields, notes: list) -> dict:
    # MambaBlock: norm (MambaRMSNorm h) and MambaMixer: in_proj h -> 2 d_inner (bias=use_bias),
    # conv1d over d_inner (bias=use_conv_bias), x_proj d_inner -> dt_rank + 2N (no bias),
    # dt_proj dt_rank -> d_inner with bias, A_log d_inner x N, D d_inner, out_proj d_inner -> h
    # (bias=use_bias).  MambaConfig.__post_init__ sets intermediate_size = int(expand * h), and
    # a file's own intermediate_size (not a config field) is set over it when the file is
    # loaded: the mixer takes the file's; time_step_rank "auto" = ceil(h / 16).
    # FalconMambaMixer adds dt, B and C RMSNorms without weights: no parameter.
    kw = _ssm_core(c)
    hs = kw["hidden_size"]
    rank = c.data.get("time_step_rank", "auto")
    rank = -(-hs // 16) if rank == "auto" else c.int("time_step_rank")
    bias = c.bool("use_bias", False)
    d_inner = c.int("intermediate_size", c.int("expand", 2) * hs, null=None)
    if d_inner is None:
        d_inner = c.int("expand", 2) * hs
    kw.update(mamba_version=1, mamba_inner_size=d_inner,
              mamba_state_dim=c.int("state_size", 16), mamba_conv_kernel=c.int("conv_kernel", 4),
              mamba_dt_rank=rank, mamba_conv_bias=c.bool("use_conv_bias", True),
              mamba_in_proj_bias=bias, mamba_out_proj_bias=bias, mamba_gated_norm=False,
              mamba_inner_norms=False)
    return kw


def _read_mamba2(c: ConfigFields, notes: list) -> dict:
    # Mamba2Block: norm (Mamba2RMSNorm h) and Mamba2Mixer: d_inner = int(expand * h),
    # in_proj h -> 2 d_inner + 2 G N + H (bias=use_bias), conv1d over d_inner + 2 G N
    # (bias=use_conv_bias), dt_bias, A_log, D of H, Mamba2RMSNormGated(d_inner), out_proj
    # d_inner -> h (bias=use_bias).  Mamba2Config refuses expand * h != num_heads * head_dim.
    kw = _ssm_core(c)
    hs = kw["hidden_size"]
    d_inner = c.int("expand", 2) * hs
    heads, head_dim = c.int("num_heads", 128), c.int("head_dim", 64)
    if d_inner != heads * head_dim:
        raise c._bad(f"expand * hidden_size ({d_inner}) must equal num_heads * head_dim "
                     f"({heads * head_dim}) (Mamba2Config refuses it)")
    bias = c.bool("use_bias", False)
    kw.update(mamba_in_proj_bias=bias, mamba_out_proj_bias=bias, mamba_gated_norm=True,
              **mamba2_fields(c, d_inner, heads="num_heads", groups="n_groups",
                              state="state_size", conv="conv_kernel",
                              conv_bias="use_conv_bias", defaults=(128, 8, 128, 4)))
    return kw


# model_type -> (reader, the config class's tie_word_embeddings default, the dropout
# probabilities its causal LM applies: none).  REF: transformers 5.25.0
# configuration_{mamba,falcon_mamba,mamba2}.py (tie_word_embeddings True, True, False).
SSM_READERS = {
    "mamba": (_read_mamba, True, {}),
    "falcon_mamba": (_read_mamba, True, {}),
    "mamba2": (_read_mamba2, False, {}),
}
SSM_TYPES = tuple(sorted(SSM_READERS))
"""The pure state-space ``model_type`` values read here."""
