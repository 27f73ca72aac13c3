"""torch.autocast over fp32 weights (the Hugging Face Trainer's ``--bf16`` on a float32
checkpoint) against transformers' own layers and by-hand sums (memsym.terms.autocast).

The oracle: transformers' ``LlamaDecoderLayer``, ``Qwen2DecoderLayer`` and
``Qwen3DecoderLayer`` built in float32 and run under ``torch.autocast("cpu", torch.bfloat16)``
(as Accelerate runs the model's forward) under saved-tensor hooks (``memsym.measure``); the
exact per-layer polynomial, verified on held-back shapes, is

    measured = memsym's 16-bit transformers layer + its named differences (at autocast's
               widths) + memsym.terms.autocast.autocast_layer_excess

with every difference derived below from what transformers' code and autocast keep.  The
job sums are the two-layer Llama of tests/tiny_llama.py, written out by hand.
"""

from __future__ import annotations

import pytest
import sympy as sp

from in_process import json_report, refused_line
from tiny_llama import F, H, LAYERS, TINY, V, tiny_llama
from tracked_model import module_kept
from memsym.symbols import a, b, c, d_h, f, g, h, s, t
from memsym.terms.activations import layer_activations
from memsym.terms.autocast import autocast_layer_excess

HH = a * d_h
#: The layer's polynomial: per token, the widths memsym's layer and the excess have (h, the
#: heads' logsumexp a, K and V g d_h, RoPE's tables d_h, the MLP f, Q/K norms' statistics g,
#: the norms' statistics 1), and the weight casts (q, o: h x a d_h; k, v: h x g d_h; the MLP
#: 3 h f, with h = a d_h).  Any monomial outside it fails the held-back shapes.
BASIS = [s * b * HH, s * b * a, s * b * g * d_h, s * b * d_h, s * b * f, s * b * g, s * b,
         s**2 * b * a, HH**2, HH * g * d_h, HH * f, HH, g * d_h]
FIT = dict(basis=BASIS, ranges=dict(s=(1, 6), b=(1, 3), a=(2, 8), g=(2, 4), d_h=(2, 6), f=(1, 6)),
           valid=lambda x: x["a"] % x["g"] == 0 and x["d_h"] % 2 == 0, extra=2, holdout=3)

# transformers' unfused SwiGLU keeps SiLU's output (2 bytes: the gate projection's output is
# bf16), as in 16 bits; RoPE's cos and sin are built from the fp32 hidden state
# (``LlamaRotaryEmbedding.forward``: ``cos.to(x.dtype)``), so the tables autograd keeps for
# q * cos and rotate_half(q) * sin are fp32: 2 x 4 s b d_h, one storage per model, which
# memsym leaves to the model (tests/test_hf_activations.py)
SILU_OUTPUT = 2 * s * b * f
ROPE_TABLES_FP32 = 2 * 4 * s * b * d_h


def _sixteen_bit_layer(qk_norm: bool) -> sp.Expr:
    """memsym's transformers layer in 16 bits (SDPA's flash kernel, LlamaRMSNorm's copies)."""
    expr = layer_activations(gated=True, norm="rmsnorm", dropout=False, sequence_parallel=False,
                             flash=True, hf_norms=True, qk_norm=qk_norm).expr
    return expr.xreplace({t: sp.Integer(1), c: sp.Integer(1), h: HH})


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_decoder_layer_under_autocast_is_memsym_plus_the_autocast_excess(family):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from memsym.measure import derive_saved_bytes
    from memsym.reference_layers import hf_layer

    make_layer, inputs = hf_layer(family, attention="sdpa", dtype="float32")

    class UnderAutocast(torch.nn.Module):
        """The layer's forward under torch.autocast, as Accelerate wraps the model's."""

        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.layer(x)

    fit = derive_saved_bytes(lambda **k: UnderAutocast(make_layer(**k)), inputs,
                             ("s", "b", "a", "g", "d_h", "f"), **FIT)
    excess = autocast_layer_excess().expr.xreplace({c: sp.Integer(1), h: HH})
    ours = _sixteen_bit_layer(family == "qwen3") + excess
    assert sp.expand(fit.expr - ours - SILU_OUTPUT - ROPE_TABLES_FP32) == 0, sp.factor_terms(
        sp.expand(fit.expr - ours - SILU_OUTPUT - ROPE_TABLES_FP32))
    # by hand, the excess: the norms' fp32 normalised tensors (+2sbh each, two norms), q, k, v
    # each casting the fp32 norm output (+2 x 2sbh), gate and up (+2sbh), and the bf16 copies
    # of q, k, v, o, gate, up, down (Qwen2's q, k, v biases are cast too, but no backward keeps
    # them)
    weights = 2 * (2 * HH * HH + 2 * HH * g * d_h + 3 * HH * f)
    assert sp.expand(excess - (2 * 2 + 2 * 2 + 2) * s * b * HH - weights) == 0


# --- the job, by hand: the two-layer Llama under plain DDP on 2 GPUs --------------------------
TAU = 128 * 2                                   # s = --block_size, b = per-device batch
W_LAYER = 4 * H * H + 3 * H * F                 # q, k, v, o (4 heads of 64: g d_h = h) + MLP
ALLOCATED = ("--metric", "allocated")           # no allowance: phases are allocations alone


@pytest.fixture
def tiny(tmp_path):
    return tiny_llama(tmp_path)


def _launch(model, *extra, dtype="float32"):
    return ["estimate", "torchrun", "--nproc_per_node", "2", "run_clm.py", "--model_name_or_path",
            model, "--dtype", dtype, "--bf16", "--block_size", "128",
            "--per_device_train_batch_size", "2", "--output_dir", "o", *extra, "--gpu",
            "h100-80gb", *ALLOCATED]


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_float32_checkpoint_under_bf16_is_the_bf16_job_plus_autocasts_bytes(
        capsys, tiny, checkpointing):
    """``--dtype float32 --bf16`` against ``--dtype bfloat16 --bf16`` (both read, same
    layers): the states double (fp32 weights, param.grad, buckets, AdamW moments: 2 + 2 + 2 + 4
    bytes more a parameter), and each phase keeps autocast's bytes, by hand."""
    extra = ["--gradient_checkpointing"] if checkpointing else []
    fp32 = json_report(capsys, _launch(tiny, *extra))
    bf16 = json_report(capsys, _launch(tiny, *extra, dtype="bfloat16"))
    assert fp32["training"]["precision"] == "fp32" and fp32["training"]["autocast"] == "bf16"
    assert bf16["training"]["autocast"] is None
    states = (2 + 2 + 2 + 4) * TINY
    layer = (2 * 2 + 2 * 2 + 2) * TAU * H + 2 * W_LAYER     # autocast_layer_excess, by hand
    output = 2 * TAU * H + 2 * V * H        # the final norm's fp32 tensor, lm_head's bf16 weight
    # in the blocks' backward the output layer's and final norm's are freed (output_freed)
    if not checkpointing:
        # every layer keeps its excess until its backward
        want = dict.fromkeys(("forward", "loss-backward"), states + LAYERS * layer + output)
        want["backward"] = states + LAYERS * layer
    else:
        checkpoints = LAYERS * 2 * TAU * H  # each layer's input is the fp32 residual
        want = {"forward": states + checkpoints + output + LAYERS * 2 * W_LAYER,   # the cache
                "loss-backward": states + checkpoints + output,   # autocast exited: no cast
                "backward": states + checkpoints + layer}         # one layer rebuilt
    want["optimizer"] = states
    got = {ph: fp32["phases"][ph] - bf16["phases"][ph] for ph in want}
    assert got == want


def test_the_launch_says_autocast_and_is_memsyms_own_options(capsys, tiny):
    hf = json_report(capsys, _launch(tiny))
    assert any("torch.autocast(bfloat16)" in n and "--autocast" in n for n in hf["notes"])
    own = ["estimate", tiny, "--framework", "deepspeed", "--sharding", "ddp", "--precision",
           "fp32", "--autocast", "bf16", "--optimizer", "adam", "--world-size", "2",
           "--micro-batch-size", "2", "--seq-length", "128", "--torch-ddp-buckets",
           "--overlap-grad-reduce", "--gpu", "h100-80gb", *ALLOCATED]
    assert json_report(capsys, own)["bytes"] == hf["bytes"]


def test_autocast_runs_the_matmuls_at_its_dtype(capsys, tiny):
    """The step's GEMMs at bf16's peak, not fp32's: the MFU's peak is the bf16 one."""
    fp32 = json_report(capsys, _launch(tiny))
    assert fp32["assumptions"]["precision"] == "bf16"
    bf16 = json_report(capsys, _launch(tiny, dtype="bfloat16"))
    assert fp32["assumptions"]["peak_flops_per_gpu"] == bf16["assumptions"]["peak_flops_per_gpu"]


def test_autocast_on_a_model_it_was_not_measured_on_is_refused(capsys, tmp_path):
    """Phi (one LayerNorm feeding separate q, k, v and the MLP in parallel, gelu_new, a biased
    lm_head; not measured under autocast) is refused in one line naming what is counted
    (GPT-2 and GPT-NeoX are counted: tests/test_autocast_gpt2.py)."""
    import json
    folder = tmp_path / "phi"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "phi", "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 1000}),
        encoding="utf-8")
    line = refused_line(capsys, _launch(str(folder)))
    assert "not a phi model" in line and "llama/mistral/qwen2/qwen3/gpt2/gpt_neox" in line
    # and the way through: the same launch with its weights loaded in 16 bits
    assert line.rstrip().endswith("load the weights in 16 bits (--dtype bfloat16)")


@pytest.mark.parametrize("opts, said", [
    (["--precision", "fp16"], "not precision fp16"),   # bf16 autocast over fp16 weights
    (["--precision", "fp32", "--sharding", "zero2"], "not sharding zero2"),
    (["--precision", "fp32", "--finetune", "lora"], "not finetune lora"),
    (["--precision", "fp32", "--framework", "megatron"], "not framework megatron"),
    (["--precision", "fp32", "--no-flash-attention"], "eager attention"),
])
def test_autocast_options_memsym_does_not_count_are_refused(capsys, tiny, opts, said):
    args = ["estimate", tiny, "--framework", "deepspeed", "--sharding", "ddp", "--autocast",
            "bf16", "--optimizer", "adam", "--seq-length", "128", *opts]
    assert said in refused_line(capsys, args)


# --- a real engine: torch's MemTracker on transformers' own LlamaForCausalLM on the CPU --------
def _tracked(dtype: str, checkpointing: bool) -> dict:
    """Activation bytes (torch's MemTracker: ACT + TEMP) of the two-layer Llama's training
    forward at the forward's end and as the loss's backward starts, the model in ``dtype``
    (float32 under CPU bf16 autocast, as Accelerate runs the Trainer's --bf16; bfloat16
    without), use_cache off as the Trainer sets it (transformers 5.25.0 trainer.py:645-646,
    TrainingArguments.use_cache False: no KV cache kept in training), gradient checkpointing
    as --gradient_checkpointing sets it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=4,
                                   num_key_value_heads=4, intermediate_size=F, vocab_size=V,
                                   tie_word_embeddings=False, use_cache=False,
                                   attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg).to(getattr(torch, dtype)).train()
    if checkpointing:
        model.activation_checkpointing_enable()    # --gradient_checkpointing's call
    ids = torch.randint(0, V, (2, 128))
    mt = tracker.MemTracker()
    mt.track_external(model)
    with mt:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "float32"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    def kept(state) -> int:
        return module_kept(tracker, mt, "LlamaForCausalLM", state)
    return {"forward": kept(tracker._ModState.POST_FW),
            "loss-backward": kept(tracker._ModState.PRE_BW)}


@pytest.mark.parametrize("checkpointing", [False, True])
def test_torchs_memory_tracker_sees_autocasts_bytes_where_memsym_counts_them(
        capsys, tiny, checkpointing):
    """autocast - bf16 as torch's MemTracker measures the real model = memsym's phase
    difference less the states' (2 + 2 + 2 + 4 bytes a parameter), plus RoPE's cos and sin
    tables in fp32 instead of bf16 (one [1, s, d_h] storage each for the model, which memsym
    leaves out: 2 x 128 x 64 x 2 bytes more)."""
    extra = ["--gradient_checkpointing"] if checkpointing else []
    memsym = {dtype: json_report(capsys, _launch(tiny, *extra, dtype=dtype))["phases"]
              for dtype in ("float32", "bfloat16")}
    measured = {dtype: _tracked(dtype, checkpointing) for dtype in ("float32", "bfloat16")}
    rope = 2 * 128 * 64 * 2
    for phase in ("forward", "loss-backward"):
        ours = memsym["float32"][phase] - memsym["bfloat16"][phase] - (2 + 2 + 2 + 4) * TINY
        assert measured["float32"][phase] - measured["bfloat16"][phase] == ours + rope, phase


def test_qwen2s_qkv_bias_casts_stay_in_autocasts_cache_to_the_forwards_end(capsys, tmp_path):
    """Qwen2's q, k, v biases are cast with their linears and cached until the forward ends,
    kept by no backward: between the forward's end and the loss's backward autocast's job
    frees 2 L (a + 2g) d_h bytes more than bf16's (a = 4, g = 2, d_h = 64), in memsym's phases
    and as torch's MemTracker measures transformers' Qwen2ForCausalLM."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    model = tiny_llama(tmp_path, model_type="qwen2", num_key_value_heads=2)
    want = 2 * LAYERS * (4 + 2 * 2) * 64

    def freed(phases):
        return phases["forward"] - phases["loss-backward"]
    ours = {dtype: freed(json_report(capsys, _launch(model, dtype=dtype))["phases"])
            for dtype in ("float32", "bfloat16")}
    assert ours["float32"] - ours["bfloat16"] == want

    def measured(dtype):
        torch.manual_seed(0)
        cfg = transformers.Qwen2Config(hidden_size=H, num_hidden_layers=LAYERS,
                                       num_attention_heads=4, num_key_value_heads=2,
                                       intermediate_size=F, vocab_size=V, use_cache=False,
                                       tie_word_embeddings=False, attn_implementation="sdpa")
        net = transformers.Qwen2ForCausalLM(cfg).to(getattr(torch, dtype)).train()
        ids = torch.randint(0, V, (2, 128))
        mt = tracker.MemTracker()
        mt.track_external(net)
        with mt:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "float32"):
                loss = net(input_ids=ids, labels=ids).loss
            loss.backward()
        return (module_kept(tracker, mt, "Qwen2ForCausalLM", tracker._ModState.POST_FW)
                - module_kept(tracker, mt, "Qwen2ForCausalLM", tracker._ModState.PRE_BW))
    assert measured("float32") - measured("bfloat16") == want
