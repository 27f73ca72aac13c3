"""Where Accelerate's FSDP2 puts each model's final norm (issue: OPT's stays in the root).

Accelerate 1.16.0's ``_find_final_norm`` (utils/fsdp_utils.py:722-737) looks only among the
base model's direct children; memsym's table ``ACCELERATE_ROOT_NORM`` lists the types whose
final norm transformers puts deeper.  The oracle is Accelerate's own function run on
transformers' causal LM of every type memsym reads, built on the meta device from the family
tests' small configs.
"""

from __future__ import annotations

import importlib
import os

import pytest

from memsym.job import Training
from memsym.model import from_hf_config
from memsym.model.architecture import norm_params
from memsym.symbols import h as sym_h
from memsym.terms.accelerate_fsdp import ACCELERATE_ROOT_NORM
from memsym.training.accelerate_fsdp import (accelerate_fsdp_groups, final_norm_in_root,
                                             root_group_params)

from hf_oracle import write_config

#: the family tests whose SMALL tables hold, together, a config of every type memsym reads
_FAMILIES = ("configs", "classic_types", "dense_types", "gemma4", "hybrid", "layer_kinds",
             "moe_types", "more_types", "newer_types", "recent_types", "swa_types",
             "type_tables", "types_more", "wrapper_types", "zamba")
_ONE = {}
for _family in _FAMILIES:
    _small = importlib.import_module(f"test_hf_{_family}").SMALL
    for _case in sorted(_small):
        _ONE.setdefault(_small[_case]["model_type"], _small[_case])


def _meta_model(path):
    torch = pytest.importorskip("torch")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.from_pretrained(str(path.parent))
    with torch.device("meta"):
        if conf.model_type == "emu3_text_model":     # in no auto mapping (hf_oracle.py)
            from transformers import Emu3ForCausalLM
            return Emu3ForCausalLM(conf)
        return AutoModelForCausalLM.from_config(conf)


def test_every_type_memsym_reads_is_checked():
    from memsym.model.hf_config import HF_MODEL_TYPES

    assert set(ACCELERATE_ROOT_NORM) <= set(_ONE) == set(HF_MODEL_TYPES)


@pytest.mark.torch
@pytest.mark.parametrize("mtype", sorted(_ONE))
def test_accelerates_own_lookup_agrees_with_the_table(tmp_path, mtype):
    pytest.importorskip("accelerate")
    from accelerate.utils.fsdp_utils import _find_final_norm

    path = write_config(tmp_path, _ONE[mtype])
    arch = from_hf_config(path)
    if getattr(arch, "per_layer_input_size", None):
        pytest.skip("Gemma 4's per-layer inputs: refused under accelerate_fsdp")
    model = _meta_model(path)
    found = _find_final_norm(model)
    assert final_norm_in_root(arch) == (mtype in ACCELERATE_ROOT_NORM)
    if mtype in ACCELERATE_ROOT_NORM:
        norm = model.get_submodule(ACCELERATE_ROOT_NORM[mtype])
        assert "Norm" in type(norm).__name__ and found is not norm
        assert sum(p.numel() for p in norm.parameters()) == norm_params(arch) * arch.hidden_size
    else:
        # found, outside every decoder layer, of the size memsym counts for the final norm
        assert found is not None
        name = next(n for n, m in model.named_modules() if m is found)
        assert not any(name.startswith(n + ".") for n, m in model.named_modules()
                       if type(m).__name__ in model._no_split_modules)
        assert sum(p.numel() for p in found.parameters()) == norm_params(arch) * arch.hidden_size


def test_opts_final_norm_is_in_the_root_group(tmp_path):
    """OPT (h 64, 2 layers, FFN 96, V 128, 64 positions + OPT's offset 2, tied), by hand: a
    block is q, k, v, out with biases, fc1 and fc2 with biases and two LayerNorms
    (modeling_opt.py); the tail [wte, lm_head] is V h alone, the root the position table
    (66 h) and the final LayerNorm (2 h)."""
    h, f, v, pos = 64, 96, 128, 64
    cfg = {"model_type": "opt", "hidden_size": h, "word_embed_proj_dim": h, "ffn_dim": f,
           "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": v,
           "max_position_embeddings": pos, "pad_token_id": 1}
    arch = from_hf_config(write_config(tmp_path, cfg))
    block = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    trn = Training(framework="deepspeed", sharding="fsdp", accelerate_fsdp="mixed")
    assert accelerate_fsdp_groups(arch, trn) == ((block, 2, True), (v * h, 1, False),
                                                 ((pos + 2) * h + 2 * h, 1, False))
    assert root_group_params(arch) == (pos + 2) * sym_h + 2 * sym_h
