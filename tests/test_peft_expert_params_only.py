"""PEFT's ``target_parameters`` alone, no target module: the fused routed experts adapted, the
whole attention and every ``nn.Linear`` frozen without an adapter (memsym's ``--lora-targets
none --lora-expert-params ...``; TRL's ``--lora_target_parameters`` without
``--lora_target_modules``).

What PEFT v0.20.0 does with ``target_modules`` None: ``_prepare_adapter_config`` applies the
model type's default (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``) only while it is
still None (src/peft/tuners/lora/model.py:573-583).  Under transformers 5 the MoE types with a
v4 -> v5 checkpoint conversion first pass through ``_convert_peft_config_moe``, which sets
``target_modules = set(target_modules or [])`` (utils/transformers_weight_conversion.py:438,
called from tuners_utils.py:786-803, before :819), so Mixtral's default ``["q_proj",
"v_proj"]`` (constants.py:94) is never applied; the other 17 expert types have no default at
all.  So the TRL command without ``--lora_target_modules`` is the experts alone on all 18, and
on Mixtral without ``--lora_target_parameters`` PEFT raises (tuners_utils.py:996-1001).

Oracles: PEFT's own trainable count on meta-device models; autograd's saved tensors
(saved-tensor hooks, each storage once, parameters left out) of tiny bf16 models under bf16
autocast on the ``grouped_mm`` path, per layer (a model of L + 1 layers less one of L, the
added layer an MoE layer), against ``memsym estimate trl sft`` of the same shapes.  The
per-layer difference leaves out the first layer, whose frozen part before the first
trainable parameter keeps nothing without gradient checkpointing (TRL calls
``enable_input_require_grads`` only with it, trl f2cd57710a sft_trainer.py:1119-1121); memsym
counts the first layer as every other.
"""

from __future__ import annotations

import json

import pytest

from in_process import json_report, refused_line
from memsym.model import from_hf_config, lora_parameter_count
from test_peft_expert_params import (BATCH, BOTH, D_H, E, F_E, H, HEADS, KV, R, SEQ, SHARED, V,
                                     _arch, _config, _saved_bytes, hf_model, needs_peft)

TAU = BATCH * SEQ


def _folder(tmp_path, case: str, more: int = 0, **changes) -> str:
    """config.json of a tiny model: ``case`` a SHARED type or ``qwen3_moe`` (2 layers), with
    ``more`` layers added (MoE layers: each type's dense layers come first)."""
    if case == "qwen3_moe":
        cfg = {"hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": HEADS,
               "num_key_value_heads": KV, "head_dim": D_H, "intermediate_size": 96,
               "moe_intermediate_size": F_E, "num_experts": E, "num_experts_per_tok": 2,
               "norm_topk_prob": True, "vocab_size": V, "max_position_embeddings": 4096,
               "tie_word_embeddings": False}
    else:
        cfg = dict(SHARED[case][0])
    cfg.update(changes, num_hidden_layers=cfg["num_hidden_layers"] + more)
    folder = tmp_path / f"{case}-{more}-{len(changes)}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": case.split("-")[0], **cfg}),
                                        encoding="utf-8")
    return str(folder)


def _lora(names=BOTH, modules=None):
    import peft

    extra = {} if modules is None else {"target_modules": list(modules)}
    return peft.LoraConfig(r=R, lora_alpha=8, lora_dropout=0.0, target_parameters=names,
                           **extra)


def _trl(capsys, folder: str, *extra, peft: bool = True) -> int:
    """Activations of ``memsym estimate trl sft`` of the job [bytes]."""
    lora = ["--use_peft", "--lora_r", str(R), "--lora_dropout", "0"] if peft else []
    return json_report(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", folder,
        "--dataset_name", "trl-lib/Capybara", "--per_device_train_batch_size", str(BATCH),
        "--max_length", str(SEQ), "--loss_type", "nll", "--dtype", "bfloat16",
        "--gradient_checkpointing", "false", *lora, *extra])["bytes"]["activations"]


def _measured(tmp_path, case: str, *modules, peft: bool = True) -> int:
    """Saved bytes one MoE layer adds (L + 1 layers less L), the experts' parameters and
    ``modules`` adapted (full training without ``peft``)."""
    torch = pytest.importorskip("torch")
    ids = torch.randint(0, V, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    return sum(sign * _saved_bytes(hf_model(_folder(tmp_path, case, more), peft_config=_lora(
        modules=modules or None) if peft else None), ids) for sign, more in ((1, 1), (-1, 0)))


def _counted(capsys, tmp_path, case: str, *extra, peft: bool = True) -> int:
    return _trl(capsys, _folder(tmp_path, case, 1), *extra, peft=peft) \
        - _trl(capsys, _folder(tmp_path, case), *extra, peft=peft)


@needs_peft
@pytest.mark.parametrize("kind", ["qwen3_moe", "mixtral", "olmoe", "gpt_oss"])
def test_peft_without_target_modules_adapts_the_experts_alone(kind):
    """LoraConfig(target_parameters=...) with target_modules left None: PEFT adapts the
    experts alone on each type (Mixtral's default q_proj / v_proj not applied), E r (h + 2 f_e)
    + E r (f_e + h) per layer by hand, memsym's count with no targets."""
    torch = pytest.importorskip("torch")
    import peft
    config, cls = _config(kind)
    with torch.device("meta"):
        model = cls(config)
    wrapped = peft.get_peft_model(model, _lora())
    assert not wrapped.peft_config["default"].target_modules
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    assert trainable == 2 * E * R * ((H + 2 * F_E) + (F_E + H))
    assert trainable == lora_parameter_count(_arch(kind), R, (), expert_params=("gate_up", "down"))


@needs_peft
@pytest.mark.parametrize("case", ["qwen2_moe", "deepseek_v3", "glm4_moe", "hunyuan_v1_moe"])
def test_peft_without_target_modules_beside_shared_experts(tmp_path, case):
    """The same on types with shared experts and dense layers (MLA's deepseek_v3 too): E
    adapters per MoE layer, none elsewhere."""
    wrapped = hf_model(_folder(tmp_path, case), peft_config=_lora(), meta=True)
    assert not wrapped.peft_config["default"].target_modules
    _, f_e, moe_layers, _ = SHARED[case]
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    assert trainable == moe_layers * 4 * R * ((H + 2 * f_e) + (f_e + H))
    arch = from_hf_config(_folder(tmp_path, case) + "/config.json")
    assert trainable == lora_parameter_count(arch, R, (), expert_params=("gate_up", "down"))


@needs_peft
def test_mixtral_without_any_target_is_refused_by_peft_and_memsym(capsys, tmp_path):
    """No target_modules and no target_parameters on Mixtral: PEFT raises (its v5 conversion
    left target_modules an empty set), and memsym's reading of the TRL command refuses it in
    one line instead of counting PEFT's v4 default q_proj, v_proj."""
    torch = pytest.importorskip("torch")
    import peft
    config, cls = _config("mixtral")
    with torch.device("meta"):
        model = cls(config)
    with pytest.raises(ValueError, match="No `target_modules` passed"):
        peft.get_peft_model(model, peft.LoraConfig(r=R, lora_dropout=0.0))
    folder = tmp_path / "mixtral"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "mixtral", "hidden_size": H, "num_hidden_layers": 2,
        "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": D_H,
        "intermediate_size": F_E, "num_local_experts": E, "num_experts_per_tok": 2,
        "vocab_size": V, "max_position_embeddings": 4096}), encoding="utf-8")
    line = refused_line(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                                 "--model_name_or_path", str(folder), "--dataset_name", "x",
                                 "--use_peft", "--lora_dropout", "0"])
    assert "leaves target_modules empty" in line and "Traceback" not in line


@needs_peft
def test_qwen3_moe_layer_keeps_what_memsym_counts(capsys, tmp_path):
    """One Qwen3-MoE layer of the TRL command without --lora_target_modules: the saved bytes
    memsym counts, exactly (the frozen attention: its norm's fp32 copy and statistic, Q, K, V,
    the kernel's output and log-sum-exp, no GEMM input; the MoE as with attention adapters),
    and the change from full training exactly memsym's."""
    experts = _counted(capsys, tmp_path, "qwen3_moe", "--lora_target_parameters", *BOTH)
    assert _measured(tmp_path, "qwen3_moe") == experts
    full = _counted(capsys, tmp_path, "qwen3_moe", peft=False)
    assert _measured(tmp_path, "qwen3_moe", peft=False) == full


@needs_peft
@pytest.mark.parametrize("case", ["glm4_moe", "hunyuan_v1_moe", "dots1"])
def test_frozen_attention_beside_shared_experts(capsys, tmp_path, case):
    """Types with shared experts: one MoE layer with the experts alone adapted keeps, against
    the same layer with q and v adapted too, exactly what memsym takes off, and by hand the
    two adapters' tensors (PEFT's fp32 adapters under bf16 autocast, no dropout): each
    lora_A's bf16 input cast 2 tau h, lora_A's output 2 tau r, the weights' bf16 casts
    2 r (d_in + d_out), q (h, a d_h) and v (h, g d_h)."""
    qv = ["--lora_target_modules", "q_proj", "v_proj"]
    counted = _counted(capsys, tmp_path, case, "--lora_target_parameters", *BOTH) \
        - _counted(capsys, tmp_path, case, *qv, "--lora_target_parameters", *BOTH)
    measured = _measured(tmp_path, case) - _measured(tmp_path, case, "q_proj", "v_proj")
    by_hand = 2 * (2 * TAU * H) + 2 * (2 * TAU * R) \
        + 2 * R * ((H + HEADS * D_H) + (H + KV * D_H))
    assert measured == counted == -by_hand


def test_refusals_in_one_line(capsys, tmp_path):
    """memsym's own words: no targets and no expert parameters adapt nothing; the experts
    alone on an MLA model (memsym.job_checks_hf.check_expert_params_alone), both as memsym's
    options and as TRL's command."""
    job = ["estimate", "--framework", "deepspeed", "--finetune", "lora", "--seq-length",
           "1024", "--micro-batch-size", "1", "--world-size", "8", "--lora-targets", "none"]
    assert "adapts nothing" in refused_line(capsys, [*job[:1], "qwen3-30b-a3b", *job[1:]])
    assert "alone on an MLA model" in refused_line(capsys, [
        *job[:1], "deepseek-v3", *job[1:], "--lora-expert-params", "down"])
    assert "alone on an MLA model" in refused_line(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path",
        _folder(tmp_path, "deepseek_v3"), "--dataset_name", "x", "--use_peft",
        "--lora_dropout", "0", "--dtype", "bfloat16", "--lora_target_parameters", *BOTH])


@needs_peft
def test_frozen_mla_attention_keeps_what_memsym_does_not_count(tmp_path):
    """The refusal's measurement: transformers' frozen DeepseekV3Attention under PEFT (the
    experts alone adapted) and its input norm keep, per layer, by hand (tau tokens, q and kv
    latents r_q 24 and r_kv 16, a 4 heads of d_nope 8 + d_rope 8, d_v 16: equal query and
    value widths, so the CPU takes its flash kernel): the input norm's fp32 copy and
    statistic 4 tau h + 4 tau; the latent norms' 4 tau (r_q + r_kv) + 8 tau and nothing more
    (no normalised latent, no up-projection input: memsym's mla_latents, 2 w tau (r_q +
    r_kv), is not kept); bf16 Q and K 2 tau a (d_nope + d_rope) each; kv_b_proj's whole
    output 2 tau a (d_nope + d_v), kept through the value's view (memsym's v counts
    2 tau a d_v); the fp32 log-sum-exp 4 a tau; the kernel's output 2 tau a d_v."""
    torch = pytest.importorskip("torch")
    folder = _folder(tmp_path, "deepseek_v3", 0, v_head_dim=16)
    model = hf_model(folder, peft_config=_lora())
    model.enable_input_require_grads()      # every layer's input requires a gradient
    attention = model.base_model.model.model.layers[1]
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    inside, saved, keep = [False], {}, []

    def pack(t):
        keep.append(t)
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:       # each storage where first saved (RoPE's: layer 0)
            saved.setdefault(ptr, t.untyped_storage().nbytes() if inside[0] else 0)
        return t

    for module in (attention.input_layernorm, attention.self_attn):
        module.register_forward_pre_hook(lambda *_: inside.__setitem__(0, True))
        module.register_forward_hook(lambda *_: inside.__setitem__(0, False))
    ids = torch.randint(0, V, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", torch.bfloat16):
        model(ids)
    a, d_nope, d_rope, d_v, ranks = HEADS, 8, 8, 16, 24 + 16
    by_hand = (4 * TAU * H + 4 * TAU) + (4 * TAU * ranks + 8 * TAU) \
        + 2 * (2 * TAU * a * (d_nope + d_rope)) + 2 * TAU * a * (d_nope + d_v) \
        + 4 * a * TAU + 2 * TAU * a * d_v
    assert sum(saved.values()) == by_hand


def test_gradient_checkpointing_caches_no_expert_adapter_cast(capsys, tmp_path):
    """TRL's default gradient checkpointing with the experts alone: no adapted matrix, so
    autocast's cache of adapter casts is empty (the expert adapters reach the einsum reshaped,
    not as leaves: each call casts anew, checked here on the CPU), and the job is counted."""
    torch = pytest.importorskip("torch")
    from memsym.terms.peft_lora import peft_cached_casts

    assert peft_cached_casts(48, ()).expr == 0
    a = torch.randn(E * R, H, requires_grad=True)
    b = torch.randn(2 * F_E, R * E, requires_grad=True)
    storages, outputs = [], []      # the outputs keep each graph's saved casts alive
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: storages.append(t.untyped_storage().data_ptr()) or t, lambda t: t), \
            torch.autocast("cpu", torch.bfloat16):
        for _ in range(2):      # ParamWrapper's reshapes and einsum (lora/layer.py:2423-2431)
            outputs.append(torch.einsum("o r e, e r i -> e i o", b.reshape(2 * F_E, -1, E),
                                        a.reshape(E, -1, H)))
    assert len(set(storages)) == len(storages) == 4
    report = json_report(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path",
        _folder(tmp_path, "qwen3_moe"), "--dataset_name", "x", "--use_peft", "--lora_dropout",
        "0", "--dtype", "bfloat16", "--lora_target_parameters", *BOTH])
    assert report["bytes"]["activations"] > 0
    assert not any("an over-count" in n for n in report["notes"])
    report = json_report(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path",
        _folder(tmp_path, "qwen3_moe"), "--dataset_name", "x", "--use_peft", "--lora_dropout",
        "0", "--dtype", "bfloat16", "--gradient_checkpointing", "false",
        "--lora_target_parameters", *BOTH])
    assert any("an over-count" in n for n in report["notes"])
