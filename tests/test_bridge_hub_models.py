"""Megatron-Bridge recipes whose model memsym has no preset for (issue 32, item 3 and 4): the
recipe's Hugging Face checkpoint is read through the Hub (memsym.readers.bridge_models).

No test here uses the network.  The Hub cache is built in ``tmp_path`` in huggingface_hub's
layout from the config.json files of tests/data/hf (Qwen/Qwen2.5-0.5B verbatim, meta-llama/
Llama-3.2-1B transcribed; tests/data/hf/README.md) and read with ``HF_HUB_OFFLINE=1``; the Hub's
metadata call fails the test if made.

The recipes (Megatron-Bridge 067f987df0): ``qwen25_500m_pretrain_1gpu_h100_bf16_config``
(recipes/qwen/h100/qwen2.py:397) and ``llama32_1b_pretrain_1gpu_h100_bf16_config``
(recipes/llama/h100/llama3.py:44) build ``AutoBridge.from_hf_pretrained(ID)`` at TP 1 with a
NullTokenizer of ``DEFAULT_NULL_TOKENIZER_VOCAB_SIZE`` = 32000 (recipes/utils/tokenizer_utils.py:
15) and ``use_tokenizer_vocab_size`` True (recipes/common.py ``_pretrain_common``), so the
model's vocabulary is 32000, padded to a multiple of Bridge's ``make_vocab_size_divisible_by``
(128 for both checkpoints' vocabularies: 151936 = 128 x 1187, 128256 = 128 x 1002;
models/conversion/model_bridge.py:1716-1747) x TP 1: 32000 = 128 x 250, no padding.  Both
checkpoints tie their embeddings (``tie_word_embeddings`` true, mapped to
``share_embeddings_and_output_weights``, model_bridge.py:471): one table.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from memsym.errors import InvalidValueError
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.bridge_models import bridge_vocab_divisor
from in_process import run as cli

hf = pytest.importorskip("huggingface_hub")
from huggingface_hub import constants as hf_constants   # noqa: E402

DATA = pathlib.Path(__file__).resolve().parent / "data" / "hf"
QWEN, QWEN_RECIPE = "Qwen/Qwen2.5-0.5B", "qwen25_500m_pretrain_1gpu_h100_bf16_config"
LLAMA, LLAMA_RECIPE = "meta-llama/Llama-3.2-1B", "llama32_1b_pretrain_1gpu_h100_bf16_config"

# Qwen2.5-0.5B by hand: h 896, 24 layers, 14 heads and 2 key-value heads of 64, MLP 4864.
# Per layer: q 896*896 + 896 (bias) = 803,712; k and v 896*128 + 128 = 114,816 each; o
# 896*896 = 802,816; SwiGLU 3*896*4864 = 13,074,432; two RMSNorms 1,792: 14,912,384.
QWEN_LAYERS = 24 * 14_912_384 + 896            # and the final norm
# the published total (Hugging Face safetensors, tests/test_models.py "qwen2.5-0.5b"):
# 151936 * 896 = 136,134,656 embedding rows
assert QWEN_LAYERS + 151936 * 896 == 494_032_768
# Llama-3.2-1B by hand: h 2048, 16 layers, 32 heads and 8 key-value heads of 64, MLP 8192.
# Per layer: q and o 2048*2048 = 4,194,304 each; k and v 2048*512 = 1,048,576 each; SwiGLU
# 3*2048*8192 = 50,331,648; two RMSNorms 4,096: 60,821,504.
LLAMA_LAYERS = 16 * 60_821_504 + 2048
# the published total, 1.24B (meta-llama/Llama-3.2-1B model card): 1,235,814,400
assert LLAMA_LAYERS + 128256 * 2048 == 1_235_814_400


def _fail(*args, **kwargs):
    pytest.fail("the Hub was called")


def _snapshot(cache, repo, source):
    folder = cache / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    shutil.copyfile(source, snap / "config.json")       # the file as published, byte for byte
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("c" * 40, encoding="utf-8")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A Hub cache holding the two checkpoints' config.json, read offline."""
    cache = tmp_path / "hub"
    _snapshot(cache, QWEN, DATA / "qwen2.5-0.5b" / "config.json")
    _snapshot(cache, LLAMA, DATA / "llama-3.2-1b" / "config.json")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hf, "get_hf_file_metadata", _fail)
    return cache


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(hf, "get_hf_file_metadata", _fail)


def _params(capsys, *words):
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", *words, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("recipe, layers, hidden", [(QWEN_RECIPE, QWEN_LAYERS, 896),
                                                     (LLAMA_RECIPE, LLAMA_LAYERS, 2048)])
def test_recipe_without_a_preset_reads_its_checkpoint(hub_cache, capsys, recipe, layers, hidden):
    """The NullTokenizer's 32000 rows, one tied table: layers + 32000 x h."""
    got = _params(capsys, recipe)
    assert got["params"] == layers + 32000 * hidden
    assert any("model bridge builds it" in n for n in got["notes"])


@pytest.mark.parametrize("recipe, total", [(QWEN_RECIPE, 494_032_768),
                                           (LLAMA_RECIPE, 1_235_814_400)])
def test_the_checkpoint_vocabulary_gives_the_published_total(hub_cache, capsys, recipe, total):
    """With ``tokenizer.use_tokenizer_vocab_size=false`` the model keeps the checkpoint's own
    vocabulary, unpadded (training/setup.py:762-781, models/gpt_provider.py:266-271); 151936 and
    128256 are multiples of 128 x TP 1, so the count is the published one."""
    assert _params(capsys, recipe, "tokenizer.use_tokenizer_vocab_size=false")["params"] == total


def test_a_model_beside_the_recipe_replaces_its_checkpoint(hub_cache, capsys, empty_cache):
    """MODEL (here the config.json's path, with the Hub cache empty) in place of the recipe's
    checkpoint, said in the notes; the recipe's layout and tokenizer stay."""
    got = _params(capsys, LLAMA_RECIPE, str(DATA / "llama-3.2-1b" / "config.json"))
    assert got["params"] == LLAMA_LAYERS + 32000 * 2048
    assert any("in place of the recipe's meta-llama/Llama-3.2-1B" in n for n in got["notes"])


def test_offline_without_a_cache_is_one_line(empty_cache, capsys):
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", LLAMA_RECIPE)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1
    assert LLAMA in err and "not in the Hugging Face cache" in err and "MODEL" in err


def test_a_recipe_building_its_model_in_code_is_one_line(empty_cache, capsys):
    """recipes/olmoe/h100/olmoe_7b.py:58 builds ``OlMoEModelProvider(...)`` itself."""
    code, out, err = cli(capsys, "estimate", "--bridge-recipe",
                         "olmoe_7b_pretrain_8gpu_h100_bf16_config")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "OlMoEModelProvider" in err and "builds its model in code" in err


def test_a_family_memsym_does_not_follow_is_refused(tmp_path, monkeypatch):
    """A checkpoint whose model_type memsym reads but whose Bridge model bridge it has not
    compared (here a Phi-3 config given as the Qwen2.5 checkpoint) is refused in one line."""
    cache = tmp_path / "hub"
    phi = tmp_path / "phi3.json"
    phi.write_text(json.dumps({"model_type": "phi3", "hidden_size": 64, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "intermediate_size": 96,
                               "vocab_size": 128}))
    _snapshot(cache, QWEN, phi)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))
    with pytest.raises(InvalidValueError, match="phi3 model, whose Megatron-Bridge model "
                                                "bridge memsym does not follow"):
        bridge_job_options(read_bridge_recipe(QWEN_RECIPE))


def test_bridge_vocab_divisor():
    """models/conversion/model_bridge.py:1716-1747: its own examples, 50257 -> 1 and
    32000 -> 128, and 102400 (DeepSeek-V2) -> 128."""
    assert [bridge_vocab_divisor(v) for v in (50257, 32000, 102400, 151646)] == [1, 128, 128, 2]


def test_every_recipe_is_in_the_table():
    """tools/bridge_recipes.py keeps every language-model recipe, not only those with a preset:
    the Llama 3.2, Qwen2 / Qwen2.5 and small Qwen3 families among them."""
    from memsym.readers.bridge import is_recipe_name

    for name in (QWEN_RECIPE, LLAMA_RECIPE, "qwen3_600m_pretrain_1gpu_h100_bf16_config",
                 "gemma2_2b_pretrain_2gpu_h100_bf16_config",
                 "glm45_air_106b_pretrain_32gpu_h100_bf16_config"):
        assert is_recipe_name(name), name


@pytest.mark.parametrize("recipe", ["flux_12b_pretrain_2gpu_h100_bf16_config",      # flux/h100
                                    "qwen2_audio_7b_sft_1gpu_h100_bf16_config",     # qwen2_audio
                                    "qwen3_omni_30b_a3b_sft_8gpu_h100_bf16_config",  # qwen_omni
                                    "gemma3_vl_4b_sft_1gpu_h100_bf16_config"])       # gemma3_vl
def test_other_modalities_are_refused_by_name(capsys, recipe):
    """The families tools/bridge_recipes.py leaves out (OTHER_MODALITIES) are refused in one
    line saying why, not as unknown names."""
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", recipe)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "are not modelled" in err


@pytest.mark.torch
@pytest.mark.parametrize("folder, total", [("qwen2.5-0.5b", 494_032_768),
                                           ("llama-3.2-1b", 1_235_814_400)])
def test_transformers_builds_the_hand_count(folder, total):
    """transformers' own model of each file, on the meta device, has the hand-derived total
    (an oracle independent of memsym for the transcribed Llama file too)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.from_pretrained(str(DATA / folder))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    assert sum(p.numel() for p in model.parameters()) == total
