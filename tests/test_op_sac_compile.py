"""torchtitan's per-op selective AC, eager and compiled: what a block keeps after its forward.

A port of torchtitan's Llama block at 9dec370 (``torchtitan/models/llama/model.py``: RMSNorm
in fp32 then ``type_as``, complex RoPE in fp32, ``repeat_kv``, SDPA, SwiGLU ``w2(silu(w1(x)) *
w3(x))``; ``torchtitan/models/norms.py`` ``RMSNorm``) under torch's non-reentrant
``checkpoint`` with a port of torchtitan's policy (``parallelisms/parallelize_llama.py``
``_apply_ac_to_transformer_block``: ``_save_list`` of mm, the SDPA kernels, abs and max; every
second mm recomputed; the CPU flash kernel added, the one SDPA runs here; the port is
``framework_ports.torchtitan_op_sac_context``), run two ways:

* eager (torchtitan without ``training.compile``): torch's ``MemTracker`` under
  ``FakeTensorMode`` counts the activations alive once the forward returns;
* compiled (``apply_compile``: ``torch.compile`` of the checkpointed block): AOTAutograd's
  min-cut partition (the one Inductor uses) splits the joint graph, and the forward graph's
  extra outputs are what the block keeps for its backward.

The eager block keeps the ``w2`` matmul's output in the SAC cache (mm 7, ``MUST_SAVE``) though
no backward reads it; the compiled block does not save it.  memsym's
:func:`memsym.terms.op_sac.op_sac_layer` is checked against both, and against a hand count.
"""

import functools
import gc

import pytest

torch = pytest.importorskip("torch")

from memsym.terms.activations import layer_activations  # noqa: E402

import framework_ports as port  # noqa: E402

pytestmark = pytest.mark.torch

#: batch, sequence, hidden, heads, KV heads, FFN: every width distinct from the others
B, S, H, A, G, FF = 2, 64, 96, 4, 2, 160
DH = H // A
TAU = B * S
aten = torch.ops.aten
nn, F = torch.nn, torch.nn.functional


class _RMSNorm(nn.Module):
    # torchtitan/models/norms.py RMSNorm at 9dec370
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        y = x.float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) \
            * self.weight


def _rope(xq, xk, freqs):
    # apply_rotary_emb: complex64 products, cast back to the input's dtype
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs = freqs[:xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * freqs).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * freqs).flatten(3).type_as(xk))


def _repeat_kv(x, n):
    bs, sl, kv, hd = x.shape
    return x[:, :, :, None, :].expand(bs, sl, kv, n, hd).reshape(bs, sl, kv * n, hd)


class _Block(nn.Module):
    # TransformerBlock: h = x + attention(attention_norm(x)); h + feed_forward(ffn_norm(h))
    def __init__(self):
        super().__init__()
        lin = functools.partial(nn.Linear, bias=False)
        self.wq, self.wk, self.wv, self.wo = lin(H, H), lin(H, G * DH), lin(H, G * DH), lin(H, H)
        self.w1, self.w2, self.w3 = lin(H, FF), lin(FF, H), lin(H, FF)
        self.attention_norm, self.ffn_norm = _RMSNorm(H), _RMSNorm(H)

    def _attention(self, x, freqs):
        bs, sl, _ = x.shape
        xq, xk, xv = (w(x).view(bs, sl, -1, DH) for w in (self.wq, self.wk, self.wv))
        xq, xk = _rope(xq, xk, freqs)
        keys, values = _repeat_kv(xk, A // G), _repeat_kv(xv, A // G)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2),
                                             values.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(bs, sl, -1))

    def forward(self, x, freqs):
        h = x + self._attention(self.attention_norm(x), freqs)
        y = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


def _context_fn():
    # torchtitan 9dec370's _save_list (parallelize_llama.py:214-223, without
    # reduce_scatter_tensor: no collective here), the CPU flash kernel added (the one SDPA runs
    # here); the shared port of the policy (framework_ports.torchtitan_op_sac_context)
    save = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten.abs.default, aten.max.default}
    return port.torchtitan_op_sac_context(save)()


def _sac(block):
    from torch.utils.checkpoint import checkpoint

    return lambda x, freqs: checkpoint(block, x, freqs, use_reentrant=False,
                                       context_fn=_context_fn, preserve_rng_state=False)


def _bf16_block():
    torch.set_default_dtype(torch.bfloat16)
    try:
        return _Block()
    finally:
        torch.set_default_dtype(torch.float32)


def _inputs():
    freqs = torch.polar(torch.ones(S, DH // 2), torch.randn(S, DH // 2))
    return torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True), freqs


def _memsym(compiled):
    # memsym's per-layer bytes at the port's shapes (t = c = 1)
    layer = layer_activations(gated=True, flash=True, recompute="selective-op", compiled=compiled)
    return int(layer.evaluate(s=S, b=B, c=1, t=1, h=H, a=A, g=G, d_h=DH, f=FF))


def _hand(compiled):
    # block input, wq out, wv out, SDPA out + fp32 logsumexp, w1 out; eager also the w2 out
    kept = 2 * TAU * H + 2 * TAU * A * DH + 2 * TAU * G * DH + 2 * TAU * A * DH + 4 * A * TAU \
        + 2 * TAU * FF
    return kept + (0 if compiled else 2 * TAU * H)


def test_op_sac_layer_against_a_hand_count():
    assert _memsym(False) == _hand(False)
    assert _memsym(True) == _hand(True)
    # under sequence parallelism the compiled block also drops w2's reduce-scatter output
    kw = dict(gated=True, flash=True, recompute="selective-op", sequence_parallel=True)
    vals = dict(s=S, b=B, c=1, t=4, h=H, a=A, g=G, d_h=DH, f=FF)
    eager = layer_activations(**kw).evaluate(**vals)
    comp = layer_activations(compiled=True, **kw).evaluate(**vals)
    assert eager - comp == 2 * TAU * H + 2 * TAU * H // 4     # w2 out; its shard (sigma = 4)


def test_eager_sac_keeps_the_w2_output():
    """torch's MemTracker under FakeTensorMode: the activations alive after the eager forward
    (the saved tensors plus the block output, which is the next block's input) are memsym's
    eager count, w2 output included."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        block = _bf16_block()
        x, freqs = _inputs()
        tracker = MemTracker()
        tracker.track_external(block, x, freqs)
        with tracker:
            out = _sac(block)(x, freqs)
            gc.collect()
            (snap,) = tracker.get_tracker_snapshot("current").values()
    acts = {getattr(k, "value", k): v for k, v in snap.items()}["Activation"]
    assert out.shape == (B, S, H)
    assert acts == _hand(False) == _memsym(False)


def test_compiled_sac_saves_no_w2_output():
    """AOTAutograd's min-cut partition of the compiled checkpointed block: its forward returns
    for the backward the block input, wq's and wv's outputs, SDPA's output and logsumexp and
    w1's output (the MUST_SAVE ops the backward reads), not w2's."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    saved = []

    def forward_compiler(gm, _):
        (outputs,) = [n.args[0] for n in gm.graph.nodes if n.op == "output"]
        saved.append(outputs)
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                           partition_fn=functools.partial(min_cut_rematerialization_partition,
                                                          compiler="inductor"))
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = _bf16_block()
    x, freqs = _inputs()
    torch.compile(_sac(block), backend=backend, fullgraph=True)(x, freqs).sum().backward()
    torch._dynamo.reset()
    (outputs,) = saved
    vals = [n.meta["val"] for n in outputs[1:]]          # outputs[0]: the block's output
    params = {tuple(p.shape) for p in block.parameters()}
    acts = [v for v in vals if isinstance(v, torch.Tensor) and v.dtype != torch.complex64
            and tuple(v.shape) not in params]
    assert sum(v.numel() * v.element_size() for v in acts) == _hand(True) == _memsym(True)
    # the w2 output, (tokens, hidden) bf16, is not among them; the block input is
    assert sum(tuple(v.shape) == (TAU, H) for v in acts) == 1          # wq's output only
    assert sum(tuple(v.shape) == (B, S, H) for v in acts) == 1         # the block input


def test_training_memory_drops_one_w2_output_per_layer():
    # Llama-3 8B (32 layers, h = 4096), FSDP2 over 8 GPUs, one 8192-token sequence, per-op SAC:
    # at the end of forward and in the loss's backward every block holds its w2 output eagerly,
    # none compiled; the blocks' backward peaks with fewer blocks still held
    from memsym.errors import InvalidValueError
    from memsym.training import Layout, Training, training_memory

    tau, h, layers = 8192, 4096, 32
    common = dict(seq_length=tau, micro_batch_size=1, sharding="fsdp", recompute="selective-op",
                  dropout=False, framework="torchtitan")
    none = {"workspace": 0, "nccl": 0, "fragmentation": 0}
    eager = training_memory("llama3-8b", Layout(d=8), Training(**common), allowances=none)
    comp = training_memory("llama3-8b", Layout(d=8), Training(compiled_model=True, **common),
                           allowances=none)
    for phase in ("forward", "loss-backward"):
        assert dict(eager.phase_bytes)[phase] - dict(comp.phase_bytes)[phase] == layers * 2 * tau * h
    with pytest.raises(InvalidValueError, match="compiled_model"):
        training_memory("llama3-8b", Layout(d=8), Training(compiled_model="yes", **common))
    # only per-op SAC is changed by it: elsewhere the flag is refused, not ignored
    with pytest.raises(InvalidValueError, match="compiled_model changes only"):
        training_memory("llama3-8b", Layout(d=8),
                        Training(compiled_model=True, **{**common, "recompute": "full"}))
