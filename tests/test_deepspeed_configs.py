"""Real DeepSpeed configs, copied verbatim, read as the Hugging Face Trainer and DeepSpeed read them.

Sources (each config below names its file):

* huggingface/transformers ``tests/deepspeed/ds_config_zero2.json`` at 9490c0a0ba and
  ``ds_config_zero3.json`` at e7a14199e5 (the Trainer's own DeepSpeed test configs);
* deepspeedai/DeepSpeedExamples at 45b4b7156c: ``training/autotuning/hf/dsconfigs/``,
  ``training/tensor_parallel/hf_integration/configs/ds_config.json``,
  ``training/DeepSpeed-ZenFlow/finetuning/zf_config.json``,
  ``training/imagenet/config/ds_fp16_z1_config.json``,
  ``training/pipeline_parallelism/ds_config.json``.

The expected values are what a user derives by hand: the Trainer fills "auto" from its
arguments (transformers 3a80c166 ``integrations/deepspeed.py``,
``HfTrainerDeepSpeedConfig.trainer_config_process``: micro-batch from
``per_device_train_batch_size``, ``train_batch_size = world x micro x accumulation``, fp16 / bf16
from ``--fp16`` / ``--bf16``, both False by default; ``trainer_config_finalize``: h^2,
int(0.9 h^2), 10 h), Accelerate adds a missing bf16 section under ``--bf16`` (accelerate 16cb6eb8
``utils/dataclasses.py``, ``DeepSpeedPlugin.set_mixed_precision``) and DeepSpeed completes the
batch (``runtime/config.py``, ``_set_batch_related_parameters``).
"""

from __future__ import annotations

import json

import pytest

from memsym.errors import InvalidValueError, LimitError
from memsym.model import preset
from memsym.readers import read_deepspeed_config
from memsym.readers.jobs import deepspeed_job
from memsym.training import phase_transients
from in_process import run

# transformers tests/deepspeed/ds_config_zero2.json @ 9490c0a0ba8b4c001ab6a6bc038b5caca4d573ae
HF_ZERO2 = """{
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1
    },

    "optimizer": {
        "type": "AdamW",
        "params": {
            "lr": "auto",
            "betas": "auto",
            "eps": "auto",
            "weight_decay": "auto"
        }
    },

    "scheduler": {
        "type": "WarmupLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto"
        }
    },

    "zero_optimization": {
        "stage": 2,
        "offload_optimizer": {
            "device": "cpu",
            "pin_memory": true
        },
        "allgather_partitions": true,
        "allgather_bucket_size": 2e8,
        "overlap_comm": true,
        "reduce_scatter": true,
        "reduce_bucket_size": 2e8,
        "contiguous_gradients": true
    },

    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false
}
"""

# transformers tests/deepspeed/ds_config_zero3.json @ e7a14199e5d8cd78571ebfcde8221b16a1950ac4
HF_ZERO3 = """{
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1
    },

    "optimizer": {
        "type": "AdamW",
        "params": {
            "lr": "auto",
            "betas": "auto",
            "eps": "auto",
            "weight_decay": "auto"
        }
    },

    "scheduler": {
        "type": "WarmupLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto"
        }
    },

    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {
            "device": "cpu",
            "pin_memory": true
        },
        "offload_param": {
            "device": "cpu",
            "pin_memory": true
        },
        "overlap_comm": true,
        "contiguous_gradients": true,
        "sub_group_size": 1e14,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
        "stage3_gather_fp16_weights_on_model_save": true
    },

    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false
}
"""

# DeepSpeedExamples training/autotuning/hf/dsconfigs/ds_config_z3.json @ 45b4b7156c
DSE_AUTOTUNE_Z3 = """{
  "train_micro_batch_size_per_gpu": "auto",
  "zero_optimization": {
    "stage": 3
  }
}
"""

# DeepSpeedExamples training/autotuning/hf/dsconfigs/ds_config_fp16_z2.json @ 45b4b7156c
DSE_AUTOTUNE_FP16_Z2 = """{
  "train_micro_batch_size_per_gpu": "auto",
  "zero_optimization": {
    "stage": 2
  },
  "fp16": {
    "enabled": true
  }
}
"""

# DeepSpeedExamples training/tensor_parallel/hf_integration/configs/ds_config.json @ 45b4b7156c
DSE_AUTOTP = """{
    "bf16": {
      "enabled": "auto"
    },
    "optimizer": {
      "type": "AdamW",
      "params": {
        "lr": "auto",
        "betas": "auto",
        "eps": "auto",
        "weight_decay": "auto"
      }
    },
    "scheduler": {
      "type": "WarmupDecayLR",
      "params": {
        "total_num_steps": "auto",
        "warmup_min_lr": "auto",
        "warmup_max_lr": "auto",
        "warmup_num_steps": "auto"
      }
    },
    "zero_optimization": {
      "stage": 2,
      "gather_16bit_weights_on_model_save": true
    },
    "tensor_parallel":{
      "autotp_size": 4
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 1,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false
}"""

# DeepSpeedExamples training/DeepSpeed-ZenFlow/finetuning/zf_config.json @ 45b4b7156c
DSE_ZENFLOW = """{
    "train_batch_size": 8,
    "bf16": { "enabled": true },
    "zero_optimization": {
      "stage": 2,
      "offload_optimizer": {
        "device": "cpu",
        "pin_memory": true
      },
      "zenflow": {
            "topk_ratio": 0.1,
            "update_interval": 4,
            "full_warm_up_rounds": 0,
            "overlap_step": true
        }
    },
    "optimizer": {
      "type": "AdamW",
      "params": {
        "lr": 2e-5,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.01
      }
    },
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "zero_allow_untested_optimizer": true
}
""" + "  \n"     # the file ends with a line of two spaces

# DeepSpeedExamples training/imagenet/config/ds_fp16_z1_config.json @ 45b4b7156c
DSE_IMAGENET_FP16_Z1 = """{
    "train_batch_size": 256,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 50,

    "optimizer": {
\t"type": "Adam",
\t"params": {
\t    "lr": 0.001,
\t    "betas": [
\t\t0.8,
\t\t0.999
\t    ],
\t    "eps": 1e-8,
\t    "weight_decay": 3e-7
\t}
    },

    "zero_optimization": {
\t"stage": 1
    },
    "zero_allow_untested_optimizer": true,
    "fp16": {
\t"enabled": true,
\t"auto_cast": true
    },
    "gradient_clipping": 0,
    "prescale_gradients": false,
    "cuda_visible_devices": 0,
    "wall_clock_breakdown" : false
}
"""

# DeepSpeedExamples training/pipeline_parallelism/ds_config.json @ 45b4b7156c
DSE_PIPELINE = """ {
  "train_batch_size" : 256,
  "train_micro_batch_size_per_gpu" : 8,

   "optimizer": {
    "type": "Adam",
    "params": {
      "lr": 0.001,
      "betas": [
        0.9,
        0.999
      ],
      "eps": 1e-8
    }
  },
  
  "steps_per_print" : 10,
  "wall_clock_breakdown" : false
 }
"""


def defaults_of(cfg) -> dict:
    return {key: value for key, value, _ in cfg["defaults"]}


def test_transformers_zero2_filled_from_the_trainer_arguments():
    # --per_device_train_batch_size 4 on 8 GPUs with --bf16: train_batch_size = 8 x 4 x 1
    c = read_deepspeed_config(HF_ZERO2, 8, micro_batch_size=4, precision="bf16")
    assert c["training"] == {"micro_batch_size": 4, "gradient_accumulation_steps": 1,
                             "global_batch_size": 32}
    # fp16.enabled "auto" <- --fp16 (False); Accelerate adds bf16 {"enabled": true}
    assert c["precision"]["params_dtype"] == "bf16"
    assert defaults_of(c) == {"train_micro_batch_size_per_gpu": 4,
                              "gradient_accumulation_steps": 1, "train_batch_size": 32,
                              "bf16.enabled": True, "fp16.enabled": False}
    sources = {key: src for key, _, src in c["defaults"]}
    assert "trainer_config_process" in sources["train_batch_size"]
    assert "set_mixed_precision" in sources["bf16.enabled"]
    sh = c["sharding"]
    assert (sh["zero_stage"], sh["offload_optimizer"], sh["offload_param"]) == (2, "cpu", "none")
    assert sh["reduce_bucket_size"] == sh["allgather_bucket_size"] == 200_000_000
    # loss scaling and the scheduler change no memory: listed, not dropped silently
    for key in ("fp16.loss_scale", "scheduler", "gradient_clipping", "optimizer.params",
                "zero_optimization.offload_optimizer.pin_memory"):
        assert key in c["ignored"], key
    assert any(n.startswith("zero_optimization.allgather_bucket_size = 200000000 read")
               for n in c["notes"])
    j = deepspeed_job(c, "llama2-7b", seq_length=2048)
    t = j.training
    assert (t.sharding, t.offload, t.precision, t.optimizer) == ("zero2", "optimizer", "bf16",
                                                                 "adam")
    assert (j.layout.d, t.micro_batch_size, t.global_batch_size) == (8, 4, 32)
    # the IPG buckets DeepSpeed allocates (stage_1_and_2.py, setup_buckets): buf_0 and, with
    # overlap_comm, buf_1, each reduce_bucket_size elements of the 2-byte optimizer dtype
    ipg = [term for term in phase_transients(j, 0)["backward"]
           if term.key == "ipg_buckets"]
    assert [int(term.expr) for term in ipg] == [2 * 200_000_000 * 2]


def test_transformers_zero3_hidden_size_autos():
    # Llama-2-7B: hidden_size 4096 (its config.json); the Trainer writes 4096^2,
    # int(0.9 * 4096^2) = int(15099494.4) and 10 x 4096
    c = read_deepspeed_config(HF_ZERO3, 8, micro_batch_size=1)
    assert c["sharding"]["reduce_bucket_size"] == "auto"      # the model is not known yet
    j = deepspeed_job(c, "llama2-7b", seq_length=4096)
    rows = {key: value for key, value, _ in j.defaults}
    assert rows["zero_optimization.reduce_bucket_size"] == 16_777_216
    assert rows["zero_optimization.stage3_prefetch_bucket_size"] == 15_099_494
    assert rows["zero_optimization.stage3_param_persistence_threshold"] == 40_960
    assert dict(j.training.zero_buckets)["stage3_prefetch_bucket_size"] == 15_099_494
    # neither --fp16 nor --bf16: the Trainer's defaults leave DeepSpeed in fp32
    assert rows["fp16.enabled"] is False and j.training.precision == "fp32"
    assert (j.training.sharding, j.training.offload) == ("zero3", "optimizer+params")
    assert (j.layout.d, j.training.micro_batch_size, j.training.global_batch_size) == (8, 1, 8)
    # ZeRO-3's keys without a term: said, with their values
    notes = " ".join(c["notes"])
    for key in ("sub_group_size = 100000000000000", "stage3_max_live_parameters = 1000000000",
                "stage3_param_persistence_threshold"):
        assert key in notes, key
    assert "zero_optimization.stage3_gather_fp16_weights_on_model_save" in c["ignored"]


@pytest.mark.parametrize("hidden", [768, 2048, 4096, 5120, 7168, 8192, 12288, 16384, 18432])
def test_prefetch_auto_is_the_trainers_float_expression(hidden):
    # trainer_config_finalize writes int(0.9 * hidden_size * hidden_size); memsym's exact
    # (9 h^2) // 10 must give the same integer on real widths (GPT-2 to DeepSeek-V3's 7168,
    # Llama-3-405B's 16384)
    c = read_deepspeed_config(HF_ZERO3, 8, micro_batch_size=1, hidden_size=hidden)
    assert c["sharding"]["stage3_prefetch_bucket_size"] == int(0.9 * hidden * hidden)


def test_auto_refused_in_one_line_naming_the_option(capsys, tmp_path):
    with pytest.raises(InvalidValueError, match='train_micro_batch_size_per_gpu is "auto": '
                       "pass --micro-batch-size"):
        read_deepspeed_config(HF_ZERO2, 8)
    with pytest.raises(InvalidValueError, match='train_batch_size is "auto".*pass --world-size'):
        read_deepspeed_config(HF_ZERO2, micro_batch_size=2)
    path = tmp_path / "ds_config_zero2.json"
    path.write_text(HF_ZERO2, encoding="utf-8")
    for extra, said in (((), "pass --micro-batch-size"),
                        (("--micro-batch-size", 2, "--precision", "fp8"), "bf16, fp16 or fp32")):
        code, out, err = run(capsys, "estimate", "llama2-7b", "--deepspeed-config", path,
                             "--world-size", 8, "--seq-length", 2048, *extra)
        assert code == 2 and out == "" and said in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_reports_filled_values_ignored_keys_and_notes(capsys, tmp_path):
    path = tmp_path / "ds_config_zero3.json"
    path.write_text(HF_ZERO3, encoding="utf-8")
    base = ["estimate", "llama2-7b", "--deepspeed-config", path, "--world-size", 8,
            "--seq-length", 2048, "--micro-batch-size", 2, "--num-microbatches", 4,
            "--precision", "bf16"]
    code, out, err = run(capsys, *base, "--json")
    rep = json.loads(out)
    assert code == 0 and rep["read_as"] == "a DeepSpeed config"
    assert rep["training"]["micro_batch_size"] == 2 and rep["layout"]["dp"] == 8
    rows = {row["option"]: row for row in rep["defaults"]}
    # train_batch_size = 2 x 4 x 8; fp16 "auto" <- --fp16 False; bf16 added by Accelerate
    assert rows["train_batch_size"]["value"] == 64
    assert rows["gradient_accumulation_steps"]["value"] == 4
    assert "--num-microbatches" in rows["gradient_accumulation_steps"]["source"]
    assert rows["bf16.enabled"]["value"] is True
    assert "scheduler" in rep["ignored"] and "steps_per_print" in rep["ignored"]
    assert any("sub_group_size" in n for n in rep["notes"])
    code, text, err = run(capsys, *base)
    assert code == 0 and "ignored (no effect on memory or time): " in text
    assert "default: train_batch_size = 64" in text


def test_a_value_of_the_config_and_a_contradicting_option_are_refused():
    # the Trainer's fill_match: a set value must match the argument (trainer_config_finalize
    # raises on the mismatch); Accelerate refuses --bf16 beside an fp16 config
    with pytest.raises(InvalidValueError, match="contradicts.*train_micro_batch_size_per_gpu 8"):
        read_deepspeed_config(DSE_PIPELINE, 8, micro_batch_size=2)
    with pytest.raises(InvalidValueError, match="enables fp16"):
        read_deepspeed_config(DSE_AUTOTUNE_FP16_Z2, 8, micro_batch_size=2, precision="bf16")
    with pytest.raises(InvalidValueError, match="--precision fp16 contradicts"):
        read_deepspeed_config(DSE_ZENFLOW, 8, precision="fp16")
    # the same value is fine
    assert read_deepspeed_config(DSE_PIPELINE, 8, micro_batch_size=8)["training"][
        "micro_batch_size"] == 8


def test_deepspeed_examples_autotuning():
    c = read_deepspeed_config(DSE_AUTOTUNE_Z3, 16, micro_batch_size=3)
    # no train_batch_size, no accumulation: DeepSpeed's rule gives 3 x 16 and GAS 1
    assert c["training"] == {"micro_batch_size": 3, "gradient_accumulation_steps": 1,
                             "global_batch_size": 48}
    assert c["precision"]["params_dtype"] == "fp32" and c["sharding"]["zero_stage"] == 3
    assert defaults_of(c)["precision"] == "fp32"
    # the Trainer's --bf16 through Accelerate adds the section the config lacks
    assert read_deepspeed_config(DSE_AUTOTUNE_Z3, 16, micro_batch_size=3, precision="bf16")[
        "precision"]["params_dtype"] == "bf16"
    c = read_deepspeed_config(DSE_AUTOTUNE_FP16_Z2, 16, micro_batch_size=3)
    assert (c["precision"]["params_dtype"], c["sharding"]["zero_stage"]) == ("fp16", 2)


def test_deepspeed_examples_autotp_read():
    # autotp_size 4 on 8 GPUs: DeepSpeed's (data, tensor) mesh is (8 // 4, 4)
    # (utils/groups.py:146-155 @ edaa722126); the Trainer's "auto" train_batch_size is
    # 1 x 1 x 8 processes, but a TP group's 4 ranks read the same micro-batch
    # (accelerate data_loader.py:1124-1128), so a step trains 1 x 1 x 2 = 2 sequences
    c = read_deepspeed_config(DSE_AUTOTP, 8, micro_batch_size=1, precision="bf16")
    assert c["precision"]["params_dtype"] == "bf16" and c["training"]["global_batch_size"] == 2
    assert (c["layout"]["t"], c["layout"]["d"]) == (4, 2)
    assert any(n.startswith("tensor_parallel.autotp_size 4:") for n in c["notes"])
    assert not any(k.startswith("tensor_parallel") for k in c["ignored"])
    assert "zero_optimization.gather_16bit_weights_on_model_save" in c["ignored"]


def test_deepspeed_examples_without_auto():
    # ZenFlow: 8 = micro x 1 x 8 -> micro 1; ZeRO-2 with the optimizer on the CPU
    c = read_deepspeed_config(DSE_ZENFLOW, 8)
    assert c["training"]["micro_batch_size"] == 1 and c["precision"]["params_dtype"] == "bf16"
    assert (c["sharding"]["zero_stage"], c["sharding"]["offload_optimizer"]) == (2, "cpu")
    assert any(n.startswith("zero_optimization.zenflow = {...} read") for n in c["notes"])
    assert c["defaults"] == ()
    # ImageNet: 256 / (1 x 8) = 32 per GPU, fp16, ZeRO-1
    c = read_deepspeed_config(DSE_IMAGENET_FP16_Z1, 8)
    assert c["training"]["micro_batch_size"] == 32 and c["precision"]["params_dtype"] == "fp16"
    assert c["sharding"]["zero_stage"] == 1 and "fp16.auto_cast" in c["ignored"]
    # pipeline example: 256 = 8 x GAS x 8 -> GAS 4 (DeepSpeed's floor divisions); stage 0, fp32
    c = read_deepspeed_config(DSE_PIPELINE, 8)
    assert c["training"]["gradient_accumulation_steps"] == 4
    j = deepspeed_job(c, "llama2-7b", seq_length=1024)
    assert (j.training.sharding, j.training.precision, j.training.global_batch_size, j.m) == (
        "ddp", "fp32", 256, 4)


def test_keys_that_change_memory_are_read_not_dropped():
    cfg = {"train_micro_batch_size_per_gpu": 1,
           "bf16": {"enabled": True, "bf16_master_weights_and_grads": True,
                    "bf16_optimizer_states": True},
           "activation_checkpointing": {"partition_activations": True,
                                        "cpu_checkpointing": True},
           "zero_optimization": {"stage": 3, "zero_quantized_weights": True,
                                 "zero_hpz_partition_size": 8, "zero_quantized_gradients": True,
                                 "cpu_offload": True, "reduce_bucket_size": 1e8}}
    c = read_deepspeed_config(cfg, 64)
    notes = " ".join(c["notes"])
    for key in ("bf16.bf16_master_weights_and_grads", "bf16.bf16_optimizer_states",
                "activation_checkpointing read", "zero_quantized_weights = True",
                "zero_hpz_partition_size = 8", "zero_quantized_gradients = True",
                "reduce_bucket_size = 100000000 read"):
        assert key in notes, key
    # the deprecated cpu_offload is DeepSpeed's offload_optimizer {"device": "cpu"}
    assert c["sharding"]["offload_optimizer"] == "cpu"
    # a switched-off section asks for nothing: listed as ignored
    off = read_deepspeed_config({"train_micro_batch_size_per_gpu": 1,
                                 "activation_checkpointing": {}}, 8)
    assert "activation_checkpointing" in off["ignored"]


def test_sizes_from_the_file_have_limits():
    # memsym.limits: buckets and thresholds are element counts (parameters, 10^16), the
    # ZeRO++ partition a GPU count (2^40)
    for zero, name in (({"reduce_bucket_size": 1e17}, "parameters"),
                       ({"sub_group_size": 10**17}, "parameters"),
                       ({"zero_hpz_partition_size": 2**41}, "gpus")):
        with pytest.raises(LimitError, match=name):
            read_deepspeed_config({"train_micro_batch_size_per_gpu": 1,
                                   "zero_optimization": {"stage": 3, **zero}}, 8)
    with pytest.raises(LimitError, match="micro_batch"):
        read_deepspeed_config({"train_micro_batch_size_per_gpu": 2**41}, 8)
    with pytest.raises(LimitError, match="hidden"):
        read_deepspeed_config(HF_ZERO3, 8, micro_batch_size=1, hidden_size=2**25)
    assert preset("llama2-7b").hidden_size == 4096    # the width the zero3 test works with


# deepspeedai/DeepSpeed docs/_pages/config-json.md @ edaa722126, "Expert Parallel (AutoEP)"
AUTOEP_DOC = """
  "expert_parallel": {
    "enabled": true,
    "autoep_size": 4,
    "preset_model": "mixtral"
  }
"""


def test_autoep_splits_the_experts():
    # AutoEP's autoep_size: Mixtral's 8 experts over 4 ranks, 2 per rank (parse_autoep_config)
    cfg = json.loads('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, '
                     '"zero_optimization": {"stage": 2},' + AUTOEP_DOC + "}")
    c = read_deepspeed_config(cfg, 8)
    assert c["layout"]["e"] == 4 and "expert_parallel.preset_model" in c["ignored"]
    j = deepspeed_job(c, "mixtral-8x7b", seq_length=4096)
    assert (j.layout.e, j.layout.d, j.training.sharding) == (4, 8, "zero2")
    # switched off: no split
    cfg["expert_parallel"]["enabled"] = False
    assert read_deepspeed_config(cfg, 8)["layout"]["e"] is None
