"""Every torchtitan job config shipped (tests/data/torchtitan, README there: the v0.2.2 TOMLs and
the newest snapshot's Python config_registry.py files), each accepted with what it says or
refused in one line; the models torchtitan ships counted as its model classes build them.

The expectations are read by hand from the files (degrees, batch, context, AC, compile) and
written from torchtitan's module shapes (the parameter counts), never copied from memsym."""

import pathlib
import sys

import pytest
from hypothesis import given, settings, strategies as st

from memsym.errors import InvalidValueError, MemsymError
from memsym.model.counts import parameter_count
from memsym.readers import read_torchtitan_config, read_torchtitan_python
from memsym.readers.jobs import torchtitan_job
from memsym.readers.torchtitan_models import (TORCHTITAN_ALIASES, TORCHTITAN_FLAVORS,
                                              torchtitan_architecture)

DATA = pathlib.Path(__file__).parent / "data" / "torchtitan"
TOMLS = DATA / "v0.2.2"
PY = DATA / "python"

# file -> (world size, model, t, p, d, e, local batch, seq_len, recompute, every-N, compiled
# loss, float8).  World sizes: the file's "NOTE: a preset for N GPUs" where it has one, else 8
# (run_train.sh's NGPU default).  Read from each file's [model], [parallelism], [training],
# [activation_checkpoint], [compile] and [model] converters.
TOML_ACCEPTED = {
    # selective_ac_option "op" on a MoE/MLA model: memsym prices per-op SAC for dense blocks
    # only and counts Korthikanti's selective recompute (said in the notes)
    "deepseek_v3__debug_model.toml": (8, "deepseek_v3 debugmodel", 1, 1, 8, 1, 8, 2048,
                                      "selective", None, False, False),
    "deepseek_v3__deepseek_v3_16b.toml": (8, "deepseek_v3 16B", 1, 1, 8, 8, 4, 4096,
                                          "selective", None, True, False),
    "deepseek_v3__deepseek_v3_671b.toml": (64, "deepseek_v3 671B", 1, 1, 64, 1, 4, 4096,
                                           "selective", None, True, False),
    "gpt_oss__debug_model.toml": (8, "gpt_oss debugmodel", 1, 1, 8, 1, 8, 2048, "none", None,
                                  False, False),
    "llama3__debug_model.toml": (8, "llama3 debugmodel", 1, 1, 8, 1, 8, 2048, "full", 2,
                                 False, False),
    "llama3__llama3_8b.toml": (64, "llama3 8B", 1, 1, 64, 1, 1, 8192, "selective-op", None,
                               False, False),
    "llama3__llama3_70b.toml": (64, "llama3 70B", 8, 1, 8, 1, 8, 8192, "full", None, False,
                                False),
    "llama3__llama3_405b.toml": (128, "llama3 405B", 8, 1, 16, 1, 2, 8192, "full", None, True,
                                 True),
    "llama3_ft__debug_model.toml": (8, "llama3 debugmodel", 1, 1, 8, 1, 8, 2048, "full", 2,
                                    False, False),
    "llama4__debug_model.toml": (8, "llama4 debugmodel", 1, 1, 8, 1, 8, 2048, "selective",
                                 None, False, False),
    "llama4__llama4_17bx16e.toml": (64, "llama4 17bx16e", 8, 1, 8, 1, 8, 8192, "full", None,
                                    False, False),
    "qwen3__qwen3_0.6b.toml": (8, "qwen3 0.6B", 1, 1, 8, 1, 4, 4096, "selective-op", None,
                               False, False),
    "qwen3__qwen3_1.7b.toml": (8, "qwen3 1.7B", 1, 1, 8, 1, 4, 4096, "selective-op", None,
                               False, False),
    "qwen3__qwen3_32b.toml": (8, "qwen3 32B", 1, 1, 8, 1, 2, 4096, "full", None, False, False),
    "qwen3__qwen3_moe_debug.toml": (8, "qwen3 debugmodel_moe", 1, 1, 8, 1, 4, 4096,
                                    "selective", None, False, False),
}
# file -> (world size, what the one-line refusal names)
TOML_REFUSED = {
    "flux__debug_model.toml": (8, "diffusion"),
    "flux__flux_dev_model.toml": (8, "diffusion"),
    "flux__flux_schnell_model.toml": (8, "diffusion"),
    # pipeline_parallel_degree 4 with 1F1B: torchtitan splits 48 layers (+1 embedding, +1
    # output) as 12, 13, 12, 11; memsym's stages are equal between the first and the last
    "llama4__llama4_17bx128e.toml": (64, "12, 13, 12, 11"),
    # torchtitan/experiments: a Hugging Face model through transformers, a vision-language model
    "experiments_transformers_modeling_backend__debug_model.toml": (8, "config.json"),
    "experiments_transformers_modeling_backend__full.toml": (8, "config.json"),
    "experiments_vlm__debug_model.toml": (8, "config.json"),
}


def test_every_shipped_toml_is_listed():
    assert sorted(p.name for p in TOMLS.glob("*.toml")) == sorted({**TOML_ACCEPTED,
                                                                   **TOML_REFUSED})
    # README: all 19 of v0.2.2's models/*/train_configs and 3 of its experiments
    assert len(TOML_ACCEPTED) + len(TOML_REFUSED) == 22


@pytest.mark.parametrize("name", sorted(TOML_ACCEPTED))
def test_shipped_toml_accepted(name):
    world, model, t, p, d, e, mbs, seq, rc, every, loss, fp8 = TOML_ACCEPTED[name]
    cfg = read_torchtitan_config(str(TOMLS / name), world_size=world)
    j = torchtitan_job(cfg)
    assert j.model.name == f"torchtitan {model}"
    assert (j.layout.t, j.layout.p, j.layout.d, j.layout.e) == (t, p, d, e)
    assert (j.training.micro_batch_size, j.training.seq_length) == (mbs, seq)
    # global batch: -1 in every file -> local batch x data-parallel degree
    assert j.training.global_batch_size == mbs * d
    assert j.training.recompute == rc
    assert j.training.recompute_num_layers == every
    assert j.training.compiled_loss is loss
    assert cfg["precision"]["float8"] is fp8
    # no file sets training.dtype or mixed_precision_param: fp32 params, bf16 compute
    assert j.training.precision == "bf16" and j.training.sharding == "fsdp"


@pytest.mark.parametrize("name", sorted(TOML_REFUSED))
def test_shipped_toml_refused_in_one_line(name):
    world, said = TOML_REFUSED[name]
    with pytest.raises(MemsymError) as err:
        torchtitan_job(read_torchtitan_config(str(TOMLS / name), world_size=world))
    assert said in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# The Python config form (newest snapshot)
# ---------------------------------------------------------------------------------------------

# "MODEL/config_registry.py:FUNCTION" -> (world, model, t, p, d, e, micro-batch, context,
# recompute, compiled loss, mtp layers).  Micro-batch = num_tokens_per_microbatch_per_dp_rank /
# max_context_length (llama3_8b: 1 * 8192 / 8192); SelectiveAC = per-op SAC (dense models) ->
# selective-op, Korthikanti's selective for MoE/MLA; FullAC -> full; None -> none.
PY_ACCEPTED = {
    "llama3:llama3_debugmodel": (8, "llama3 debugmodel", 1, 1, 8, 1, 8, 2048, "selective-op",
                                 False, 0),
    "llama3:llama3_8b": (64, "llama3 8B", 1, 1, 64, 1, 1, 8192, "selective-op", False, 0),
    "llama3:llama3_70b": (64, "llama3 70B", 8, 1, 8, 1, 8, 8192, "full", False, 0),
    # compile_config = CompileConfig(enable=True, ...) bound to a name: components default
    # ["model", "loss"]; the Float8LinearConverter in model_registry's converters
    "llama3:llama3_405b": (128, "llama3 405B", 8, 1, 16, 1, 2, 8192, "full", True, 0),
    # config = llama3_8b(); config.compile = CompileConfig(enable=True, components=["model"])
    "llama3:llama3_8b_mxfp8": (64, "llama3 8B", 1, 1, 64, 1, 1, 8192, "selective-op", False,
                               0),
    "deepseek_v3:deepseek_v3_16b": (8, "deepseek_v3 16B", 1, 1, 8, 8, 4, 4096, "selective",
                                    True, 0),
    "deepseek_v3:deepseek_v3_671b": (64, "deepseek_v3 671B", 1, 1, 64, 2, 4, 4096, "selective",
                                     True, 0),
    # config.model_spec = model_registry("debugmodel", num_mtp_layers=1)
    "deepseek_v3:deepseek_v3_debugmodel_mtp": (8, "deepseek_v3 debugmodel", 1, 1, 8, 1, 8,
                                               2048, "selective", False, 1),
    "qwen3:qwen3_0_6b": (8, "qwen3 0.6B", 1, 1, 8, 1, 4, 4096, "selective-op", False, 0),
    "qwen3:qwen3_30b_a3b": (8, "qwen3 30B-A3B", 1, 1, 8, 1, 2, 4096, "full", False, 0),
    "qwen3:qwen3_32b": (8, "qwen3 32B", 1, 1, 8, 1, 2, 4096, "full", False, 0),
    "gpt_oss:gpt_oss_120b": (64, "gpt_oss 120b", 1, 1, 64, 1, 1, 8192, "full", False, 0),
}
PY_REFUSED = {
    "llama3:llama3_debugmodel_float8_emulate_lora": "LoRAConverter.Config",
    # enable_fused_swiglu(config): a call that changes the config
    "deepseek_v3:deepseek_v3_16b_minimal_async_ep": "a call for its effect",
    # _gpt_oss_debugmodel(attn_backend=...) takes arguments
    "gpt_oss:gpt_oss_debugmodel": "takes arguments",
    "flux:flux_dev": "diffusion",
}


def _py(spec):
    module, function = spec.split(":")
    return f"{PY / module / 'config_registry.py'}:{function}"


@pytest.mark.parametrize("spec", sorted(PY_ACCEPTED))
def test_shipped_python_config_accepted(spec):
    world, model, t, p, d, e, mbs, ctx, rc, loss, mtp = PY_ACCEPTED[spec]
    cfg = read_torchtitan_config(_py(spec), world_size=world)
    assert cfg["model"]["mtp_layers"] == mtp
    j = torchtitan_job(cfg)
    assert j.model.name == f"torchtitan {model}" and j.model.mtp_num_layers == mtp
    assert (j.layout.t, j.layout.p, j.layout.d, j.layout.e) == (t, p, d, e)
    assert (j.training.micro_batch_size, j.training.seq_length) == (mbs, ctx)
    # num_tokens_per_train_step unset: micro-batch tokens x dp, no gradient accumulation
    assert j.training.global_batch_size == mbs * d
    assert (j.training.recompute, j.training.compiled_loss) == (rc, loss)
    assert j.layout.sequence_parallel is (t > 1)


@pytest.mark.parametrize("spec", sorted(PY_REFUSED))
def test_shipped_python_config_refused_in_one_line(spec):
    with pytest.raises(MemsymError) as err:
        torchtitan_job(read_torchtitan_config(_py(spec), world_size=8))
    assert PY_REFUSED[spec] in str(err.value) and "\n" not in str(err.value)


def test_python_config_file_with_many_functions_needs_one_named():
    with pytest.raises(InvalidValueError, match="name one as FILE.py:FUNCTION"):
        read_torchtitan_python(PY / "llama3" / "config_registry.py", world_size=8)


def _write(tmp_path, body, module="llama3"):
    path = tmp_path / "job.py"
    path.write_text(f"from torchtitan.models.{module} import model_registry\n" + body)
    return str(path)


def test_python_config_never_runs_code(tmp_path):
    marker = tmp_path / "ran"
    call = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    # an unread field holding a call: kept unread (never evaluated)
    ok = _write(tmp_path, "def job() -> Trainer.Config:\n"
                f"    return Trainer.Config(model_spec=model_registry('8B'), dump_folder={call})\n")
    assert read_torchtitan_python(ok, world_size=8)["model"]["flavor"] == "8B"
    # a field memsym reads holding it: refused in one line
    bad = _write(tmp_path, "def job() -> Trainer.Config:\n    return Trainer.Config("
                 f"parallelism=ParallelismConfig(tensor_parallel_degree={call}))\n")
    with pytest.raises(InvalidValueError, match="tensor_parallel_degree = .* is not a literal"):
        read_torchtitan_python(bad, world_size=8)
    assert not marker.exists()


@pytest.fixture
def default_recursion_limit():
    """CPython's default recursion limit (1000), which the memsym command runs with.  Where a
    test earlier in the same worker compiled with Inductor, torch left the process's limit at
    2000 (``torch/_inductor/compile_fx.py``: ``sys.setrecursionlimit(max(..., 2000))``), and
    ``ast.parse`` then builds the tree of 5,000 nested unary minus signs (its depth bound
    scales with the limit): memsym's own 64-level refusal answered instead of the parser's."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(old)


@pytest.mark.parametrize("body, said", [
    ("def job() -> Trainer.Config:\n    c = Trainer.Config()\n    if True:\n"
     "        c.training = TrainingConfig()\n    return c\n", "the if statement"),
    ("def job() -> Trainer.Config:\n    c = Trainer.Config()\n"
     "    c.parallelism.tensor_parallel_degree += 1\n    return c\n", "the augassign statement"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(training=TrainingConfig("
     "num_tokens_per_microbatch_per_dp_rank=2 ** 20))\n", "is not a literal"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(training=TrainingConfig("
     "num_tokens_per_microbatch_per_dp_rank=3000, max_context_length=2048))\n",
     "not a multiple of max_context_length"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry('8B', "
     "converters=[LoRAConverter.Config(rank=8)]))\n", "LoRAConverter.Config"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry('8B'), "
     "activation_checkpoint=MemoryBudgetAC.Config(memory_budget=0.5))\n", "memory_budget"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry('8B'), "
     "training=TrainingConfig(dtype='bfloat16'))\n", "training.dtype = bfloat16"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry('8B'), "
     "training=TrainingConfig(enable_cpu_offload=True))\n", "enable_cpu_offload"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry('8B'), "
     "parallelism=ParallelismConfig(tensor_parallel_degree=2, enable_sequence_parallel=False))"
     "\n", "enable_sequence_parallel = False"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry("
     "'9B'))\n", "config.json"),
    ("def job() -> Trainer.Config:\n    return job()\n", "more than 8 config functions"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(" + "(" * 70 + "1" + ")" * 70
     + ")\n", "nests deeper than 64"),
    # b5bcd76c6's ParallelismConfig has no expert TP (config/configs.py:282): v0.2.x's key
    ("def job() -> Trainer.Config:\n    return Trainer.Config(model_spec=model_registry('8B'), "
     "parallelism=ParallelismConfig(expert_tensor_parallel_degree=1))\n",
     "expert_tensor_parallel_degree is torchtitan v0.2.x's key"),
    ("def job(:\n", "not valid Python"),
    # chains without brackets escape check_text's count: the syntax tree's depth is bounded
    ("def job() -> Trainer.Config:\n    return Trainer.Config(dump_folder=(c" + "\n.a" * 500
     + "))\n", "nests deeper than 64 syntax levels"),
    ("def job() -> Trainer.Config:\n    return Trainer.Config(dump_folder=" + "-" * 5000 + "1)\n",
     "nests too deeply for Python's parser"),
    ("x = '" + "9" * 100 + "'\ny = " + "9" * 100 + "\n", "a number of 100 characters"),
])
def test_python_config_refusals(tmp_path, body, said, default_recursion_limit):
    path = _write(tmp_path, body)
    with pytest.raises(MemsymError) as err:
        torchtitan_job(read_torchtitan_python(path, world_size=8))
    assert said in str(err.value) and "\n" not in str(err.value)


def test_python_config_size_is_bounded(tmp_path):
    from memsym.limits import MAX_INPUT_BYTES
    path = tmp_path / "big.py"
    path.write_text("x = 1\n" * (MAX_INPUT_BYTES // 6 + 1))
    with pytest.raises(InvalidValueError, match=f"larger than {MAX_INPUT_BYTES} bytes"):
        read_torchtitan_python(str(path) + ":job", world_size=8)


# text Python's parser takes: only memsym's one-line errors (or a read config) come out.
# Budget: 60 examples, no deadline (each parse is well under a millisecond).
_FRAGMENTS = ["def job() -> Trainer.Config:\n", "    return ", "Trainer.Config(", "TrainingConfig(",
              "ParallelismConfig(", "model_registry('8B'", "tensor_parallel_degree=",
              "max_context_length=", "8192", "-1", " * ", "(", ")", ", ", "[", "]", "c.a", " = ",
              "\n", "    ", "None", "'x'", "if 1:\n", "lambda: 1", "f()"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=30))
def test_python_config_fuzz_only_one_line_errors(tmp_path_factory, parts):
    path = tmp_path_factory.mktemp("fuzz") / "job.py"
    path.write_text("from torchtitan.models.llama3 import model_registry\n" + "".join(parts))
    try:
        torchtitan_job(read_torchtitan_python(f"{path}:job", world_size=8))
    except MemsymError as err:
        assert "\n" not in str(err)


def test_python_config_pipeline_and_token_budget(tmp_path):
    # num_pp_microbatches micro-batches of 2 sequences each per data-parallel rank; a train
    # step of 4 x that over d = 8 / (2 x 2) = 2 ranks -> 2 gradient-accumulation steps
    path = _write(tmp_path, "def job() -> Trainer.Config:\n    return Trainer.Config(\n"
                  "        model_spec=model_registry('8B'),\n"
                  "        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank="
                  "2 * 4096,\n            max_context_length=4096, num_tokens_per_train_step="
                  "32 * 4096),\n        parallelism=ParallelismConfig(pipeline_parallel_degree"
                  "=2, tensor_parallel_degree=2,\n            num_pp_microbatches=4),\n"
                  "        activation_checkpoint=None)\n")
    cfg = read_torchtitan_python(path, world_size=8)
    assert cfg["training"]["local_batch_size"] == 8
    assert cfg["layout"]["pipeline_parallel_microbatch_size"] == 2
    assert cfg["training"]["global_batch_size"] == 32
    assert cfg["training"]["gradient_accumulation_steps"] == 2
    j = torchtitan_job(cfg)
    assert (j.training.micro_batch_size, j.training.num_microbatches) == (2, 4)
    assert j.layout.sequence_parallel is True and j.training.recompute == "none"


def test_cli_reads_a_python_config(tmp_path, capsys):
    from memsym.cli import main
    spec = _py("llama3:llama3_70b")
    assert main(["estimate", "--torchtitan-config", spec, "--world-size", "64"]) == 0
    assert "read as a torchtitan Python config" in capsys.readouterr().out
    code = main(["estimate", "--torchtitan-config", _py("llama3:nope"), "--world-size", "64"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# The models torchtitan ships, counted by hand from its module shapes
# ---------------------------------------------------------------------------------------------

def _gqa(h, a, g, d_h, qk_norm=False):
    # Attention: wq h x a d_h, wk and wv h x g d_h, wo a d_h x h (no biases); qwen3's q_norm and
    # k_norm are RMSNorm(head_dim)
    return h * a * d_h + 2 * h * g * d_h + a * d_h * h + (2 * d_h if qk_norm else 0)


def _mla(h, a, q_lora, kv_lora=512, nope=128, rope=64, v=128):
    # deepseek_v3 Attention: wq (q_lora_rank 0) or wq_a, q_norm, wq_b; wkv_a, kv_norm, wkv_b, wo
    q = h * a * (nope + rope) if not q_lora else h * q_lora + q_lora + q_lora * a * (nope + rope)
    return q + h * (kv_lora + rope) + kv_lora + kv_lora * a * (nope + v) + a * v * h


def _model(L, h, V, layer_params, tied=False):
    # tok_embeddings V x h, layers, final norm h, output h x V unless tied
    return V * h + sum(layer_params(i) for i in range(L)) + h + (0 if tied else V * h)


def test_llama3_8b_count():
    # llama3_args["8B"]: dim 4096, 32 layers, 32/8 heads, FFN 14336 (ffn_dim_multiplier 1.3,
    # multiple_of 1024: int(1.3 * int(8 * 4096 / 3)) = 14198 -> 14336), vocab 128256
    n = _model(32, 4096, 128256, lambda i: _gqa(4096, 32, 8, 128) + 3 * 4096 * 14336 + 2 * 4096)
    assert n == 8_030_261_248      # Meta: Llama 3.1 8B, 8.03B
    assert parameter_count(torchtitan_architecture("llama3", "8B")) == n


def _dsv3(V, h, f, f_e, L, dense, a, E, shared, q_lora):
    def layer(i):
        ffn = 3 * h * f if i < dense else h * E + E * 3 * h * f_e + 3 * h * f_e * shared
        return _mla(h, a, q_lora) + ffn + 2 * h       # + attention_norm, ffn_norm
    return _model(L, h, V, layer)


def test_deepseek_v3_counts():
    # deepseekv3_args["16B"]: vocab 102400, dim 2048, inter 10944, moe_inter 1408, 27 layers
    # (1 dense), 16 heads, 64 experts + 2 shared, q_lora_rank 0
    n16 = _dsv3(102400, 2048, 10944, 1408, 27, 1, 16, 64, 2, 0)
    assert round(n16 / 1e9, 1) == 15.7      # DeepSeek-V2-Lite: 15.7B
    assert parameter_count(torchtitan_architecture("deepseek_v3", "16B")) == n16
    # "671B": vocab 129280, dim 7168, inter 18432, moe_inter 2048, 61 layers (3 dense), 128
    # heads, 256 experts + 1 shared, q_lora_rank 1536; expert_bias is a buffer; no MTP layer
    n671 = _dsv3(129280, 7168, 18432, 2048, 61, 3, 128, 256, 1, 1536)
    assert round(n671 / 1e9, 1) == 671.0    # DeepSeek-V3: 671B total
    arch = torchtitan_architecture("deepseek_v3", "671B")
    assert parameter_count(arch) == n671 and arch.mtp_num_layers == 0
    # model_registry("671B", num_mtp_layers=1): MTPTransformerBlock = a MoE block + enorm,
    # hnorm, mtp_norm (3h) + eh_proj (2h x h); embedding and output shared
    mtp = (_mla(7168, 128, 1536) + 7168 * 256 + 256 * 3 * 7168 * 2048 + 3 * 7168 * 2048
           + 2 * 7168 + 3 * 7168 + 2 * 7168 * 7168)
    assert parameter_count(torchtitan_architecture("deepseek_v3", "671B", 1)) == n671 + mtp


def test_qwen3_counts():
    # qwen3_args["8B"]: dim 4096, 36 layers, 32/8 heads of 128, hidden 12288, untied
    n8 = _model(36, 4096, 151936,
                lambda i: _gqa(4096, 32, 8, 128, qk_norm=True) + 3 * 4096 * 12288 + 2 * 4096)
    assert round(n8 / 1e9, 2) == 8.19       # Qwen3-8B: 8.2B
    assert parameter_count(torchtitan_architecture("qwen3", "8B")) == n8
    # "0.6B": enable_weight_tying=True (the output shares the embedding)
    n06 = _model(28, 1024, 151936,
                 lambda i: _gqa(1024, 16, 8, 128, qk_norm=True) + 3 * 1024 * 3072 + 2 * 1024,
                 tied=True)
    assert parameter_count(torchtitan_architecture("qwen3", "0.6B")) == n06
    # "30B-A3B": dim 2048, 48 layers all MoE, 32/4 heads, 128 experts of 768, router h x E
    n30 = _model(48, 2048, 151936, lambda i: _gqa(2048, 32, 4, 128, qk_norm=True)
                 + 2048 * 128 + 128 * 3 * 2048 * 768 + 2 * 2048)
    assert round(n30 / 1e9, 1) == 30.5      # Qwen3-30B-A3B: 30.5B
    assert parameter_count(torchtitan_architecture("qwen3", "30B-A3B")) == n30


def test_every_flavor_builds_and_aliases_share_shapes():
    for name, flavor in TORCHTITAN_FLAVORS:
        assert parameter_count(torchtitan_architecture(name, flavor)) > 0
    for alias, base in TORCHTITAN_ALIASES.items():
        assert parameter_count(torchtitan_architecture(*alias)) == \
            parameter_count(torchtitan_architecture(*base))
    # flavors match ignoring case, as the old preset mapping did ("8b" in a TOML)
    assert torchtitan_architecture("llama3", "8b").name == "torchtitan llama3 8B"


@pytest.mark.parametrize("name, flavor, said", [
    ("llama3", "9B", "its flavors: 1B, 3B, 405B"),
    ("mixtral", "8x7B", "known models: deepseek_v3"),
    ("flux", "flux-dev", "diffusion"),
])
def test_unknown_model_refused_in_one_line(name, flavor, said):
    with pytest.raises(InvalidValueError) as err:
        torchtitan_architecture(name, flavor)
    text = str(err.value)
    assert said in text and "config.json" in text and "\n" not in text


def test_float32_params_and_refused_precisions_in_a_toml():
    # [training] mixed_precision_param = "float32": FSDP2 computes in fp32 (MixedPrecisionPolicy)
    base = '[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
    j = torchtitan_job(read_torchtitan_config(base + 'mixed_precision_param = "float32"\n', 8))
    assert j.training.precision == "fp32"
    for line, said in (('dtype = "bfloat16"\n', "training.dtype = bfloat16"),
                       ("enable_cpu_offload = true\n", "enable_cpu_offload"),
                       ('[activation_checkpoint]\nmode = "memory_budget"\n', "memory_budget")):
        with pytest.raises(InvalidValueError, match=said):
            torchtitan_job(read_torchtitan_config(base + line, 8))


_ETP_TOML = ("[model]\nname = \"deepseek_v3\"\nflavor = \"16B\"\n[parallelism]\n"
             "tensor_parallel_degree = 2\nexpert_parallel_degree = 8\n"
             "expert_tensor_parallel_degree = {etp}\n")


def test_toml_expert_tp_as_v0_2_2_takes_it():
    """v0.2.2 (parallel_dims.py:58-59, 138): under EP etp is tp or 1, and efsdp =
    dp_shard*cp*tp // (etp*ep) must be whole.  16 GPUs at tp 2: dp_shard = 8, so
    dp_shard*cp*tp = 16; etp 1: 16 / 8 = 2, etp 2: 16 / 16 = 1; 8 GPUs: dp_shard 4,
    8 / (2*8) is not whole.  The job's experts take etp (DeepSeek-V3 16B's 64 experts)."""
    from memsym.readers import read_torchtitan_toml
    for etp in (1, 2):
        cfg = read_torchtitan_toml(_ETP_TOML.format(etp=etp), 16)
        assert cfg["layout"]["t_e"] == etp
        j = torchtitan_job(cfg)
        assert (j.layout.t, j.layout.e, j.layout.expert_tp) == (2, 8, etp)
    with pytest.raises(InvalidValueError, match="must divide dp_shard x cp x tp = 8"):
        read_torchtitan_toml(_ETP_TOML.format(etp=2), 8)
    with pytest.raises(InvalidValueError, match="TP or 1"):
        read_torchtitan_toml(_ETP_TOML.format(etp=4).replace("= 2\n", "= 8\n", 1), 64)
    # without EP the experts take the TP mesh (apply_moe_ep_tp: TensorParallel on tp_mesh)
    lay = read_torchtitan_toml("[parallelism]\ntensor_parallel_degree = 2\n", 16)["layout"]
    assert lay["t_e"] == 2


def test_python_config_experts_over_ep_only(tmp_path):
    """b5bcd76c6: EP borrows from dp_shard*cp*tp and the routed experts are sharded on EP alone
    (models/common/MOE_SHARDING.md): the v0.2 key's etp = 1, the default the reader keeps."""
    path = _write(tmp_path, "def job() -> Trainer.Config:\n    return Trainer.Config("
                  "model_spec=model_registry('8B'), parallelism=ParallelismConfig("
                  "tensor_parallel_degree=2, expert_parallel_degree=4))\n")
    assert read_torchtitan_python(path, world_size=8)["layout"]["t_e"] == 1


def test_toml_experts_over_replicas_refused_in_one_line():
    """dp_shard 1 with EP: v0.2.2 parallelize.py:181 applies FSDP2 whenever ep_enabled (no
    plain DDP, which memsym would price for replicas): refused by torchtitan-ep-replicas."""
    from memsym.readers import read_torchtitan_toml
    toml = ("[model]\nname = \"deepseek_v3\"\nflavor = \"16B\"\n[parallelism]\n"
            "data_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1\n"
            "context_parallel_degree = 2\nexpert_parallel_degree = 2\n")
    with pytest.raises(InvalidValueError) as err:
        torchtitan_job(read_torchtitan_toml(toml, 16))
    assert "shards the model with FSDP2" in str(err.value) and "\n" not in str(err.value)


def test_a_copied_config_registry_takes_its_model_from_the_function(tmp_path):
    # torchtitan's config_registry.py imports model_registry from its own package
    # (models/llama3: "from . import model_registry"); a copy kept in another folder still
    # reads llama3_8b's model (said in the notes), and a function that names none is refused
    text = (PY / "llama3" / "config_registry.py").read_text(encoding="utf-8")
    copy = tmp_path / "jobs" / "config_registry.py"
    copy.parent.mkdir()
    copy.write_text(text, encoding="utf-8")
    shipped = read_torchtitan_python(f"{PY / 'llama3' / 'config_registry.py'}:llama3_8b",
                                     world_size=8)
    copied = read_torchtitan_python(f"{copy}:llama3_8b", world_size=8)
    assert copied["model"] == shipped["model"]
    assert any("model llama3 read from the function's name" in n for n in copied["notes"])
    renamed = tmp_path / "jobs" / "mine.py"
    renamed.write_text(text.replace("def llama3_8b()", "def my_job()"), encoding="utf-8")
    with pytest.raises(InvalidValueError, match="names no torchtitan model") as err:
        read_torchtitan_python(f"{renamed}:my_job", world_size=8)
    assert "\n" not in str(err.value)
