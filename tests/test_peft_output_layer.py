"""PEFT's frozen output layer (final norm and lm_head) and its adapters' cached casts on the
whole model, measured with torch's MemTracker against ``memsym estimate trl sft --use_peft``.

The oracle: transformers' own ``LlamaForCausalLM`` and ``GemmaForCausalLM`` (two layers, h =
256, four heads of 64, FFN 512, V = 1000, untied, bf16), full-trained or wrapped by PEFT's own
``get_peft_model`` as TRL does (``--use_peft``: r = 16, lora_dropout 0.05, q_proj and v_proj,
PEFT's fp32 adapters), gradient checkpointing on (TRL's default), the forward under bf16
autocast as Accelerate runs it, ``nll`` or TRL's chunked loss patched in
(tests/trl_chunked_vendored.py, TRL's own code), the loss's ops in CUDA's autocast dtypes
(``test_chunked_loss._cuda_policy``).  Three points of the step: the forward's peak (the loss,
inside the model's forward), the forward's end (after autocast's context exits) and the loss's
backward start (its gradient hook).  No gradient is summed before them, so the tracker's
dispatch mode changes nothing (tests/test_chunked_loss.py).

By hand, tau = s b, w = 2, h = 256, s = 128, r = 16, L = 2.  What full training keeps and
PEFT does not: the final norm's normalised tensor, kept only for its weight's gradient -
LlamaRMSNorm's 16-bit ``hidden_states.to(input_dtype)`` (2 tau h: transformers 5.25.0
modeling_llama.py:67), GemmaRMSNorm's fp32 ``output`` of ``output * (1.0 +
self.weight.float())`` (4 tau h: modeling_gemma.py:77; the fp32 ``1 + weight`` stays, kept for
the input's gradient) - and, under ``nll``, lm_head's input (2 tau h, saved for its weight's
gradient only: modeling_llama.py:471).  What PEFT keeps and full training does not, until the
model's forward returns: autocast's cached 16-bit casts of the fp32 adapter weights (leaves that
require grad), L x 2 x 2 r (h + h) bytes = 65,536, which no checkpointed graph keeps; and, in
the forward's peak under ``nll``, lm_head's input again, which ``LlamaForCausalLM.forward`` holds
in ``hidden_states`` through the loss (modeling_llama.py:469-475).
"""

from __future__ import annotations

import contextlib
import json

import pytest

from in_process import json_report
from tracked_model import WindowClosed, closing, live as live_bytes, tracker_of

S, H, F, V, LAYERS, RANK = 128, 256, 512, 1000, 2, 16
CASTS = LAYERS * 2 * 2 * RANK * (H + H)            # q and v: lora_A r x h, lora_B h x r, bf16
NORMED = {"llama": 2, "gemma": 4}                  # bytes of the normalised tensor per element


def _model(torch, transformers, peft, trl, family: str, chunked: bool, lora: bool):
    torch.manual_seed(0)
    config = dict(hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=H // 64,
                  num_key_value_heads=H // 64, head_dim=64, intermediate_size=F, vocab_size=V,
                  tie_word_embeddings=False, use_cache=False, attn_implementation="sdpa")
    cls = {"llama": transformers.LlamaConfig, "gemma": transformers.GemmaConfig}[family]
    model = transformers.AutoModelForCausalLM.from_config(cls(**config)).to(
        torch.bfloat16).train()
    model.gradient_checkpointing_enable()
    top = model
    if lora:      # TRL's ModelConfig defaults (model_config.py:107-115), PEFT's llama targets
        top = peft.get_peft_model(model, peft.LoraConfig(
            r=RANK, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "v_proj"],
            task_type="CAUSAL_LM"))
        top.enable_input_require_grads()   # transformers' Trainer: PEFT with checkpointing
    if chunked:   # SFTTrainer patches the causal LM, a PEFT model's base (sft_trainer.py:1306-1319)
        trl._patch_chunked_ce_lm_head(model, chunk_size=trl._CHUNKED_LM_HEAD_CHUNK_SIZE)
    return top


def _tracked(family: str, chunked: bool, lora: bool, batch: int) -> dict:
    """MemTracker's ACT + TEMP bytes at the forward's peak and end and the loss's backward
    start; PEFT's frozen weights given no gradient hook (MemTracker would refuse them)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    peft = pytest.importorskip("peft")
    pytest.importorskip("packaging")
    import trl_chunked_vendored as trl
    from test_chunked_loss import _cuda_policy

    top = _model(torch, transformers, peft, trl, family, chunked, lora)
    ids = torch.randint(0, V, (batch, S))
    mt, marks = tracker_of(tracker, top), {}

    def live(kind="current") -> int:
        return live_bytes(tracker, mt, kind)

    policy = _cuda_policy(torch)
    try:
        with mt:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = top(input_ids=ids, labels=ids)
            marks["forward_peak"], marks["forward_end"] = live("peak"), live()
            loss = out.loss
            del out                               # compute_loss returns the loss alone
            # the mark is the backward's start: nothing after it is read (not run)
            loss.register_hook(closing(lambda: marks.__setitem__("loss_backward", live())))
            with contextlib.suppress(WindowClosed):
                loss.backward()
    finally:
        del policy
    return marks


def _config(tmp_path, family: str) -> str:
    folder = tmp_path / family
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": family, "hidden_size": H, "num_hidden_layers": LAYERS,
        "num_attention_heads": H // 64, "num_key_value_heads": H // 64, "head_dim": 64,
        "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "dtype": "bfloat16"}), encoding="utf-8")
    return str(folder)


def _memsym(capsys, folder: str, loss: str, lora: bool, batch: int) -> dict:
    """memsym's activations at the forward's peak (the forward phase less the model states)
    and at the loss's backward start (the activations held, without the working set full
    recompute builds only in the blocks' backward)."""
    rep = json_report(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", folder,
        "--max_length", str(S), "--per_device_train_batch_size", str(batch), "--dtype",
        "bfloat16", "--loss_type", loss, "--gpu", "h100-80gb", "--metric", "allocated",
        *(["--use_peft"] if lora else [])])
    states = (rep["bytes"]["total"] - rep["bytes"]["activations"]
              - rep["bytes"].get("transients", 0))
    held = sum(v for k, v in rep["activation_bytes"].items() if k != "recompute_working_set")
    return {"forward_peak": rep["phases"]["forward"] - states, "held": held,
            "output": rep["activation_bytes"]["output_activations"]}


@pytest.mark.parametrize("family, loss", [
    ("llama", "nll"), ("llama", "chunked_nll"), ("gemma", "nll"),
    ("gemma", "chunked_nll")])
def test_peft_keeps_what_memsym_counts(capsys, tmp_path, family, loss):
    """PEFT less full training, measured = by hand = memsym's, at the forward's peak, its end
    and the loss's backward start (b = 2, tau = 256); and PEFT's whole model at the loss's
    backward start = memsym's held activations + what memsym leaves out: RoPE's cos and sin,
    [1, s, d_h] bf16 each (the checkpointed layers' inputs; one for the batch), an int64
    vector of the s positions, and the loss's 0-d fp32 tensors (12 bytes under nll, 16 under
    the chunked loss)."""
    batch, chunked = 2, loss == "chunked_nll"
    tau = batch * S
    measured = {lora: _tracked(family, chunked, lora, batch) for lora in (False, True)}
    folder = _config(tmp_path, family)
    ours = {lora: _memsym(capsys, folder, loss, lora, batch) for lora in (False, True)}
    dropped = NORMED[family] * tau * H + (0 if chunked else 2 * tau * H)
    by_hand = {"forward_end": -dropped, "loss_backward": -dropped,
               "forward_peak": CASTS - dropped + (0 if chunked else 2 * tau * H)}
    assert {k: measured[True][k] - measured[False][k] for k in by_hand} == by_hand
    assert ours[True]["held"] - ours[False]["held"] == -dropped
    assert ours[True]["output"] - ours[False]["output"] == -dropped
    assert ours[True]["forward_peak"] - ours[False]["forward_peak"] == by_hand["forward_peak"]
    left_out = 2 * 2 * S * 64 + 8 * S + (16 if chunked else 12)
    assert measured[True]["loss_backward"] == ours[True]["held"] + left_out


@pytest.mark.parametrize("family, extra, normed", [
    ("llama", [], 2), ("gemma", [], 4),
    ("olmo2", ["--lora_target_modules", "q_proj", "v_proj"], 4)])
@pytest.mark.parametrize("loss", ["nll", "chunked_nll"])
def test_the_frozen_output_layer_by_hand(capsys, tmp_path, family, extra, normed, loss):
    """``--use_peft`` less full training in memsym's output-layer activations, by hand at
    b = 3 (tau = 384): the normalised tensor (LlamaRMSNorm's 16-bit ``hidden_states.to``;
    Olmo2RMSNorm's fp32 ``self.weight * hidden_states``, modeling_olmo2.py:63; Gemma's fp32)
    and, under nll, lm_head's 16-bit input."""
    folder = _config(tmp_path, family)
    out = {}
    for lora in (False, True):
        rep = json_report(capsys, [
            "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", folder,
            "--max_length", str(S), "--per_device_train_batch_size", "3", "--dtype",
            "bfloat16", "--loss_type", loss, "--gpu", "h100-80gb",
            *(["--use_peft", *extra] if lora else [])])
        out[lora] = rep["activation_bytes"]["output_activations"]
    tau = 3 * S
    assert out[False] - out[True] == normed * tau * H + (2 * tau * H if loss == "nll" else 0)
