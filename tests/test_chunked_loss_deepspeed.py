"""TRL's chunked loss (``loss_type`` chunked_nll, TRL's default) under DeepSpeed's engine
(memsym.terms.chunked_loss's ``no_autocast`` and ``gathered``; issue 32).

The engine holds the model in the config's 16-bit dtype and runs no torch.autocast, so
``_chunk``'s ``h.float() @ w.float().t()`` (huggingface/trl f2cd57710a
trl/trainer/sft_trainer.py:99-114) is an fp32 matmul over fp32 copies of the chunk and the
weight, its logits fp32.  Under ZeRO-3 the matmul runs inside ``maybe_gather_lm_head_ctx``
(trl/trainer/utils.py:188-220): ``deepspeed.zero.GatheredParameters`` of the partitioned
``lm_head.weight``, whose ``__enter__`` all-gathers it into a new flat tensor of the whole
weight in its dtype (deepspeedai/DeepSpeed edaa722126
deepspeed/runtime/zero/partition_parameters.py:2435-2453 -> ``_all_gather`` :1695-1735 ->
``_allgather_params_sequential`` :2102-2112, ``torch.empty(partition_size * world_size)``)
and whose ``__exit__`` partitions it again, freeing that storage (:2493-2515 ->
``_partition_param`` :1750-1776 -> ``free_param`` :308-324, ``param.data = torch.empty(0)``).
The context closes right after the matmul (before ``log_softmax``), in the forward and in the
checkpoint's recomputation alike.

The by-hand sums below are written from those sources, term by term, not from memsym's
functions; the CPU measurement runs TRL's own code (tests/trl_chunked_vendored.py) on
transformers' Llama in bf16 without autocast, with a context manager that allocates a tensor
of the gathered weight's size on entry and drops it on exit standing for the gather.
"""

from __future__ import annotations

import contextlib

import pytest

from in_process import json_report, refused_line
from tiny_llama import V, tiny_llama
from tracked_model import WindowClosed, Windows, closing, tracker_of
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.terms.chunked_loss import chunked_loss_backward, chunked_loss_forward

S, K = 128, 256           # --max_length, TRL's chunk (sft_trainer.py:86)


def _by_hand(hidden: int, batch: int, vocab: int = V, frozen: bool = False,
             zero3: bool = False) -> dict:
    """The chunk's forward and backward peaks, bf16 weights without autocast [bytes]."""
    n, h = batch * (S - 1), hidden
    k = min(K, n)
    last = 2 * batch * S * h                   # the backbone's bf16 output, alive over the loop
    packing = 2 * n * h                        # the reshaped shifted rows beside their packed copy
    gather = 2 * vocab * h if zero3 else 0     # GatheredParameters' bf16 flat tensor, V x h
    # the matmul: h.float() (4kh), w.float() (4Vh), fp32 logits (4kV), beside the gather
    matmul = 4 * k * h + 4 * vocab * h + 4 * k * vocab + gather
    # after the context: logits, log_p, log_p.exp(), the product (4 + 4 + 4 + 4 a logit), valid
    entropy = 16 * k * vocab + k
    fwd = last + max(packing, matmul, entropy)
    weight = 0 if frozen else 2 * vocab * h    # the weight's bf16 gradient of the chunks done
    done = weight + 2 * n * h                  # ... and the packed rows' bf16 gradient
    if frozen:   # w.float() saved (for the chunk's gradient), h.float() not
        peaks = (16 * k * vocab + 4 * vocab * h + 5 * k,              # recomputed entropy
                 4 * k * vocab + 4 * vocab * h + 4 * k * h,           # matmul backward
                 matmul)                                              # recomputed matmul
    else:        # both fp32 copies saved; the matmul's backward makes fp32 grads of both
        peaks = (16 * k * vocab + 4 * vocab * h + 4 * k * h + 5 * k,
                 4 * k * vocab + 8 * vocab * h + 8 * k * h,
                 matmul)
    bwd = done + max(peaks)
    if n > 2 * K:  # a middle chunk's n x h gradient (SliceBackward) beside the buffers
        bwd = max(bwd, weight + 4 * n * h + 2 * k * h)
    return {"forward": fwd, "backward": bwd, "last": last}


def test_zero2_and_zero3_peaks_by_hand():
    """h 4096, V 151936, b 2, s 128 (n = 254: one chunk of 254 rows), full training: the
    forward's peak is the matmul's (ZeRO-3: 2Vh more, the gathered weight), the backward's the
    matmul's backward (the gathered weight, freed before it, changes nothing)."""
    h, vocab, b = 4096, 151936, 2
    n = k = 254
    fwd2 = 2 * b * S * h + (4 * k * h + 4 * vocab * h + 4 * k * vocab)
    fwd3 = fwd2 + 2 * vocab * h
    bwd = 2 * vocab * h + 2 * n * h + (4 * k * vocab + 8 * vocab * h + 8 * k * h)
    assert _by_hand(h, b, vocab) == {"forward": fwd2, "backward": bwd, "last": 2 * b * S * h}
    assert _by_hand(h, b, vocab, zero3=True)["forward"] == fwd3
    assert _by_hand(h, b, vocab, zero3=True)["backward"] == bwd
    at = dict(s=S, b=b, h=h, V=vocab)
    assert chunked_loss_forward("no_autocast").evaluate(**at) == fwd2 == 2_649_945_088
    assert chunked_loss_forward("no_autocast", gathered=True).evaluate(**at) == fwd3
    assert fwd3 - fwd2 == 2 * 151936 * 4096
    for gathered in (False, True):
        assert chunked_loss_backward("no_autocast", gathered=gathered).evaluate(**at) == bwd


@pytest.mark.parametrize("hidden, batch, vocab, frozen, zero3", [
    (256, 3, V, False, False), (768, 3, V, False, True), (768, 9, 64, False, True),
    (768, 3, V, True, False), (2048, 3, V, True, True), (512, 9, 64, True, True),
])
def test_the_terms_are_the_derivation(hidden, batch, vocab, frozen, zero3):
    """Each case names a branch: h 2048 frozen under ZeRO-3 peaks at the recomputed matmul
    beside the regathered weight (2Vh + 4kh > 12kV + 5k), b 9 at V 64 at the scatter."""
    want = _by_hand(hidden, batch, vocab, frozen, zero3)
    at = dict(s=S, b=batch, h=hidden, V=vocab)
    assert chunked_loss_forward("no_autocast", gathered=zero3).evaluate(**at) == want["forward"]
    assert chunked_loss_backward("no_autocast", frozen_head=frozen,
                                 gathered=zero3).evaluate(**at) == want["backward"]


def test_the_variants_that_do_not_exist_are_refused():
    with pytest.raises(UnknownNameError, match="chunked loss run"):
        chunked_loss_forward("bf16", 4)
    with pytest.raises(InvalidValueError, match="ZeRO-3's gathered lm_head"):
        chunked_loss_backward(gathered=True)


def _config(tmp_path, stage: int, **zero) -> str:
    import json
    path = tmp_path / f"zero{stage}{'-' + '-'.join(zero) if zero else ''}.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": stage, **zero},
                                "bf16": {"enabled": "auto"},
                                "train_micro_batch_size_per_gpu": "auto",
                                "gradient_accumulation_steps": "auto"}), encoding="utf-8")
    return str(path)


def _launch(model, config, batch, *extra):
    return ["estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", model,
            "--max_length", str(S), "--per_device_train_batch_size", str(batch), "--dtype",
            "bfloat16", "--deepspeed", config, "--gpu", "h100-80gb", "--metric", "allocated",
            *extra]


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("lora", [False, True])
def test_trl_sft_under_deepspeed_counts_the_chunk(capsys, tmp_path, stage, lora):
    """``trl sft --deepspeed`` under chunked_nll gives a total; its loss-backward phase less
    its forward phase is the hand difference (ZeRO-2 with ``contiguous_gradients`` false: no
    IPG buffer in the backward; ZeRO-3's gathered layers are in every phase)."""
    folder = tiny_llama(tmp_path, dtype="bfloat16")
    config = _config(tmp_path, stage, contiguous_gradients=False)
    rep = json_report(capsys, _launch(folder, config, 4, *(["--use_peft"] if lora else [])))
    assert rep["training"]["chunked_loss"] is True
    assert rep["training"]["sharding"] == f"zero{stage}" and rep["bytes"]["total"] > 0
    want = _by_hand(256, 4, frozen=lora, zero3=stage == 3)
    phases = rep["phases"]
    assert phases["loss-backward"] - phases["forward"] == want["backward"] - want["forward"]


def test_what_is_not_modelled_is_refused(capsys, tmp_path):
    """ZeRO-3 with the parameters offloaded (the gather first copies the host partition over)
    and with tied embeddings (embed_tokens keeps the weight gathered: utils.py:198-203), and
    DeepSpeed's stage 0: one line each, saying --loss_type nll."""
    untied = tiny_llama(tmp_path, dtype="bfloat16")
    tied = tiny_llama(tmp_path, name="tied", dtype="bfloat16", tie_word_embeddings=True)
    offload = _config(tmp_path, 3, offload_param={"device": "cpu"})
    cases = ((untied, offload, "offload optimizer+params"),
             (tied, _config(tmp_path, 3), "tied embeddings"),
             (untied, _config(tmp_path, 0), "ZeRO stage 0"))
    for model, config, said in cases:
        err = refused_line(capsys, _launch(model, config, 2))
        assert said in err and "give --loss_type nll" in err
        json_report(capsys, _launch(model, config, 2, "--loss_type", "nll"))


def _tracked(hidden: int, batch: int, gather: bool) -> dict:
    """MemTracker's ACT + TEMP of the loss's forward over the backbone's end (``fw_loss``)
    and of its backward over the loss's gradient (``bw_loss``, to the final norm's output
    gradient): TRL's code on the two-layer Llama in bf16, no autocast (DeepSpeed's engine),
    with ``gather`` a bf16 V x h tensor made on the context's entry and dropped on its exit."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    pytest.importorskip("packaging")
    import trl_chunked_vendored as trl
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=hidden, num_hidden_layers=2, num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64, intermediate_size=512, vocab_size=V,
        tie_word_embeddings=False, use_cache=False, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).train()
    model.gradient_checkpointing_enable()
    trl._patch_chunked_ce_lm_head(model, chunk_size=trl._CHUNKED_LM_HEAD_CHUNK_SIZE)

    @contextlib.contextmanager
    def gathered(w, b):
        full = torch.empty(w.shape, dtype=w.dtype)   # the all-gather's flat tensor
        try:
            yield
        finally:
            del full                                 # free_param on the context's exit

    saved = trl.maybe_gather_lm_head_ctx
    if gather:
        trl.maybe_gather_lm_head_ctx = gathered
    ids = torch.randint(0, V, (batch, S))
    mt = tracker_of(tracker, model)
    windows = Windows(tracker, mt)
    marks, start, end = windows.marks, windows.start, windows.end

    def norm_out(module, args, out):     # returns None: the forward's output unchanged
        out.register_hook(closing(lambda: end("bw_loss")))   # the backbone's backward not run

    model.model.register_forward_hook(lambda *_: start("fw_loss"))
    model.model.norm.register_forward_hook(norm_out)
    try:
        with mt:
            out = model(input_ids=ids, labels=ids)
            end("fw_loss")
            loss = out.loss
            del out
            loss.register_hook(lambda grad: start("bw_loss"))
            with contextlib.suppress(WindowClosed):
                loss.backward()
    finally:
        trl.maybe_gather_lm_head_ctx = saved
    return marks


@pytest.mark.parametrize("gather", [False, True])
def test_torchs_tracker_sees_the_chunk_without_autocast(gather):
    """h 768, b 3 (two chunks): the backward's peak is the terms' to 8 bytes (the loss's 0-d
    tensors); the forward's holds beside the terms the packed rows (made first), the bool
    ``valid`` mask (n bytes), the batch's int64 labels (8 b s) and the loop's scalars (0 to 64
    bytes).  With the stand-in gather the forward's peak is 2Vh higher, the backward's not."""
    hidden, batch = 768, 3
    n = batch * (S - 1)
    measured = _tracked(hidden, batch, gather)
    want = _by_hand(hidden, batch, zero3=gather)
    kept = 2 * n * hidden + 16 * n
    assert abs(measured["bw_loss"] - want["backward"]) <= 8, measured
    extra = measured["fw_loss"] - (kept + n + 8 * batch * S + want["forward"] - want["last"])
    assert 0 <= extra <= 64, measured
