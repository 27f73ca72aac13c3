"""TRL's chunked cross-entropy (``loss_type="chunked_nll"``, SFTConfig's default) against a
real engine and by-hand sums (memsym.terms.chunked_loss).

The oracle: torch's MemTracker on transformers' own ``LlamaForCausalLM`` whose forward is
patched by TRL's own ``_patch_chunked_ce_lm_head`` (tests/trl_chunked_vendored.py, verbatim from
huggingface/trl f2cd57710a sft_trainer.py:86-378), on the CPU: float32 weights (TRL's default
dtype) and bfloat16 weights, both under bf16 autocast as Accelerate runs the Trainer's forward
with TRL's default bf16 (accelerate 1.16 accelerator.py:1791-1801, whatever the weights'
dtype; the loss's ops in CUDA's autocast dtypes, :func:`_cuda_policy`), with gradient
checkpointing (TRL's default) and without.  Sizes below: V = 1000 words (fewer where a case
names them), chunks of k = 256 rows, n = b (s - 1) shifted positions; "scalars" are the
loss's 4-byte 0-d tensors, which memsym does not count.  Where autograd sums gradients (the
backward from three chunks, PEFT's LoRA) the oracle is the CPU allocator's own record
(torch.profiler, :func:`_allocated`), with no dispatch mode on to change how autograd sums
them.  Every measured window ends at the final norm's output gradient, where the backward is
stopped (tests/tracked_model.py ``closing``): the backbone's backward is never read.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess

import pytest

from in_process import json_report
from tiny_llama import F, H, LAYERS, V, tiny_llama
from tracked_model import WindowClosed, Windows, closing, tracker_of
from memsym.errors import InvalidValueError
from memsym.terms.chunked_loss import chunked_loss_backward, chunked_loss_forward

S, K = 128, 256           # --max_length, TRL's chunk (sft_trainer.py:86)


def _launch(model, batch, dtype, loss):
    return ["estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", model,
            "--max_length", str(S), "--per_device_train_batch_size", str(batch), "--dtype",
            dtype, "--loss_type", loss, "--gpu", "h100-80gb", "--metric", "allocated"]


def _cuda_policy(torch):
    """CUDA's autocast dtypes for the ops of TRL's ``_chunk`` that CPU autocast runs otherwise,
    as kernels of CPU autocast's dispatch key (live while the returned Library is): CUDA runs
    ``log_softmax`` in fp32 (``AT_FORALL_FP32_SET_OPT_DTYPE``) and ``exp`` in fp32
    (``AT_FORALL_FP32``), torch 2.13.0 aten/src/ATen/autocast_mode.h; CPU autocast lists
    neither and runs them in bfloat16.  The matmul (16 bits) and ``nll_loss`` (fp32) are the
    same on both."""
    lib = torch.library.Library("aten", "IMPL")

    def fp32(op):
        def kernel(x, *args):
            with torch.autocast("cpu", enabled=False):     # redispatch below autocast
                return op(x.float() if x.is_floating_point() else x, *args)
        return kernel

    lib.impl("log_softmax.int", fp32(torch.ops.aten.log_softmax.int), "AutocastCPU")
    lib.impl("exp", fp32(torch.ops.aten.exp.default), "AutocastCPU")
    return lib


def _model(torch, transformers, trl, dtype, chunked, hidden, checkpointing, vocab=V,
           peft=None):
    """The two-layer Llama in ``dtype``, TRL's chunked loss patched in as SFTTrainer does, and
    with ``peft`` (the peft module) PEFT's LoRA on q_proj, v_proj: the model trained and the
    causal LM (its base model) patched, sft_trainer.py:1306-1319."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=hidden, num_hidden_layers=LAYERS, num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64, intermediate_size=F, vocab_size=vocab,
        tie_word_embeddings=False, use_cache=False, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(cfg).to(getattr(torch, dtype)).train()
    if checkpointing:                                # SFTConfig: gradient_checkpointing True
        model.gradient_checkpointing_enable()
    top = model
    if peft is not None:
        top = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"],
                                                         task_type="CAUSAL_LM"))
        if checkpointing:   # transformers' Trainer with a PEFT model and checkpointing
            top.enable_input_require_grads()
    if chunked:     # what SFTTrainer.__init__ does for chunked_nll (sft_trainer.py:1298-1319)
        trl._patch_chunked_ce_lm_head(top if peft is None else top.get_base_model(),
                                      chunk_size=trl._CHUNKED_LM_HEAD_CHUNK_SIZE)
    return top


def _tracked(dtype: str, chunked: bool, hidden: int = H, batch: int = 2,
             checkpointing: bool = True, lora: bool = False, vocab: int = V) -> dict:
    """Activation bytes (MemTracker's ACT + TEMP) of the two-layer Llama's training step: at
    the forward's end (``fw_end``, full training), the peak of the loss's part of the forward
    over its start (the backbone's end: ``fw_loss``) and the peak of the loss's backward over
    its start (from the loss's gradient to the final norm's output gradient: ``bw_loss``).
    The forward runs under bf16 autocast as the Trainer runs it (Accelerate's, over bf16
    weights too), with CUDA's dtypes for the loss's ops (:func:`_cuda_policy`); ``lora``:
    PEFT's LoRA (:func:`_model`), its frozen weights given no gradient hook (MemTracker
    registers one on every parameter and refuses a frozen one); ``vocab``: the words V."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    pytest.importorskip("packaging")
    peft = pytest.importorskip("peft") if lora else None
    import trl_chunked_vendored as trl
    top = _model(torch, transformers, trl, dtype, chunked, hidden, checkpointing, vocab, peft)
    model = top.get_base_model() if lora else top
    ids = torch.randint(0, vocab, (batch, S))
    mt = tracker_of(tracker, top)
    windows = Windows(tracker, mt)
    marks, start, end = windows.marks, windows.start, windows.end

    def norm_out(module, args, out):    # the window's end; the backbone's backward not run
        out.register_hook(closing(lambda: end("bw_loss")))

    model.model.register_forward_hook(lambda *_: start("fw_loss"))
    model.model.norm.register_forward_hook(norm_out)
    policy = _cuda_policy(torch)
    with mt:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = top(input_ids=ids, labels=ids)
        end("fw_loss")
        loss = out.loss
        del out                               # compute_loss returns the loss alone
        loss.register_hook(lambda grad: start("bw_loss"))
        with contextlib.suppress(WindowClosed):
            loss.backward()
    del policy                                # CPU autocast's own kernels again
    if not lora:
        root = next(st for st in mt.memory_tracking.values() if st.mod_fqn == "LlamaForCausalLM")
        (snap,) = root.snapshots[tracker._ModState.POST_FW][0].values()
        marks["fw_end"] = sum(v for k, v in snap.items() if k in (tracker._MemRefType.ACT,
                                                                  tracker._MemRefType.TEMP))
    return marks


def _by_hand(autocast: bool, hidden: int, batch: int, vocab: int = V,
             frozen: bool = False) -> dict:
    """The chunk's forward and backward peaks written out (memsym.terms.chunked_loss's
    derivation, term by term), under the Trainer's bf16 autocast: k rows, n positions, the
    weight V x h; ``frozen``: lm_head frozen (PEFT), no weight gradient and no chunk cast
    saved for one."""
    n, k, h, V = batch * (S - 1), K, hidden, vocab
    w = 4 if autocast else 2                   # the hidden states' bytes (fp32 residual)
    last = w * batch * S * h                   # the backbone's output, alive over the loop
    weight = 0 if frozen else w * V * h        # the weight's gradient of the chunks done
    copies = 0 if autocast else 4 * k * h + 4 * V * h     # h.float(), w.float() of 16 bits
    # the matmul in 16 bits on casts (not cached); log_softmax, exp, the product fp32 (CUDA)
    fwd = last + max(w * n * h, copies + 2 * k * h + 2 * V * h + 2 * k * V, 14 * k * V + k)
    saved = 2 * V * h + (0 if frozen else 2 * k * h)      # the casts the matmul's backward reads
    if autocast:   # fp32 weights: the 16-bit gradients and the weight's out-of-place fp32 sum
        bwd = weight + w * n * h + max(14 * k * V + saved + 5 * k,
                                       2 * k * V + 4 * V * h + 4 * k * h, 8 * V * h + 4 * k * h)
    else:          # 16-bit weights: the recomputed matmul beside its fp32 copies, or entropy
        bwd = weight + w * n * h + max(copies + 2 * k * h + 2 * V * h + 2 * k * V,
                                       14 * k * V + saved + 5 * k)
    if n > 2 * K:  # a middle chunk's n x h gradient (SliceBackward) beside the buffers, k rows
        bwd = max(bwd, weight + 2 * w * n * h + w * k * h)     # of it in the hidden dtype
    return {"forward": fwd, "backward": bwd, "last": last}


def _allocated(dtype: str, hidden: int, batch: int, vocab: int, lora: bool) -> int:
    """The loss's backward peak over its start (the loss's gradient to the final norm's output
    gradient) from the CPU allocator's own record (torch.profiler's profile_memory), with no
    TorchDispatchMode on: under one autograd sums gradients out of place
    (:func:`test_a_dispatch_mode_sums_gradients_out_of_place`), which a CUDA run does not.
    The checkpoints' CPU generator states (``torch.get_rng_state``, 5056 bytes each; host
    memory on a CUDA run, beside the CUDA generator's) are left out; with ``lora`` the model is
    PEFT's LoRA, lm_head frozen (:func:`_model`)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    profiler = pytest.importorskip("torch.profiler")
    events = pytest.importorskip("torch._C._profiler")
    peft = pytest.importorskip("peft") if lora else None
    import trl_chunked_vendored as trl
    top = _model(torch, transformers, trl, dtype, True, hidden, True, vocab, peft)
    ids = torch.randint(0, vocab, (batch, S))
    begin, end = 123457, 123459                  # marker allocations, odd sizes of their own

    def mark(size):
        torch.empty(size, dtype=torch.uint8)       # allocated and freed at once

    def norm_out(module, args, out):    # the window's end; the backbone's backward not run
        out.register_hook(closing(lambda: mark(end)))

    (top.get_base_model() if lora else top).model.norm.register_forward_hook(norm_out)
    policy = _cuda_policy(torch)
    rng = torch.get_rng_state, torch.set_rng_state
    torch.get_rng_state = lambda: torch.empty(0, dtype=torch.uint8)
    torch.set_rng_state = lambda state: None
    try:
        with profiler.profile(activities=[profiler.ProfilerActivity.CPU],
                              profile_memory=True) as prof:
            with torch.autocast("cpu", dtype=torch.bfloat16):     # as in :func:`_tracked`
                loss = top(input_ids=ids, labels=ids).loss
            loss.register_hook(lambda grad: mark(begin))
            with contextlib.suppress(WindowClosed):
                loss.backward()
    finally:
        torch.get_rng_state, torch.set_rng_state = rng
        del policy
    sizes = []

    def walk(nodes):
        for e in nodes:
            if e.tag == events._EventType.Allocation:
                sizes.append((e.start_time_ns, e.typed[1].alloc_size))
            walk(e.children)

    walk(prof.profiler.kineto_results.experimental_event_tree())
    live, start, peak = 0, None, None
    for _, size in sorted(sizes):
        if size == -begin:
            start = peak = live
        elif size == -end:
            return peak - start
        elif abs(size) not in (begin, end):
            live += size
            peak = live if peak is None else max(peak, live)
    raise AssertionError("the markers were not seen")


def test_a_dispatch_mode_sums_gradients_out_of_place():
    """Why the allocator's record and not MemTracker where a gradient is summed: autograd adds
    a gradient into its input buffer in place (the buffer's tensor reused) unless a
    TorchDispatchMode is on (at::isTensorSubclassLike, torch/csrc/autograd/input_buffer.cpp
    ``accumulate``), as under MemTracker: one more n x h tensor per sum there."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def reused(mode) -> bool:
        x = torch.randn(6, 4, requires_grad=True)
        y, made = x * 1, []
        loss = sum((y[i:i + 2].float() ** 2).sum() for i in range(0, 6, 2))
        for fn in _slices(loss.grad_fn):                # the three slices' backward
            fn.register_hook(lambda grads, outs: made.append(grads[0].data_ptr()) and None)
        summed = []
        y.grad_fn.register_prehook(lambda grads: summed.append(grads[0].data_ptr()) and None)
        with mode:
            loss.backward()
        return summed[0] in made

    assert reused(contextlib.nullcontext()) and not reused(Passing())


def _slices(node, seen=None) -> list:
    """The SliceBackward nodes under ``node``."""
    seen = set() if seen is None else seen
    if node is None or node in seen:
        return []
    seen.add(node)
    own = [node] if node.name() == "SliceBackward0" else []
    return own + [f for nxt, _ in node.next_functions for f in _slices(nxt, seen)]


@pytest.mark.parametrize("autocast, hidden, batch, vocab, frozen", [
    (False, 1024, 6, V, False), (True, 2048, 6, V, False), (False, 1024, 6, V, True),
    (False, 512, 9, 64, False), (True, 512, 9, 64, False), (False, 512, 9, 64, True)])
def test_the_terms_are_the_derivation(autocast, hidden, batch, vocab, frozen):
    want = _by_hand(autocast, hidden, batch, vocab, frozen)
    at = dict(s=S, b=batch, h=hidden, V=vocab)
    run = "fp32_autocast" if autocast else "autocast"
    assert chunked_loss_forward(run, 4 if autocast else 2).evaluate(**at) == want["forward"]
    assert chunked_loss_backward(run, frozen).evaluate(**at) == want["backward"]


def test_a_frozen_head_under_autocast_is_refused():
    with pytest.raises(InvalidValueError, match="16-bit"):
        chunked_loss_backward("fp32_autocast", frozen_head=True)


# Each case names the branch that peaks (by hand, _by_hand): V = 1000 is the tiny Llama's, V =
# 64 few words against long rows, where the scattered gradients peak.  Not the 16-bit matmul's
# branch: the CPU's bf16 matmul allocates a scratch of its own (oneDNN's, 263,808 bytes at
# k = 256, h = 768) that cuBLAS does not per call; the tracker, which sees tensors only,
# measures that branch (test_torchs_tracker_sees_one_chunks_peaks).
@pytest.mark.parametrize("dtype, hidden, batch, vocab, lora", [
    ("bfloat16", 128, 4, V, True),       # frozen head: the recomputed chunk, two chunks
    ("bfloat16", 256, 9, 64, True),      # frozen head: a middle chunk's scatter, five chunks
    ("bfloat16", 256, 9, 64, False),     # full training: the same, with the weight's gradient
    ("float32", 256, 9, 64, False),      # full training under autocast: the same
])
def test_the_allocator_sees_the_backward_peak(dtype, hidden, batch, vocab, lora):
    """The loss's backward peak of TRL's own code from the allocator's record = memsym's term,
    within the loss's 0-d tensors (8 bytes), full training and LoRA (lm_head frozen).  At
    b = 9, s = 128, V = 64, h = 256 a middle chunk's gradient scattered into an n x h tensor
    beside the summed one peaks: 2 w n h + w k h over the weight's gradient, above the chunk's
    own branches, which alone give 1,109,504, 1,142,272 and 1,630,464 bytes where 1,301,500,
    1,334,268 and 2,668,540 are measured (the 16-bit matmul's branch, 192,000 bytes below the
    scatter, stays below it with the CPU matmul's scratch).  MemTracker (a dispatch mode) would
    see one more n x h sum there."""
    measured = _allocated(dtype, hidden, batch, vocab, lora)
    autocast = dtype == "float32"
    want = _by_hand(autocast, hidden, batch, vocab, frozen=lora)["backward"]
    assert abs(measured - want) <= 8, (measured, want)
    term = chunked_loss_backward("fp32_autocast" if autocast else "autocast",
                                 frozen_head=lora).evaluate(s=S, b=batch, h=hidden, V=vocab)
    assert term == want


@pytest.mark.parametrize("checkpointing", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_forward_end_keeps_the_packed_rows_not_the_logits(capsys, tmp_path, dtype,
                                                              checkpointing):
    """nll - chunked_nll at the forward's end, measured = memsym's output-layer activations'
    difference + the 16-bit logits nll's forward returns (memsym's forward transient
    logits_16bit, 2 s b V) - chunked's three scalars, to the byte, with gradient checkpointing
    or without.  memsym's, by hand (tau = s b = 256, n = 254): nll keeps the output layer's
    16-bit input 2 tau h, the fp32 log-softmax 4 tau V (and, under autocast, lm_head's cached
    16-bit weight 2 V h); chunked the packed hidden states w n h (w = 4 under autocast: the
    fp32 residual) and two int64 vectors 16 n."""
    model = tiny_llama(tmp_path, dtype=dtype)
    ours = {loss: json_report(capsys, [*_launch(model, 2, dtype, loss), "--gradient_checkpointing",
                                       str(checkpointing).lower()])["activation_bytes"][
        "output_activations"] for loss in ("nll", "chunked_nll")}
    tau, n, w = 2 * S, 2 * (S - 1), 4 if dtype == "float32" else 2
    cast = 2 * V * H if dtype == "float32" else 0
    assert ours["nll"] - ours["chunked_nll"] == (2 * tau * H + 4 * tau * V + cast - w * n * H
                                                 - 16 * n)
    measured = {loss: _tracked(dtype, loss == "chunked_nll", checkpointing=checkpointing)[
        "fw_end"] for loss in ours}
    assert measured["nll"] - measured["chunked_nll"] == (
        ours["nll"] - ours["chunked_nll"] + 2 * tau * V - 12)


# The weight's branch of the backward's peak (16-bit: the recomputed matmul beside the fp32
# copies, from h > (12kV + 5k) / (4V + 4k); autocast over fp32 weights: the weight's fp32
# gradient, from h > (14kV + 5k) / (6V + 2k), and below the scatter while n < 2V) is reached
# at the smallest width by few words: V = 64, h = 256 (above 155; 129,792 bytes over the
# entropy's branch, 260,864 frozen) and V = 512, h = 576 (above 512; 228,096 bytes), where
# V = 1000 needed h = 768 (the backbone's matmuls, most of the time, grow as h^2); b = 3 gives
# two chunks, b = 5 three.  Under autocast with two chunks the measured backward peak is below
# memsym's term by about 4nh (the hidden states' fp32 gradient: 1,173,488 bytes at n = 381,
# h = 768): memsym's term is an upper bound there, exact from three chunks.  The tracker sums
# no gradient before these peaks (a dispatch mode sums out of place: :func:`_allocated`).
@pytest.mark.parametrize("dtype, hidden, batch, vocab, checkpointing, lora", [
    ("bfloat16", 128, 4, V, True, False),   # the recomputed chunk's logits, fp32 log_p, exp, ...
    ("bfloat16", 256, 3, 64, True, False),  # the recomputed matmul: fp32 copies beside the casts
    ("bfloat16", 256, 3, 64, False, False),
    ("bfloat16", 128, 4, V, True, True),    # LoRA (lm_head frozen): the same, no weight gradient
    ("bfloat16", 256, 3, 64, True, True),
    ("float32", 128, 4, V, True, False),    # fp32 weights: the chunk's 16-bit logits, fp32 log_p
    # fp32 weights: the weight's fp32 gradient added out of place
    pytest.param("float32", 576, 5, 512, True, False, marks=pytest.mark.slow),
    pytest.param("float32", 576, 5, 512, False, False, marks=pytest.mark.slow),
])
def test_torchs_tracker_sees_one_chunks_peaks(capsys, tmp_path, dtype, hidden, batch, vocab,
                                              checkpointing, lora):
    """The loss's forward and backward peaks of TRL's own code, measured = memsym's terms
    within the loss's scalars, with gradient checkpointing or without.  The backward's peak
    over its start is the terms' to 8 bytes (two of the loss's 0-d fp32 tensors, either way).
    The forward's is over the backbone's end (its output already there) and holds too the
    packed rows (made first), the bool ``valid`` mask (n bytes, which memsym leaves out) and
    the batch's int64 labels (8 b s: the caller's tensor, which the tracker first sees through
    TRL's ``labels[..., 1:]``): the rest is the loop's 0-d tensors (the sums of loss, correct
    tokens and entropy, and nll_loss's total weight), 0 to 64 bytes.  Under autocast the
    loss's ops run in CUDA's dtypes (:func:`_cuda_policy`).  And memsym's job: its
    loss-backward phase less its forward phase is the terms' difference (less, under autocast
    with gradient checkpointing, the layers' cached weight casts the forward ends with, 2 L W:
    autocast's cache, freed at the forward's end; without, autograd keeps them for the
    layers' backward; under PEFT, with gradient checkpointing, the adapters' casts the same
    cache holds, memsym.terms.peft_lora.peft_cached_casts)."""
    measured = _tracked(dtype, True, hidden, batch, checkpointing, lora, vocab)
    autocast, n = dtype == "float32", batch * (S - 1)
    want = _by_hand(autocast, hidden, batch, vocab, frozen=lora)
    kept = (4 if autocast else 2) * n * hidden + 16 * n      # the packed rows, made first
    assert abs(measured["bw_loss"] - want["backward"]) <= 8, measured
    extra = measured["fw_loss"] - (kept + n + 8 * batch * S + want["forward"] - want["last"])
    assert 0 <= extra <= 64, measured    # the loop's scalars
    folder = tiny_llama(tmp_path, hidden_size=hidden, num_attention_heads=hidden // 64,
                        num_key_value_heads=hidden // 64, vocab_size=vocab)
    phases = json_report(capsys, [*_launch(folder, batch, dtype, "chunked_nll"),
                                  "--gradient_checkpointing", str(checkpointing).lower(),
                                  *(["--use_peft"] if lora else [])])["phases"]
    casts = 2 * LAYERS * (4 * hidden * hidden + 3 * hidden * F) \
        if autocast and checkpointing else 0
    if lora and checkpointing:    # and PEFT's fp32 adapters' casts (TRL's r = 16, q and v)
        casts += LAYERS * 2 * 2 * 16 * (hidden + hidden)
    assert phases["loss-backward"] - phases["forward"] == (
        want["backward"] - want["forward"] - casts)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_one_chunk_is_bounded_from_above(dtype):
    """b (s - 1) <= 256: one chunk, no gradients of chunks done before it; memsym's backward
    term (which counts them) bounds the measured peak from above, by at least their bytes."""
    hidden, batch = 768, 2                                   # n = 254: one chunk of 254 rows
    autocast, n = dtype == "float32", batch * (S - 1)
    done = (4 if autocast else 2) * (V * hidden + n * hidden)
    measured = _tracked(dtype, True, hidden, batch)["bw_loss"]
    assert measured <= _by_hand(autocast, hidden, batch)["backward"] - done, measured


TRL_MIRROR = "/work/.mirror/huggingface+trl/repo"


@pytest.mark.skipif(not os.path.isdir(TRL_MIRROR), reason="no TRL git directory here")
def test_the_vendored_code_is_trls_own():
    """tests/trl_chunked_vendored.py from ``_CHUNKED_LM_HEAD_CHUNK_SIZE`` on is
    sft_trainer.py:86-378 at f2cd57710a, line for line."""
    source = subprocess.run(["git", "-C", TRL_MIRROR, "show", "f2cd57710ae345ea6428ae95363267fc"
                             "f38a3dc8:trl/trainer/sft_trainer.py"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    ours = (pathlib.Path(__file__).parent / "trl_chunked_vendored.py").read_text(
        encoding="utf-8").splitlines()
    start = ours.index("_CHUNKED_LM_HEAD_CHUNK_SIZE = 256")
    assert ours[start:] == source[85:378]


@pytest.mark.parametrize("batch", [4, 6])
def test_trl_use_peft_counts_the_frozen_heads_backward(capsys, tmp_path, batch):
    """``trl sft --use_peft`` under chunked_nll (TRL's default): TRL patches the PEFT model's
    base model, its lm_head frozen (sft_trainer.py:1306-1319).  memsym's loss-backward phase
    less its forward phase is the frozen head's terms' difference, and the backward's peak is
    what the allocator sees running TRL's code on PEFT's LoRA (q_proj, v_proj), to 8 bytes;
    the chunk's forward is full training's (the weight's fp32 copy is made either way), the
    forward phase holds beside it autocast's cache of the adapters' 16-bit casts
    (tests/test_peft_output_layer.py measures them)."""
    want = _by_hand(False, H, batch, frozen=True)
    assert abs(_allocated("bfloat16", H, batch, V, lora=True) - want["backward"]) <= 8
    folder = tiny_llama(tmp_path, dtype="bfloat16")
    rep = json_report(capsys, [*_launch(folder, batch, "bfloat16", "chunked_nll"), "--use_peft"])
    assert rep["training"]["chunked_loss"] is True
    casts = LAYERS * 2 * 2 * 16 * (H + H)    # the adapters' cached casts: TRL's r = 16, q, v
    assert rep["phases"]["loss-backward"] - rep["phases"]["forward"] == (
        want["backward"] - want["forward"] - casts)
