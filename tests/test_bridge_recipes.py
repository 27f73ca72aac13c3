"""Megatron-Bridge recipes (issue 32, deliverable 3): ``memsym estimate --bridge-recipe NAME
[section.field=value ...]`` and a pasted ``run_recipe.py`` command.

The explicit commands below are derived by hand from the recipe functions at Megatron-Bridge
067f987df0 (file:line in each test), not from memsym's reading of them.
"""

from __future__ import annotations

import json
import os

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.job import job
from memsym.training import job_stage_parameters
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.bridge_command import parse_override
from in_process import run as cli

#: Keys that say how the job was read (they differ between a recipe and a command by design).
READING_KEYS = ("read_as", "ignored", "notes", "defaults")


def report(capsys, *argv) -> dict:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    return {k: v for k, v in data.items() if k not in READING_KEYS}


# recipes/llama/h100/llama3.py:235-318 llama3_8b_pretrain_2gpu_h100_bf16_config (legacy name
# llama3_8b_pretrain_config, recipes/llama/llama3.py:22): Meta-Llama-3-8B; NullTokenizer
# vocab 32000 (recipes/utils/tokenizer_utils.py:15; _pretrain_common's
# use_tokenizer_vocab_size, training/setup.py:762); TP 1, PP 1, CP 2, no SP; seq 8192; GBS
# 512, MBS 1; no recompute; bf16_mixed (recipes/common.py:130, grad_reduce_in_fp32 True);
# distributed optimizer with overlapped grad reduce and param gather; 2 GPUs (its name);
# Adam (recipes/common.py:53); Transformer Engine's fused cross-entropy (llama3.py:98-99:
# cross_entropy_loss_fusion True, cross_entropy_fusion_impl "te").
LLAMA3_8B = ("llama3-8b", "--vocab-size", "32000", "--tp", "1", "--pp", "1", "--cp", "2",
             "--seq-length", "8192", "--micro-batch-size", "1", "--global-batch-size", "512",
             "--world-size", "2", "--recompute-granularity", "none", "--precision", "bf16",
             "--optimizer", "adam", "--use-distributed-optimizer", "--overlap-grad-reduce",
             "--overlap-param-gather", "--cross-entropy-fusion-impl", "te")

# recipes/qwen/h100/qwen3_moe.py:146-226 qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config (legacy
# qwen3_30b_a3b_pretrain_config), on top of :32-144: TP 1, PP 1, CP 1, EP 16, ETP 1, no SP;
# seq 4096; GBS 1024, MBS 1; no recompute; bf16_mixed with grad_reduce_in_fp32 False (bf16
# gradients); precision-aware optimizer; distributed optimizer, overlapped grad reduce and
# param gather (:128-129); tp_comm_overlap True is turned off by Bridge at TP 1
# (training/comm_overlap.py:443); Hugging Face tokenizer: the config.json vocabulary; 16 GPUs;
# Transformer Engine's fused cross-entropy (qwen3_moe.py:88-89); the flex dispatcher with
# HybridEP (perf_recipes/qwen/h100/qwen3_moe.py:89-90, apply_flex_dispatcher_backend);
# Transformer Engine's CUDA graphs of the router and the MoE preprocessing (qwen3_moe.py:213-214).
QWEN3_30B = ("qwen3-30b-a3b", "--tp", "1", "--pp", "1", "--cp", "1", "--ep", "16", "--etp", "1",
             "--seq-length", "4096", "--micro-batch-size", "1", "--global-batch-size", "1024",
             "--world-size", "16", "--recompute-granularity", "none", "--precision", "bf16",
             "--optimizer", "adam", "--use-distributed-optimizer", "--grad-reduce-in-bf16",
             "--use-precision-aware-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
             "--cross-entropy-fusion-impl", "te", "--moe-dispatcher", "hybridep",
             "--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules", "moe_router",
             "moe_preprocess")


def test_llama3_8b_recipe_equals_the_explicit_command(capsys):
    bridge = report(capsys, "estimate", "--bridge-recipe", "llama3_8b_pretrain_config")
    assert bridge == report(capsys, "estimate", *LLAMA3_8B)
    assert bridge["layout"]["cp"] == 2 and bridge["layout"]["world_size"] == 2


def test_qwen3_moe_recipe_equals_the_explicit_command(capsys):
    bridge = report(capsys, "estimate", "--bridge-recipe", "qwen3_30b_a3b_pretrain_config")
    assert bridge == report(capsys, "estimate", *QWEN3_30B)
    assert bridge["layout"]["ep"] == 16 and bridge["training"]["tp_comm_overlap"] is False


def test_pasted_run_recipe_command_equals_the_overrides(capsys):
    """run_recipe.py's -tp / -gb are its overrides (run_recipe.py COMMON_OVERRIDE_FIELDS); a
    trailing override wins over them, as run_recipe.py applies them after."""
    pasted = report(capsys, "estimate", "python", "scripts/training/run_recipe.py", "--recipe",
                    "llama3_8b_pretrain_config", "--mode", "pretrain", "--dataset", "mock",
                    "-tp", "4", "-gb", "256", "model.context_parallel_size=1",
                    "model.sequence_parallel=true", "--world-size", "8")
    explicit = list(LLAMA3_8B)
    for flag, value in (("--tp", "4"), ("--cp", "1"), ("--global-batch-size", "256"),
                        ("--world-size", "8")):
        explicit[explicit.index(flag) + 1] = value
    assert pasted == report(capsys, "estimate", *explicit, "--sequence-parallel")
    later = report(capsys, "estimate", "--recipe", "llama3_8b_pretrain_config", "-tp", "4",
                   "model.tensor_model_parallel_size=2", "--world-size", "4")
    assert later["layout"]["tp"] == 2 and later["layout"]["dp"] == 1


def test_an_override_changes_exactly_its_field():
    """Plain DDP takes both sections' use_distributed_optimizer off: Bridge turns both on when
    either is (training/config.py:2101-2123), and _pretrain_common's optimizer helper sets the
    optimizer's (recipes/utils/optimizer_utils.py:150)."""
    base = bridge_job_options(read_bridge_recipe("llama3_8b_pretrain_config", world_size=4))[1]
    for words, changed in ((["model.tensor_model_parallel_size=2"], {"t": 2}),
                           (["train.global_batch_size=256"], {"global_batch_size": 256}),
                           (["model.recompute_granularity=selective"], {"recompute": "selective"}),
                           (["dataset.seq_length=4096"], {"seq_length": 4096}),
                           (["ddp.use_distributed_optimizer=false"], {}),
                           (["ddp.use_distributed_optimizer=false",
                             "optimizer.use_distributed_optimizer=false"], {"sharding": "ddp"})):
        got = bridge_job_options(read_bridge_recipe("llama3_8b_pretrain_config", words,
                                                    world_size=4))[1]
        assert {k: v for k, v in got.items() if base.get(k) != v} == changed, words
        assert set(got) == set(base)


def test_the_recipe_table_holds_the_source_values():
    """recipes/llama/h100/llama3.py:734-740 and 797 (70B: TP 4, PP 4, VPP 5, CP 2, SP,
    CommOverlapConfig(tp_comm_overlap=True)); deepseek_v3.py:123-133 (TP 2, PP 16, EP 64) with
    the layout of :58 for (16, 1): an embedding and 4 layers, 14 stages of 4, 1 layer + MTP +
    loss."""
    model, opts, _ = bridge_job_options(read_bridge_recipe("llama3_70b_pretrain_config"))
    assert (model, opts["t"], opts["p"], opts["v"], opts["c"]) == ("llama3-70b", 4, 4, 5, 2)
    assert opts["sequence_parallel"] and opts["tp_comm_overlap"] and opts["world_size"] == 32
    model, opts, notes = bridge_job_options(read_bridge_recipe("deepseek_v3_pretrain_config"))
    assert (opts["t"], opts["p"], opts["e"], opts["world_size"]) == (2, 16, 64, 1024)
    stages = opts["pipeline_layout"].split("|")
    assert len(stages) == 16 and stages[0] == "Etttt" and stages[-1] == "tmL"
    assert opts["grad_dtype"] == "bf16" and opts["precision_aware"] is True
    # deepseek_v3.py: the precision-aware optimizer keeps both Adam moments in bfloat16
    assert (opts["exp_avg_dtype"], opts["exp_avg_sq_dtype"], opts["main_params_dtype"]) == (
        "bf16", "bf16", "fp32")
    assert opts["cross_entropy_fusion_impl"] == "te"      # deepseek_v3.py:188-189
    j = job(model, **opts, _notes=tuple(notes))
    assert j.layout.d == 1024 // (2 * 16)


def test_fp8_recipe_and_fp8_under_megatron_fsdp():
    """bf16_with_fp8_current_scaling_mixed sets fp8 and fp8_param_gather
    (training/mixed_precision.py:285-302); under Megatron-FSDP memsym counts its FP8
    parameters (tests/test_megatron_fsdp_fp8.py), in a note; a partial sharding with FP8 is
    counted as bf16, in a note."""
    _, opts, _ = bridge_job_options(read_bridge_recipe("llama3_8b_low_precision_pretrain_config"))
    assert opts["precision"] == "fp8" and opts["fp8_param_gather"] is True
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "llama3_8b_low_precision_pretrain_config",
        ["ddp.use_megatron_fsdp=true", "ddp.data_parallel_sharding_strategy=optim_grads_params"]))
    assert opts["sharding"] == "fsdp" and opts["precision"] == "fp8"
    assert opts["fp8_param_gather"] is True and any("FP8 parameters" in n for n in notes)
    job("llama3-8b", **opts)
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "llama3_8b_low_precision_pretrain_config",
        ["ddp.use_megatron_fsdp=true", "ddp.data_parallel_sharding_strategy=optim_grads"]))
    assert opts["sharding"] == "zero2" and opts["precision"] == "bf16"
    assert "fp8_param_gather" not in opts and any("FP8" in n for n in notes)
    job("llama3-8b", **opts)


def test_an_unknown_field_is_refused_and_the_read_fields_are_bridges():
    """SECTION_FIELDS holds the config dataclasses' fields (training/config.py's classes with
    their Megatron-Core bases at 2a75ac12c5): a misspelt field is refused, naming the close ones."""
    from memsym.readers._bridge_recipes import SECTION_FIELDS
    from memsym.readers.bridge import FIELDS

    with pytest.raises(InvalidValueError, match="did you mean overlap_grad_reduce"):
        read_bridge_recipe("llama3_8b_pretrain_config", ["ddp.overlap_grad_reduse=true"])
    for key in FIELDS:
        section, _, name = key.partition(".")
        assert not name or name in SECTION_FIELDS[section], key
    # dataclass fields of MCore's TransformerConfig and of Bridge's own TrainingConfig
    assert {"num_moe_experts", "recompute_granularity", "cuda_graph_impl"} <= set(SECTION_FIELDS["model"])
    assert {"global_batch_size", "micro_batch_size", "train_iters"} <= set(SECTION_FIELDS["train"])


def test_overrides_memsym_does_not_model_are_listed(capsys):
    code, out, _ = cli(capsys, "estimate", "--bridge-recipe", "llama3_8b_pretrain_config",
                       "checkpoint.save=/tmp/x", "model.apply_rope_fusion=true", "--json")
    assert code == 0
    assert json.loads(out)["ignored"] == ["checkpoint.save=/tmp/x", "model.apply_rope_fusion=true"]


def test_values_are_literals_never_evaluated():
    assert parse_override("model.x=[1, 2.5, true, null, 'a']") == ("model.x", [1, 2.5, True, None, "a"])
    assert parse_override("model.num_layers=__import__('os')") == \
        ("model.num_layers", "__import__('os')")
    reading = read_bridge_recipe("llama3_8b_pretrain_config", ["model.num_layers=2*16"])
    with pytest.raises(InvalidValueError, match="model.num_layers must be a whole number"):
        bridge_job_options(reading)


@pytest.mark.parametrize("words", [
    ("modle.tensor_model_parallel_size=2",),                 # unknown section
    ("model.tensor_model_paralel_size=2",),                  # no field of Bridge's model config
    ("train.global_batch=2",),
    ("model.sequence_parallel=maybe",),                      # not a boolean
    ("mixed_precision=bf16_with_mxfp4_mixed",),             # not a precision recipe memsym reads
    ("model.tensor_model_parallel_size=3",),                 # 3 does not divide the 2 GPUs
    ("llama3-8x",),                                          # neither override nor MODEL
    ("--tp", "2"),                                           # memsym's layout beside it
    ("--mode", "sft"),
    ("model.tensor_model_parallel_size",),                   # no value
])
def test_a_bad_override_is_one_line_and_exit_2(capsys, words):
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", "llama3_8b_pretrain_config", *words)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err


def test_an_unknown_recipe_is_named(capsys):
    with pytest.raises(UnknownNameError):
        read_bridge_recipe("llama3_8b_pretrain")
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", "nope_config")
    assert code == 2 and out == "" and "nope_config" in err
    # Bridge's private _nemotron_3_super_pretrain_64gpu_h100_bf16_config (recipes/nemotronh/
    # h100/nemotron_3_super.py:160) is reached by its alias, never offered by name
    with pytest.raises(UnknownNameError) as exc:
        read_bridge_recipe("nemotron_3_super_pretrain_configg")
    assert "nemotron_3_super_pretrain_config" in str(exc.value)
    assert "_nemotron_3_super" not in str(exc.value) and " _" not in str(exc.value)


MIRROR = "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="no Megatron-Bridge git directory here")
def test_the_shipped_table_is_what_the_source_gives():
    from tools.bridge_recipes import DEFAULT_MCORE, FINETUNE_OUT, OUT, build

    if not os.path.isdir(DEFAULT_MCORE):
        pytest.skip("no Megatron-LM git directory here")
    assert (OUT.read_text(), FINETUNE_OUT.read_text()) == build(MIRROR, DEFAULT_MCORE)


def test_an_override_value_is_bounded():
    """memsym.limits.BRIDGE_MAX_VALUE_CHARS: 1000 characters pass, 1001 are refused."""
    from memsym.limits import BRIDGE_MAX_VALUE_CHARS

    assert parse_override("checkpoint.save=" + "a" * BRIDGE_MAX_VALUE_CHARS)[1] == "a" * 1000
    with pytest.raises(InvalidValueError, match="longer than 1000"):
        parse_override("checkpoint.save=" + "a" * (BRIDGE_MAX_VALUE_CHARS + 1))


def test_deepseek_layout_is_rebuilt_after_a_pipeline_override():
    """run_recipe.py sync_model_pipeline_layout calls deepseek_v3.py's builder after a PP/VPP
    override: (8, 1) is an embedding and 8 layers, 6 stages of 8, 5 layers + MTP + loss
    (deepseek_v3.py:56); a (PP, VPP) the builder lacks raises there, so it is refused here."""
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        "deepseek_v3_pretrain_config", ["model.pipeline_model_parallel_size=8"]))
    assert opts["pipeline_layout"].split("|") == ["E" + "t" * 8] + ["t" * 8] * 6 + ["tttttmL"]
    with pytest.raises(InvalidValueError, match="no layout for PP 2"):
        bridge_job_options(read_bridge_recipe(
            "deepseek_v3_pretrain_config", ["model.pipeline_model_parallel_size=2"]))


def test_deepseek_layout_holds_the_models_mtp_layers():
    """The builder's last stage is ``["mtp"] * mtp_layers + ["loss"]`` with ``mtp_layers`` the
    model's ``mtp_num_layers`` or 0 (deepseek_v3.py:52, :86 at 067f987df0): none, one or two
    MTP layers before the loss, every decoder stage the same."""
    def last_stage(mtp):
        _, opts, _ = bridge_job_options(read_bridge_recipe(
            "deepseek_v3_pretrain_config", ["model.pipeline_model_parallel_size=8",
                                            f"model.mtp_num_layers={mtp}"]))
        stages = opts["pipeline_layout"].split("|")
        assert stages[:7] == ["E" + "t" * 8] + ["t" * 8] * 6
        return stages[7]
    assert [last_stage(n) for n in (0, 1, 2)] == ["tttttL", "tttttmL", "tttttmmL"]


def test_mixed_precision_fp8_field_turns_fp8_on_and_off():
    """MixedPrecisionConfig.fp8 (training/mixed_precision.py:49, None = off): "hybrid" on
    bf16_mixed is FP8 without FP8 parameters (bf16_mixed's fp8_param_gather False); null on
    the current-scaling recipe is bf16."""
    _, on, _ = bridge_job_options(read_bridge_recipe("llama3_8b_pretrain_config",
                                                     ["mixed_precision.fp8=hybrid"]))
    assert on["precision"] == "fp8" and "fp8_param_gather" not in on
    _, off, _ = bridge_job_options(read_bridge_recipe("llama3_8b_low_precision_pretrain_config",
                                                      ["mixed_precision.fp8=null"]))
    assert off["precision"] == "bf16" and "fp8_param_gather" not in off


# --- performance recipes (perf_recipes/<family>/<system>/, issue 32 deliverable 3) ----------

def _opts(name, *overrides):
    return bridge_job_options(read_bridge_recipe(name, list(overrides)))


def test_perf_recipe_llama3_70b_h100_fp8cs():
    """perf_recipes/llama/h100/llama3.py:159-180: the base llama3_70b_pretrain_config
    (recipes/llama/llama3.py:47, its 32gpu h100 bf16 recipe: distributed optimizer, overlapped
    grad reduce and param gather, CommOverlapConfig(tp_comm_overlap=True)), then
    _perf_precision("fp8_cs") (perf_recipes/_common.py:107-123: current scaling, whose
    fp8_param_gather is True at training/mixed_precision.py:302, grad_reduce_in_fp32 False),
    TP 4, PP 8, CP 1, VPP 5, the layout string of :170, SP, GBS 256, MBS 1; _benchmark_common
    (_common.py:51, 73-74): the model's own vocabulary (128256 in Llama 3's config.json), bf16
    gradient reduction; 64 GPUs (the name)."""
    model, opts, _ = _opts("llama3_70b_pretrain_64gpu_h100_fp8cs_config")
    assert model == "llama3-70b"
    assert (opts["t"], opts["p"], opts["c"], opts["v"]) == (4, 8, 1, 5)
    assert opts["pipeline_layout"] == "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"
    assert (opts["micro_batch_size"], opts["global_batch_size"], opts["world_size"]) == (1, 256, 64)
    assert opts["precision"] == "fp8" and opts["fp8_param_gather"] is True
    assert opts["grad_dtype"] == "bf16" and opts["sharding"] == "distributed-optimizer"
    assert opts["sequence_parallel"] and opts["tp_comm_overlap"]
    assert "vocab_size" not in opts and opts["seq_length"] == 8192
    j = job(model, **opts)
    assert j.layout.d == 64 // (4 * 8)


def test_perf_recipe_gpt_oss_gb200_reads_its_helpers():
    """perf_recipes/gpt_oss/gb200/gpt_oss.py:181-202 on recipes/gpt_oss/h100/gpt_oss.py:162
    (openai/gpt-oss-120b): EP 64, TP 1, PP 1, MBS 4, GBS 1280, selective recompute of
    layernorm and moe_act, CommOverlapConfig(tp_comm_overlap=False) with
    overlap_moe_expert_parallel_comm True; _benchmark_common's bf16 gradient reduction."""
    model, opts, notes = _opts("gpt_oss_120b_pretrain_64gpu_gb200_bf16_config")
    assert model == "gpt-oss-120b"
    assert (opts["e"], opts["t"], opts["p"], opts["world_size"]) == (64, 1, 1, 64)
    assert (opts["micro_batch_size"], opts["global_batch_size"]) == (4, 1280)
    assert opts["recompute"] == "selective"
    assert set(opts["recompute_modules"]) == {"layernorm", "moe_act"}
    assert opts["overlap_moe_expert_parallel_comm"] is True and opts["tp_comm_overlap"] is False
    assert opts["grad_dtype"] == "bf16"
    assert "vocab_size" not in opts              # gpt-oss's own, not the NullTokenizer's 32000
    job(model, **opts, _notes=tuple(notes))


def test_perf_recipe_unmodelled_settings_are_said():
    """perf_recipes/llama/gb200/llama3.py:257-288 (Megatron-FSDP optim_grads_params, CPU
    offloading of 40 layers) and :71-89 (CUDA graph "local", scope full_iteration: counted
    as full_iteration, memsym.terms.cuda_graphs, what it cannot size said): each said in a
    note or counted, none silently dropped."""
    _, opts, notes = _opts("llama3_70b_pretrain_64gpu_gb200_fp8cs_config")
    assert opts["sharding"] == "fsdp" and opts["micro_batch_size"] == 2
    assert any("cpu_offloading of 40 layers" in n for n in notes)
    _, opts, notes = _opts("llama3_8b_pretrain_8gpu_gb200_fp8cs_config")
    assert opts["cuda_graph_impl"] == "full_iteration"
    assert any("CUDA graphs" in n and "not counted" in n for n in notes)


def test_perf_recipe_deepseek_layout_and_its_rebuild():
    """perf_recipes/deepseek/gb300/deepseek_v3.py:31-54: PP 4, VPP 4, EP 64, recompute_modules
    [moe_act] under _deepseek_v3_common's selective granularity (deepseek/common.py:35), the
    layout string given to set_deepseek_v3_pipeline_model_parallel_layout (:54); a PP override
    rebuilds it with the recipe's builder (recipe_runner.py:373 sync_model_pipeline_layout)."""
    _, opts, _ = _opts("deepseek_v3_pretrain_256gpu_gb300_bf16_config")
    assert (opts["p"], opts["v"], opts["e"]) == (4, 4, 64)
    assert opts["pipeline_layout"] == "Et*4|(t*4|)*14tmL"
    assert opts["recompute"] == "selective" and opts["recompute_modules"] == ("moe_act",)
    assert "vocab_size" not in opts               # DeepSeek-V3's own, not the NullTokenizer's
    # EP 32: at EP 64 and PP 8 the expert grid (ETP*EP*PP = 512) does not fit 256 GPUs, which
    # run_recipe.py refuses (scripts/common/benchmark_parallelism.py:106-121)
    _, opts, _ = _opts("deepseek_v3_pretrain_256gpu_gb300_bf16_config",
                       "model.pipeline_model_parallel_size=8",
                       "model.virtual_pipeline_model_parallel_size=2",
                       "model.expert_model_parallel_size=32")
    stages = opts["pipeline_layout"].split("|")
    assert stages[0] == "E" + "t" * 4 and len(stages) == 16 and stages[-1] == "tmL"


@pytest.mark.parametrize("name", ["qwen3_235b_a22b_pretrain_64gpu_gb200_fp8cs_config",
                                  "qwen3_235b_a22b_pretrain_64gpu_gb200_fp8mx_config"])
def test_a_perf_recipe_whose_expert_grid_exceeds_its_gpus_is_refused_saying_why(capsys, name):
    """perf_recipes/qwen/gb200/qwen3_moe.py at 067f987df0, read by hand: the fp8cs recipe
    (:88) sets TP 1 (:101), PP 8 (:102), CP 1 (:103), EP 32 (:105), the fp8mx one (:142) the
    same (:155-159; its docstrings say "PP=8 EP=8", the bf16 recipe's EP, :51); both keep the
    base recipe's ETP 1 (qwen3_235b_a22b_pretrain_config, recipes/qwen/h100/qwen3_moe.py:255).
    The expert grid ETP * EP * PP = 1 * 32 * 8 = 256 GPUs does not divide the 64 of the name,
    and run_recipe.py checks the recipe's own topology (taken before the overrides,
    run_recipe.py:481-484) at the name's GPUs (:354, scripts/common/benchmark_parallelism.py:
    104-121), so Bridge runs it under no override: refused in one line naming the product."""
    assert 64 % (1 * 32 * 8) != 0
    for extra in ([], ["model.expert_model_parallel_size=8", "--world-size", "64"]):
        code, out, err = cli(capsys, "estimate", "--bridge-recipe", name, *extra,
                             "--gpu", "gb200")
        assert (code, out) == (2, "")
        line = err.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in err
        assert "64 GPUs" in line and "ETP * EP * PP (1 * 32 * 8 = 256)" in line
        assert "cannot run under run_recipe.py" in line


def test_perf_recipe_fp4_is_memsyms_fp4(capsys):
    """perf_recipes/llama/gb200/llama3.py:140 _perf_precision("nvfp4") (bf16_with_nvfp4_mixed):
    memsym's fp4 (Transformer Engine NVFP4) with its fp4_param_gather (mixed_precision.py:416):
    NVFP4 parameters, the 16-bit weights outside the linear layers only."""
    code, out, err = cli(capsys, "estimate", "--bridge-recipe",
                         "llama3_8b_pretrain_8gpu_gb200_nvfp4_config")
    assert code == 0 and "NVFP4" in out and "fp4_param_gather" in out
    # Llama 3 8B: 2 x 128256 x 4096 embedding and output rows + 65 RMSNorms of 4096, in bf16
    assert f"weights             {2 * (2 * 128256 * 4096 + 65 * 4096):,}" in out


def test_a_name_both_packages_export_is_the_perf_recipe():
    """perf_recipes/qwen/h100/qwen3_moe.py:35 defines
    qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config, the name of a library recipe
    (recipes/qwen/h100/qwen3_moe.py:146); run_recipe.py --recipe runs the perf one
    (recipe_runner.py:234-243), and so does the name here: its EP overlap (:41) and
    _benchmark_common's model vocabulary (perf_recipes/_common.py:51, use_tokenizer_vocab_size
    False); the library one, named by its module path, has neither."""
    perf = read_bridge_recipe("qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config")
    library = read_bridge_recipe("recipes.qwen.h100.qwen3_moe."
                                 "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config")
    assert perf["source"].startswith("src/megatron/bridge/perf_recipes/qwen/h100/qwen3_moe.py:35")
    assert library["source"].startswith("src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py:146")
    assert perf["values"]["comm_overlap.overlap_moe_expert_parallel_comm"] is True
    assert perf["values"]["tokenizer.use_tokenizer_vocab_size"] is False
    assert not library["values"].get("comm_overlap.overlap_moe_expert_parallel_comm")
    assert library["values"]["tokenizer.use_tokenizer_vocab_size"] is True
    assert any(library["recipe"] in n for n in bridge_job_options(perf)[2])   # the other named
    assert any("runs the performance recipe" in n for n in bridge_job_options(library)[2])


def test_perf_recipe_built_on_another_and_what_is_not_read():
    """perf_recipes/llama/b200/llama3.py:514-516: the 64-GPU recipe is the 8-GPU one with
    _with_global_batch_size(..., 1024) (llama/common.py:44-46); _benchmark_common's
    ``if hasattr(cfg.model, ...)`` (perf_recipes/_common.py:67) asks a field no recipe sets,
    so it is listed with its file:line, not guessed."""
    small = read_bridge_recipe("llama3_8b_pretrain_8gpu_b200_bf16_config")
    big = read_bridge_recipe("llama3_8b_pretrain_64gpu_b200_bf16_config")
    assert big["values"]["train.global_batch_size"] == 1024 and big["world_size"] == 64
    assert {k: v for k, v in big["values"].items() if small["values"].get(k) != v} == \
        {"train.global_batch_size": 1024}
    assert any(c.startswith("perf_recipes/_common.py:67: if hasattr") for c in big["computed"])


def test_perf_recipe_inherits_its_base_flex_dispatcher():
    """recipes/deepseek/h100/deepseek_v3.py:159-160 sets moe_token_dispatcher_type "alltoall"
    with backend "hybridep" and ends (:256) in apply_flex_dispatcher_backend, which turns the
    dispatcher "flex" (training/flex_dispatcher_backend.py:84) on the GPUs the perf recipes
    target; the perf recipes start from that config (deepseek_v3_pretrain_config), the B200
    MXFP8 one then naming DeepEP (perf_recipes/deepseek/b200/deepseek_v3.py:141), the GB200
    BF16 one keeping HybridEP (Megatron-Bridge 067f987df0).  Neither sets the dispatcher
    type itself, so the base's call is what makes them flex."""
    for name, backend in (("deepseek_v3_pretrain_256gpu_b200_fp8mx_config", "deepep"),
                          ("deepseek_v3_pretrain_256gpu_gb200_bf16_config", "hybridep")):
        reading = read_bridge_recipe(name)
        assert reading["values"]["model.moe_token_dispatcher_type"] == "alltoall"
        assert reading["values"]["model.moe_flex_dispatcher_backend"] == backend
        assert any(c.startswith("recipes/deepseek/h100/deepseek_v3.py:256: "
                                "apply_flex_dispatcher_backend") for c in reading["computed"])
        assert _opts(name)[1]["moe_dispatcher"] == backend
    # GPT-OSS's base sets backend "deepep" beside "alltoall" and never applies it
    # (recipes/gpt_oss/h100/gpt_oss.py:80-81): the all-to-all dispatcher stays
    assert _opts("gpt_oss_120b_pretrain_64gpu_b200_bf16_config")[1]["moe_dispatcher"] == "alltoall"


# recipes/nemotronh/h100/nemotron_3_nano.py at Megatron-Bridge 067f987df0, read by hand
# (legacy name nemotron_3_nano_pretrain_config, recipes/nemotronh/nemotron_3_nano.py:29):
# :118-125 HybridModelProvider(TP 1, PP 1, CP 1, SP False, ETP 1, EP 8); :131 seq 8192;
# :140-141 flex dispatcher, HybridEP; :146-147 GBS 1024, MBS 1; :155-156 TE CUDA graphs of
# attn and mamba (utils/cuda_graph.py:77-86); :170-171 selective recompute of moe, layernorm;
# :192-198 fp32 Adam states, not precision-aware, bf16 grad reduce; 8 GPUs (its name).
def test_nemotron_3_nano_recipe_reads_its_layout_and_settings():
    model, opts, _ = bridge_job_options(read_bridge_recipe("nemotron_3_nano_pretrain_config"))
    assert model == "nemotron-3-nano"
    assert (opts["t"], opts["p"], opts["c"], opts["e"], opts["t_e"]) == (1, 1, 1, 8, 1)
    assert opts["sequence_parallel"] is False and opts["world_size"] == 8
    assert (opts["micro_batch_size"], opts["global_batch_size"], opts["seq_length"]) == (
        1, 1024, 8192)
    assert opts["recompute"] == "selective" and opts["recompute_modules"] == ("moe", "layernorm")
    assert (opts["cuda_graph_impl"], opts["cuda_graph_modules"]) == (
        "transformer_engine", ("attn", "mamba"))
    assert opts["moe_dispatcher"] == "hybridep" and opts["precision"] == "bf16"
    assert opts["grad_dtype"] == "bf16" and opts["precision_aware"] is False
    # :80-98: the provider's architecture keywords are the preset's (built from them)
    assert (opts["num_layers"], opts["hidden_size"], opts["num_experts"],
            opts["moe_router_topk"], opts["moe_ffn_hidden_size"]) == (52, 2688, 128, 6, 1856)


def test_nemotron_3_nano_recipe_estimate_runs(capsys):
    """At its 8 GPUs EP 8 leaves one expert data-parallel rank, so each GPU keeps the fp32 main
    params and both Adam moments (12 bytes) of its 128 / 8 = 16 experts in each of the 23 MoE
    layers of the pattern (:80), each expert fc1 2688 x 1856 and fc2 1856 x 2688 (squared ReLU,
    no gate): 23 * 16 * 2 * 2688 * 1856 * 12 bytes; it does not fit an 80 GB H100 (exit 1).
    On 16 GPUs (the convergence workload of :189-191, expert DP 2) it does (exit 0)."""
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", "nemotron_3_nano_pretrain_config",
                         "--gpu", "h100", "--json")
    data = json.loads(out)
    assert code == 1 and data["fits"] is False
    assert data["bytes"]["expert_optimizer"] == 23 * 16 * 2 * 2688 * 1856 * 12
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", "nemotron_3_nano_pretrain_config",
                         "--gpu", "h100", "--world-size", "16")
    assert code == 0, err


# recipes/nemotronh/h100/nemotron_3_super.py at Megatron-Bridge 067f987df0, read by hand: the
# legacy name nemotron_3_super_pretrain_config returns _nemotron_3_super_pretrain_64gpu_h100_
# bf16_config() (recipes/nemotronh/nemotron_3_super.py:32-34), built on the 16-GPU recipe
# (:171): :175-182 TP 1, PP 2, CP 1, SP False, ETP 1, EP 32; :186-191 seq 4096, GBS 1280,
# MBS 1; :193-194 flex dispatcher, HybridEP; :217-220 selective recompute of layernorm,
# moe_act, moe, core_attn; :222-226 precision-aware optimizer (fp16 main params, bf16
# moments); :44 the model from nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16; 64 GPUs.
def test_nemotron_3_super_recipe_reads_its_layout_and_settings():
    model, opts, _ = bridge_job_options(read_bridge_recipe("nemotron_3_super_pretrain_config"))
    assert model == "nemotron-3-super"
    assert (opts["t"], opts["p"], opts["c"], opts["e"], opts["t_e"]) == (1, 2, 1, 32, 1)
    assert opts["sequence_parallel"] is False and opts["world_size"] == 64
    assert (opts["micro_batch_size"], opts["global_batch_size"], opts["seq_length"]) == (
        1, 1280, 4096)
    assert opts["recompute"] == "selective" and opts["recompute_modules"] == (
        "layernorm", "moe_act", "moe", "core_attn")
    assert opts["moe_dispatcher"] == "hybridep" and opts["precision"] == "bf16"
    assert opts["precision_aware"] is True
    # the 16-GPU recipe the perf recipes start from (perf_recipes/nemotronh/common.py:23-25):
    # :47-54 TP 8, SP, EP 16; :68 the alltoall dispatcher
    model, opts, _ = bridge_job_options(read_bridge_recipe(
        "nemotron_3_super_pretrain_16gpu_h100_bf16_config"))
    assert model == "nemotron-3-super"
    assert (opts["t"], opts["e"], opts["sequence_parallel"], opts["world_size"]) == (
        8, 16, True, 16)
    assert opts["moe_dispatcher"] == "alltoall"


def test_nemotron_3_super_recipe_estimate_runs(capsys):
    code, out, err = cli(capsys, "estimate", "--bridge-recipe", "nemotron_3_super_pretrain_config",
                         "--gpu", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["fits"] is True


def test_a_perf_recipe_keeps_the_models_vocabulary_unpadded():
    """The performance recipes set ``tokenizer.use_tokenizer_vocab_size = False``
    (Megatron-Bridge 067f987df0 ``perf_recipes/_common.py:51``), so ``training/setup.py:762-784``
    returns the model's own vocabulary with ``should_pad_vocab`` False and the provider builds
    exactly that many rows (``models/gpt_provider.py:266-271``).  Llama 3 70B at TP 4: 128,256
    rows where Megatron-LM's padding (to a multiple of 128 x 4) would build 128,512, so each
    first- and last-stage GPU holds (128,512 - 128,256) x 8,192 / 4 = 524,288 parameters fewer
    than the padded count.  A TP that does not divide the unpadded rows is refused, as
    Megatron-core's vocab-parallel embedding refuses it (tensor_parallel/utils.py:118)."""
    model, opts, notes = bridge_job_options(
        read_bridge_recipe("llama3_70b_pretrain_64gpu_h100_bf16_config"))
    assert opts["t"] == 4 and any("unpadded" in note for note in notes)
    unpadded = job(model, **opts)
    padded = job(model, **{**opts, "make_vocab_size_divisible_by": 128})
    for stage in (0, opts["p"] - 1):
        drop = (job_stage_parameters(padded, stage).per_gpu
                - job_stage_parameters(unpadded, stage).per_gpu)
        assert drop == (128_512 - 128_256) * 8_192 // 4
    # the pretrain recipe takes the tokenizer's vocabulary and pads it (recipes/common.py:114)
    _, base, _ = bridge_job_options(read_bridge_recipe("llama3_70b_pretrain_config"))
    assert base.get("make_vocab_size_divisible_by") != 1
    reading = read_bridge_recipe("qwen3_8b_pretrain_config")
    reading["values"] = {**reading["values"], "tokenizer.use_tokenizer_vocab_size": False,
                         "model.tensor_model_parallel_size": 3}
    with pytest.raises(InvalidValueError, match="does not divide the vocabulary of 151936"):
        bridge_job_options(reading)
