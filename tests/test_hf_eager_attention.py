"""transformers' model classes that run eager attention alone (BLOOM, MPT, XGLM): memsym's
default and refusal under transformers' model code, and the s x s scores their eager
attention keeps, measured (saved tensors of transformers' own model on the CPU) against
memsym's eager ``scores`` plus :func:`memsym.terms.hf_eager_attention.hf_eager_softmax_fp32`."""

from __future__ import annotations

import json

import pytest
import sympy as sp

from memsym.symbols import a, b, c, s, t
from memsym.terms.activations import layer_activations
from memsym.terms.hf_eager_attention import EAGER_ONLY, hf_eager_softmax_fp32

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

#: memsym's readable types without attention layers (state-space models)
NO_ATTENTION = ("mamba", "mamba2", "falcon_mamba")


def test_every_readable_type_without_sdpa_nor_flash_is_known():
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_MAPPING_NAMES)
    from memsym.model.hf_config import HF_MODEL_TYPES
    lacking = set()
    for mtype in HF_MODEL_TYPES:
        name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mtype) or MODEL_MAPPING_NAMES.get(mtype)
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if cls is not None and not cls._supports_sdpa and not cls._supports_flash_attn:
            lacking.add(mtype)
    assert lacking - set(NO_ATTENTION) == set(EAGER_ONLY)


def _estimate(capsys, tmp_path, mtype, *extra):
    from memsym.cli import main
    fields = {"bloom": {"hidden_size": 64, "n_layer": 2, "n_head": 4},
              "mpt": {"d_model": 64, "n_layers": 2, "n_heads": 4}}[mtype]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": mtype, "vocab_size": 128, **fields}))
    rc = main(["estimate", str(path), "--framework", "deepspeed", "--seq-length", "16",
               "--global-batch-size", "2", "--precision", "bf16", "--json", *extra])
    return rc, capsys.readouterr()


@pytest.mark.parametrize("mtype", ["bloom", "mpt"])
def test_transformers_code_runs_them_eager_and_refuses_flash(capsys, tmp_path, mtype):
    rc, out = _estimate(capsys, tmp_path, mtype)
    assert rc == 0 and json.loads(out.out)["training"]["flash_attention"] is False
    rc, out = _estimate(capsys, tmp_path, mtype, "--use-flash-attn")
    err = out.err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "_supports_sdpa" in err


def _saved(kind: str, dtype, seq: int, layers: int) -> int:
    """Bytes of the distinct storages autograd saves in the training forward of transformers'
    own model (eager attention, its class's only one)."""
    torch.manual_seed(0)
    cfg = transformers.BloomConfig(hidden_size=32, n_head=4, n_layer=layers, vocab_size=64) \
        if kind == "bloom" else transformers.MptConfig(d_model=32, n_heads=4, n_layers=layers,
                                                       vocab_size=64)
    cls = transformers.BloomForCausalLM if kind == "bloom" else transformers.MptForCausalLM
    model = cls._from_config(cfg, dtype=dtype)
    assert model.config._attn_implementation == "eager"
    model.train()
    seen = {}

    def pack(x):
        seen[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        return x
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        model(torch.randint(0, 64, (2, seq))).logits
    return sum(seen.values())


@pytest.mark.parametrize("kind", ["bloom", "mpt"])
@pytest.mark.parametrize("dtype, width", [("bfloat16", 2), ("float32", 4)])
def test_one_layers_s_squared_bytes_are_memsyms_eager_scores_plus_the_fp32_softmax(
        kind, dtype, width):
    # one layer's bytes (two-layer model less one-layer) at s = 8, 16, 24, b = 2, a = 4: the
    # second difference is 2 * 64 * (its s^2 coefficient)
    per_layer = [_saved(kind, getattr(torch, dtype), seq, 2) - _saved(kind, getattr(torch, dtype),
                                                                        seq, 1)
                 for seq in (8, 16, 24)]
    measured = sp.Rational(per_layer[2] - 2 * per_layer[1] + per_layer[0], 2 * 64)
    ours = layer_activations(gated=False, flash=False, dropout=False, norm="layernorm",
                             width=width).expr + hf_eager_softmax_fp32(width == 2).expr
    coeff = sp.Poly(sp.expand(ours.xreplace({t: 1, c: 1})), s).coeff_monomial(s ** 2)
    assert measured == coeff.xreplace({a: 4, b: 2}) == (6 if width == 2 else 4) * 4 * 2
