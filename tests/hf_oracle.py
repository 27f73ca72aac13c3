"""The shared oracle of the Hugging Face config.json tests (issue 32, item 4).

transformers builds ``AutoModelForCausalLM.from_config`` of the very file memsym reads, on the
meta device (no memory, no download), and ``sum(p.numel())`` of its parameters (a tied weight
once) must equal memsym's ``parameter_count``; a training forward of transformers' model shows
which dropout masks it draws.  Every config is written by the test itself: no network.  The
``tests/test_hf_*.py`` files import these helpers; none imports another test module's private
names.
"""

from __future__ import annotations

import json
import os

import pytest

from memsym.errors import MemsymError
from memsym.model import from_hf_config, parameter_count

__all__ = ["TOKENS", "small_config", "write_config", "transformers_count",
           "language_model_count", "billions", "class_defaults", "assert_read_by_class_name",
           "dropout_masks", "assert_masks_follow_dropout", "assert_attention_dropout_only",
           "assert_stages_add_up",
           "one_case_per_type", "fuzz_configs"]

#: special token ids every small config carries (transformers' defaults may exceed its vocabulary)
TOKENS = {"pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
_BASE = {"hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 128,
         "max_position_embeddings": 64, **TOKENS}


def small_config(model_type, **over):
    """A small Llama-like config.json of ``model_type`` (h 64, 3 layers, 4 heads, 2 KV heads)."""
    return {"model_type": model_type, **_BASE, **over}


def write_config(tmp_path, cfg, sub="m"):
    """``cfg`` written as ``tmp_path/sub/config.json``; its path."""
    d = tmp_path / sub
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d / "config.json"


def transformers_count(path) -> int:
    """transformers' own model built from the same file on the meta device: sum(p.numel())."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig, AutoModelForCausalLM

    import transformers

    conf = AutoConfig.from_pretrained(str(path.parent))
    if conf.model_type == "deepseek_v3" and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers < 5 keeps e_score_correction_bias as a parameter; memsym "
                    "reads the model of transformers 5, where it is a buffer")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    # parameters() yields a tied (shared) weight once
    return sum(p.numel() for p in model.parameters())


def language_model_count(path) -> int:
    """transformers' model of the file on the meta device: sum(p.numel()) of its language model
    (everything but a vision-language model's vision tower and projector)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import AutoConfig, AutoModelForCausalLM

    conf = AutoConfig.from_pretrained(str(path.parent))
    with torch.device("meta"):
        if conf.model_type == "emu3_text_model":
            # Emu3TextConfig, the config Emu3ForCausalLM saves, is in no auto mapping: the
            # class whose config_class it is builds it (TRL loads the class architectures[0]
            # names)
            from transformers import Emu3ForCausalLM

            model = Emu3ForCausalLM(conf)
        else:
            model = AutoModelForCausalLM.from_config(conf)
    vision = ("vision_tower", "multi_modal_projector", "embed_vision", "audio_tower",
              "embed_audio")
    left_out = {n.split(".")[1] for n, _ in model.named_parameters() if any(v in n for v in vision)}
    # only Gemma 3's, Gemma 4's and Gemma 4 Unified's vision-language models have parts left
    # out, and only these:
    # Gemma 4's towers and embedders where the file has their configs (Gemma4Model.__init__)
    expected = set()
    if conf.model_type == "gemma3":
        expected = {"vision_tower", "multi_modal_projector"}
    elif conf.model_type == "gemma4":
        expected = ({"vision_tower", "embed_vision"} if conf.vision_config else set()) | (
            {"audio_tower", "embed_audio"} if conf.audio_config else set())
    elif conf.model_type == "gemma4_unified":
        # no tower: an embedder per modality the file configures (Gemma4UnifiedModel.__init__)
        expected = ({"embed_vision"} if conf.vision_config else set()) | (
            {"embed_audio"} if conf.audio_config else set())
    assert left_out == expected
    return sum(p.numel() for n, p in model.named_parameters() if not any(v in n for v in vision))


def billions(n, digits=0):
    """``n`` in billions, rounded as a model card rounds it."""
    return round(n / 10**9, digits)


def class_defaults(mtype: str) -> dict:
    """The config.json of transformers' config class of ``mtype`` at its own defaults, as its
    ``to_dict()`` writes them (GPT-Neo's derived attention_layers and the private fields left
    out)."""
    from transformers import AutoConfig

    defaults = AutoConfig.for_model(mtype).to_dict()
    return {k: v for k, v in defaults.items() if not k.startswith("_") and k not in (
        "transformers_version", "architectures", "attention_layers")}


def assert_read_by_class_name(tmp_path, small: dict, mtype: str) -> None:
    """A file with no model_type is read by its architectures[0] alone, named as transformers
    names its causal-LM class of ``mtype`` (its auto mapping, the oracle), as the typed file."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    case = next(c for c in sorted(small) if small[c]["model_type"] == mtype)
    cfg = {k: v for k, v in small[case].items() if k != "model_type"}
    cfg["architectures"] = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[mtype]]
    arch = from_hf_config(write_config(tmp_path, cfg))
    assert arch.extra["hf_model_type"] == mtype
    assert parameter_count(arch) == parameter_count(from_hf_config(write_config(
        tmp_path, small[case], "typed")))


def dropout_masks(path) -> int:
    """Dropout masks drawn in one training forward of transformers' model: the ``bernoulli``
    / ``native_dropout`` kernels run (``at::dropout`` skips them at p = 0 and keeps each mask
    drawn for the backward)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import AutoConfig, AutoModelForCausalLM

    class Draws(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "bernoulli" in func.__name__ or "native_dropout" in func.__name__:
                Draws.count += 1
            return func(*args, **(kwargs or {}))

    conf = AutoConfig.from_pretrained(str(path.parent), attn_implementation="eager")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(conf).train()
    with Draws():
        model(torch.randint(0, 100, (1, 8)))
    return Draws.count


def assert_masks_follow_dropout(path) -> dict:
    """transformers' model of ``path`` draws a dropout mask exactly when a probability memsym
    reads from the file is above zero; the probabilities read."""
    dropout = from_hf_config(path).extra["hf_dropout"]
    assert (dropout_masks(path) > 0) == any(p > 0 for p in dropout.values())
    return dropout


def assert_attention_dropout_only(tmp_path, cfg: dict) -> None:
    """The types whose modules read attention_dropout alone: memsym reads that one field, and
    transformers' model draws a mask exactly when it is above zero."""
    assert from_hf_config(write_config(tmp_path, cfg, "probe")).extra["hf_dropout"] == {
        "attention_dropout": 0.0}
    assert assert_masks_follow_dropout(write_config(tmp_path, {**cfg, "attention_dropout": 0.1}))
    assert_masks_follow_dropout(write_config(tmp_path, cfg, "zero"))


def assert_stages_add_up(arch, p=None):
    """At t = 1 over p pipeline stages (default one layer each), the stages hold every
    parameter of ``arch`` once, plus the last stage's copy of a tied output weight (V h), as
    Megatron allocates it."""
    from memsym.model import stage_parameters

    p = arch.num_layers if p is None else p
    stages = [stage_parameters(arch, t=1, p=p, stage=i, pad_vocab=False) for i in range(p)]
    tied = not arch.untie_embeddings_and_output_weights
    tied_copy = arch.vocab_size * arch.hidden_size if tied else 0
    assert sum(st.total for st in stages) == parameter_count(arch) + tied_copy


def one_case_per_type(table: dict) -> list:
    """The first case (in sorted order) of each ``model_type`` in ``table``, sorted."""
    seen = {}
    for case in sorted(table):
        seen.setdefault(table[case]["model_type"], case)
    return sorted(seen.values())


def fuzz_configs(tmp_path, small: dict, keys, extra_values=()):
    """Any change of up to four fields of one of ``small``'s configs is an Architecture with
    a positive count or one clear line (120 examples, no deadline: file writes; no example
    database).  ``extra_values``: more hypothesis strategies for a field's new value."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    values = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2, max_value=10**9),
                       st.sampled_from([0, 1, 2, 4, 64, 10**300, "auto"]), st.text(max_size=8),
                       st.lists(st.integers(min_value=-1, max_value=4), max_size=4),
                       *extra_values)

    @hypothesis.settings(max_examples=120, deadline=None, database=None)
    @hypothesis.given(base=st.sampled_from(sorted(small)),
                      changes=st.dictionaries(st.sampled_from(sorted(keys)), values, max_size=4))
    def check(base, changes):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**small[base], **changes}))
        try:
            arch = from_hf_config(path)
        except MemsymError as exc:
            assert "\n" not in str(exc)
        else:
            assert parameter_count(arch) > 0

    check()
