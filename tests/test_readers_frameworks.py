"""Tests of memsym.readers.deepspeed and memsym.readers.torchtitan on the frameworks' own configs.

Configs are copied from the frameworks' documentation and repositories (cited at each), and the
expected values are the frameworks' own rules worked by hand: DeepSpeed's
``train_batch_size = micro * accumulation * DP`` (runtime/config.py:_batch_assertion) and
torchtitan's leftover shard degree ``W / (replicate * cp * tp * pp)``
(distributed/parallel_dims.py:ParallelDims._validate, v0.2.2).
"""

import json

import pytest

from memsym.errors import InvalidValueError
from memsym.readers import read_deepspeed_config, read_torchtitan_toml

# deepspeedai/DeepSpeed docs/_tutorials/zero.md (edaa722126): the ZeRO stage-2 example
ZERO2_DOC = {"zero_optimization": {"stage": 2, "contiguous_gradients": True, "overlap_comm": True,
                                   "reduce_scatter": True, "reduce_bucket_size": 5e8,
                                   "allgather_bucket_size": 5e8}}
# the same tutorial, the ZeRO-Infinity (stage 3 with CPU offload) example
ZERO3_DOC = """{
    "zero_optimization": {
        "stage": 3,
        "contiguous_gradients": true,
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
        "stage3_prefetch_bucket_size": 1e7,
        "stage3_param_persistence_threshold": 1e5,
        "reduce_bucket_size": 1e7,
        "sub_group_size": 1e9,
        "offload_optimizer": {
            "device": "cpu"
         },
        "offload_param": {
            "device": "cpu"
       }
   }
}"""
# docs/_pages/config-json.md: train_batch_size example 32


def with_batch(cfg, **batch):
    cfg = json.loads(cfg) if isinstance(cfg, str) else dict(cfg)
    cfg.update(batch)
    return cfg


def test_zero2_doc_config():
    c = read_deepspeed_config(with_batch(ZERO2_DOC, train_batch_size=32,
                                         train_micro_batch_size_per_gpu=4), world_size=4)
    # 32 = 4 * GAS * 4  ->  GAS = 2
    assert c["training"] == {"micro_batch_size": 4, "gradient_accumulation_steps": 2,
                             "global_batch_size": 32}
    sh = c["sharding"]
    assert sh["zero_stage"] == 2 and sh["overlap_comm"] is True
    assert sh["reduce_bucket_size"] == sh["allgather_bucket_size"] == 500_000_000
    assert sh["offload_optimizer"] == sh["offload_param"] == "none"
    assert c["precision"]["params_dtype"] == "fp32"


def test_zero3_infinity_doc_config_and_defaults():
    c = read_deepspeed_config(with_batch(ZERO3_DOC, train_micro_batch_size_per_gpu=1,
                                         gradient_accumulation_steps=8, bf16={"enabled": True}),
                              world_size=16)
    sh = c["sharding"]
    assert (sh["offload_optimizer"], sh["offload_param"]) == ("cpu", "cpu")
    assert sh["stage3_prefetch_bucket_size"] == 10_000_000 and sh["reduce_bucket_size"] == 10_000_000
    assert sh["stage3_max_live_parameters"] == 10**9
    assert sh["overlap_comm"] is True                      # stage 3 default (overlap_comm_valid)
    assert sh["allgather_bucket_size"] == 500_000_000      # default, not in the doc config
    assert c["training"]["global_batch_size"] == 1 * 8 * 16
    assert c["precision"] == {"params_dtype": "bf16", "grad_accum_dtype": "bf16"}


def test_deepspeed_defaults_stage1_overlap_off():
    c = read_deepspeed_config({"train_micro_batch_size_per_gpu": 2, "zero_optimization":
                               {"stage": 1}}, world_size=8)
    assert c["sharding"]["overlap_comm"] is False
    assert c["training"] == {"micro_batch_size": 2, "gradient_accumulation_steps": 1,
                             "global_batch_size": 16}


def test_deepspeed_batch_rule():
    with pytest.raises(InvalidValueError, match="batch rule"):
        read_deepspeed_config({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                               "gradient_accumulation_steps": 2}, world_size=4)
    # DP from the full triple: 64 / (2 * 4) = 8
    c = read_deepspeed_config({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                               "gradient_accumulation_steps": 4})
    assert c["layout"]["d"] == 8
    with pytest.raises(InvalidValueError, match="micro"):
        read_deepspeed_config({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                               "gradient_accumulation_steps": 2})
    with pytest.raises(InvalidValueError, match="needs train_batch_size"):
        read_deepspeed_config({"gradient_accumulation_steps": 2}, world_size=2)


def test_deepspeed_wrong_types_and_rules():
    for cfg, match in [
        ({"train_batch_size": "32"}, "whole number"),
        ({"train_batch_size": 32.5}, "whole number"),
        ({"train_batch_size": 8, "bf16": {"enabled": True}, "fp16": {"enabled": True}}, "both"),
        ({"train_batch_size": 8, "zero_optimization": {"stage": 4}}, "stage"),
        ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_param":
                                                       {"device": "cpu"}}}, "stage 3"),
        ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer":
                                                       {"device": "gpu"}}}, "device"),
        ({"train_batch_size": 8, "zero_optimization": {"overlap_comm": "yes"}}, "true or false"),
    ]:
        with pytest.raises(InvalidValueError, match=match):
            read_deepspeed_config(cfg, world_size=8)
    with pytest.raises(InvalidValueError, match="not JSON"):
        read_deepspeed_config("{not json")


def test_deepspeed_hf_auto_and_ignored():
    c = read_deepspeed_config({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
                               "optimizer": {"type": "AdamW"}, "gradient_clipping": 1.0},
                              world_size=4)
    assert c["training"]["global_batch_size"] == 8
    # the optimizer's type is read (AdamW: Adam's two moments); clipping changes no memory;
    # the "auto" batch is filled as the HF Trainer fills it: 2 x 1 x 4, said with its source
    assert c["optimizer"] == "adam" and c["ignored"] == ("gradient_clipping",)
    assert ("train_batch_size", 8) in [row[:2] for row in c["defaults"]]


def test_deepspeed_reads_a_file(tmp_path):
    f = tmp_path / "ds.json"
    f.write_text(json.dumps(with_batch(ZERO2_DOC, train_batch_size=16)))
    assert read_deepspeed_config(f, world_size=16)["training"]["micro_batch_size"] == 1


# ----------------------------------------------------------------------------------------------
# torchtitan v0.2.2
# ----------------------------------------------------------------------------------------------

# pytorch/torchtitan torchtitan/models/llama3/train_configs/llama3_405b.toml at v0.2.2, verbatim
LLAMA3_405B = r'''# NOTE: this toml config is a preset for 128 H100 GPUs.

[job]
dump_folder = "./outputs"
description = "Llama 3 405B training"

[profiling]
enable_profiling = true
save_traces_folder = "profile_trace"
profile_freq = 100

[metrics]
log_freq = 10
enable_tensorboard = true
save_tb_folder = "tb"

[model]
name = "llama3"
flavor = "405B"
hf_assets_path = "./assets/hf/Llama-3.1-405B"
converters = ["float8"]

[optimizer]
name = "AdamW"
lr = 8e-5
eps = 1e-8

[lr_scheduler]
warmup_steps = 600  # lr scheduler warm up, normally 20% of the train steps

[training]
local_batch_size = 2
seq_len = 8192
max_norm = 1.0  # grad norm clipping
steps = 3000
dataset = "c4"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 8  # 8-way TP
enable_async_tensor_parallel = true
pipeline_parallel_degree = 1
context_parallel_degree = 1

[checkpoint]
enable = false
folder = "checkpoint"
interval = 500
last_save_model_only = true
export_dtype = "float32"
async_mode = "disabled" # ["disabled", "async", "async_with_pinned_mem"]

[activation_checkpoint]
mode = "full" # ["none", "selective", "full"]

[compile]
enable=true
components = ["model", "loss"]

[quantize.linear.float8]
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true
filter_fqns = ["output"]

[validation]
enable = false
dataset = "c4_validation"
freq = 500
steps = 1200  # Recommend value for c4_validation with world-size=8 and seq_len=8192
'''

# pytorch/torchtitan torchtitan/models/deepseek_v3/train_configs/deepseek_v3_671b.toml at v0.2.2
DEEPSEEK_V3_671B = r'''[job]
dump_folder = "./outputs"
description = "DeepSeek-V3 671B model training"
print_config = false

[profiling]
enable_profiling = false
save_traces_folder = "profile_trace"
profile_freq = 10
enable_memory_snapshot = false
save_memory_snapshot_folder = "memory_snapshot"

[metrics]
log_freq = 10
disable_color_printing = false
enable_tensorboard = false
save_tb_folder = "tb"
enable_wandb = false

[model]
name = "deepseek_v3"
flavor = "671B"
hf_assets_path = "./assets/hf/DeepSeek-V3.1-Base"
# converters = ["float8"]

[optimizer]
name = "AdamW"
lr = 2.2e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 2_000  # lr scheduler warm up, normally 20% of the train steps
decay_ratio = 0.8  # lr scheduler decay ratio, 80% of the train steps
decay_type = "cosine"
min_lr_factor = 0.1

[training]
local_batch_size = 4
seq_len = 4096
max_norm = 1.0  # grad norm clipping
steps = 10_000
dataset = "c4"  # supported datasets: c4_test (2K), c4 (177M)

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
fsdp_reshard_after_forward = "default" # default / never / always
tensor_parallel_degree = 1
enable_async_tensor_parallel = false
pipeline_parallel_degree = 1
pipeline_parallel_schedule = "Interleaved1F1B"
expert_parallel_degree = 1
expert_tensor_parallel_degree = 1

[checkpoint]
enable = false
folder = "checkpoint"
interval = 500
last_save_model_only = true
export_dtype = "float32"
async_mode = "disabled"  # ["disabled", "async", "async_with_pinned_mem]"

[activation_checkpoint]
mode = "selective"  # ["none", "selective", "full"]
selective_ac_option = 'op'  # 'int' = ac every positive int layer or 'op', ac based on ops policy

[compile]
enable = true
components = ["loss"] # ["model", "loss"]

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output", "router.gate"]

[quantize.grouped_mm.float8]
fqns = ["experts"]
'''


def test_llama3_405b_toml_on_128_gpus():
    c = read_torchtitan_toml(LLAMA3_405B, world_size=128)   # "a preset for 128 H100 GPUs"
    lay = c["layout"]
    # dp_shard -1: 128 / (1 * 1 * 8 * 1) = 16
    assert (lay["dp_replicate"], lay["dp_shard"], lay["t"], lay["p"], lay["c"]) == (1, 16, 8, 1, 1)
    assert lay["fsdp_reshard_after_forward"] is True          # "default" without PP
    tr = c["training"]
    assert (tr["seq_len"], tr["local_batch_size"], tr["global_batch_size"]) == (8192, 2, 32)
    assert tr["ac_mode"] == "full"
    p = c["precision"]
    assert p["float8"] and p["enable_fsdp_float8_all_gather"]
    assert (p["mixed_precision_param"], p["mixed_precision_reduce"]) == ("bfloat16", "float32")
    assert c["model"] == {"name": "llama3", "flavor": "405B"}
    assert "optimizer.lr" in c["ignored"] and "job.dump_folder" in c["ignored"]


def test_deepseek_v3_toml_defaults():
    c = read_torchtitan_toml(DEEPSEEK_V3_671B, world_size=64)
    assert c["layout"]["dp_shard"] == 64 and c["training"]["selective_ac_option"] == "op"
    assert c["training"]["global_batch_size"] == 4 * 64


def test_torchtitan_compile_and_per_op_ac_reach_the_job():
    # job_config.py v0.2.2: [compile] enable with "loss" in components compiles the loss
    # (components/loss.py build_cross_entropy_loss); selective_ac_option "op" is per-op SAC
    from memsym.readers.jobs import torchtitan_job

    c405 = read_torchtitan_toml(LLAMA3_405B, world_size=128)       # enable=true, model+loss
    assert c405["training"]["compiled_loss"] is True
    j = torchtitan_job(c405)
    assert j.training.compiled_loss and j.training.recompute == "full"
    # components = ["loss"]: the loss is compiled; DeepSeek-V3 is MoE + MLA, where memsym
    # prices per-op SAC only for dense blocks: Korthikanti's selective, said in a note
    cds = read_torchtitan_toml(DEEPSEEK_V3_671B, world_size=64)
    assert cds["training"]["compiled_loss"] is True
    j = torchtitan_job(cds)
    assert j.training.recompute == "selective"
    assert any("per-op selective AC is modelled for dense" in n for n in j.notes)
    dense = ("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nseq_len = 8192\n"
             "local_batch_size = 1\n[activation_checkpoint]\nmode = \"selective\"\n"
             "selective_ac_option = \"op\"\n[compile]\nenable = true\ncomponents = [\"model\"]\n")
    cfg = read_torchtitan_toml(dense, world_size=8)
    assert cfg["training"]["compiled_loss"] is False             # only the model compiled
    j = torchtitan_job(cfg)
    assert (j.training.recompute, j.training.compiled_loss) == ("selective-op", False)
    # components = ["model"]: apply_compile compiles each block (compiled per-op SAC)
    assert cfg["training"]["compiled_model"] is True and j.training.compiled_model
    assert c405["training"]["compiled_model"] is True            # full AC: nothing to change
    assert not torchtitan_job(c405).training.compiled_model
    assert cds["training"]["compiled_model"] is False            # components = ["loss"]
    assert not any("Korthikanti" in n for n in j.notes)
    default = read_torchtitan_toml("[training]\nseq_len = 8\n", world_size=1)["training"]
    assert default["compiled_loss"] is False and default["compiled_model"] is False
    with pytest.raises(InvalidValueError, match="components"):
        read_torchtitan_toml("[compile]\ncomponents = [\"optimizer\"]\n", world_size=1)


def test_torchtitan_loss_parallel_reaches_the_job():
    # parallel_dims.py: loss parallel when tp > 1 and not parallelism.disable_loss_parallel;
    # the vocab-sharded loss then holds 10 (forward) and 12 (loss backward) bytes per local
    # logit beyond its saved 4, the eager loss on gathered logits 6 and 8
    # (tests/test_transients.py measures both)
    from memsym.readers.jobs import torchtitan_job
    from memsym.training import job_memory

    toml = ("[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nseq_len = 4096\n"
            "local_batch_size = 1\n[parallelism]\ntensor_parallel_degree = 2\n"
            "data_parallel_shard_degree = 4\n")
    on = torchtitan_job(read_torchtitan_toml(toml, world_size=8))
    off = torchtitan_job(read_torchtitan_toml(toml + "disable_loss_parallel = true\n",
                                              world_size=8))
    assert (on.training.loss_parallel, off.training.loss_parallel) == (True, False)
    none = {"workspace": 0, "nccl": 0, "fragmentation": 0}
    pon, poff = (job_memory(j_, allowances=none).phases() for j_ in (on, off))
    local_logits = 4096 * 128256 // 2
    # without it the output layer replicates the logits (apply_tp: output_layouts=Replicate()),
    # so the eager loss holds its saved 4 and its 6 / 8 bytes per logit on all t = 2 shards
    assert pon["forward"] - poff["forward"] == (4 + 10 - 2 * (4 + 6)) * local_logits
    assert pon["loss-backward"] - poff["loss-backward"] == (4 + 12 - 2 * (4 + 8)) * local_logits
    with pytest.raises(InvalidValueError):
        read_torchtitan_toml("[parallelism]\ndisable_loss_parallel = 1\n", world_size=1)


def test_torchtitan_layer_ac_every_nth_block():
    # v0.2.2's default activation checkpointing: mode "selective", selective_ac_option "2".
    # _apply_layer_sac increments one process-wide counter per block and wraps the block in
    # full AC when counter % freq == 0: blocks 2, 4, 6, ... (1-based) of a rank, floor(n/2)
    # of its n, the others keep their activations.  Llama-3 8B's 32 blocks -> 16 wrapped;
    # every 3rd -> 10 (3, 6, ..., 30), not 11
    from memsym.readers.jobs import torchtitan_job

    toml = "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[training]\nseq_len = 8192\n"
    j = torchtitan_job(read_torchtitan_toml(toml, world_size=8))
    assert (j.training.recompute, j.training.recompute_method,
            j.training.recompute_num_layers) == ("full", "every", 2)
    assert any("16 of 32 blocks" in n for n in j.notes)
    # every block (option "1") is plain full AC
    j1 = torchtitan_job(read_torchtitan_toml(
        toml + "[activation_checkpoint]\nselective_ac_option = \"1\"\n", world_size=8))
    assert (j1.training.recompute, j1.training.recompute_method) == ("full", None)
    j3 = torchtitan_job(read_torchtitan_toml(
        toml + "[activation_checkpoint]\nselective_ac_option = \"3\"\n", world_size=8))
    assert any("10 of 32 blocks" in n for n in j3.notes)


def test_torchtitan_layer_ac_counts_each_ranks_blocks():
    # with pipeline parallelism each rank counts its own blocks, across all its stages (the
    # counter is per process, model_parts parallelised in order): Llama-3 405B on 16 ranks,
    # split 7 + 14 x 8 + 7, wraps 3 of the 7 blocks of an end rank and 4 of the 8 of the
    # others, so each rank holds (w/n) of its fully checkpointed activations plus (1 - w/n)
    # of its unrecomputed ones; one rank-wide block count (4 of 7 on the first rank, as
    # memsym once took) under-counts what the first rank keeps by a whole layer x 16
    # micro-batches.  With 4 stages per rank (2 layers each) the count runs across them.
    from memsym.readers.jobs import torchtitan_job
    from memsym.training import stage_activations, training_values

    def held(mode, schedule="1F1B", per_stage=8):
        j = torchtitan_job(read_torchtitan_toml(
            "[model]\nname = \"llama3\"\nflavor = \"405B\"\n[training]\nseq_len = 8192\n"
            "local_batch_size = 16\n[parallelism]\ntensor_parallel_degree = 8\n"
            f"pipeline_parallel_degree = 16\npipeline_parallel_schedule = \"{schedule}\"\n"
            f"pipeline_parallel_layers_per_stage = {per_stage}\n"
            f"[activation_checkpoint]\nmode = \"{mode}\"\n", world_size=16384))
        return [float(stage_activations(j.model, j.layout, j.training, r)["layer_activations"]
                      .evaluate(training_values(j.model, j.layout, j.training, stage=r)))
                for r in (0, 1, 15)]

    for schedule, per_stage in (("1F1B", 8), ("Interleaved1F1B", 2)):
        every, full, none = (held(mode, schedule, per_stage)
                             for mode in ("selective", "full", "none"))
        for i, (wrapped, n) in enumerate(((3, 7), (4, 8), (3, 7))):
            mix = wrapped / n * full[i] + (1 - wrapped / n) * none[i]
            assert every[i] == pytest.approx(mix, rel=1e-12), (schedule, i)


def test_torchtitan_layer_ac_reruns_its_wrapped_blocks():
    # the step reruns the forward of the wrapped blocks only: Llama-3 8B on p = 2 (16 blocks
    # a rank), every 2nd -> 8 of 16, every 3rd -> 5 of 16 (3, 6, ..., 15), so the step time
    # moves that fraction of the way from no recompute to full; Megatron has no such method
    from memsym.job import job
    from memsym.timing.step import step_time

    kw = dict(t=8, p=2, d=4, seq_length=8192, global_batch_size=64, framework="torchtitan",
              sharding="fsdp", sequence_parallel=True)

    def total(**extra):
        j = job("llama3-8b", **kw, **extra)
        return step_time(j.model, j.layout, j.training, "h100-80gb").total

    none, full = total(recompute="none"), total(recompute="full")
    for freq, wrapped in ((2, 8), (3, 5)):
        every = total(recompute="full", recompute_method="every", recompute_num_layers=freq)
        assert (every - none) / (full - none) == pytest.approx(wrapped / 16, rel=1e-9)
    with pytest.raises(InvalidValueError, match="torchtitan"):
        job("llama3-8b", recompute="full", recompute_method="every", recompute_num_layers=2)


def test_torchtitan_pipeline_toml_is_a_torchtitan_job():
    # torchtitan v0.2.2 pipeline_parallel.py: local_batch_size / pipeline_parallel_microbatch_size
    # micro-batches; Interleaved1F1B puts 2 stages on each rank (no layers_per_stage given);
    # FSDP2 with PP is torchtitan's own composition (Megatron and DeepSpeed refuse it)
    from memsym.readers.jobs import torchtitan_job

    toml = ("[model]\nname = \"llama3\"\nflavor = \"405B\"\n[training]\nseq_len = 8192\n"
            "local_batch_size = 32\n[parallelism]\ntensor_parallel_degree = 8\n"
            "pipeline_parallel_degree = 8\npipeline_parallel_microbatch_size = 4\n"
            "pipeline_parallel_schedule = \"Interleaved1F1B\"\n"
            "[activation_checkpoint]\nmode = \"full\"\n")
    cfg = read_torchtitan_toml(toml, world_size=512)
    assert cfg["layout"]["dp_shard"] == 8 and cfg["layout"]["fsdp_reshard_after_forward"] is False
    j = torchtitan_job(cfg)
    assert (j.training.framework, j.training.sharding, j.training.micro_batch_size, j.m) == \
        ("torchtitan", "fsdp", 4, 8)
    assert (j.layout.p, j.layout.v, j.layout.first_stage_layers, j.layout.last_stage_layers) == \
        (8, 2, 15, 15)
    with pytest.raises(InvalidValueError, match="divisible by pipeline_parallel_microbatch_size"):
        read_torchtitan_toml(toml.replace("local_batch_size = 32", "local_batch_size = 30"),
                             world_size=512)
    with pytest.raises(InvalidValueError, match="pipeline_parallel_schedule"):
        read_torchtitan_toml(toml.replace("Interleaved1F1B", "Zigzag"), world_size=512)


def test_torchtitan_degree_rules():
    pp = "[parallelism]\npipeline_parallel_degree = 2\ndata_parallel_shard_degree = 4\n"
    c = read_torchtitan_toml(pp, world_size=8)
    assert c["layout"]["fsdp_reshard_after_forward"] is False   # PP turns resharding off
    with pytest.raises(InvalidValueError, match="!= world size"):
        read_torchtitan_toml(pp, world_size=16)
    with pytest.raises(InvalidValueError, match="world size"):
        read_torchtitan_toml("[parallelism]\ntensor_parallel_degree = 2\n")   # -1 needs W
    # no -1: the world size is the product of the degrees
    c = read_torchtitan_toml(pp)
    assert c["layout"]["world_size"] == 8
    with pytest.raises(InvalidValueError, match="leaves no GPUs"):
        read_torchtitan_toml("[parallelism]\ntensor_parallel_degree = 8\n", world_size=4)


def test_torchtitan_types_and_unknowns():
    with pytest.raises(InvalidValueError, match="must be a int"):
        read_torchtitan_toml("[parallelism]\ntensor_parallel_degree = \"8\"\n", world_size=8)
    with pytest.raises(InvalidValueError, match="one of"):
        read_torchtitan_toml("[activation_checkpoint]\nmode = \"fast\"\n", world_size=8)
    with pytest.raises(InvalidValueError, match="not TOML"):
        read_torchtitan_toml("[parallelism\n")
    c = read_torchtitan_toml("[newsection]\nx = 1\n[training]\nunknown_key = 2\n", world_size=2)
    assert c["ignored"] == ("newsection.x", "training.unknown_key")
    with pytest.raises(InvalidValueError, match="multiple"):
        read_torchtitan_toml("[training]\nlocal_batch_size = 3\nglobal_batch_size = 10\n",
                             world_size=2)


def test_torchtitan_split_follows_schedule_and_stage_weights():
    # v0.2.2 pipeline_parallel.py: schedule names are case-insensitive (get_schedule_class);
    # the V schedules put stages r and 2p-1-r on rank r; first/last_stage_less_layers weigh
    # the embedding and output.  Llama-3 405B, 126 layers, p = 8:
    #   Interleaved1F1B: 16 stages of 8, ends 7 -> ranks 7+8 ... 8+7 = 15, 16 x 6, 15
    #   ZBVZeroBubble: rank 0 holds stages 0 and 15 (7 + 7 = 14), the others 8 + 8
    #   1F1B with weights 0/0: 126/8 = 15 r 6 -> 16 x 6, 15, 15 (middle uneven: refused)
    from memsym.readers.jobs import torchtitan_job

    def toml(schedule, extra=""):
        return ("[model]\nname = \"llama3\"\nflavor = \"405B\"\n[training]\nseq_len = 8192\n"
                "local_batch_size = 16\n[parallelism]\ntensor_parallel_degree = 8\n"
                f"pipeline_parallel_degree = 8\npipeline_parallel_schedule = \"{schedule}\"\n"
                + extra + "[activation_checkpoint]\nmode = \"full\"\n")

    j = torchtitan_job(read_torchtitan_toml(toml("interleaved1f1b"), world_size=512))
    assert (j.layout.v, j.layout.first_stage_layers, j.layout.last_stage_layers) == (2, 15, 15)
    assert j.training.stage_placement == "loop"
    j = torchtitan_job(read_torchtitan_toml(toml("ZBVZeroBubble"), world_size=512))
    assert (j.layout.first_stage_layers, j.layout.last_stage_layers) == (14, 16)
    # and rank 0 holds the output layer and the loss (memsym.training.output_stage)
    assert j.training.stage_placement == "v"
    assert any("rank 0 holds the embedding, the output layer and the loss" in n
               for n in j.notes)
    weights = ("pipeline_parallel_first_stage_less_layers = 0\n"
               "pipeline_parallel_last_stage_less_layers = 0\n")
    with pytest.raises(InvalidValueError, match=r"\[16, 16, 16, 16, 16, 16, 15, 15\]"):
        torchtitan_job(read_torchtitan_toml(toml("1F1B", weights), world_size=512))
    with pytest.raises(InvalidValueError, match="pipeline_parallel_schedule must be one of"):
        read_torchtitan_toml(toml("Zigzag"), world_size=512)


def test_torchtitan_layers_per_stage_sets_the_stages_per_rank():
    # v0.2.2 pipeline_llm: S = ceil((L + 1 + 1) / layers_per_stage) stages, p must divide S;
    # a single-stage schedule needs S = p, a multi-stage one S >= 2p; the V schedules exactly
    # 2 per rank (torch's ZBVZeroBubble).  Llama-3 405B on 16 ranks, 2 layers per stage:
    # 64 stages, 4 per rank, split 7 + 14 x 8 + 7 (Meta's Llama 3 split, arXiv:2407.21783)
    from memsym.readers.jobs import torchtitan_job

    def toml(schedule, per_stage, p=16):
        return ("[model]\nname = \"llama3\"\nflavor = \"405B\"\n[training]\nseq_len = 8192\n"
                "local_batch_size = 16\n[parallelism]\ntensor_parallel_degree = 8\n"
                f"pipeline_parallel_degree = {p}\npipeline_parallel_schedule = \"{schedule}\"\n"
                f"pipeline_parallel_layers_per_stage = {per_stage}\n"
                "[activation_checkpoint]\nmode = \"full\"\n")

    j = torchtitan_job(read_torchtitan_toml(toml("Interleaved1F1B", 2), world_size=16384))
    assert (j.layout.p, j.layout.v, j.layout.first_stage_layers, j.layout.last_stage_layers) \
        == (16, 4, 7, 7)
    j = torchtitan_job(read_torchtitan_toml(toml("Interleaved1F1B", 1), world_size=16384))
    assert j.layout.v == 8
    j = torchtitan_job(read_torchtitan_toml(toml("1F1B", 8), world_size=16384))
    assert (j.layout.v, j.layout.first_stage_layers) == (None, 7)
    for schedule, per_stage, match in (("Interleaved1F1B", 3, "divisible by the pipeline"),
                                       ("1F1B", 4, "single-stage schedule needs 1"),
                                       ("Interleaved1F1B", 8, "at least 2 stages"),
                                       ("ZBVZeroBubble", 2, "exactly 2 stages")):
        with pytest.raises(InvalidValueError, match=match):
            torchtitan_job(read_torchtitan_toml(toml(schedule, per_stage), world_size=16384))
    with pytest.raises(InvalidValueError, match="between 1 and"):
        read_torchtitan_toml(toml("1F1B", 0), world_size=16384)


def test_torchtitan_looped_bfs_holds_what_gpipe_holds():
    # torch's ScheduleLoopedBFS runs every micro-batch through each of a rank's stages before
    # any backward: with 2 layers per stage (4 stages per rank, split 7 + 14 x 8 + 7) each
    # rank holds its layers for all m = 32 micro-batches, as GPipe with one 8-layer stage per
    # rank (the same split) does; Interleaved1F1B's warm-up on the same stages holds less
    # (torch's rounds of N = 16: 2(p - 1 - r) + 3 N + 1 of the 128 chunk passes)
    from memsym.readers.jobs import torchtitan_job
    from memsym.training import stage_activations, training_values

    def job_of(schedule, per_stage):
        return torchtitan_job(read_torchtitan_toml(
            "[model]\nname = \"llama3\"\nflavor = \"405B\"\n[training]\nseq_len = 8192\n"
            "local_batch_size = 32\n[parallelism]\ntensor_parallel_degree = 8\n"
            f"pipeline_parallel_degree = 16\npipeline_parallel_schedule = \"{schedule}\"\n"
            f"pipeline_parallel_layers_per_stage = {per_stage}\n"
            "[activation_checkpoint]\nmode = \"none\"\n", world_size=16384))

    bfs, gpipe, inter = job_of("LoopedBFS", 2), job_of("GPipe", 8), job_of("Interleaved1F1B", 2)
    assert (bfs.training.schedule, bfs.layout.v) == ("gpipe", 4)
    assert not any("counted as interleaved" in n for n in bfs.notes)
    for rank in (0, 1, 15):
        held = [float(stage_activations(j.model, j.layout, j.training, rank)["layer_activations"]
                      .evaluate(training_values(j.model, j.layout, j.training, stage=rank)))
                for j in (bfs, gpipe, inter)]
        assert held[0] == pytest.approx(held[1], rel=1e-12), rank
        assert held[2] < held[0], rank


def test_torchtitan_only_switches_say_when_they_do_nothing():
    # loss parallel and the FSDP2 root group are torchtitan's: elsewhere a note says so
    from memsym.job import job

    j = job("llama3-8b", d=8, seq_length=8192, loss_parallel=False, fsdp_root_group=True)
    assert any("loss_parallel = False" in n for n in j.notes)
    assert any("fsdp_root_group has effect only" in n for n in j.notes)
    j = job("llama3-8b", d=8, seq_length=8192, framework="torchtitan", sharding="fsdp",
            fsdp_root_group=True)
    assert not any("fsdp_root_group" in n for n in j.notes)
