"""torchtitan's per-op selective activation checkpointing, run for real on CPU.

A Llama block (wq, wk, wv, SDPA, wo; w1, w3, SiLU-gate, w2) is checkpointed with PyTorch's
``create_selective_checkpoint_contexts`` and torchtitan's ``_custom_policy``
(``torchtitan/distributed/activation_checkpoint.py``: save ``aten.mm`` outputs except every
second one, save SDPA; the port shared with tests/test_op_sac_compile.py,
``framework_ports.torchtitan_op_sac_context``).  The matmul FLOPs its backward runs, counted by a dispatch mode, minus
those of the same block without checkpointing are the recomputed forward: memsym's step time
(``memsym.timing.step``, ``recompute="selective-op"``) prices wk, wo and w3.
"""

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

import framework_ports as port  # noqa: E402

pytestmark = pytest.mark.torch

T, H, KV, F, HEADS = 24, 32, 8, 48, 4      # tokens, hidden, k/v width (GQA), ffn, heads
aten = torch.ops.aten


def _policy():
    # torchtitan b5bcd76c6's save set as it bears on this block (activation_checkpoint.py
    # _get_default_save_ops: mm among the compute-intensive ops, the SDPA kernels; its max,
    # topk, flex and collectives never run here), the CPU flash kernel the one SDPA runs; the
    # shared port of _get_custom_policy (framework_ports.torchtitan_op_sac_context)
    return port.torchtitan_op_sac_context(
        {aten.mm.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
         aten._scaled_dot_product_efficient_attention.default,
         aten._scaled_dot_product_flash_attention.default})


class _MmFlops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func == aten.mm.default:
            (m_, k_), (_, n_) = args[0].shape, args[1].shape
            self.flops += 2 * m_ * k_ * n_
        return func(*args, **(kwargs or {}))


def _block(w, x):
    def norm(y):
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
    hx = norm(x)
    q, k, v = hx @ w["wq"], hx @ w["wk"], hx @ w["wv"]
    rep = HEADS // (KV // (H // HEADS))
    q = q.view(T, HEADS, -1).transpose(0, 1)
    k = k.view(T, -1, H // HEADS).transpose(0, 1).repeat_interleave(rep, 0)
    v = v.view(T, -1, H // HEADS).transpose(0, 1).repeat_interleave(rep, 0)
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + o.transpose(0, 1).reshape(T, H) @ w["wo"]
    hx = norm(x)
    return x + (torch.nn.functional.silu(hx @ w["w1"]) * (hx @ w["w3"])) @ w["w2"]


def _backward_mm_flops(sac: bool) -> int:
    torch.manual_seed(0)
    shapes = {"wq": (H, H), "wk": (H, KV), "wv": (H, KV), "wo": (H, H), "w1": (H, F),
              "w3": (H, F), "w2": (F, H)}
    w = {k: torch.randn(*s_, requires_grad=True) for k, s_ in shapes.items()}
    x = torch.randn(T, H, requires_grad=True)
    out = (checkpoint(_block, w, x, use_reentrant=False, context_fn=_policy()) if sac
           else _block(w, x))
    with _MmFlops() as count:
        out.sum().backward()
    return count.flops


def test_selective_op_reruns_wk_wo_w3():
    extra = _backward_mm_flops(True) - _backward_mm_flops(False)
    # the 2nd, 4th and 6th forward matmuls: wk [T,H]x[H,KV], wo [T,H]x[H,H], w3 [T,H]x[H,F]
    assert extra == 2 * T * H * (KV + H + F)


def test_memsym_prices_the_same_matmuls():
    # memsym's selective-op backward adds exactly those GEMMs' forward time (one layer, one
    # micro-batch: the compute part grows by gemm_time of wk, wo and w3 at these shapes) and
    # the elementwise forward (the memory-bound part grows)
    import numpy as np

    from memsym.hardware import gpu
    from memsym.timing import gemm_time
    from memsym.timing.step import Settings, step_time_grid
    from memsym.model import Architecture

    arch = Architecture(num_layers=1, hidden_size=4096, num_attention_heads=32,
                        num_query_groups=8, ffn_hidden_size=14336, vocab_size=32000,
                        swiglu=True, normalization="RMSNorm", position_embedding_type="rope")
    common = dict(seq_length=4096, micro_batch_size=1, flash_attention=True, dropout=False)
    parts = {rc: step_time_grid(arch, "h100-80gb", m=1, settings=Settings(recompute=rc, **common))
             for rc in ("none", "selective-op")}
    dev = gpu("h100-80gb")
    redo = sum(gemm_time(4096, n, 4096, dev, "bf16") for n in (1024, 4096, 14336))
    extra = float(np.ravel(parts["selective-op"]["compute"])[0] - np.ravel(parts["none"]["compute"])[0])
    assert extra == pytest.approx(redo, rel=1e-12)
    assert np.ravel(parts["selective-op"]["memory"])[0] > np.ravel(parts["none"]["memory"])[0]
