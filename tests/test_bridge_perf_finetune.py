"""Megatron-Bridge's performance SFT and LoRA recipes (issue 32, item 3):
``memsym estimate --bridge-recipe llama3_70b_sft_32gpu_h100_fp8cs_config`` and the other
``*_sft_*`` / ``*_peft_*`` functions of ``perf_recipes/<family>/<system>/*.py``.

The expected values are read by hand from the recipe functions at Megatron-Bridge 067f987df0
(file:line in each test; ``perf_recipes/`` and ``recipes/`` under ``src/megatron/bridge/``),
not from memsym's reading of them.  Each perf recipe starts from a fine-tuning recipe
(``llama3_70b_sft_config()``, ``llama3_70b_peft_config(peft_scheme="lora")``, imported through
perf_recipes/llama/common.py:22-29) or from ``_sft_common()`` itself (GLM-5), then sets its
precision (``_perf_precision``, perf_recipes/_common.py:99-123), layout and batch, and calls
``_benchmark_common`` (_common.py:31-89: bf16 gradient reduction at :73-74, the model's own
vocabulary at :51).
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers._bridge_recipes import PERF_RECIPES
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from in_process import run as cli

MIRROR = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"
COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"

#: the perf SFT and PEFT rows of the generated table
FINETUNE_PERF = sorted(n for n in PERF_RECIPES if re.search(r"_(sft|peft)_", n.split(".")[-1]))


def _opts(name, *overrides):
    return bridge_job_options(read_bridge_recipe(name, list(overrides)))


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    """No Hugging Face cache and no network: a recipe naming a checkpoint memsym has no preset
    for is refused, never downloaded."""
    hf = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(hf, "get_hf_file_metadata",
                        lambda *a, **k: pytest.fail("the Hub was called"))


def test_sft_llama3_70b_h100_fp8cs():
    """perf_recipes/llama/h100/llama3.py:343-376 on llama3_70b_sft_config
    (recipes/llama/h100/llama3.py:1762, peft=None: full fine-tuning; seq 4096 at :1780-1782;
    no recompute at :1840): _perf_precision("fp8_cs") (:346; _common.py:110-112, current
    scaling, whose fp8_param_gather is True, training/mixed_precision.py:302), bf16 gradient
    reduction (:350-351), distributed optimizer (:352-353), seq 4096, TP 4, PP 4, VPP 5, SP
    (:355-359; CP 1 from the base, :1795), GBS 32, MBS 1 (:360-361), Transformer Engine CUDA
    graphs of the MLP (:363-364), CommOverlapConfig(tp_comm_overlap=True,
    defer_embedding_wgrad_compute=True) (:366-370); 32 GPUs (its name)."""
    model, opts, notes = _opts("llama3_70b_sft_32gpu_h100_fp8cs_config")
    assert model == "llama3-70b"
    assert (opts["t"], opts["p"], opts["c"], opts["v"]) == (4, 4, 1, 5)
    assert (opts["micro_batch_size"], opts["global_batch_size"], opts["world_size"]) == (1, 32, 32)
    assert opts["seq_length"] == 4096 and opts["recompute"] == "none"
    assert opts["precision"] == "fp8" and opts["fp8_param_gather"] is True
    assert opts["grad_dtype"] == "bf16" and opts["sharding"] == "distributed-optimizer"
    assert opts["sequence_parallel"] and opts["tp_comm_overlap"]
    assert opts["defer_embedding_wgrad_compute"] is True
    assert opts["cuda_graph_impl"] == "transformer_engine"
    assert tuple(opts["cuda_graph_modules"]) == ("mlp",)
    assert opts.get("finetune", "full") == "full" and "lora_rank" not in opts
    assert any("mock sequences" in n for n in notes)       # run_recipe.py:397-415
    j = job(model, **opts, _notes=tuple(notes))
    assert j.layout.d == 32 // (4 * 4)


def test_peft_llama3_70b_h100_bf16_is_lora_with_the_recipes_targets():
    """perf_recipes/llama/h100/llama3.py:400-432 on llama3_70b_peft_config(peft_scheme="lora")
    (recipes/llama/h100/llama3.py:2576: default_peft_config("lora") with dim 16, alpha 32 at
    :2605-2609): target_modules ["linear_qkv"] (:413), seq 4096, TP 1, PP 4, CP 1, VPP 20
    (:414-418), GBS 32, MBS 1 (:419-420), full recompute by block of 1 layer (:422-424), bf16
    (:403).  Its name is also a library recipe's (recipes/llama/h100/llama3.py:2576), and
    run_recipe.py runs the perf one for it (recipe_runner.py:234-243): so does the bare name
    here, the perf recipe's module path too; the library one is its module path, and says
    so."""
    name = "llama3_70b_peft_8gpu_h100_bf16_config"
    model, opts, notes = _opts(name)
    assert model == "llama3-70b"
    assert (opts["t"], opts["p"], opts["c"], opts["v"]) == (1, 4, 1, 20)
    assert (opts["micro_batch_size"], opts["global_batch_size"], opts["world_size"]) == (1, 32, 8)
    assert opts["finetune"] == "lora" and opts["lora_rank"] == 16
    assert opts["lora_targets"] == ("q", "k", "v")
    assert opts["recompute"] == "full" and opts["recompute_method"] == "block"
    assert opts["recompute_num_layers"] == 1
    assert opts["precision"] == "bf16" and opts["grad_dtype"] == "bf16"
    job(model, **opts, _notes=tuple(notes))
    assert _opts("perf_recipes.llama.h100.llama3." + name)[1] == opts
    library = bridge_job_options(read_bridge_recipe("recipes.llama.h100.llama3." + name))
    assert library[1]["t"] == 8 and library[1]["lora_targets"] == ("q", "k", "v", "o", "gate",
                                                                    "up", "down")
    assert any(name in n and "run_recipe.py" in n for n in library[2])
    assert any("recipes.llama.h100.llama3." + name in n for n in notes)


def test_peft_llama3_70b_b200_and_gb200():
    """perf_recipes/llama/b200/llama3.py:368-397: TP 1, PP 2, CP 1 (:383-385), no VPP (the
    base's None), GBS 32 (:386), TE CUDA graphs of the MLP (:389-390), linear_qkv (:381).
    perf_recipes/llama/gb200/llama3.py:595-625: seq 2048 (:609-610), PP 2, VPP 20
    (:613-615), GBS 64 (:616); the LoRA rank is the base's 16 (recipes/llama/h100/
    llama3.py:2608)."""
    _, opts, _ = _opts("llama3_70b_peft_8gpu_b200_bf16_config")
    assert (opts["t"], opts["p"], opts["c"], opts.get("v")) == (1, 2, 1, None)
    assert opts["global_batch_size"] == 32 and opts["seq_length"] == 4096
    assert opts["cuda_graph_impl"] == "transformer_engine" and opts["lora_targets"] == ("q", "k", "v")
    _, opts, _ = _opts("llama3_70b_peft_8gpu_gb200_bf16_config")
    assert (opts["p"], opts["v"], opts["global_batch_size"], opts["seq_length"]) == (2, 20, 64, 2048)
    assert (opts["finetune"], opts["lora_rank"]) == ("lora", 16)


def test_sft_precisions_are_memsyms():
    """_perf_precision (perf_recipes/_common.py:108-119): "bf16" bf16_mixed, "fp8_cs" current
    scaling, "fp8_mx" MXFP8 (read as FP8, as for the perf pretrain recipes):
    perf_recipes/llama/gb200/llama3.py:393-396 (8B SFT, bf16, seq 16384 at :405-406, GBS 8 at
    :413, CUDA graphs "none" at :416), :441 (fp8cs) and :746 (fp8mx, on the fp8cs one)."""
    for name, precision in (("llama3_8b_sft_8gpu_gb200_bf16_config", "bf16"),
                            ("llama3_8b_sft_8gpu_gb200_fp8cs_config", "fp8"),
                            ("llama3_8b_sft_8gpu_gb200_fp8mx_config", "fp8")):
        _, opts, _ = _opts(name)
        assert opts["precision"] == precision, name
        assert (opts["t"], opts["p"], opts["seq_length"], opts["global_batch_size"]) == (
            1, 1, 16384, 8)
        assert "cuda_graph_impl" not in opts
    mx = read_bridge_recipe("llama3_8b_sft_8gpu_gb200_fp8mx_config")["values"]
    assert mx["mixed_precision"] == "bf16_with_mxfp8_mixed"


def test_glm5_sft_reads_its_recipe_and_refuses_its_model(empty_hub):
    """perf_recipes/glm_moe_dsa/gb200/glm5.py:24-92 builds on _sft_common() (:26) with the
    model AutoBridge.from_hf_pretrained("zai-org/GLM-5.1") (:28): seq 131072 (:35, :42), TP 1,
    PP 6, CP 32, EP 32, ETP 1 (:43-48), 14 and 16 layers in the first and last stages
    (:53-54), GBS 56, MBS 1 (:56-57), full uniform recompute of 1 layer (:81-83), fp32
    gradient reduction after _benchmark_common (:89-92).  GLM-5's model bridge is not one
    memsym follows: the estimate is refused in one line."""
    r = read_bridge_recipe("glm51_sft_192gpu_gb200_bf16_config")
    v = r["values"]
    assert r["hf_model"] == "zai-org/GLM-5.1" and r["world_size"] == 192
    assert (v["model.pipeline_model_parallel_size"], v["model.context_parallel_size"],
            v["model.expert_model_parallel_size"]) == (6, 32, 32)
    assert (v["model.num_layers_in_first_pipeline_stage"],
            v["model.num_layers_in_last_pipeline_stage"]) == (14, 16)
    assert (v["dataset.seq_length"], v["train.global_batch_size"]) == (131072, 56)
    assert (v["model.recompute_granularity"], v["model.recompute_method"]) == ("full", "uniform")
    assert v["ddp.grad_reduce_in_fp32"] is True and v["peft"] is None
    with pytest.raises(InvalidValueError) as exc:
        bridge_job_options(r)
    assert "zai-org/GLM-5.1" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("name", FINETUNE_PERF)
def test_every_perf_finetune_recipe_is_read_or_refused(empty_hub, name):
    """Each perf SFT and PEFT recipe gives a job (an SFT one full fine-tuning, a PEFT one
    LoRA), or one line saying what memsym lacks."""
    reading = read_bridge_recipe(name)
    assert reading["source"].startswith("src/megatron/bridge/perf_recipes/")
    try:
        model, opts, notes = bridge_job_options(reading)
    except InvalidValueError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 500
        return
    lora = "_peft_" in name.split(".")[-1]
    assert opts.get("finetune", "full") == ("lora" if lora else "full")
    job(model, **opts, _notes=tuple(notes))


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-Bridge git directory here")
def test_the_table_holds_every_perf_finetune_recipe_of_the_source():
    """``git grep "def .*_(sft|peft)_.*_config"`` over perf_recipes/ at 067f987df0: each
    function is a row (by its name, or its module path where a library recipe has the name),
    pointing at its own file:line."""
    grep = subprocess.run(["git", "--git-dir", MIRROR, "grep", "-n", "-E",
                           r"^def [a-z0-9_]+_(sft|peft)_[a-z0-9_]*_config\(", COMMIT, "--",
                           "src/megatron/bridge/perf_recipes"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    found = {}
    for line in grep:
        _, path, lineno, text = line.split(":", 3)
        found[text[4:text.index("(")]] = f"{path}:{lineno}"
    assert len(found) == 31
    rows = {n.split(".")[-1]: PERF_RECIPES[n]["source"] for n in FINETUNE_PERF}
    assert set(rows) == set(found)
    for name, where in found.items():
        assert rows[name] == f"{where} {name}"


def test_cli_estimate_of_the_perf_sft_recipe(capsys):
    code, out, err = cli(capsys, "estimate", "--bridge-recipe",
                         "llama3_70b_sft_32gpu_h100_fp8cs_config")
    assert code == 0, err
    assert "llama3-70b" in out and "total" in out.lower()


def test_pasted_run_recipe_command_of_a_perf_lora_recipe(capsys):
    """run_recipe.py --recipe NAME --mode lora (scripts/training/run_recipe.py:423-429,
    _load_selected_recipe) with an override: the same job as the override given to
    --bridge-recipe; peft.dim=32 doubles the adapters of rank 16 (recipes/llama/h100/
    llama3.py:2608): 2 x r x (h + the fused q, k, v output) per layer."""
    name = "llama3_70b_peft_8gpu_b200_fp8cs_config"
    reading = ("read_as", "ignored", "notes", "defaults")

    def estimate(*words):
        code, out, err = cli(capsys, "estimate", *words, "--json")
        assert code == 0, err
        return {k: v for k, v in json.loads(out).items() if k not in reading}

    pasted = estimate("python", "scripts/training/run_recipe.py", "--recipe", name, "--mode",
                      "lora", "peft.dim=32")
    assert pasted == estimate("--bridge-recipe", name, "peft.dim=32")
    rank16 = estimate("--bridge-recipe", name)
    assert pasted["bytes"]["adapter_weights"] == 2 * rank16["bytes"]["adapter_weights"]
    # Llama 3 70B: h 8192, q 8192 + k, v 2 x 1024 outputs; 40 of 80 layers on stage 0 (PP 2),
    # bf16 adapters: 2 bytes x r x (8192 + 10240) per layer
    assert rank16["bytes"]["adapter_weights"] == 40 * 2 * 16 * (8192 + 10240)


def test_lora_over_fp8_parameters_is_counted_not_noted():
    """_perf_precision("fp8_cs") turns fp8_param_gather on (training/mixed_precision.py:302),
    which is fp8_param (:81-100): the LoRA recipe's frozen base is FP8 parameters, counted as
    such under the distributed optimizer (tests/test_bridge_lora_fp8_params.py), so no note;
    the bf16 recipe has none either."""
    _, opts, notes = _opts("llama3_70b_peft_8gpu_b200_fp8cs_config")
    assert opts["fp8_param_gather"] is True and opts["sharding"] == "distributed-optimizer"
    assert not any("fp8_param_gather" in n for n in notes)
    notes = _opts("llama3_70b_peft_8gpu_b200_bf16_config")[2]
    assert not any("fp8_param_gather" in n for n in notes)


def test_glm5_sft_with_its_config_cached_is_refused_naming_the_model_bridge(tmp_path,
                                                                            monkeypatch):
    """With a glm_moe_dsa config.json in the Hub cache for zai-org/GLM-5.2 (a small one in
    transformers' GLM-5 fields: MLA, the DSA indexer, routed and shared experts), memsym reads
    the file and refuses the recipe in one line naming the model type whose Bridge model
    bridge it does not follow (memsym.readers.bridge_models.BRIDGE_MODEL_TYPES)."""
    hf = pytest.importorskip("huggingface_hub")
    from huggingface_hub import constants

    cfg = {"model_type": "glm_moe_dsa", "hidden_size": 64, "num_hidden_layers": 3,
           "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 96,
           "vocab_size": 128, "max_position_embeddings": 64, "pad_token_id": 0,
           "bos_token_id": 0, "eos_token_id": 0, "q_lora_rank": 24, "kv_lora_rank": 16,
           "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
           "n_routed_experts": 4, "n_shared_experts": 1, "moe_intermediate_size": 16,
           "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
           "index_n_heads": 4, "index_head_dim": 16}
    folder = tmp_path / "hub" / "models--zai-org--GLM-5.2"
    snap = folder / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("c" * 40, encoding="utf-8")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hf, "get_hf_file_metadata",
                        lambda *a, **k: pytest.fail("the Hub was called"))
    with pytest.raises(InvalidValueError) as exc:
        _opts("glm52_sft_416gpu_h100_bf16_config")     # the perf one, as run_recipe.py
    text = str(exc.value)
    assert "glm_moe_dsa" in text and "model bridge" in text and "\n" not in text
