"""Transient terms: by hand, and the cross-entropy measured on a literal port of Megatron's code.

The port is Megatron-core's ``core/tensor_parallel/cross_entropy.py`` forward at TP = 1 (the
all-reduces are identities there), run on CPU under a dispatch mode that tracks the bytes of
every live tensor, so the peak and the saved tensors are measured, not restated.
"""

import weakref

import pytest
import sympy as sp

from memsym.symbols import N_ll, b_hp, b_r, b_u, d, n_ag
from memsym.terms import transients as tr
from memsym.terms.activations import output_activations


def test_fsdp2_transients_by_hand():
    # one 1e6-parameter block, 2 groups gathered in bf16, fp32 reduce-scatter over 4:
    # 2 * 1e6 * 2 + 1e6 * 2 (unsharded grads) + 1e6 * 4 * (1 + 1/4)
    total = tr.fsdp2_transients()
    assert total.evaluate({N_ll: 10**6, n_ag: 2, b_u: 2, b_r: 4, d: 4}) == 4 * 10**6 + 2 * 10**6 + 5 * 10**6


def test_defaults_are_the_documented_ones():
    assert tr.DEFAULTS[tr.S_nccl] == 4194304          # NCCL_BUFFSIZE default
    assert tr.DEFAULTS[tr.N_bkt] == 500_000_000       # DeepSpeed reduce_bucket_size
    assert tr.DEFAULTS[tr.N_pf] == 50_000_000         # stage3_prefetch_bucket_size
    # DeepSpeed IPG with overlap_comm: two 5e8-element bf16 buffers = 2 GB
    assert tr.deepspeed_ipg_buckets().evaluate({**tr.DEFAULTS, tr.n_bkt: 2, b_hp: 2}) == 2 * 10**9
    # Megatron's bucket rule max(4e7, 1e6 dp): no extra memory, the size of NCCL's messages
    assert tr.megatron_buckets(40) == 40 * 10**6 and tr.megatron_buckets(128) == 128 * 10**6


def test_reshard_rules():
    assert tr.fsdp2_reshards_after_forward("default", pp_enabled=True) is False   # torchtitan + PP
    assert tr.fsdp2_reshards_after_forward("always", pp_enabled=True) is True
    assert tr.fsdp2_reshards_after_forward(None, torchtitan=False) is True
    assert tr.fsdp2_reshards_after_forward(None, is_root=True, torchtitan=False) is False
    from memsym.errors import InvalidValueError
    with pytest.raises(InvalidValueError):
        tr.fsdp2_reshards_after_forward("sometimes")


def _torch():
    return pytest.importorskip("torch")


class _LiveBytes:
    """Tracks the bytes of tensors created under a TorchDispatchMode (storage-shared counted once)."""

    def __init__(self):
        self.live = self.peak = 0
        self.refs = {}

    def add(self, t):
        key = t.untyped_storage().data_ptr()
        if key not in self.refs:
            self.refs[key] = [0, t.untyped_storage().nbytes()]
            self.live += self.refs[key][1]
            self.peak = max(self.peak, self.live)
        self.refs[key][0] += 1
        weakref.finalize(t, self._drop, key)

    def _drop(self, key):
        entry = self.refs[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self.refs[key]

    def mode(self):
        """A TorchDispatchMode under which every tensor an op returns is tracked here."""
        torch = _torch()
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in (out if isinstance(out, (tuple, list)) else (out,)):
                    if isinstance(t, torch.Tensor):
                        tracker.add(t)
                return out

        return Mode()


class _VocabParallelCrossEntropy:
    """Literal port of Megatron-core's VocabParallelCrossEntropy static methods (TP = 1),
    function by function, so that locals die where Megatron's do."""

    @staticmethod
    def calculate_logits_max(vocab_parallel_logits):
        torch = _torch()
        vocab_parallel_logits = vocab_parallel_logits.float()
        logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
        return vocab_parallel_logits, logits_max

    @staticmethod
    def calculate_predicted_logits(vocab_parallel_logits, target, logits_max, vocab_start_index,
                                   vocab_end_index):
        torch = _torch()
        vocab_parallel_logits -= logits_max.unsqueeze(dim=-1)
        target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
        masked_target = target.clone() - vocab_start_index
        masked_target[target_mask] = 0
        partition_vocab_size = vocab_parallel_logits.size()[-1]
        logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
        predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
        predicted_logits_1d = predicted_logits_1d.clone().contiguous()
        predicted_logits = predicted_logits_1d.view_as(target)
        predicted_logits[target_mask] = 0.0
        exp_logits = vocab_parallel_logits
        torch.exp(vocab_parallel_logits, out=exp_logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        return target_mask, masked_target_1d, predicted_logits, sum_exp_logits, exp_logits

    @staticmethod
    def calculate_cross_entropy_loss(exp_logits, predicted_logits, sum_exp_logits):
        torch = _torch()
        loss = torch.log(sum_exp_logits) - predicted_logits
        exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))
        return exp_logits, loss


def _megatron_ce_forward(vocab_parallel_logits, target):
    """_VocabParallelCrossEntropy.forward at TP = 1 (the all-reduces are identities)."""
    vpce = _VocabParallelCrossEntropy
    vocab_parallel_logits, logits_max = vpce.calculate_logits_max(vocab_parallel_logits)
    partition_vocab_size = vocab_parallel_logits.size()[-1]
    vocab_start_index, vocab_end_index = 0, partition_vocab_size
    (target_mask, masked_target_1d, predicted_logits, sum_exp_logits, exp_logits) = (
        vpce.calculate_predicted_logits(vocab_parallel_logits, target, logits_max,
                                        vocab_start_index, vocab_end_index))
    exp_logits, loss = vpce.calculate_cross_entropy_loss(exp_logits, predicted_logits, sum_exp_logits)
    saved = (exp_logits, target_mask, masked_target_1d)                          # ctx.save_for_backward
    return loss, saved


def _measure(s_, b_, vocab):
    torch = _torch()
    tracker = _LiveBytes()
    torch.manual_seed(0)
    logits = torch.randn(s_, b_, vocab, dtype=torch.bfloat16)   # the output layer's 16-bit logits
    target = torch.randint(0, vocab, (s_, b_))
    with tracker.mode():
        loss, saved = _megatron_ce_forward(logits, target)
    peak = tracker.peak
    saved_bytes = sum(t.untyped_storage().nbytes() for t in saved)
    ref = loss.float().mean()
    expected = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), target.view(-1))
    assert torch.allclose(ref, expected, atol=1e-4)   # the port computes cross-entropy
    return peak, saved_bytes


@pytest.mark.torch
def test_cross_entropy_peak_and_saved_tensors_measured():
    s_, b_ = 32, 2
    tau = s_ * b_
    peaks, saved = {}, {}
    for vocab in (256, 512):
        peaks[vocab], saved[vocab] = _measure(s_, b_, vocab)
        # saved for backward: fp32 softmax (activations' 4 tau V / t) + bool mask + int64 target
        logits_term = output_activations()["logits"].evaluate(s=s_, b=b_, c=1, t=1, V=vocab)
        assert saved[vocab] == logits_term + tau * (1 + 8)
    # the vocabulary-proportional part of the peak is exactly the one fp32 copy (4 tau V):
    # exp, subtract and divide are in place
    assert peaks[512] - peaks[256] == 4 * tau * (512 - 256)
    # the per-token rest of the peak (beyond 4 tau V) against memsym's 29 tau
    ce = tr.cross_entropy_transient()
    per_token = sp.Rational(peaks[256] - 4 * tau * 256, tau)
    assert per_token == ce["ce_per_token"].evaluate(s=1, b=1, c=1)
    # the bf16 logits themselves (created before, alive throughout) are memsym's logits_16bit
    assert ce["logits_16bit"].evaluate(s=s_, b=b_, c=1, t=1, V=256) == 2 * tau * 256


def test_zero3_transients_by_hand():
    from memsym.symbols import N_pf
    # 1e8-parameter largest layer: 16-bit params + grads (4 B, DeepSpeed's estimator) + 5e7 x 2
    z = tr.zero3_transients(persistent_params=10**6)
    vals = {N_ll: 10**8, N_pf: 5 * 10**7, b_u: 2, d: 8}
    assert z["gathered_layer"].evaluate(vals) == 4 * 10**8
    assert z["prefetch"].evaluate(vals) == 10**8
    assert z["persistent"].evaluate(vals) == 2 * 10**6 * 7 // 8   # whole on every rank, less its shard


@pytest.mark.torch
def test_torch_cross_entropy_peak_measured():
    """torchtitan's loss, F.cross_entropy(pred.flatten(0, 1).float(), labels), run on CPU under
    the live-bytes tracker: beyond the bf16 pred (created before), the peak holds the fp32
    copy and log_softmax's fp32 output (the saved 4 tau V of output_activations) at once."""
    torch = _torch()
    b_, s_ = 2, 32
    tau = s_ * b_
    peaks = {}
    for vocab in (256, 512):
        tracker = _LiveBytes()
        pred = torch.randn(b_, s_, vocab, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, vocab, (b_, s_))
        with tracker.mode():
            loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
        peaks[vocab] = tracker.peak
        del loss
    # the vocabulary-proportional peak: fp32 copy + fp32 log_softmax output, 8 tau V
    assert peaks[512] - peaks[256] == 8 * tau * (512 - 256)
    ce = tr.torch_cross_entropy_transient()
    saved = output_activations()["logits"].evaluate(s=s_, b=b_, c=1, t=1, V=256)
    assert ce["logits_fp32_copy"].evaluate(s=s_, b=b_, c=1, t=1, V=256) + saved == 8 * tau * 256


# --- the loss's forward and backward, measured at the allocator (tests/live_memory.py) -----
_B, _S, _H = 2, 64, 8      # batch, sequence, hidden of the toy output layer


def _loss_peaks(vocab, loss_fn, shard=None):
    """(forward peak, saved, backward peak) [bytes] of ``loss_fn`` on an output layer's
    16-bit logits, the train step's order: pred = h W^T; loss; del pred; loss.backward()."""
    torch = _torch()
    from live_memory import Phases

    torch.manual_seed(0)
    h = torch.randn(_B, _S, _H, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(vocab // (shard[1] if shard else 1), _H, dtype=torch.bfloat16,
                    requires_grad=True)
    labels = torch.randint(0, vocab, (_B, _S))
    ph = Phases()
    with ph.run():
        with ph.phase("forward"):
            pred = h @ w.t()
            if shard:
                from torch.distributed.tensor import DTensor, Shard

                pred = DTensor.from_local(pred, shard[0], [Shard(-1)])
            loss = loss_fn(pred, labels)
            del pred
        with ph.phase("backward"):
            loss.backward()
    (_, fwd, saved), (_, bwd, _) = ph.result["forward"], ph.result["backward"]
    return fwd, saved, bwd


def _torchtitan_loss(pred, labels):
    torch = _torch()
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def _per_logit(peaks_small, peaks_large, vocab_step, shards=1):
    # the vocabulary-proportional bytes per local logit: two vocabularies, the difference
    tau = _B * _S
    return tuple(sp.Rational(b_ - a_, tau * vocab_step // shards)
                 for a_, b_ in zip(peaks_small, peaks_large))


@pytest.mark.torch
def test_torch_cross_entropy_backward_peak_measured():
    """torchtitan's eager loss: 10 bytes per logit at the forward's peak (bf16 pred, fp32
    copy, fp32 log_softmax), 4 saved, 12 at the backward's (the saved 4, nll_loss's fp32
    gradient, log_softmax's fp32 input gradient): memsym's forward and loss-backward Terms."""
    fwd, saved, bwd = _per_logit(_loss_peaks(2048, _torchtitan_loss),
                                 _loss_peaks(4096, _torchtitan_loss), 2048)
    one = dict(s=1, b=1, c=1, t=1, V=1)
    kept = output_activations()["logits"].evaluate(one)
    assert saved == kept == 4
    assert fwd == kept + tr.torch_cross_entropy_transient().evaluate(one) == 10
    assert bwd == kept + tr.torch_cross_entropy_backward().evaluate(one) == 12


def _group_worker(rank, world, port, bodies, queue):
    """gloo_group worker: the module functions named in ``bodies`` run in turn on one
    initialised group (one spawn for all: a spawned process imports torch, seconds), as
    ``{body: result}``."""
    import gc
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        out = {}
        for body in bodies:
            out[body] = globals()[body](rank, world)
            gc.collect()
        queue.put((rank, out))
        dist.destroy_process_group()
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put((rank, repr(exc)))


#: The bodies run on the 2-process group, in this order (the loss-parallel peaks first, as
#: when they had the group to themselves).
_GROUP_BODIES = ("_loss_parallel_body", "_colwise_body")


@pytest.fixture(scope="module")
def gloo_pair():
    """body name -> rank -> result, every _GROUP_BODIES body run by one 2-process spawn."""
    _torch()
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():   # pragma: no cover
        pytest.skip("torch.distributed with gloo is needed")
    from gloo_group import run_group

    results = run_group(_group_worker, 2, _GROUP_BODIES)
    return {body: {rank: out[body] for rank, out in results.items()} for body in _GROUP_BODIES}


def _loss_parallel_body(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    mesh = init_device_mesh("cpu", (world,))
    out = []
    for vocab in (2048, 4096):
        with loss_parallel():
            out.append(_loss_peaks(vocab, _torchtitan_loss, shard=(mesh, world)))
    return out


@pytest.mark.torch
def test_loss_parallel_peaks_measured(gloo_pair):
    """torchtitan with TP: the logits stay vocab-sharded and the loss runs in torch's
    ``loss_parallel()``.  On a gloo group of 2, per local logit: 14 bytes at the forward's
    peak (bf16 pred, fp32 input, shifted logits, exp or result), 4 saved (the fp32
    log-softmax), 16 at the backward's: memsym's loss-parallel Terms."""
    results = gloo_pair["_loss_parallel_body"]
    for rank in (0, 1):
        measured = _per_logit(*results[rank], 2048, shards=2)
        # gloo's threads free the per-token all-reduce buffers (4 tau bytes) at a time of their
        # own: a whole number of logit-sized buffers, give or take less than one eighth of one
        fwd, saved, bwd = (round(x) for x in measured)
        assert all(abs(x - round(x)) < sp.Rational(1, 8) for x in measured)
        one = dict(s=1, b=1, c=1, t=1, V=1)
        assert saved == output_activations()["logits"].evaluate(one) == 4
        assert fwd == 4 + tr.loss_parallel_transient().evaluate(one) == 14
        assert bwd == 4 + tr.loss_parallel_backward().evaluate(one) == 16


def _colwise_body(rank, world):
    torch = _torch()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, SequenceParallel,
                                                   parallelize_module)

    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    top = torch.nn.Module()
    top.norm = torch.nn.RMSNorm(_H)
    top.output = torch.nn.Linear(_H, 64, bias=False)
    top = top.to(torch.bfloat16)
    # torchtitan's plan for the last layers under TP with loss parallel
    parallelize_module(top, mesh, {
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                  use_local_output=False)})
    x = torch.randn(_B, _S // world, _H, dtype=torch.bfloat16, requires_grad=True)
    saved = {}

    from torch.distributed.tensor import DTensor

    def pack(t_):
        local = t_.to_local() if isinstance(t_, DTensor) else t_
        saved[local.untyped_storage().data_ptr()] = (tuple(local.shape),
                                                     local.untyped_storage().nbytes())
        return t_

    y = top.norm(x)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t_: t_):
        top.output(y)
    weight = top.output.weight.to_local()
    saved.pop(weight.untyped_storage().data_ptr(), None)
    return sorted(saved.values())


@pytest.mark.torch
def test_colwise_parallel_saves_the_gathered_input(gloo_pair):
    """torchtitan's output layer under TP is torch's ColwiseParallel with Shard(1) inputs: the
    final norm's output is all-gathered over the sequence and the local matmul saves the
    gathered input, 2 tau h bytes (Megatron saves its shard, 2 tau h / t)."""
    results = gloo_pair["_colwise_body"]
    vals = dict(s=_S, b=_B, c=1, t=2, h=_H)
    gathered = output_activations(sequence_parallel=True, gathered_output_input=True)
    shard = output_activations(sequence_parallel=True)
    for got in results.values():
        # one saved input: every token of the sequence (not the rank's half), bf16
        assert got == [((_B * _S, _H), 2 * _B * _S * _H)], got
        assert got[0][1] == gathered["output_input"].evaluate(vals)
        assert shard["output_input"].evaluate(vals) == got[0][1] // 2


class _TorchtitanRMSNorm:
    """Literal port of torchtitan's RMSNorm (torchtitan/models/norms.py at 9dec370)."""

    def __init__(self, dim, eps=1e-6):
        torch = _torch()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim, dtype=torch.bfloat16))

    def _norm(self, x):
        torch = _torch()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def __call__(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


@pytest.mark.torch
def test_torchtitan_final_rmsnorm_saved_tensors():
    """torchtitan's eager fp32 RMSNorm keeps its fp32 input copy, the rstd and the 16-bit
    normalised output (not its 16-bit input): memsym's fp32_norm final-norm terms."""
    torch = _torch()
    norm = _TorchtitanRMSNorm(_H)
    x = torch.randn(_B, _S, _H, dtype=torch.bfloat16, requires_grad=True)
    saved = {}

    def pack(t_):
        if t_ is not norm.weight:
            saved[t_.untyped_storage().data_ptr()] = t_.untyped_storage().nbytes()
        return t_

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t_: t_):
        norm(x)
    assert x.untyped_storage().data_ptr() not in saved
    out = output_activations(norm="rmsnorm", fp32_norm=True)
    vals = dict(s=_S, b=_B, c=1, t=1, h=_H)
    expected = out["final_norm_input"].evaluate(vals) + out["final_norm_statistics"].evaluate(vals)
    assert sum(saved.values()) == expected == (6 * _H + 4) * _S * _B
