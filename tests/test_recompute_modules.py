"""Megatron-Core's ``--recompute-modules`` (issue 30): what each recomputed module stops keeping.

The oracle is the tensor list read in Megatron-LM at d98e8a64dd, counted by hand below for one
layer (not memsym's output):

* ``core_attn`` -- attention.py ``_checkpointed_attention_forward``: ``tensor_parallel.checkpoint``
  of the core attention on (q, k, v); q, k, v stay, the kernel's own saved tensors (the flash
  logsumexp, 4 bytes per query row and head) are recomputed.
* ``layernorm`` -- transformer_layer.py ``__init__``: only a norm that is not ``IdentityOp``;
  under the TE spec (gpt_layer_specs.py) that is the input norm before MLA and the pre-MLP norm
  of an MoE layer (the others are fused into ``linear_qkv`` / ``linear_fc1``).
  ``CheckpointWithoutOutput`` keeps the norm's input and frees its output (and never saves its
  statistics).
* ``mla_up_proj`` -- multi_latent_attention.py: ``CheckpointWithoutOutput`` of
  ``qkv_up_proj_and_rope_apply`` on the compressed latents; q, k, v and the up-projections'
  norm outputs are recomputed, the compressed latents stay.
* ``mlp`` -- transformer_layer.py ``_run_mlp``: ``tensor_parallel.checkpoint(mlp,
  pre_mlp_layernorm_output)``; under the TE spec that input is the residual (the norm is fused
  in fc1), so fc1's norm output, its statistics, the fc1 output and the activation output are
  recomputed; dense layers only.
* ``moe`` -- moe_layer.py ``MoELayer.forward``: ``tensor_parallel.checkpoint(custom_forward,
  hidden_states)``: everything after the pre-MLP norm output is recomputed.
* ``moe_act`` -- experts.py ``TEGroupedMLP.forward``: the activation's output (the fc2 input) is
  freed after fc2 ran; the fc1 output stays.
* ``shared_experts`` -- moe_layer.py ``shared_experts_compute``: the shared experts' fc1 and
  activation outputs are recomputed (their input is the norm output the router keeps).
"""

from __future__ import annotations

import json

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError, LimitError, UnknownNameError
from memsym.job import Training, job
from memsym.readers.jobs import megatron_job
from memsym.readers.megatron import read_megatron_args
from memsym.terms.activations import (RECOMPUTE_MODULE_SOURCES, RECOMPUTE_MODULES,
                                      layer_activations, recompute_modules)

# One token-parallel rank, t = c = 1, b = 1, no dropout, flash attention, RMSNorm (4-byte rstd
# per token), SwiGLU; GQA sizes of Llama-3-8B; an MoE layer with top-2 of 8 experts.
S, H, A, G, DH, F = 4096, 4096, 32, 8, 128, 14336
E, K, FE, FSH = 8, 2, 2048, 4096
VALS = dict(s=S, b=1, c=1, t=1, h=H, a=A, g=G, d_h=DH, f=F, E=E, k=K, f_e=FE, f_sh=FSH, t_e=1,
            c_f=1)
MLA = dict(q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
           v_head_dim=128)


def _attention(mla=False):
    """Bytes the attention half keeps under Megatron's default selective recompute (core_attn),
    tensor by tensor (TE spec)."""
    kept = {"norm_inputs": 2 * (2 * S * H),          # the inputs of both norms (residuals)
            "attn_norm_stats": 4 * S,                 # input norm's fp32 rstd
            "mlp_norm_stats": 4 * S}                  # pre-MLP norm's fp32 rstd
    if mla:
        r = MLA["q_lora_rank"] + MLA["kv_lora_rank"]
        kept |= {"qkv_input": 2 * S * H,              # input norm output (q/kv down-proj input)
                 "latents": 2 * S * r,                # compressed q and kv latents
                 "latent_norm_out": 2 * S * r,        # their norm outputs (up-proj inputs)
                 "q": 2 * S * A * (128 + 64), "k": 2 * S * A * (128 + 64), "v": 2 * S * A * 128,
                 "proj_input": 2 * S * A * 128}
    else:
        kept |= {"qkv_input": 2 * S * H, "q": 2 * S * A * DH, "k": 2 * S * G * DH,
                 "v": 2 * S * G * DH, "proj_input": 2 * S * A * DH}
    return kept


def _dense_mlp():
    return {"mlp_input": 2 * S * H,                   # fc1's fused-norm output
            "fc1_output": 2 * S * 2 * F,              # gate and up, 2 bytes each
            "fc2_input": 2 * S * F}                   # SiLU(gate) * up


def _moe_mlp():
    copies = K * S                                    # routed token copies (balanced)
    return {"moe_input": 2 * S * H,                   # pre-MLP norm output (router input)
            "router": 4 * S * E,                      # fp32 probabilities
            "routed_tokens": 2 * copies * H, "expert_fc1_output": 2 * copies * 2 * FE,
            "expert_fc2_input": 2 * copies * FE, "combine": 2 * copies * H,
            "shared_fc1_output": 2 * S * 2 * FSH, "shared_fc2_input": 2 * S * FSH}


#: what each module frees, by the names above (the docstring's reading of Megatron's code)
DROPS = {
    ("dense", "mlp"): {"mlp_input", "fc1_output", "fc2_input", "mlp_norm_stats"},
    ("dense", "layernorm"): set(),                    # both norms fused under the TE spec
    ("dense", "moe"): set(), ("dense", "moe_act"): set(), ("dense", "shared_experts"): set(),
    ("moe", "moe"): {"router", "routed_tokens", "expert_fc1_output", "expert_fc2_input",
                     "combine", "shared_fc1_output", "shared_fc2_input"},
    ("moe", "moe_act"): {"expert_fc2_input"},
    ("moe", "shared_experts"): {"shared_fc1_output", "shared_fc2_input"},
    ("moe", "layernorm"): {"moe_input", "mlp_norm_stats"},
    ("moe", "mlp"): set(),                            # Megatron: not an MoE layer's MLP
    ("mla", "mla_up_proj"): {"q", "k", "v", "latent_norm_out"},
    ("mla", "layernorm"): {"qkv_input", "attn_norm_stats"},
}


def _layer(kind, modules):
    return layer_activations(gated=True, flash=True, norm="rmsnorm", dropout=False,
                             moe=kind == "moe", shared_expert=kind == "moe",
                             mla=MLA if kind == "mla" else None, recompute="selective",
                             modules=modules)


@pytest.mark.parametrize("kind,module", sorted(DROPS))
def test_each_module_drops_what_megatron_recomputes(kind, module):
    kept = _attention(kind == "mla") | (_moe_mlp() if kind == "moe" else _dense_mlp())
    expected = sum(v for name, v in kept.items() if name not in DROPS[kind, module])
    assert _layer(kind, ["core_attn", module]).evaluate(VALS) == expected
    # without core_attn the flash logsumexp (fp32, one per query row and head) stays
    assert _layer(kind, [module]).evaluate(VALS) == expected + 4 * S * A


def test_core_attn_alone_is_the_selective_recompute_of_before():
    for kind in ("dense", "moe", "mla"):
        for fp8 in (False, True):
            common = dict(gated=True, flash=True, moe=kind == "moe", shared_expert=kind == "moe",
                          mla=MLA if kind == "mla" else None, fp8_inputs=fp8)
            default = layer_activations(recompute="selective", **common)
            assert layer_activations(recompute="selective", modules=("core_attn",),
                                     **common).expr == default.expr
    # and it is Korthikanti's Table 2 row (34 sbh at t = 1) for the paper's GPT layer
    gpt = layer_activations(recompute="selective", modules=["core_attn"], norm_statistics=False)
    assert gpt.evaluate(s=2048, b=1, c=1, t=1, h=1024, a=16, g=16, d_h=64, f=4096) == \
        34 * 2048 * 1024


def test_modules_stack_and_moe_contains_its_parts():
    everything = _layer("moe", ["core_attn", "layernorm", "moe"])
    kept = _attention() | _moe_mlp()
    assert everything.evaluate(VALS) == sum(
        v for n, v in kept.items()
        if n not in DROPS["moe", "moe"] | DROPS["moe", "layernorm"])
    assert _layer("moe", ["moe", "moe_act", "shared_experts"]).expr == _layer("moe", ["moe"]).expr
    # under FP8 the recomputed activation's fc2 input is not kept either (set_save_original_input)
    fp8 = dict(gated=True, flash=True, moe=True, recompute="selective", fp8_inputs=True)
    assert "expert_fc2_input" not in {x.key for x in layer_activations(
        modules=["core_attn", "moe_act"], **fp8).terms}


def test_each_module_has_its_megatron_source():
    assert set(RECOMPUTE_MODULE_SOURCES) == set(RECOMPUTE_MODULES)
    for src in RECOMPUTE_MODULE_SOURCES.values():
        assert src.key == "megatron-core" and src.locator.startswith("megatron/core/")
    terms = {x.key: x for x in _layer("mla", ["mla_up_proj"]).terms}
    assert "qkv_up_proj_and_rope_apply" in str(terms["mla_latents"].source)


def test_names_are_checked_canonical_and_bounded():
    assert recompute_modules(["shared_experts", "core_attn", "MLP", "core_attn"]) == \
        ("core_attn", "mlp", "shared_experts")
    with pytest.raises(UnknownNameError, match="core_attn"):
        recompute_modules(["core_atn"])
    for name in ("gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"):
        with pytest.raises(InvalidValueError, match="does not model"):
            recompute_modules([name])
    with pytest.raises(InvalidValueError, match="list of names"):
        recompute_modules("mlp")
    with pytest.raises(LimitError):
        recompute_modules(["mlp"] * 65)


def test_the_job_applies_transformer_configs_rules():
    j = job("llama2-7b", recompute="selective", recompute_modules=["mlp", "core_attn", "mlp"])
    assert j.training.recompute_modules == ("core_attn", "mlp")
    assert job("llama2-7b", recompute="selective").training.recompute_modules is None
    for opts, why in (({"recompute": "full", "recompute_method": "uniform",
                        "recompute_num_layers": 1}, "need recompute selective"),
                      ({"recompute": "none"}, "need recompute selective"),
                      ({"recompute": "selective", "framework": "torchtitan",
                        "sharding": "fsdp"}, "Megatron-Core"),):
        with pytest.raises(InvalidValueError, match=why):
            job("llama2-7b", recompute_modules=["mlp"], **opts)
    with pytest.raises(InvalidValueError, match="multi-latent"):
        job("llama2-7b", recompute="selective", recompute_modules=["mla_up_proj"])
    assert Training().recompute_modules is None


# --- the Megatron reader ---------------------------------------------------------------------
TINY = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
        "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "1",
        "--vocab-size", "1024", "--world-size", "1"]
TINY_MOE = TINY + ["--num-experts", "4", "--moe-ffn-hidden-size", "128",
                   "--moe-shared-expert-intermediate-size", "128"]


def _rc(*extra):
    return read_megatron_args([*TINY_MOE, *extra]).training["recompute"]


def test_reader_maps_and_refuses_as_transformer_config():
    mods = ("--recompute-granularity", "selective", "--recompute-modules")
    tr = megatron_job(read_megatron_args([*TINY_MOE, *mods, "moe", "layernorm"])).training
    assert (tr.recompute, tr.recompute_modules) == ("selective", ("layernorm", "moe"))
    for extra, why in (
            ([*mods, "shared_experts", "--moe-shared-expert-overlap"], "moe-shared-expert-overlap"),
            ([*mods, "layernorm", "--fp8-format", "hybrid", "--bf16"], "delayed"),
            ([*mods, "moe_act"], "moe-grouped-gemm"),
            (["--moe-layer-recompute", "--recompute-granularity", "full", "--recompute-method",
              "uniform", "--recompute-num-layers", "1"], "full recompute"),
            (["--recompute-modules", "mlp"], "need --recompute-granularity")):
        with pytest.raises(InvalidValueError, match=why):
            _rc(*extra)
    # another FP8 recipe lifts the delayed-scaling rule; the grouped GEMM allows moe_act
    assert _rc(*mods, "layernorm", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise",
               "--bf16")["modules"] == ("layernorm",)
    assert _rc(*mods, "moe_act", "--moe-grouped-gemm")["modules"] == ("moe_act",)
    # the deprecated --moe-layer-recompute: selective, "moe" appended to the default
    assert _rc("--moe-layer-recompute")["modules"] == ("core_attn", "moe")


# --- the CLI: a pasted Megatron-LM command and memsym's flags are one job ----------------------
def _estimate(capsys, *argv) -> dict:
    code = main([str(x) for x in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


# Llama-2-7B (the preset: 32 layers, h = 4096, f = 11008, 32 heads, vocabulary 32000) as a
# Megatron-LM command, t = 2 on 2 GPUs, no dropout (the preset's recipe)
LLAMA2_7B = ["--num-layers", 32, "--hidden-size", 4096, "--ffn-hidden-size", 11008,
             "--num-attention-heads", 32, "--seq-length", 4096, "--max-position-embeddings", 4096,
             "--swiglu", "--normalization", "RMSNorm", "--untie-embeddings-and-output-weights",
             "--disable-bias-linear", "--position-embedding-type", "rope", "--vocab-size", 32000,
             "--bf16", "--use-distributed-optimizer", "--attention-dropout", "0.0",
             "--hidden-dropout", "0.0", "--tensor-model-parallel-size", 2,
             "--micro-batch-size", 1, "--global-batch-size", 8]
SELECTIVE = ["--recompute-granularity", "selective", "--recompute-modules"]


def test_pasted_command_and_flags_give_the_same_json(capsys):
    pasted = _estimate(capsys, "estimate", "torchrun", "--nproc_per_node", 2, "pretrain_gpt.py",
                       *LLAMA2_7B, *SELECTIVE, "mlp", "core_attn")
    flags = _estimate(capsys, "estimate", "llama2-7b", "--tp", 2, "--world-size", 2,
                      "--seq-length", 4096, "--micro-batch-size", 1, "--global-batch-size", 8,
                      *SELECTIVE, "mlp", "core_attn")
    # what the reports say of their input differs (the reader's notes and defaults, the model's
    # name, Megatron's off-by-default overlaps against memsym's "framework default")
    said = {"model", "defaults", "notes", "read_as", "ignored", "training"}
    assert {k: v for k, v in pasted.items() if k not in said} == \
        {k: v for k, v in flags.items() if k not in said}
    overlaps = {"overlap_grad_reduce", "overlap_param_gather"}
    assert {k: v for k, v in pasted["training"].items() if k not in overlaps} == \
        {k: v for k, v in flags["training"].items() if k not in overlaps}
    assert flags["training"]["recompute_modules"] == ["core_attn", "mlp"]
    assert any("not priced" in n for n in flags["notes"])    # the step time says what it omits
    # the MLP's recompute frees, per layer at t = 2 without SP: fc1's norm output 2sh, its fp32
    # rstd 4s, the SwiGLU input 2s(2f)/2 and output 2sf/2; 32 layers, one micro-batch in flight
    core = _estimate(capsys, "estimate", "llama2-7b", "--tp", 2, "--world-size", 2,
                     "--seq-length", 4096, "--micro-batch-size", 1, "--global-batch-size", 8,
                     *SELECTIVE, "core_attn")
    s, h, f = 4096, 4096, 11008
    freed = 32 * (2 * s * h + 4 * s + 2 * s * 2 * f // 2 + 2 * s * f // 2)
    assert core["activation_bytes"]["layer_activations"] - \
        flags["activation_bytes"]["layer_activations"] == freed
    code = main(["estimate", "llama2-7b", "--recompute-modules", "mlp"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "selective" in err


def test_plot_feasibility_refuses_what_its_search_cannot_vary(capsys, tmp_path):
    code = main(["plot", "feasibility", "llama2-7b", "--gpu", "h100-80gb", "--world-size", "8",
                 *SELECTIVE, "mlp", "-o", str(tmp_path / "x.png")])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "--recompute-modules" in err


def test_text_report_names_the_modules(capsys):
    code = main(["estimate", "llama2-7b", "--tp", "2", *SELECTIVE, "mlp", "core_attn"])
    out, _ = capsys.readouterr()
    assert code == 0 and "recompute selective (core_attn mlp)" in out
