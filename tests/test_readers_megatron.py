"""Tests of memsym.readers.megatron and memsym.readers.launch_script.

Expected values are independent of memsym's counting code: parameter counts come from the literal
port of Megatron-LM's ``compute_weight_and_optimizer_memory`` (tests/framework_ports.py) plus hand
arithmetic for the modules that estimator leaves out (linear biases, the learned position table,
q/k norms, the MTP layer's projection and norms), each named where it is added; the model values
fed to the port are typed here from the scripts, not taken from the reader.  The six launch
scripts are NVIDIA/Megatron-LM's own, verbatim (SCRIPTS at the end of this file).
"""

from fractions import Fraction

import pytest

import framework_ports as port
from memsym.errors import InvalidValueError, MemsymError, UnknownNameError
from memsym.model import Architecture, parameter_count
from memsym.readers import (parse_launch_script, parse_moe_layer_freq, read_argument_file,
                            read_launch_script, read_megatron_args)
from memsym.readers.launch_script import LaunchScriptError


def port_count(kw, padded_vocab):
    """Parameters of the model Megatron builds, by the ported estimator at t = p = e = 1 (18 B/param
    without the distributed optimizer, so bytes / 18 is the count).  The padded vocabulary is passed
    in (divisible_by = 1 so that the port does not pad again)."""
    arch = Architecture(**kw, vocab_size=padded_vocab, make_vocab_size_divisible_by=1)
    args = port.lm_args(arch, s=kw.get("max_position_embeddings") or 1, b=1,
                        distributed_optimizer=False)
    nbytes = port.lm_compute_weight_and_optimizer_memory(args)
    assert nbytes % 18 == 0
    return int(nbytes // 18)


def pad(v, multiple):
    # megatron/core/tokenizers/utils/build_tokenizer.py:vocab_size_with_padding (ported)
    return port._vocab_size_with_padding(v, type("A", (), {"make_vocab_size_divisible_by": multiple,
                                                           "tensor_model_parallel_size": 1})())


# Model values typed from each script (h, heads, ...), the padded vocabulary Megatron builds
# (tokenizer vocabulary padded to a multiple of make_vocab_size_divisible_by * TP), and the
# parameters the ported estimator does not count, by hand.
def _gpt_extra(L, h, f, S):
    # biases of QKV (3h), the output projection (h), fc1 (f) and fc2 (h) per layer, and the
    # learned position table S x h (megatron/core/models/gpt/gpt_model.py: LanguageModelEmbedding)
    return L * (3 * h + h + f + h) + S * h


EXPECTED = {
    "gpt3_175b": dict(
        kw=dict(num_layers=96, hidden_size=12288, num_attention_heads=96),
        vocab=pad(50257, 128 * 8), extra=_gpt_extra(96, 12288, 4 * 12288, 2048),
        added=["--world-size", "1024", "--vocab-size", "50257"], t=8),
    "gpt_345m_mp": dict(
        kw=dict(num_layers=24, hidden_size=1024, num_attention_heads=16),
        vocab=pad(50257, 128 * 2), extra=_gpt_extra(24, 1024, 4096, 1024),
        added=["--vocab-size", "50257"], t=2),
    "llama3_8b_fp8": dict(
        kw=dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                kv_channels=128, ffn_hidden_size=14336, swiglu=True, normalization="RMSNorm",
                untie_embeddings_and_output_weights=True, add_bias_linear=False),
        vocab=pad(128256, 128), extra=0, added=[], t=1),
    "mixtral_8x7b": dict(
        kw=dict(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8,
                ffn_hidden_size=14336, swiglu=True, normalization="RMSNorm",
                untie_embeddings_and_output_weights=True, add_bias_linear=False, num_experts=8,
                moe_router_topk=2, moe_ffn_hidden_size=14336),
        vocab=pad(32000, 128), extra=0, added=["--world-size", "64", "--vocab-size", "32000"], t=1),
    "deepseek_v3_mfsdp": dict(
        kw=dict(num_layers=61, hidden_size=7168, num_attention_heads=128, kv_channels=128,
                ffn_hidden_size=18432, swiglu=True, normalization="RMSNorm",
                untie_embeddings_and_output_weights=True, add_bias_linear=False, num_experts=256,
                moe_router_topk=8, moe_ffn_hidden_size=2048,
                moe_shared_expert_intermediate_size=2048, moe_layer_freq=(0,) * 3 + (1,) * 58,
                multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                qk_pos_emb_head_dim=64, v_head_dim=128, mtp_num_layers=1),
        # DeepSeek-V3's config.json vocab_size 129280 = 3232 * 40: no padding at TP = 1.
        # MTP layer (megatron/core/transformer/multi_token_prediction.py): eh_proj 2h -> h
        # (bias=False) and three RMSNorms (enorm, hnorm, final_layernorm), not in the estimator.
        vocab=pad(129280, 3232), extra=2 * 7168 * 7168 + 3 * 7168,
        added=["--world-size", "256"], t=1),
    "qwen3_30b_a3b": dict(
        kw=dict(num_layers=48, hidden_size=2048, num_attention_heads=32, num_query_groups=4,
                kv_channels=128, ffn_hidden_size=6144, swiglu=True, normalization="RMSNorm",
                untie_embeddings_and_output_weights=True, add_bias_linear=False, num_experts=128,
                moe_router_topk=8, moe_ffn_hidden_size=768),
        # --qk-layernorm: RMSNorms of size kv_channels on Q and K in every layer
        # (megatron/core/transformer/attention.py), not in the estimator.
        vocab=pad(151936, 128 * 4), extra=48 * 2 * 128, added=["--world-size", "8"], t=4),
}


def job_of(key):
    argv = read_launch_script(SCRIPTS[key][2]) + EXPECTED[key]["added"]
    return read_megatron_args(argv)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_six_scripts_exact_parameter_count(key):
    exp = EXPECTED[key]
    job = job_of(key)
    arch = Architecture(**job.architecture)
    assert job.layout["t"] == exp["t"]
    expected = port_count(exp["kw"], exp["vocab"]) + exp["extra"]
    assert parameter_count(arch, t=job.layout["t"], pad_vocab=True) == expected


def test_gpt3_175b_hand_count_and_semantics():
    # 96 layers of 12h^2 + 13h, padded vocabulary 51200 (50257 -> multiple of 128*8), position
    # table 2048 x h, final LayerNorm 2h: 174,615,846,912.
    h = 12288
    assert 96 * (12 * h * h + 13 * h) + 51200 * h + 2048 * h + 2 * h == 174_615_846_912
    job = job_of("gpt3_175b")
    assert parameter_count(Architecture(**job.architecture), t=8, pad_vocab=True) == 174_615_846_912
    assert job.layout == {"t": 8, "p": 16, "c": 1, "e": 1, "t_e": 8, "sequence_parallel": False,
                          "first_stage_layers": None, "last_stage_layers": None, "v": None,
                          "world_size": 1024, "d": 8}
    assert job.architecture["add_bias_linear"] is True
    assert job.architecture["position_embedding_type"] == "learned_absolute"
    assert job.precision["params_dtype"] == "fp16" and job.precision["grad_dtype"] == "fp16"
    assert job.optimizer["use_distributed_optimizer"] is False
    assert job.training["attention_backend"] == "auto" and job.training["flash_attention"]
    assert job.training["hidden_dropout"] == Fraction(1, 10)
    assert job.training["num_microbatches"] == 1536 // 8
    assert "--lr" in job.ignored and "--data-path" in job.ignored
    assert len(job.ignored) == len(set(job.ignored))
    # the script's ${TRAINING_ARGS[@]} splits the quoted schedule; Megatron would refuse it
    assert any("step-batch-size-schedule" in n for n in job.notes)


def test_gpt3_without_world_size_says_to_add_it():
    argv = read_launch_script(SCRIPTS["gpt3_175b"][2]) + ["--vocab-size", "50257"]
    with pytest.raises(InvalidValueError, match="--world-size"):
        read_megatron_args(argv)      # torchrun gives 8 GPUs, t*p = 128


def test_gpt3_without_vocab_says_to_add_it():
    argv = read_launch_script(SCRIPTS["gpt3_175b"][2]) + ["--world-size", "1024"]
    with pytest.raises(InvalidValueError, match="add --vocab-size"):
        read_megatron_args(argv)


def test_345m_world_size_from_torchrun():
    job = job_of("gpt_345m_mp")
    assert job.layout["world_size"] == 8 and job.layout["d"] == 2     # 8 / (t2 * p2)
    assert job.layout["sequence_parallel"] is True
    assert job.training["num_microbatches"] == 16 // (4 * 2)


def test_llama3_fp8_precision_rules():
    job = job_of("llama3_8b_fp8")
    p = job.precision
    assert p["params_dtype"] == "bf16"
    assert p["grad_reduce_in_fp32"] is False and p["grad_dtype"] == "bf16"   # --grad-reduce-in-bf16
    assert (p["fp8"], p["fp8_recipe"], p["fp8_param_gather"]) == ("hybrid", "delayed", True)
    assert job.optimizer["use_distributed_optimizer"] and job.optimizer["overlap_param_gather"]
    assert job.layout["sequence_parallel"] is False          # t = 1 turns it off
    assert job.training["attention_backend"] == "fused"
    assert job.architecture["vocab_size"] == 128256          # NullTokenizer: --vocab-size exactly


def test_mixtral_moe_and_defaults():
    job = job_of("mixtral_8x7b")
    a = job.architecture
    assert (a["num_experts"], a["moe_router_topk"], a["moe_ffn_hidden_size"]) == (8, 2, 14336)
    assert a["moe_router_bias"] is False and a["num_query_groups"] == 8
    assert (job.layout["p"], job.layout["e"], job.layout["d"]) == (4, 8, 16)
    assert job.precision["grad_reduce_in_fp32"] is True      # bf16 forces fp32 accumulation
    assert any("--moe-ffn-hidden-size absent" in n for n in job.notes)


def test_deepseek_v3_pattern_mla_fsdp():
    job = job_of("deepseek_v3_mfsdp")
    a = job.architecture
    assert a["moe_layer_freq"] == (0, 0, 0) + (1,) * 58
    assert a["multi_latent_attention"] and a["q_lora_rank"] == 1536 and a["mtp_num_layers"] == 1
    assert a["vocab_size"] == 129280
    o = job.optimizer
    assert o["use_megatron_fsdp"] and o["data_parallel_sharding_strategy"] == "optim_grads_params"
    assert o["megatron_fsdp_main_grads_dtype"] == "bf16"
    r = job.training["recompute"]
    assert r["granularity"] == "selective" and r["modules"] == ("mlp", "moe", "mla_up_proj",
                                                                "layernorm")
    assert job.training["moe_router_enable_expert_bias"] is True
    # --use-flash-attn is parsed and read by nothing (arguments.py:2910 at d98e8a64dd): the
    # backend stays --attention-backend's default, auto
    assert job.training["attention_backend"] == "auto"


def test_qwen3_reads_config_without_command():
    s = parse_launch_script(SCRIPTS["qwen3_30b_a3b"][2])
    assert s.program is None and "CHECKPOINT" in s.unset
    job = job_of("qwen3_30b_a3b")
    a = job.architecture
    assert a["qk_layernorm"] and a["num_query_groups"] == 4 and a["position_embedding_type"] == "rope"
    assert (job.layout["t"], job.layout["e"], job.layout["d"]) == (4, 2, 2)


# ----------------------------------------------------------------------------------------------
# Megatron's defaults and validate_args rules on small commands
# ----------------------------------------------------------------------------------------------

BASE = ["--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "8",
        "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "1",
        "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000"]


def read(*extra, base=BASE):
    return read_megatron_args(list(base) + list(extra))


def test_defaults_are_megatrons():
    job = read()
    a = job.architecture
    assert a["add_bias_linear"] is True and a["position_embedding_type"] == "learned_absolute"
    assert a["ffn_hidden_size"] == 4 * 64 and a["normalization"] == "LayerNorm"
    assert "num_query_groups" not in a                      # no GQA without its flag
    assert a["untie_embeddings_and_output_weights"] is False
    assert job.precision["params_dtype"] == "fp32"
    assert job.optimizer["use_distributed_optimizer"] is False
    assert job.training["recompute"]["granularity"] is None
    assert job.training["hidden_dropout"] == job.training["attention_dropout"] == Fraction(1, 10)
    assert job.layout["world_size"] is None and "d" not in job.layout


def test_swiglu_ffn_rule_as_megatron_computes_it():
    base = [w for w in BASE]
    base[base.index("--hidden-size") + 1] = "4096"
    base[base.index("--num-attention-heads") + 1] = "32"
    job = read("--swiglu", base=base)
    # arguments.py validate_args, verbatim: int((4 * args.hidden_size * 2 / 3) / 64) * 64
    assert job.architecture["ffn_hidden_size"] == int((4 * 4096 * 2 / 3) / 64) * 64 == 10880


def test_padded_vocab_size_is_the_rows_megatron_builds():
    # gpt_builders.py:89 builds GPTModel(vocab_size=args.padded_vocab_size); build_tokenizer.py
    # (:113-114, :149-152) pads the tokenizer's vocabulary only while it is None: 1002 rows, not
    # 1000 padded to a multiple of 128 x 2
    kw = dict(num_layers=4, hidden_size=64, num_attention_heads=8, max_position_embeddings=128)
    extra = _gpt_extra(4, 64, 4 * 64, 128)
    for given in (["--padded-vocab-size", "1002"],
                  ["--no-pad-vocab-size", "--padded-vocab-size", "1002"]):
        job = read(*given, "--tensor-model-parallel-size", "2")
        arch = Architecture(**job.architecture)
        assert parameter_count(arch, t=2, pad_vocab=True) == port_count(kw, 1002) + extra
        assert job.ignored == () and any("--padded-vocab-size 1002" in n for n in job.notes)
    plain = Architecture(**read("--tensor-model-parallel-size", "2").architecture)
    assert parameter_count(plain, t=2, pad_vocab=True) == port_count(kw, 1024) + extra


def test_unpadded_vocab_rows_must_split_over_tp():
    # tensor_parallel/utils.py:118: divide(global_vocab_size, world_size) asserts
    with pytest.raises(InvalidValueError, match="size 4 does not divide the vocabulary of 1002"):
        read("--padded-vocab-size", "1002", "--tensor-model-parallel-size", "4")
    # without the rows or a tokenizer to pad, GPTModel gets vocab_size=None (a checkpoint's
    # arguments set it, --use-checkpoint-args, checkpointing.py:2349)
    with pytest.raises(InvalidValueError, match="add --padded-vocab-size N"):
        read("--no-pad-vocab-size")


def test_max_position_defaults_to_seq_with_note_and_is_enforced():
    base = BASE[:8] + BASE[10:]     # without "--max-position-embeddings 128"
    job = read(base=base)
    assert job.architecture["max_position_embeddings"] == 128
    assert any("--max-position-embeddings absent" in n for n in job.notes)
    with pytest.raises(InvalidValueError, match="max-position-embeddings"):
        read("--seq-length", "256")


def test_gqa_only_with_its_flag():
    assert "num_query_groups" not in read("--num-query-groups", "2").architecture
    assert read("--group-query-attention", "--num-query-groups", "2").architecture[
        "num_query_groups"] == 2
    # argparse default of --num-query-groups is 1
    assert read("--group-query-attention").architecture["num_query_groups"] == 1


def test_bf16_forces_fp32_grad_reduce_unless_bf16_reduce():
    assert read("--bf16").precision["grad_dtype"] == "fp32"
    assert read("--bf16", "--grad-reduce-in-bf16").precision["grad_dtype"] == "bf16"
    assert read("--fp16").precision["grad_dtype"] == "fp16"
    assert read("--fp16", "--accumulate-allreduce-grads-in-fp32").precision["grad_dtype"] == "fp32"


def test_conflicting_and_invalid_combinations():
    cases = [
        (["--bf16", "--fp16"], "mutually exclusive"),
        (["--recompute-activations", "--recompute-method", "uniform"], "selective"),
        (["--recompute-granularity", "full"], "recompute-method"),
        (["--recompute-granularity", "selective", "--recompute-num-layers", "1"], "absent"),
        (["--overlap-param-gather", "--overlap-grad-reduce"], "distributed-optimizer"),
        (["--use-distributed-optimizer", "--overlap-param-gather"], "overlap-grad-reduce"),
        (["--fp8-format", "hybrid", "--fp8-param-gather"], "distributed optimizer"),
        (["--use-precision-aware-optimizer"], "use-distributed-optimizer"),
        (["--group-query-attention", "--num-query-groups", "3"], "divide"),
        (["--use-torch-fsdp2"], "untie"),
        (["--tensor-model-parallel-size", "2", "--tp-comm-overlap"], "sequence-parallel"),
        (["--no-position-embedding"], "deprecated"),
        (["--moe-latent-size", "16"], "needs routed experts"),
        (["--num-experts", "6", "--expert-model-parallel-size", "4"], "multiple"),
        (["--context-parallel-size", "3"], "2 x"),
        (["--recompute-granularity", "full", "--recompute-method", "uniform",
          "--recompute-num-layers", "5"], "exceeds"),
    ]
    for extra, match in cases:
        with pytest.raises(InvalidValueError, match=match):
            read(*extra)


def test_optimizer_and_fsdp_settings():
    o = read("--use-megatron-fsdp").optimizer
    assert o["data_parallel_sharding_strategy"] == "optim_grads_params"     # CLI default
    assert o["megatron_fsdp_main_params_dtype"] == "fp32"
    o = read("--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim").optimizer
    assert o["data_parallel_sharding_strategy"] == "optim"
    assert read("--use-torch-fsdp2", "--untie-embeddings-and-output-weights").optimizer[
        "use_torch_fsdp2"]
    p = read("--bf16", "--use-distributed-optimizer", "--use-precision-aware-optimizer",
             "--main-params-dtype", "fp16", "--exp-avg-dtype", "bf16").precision
    assert (p["main_params_dtype"], p["exp_avg_dtype"], p["exp_avg_sq_dtype"]) == ("fp16", "bf16",
                                                                                   "fp32")
    # optimizer_config.py:468-480: OptimizerConfig asserts fp32 without the PA optimizer
    with pytest.raises(InvalidValueError, match="--exp-avg-dtype needs --use-precision-aware"):
        read("--bf16", "--exp-avg-dtype", "bf16")
    assert read("--ddp-bucket-size", "40000000").optimizer["ddp_bucket_size"] == 40_000_000
    with pytest.raises(UnknownNameError, match="optim_grads"):
        read("--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grad")


def test_recompute_family():
    r = read("--recompute-activations").training["recompute"]
    assert r == {"granularity": "selective", "method": None, "num_layers": None,
                 "modules": ("core_attn",)}                  # TC default [core_attn]
    cfg_args = ("--recompute-granularity", "full", "--recompute-method", "block",
                "--recompute-num-layers", "2")
    cfg = read(*cfg_args)
    r = cfg.training["recompute"]
    assert (r["method"], r["num_layers"], r["modules"]) == ("block", 2, ())
    # the job counts it: only the first 2 layers of each chunk checkpointed
    from memsym.readers.jobs import megatron_job

    tr = megatron_job(read(*cfg_args, "--world-size", "1")).training
    assert (tr.recompute, tr.recompute_method, tr.recompute_num_layers) == ("full", "block", 2)
    with pytest.raises(UnknownNameError, match="core_attn"):
        read("--recompute-granularity", "selective", "--recompute-modules", "core_atn")
    with pytest.raises(InvalidValueError, match="mla_up_proj"):
        read("--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj")


def test_vpp_both_spellings():
    base = ["--pipeline-model-parallel-size", "2"]
    # (L / p) / n = (4 / 2) / 1 = 2 virtual stages
    assert read(*base, "--num-layers-per-virtual-pipeline-stage", "1").layout["v"] == 2
    assert read(*base, "--num-virtual-stages-per-pipeline-rank", "2").layout["v"] == 2
    assert read(*base, "--virtual-pipeline-model-parallel-size", "2").layout["v"] == 2
    assert read(*base, "--num-virtual-stages-per-pipeline-rank", "1").layout["v"] is None
    with pytest.raises(InvalidValueError, match="one of"):
        read(*base, "--num-layers-per-virtual-pipeline-stage", "1",
             "--num-virtual-stages-per-pipeline-rank", "2")
    with pytest.raises(InvalidValueError, match="divisible"):
        read(*base, "--num-layers-per-virtual-pipeline-stage", "3")
    with pytest.raises(InvalidValueError, match="> 1"):
        read("--num-virtual-stages-per-pipeline-rank", "2")


def test_misspelt_argument_is_an_error_with_a_suggestion():
    with pytest.raises(UnknownNameError, match="did you mean --num-layers") as exc:
        read("--num-layer", "4")
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, MemsymError)
    with pytest.raises(UnknownNameError, match="--disable-bias-linear"):
        read("--disable-bias-liner")


def test_values_are_never_positionals():
    with pytest.raises(InvalidValueError, match="unexpected word '2048'"):
        read("--bf16", "2048")                         # --bf16 takes no value
    with pytest.raises(InvalidValueError, match="needs a value"):
        read("--lr")
    job = read("--lr", "-1e-4")                          # a negative number is a value
    assert "--lr" in job.ignored
    assert read("--tensor-model-parallel-size=2").layout["t"] == 2


def test_bounded_whole_numbers():
    for bad in ("4.5", "-3", "0", "1e3", "10000000", "four"):
        with pytest.raises(InvalidValueError, match="--num-layers"):
            read("--num-layers", bad)
    with pytest.raises(InvalidValueError, match="--world-size"):
        read("--world-size", str(2**41))


def test_a_value_ending_in_py_is_not_a_program():
    assert "--data-path" in read("--data-path", "corpus.py").ignored


def test_torchrun_prefix_gives_world_size():
    job = read_megatron_args(["torchrun", "--nproc_per_node", "4", "--nnodes", "2",
                              "pretrain_gpt.py"] + BASE)
    assert job.layout["world_size"] == 8 and job.layout["d"] == 8
    assert read_megatron_args(["torchrun", "--nproc_per_node", "4", "pretrain_gpt.py", *BASE,
                               "--world-size", "16"]).layout["world_size"] == 16


def test_tokenizer_vocab():
    base = BASE[:-4]
    with pytest.raises(InvalidValueError, match="NullTokenizer needs --vocab-size"):
        read("--tokenizer-type", "NullTokenizer", base=base)
    with pytest.raises(InvalidValueError, match="add --vocab-size"):
        read("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "/my/tok", base=base)
    job = read("--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "v.json", base=base)
    assert job.architecture["vocab_size"] == 50257
    job = read("--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
               "meta-llama/Meta-Llama-3-8B", base=base)
    assert job.architecture["vocab_size"] == 128256 and any("len(tokenizer)" in n for n in job.notes)


# ----------------------------------------------------------------------------------------------
# --moe-layer-freq
# ----------------------------------------------------------------------------------------------

def test_moe_layer_freq_forms():
    assert parse_moe_layer_freq("1") == 1 and parse_moe_layer_freq(2) == 2
    assert parse_moe_layer_freq("[0,1,1]", 3) == (0, 1, 1)
    assert parse_moe_layer_freq("([0]*3+[1]*58)", 61) == (0,) * 3 + (1,) * 58
    assert parse_moe_layer_freq("[0]*3+[1]*58") == (0,) * 3 + (1,) * 58
    assert parse_moe_layer_freq("([1]*3+[0]*2)*2") == (1, 1, 1, 0, 0) * 2   # Megatron's docstring
    assert parse_moe_layer_freq("2*[1,0]") == (1, 0, 1, 0)


@pytest.mark.parametrize("bad", [
    "__import__('os').system('x')", "[0]*3+[1]*58; rm -rf /", "[0 if 1 else 1]", "[2]*4",
    "[0]*10**9", "[0]*99999999", "[[0]]*2", "([0],[1])", "[0]+1", "[0]*[1]", "[0", "[0]]",
    "(" * 60 + "[0]" + ")" * 60, "[0]*3.5", "0x10", "[-1]"])
def test_moe_layer_freq_refuses_anything_else(bad):
    with pytest.raises(InvalidValueError, match="moe-layer-freq"):
        parse_moe_layer_freq(bad)


def test_moe_layer_freq_length_must_equal_layers():
    with pytest.raises(InvalidValueError, match="61"):
        parse_moe_layer_freq("[0]*3+[1]*57", 61)
    with pytest.raises(InvalidValueError, match="moe-layer-freq"):
        read("--num-experts", "4", "--moe-layer-freq", "[1]*3")


# ----------------------------------------------------------------------------------------------
# launch scripts
# ----------------------------------------------------------------------------------------------

def test_launch_script_real_files_arguments():
    argv = read_launch_script(SCRIPTS["gpt3_175b"][2])
    assert argv[:4] == ["--nproc_per_node", "8", "--nnodes", "1"]       # ${DISTRIBUTED_ARGS[@]}
    assert argv[argv.index("--num-layers") + 1] == "96"
    assert argv[argv.index("--save") + 1] == "$1"                        # $1: never given
    s = parse_launch_script(SCRIPTS["llama3_8b_fp8"][2])
    # "--fp8-format hybrid" inside the array splits on the unquoted ${DTYPE_ARGS[@]}, as in bash;
    # DTYPE="fp8" and TOKENIZER_ARG defaulting to MOCK choose the `if` branches
    assert s.argv[s.argv.index("--fp8-format") + 1] == "hybrid"
    assert s.argv[s.argv.index("--tokenizer-type") + 1] == "NullTokenizer"
    assert "--data-path" not in s.argv and s.nproc_per_node == "8" and s.nnodes == "1"
    s = parse_launch_script(SCRIPTS["deepseek_v3_mfsdp"][2])
    assert s.program == "your_own_megatron_path/pretrain_gpt.py"       # inside $TRAINING_CMD
    assert s.argv.count("--use-distributed-optimizer") == 2              # USE_MEGATRON_FSDP=1 branch
    assert "--profile" not in s.argv                                     # PROFILE=0 branch
    s = parse_launch_script(SCRIPTS["gpt_345m_mp"][2])
    assert any("placeholder" in n for n in s.notes) and "VOCAB_FILE" in s.unset


def test_launch_script_syntax():
    text = r'''#!/bin/bash
# comment
A=1
B="two words"
C=${UNSET_ONE:-"fall back"}
ARR=( --x $A   # trailing comment
      "--y" "$B" )
ARR+=(--z)
N=$(( (A + 3) * 2 ))
if [ "$A" = 1 ] && [ -z "$NOT_SET" ]; then
    ARR+=(--branch yes)
elif [ "$A" = 2 ]; then
    ARR+=(--never)
else
    ARR+=(--never)
fi
cat <<EOF
torchrun pretrain_gpt.py --inside-heredoc
EOF
torchrun --nproc_per_node=$N \
    pretrain_gpt.py "${ARR[@]}" --c "$C" '--lit $A' ${MISSING}
'''
    s = parse_launch_script(text)
    assert s.argv == ["--nproc_per_node=8", "--x", "1", "--y", "two words", "--z", "--branch",
                      "yes", "--c", "fall back", "--lit $A", "${MISSING}"]
    assert s.unset == ("MISSING",) and s.nproc_per_node == "8"


def test_launch_script_refusals_and_bounds():
    with pytest.raises(LaunchScriptError, match="'for' is not read"):
        parse_launch_script("for i in 1 2; do echo; done\npython pretrain_gpt.py")
    with pytest.raises(LaunchScriptError, match="cannot decide"):
        parse_launch_script('if [ -f x ]; then A=1; fi\npython pretrain_gpt.py $A')
    with pytest.raises(LaunchScriptError, match="bytes"):
        parse_launch_script("A=1\n" * 300_000)
    with pytest.raises(LaunchScriptError, match="unterminated"):
        parse_launch_script('A="open')
    with pytest.raises(LaunchScriptError, match="no pretrain"):
        parse_launch_script("echo hello")
    # nothing is run: a command substitution stays text
    s = parse_launch_script("X=$(rm -rf /)\npython pretrain_gpt.py --save $X")
    assert s.argv == ["--save", "$(...)"] and any("rm -rf" in n for n in s.notes)


@pytest.mark.parametrize("text", ["python pretrain_gpt.py >", "A=(--x | y)", "A=(--s=(x)",
                                  "python pretrain_gpt.py $(( 1 +", "X=${A:-${B:-${C", "echo '",
                                  "python pretrain_gpt.py <<EOF\n--never\n"])
def test_launch_script_truncated_or_hostile_input_ends(text):
    # found by fuzzing: each once looped forever or grew without bound
    try:
        parse_launch_script(text)
    except MemsymError:
        pass


def test_launch_script_expansions():
    s = parse_launch_script('''
A=(one two three)
N=${#A[@]}
P=${UNSET:+never}
Q=${A:+set}
export E=exported
unset A
python pretrain_gpt.py --n $N --p "$P" --q $Q --e $E $A
''')
    # `unset A` makes $A known to be empty: bash (env -i) prints no word for it
    assert s.argv == ["--n", "3", "--p", "", "--q", "set", "--e", "exported"]


def test_argument_file(tmp_path):
    f = tmp_path / "args.txt"
    f.write_text("--num-layers 4 --hidden-size 64  # model\n--num-attention-heads 8 \\\n"
                 "--seq-length 128 --micro-batch-size 1 --vocab-size 1000 "
                 "--tokenizer-type NullTokenizer\n")
    job = read_megatron_args(read_argument_file(f))
    assert job.architecture["num_layers"] == 4
    g = tmp_path / "bad.txt"
    g.write_text("--num-layers $L\n")
    with pytest.raises(InvalidValueError, match=r"\$L"):
        read_argument_file(g)


# ================================================================================================
# Fixtures: NVIDIA/Megatron-LM's example launch scripts, verbatim
# ================================================================================================
SCRIPTS = {}  # key -> (path in NVIDIA/Megatron-LM, revision read, the file verbatim)

# NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh at d98e8a64dd
SCRIPTS['gpt3_175b'] = ('examples/gpt3/train_gpt3_175b_distributed.sh', 'd98e8a64dd', r'''#!/bin/bash

# Runs the "175B" parameter model

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
# Change for multinode config
MASTER_ADDR=localhost
MASTER_PORT=29500
NUM_NODES=1
NODE_RANK=0
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

CHECKPOINT_PATH=$1 #<Specify path>
TENSORBOARD_LOGS_PATH=$2 #<Specify path>
VOCAB_FILE=$3 #<Specify path to file>/gpt2-vocab.json
MERGE_FILE=$4 #<Specify path to file>/gpt2-merges.txt
DATA_PATH=$5 #<Specify path and file prefix>_text_document

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE 
    --nnodes $NUM_NODES 
    --master_addr $MASTER_ADDR 
    --master_port $MASTER_PORT
)

GPT_MODEL_ARGS=(
    --num-layers 96 
    --hidden-size 12288 
    --num-attention-heads 96 
    --seq-length 2048 
    --max-position-embeddings 2048 
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

TRAINING_ARGS=(
    --micro-batch-size 1 
    --global-batch-size 1536
    --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536"
    --train-iters 500000
    --weight-decay 0.1 
    --adam-beta1 0.9 
    --adam-beta2 0.95 
    --init-method-std 0.006 
    --clip-grad 1.0 
    --fp16
    --lr 6.0e-5 
    --lr-decay-style cosine 
    --min-lr 6.0e-6
    --lr-warmup-fraction .001 
    --lr-decay-iters 430000 
)

MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 8 
	--pipeline-model-parallel-size 16 
)

DATA_ARGS=(
    --data-path $DATA_PATH 
    --vocab-file $VOCAB_FILE 
    --merge-file $MERGE_FILE 
    --split 949,50,1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --save-interval 10000 
    --eval-interval 1000 
    --save $CHECKPOINT_PATH 
    --load $CHECKPOINT_PATH 
    --eval-iters 10
    --tensorboard-dir $TENSORBOARD_LOGS_PATH 
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
''')

# NVIDIA/Megatron-LM examples/pretrain_gpt_distributed_with_mp.sh at 34ac1ad05e (its last revision; removed from the tree in f2e72c8a16)
SCRIPTS['gpt_345m_mp'] = ('examples/pretrain_gpt_distributed_with_mp.sh', '34ac1ad05e (its last revision; removed from the tree in f2e72c8a16)', r'''#!/bin/bash

# Runs the "345M" parameter model

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
# Change for multinode config
MASTER_ADDR=localhost
MASTER_PORT=6000
NNODES=1
NODE_RANK=0
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))

CHECKPOINT_PATH=<Specify path>
VOCAB_FILE=<Specify path to file>/gpt2-vocab.json
MERGE_FILE=<Specify path to file>/gpt2-merges.txt
DATA_PATH=<Specify path and file prefix>_text_document

DISTRIBUTED_ARGS="
    --nproc_per_node $GPUS_PER_NODE \
    --nnodes $NNODES \
    --node_rank $NODE_RANK \
    --master_addr $MASTER_ADDR \
    --master_port $MASTER_PORT
"

GPT_ARGS="
    --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 \
    --sequence-parallel \
    --num-layers 24 \
    --hidden-size 1024 \
    --num-attention-heads 16 \
    --seq-length 1024 \
    --max-position-embeddings 1024 \
    --micro-batch-size 4 \
    --global-batch-size 16 \
    --lr 0.00015 \
    --train-iters 500000 \
    --lr-decay-iters 320000 \
    --lr-decay-style cosine \
    --min-lr 1.0e-5 \
    --weight-decay 1e-2 \
    --lr-warmup-fraction .01 \
    --clip-grad 1.0 \
    --fp16
"

DATA_ARGS="
    --data-path $DATA_PATH \
    --vocab-file $VOCAB_FILE \
    --merge-file $MERGE_FILE \
    --split 949,50,1
"

OUTPUT_ARGS="
    --log-interval 100 \
    --save-interval 10000 \
    --eval-interval 1000 \
    --eval-iters 10
"

torchrun $DISTRIBUTED_ARGS pretrain_gpt.py \
    $GPT_ARGS \
    $DATA_ARGS \
    $OUTPUT_ARGS \
    --distributed-backend nccl \
    --save $CHECKPOINT_PATH \
    --load $CHECKPOINT_PATH

''')

# NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh at d98e8a64dd
SCRIPTS['llama3_8b_fp8'] = ('examples/llama/train_llama3_8b_h100_fp8.sh', 'd98e8a64dd', r'''#!/bin/bash

# Environment variables for performance tuning
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
#export LOG_LEVEL=${LOG_LEVEL:-INFO}
#export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-19}
#export NVTE_FWD_LAYERNORM_SM_MARGIN=${NVTE_FWD_LAYERNORM_SM_MARGIN:-16}
#export NVTE_BWD_LAYERNORM_SM_MARGIN=${NVTE_BWD_LAYERNORM_SM_MARGIN:-16}
#export NCCL_P2P_NET_CHUNKSIZE=${NCCL_P2P_NET_CHUNKSIZE:-2097152}
#export NCCL_AVOID_RECORD_STREAMS=${NCCL_AVOID_RECORD_STREAMS:-1}

CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fp8"}
TENSORBOARD_LOGS_PATH=${2:-"tensorboard_logs/llama3_8b_fp8"}
TOKENIZER_ARG=${3:-"MOCK"} # Path to tokenizer model, or "MOCK"
DATA_ARG=${4:-"MOCK"}     # Data prefix, or "MOCK"

# Create directories if they don't exist
mkdir -p "$(dirname "$CHECKPOINT_PATH")"
mkdir -p "$(dirname "$TENSORBOARD_LOGS_PATH")"

# Distributed training setup
GPUS_PER_NODE=8
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-29500}
NODE_RANK=${NODE_RANK:-0}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))

# Path to the pretrain_gpt.py script, assuming this script is run from the root of the Megatron-LM repository
PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"

# Fixed model and training parameters
TP_SIZE=1     
CP_SIZE=1     
PP_SIZE=1     
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32  
DTYPE="fp8"
SEQ_LENGTH=8192
MAX_POSITION_EMBEDDINGS=8192

# Data cache path (useful for both mock and real data)
DATA_CACHE_PATH="${PWD}/benchmark_cache_llama3_8b_fp8"
mkdir -p "$DATA_CACHE_PATH"

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $MAX_POSITION_EMBEDDINGS
    --position-embedding-type rope
    --rotary-base 1000000 
    --rotary-percent 1.0
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --normalization RMSNorm
    --init-method-std 0.0134
    --attention-backend fused
    --apply-layernorm-1p 
    --untie-embeddings-and-output-weights
    --disable-bias-linear 
)

TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-samples 1953125000
    --lr-decay-samples 1949218748
    --lr-warmup-samples 3906252
    --lr 0.00015
    --min-lr 0.00001
    --decoupled-lr 5.0e-4      # Specific to decoupled AdamW, ensure optimizer is compatible
    --decoupled-min-lr 4.5e-5  # Specific to decoupled AdamW
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --calculate-per-token-loss 
    --manual-gc 
    --empty-unused-memory-level 1 
    --exit-duration-in-mins 235 
)

# Conditional arguments based on DTYPE (FP8)
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-amax-compute-algo max"
        "--fp8-param-gather"
    )
fi

# Model parallelism arguments
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    # --pipeline-model-parallel-size $PP_SIZE # Not explicitly set in llama script options, assume 1 if not multi-node PP
    --sequence-parallel  # Always enable sequence parallelism with TP_SIZE=2
)

# Distributed Data Parallel (DDP) arguments
# From original script's ddp_args
DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")


# Data arguments (conditional for mock vs real data)
DATA_ARGS_LIST=()
if [[ "$TOKENIZER_ARG" == "MOCK" ]] || [[ "$DATA_ARG" == "MOCK" ]] || [[ -z "$TOKENIZER_ARG" ]]; then
    DATA_ARGS_LIST+=(
        "--mock-data"
        "--tokenizer-type NullTokenizer"
        "--vocab-size 128256" 
        "--data-cache-path ${DATA_CACHE_PATH}"
        "--tiktoken-pattern v2" 
        "--split '99,1,0'"
        "--no-create-attention-mask-in-dataloader"
        "--no-mmap-bin-files"
        "--num-workers 1"
    )
else
    # Settings for real data
    DATA_ARGS_LIST+=(
        "--data-path $DATA_ARG"
        "--tokenizer-type HuggingFaceTokenizer" 
        "--tokenizer-model $TOKENIZER_ARG"
        "--data-cache-path ${DATA_CACHE_PATH}"
        "--split '99,1,0'"
        "--no-create-attention-mask-in-dataloader"
        "--no-mmap-bin-files"
        "--num-workers 1"
        # Note: --vocab-size might be inferred by HuggingFaceTokenizer or might need to be explicit.
        "--vocab-size 128256"
    )
fi

EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-iters 32
    --eval-interval 100
    --save-interval 1000
    --log-throughput
    --profile
    --profile-step-start 4
    --profile-step-end 6
    --ckpt-format torch_dist 
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH" 
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
)

# Ensure pretrain_gpt.py is found
if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then
    echo "Error: pretrain_gpt.py not found at $PRETRAIN_SCRIPT_PATH"
    echo "Please ensure you are running this script from the root of the Megatron-LM repository, and pretrain_gpt.py is present."
    exit 1
fi

# Run the training command
torchrun ${DISTRIBUTED_ARGS[@]} \
    "$PRETRAIN_SCRIPT_PATH" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}

set +x''')

# NVIDIA/Megatron-LM examples/mixtral/train_mixtral_8x7b_distributed.sh at d98e8a64dd
SCRIPTS['mixtral_8x7b'] = ('examples/mixtral/train_mixtral_8x7b_distributed.sh', 'd98e8a64dd', r'''#!/bin/bash

# Runs Mixtral 8x7B model

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
# Change for multinode config
MASTER_ADDR=${MASTER_ADDR:-"localhost"}
MASTER_PORT=${MASTER_PORT:-"29500"}
NNODES=${SLURM_NNODES:-"1"}
NODE_RANK=${RANK:-"0"}
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))

CHECKPOINT_PATH=$1
TOKENIZER_MODEL=$2
DATA_PATH=$3

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --disable-bias-linear
    --seq-length 4096
    --max-position-embeddings 32768
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --init-method-std 0.01
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --normalization RMSNorm
    --position-embedding-type rope
    --swiglu
    --untie-embeddings-and-output-weights
    --group-query-attention
    --num-query-groups 8
    --no-masked-softmax-fusion
    --no-position-embedding
    --rotary-base 1000000
)

MOE_ARGS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 1e-2
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
    --overlap-param-gather
    --overlap-grad-reduce
)

DATA_ARGS=(
    --tokenizer-type Llama2Tokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
    --data-path $DATA_PATH
    --split 99990,8,2
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 256
    --lr 1e-4
    --train-iters 500000
    --lr-decay-iters 320000
    --lr-decay-style cosine
    --min-lr 1.0e-5
    --weight-decay 0.1
    --lr-warmup-iters 500
    --clip-grad 1.0
    --bf16
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 4
    --expert-model-parallel-size 8
    --use-distributed-optimizer
    --sequence-parallel
)

LOGGING_ARGS=(
    --log-interval 1 \
    --save-interval 10000 \
    --eval-interval 1000 \
    --eval-iters 10 \
    --save $CHECKPOINT_PATH \
    --load $CHECKPOINT_PATH \
    --tensorboard-dir "${CHECKPOINT_PATH}/tensorboard" \
    --no-load-optim \
    --no-load-rng
)

if [ -n "${WANDB_API_KEY}" ]; then
    LOGGING_ARGS+=(
        --wandb-project ${WANDB_PROJECT:-"Mixtral"}
        --wandb-exp-name ${WANDB_NAME:-"Mixtral_8x7B"}
    )
fi


torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${MOE_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${LOGGING_ARGS[@]}
''')

# NVIDIA/Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh at d98e8a64dd
SCRIPTS['deepseek_v3_mfsdp'] = ('examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh', 'd98e8a64dd', r'''#!/bin/bash

export NCCL_IB_SL=1
export NCCL_IB_TIMEOUT=19
export NVTE_FWD_LAYERNORM_SM_MARGIN=16
export NVTE_BWD_LAYERNORM_SM_MARGIN=16
export NCCL_P2P_NET_CHUNKSIZE=2097152
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export PYTHONWARNINGS=ignore
export TRITON_CACHE_DIR=/tmp/triton_cache_$SLURM_NODEID

# Configuration: Set these variables before running the script
MEGATRON_PATH=${MEGATRON_PATH:-"your_own_megatron_path"} # Path to Megatron-LM repository
CONTAINER_IMAGE=${CONTAINER_IMAGE:-"your_own_container_image"} # Path to .sqsh or docker image url
OUTPUT_PATH=${OUTPUT_PATH:-"your_own_output_path"} # Path for output logs and checkpoints
DATA_PATH=${DATA_PATH:-"your_own_data_path"}
USE_MEGATRON_FSDP=${USE_MEGATRON_FSDP:-1}
SHARDING_STRATEGY=${SHARDING_STRATEGY:-"optim_grads_params"}
PROFILE=${PROFILE:-0}
WANDB=${WANDB:-1}

TP=${TP:-1}
EP=${EP:-8}
MBS=${MBS:-4}
GBS=${GBS:-2048}
COMMENT=${COMMENT:-""}

PRETRAIN_ARGS=(
    --distributed-timeout-minutes 60
    --tensor-model-parallel-size ${TP}
    --expert-model-parallel-size ${EP}
    --expert-tensor-parallel-size 1
    --context-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --use-mcore-models
    --sequence-parallel
    --use-flash-attn
    --disable-bias-linear
    --micro-batch-size ${MBS}
    --global-batch-size ${GBS}
    --train-samples 585937500
    --exit-duration-in-mins 220
    --no-check-for-nan-in-loss-and-grad
    --manual-gc
    --manual-gc-interval 10
    --recompute-granularity selective
    --recompute-modules mlp moe mla_up_proj layernorm
    --transformer-impl transformer_engine
    --seq-length 4096
    --data-cache-path ${OUTPUT_PATH}/cache
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model deepseek-ai/DeepSeek-V3
    --data-path ${DATA_PATH}
    --split 99,1,0
    --no-mmap-bin-files
    --no-create-attention-mask-in-dataloader
    --num-workers 6
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --kv-channels 128
    --max-position-embeddings 4096
    --position-embedding-type rope
    --rotary-base 10000
    --make-vocab-size-divisible-by 3232
    --normalization RMSNorm
    --norm-epsilon 1e-6
    --swiglu
    --untie-embeddings-and-output-weights
    --multi-latent-attention
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --clip-grad 1.0
    --weight-decay 0.1
    --qk-layernorm
    --lr-decay-samples 584765624
    --lr-warmup-samples 1536000
    --lr-warmup-init 3.9e-7
    --lr 3.9e-6
    --min-lr 3.9e-7
    --lr-decay-style cosine
    --adam-beta1 0.9
    --adam-beta2 0.95
    --num-experts 256
    --moe-layer-freq [0]*3+[1]*58
    --moe-ffn-hidden-size 2048
    --moe-shared-expert-intermediate-size 2048
    --moe-router-load-balancing-type seq_aux_loss
    --moe-router-topk 8
    --moe-token-dispatcher-type flex
    --moe-flex-dispatcher-backend hybridep
    --moe-router-pre-softmax
    --moe-grouped-gemm
    --moe-aux-loss-coeff 1e-4
    --moe-router-group-topk 4
    --moe-router-num-groups 8
    --moe-router-topk-scaling-factor 2.5
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-router-bias-update-rate 1e-3
    --moe-router-dtype fp32
    --moe-permute-fusion
    --moe-router-force-load-balancing
    --q-lora-rank 1536
    --kv-lora-rank 512
    --qk-head-dim 128
    --qk-pos-emb-head-dim 64
    --v-head-dim 128
    --rotary-scaling-factor 40
    --mscale 1.0
    --mscale-all-dim 1.0
    --mtp-num-layers 1
    --mtp-loss-scaling-factor 0.1
    --eval-iters 32
    --eval-interval 100
    --auto-detect-ckpt-format
    --load ${OUTPUT_PATH}/checkpoints
    --save ${OUTPUT_PATH}/checkpoints
    --save-interval 100
    --dist-ckpt-strictness log_all
    --init-method-std 0.02
    --log-timers-to-tensorboard
    --log-memory-to-tensorboard
    --log-num-zeros-in-grad
    --log-params-norm
    --log-validation-ppl-to-tensorboard
    --log-throughput
    --log-interval 1
    --logging-level 40
    --tensorboard-dir ${OUTPUT_PATH}/tensorboard
    --bf16
    --enable-experimental
) 

if [ "${USE_MEGATRON_FSDP}" = 1 ]; then
    unset CUDA_DEVICE_MAX_CONNECTIONS
    PRETRAIN_ARGS=(
        "${PRETRAIN_ARGS[@]}"
        --use-megatron-fsdp
        --data-parallel-sharding-strategy ${SHARDING_STRATEGY}
        --no-gradient-accumulation-fusion
        --use-distributed-optimizer
        --calculate-per-token-loss
        --init-model-with-meta-device
        --ckpt-format fsdp_dtensor
        --fsdp-double-buffer
        --use-nccl-ub
        --megatron-fsdp-grad-comm-dtype bf16
        --megatron-fsdp-main-grads-dtype bf16
    )
fi

# Profiling command
if [ "${PROFILE}" = 1 ]; then
    PROFILE_CMD="nsys profile --sample=none --cpuctxsw=none --trace=cuda,nvtx,cublas,cudnn \
        --capture-range=cudaProfilerApi \
        --capture-range-end=stop \
        --cuda-graph-trace=node \
        --cuda-memory-usage=true \
        -f true -x true \
        -o ${OUTPUT_PATH}/nsys/Megatron-FSDP-Deepseek-V3-TP${TP}EP${EP}-MBS${MBS}GBS${GBS}-${COMMENT}"
    PRETRAIN_ARGS=(
        "${PRETRAIN_ARGS[@]}"
        --profile
        --profile-step-start 10
        --profile-step-end 12
        --profile-ranks 0
    )
    echo "PROFILE_CMD="
    echo $PROFILE_CMD
else
    PROFILE_CMD=""
fi

if [ "${WANDB}" = 1 ]; then
    export WANDB_API_KEY=${WANDB_API_KEY:-"your_own_wandb_api_key"}
    PRETRAIN_ARGS=(
        "${PRETRAIN_ARGS[@]}"
        --wandb-project your_own_wandb_project
        --wandb-exp-name DeepSeek-V3-TP${TP}EP${EP}-MBS${MBS}GBS${GBS}-${COMMENT}
    )
fi

TRAINING_CMD="
cd ${MEGATRON_PATH};
git rev-parse HEAD;
export PYTHONPATH=${MEGATRON_PATH}:${PYTHONPATH};
${PROFILE_CMD} python ${MEGATRON_PATH}/pretrain_gpt.py ${PRETRAIN_ARGS[@]}"

# SLURM settings
SLURM_LOGS="${OUTPUT_PATH}/slurm_logs"
mkdir -p ${SLURM_LOGS} || {
    echo "Error: Failed to create SLURM logs directory ${SLURM_LOGS}"
    exit 1
}

# Submit SLURM job
# Note: Update SBATCH parameters below according to your cluster configuration
set +e
sbatch <<EOF
#!/bin/bash

#SBATCH --job-name=your_own_job_name
#SBATCH --partition=your_own_partition
#SBATCH --nodes=your_own_num_nodes
#SBATCH --ntasks-per-node=your_own_tasks_per_node
#SBATCH --gres=gpu:your_own_gpu_per_node
#SBATCH --time=your_own_time
#SBATCH --account=your_own_account
#SBATCH --exclusive
#SBATCH --dependency=singleton

srun \
    --mpi=pmix -l \
    --container-image=${CONTAINER_IMAGE} \
    --container-mounts=your_own_container_mounts \
    --container-workdir=${MEGATRON_PATH} \
    bash -x -c "${TRAINING_CMD}" 2>&1 | tee ${SLURM_LOGS}/\${SLURM_JOB_ID}.log

EOF
set -e
''')

# NVIDIA/Megatron-LM examples/rl/model_configs/qwen3_30b_a3b_moe.sh at d98e8a64dd
SCRIPTS['qwen3_30b_a3b'] = ('examples/rl/model_configs/qwen3_30b_a3b_moe.sh', 'd98e8a64dd', r'''#!/bin/bash

TP=${TP:-4}
PP=${PP:-1}
EP=${EP:-2}
NODES_REQUIRED=${NODES_REQUIRED:-1}

echo "Using Qwen3-30B-A3B model checkpoint"
SCRIPT_PATH="${BASH_SOURCE[0]}"
source $(dirname $SCRIPT_PATH)/common.sh

# Default values
GRPO_CLAMP_EPS_LOWER=${GRPO_CLAMP_EPS_LOWER:-0.2}
GRPO_CLAMP_EPS_UPPER=${GRPO_CLAMP_EPS_UPPER:-0.2}
MAX_INFERENCE_BS=${MAX_INFERENCE_BS:-32}
GRPO_GROUP_SIZE=${GRPO_GROUP_SIZE:-16}
GRPO_PROMPTS_PER_STEP=${GRPO_PROMPTS_PER_STEP:-64}
GRPO_ITERATIONS=${GRPO_ITERATIONS:-1}
GRPO_KL_BETA=${GRPO_KL_BETA:-"0.0"}
TRAINING_BATCH_SIZE=${TRAINING_BATCH_SIZE:-256}
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}
MAX_SEQ_LENGTH=${MAX_SEQ_LENGTH:-8192}
EXIT_INTERVAL=${EXIT_INTERVAL:-20}
CHKPT_SAVE_INTERVAL=${CHKPT_SAVE_INTERVAL:-20}

ENV_DEPENDENT="\
  --micro-batch-size $MICRO_BATCH_SIZE \
  --global-batch-size $TRAINING_BATCH_SIZE \
  --grpo-group-size $GRPO_GROUP_SIZE \
  --grpo-prompts-per-step $GRPO_PROMPTS_PER_STEP \
  --grpo-iterations $GRPO_ITERATIONS \
  --grpo-clamp-eps-lower $GRPO_CLAMP_EPS_LOWER \
  --grpo-clamp-eps-upper $GRPO_CLAMP_EPS_UPPER \
  --grpo-kl-beta $GRPO_KL_BETA \
  --langrl-env-config $ENV_CONFIG "

MODEL_OPTIONS="\
  --seq-length $MAX_SEQ_LENGTH \
  --inference-max-seq-length $MAX_SEQ_LENGTH \
  --inference-max-requests $MAX_INFERENCE_BS \
  --pretrained-checkpoint $CHECKPOINT \
  --no-use-tokenizer-model-from-checkpoint-args \
  --bf16 \
  --tensor-model-parallel-size $TP  \
  --pipeline-model-parallel-size $PP  \
  --expert-model-parallel-size $EP \
  --attention-backend flash \
  --transformer-impl transformer_engine \
  --te-rng-tracker \
  --tokenizer-type HuggingFaceTokenizer \
  --tokenizer-model Qwen/Qwen3-30B-A3B \
  --tokenizer-hf-include-special-tokens \
  --untie-embeddings-and-output-weights \
  --num-layers 48 \
  --hidden-size 2048 \
  --ffn-hidden-size 6144 \
  --num-attention-heads 32 \
  --kv-channels 128 \
  --max-position-embeddings 8192 \
  --group-query-attention \
  --num-query-groups 4 \
  --normalization RMSNorm \
  --norm-epsilon 1e-6 \
  --position-embedding-type rope \
  --rotary-percent 1.0 \
  --rotary-base 1000000 \
  --use-rotary-position-embeddings \
  --swiglu \
  --disable-bias-linear \
  --num-experts 128 \
  --moe-router-topk 8 \
  --moe-ffn-hidden-size 768 \
  --moe-aux-loss-coeff 0.001 \
  --moe-router-load-balancing-type aux_loss \
  --attention-dropout 0.0 \
  --hidden-dropout 0.0 \
  --no-masked-softmax-fusion \
  --attention-softmax-in-fp32 \
  --vocab-size 151936 \
  --make-vocab-size-divisible-by 128 \
  --dist-ckpt-strictness log_unexpected \
  --qk-layernorm \
  --moe-token-dispatcher-type alltoall \
  --moe-layer-freq 1 \
  --optimizer adam \
  --adam-beta1 0.9 \
  --adam-beta2 0.999 \
  --adam-eps 1e-8 \
  --lr 1e-6 \
  --min-lr 1e-7 \
  --lr-warmup-samples 0 \
  --clip-grad 1.0 \
  --weight-decay 0.01 \
  --no-load-optim \
  --ckpt-format torch_dist \
  "
''')


def test_dispatcher_flags_with_a_model_are_read_for_its_experts_only():
    """With a MODEL, --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend B sets
    the experts' dispatcher (it was noted as not modelled and dropped); a dense model builds
    no dispatcher (Megatron-core), so the flags set nothing there."""
    from memsym.readers.megatron import read_megatron_overrides

    for backend in ("deepep", "hybridep"):
        argv = ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", backend]
        moe = read_megatron_overrides(argv, num_layers=4, has_experts=True)
        assert moe.options["moe_dispatcher"] == backend
        assert not any("dispatcher" in n for n in moe.notes)
        dense = read_megatron_overrides(argv, num_layers=4, has_experts=False)
        assert "moe_dispatcher" not in dense.options
    allgather = read_megatron_overrides(["--moe-token-dispatcher-type", "allgather"],
                                        num_layers=4, has_experts=True)
    assert allgather.options["moe_dispatcher"] == "allgather"
