"""PEFT's ``target_parameters`` on transformers 5's fused MoE experts (TRL's
``--lora_target_parameters``), counted as PEFT v0.20.0 builds and runs them.

``ParamWrapper`` on a 3-D parameter [E, in, out] builds ``lora_A = Linear(in, r E)`` and
``lora_B = Linear(r E, out)`` (src/peft/tuners/lora/layer.py:2289-2349): E r (in + out) per
adapted parameter.  Each forward it registers ``W + einsum(B, A) * scaling`` as a
parametrization of the parameter (:2400-2465, 2221-2224), which the experts' ``grouped_mm``
saves whole.

Oracles: (1) PEFT's own trainable count on meta-device models of each accepted type equals
memsym's; (2) autograd's saved tensors (saved-tensor hooks, each storage once, parameters
excluded) of a tiny Qwen3-MoE in bf16 under bf16 autocast on the ``grouped_mm`` path, with
attention adapters on q and v, grow by exactly what ``memsym estimate trl sft`` adds to the
same job when the expert parameters are adapted too.  The oracles skip without torch, peft or
transformers 5.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from in_process import json_report
from memsym.errors import InvalidValueError
from memsym.model import Architecture, lora_parameter_count
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
    with pytest.raises(InvalidValueError, match="model_type 'deepseek_v3'"):
        lora_parameter_count(_arch("deepseek_v3"), R, ("q",), expert_params=("down",))
    with pytest.raises(InvalidValueError, match="rank 2r"):
        lora_parameter_count(_arch("qwen3_moe"), R, ("q", "down"), expert_params=("down",))


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


def _job(capsys, tmp_path, *extra) -> dict:
    return json_report(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path",
        _model_dir(tmp_path), "--dataset_name", "trl-lib/Capybara",
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
