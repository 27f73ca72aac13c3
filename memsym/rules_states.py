"""The framework rules on a job's training states: offloading, gradient sharding, Torch-FSDP2
and Megatron-FSDP beside pipeline and expert parallelism, and the precision of the parameter
gather.  They join :data:`memsym.rules.RULES` (checked and searched with every other rule).
"""

from __future__ import annotations

from .errors import InvalidValueError
from .model.layer_patterns import is_hybrid
from .rule import Rule, negate
from .term import Source

__all__ = ["STATE_RULES"]

#: The rules on the states, in the order the table checks them.
STATE_RULES = (
    Rule("offload-pp", "CPU offload only with p = 1 (Megatron-Core refuses PP with offloading)",
         lambda x, k: (k["p"] > 1) & k.get("offload", False),
         lambda x, k: ("CPU offload needs p = 1: Megatron-Core refuses pipeline parallelism "
                       "with CPU offloading"),
         Source("megatron-lm-arguments", "megatron/core/transformer/transformer_config.py, "
                "TransformerConfig.__post_init__ (\"Currently there is no support for Pipeline "
                "parallelism with CPU offloading\")"),
         InvalidValueError),
    Rule("zero-pp", "ZeRO-2/3 and FSDP shard gradients per micro-batch: no pipeline parallelism "
         "(except Megatron-FSDP, which Megatron-LM runs with PP, and torchtitan's FSDP2)",
         lambda x, k: (k["p"] > 1) & k.get("shards_gradients", False)
         & negate(k.get("torchtitan", False)) & negate(k.get("megatron_fsdp", False)),
         lambda x, k: ("ZeRO-2/3 and FSDP need p = 1: DeepSpeed's PipelineEngine asserts ZeRO "
                       "stage < 2 and Megatron-LM refuses --use-torch-fsdp2 with pipeline "
                       "parallelism (use zero1 or the distributed optimizer with PP, or "
                       "Megatron-FSDP: megatron_fsdp optim_grads / optim_grads_params; "
                       "torchtitan runs FSDP2 with PP: framework=\"torchtitan\")"),
         Source("deepspeed-pipe", "PipelineEngine.__init__ (assert zero_optimization_stage() < 2); "
                "Megatron-LM megatron/training/arguments.py at d98e8a64dd, validate_args: "
                "--use-torch-fsdp2 asserts pipeline_model_parallel_size == 1 (l. 1034), the "
                "use_megatron_fsdp block (l. 1118-1187) checks no pipeline size"),
         InvalidValueError),
    Rule("fsdp2-ep", "Megatron-LM's --use-torch-fsdp2 runs without expert parallelism (e = 1)",
         lambda x, k: (k["e"] > 1) & k.get("torch_fsdp2", False),
         lambda x, k: (f"--use-torch-fsdp2 needs e = 1 (got e = {k['e']}): Megatron-LM refuses "
                       "expert parallelism with Torch-FSDP2 (Megatron-FSDP runs with it: "
                       "megatron_fsdp optim_grads_params)"),
         Source("megatron-lm-arguments", "megatron/training/arguments.py at d98e8a64dd, "
                "validate_args l. 1036 (--use-torch-fsdp2 is not supported with expert "
                "parallelism)"),
         InvalidValueError),
    Rule("torchtitan-ep-replicas", "torchtitan wraps an expert-parallel model in FSDP2: "
         "e > 1 runs under fsdp, not as plain replicas (ddp)",
         lambda x, k: (k["e"] > 1) & k.get("torchtitan", False)
         & negate(k.get("shards_gradients", True)),
         lambda x, k: (f"torchtitan with expert parallelism (e = {k['e']}) shards the model with "
                       "FSDP2 over the expert mesh (dp_replicate x efsdp): sharding ddp has no "
                       "such job; use sharding fsdp (data_parallel_shard_degree > 1)"),
         Source("torchtitan", "v0.2.2 models/llama4/infra/parallelize.py:181 (apply_fsdp when "
                "fsdp_enabled or ep_enabled; apply_ddp only otherwise, 217-219); b5bcd76c6 "
                "distributed/parallel_dims.py:205-208 (efsdp kept whenever ep > 1: \"we need "
                "FSDP wrapping to help the MoE layers\") and models/qwen3/parallelize.py:85 "
                "(fully_shard on every model, no DDP)"),
         InvalidValueError),
    Rule("fp4-fp8-param-gather", "--fp4-param-gather and --fp8-param-gather exclude each other",
         lambda x, k: k.get("fp4_param_gather", False) & k.get("fp8_param_gather", False),
         lambda x, k: ("fp4_param_gather and fp8_param_gather cannot be used together: Megatron "
                       "needs --fp4-format for the one, --fp8-format for the other, and refuses "
                       "both formats at once"),
         Source("megatron-lm-arguments", "megatron/training/arguments.py:1099-1105 validate_args "
                "(\"--fp4-format and --fp8-format cannot be used simultaneously\"; "
                "\"--fp4-param-gather must be used together with --fp4-format\"); "
                "megatron/core/transformer/transformer_config.py:1566-1582"),
         InvalidValueError),
    Rule("fp4-param-gather-format", "--fp4-param-gather needs the NVFP4 format (precision fp4)",
         lambda x, k: k.get("fp4_param_gather", False) & (k.get("precision", "fp4") != "fp4"),
         lambda x, k: (f"fp4_param_gather needs precision fp4, not {k.get('precision')} "
                       "(Megatron: --fp4-param-gather must be used together with --fp4-format)"),
         Source("megatron-lm-arguments", "megatron/training/arguments.py:1103-1105 validate_args"),
         InvalidValueError),
    Rule("fp8-param-gather-format", "--fp8-param-gather needs the FP8 format (precision fp8)",
         lambda x, k: k.get("fp8_param_gather", False) & (k.get("precision", "fp8") != "fp8"),
         lambda x, k: (f"fp8_param_gather needs precision fp8, not {k.get('precision')} "
                       "(Megatron: fp8_param must be used together with fp8 mode)"),
         Source("megatron-lm-arguments", "megatron/core/transformer/transformer_config.py:1566-1567"),
         InvalidValueError),
    Rule("muon-sharding", "Muon runs under DDP or the (layer-wise) distributed optimizer only: "
         "no ZeRO-1/2/3, FSDP, Megatron-FSDP, DeepSpeed or torchtitan",
         lambda x, k: k.get("muon", False) & (k.get("shards_gradients", False)
                                              | k.get("zero1", False)
                                              | k.get("megatron_fsdp", False)
                                              | k.get("torchtitan", False)
                                              | k.get("deepspeed", False)),
         lambda x, k: ("optimizer muon is Megatron-core's (--optimizer muon): it runs under DDP or "
                       "--use-distributed-optimizer (the layer-wise distributed optimizer), and "
                       "Megatron-LM refuses it with Torch-FSDP2 and Megatron-FSDP"),
         Source("megatron-lm-arguments", "megatron/training/arguments.py:1724-1740 validate_args "
                "(\"Emerging optimizer does not support Torch-FSDP2 / Megatron-FSDP for now\"); "
                "megatron/core/optimizer/__init__.py:758-759 (MFSDP v2)"),
         InvalidValueError),
    Rule("muon-fp16", "Muon does not run under fp16",
         lambda x, k: k.get("muon", False) & (k.get("precision") == "fp16"),
         lambda x, k: "optimizer muon under fp16: Megatron-core refuses it (emerging optimizer "
                      "with fp16 is not supported); use bf16",
         Source("megatron-core", "core/optimizer/__init__.py:774-775, "
                "_get_megatron_emerging_optimizer"),
         InvalidValueError),
    Rule("muon-hybrid", "memsym prices Muon for models whose layers are alike only (not hybrid "
         "Mamba / linear-attention ones, nor Gemma 4's wider global layers)",
         lambda x, k: k.get("muon", False) & is_hybrid(x),
         lambda x, k: ("optimizer muon on a model whose layers differ ("
                       + ", ".join(sorted(set(x.layer_mixers or ("attention",))))
                       + (", layers without an MLP" if x.ffn_layers is not None else "")
                       + "): memsym counts Muon's states for alike transformer layers only "
                       "(Megatron, for one, leaves Mamba's in_proj to the scalar Adam)"),
         Source("megatron-core", "core/ssm/mamba_mixer.py:309 (in_proj.weight use_muon False)"),
         InvalidValueError),
)
