"""transformers' own loss (``ForCausalLMLoss``) on the last stage of a job of its model code
(``--framework deepspeed``: a Hugging Face Trainer launch) against a real engine and by-hand
sums (memsym.terms.loss_transients.hf_cross_entropy_transient).

The oracle: torch's MemTracker (tests/tracked_model.py) on transformers' own
``LlamaForCausalLM`` on the CPU, its weights in float32 and in bfloat16 and no autocast (the
Trainer without --bf16 / --fp16 computes in the weights' dtype), SDPA, use_cache off:
``model(input_ids=ids, labels=ids).loss`` then ``loss.backward()``, as the Trainer runs them
(transformers 5.25.0 trainer.py:2209 and :2254, ``compute_loss`` returns the loss alone, so the
outputs and their logits die before ``accelerator.backward`` at :2163).  The root module's
snapshots give the forward's peak (the loss's: ``log_softmax`` writing its output, then
``nll_loss``), the forward's end, the loss's backward's start and the backward's peak (the
loss's: ``_log_softmax_backward_data``).  Plain fp32 runs no autocast, so no op's dtype differs
between the CPU and CUDA here.

Sizes: h = 64, 2 heads of d_h = 32 (2 KV heads), f = 128, 2 layers, V = 32000 (the loss is the
step's peak), s = 128, b = 2: tau = s b = 256 tokens.
"""

from __future__ import annotations

import pytest

from in_process import json_report
from tiny_llama import tiny_llama
from tracked_model import module_kept, tracker_of

H, HEADS, F, LAYERS, V, S, B = 64, 2, 128, 2, 32000, 128, 2
TAU = S * B
DTYPES = {"float32": ("fp32", 4), "bfloat16": ("bf16", 2)}   # run_clm.py --dtype: memsym's, w


def _loss_by_hand(w: int) -> dict:
    """ForCausalLMLoss beyond its saved fp32 log-softmax, from loss_utils.py:52-74 and aten's
    kernels: at the forward's peak the logits (w bytes; LlamaForCausalLM.forward returns them,
    modeling_llama.py:471-483), their ``.float()`` copy when 16-bit (:62; fp32 logits are
    returned as they are), the labels padded with one -100 column and their shifted contiguous
    copy (int64, :66-67); in the loss's backward, nll_loss's zero-filled fp32 gradient and
    log_softmax's fp32 gradient of its input (the logits freed: the outputs died)."""
    copy = 4 * TAU * V if w == 2 else 0
    return {"forward": w * TAU * V + copy + 8 * B * (S + 1) + 8 * TAU,
            "loss-backward": 2 * 4 * TAU * V}


def _by_hand(w: int) -> dict:
    """The live activation bytes of the step at the forward's peak and the loss's backward's
    peak, written out from modeling_llama.py (w bytes an element of the compute dtype)."""
    ids = 8 * TAU                                       # int64 input ids (the embedding's)
    # LlamaRMSNorm (:62-67): the fp32 copy of its input (the input itself at w = 4), its
    # x * rsqrt cast to the input dtype (kept by weight *), the fp32 1 / rms a token
    norm = (4 + w) * TAU * H + 4 * TAU
    attention = (w * TAU * H                            # q, k, v projections' input
                 + 2 * w * TAU * H + w * TAU * H        # q, k after RoPE; v (SDPA's inputs)
                 + 4 * HEADS * TAU                      # SDPA's fp32 logsumexp a head
                 + w * TAU * H)                         # its output, o_proj's input
    mlp = (w * TAU * H + 2 * w * TAU * F                # gate/up input; gate, up outputs
           + w * TAU * F + w * TAU * F)                 # SiLU's output; down_proj's input
    layer = 2 * norm + attention + mlp
    kept = ids + LAYERS * layer + norm + w * TAU * H + 4 * TAU * V   # final norm, lm_head
    loss = _loss_by_hand(w)                             # input, the fp32 log-softmax
    return {phase: kept + loss[phase] for phase in loss}


def _left_out(w: int) -> int:
    """What the tracker sees beyond memsym's count at both peaks: RoPE's cos and sin ([1, s,
    d_h] at the compute width, one storage each for the whole model: ``cos.to(x.dtype)``;
    memsym leaves them to the model as tests/test_hf_activations.py does) and the loss's two
    0-d fp32 tensors (``nll_loss``'s output and total weight; in backward the loss and its
    seed gradient), less the caller's int64 input ids (made before the tracker, which never
    sees them; a GPU holds them and memsym counts them)."""
    return 2 * w * S * (H // HEADS) + 2 * 4 - 8 * TAU


def _tracked(dtype: str) -> dict:
    """MemTracker's ACT + TEMP bytes of the Llama's training step in ``dtype``, at the root
    module's forward peak and end, and at its backward's start and peak."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=HEADS, intermediate_size=F, vocab_size=V, tie_word_embeddings=False,
        use_cache=False, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg).to(getattr(torch, dtype)).train()
    ids = torch.randint(0, V, (B, S))
    mt = tracker_of(tracker, model)
    with mt:
        loss = model(input_ids=ids, labels=ids).loss    # compute_loss keeps the loss alone
        loss.backward()
    def kept(state) -> int:
        return module_kept(tracker, mt, "LlamaForCausalLM", state)
    states = tracker._ModState
    return {"forward": kept(states.PEAK_FW), "forward end": kept(states.POST_FW),
            "loss-backward start": kept(states.PRE_BW), "loss-backward": kept(states.PEAK_BW)}


def test_the_terms_are_the_derivation():
    """memsym's forward Terms and eager F.cross_entropy's backward Terms, at each width, are
    the by-hand loss; the 16-bit logits' label names their dtype, fp32 logits' theirs."""
    from memsym.terms.transients import hf_cross_entropy_transient, torch_cross_entropy_backward

    at = dict(s=S, b=B, c=1, t=1, V=V)
    for precision, w in DTYPES.values():
        fwd = hf_cross_entropy_transient(dtype=precision)
        assert fwd.evaluate(**at) == _loss_by_hand(w)["forward"]
        assert fwd.terms[0].label == f"{precision} logits"
    assert torch_cross_entropy_backward().evaluate(**at) == _loss_by_hand(4)["loss-backward"]
    assert hf_cross_entropy_transient(dtype="fp16").terms[0].label == "fp16 logits"
    # Ulysses passes shift_labels (integrations/deepspeed.py:740-747): no label copy at c > 1,
    # and a search template (c a symbol) says so
    templ = hf_cross_entropy_transient(shifted=None)
    assert templ.evaluate(**at) == _loss_by_hand(2)["forward"]
    assert templ.evaluate(**{**at, "c": 2}) == hf_cross_entropy_transient(
        shifted=False).evaluate(**{**at, "c": 2}) == 6 * TAU * V // 2


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_torchs_tracker_sees_the_loss_where_memsym_counts_it(capsys, tmp_path, dtype):
    """measured - what memsym leaves out (:func:`_left_out`) = the by-hand sum = memsym's
    phase less its steady states, to the byte, at the forward's peak and the loss's backward
    peak; the forward's end and the loss's backward's start below them by hand (the ``.float()``
    copy and the padded labels die with the loss function; the logits die with the outputs;
    nll_loss keeps the shifted labels and its total weight, the engine the loss's seed
    gradient), and the loss's backward is the step's peak."""
    precision, w = DTYPES[dtype]
    model = tiny_llama(tmp_path, hidden_size=H, num_attention_heads=HEADS,
                       num_key_value_heads=HEADS, intermediate_size=F, vocab_size=V, dtype=dtype)
    rep = json_report(capsys, ["estimate", model, "--framework", "deepspeed", "--sharding", "ddp",
                               "--precision", precision, "--world-size", "1", "--seq-length",
                               str(S), "--micro-batch-size", str(B), "--metric", "allocated"])
    got = rep["bytes"]
    steady = got["total"] - got["activations"] - got["transients"]   # states, workspace
    ours = {phase: rep["phases"][phase] - steady for phase in ("forward", "loss-backward")}
    want = _by_hand(w)
    measured = _tracked(dtype)
    for phase in ours:
        assert measured[phase] - _left_out(w) == want[phase] == ours[phase], phase
    assert rep["phases"]["peak"] == "loss-backward"
    copy = 4 * TAU * V if w == 2 else 0
    assert measured["forward end"] == measured["forward"] - copy - 8 * B * (S + 1)
    logits = w * TAU * V
    assert measured["loss-backward start"] == (measured["forward end"] - logits
                                               + 4)     # the loss's seed gradient


@pytest.mark.parametrize("precision, autocast, labels", [
    ("fp32", None, ["fp32 logits", "int64 labels"]),
    ("bf16", None, ["bf16 logits", "fp32 logits copy", "int64 labels"]),
    ("fp16", None, ["fp16 logits", "fp32 logits copy", "int64 labels"]),
    # autocast over fp32 weights: lm_head runs in autocast's dtype
    ("fp32", "bf16", ["bf16 logits", "fp32 logits copy", "int64 labels"]),
])
def test_the_forward_says_the_logits_dtype(tmp_path, precision, autocast, labels):
    """The forward phase's loss rows name the logits' own dtype (issue 30: fp32 logits were
    reported as "bf16 logits"), and the loss's backward is eager F.cross_entropy's."""
    from memsym.job import job
    from memsym.training import phase_transients

    j = job(tiny_llama(tmp_path), d=8, framework="deepspeed", sharding="ddp",
            precision=precision, autocast=autocast, global_batch_size=8, seq_length=S)
    phases = phase_transients(j, 0)
    assert [term.label for term in phases["forward"]] == labels
    assert {"nll_grad_fp32", "log_softmax_grad_fp32"} <= {t_.key for t_ in phases["loss-backward"]}
