"""PEFT's ``target_parameters`` on transformers 5's fused MoE experts (TRL's
``--lora_target_parameters``), counted as PEFT v0.20.0 builds and runs them.

``ParamWrapper`` on a 3-D parameter [E, in, out] builds ``lora_A = Linear(in, r E)`` and
``lora_B = Linear(r E, out)`` (src/peft/tuners/lora/layer.py:2289-2349): E r (in + out) per
adapted parameter.  Each forward it registers ``W + einsum(B, A) * scaling`` as a
parametrization of the parameter (:2400-2465, 2221-2224), which the experts' ``grouped_mm``
saves whole.

Oracles: (1) PEFT's own trainable count on meta-device models of each accepted type equals
memsym's, the types with shared experts and dense layers built by transformers from the very
config.json memsym reads (E adapters per MoE layer, none on a dense layer or a shared expert);
(2) autograd's saved tensors (saved-tensor hooks, each storage once, parameters
excluded) of a tiny Qwen3-MoE in bf16 under bf16 autocast on the ``grouped_mm`` path, with
attention adapters on q and v, grow by exactly what ``memsym estimate trl sft`` adds to the
same job when the expert parameters are adapted too, and so do those of tiny models with
shared experts and dense layers.  The oracles skip without torch, peft or
transformers 5.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from in_process import json_report
from memsym.errors import InvalidValueError
from memsym.model import Architecture, from_hf_config, lora_parameter_count, preset
from memsym.terms.peft_lora import peft_expert_weights

needs_peft = pytest.mark.skipif(importlib.util.find_spec("peft") is None
                                or importlib.util.find_spec("transformers") is None,
                                reason="peft / transformers not installed")
BOTH = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
H, F_E, E, K, LAYERS, HEADS, KV, D_H, V, R = 64, 48, 8, 2, 2, 4, 2, 16, 128, 4


def _transformers5():
    transformers = pytest.importorskip("transformers")
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers < 5 builds nn.Linear experts")
    return transformers


def _config(kind: str):
    t = _transformers5()
    common = dict(vocab_size=V, hidden_size=H, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=D_H,
                  num_experts_per_tok=K)
    if kind == "qwen3_moe":
        return t.Qwen3MoeConfig(intermediate_size=96, moe_intermediate_size=F_E, num_experts=E,
                                tie_word_embeddings=False, **common), t.Qwen3MoeForCausalLM
    if kind == "mixtral":
        return t.MixtralConfig(intermediate_size=F_E, num_local_experts=E, **common), \
            t.MixtralForCausalLM
    if kind == "olmoe":
        return t.OlmoeConfig(intermediate_size=F_E, num_experts=E, **common), t.OlmoeForCausalLM
    return t.GptOssConfig(intermediate_size=F_E, num_local_experts=E, layer_types=[
        "sliding_attention", "full_attention"], **common), t.GptOssForCausalLM


def _arch(kind: str) -> Architecture:
    return Architecture(num_layers=LAYERS, hidden_size=H, num_attention_heads=HEADS,
                        num_query_groups=KV, kv_channels=D_H, ffn_hidden_size=F_E, swiglu=True,
                        normalization="RMSNorm", vocab_size=V, position_embedding_type="rope",
                        add_bias_linear=False, num_experts=E, moe_router_topk=K,
                        moe_ffn_hidden_size=F_E, extra={"hf_model_type": kind})


@needs_peft
@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral", "olmoe", "gpt_oss"])
@pytest.mark.parametrize("names,params", [(BOTH, ("gate_up", "down")),
                                          (["mlp.experts.down_proj"], ("down",))])
def test_peft_builds_what_memsym_counts(kind, names, params):
    """PEFT's trainable parameters of LoraConfig(target_modules=["q_proj", "v_proj"],
    target_parameters=names) on a meta-device model equal memsym's count, and the experts'
    part is E r (h + 2 f_e) + E r (f_e + h) per layer by hand."""
    torch = pytest.importorskip("torch")
    import peft
    config, cls = _config(kind)
    with torch.device("meta"):
        model = cls(config)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(
        r=R, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
        target_parameters=names))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    assert trainable == lora_parameter_count(_arch(kind), R, ("q", "v"), expert_params=params)
    experts = LAYERS * E * R * ((H + 2 * F_E) * ("gate_up" in params) + (F_E + H))
    attention = LAYERS * R * ((H + HEADS * D_H) + (H + KV * D_H))
    assert trainable == experts + attention


def test_refusals_in_one_line():
    # DBRX's experts are 2-D w1 / v1 / w2 (modeling_dbrx.py:254-256 at 5.25.0): no gate_up_proj
    with pytest.raises(InvalidValueError, match="model_type 'dbrx'"):
        lora_parameter_count(_arch("dbrx"), R, ("q",), expert_params=("down",))
    with pytest.raises(InvalidValueError, match="rank 2r"):
        lora_parameter_count(_arch("qwen3_moe"), R, ("q", "down"), expert_params=("down",))
    # MLA's attention is no target: the experts' adapters alone are counted, not a job of them
    with pytest.raises(InvalidValueError, match="target parameters alone is not modelled"):
        lora_parameter_count(preset("deepseek-v3"), R, ("q", "v"), expert_params=("down",))
    assert lora_parameter_count(preset("deepseek-v3"), R, (), expert_params=("down",)) \
        == 58 * 256 * R * (2048 + 7168)       # 61 layers, the first 3 dense


@pytest.mark.parametrize("words,message", [
    (["--framework", "deepspeed", "--lora-targets", "q,v", "--lora-expert-params", "gate,up"],
     "give gate_up and/or down once each"),
    (["--framework", "megatron", "--lora-targets", "q,v", "--lora-expert-params", "down"],
     "of transformers' model code"),
])
def test_cli_refusals_in_one_line(capsys, words, message):
    from memsym.cli import main

    assert main(["estimate", "qwen3-30b-a3b", "--finetune", "lora", "--seq-length", "1024",
                 "--micro-batch-size", "1", "--world-size", "8", *words]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def _model_dir(tmp_path) -> str:
    folder = tmp_path / "qwen3-moe"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "hidden_size": H, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": D_H,
        "intermediate_size": 96, "moe_intermediate_size": F_E, "num_experts": E,
        "num_experts_per_tok": K, "norm_topk_prob": True, "vocab_size": V,
        "max_position_embeddings": 4096, "tie_word_embeddings": False}), encoding="utf-8")
    return str(folder)


SEQ, BATCH = 20, 2


def _job(capsys, tmp_path, *extra, model=None) -> dict:
    return json_report(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path",
        model or _model_dir(tmp_path), "--dataset_name", "trl-lib/Capybara",
        "--per_device_train_batch_size", str(BATCH), "--max_length", str(SEQ),
        "--loss_type", "nll", "--dtype", "bfloat16", "--use_peft", "--lora_r", str(R),
        "--lora_target_modules", "q_proj", "v_proj", "--lora_dropout", "0",
        "--gradient_checkpointing", "false", *extra])


def test_trl_job_adds_the_merged_weights_and_the_expert_inputs(capsys, tmp_path):
    """By hand, per MoE layer: the merged weights bf16 2 E (2 f_e h + h f_e), the adapters'
    bf16 casts 2 E r (h + 2 f_e + f_e + h), and the experts' inputs grouped_mm now keeps for
    the merged weights' gradient, tau k h and tau k f_e in bf16."""
    tau = SEQ * BATCH
    without = _job(capsys, tmp_path)["bytes"]["activations"]
    both = _job(capsys, tmp_path, "--lora_target_parameters", *BOTH)["bytes"]["activations"]
    per_layer = 2 * E * 3 * F_E * H + 2 * E * R * (2 * H + 3 * F_E) + 2 * tau * K * (H + F_E)
    assert both - without == LAYERS * per_layer
    assert peft_expert_weights(("gate_up", "down")).evaluate(E=E, h=H, f_e=F_E, r_lora=R) \
        == 2 * E * 3 * F_E * H + 2 * E * R * (2 * H + 3 * F_E)


@pytest.mark.parametrize("extra,words", [
    ([], "lora_dropout > 0"),
    (["--lora_dropout", "0", "--lora_target_parameters", "mlp.experts.gate_proj"],
     "gate_up_proj and mlp.experts.down_proj"),
])
def test_trl_refusals(capsys, tmp_path, extra, words):
    from memsym.cli import main

    args = ["estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path",
            _model_dir(tmp_path), "--dataset_name", "x", "--use_peft",
            "--lora_target_parameters", *BOTH, *extra]
    assert main(args) == 2
    message = capsys.readouterr().err.strip()
    assert words in message and "\n" not in message and "Traceback" not in message


def _saved_bytes(model, ids) -> int:
    """Bytes of the distinct non-parameter storages autograd saves in one forward."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved, keep = {}, []

    def pack(t):
        keep.append(t)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved.setdefault(ptr, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", torch.bfloat16):
        logits = model(ids).logits
    logits.float().mean().backward()
    return sum(saved.values())


def _peft_model(names):
    torch = pytest.importorskip("torch")
    import peft
    config, cls = _config("qwen3_moe")
    # what from_pretrained sets when experts_implementation is left unset
    # (transformers 5.25.0 modeling_utils.py:1893-1894)
    config._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    model = cls(config).to(torch.bfloat16)
    return peft.get_peft_model(model, peft.LoraConfig(
        r=R, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
        target_parameters=names))


@needs_peft
def test_autograd_keeps_what_memsym_adds(capsys, tmp_path):
    """The saved tensors of the tiny model (TRL's bf16 weights under bf16 autocast) with the
    expert parameters adapted less those without: exactly the difference of memsym's two TRL
    jobs at the same shapes (tau = 40 tokens)."""
    torch = pytest.importorskip("torch")
    ids = torch.randint(0, V, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    measured = _saved_bytes(_peft_model(BOTH), ids) - _saved_bytes(_peft_model(None), ids)
    counted = _job(capsys, tmp_path, "--lora_target_parameters", *BOTH)["bytes"]["activations"] \
        - _job(capsys, tmp_path)["bytes"]["activations"]
    assert measured == counted


# --- routed experts beside shared experts and dense layers --------------------------------
_B = {"hidden_size": H, "num_hidden_layers": 3, "num_attention_heads": HEADS,
      "num_key_value_heads": KV, "intermediate_size": 96, "vocab_size": V,
      "max_position_embeddings": 64,
      "tie_word_embeddings": False, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0}
_DS = {"n_routed_experts": 4, "n_shared_experts": 1, "moe_intermediate_size": 16,
       "num_experts_per_tok": K, "n_group": 1, "topk_group": 1}
_MLA = {"q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
        "v_head_dim": 8, "num_key_value_heads": HEADS}
_DSA = {"index_n_heads": 4, "index_head_dim": 16}

#: model_type -> (config.json, f_e, MoE layers by transformers' condition of each type (its
#: modeling file; memsym.model.lora_counts.EXPERT_PARAMETER_TYPES cites the lines), MLA):
#: E = 4 experts, h 64, head_dim 16 where the attention is GQA.
SHARED = {
    # layer 0 in mlp_only_layers: dense; layers 1, 2 MoE with shared_expert and its gate
    "qwen2_moe": ({**_B, "num_experts": 4, "num_experts_per_tok": K,
                   "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                   "mlp_only_layers": [0]}, 32, 2, False),
    # 4 layers, decoder_sparse_step 2: layers 1 and 3 MoE
    "qwen2_moe-step-2": ({**_B, "num_hidden_layers": 4, "num_experts": 4,
                          "num_experts_per_tok": K, "moe_intermediate_size": 32,
                          "shared_expert_intermediate_size": 48, "decoder_sparse_step": 2},
                         32, 2, False),
    # first_k_dense_replace 1: layer 0 dense; MTP layers are not built by transformers
    "deepseek_v3": ({**_B, **_DS, **_MLA, "first_k_dense_replace": 1,
                     "num_nextn_predict_layers": 1}, 16, 2, True),
    "deepseek_v2": ({**_B, **_DS, **_MLA, "q_lora_rank": None, "first_k_dense_replace": 1,
                     "topk_method": "greedy"}, 16, 2, True),
    "deepseek_v32": ({**_B, **_DS, **_MLA, **_DSA, "first_k_dense_replace": 1}, 16, 2, True),
    "glm_moe_dsa": ({**_B, **_DS, **_MLA, **_DSA, "first_k_dense_replace": 1}, 16, 2, True),
    # mlp_layer_types' default: layer 0 dense
    "glm4_moe_lite": ({**_B, **_DS, **_MLA}, 16, 2, True),
    "glm4_moe": ({**_B, **_DS, "first_k_dense_replace": 1, "head_dim": D_H}, 16, 2, False),
    "dots1": ({**_B, **_DS, "n_shared_experts": 2, "first_k_dense_replace": 1}, 16, 2, False),
    # 4 layers, MoE from moe_layer_start_index 1 at interval 1: layers 1-3
    "ernie4_5_moe": ({**_B, "num_hidden_layers": 4, "moe_num_experts": 4, "moe_k": K,
                      "moe_intermediate_size": 16, "moe_num_shared_experts": 1,
                      "moe_layer_start_index": 1, "moe_layer_end_index": 3,
                      "moe_layer_interval": 1}, 16, 3, False),
    # every layer MoE with a shared_mlp, experts of intermediate_size
    "hunyuan_v1_moe": ({**_B, "head_dim": D_H, "num_experts": 4, "moe_topk": K,
                        "intermediate_size": 96}, 96, 3, False),
    # mlp_layer_types' default: layer 0 dense
    "exaone_moe": ({**_B, "num_experts": 4, "num_experts_per_tok": K,
                    "moe_intermediate_size": 16, "head_dim": D_H}, 16, 2, False),
    "solar_open": ({**_B, "head_dim": D_H, "moe_intermediate_size": 16, "n_routed_experts": 4,
                    "num_experts_per_tok": K, "n_shared_experts": 1}, 16, 3, False),
    "cohere2_moe": ({**_B, "head_dim": D_H, "intermediate_size": 32, "num_experts": 4,
                     "num_experts_per_tok": K, "num_shared_experts": 1,
                     "first_k_dense_replace": 1, "prefix_dense_intermediate_size": 96},
                    32, 2, False),
    "afmoe": ({**_B, "head_dim": D_H, "intermediate_size": 96, "moe_intermediate_size": 16,
               "num_experts": 4, "num_experts_per_tok": K, "num_shared_experts": 1,
               "num_dense_layers": 1, "global_attn_every_n_layers": 2, "sliding_window": 8},
              16, 2, False),
}


def _shared_dir(tmp_path, case: str) -> str:
    folder = tmp_path / case
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(
        {"model_type": case.split("-")[0], **SHARED[case][0]}), encoding="utf-8")
    return str(folder)


def hf_model(folder: str, *, peft_config=None, meta: bool = False):
    """transformers' model of the file (meta device, or bf16 on the CPU's grouped_mm path),
    wrapped by PEFT with ``peft_config`` (None: full training)."""
    torch = pytest.importorskip("torch")
    import peft
    from transformers import AutoConfig, AutoModelForCausalLM

    _transformers5()
    config = AutoConfig.from_pretrained(folder)
    if meta:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    else:
        config._experts_implementation = "grouped_mm"     # as from_pretrained sets it
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    return model if peft_config is None else peft.get_peft_model(model, peft_config)


def _built(folder: str, names, *, meta: bool, rank: int = R, attention=("q_proj", "v_proj")):
    """:func:`hf_model` wrapped by PEFT at ``rank``: target_parameters ``names``,
    target_modules ``attention``."""
    peft = pytest.importorskip("peft")
    return hf_model(folder, meta=meta, peft_config=peft.LoraConfig(
        r=rank, lora_alpha=8, lora_dropout=0.0, target_modules=list(attention),
        target_parameters=names))


@needs_peft
@pytest.mark.parametrize("case", sorted(SHARED))
@pytest.mark.parametrize("rank,params,prefix", [(4, ("gate_up", "down"), "mlp.experts."),
                                                (8, ("down",), "experts."), (3, ("gate_up",), "")])
def test_shared_experts_and_dense_layers_get_none(tmp_path, case, rank, params, prefix):
    """PEFT's trainable parameters of transformers' model of the file equal memsym's count of
    the file it reads, and by hand: E r (h + 2 f_e) and / or E r (f_e + h) on each MoE layer
    alone, plus r (h + a d) + r (h + g d) per layer on q and v (none where the attention is
    MLA, whose projections memsym does not adapt: target_modules empty, which PEFT takes
    beside target_parameters, peft v0.20.0 tuners/lora/model.py:573-583).  The names as TRL
    users give them, matched as a suffix (the bare ``down_proj`` too: a shared expert's or a
    dense MLP's ``down_proj.weight`` does not end so)."""
    folder = _shared_dir(tmp_path, case)
    cfg, f_e, moe_layers, mla = SHARED[case]
    names = [f"{prefix}{p}_proj" for p in params]
    wrapped = _built(folder, names, meta=True, rank=rank,
                     attention=() if mla else ("q_proj", "v_proj"))
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    experts = moe_layers * 4 * rank * ((H + 2 * f_e) * ("gate_up" in params)
                                       + (f_e + H) * ("down" in params))
    attention = 0 if mla else cfg["num_hidden_layers"] * rank * ((H + HEADS * D_H)
                                                                 + (H + KV * D_H))
    assert trainable == experts + attention
    arch = from_hf_config(folder + "/config.json")
    assert trainable == lora_parameter_count(arch, rank, () if mla else ("q", "v"),
                                             expert_params=params)


@needs_peft
@pytest.mark.parametrize("case", sorted(c for c in SHARED if not SHARED[c][3]))
def test_autograd_keeps_what_memsym_adds_beside_shared_experts(capsys, tmp_path, case):
    """As :func:`test_autograd_keeps_what_memsym_adds` on the types with shared experts and
    dense layers (attention GQA): the merged weights, the adapters' casts and the routed
    experts' inputs are added on the MoE layers alone (a dense layer or a shared expert adds
    nothing), exactly as measured, for both parameters and for down_proj alone."""
    torch = pytest.importorskip("torch")
    folder = _shared_dir(tmp_path, case)
    ids = torch.randint(0, V, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    base = _saved_bytes(_built(folder, None, meta=False), ids)
    without = _job(capsys, tmp_path, model=folder)["bytes"]["activations"]
    for names in (BOTH, ["mlp.experts.down_proj"]):
        measured = _saved_bytes(_built(folder, names, meta=False), ids) - base
        counted = _job(capsys, tmp_path, "--lora_target_parameters", *names,
                       model=folder)["bytes"]["activations"] - without
        assert measured == counted
