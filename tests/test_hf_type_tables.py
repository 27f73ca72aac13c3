"""The per-type tables of the Hugging Face type files against transformers' own models (issue 32,
item 4), one parametrised test per check over every file's tables.

Oracle (``tests/hf_oracle.py``): transformers (5.25.0 when checked) builds
``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the meta device, and
``sum(p.numel())`` of its parameters (a tied weight once) must equal memsym's count.  Each file
below keeps its own tables (``TYPES``, ``SMALL``: every structural switch with small sizes;
``REAL``: published config.json values, hub page cited there) and its own hand counts and
refusals; the checks every type takes are here: the small configs, the config class's own
defaults, the published configs, a file naming only its class, the pipeline stages, fuzzing.
"""

from __future__ import annotations

import pytest

from memsym.model import from_hf_config, parameter_count
from memsym.model.hf_config import HF_MODEL_TYPES

from hf_oracle import (assert_attention_dropout_only, assert_read_by_class_name,
                       assert_stages_add_up, class_defaults, fuzz_configs, language_model_count,
                       one_case_per_type, write_config)
import test_hf_classic_types as classic
import test_hf_dense_types as dense
import test_hf_gemma4 as gemma4
import test_hf_layer_kinds as layer_kinds
import test_hf_moe_types as moe
import test_hf_recent_types as recent
import test_hf_swa_types as swa
import test_hf_types_more as more
import test_hf_wrapper_types as wrappers

FILES = (classic, dense, moe, swa, gemma4, recent, more, wrappers, layer_kinds)
TYPES = {t for f in FILES for t in f.TYPES}
SMALL = {case: cfg for f in FILES for case, cfg in f.SMALL.items()}
REAL = {case: cfg for f in FILES for case, cfg in f.REAL.items()}
# the types whose config class's own defaults are counted here; left out: DbrxConfig's (its
# DbrxAttentionConfig has no rope_theta, so transformers 5.25.0 builds no model of them:
# refused, tests/test_hf_class_defaults.py) and Lfm2MoeConfig's (no default layer_types:
# refused, tests/test_hf_layer_kinds.py) and CohereCompassTextConfig's (no rope_parameters per
# layer type, which CohereCompassRotaryEmbedding reads: refused, tests/test_hf_types_more.py)
_DEFAULTS = sorted(TYPES - {"dbrx", "lfm2_moe", "cohere_compass_text"})
# the files whose types' modules read attention_dropout alone (the classic types read more:
# tests/test_hf_classic_types.py checks theirs)
_ATTENTION_DROPOUT_ONLY = one_case_per_type({**dense.SMALL, **moe.SMALL, **swa.SMALL,
                                             **recent.SMALL,
                                             **{k: v for k, v in more.SMALL.items()
                                                if v["model_type"] != "ctrl"}})
# IQuestCoderConfig names LlamaForCausalLM: a file naming only that class is a llama file (and
# Param2MoeConfig / SarvamMoEConfig name Glm4MoeForCausalLM, SarvamMLAConfig
# DeepseekV3ForCausalLM); the Qwen3.5 vision-language files hold their sizes in text_config,
# read by their model_type
# read by their model_type; AutoModelForCausalLM's class for emu3 is Emu3ForCausalLM, the
# class of emu3_text_model files (which no auto mapping names), and for gpt-sw3 GPT-2's:
# tests/test_hf_wrapper_types.py reads those by their own class names
_OWN_CLASS = sorted(TYPES - {"iquestcoder", "qwen3_5", "qwen3_5_moe", "param2moe",
                             "sarvam_moe", "sarvam_mla", "emu3", "emu3_text_model", "gpt-sw3"})


def test_the_tables_are_disjoint_and_cover_their_types():
    # one case name means one config, and each file's small configs cover its types
    assert len(SMALL) == sum(len(f.SMALL) for f in FILES)
    assert len(REAL) == sum(len(f.REAL) for f in FILES)
    assert len(TYPES) == sum(len(f.TYPES) for f in FILES)
    for f in FILES:
        assert {cfg["model_type"] for cfg in f.SMALL.values()} == f.TYPES, f.__name__
    assert TYPES <= set(HF_MODEL_TYPES)


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(SMALL))
def test_small_configs_match_transformers(tmp_path, case):
    path = write_config(tmp_path, SMALL[case])
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


@pytest.mark.torch
@pytest.mark.parametrize("mtype", _DEFAULTS)
def test_the_config_class_defaults_match_transformers(tmp_path, mtype):
    # the config class's own defaults, as its to_dict() writes them (IQuestCoderConfig's are
    # IQuest-Coder-V1-40B-Instruct's, its docstring's checkpoint)
    path = write_config(tmp_path, class_defaults(mtype), mtype)
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(REAL))
def test_real_configs_match_transformers(tmp_path, case):
    path = write_config(tmp_path, REAL[case], case)
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


@pytest.mark.torch
@pytest.mark.parametrize("mtype", _OWN_CLASS)
def test_a_file_without_model_type_is_read_by_its_class_name(tmp_path, mtype):
    assert_read_by_class_name(tmp_path, SMALL, mtype)


@pytest.mark.torch
@pytest.mark.parametrize("case", _ATTENTION_DROPOUT_ONLY)
def test_dropout_masks_follow_the_transformers_model(tmp_path, case):
    assert_attention_dropout_only(tmp_path, SMALL[case])


@pytest.mark.parametrize("case", sorted(SMALL))
def test_stages_add_up_to_the_count(tmp_path, case):
    assert_stages_add_up(from_hf_config(write_config(tmp_path, SMALL[case])))


@pytest.mark.parametrize("f", FILES[:-1], ids=lambda f: f.__name__)
def test_fuzzed_configs(tmp_path, f):
    # (tests/test_hf_layer_kinds.py fuzzes its own, nested fields too)
    fuzz_configs(tmp_path, f.SMALL, {k for cfg in f.SMALL.values() for k in cfg})
