"""What torchao's MXFP8 linear keeps for its backward, alone and under torchtitan's per-op SAC.

The B200 MXFP8 rows of ``formulas/measured_memory.toml`` (torchtitan 6fc499f, torchao
0.13.0+gite4e681be, per-op SAC, FSDP2) are priced as bf16 (``tools.measured.job``): this
file checks that on CPU with a port of the autograd function the run used.

torchao e4e681be6 ``torchao/prototype/mx_formats/mx_linear.py``:

* ``mx_mm.forward`` (lines 104-147) saves the high-precision input and weight
  (``ctx.save_for_backward(input_hp, weight_hp)``, line 117), casts both along dim 0 to MX
  (``MXTensor.to_mx``: e4m3 elements, one e8m0 scale per 32 elements, lines 130-143) and
  multiplies the two MX tensors (``torch.mm``, line 144); the casts are not saved;
* ``mx_mm.backward`` (lines 149-241) re-casts the saved bf16 input along dim 1 for the weight
  gradient and the weight along dim 1 for the input gradient: nothing of the forward's casts
  is reused, and the weight cast is made anew in each pass (no cache).
  torchao 36027d82d (``torchao/prototype/moe_training/mxfp8_linear.py`` lines 83-142, the
  ``MXFP8Linear`` torchtitan b5bcd76c6 imports, ``components/quantization/mx.py:20-23``)
  keeps the same ``ctx.save_for_backward(input_hp, weight_hp)`` (line 108).

Under torchtitan's per-op SAC (6fc499f ``models/llama3/infra/parallelize.py:234-310``:
``_save_list`` of ``aten.mm``, the flash and efficient SDPA kernels, reduce-scatter and
``aten.max``; every second mm recomputed) the checkpoint drops what ``mx_mm`` saves and keeps
what the policy marks: PyTorch hands an op to the active dispatch mode before a tensor
subclass's ``__torch_dispatch__``, so SAC's caching mode sees ``aten.mm`` on the two MX
tensors, counts it as the bf16 linear's mm is counted and caches its bf16 output; the casts
(``abs``, ``amax``, the float8 conversion) are recomputed.  An MXFP8 block therefore keeps
exactly the bytes a bf16 block keeps, which is what memsym prices (the measured rows agree:
33.88 GiB MXFP8 against 33.71 GiB bf16, torchtitan ``mxfp8.md`` Dense Models table).
"""

import pytest

torch = pytest.importorskip("torch")

import framework_ports as port  # noqa: E402

pytestmark = pytest.mark.torch

aten = torch.ops.aten
#: tokens, model width, FFN width (every width distinct, each a multiple of the 32-element block)
TAU, K, FF = 128, 64, 160
BLOCK = 32                      # torchao MXLinearConfig.block_size
#: the mm calls the MX subclass itself ran (SAC's mode saw each first)
MX_MMS = []
E4M3_MAX_POW2 = 8               # torchao mx_formats/constants.py F8E4M3_MAX_POW2


class _MX(torch.Tensor):
    """A port of torchao's ``MXTensor`` reduced to what ``mx_mm`` calls: e4m3 elements and one
    e8m0 scale per 32 elements of a row (``to_mx``), ``t`` and ``mm`` (dequantize, multiply in
    the high-precision dtype: the emulated GEMM of ``MXGemmKernelChoice.EMULATED``)."""

    @staticmethod
    def __new__(cls, data, scale, hp_dtype, transposed=False):
        shape = data.shape[::-1] if transposed else data.shape
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=hp_dtype, device=data.device)

    def __init__(self, data, scale, hp_dtype, transposed=False):
        self.data_lp, self.scale, self.hp_dtype, self.transposed = data, scale, hp_dtype, transposed

    def dequant(self):
        rows, cols = self.data_lp.shape
        blocks = self.data_lp.float().reshape(rows, cols // BLOCK, BLOCK)
        pow2 = torch.exp2(self.scale.float().reshape(rows, cols // BLOCK, 1) - 127)
        out = (blocks * pow2).reshape(rows, cols).to(self.hp_dtype)
        return out.t() if self.transposed else out

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is aten.t.default:
            (a,) = args
            return _MX(a.data_lp, a.scale, a.hp_dtype, not a.transposed)
        if func is aten.mm.default:
            a, b = args
            MX_MMS.append(func)
            return torch.mm(a.dequant(), b.dequant())
        raise NotImplementedError(func)


def _to_mx(x):
    # torchao mx_tensor.py to_mx, FLOOR scaling: the block amax's power of two less the e4m3 max
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // BLOCK, BLOCK)
    amax = torch.amax(torch.abs(blocks), dim=2, keepdim=True).float()
    exp = torch.floor(torch.log2(amax.clamp(min=2.0 ** -126))) - E4M3_MAX_POW2
    data = (blocks.float() / torch.exp2(exp)).clamp(-448, 448).to(torch.float8_e4m3fn)
    scale = (exp + 127).to(torch.uint8).reshape(rows, cols // BLOCK)
    return _MX(data.reshape(rows, cols), scale, x.dtype)


class _MxMm(torch.autograd.Function):
    """torchao e4e681be6 ``mx_mm`` (mx_linear.py:94-241), dim-1 casts through ``to_mx`` of the
    transposed copy (the ``MXFP8Dim1CastKernelChoice.TORCH`` branch, lines 185-193, 210-237)."""

    @staticmethod
    def forward(ctx, input_hp, weight_hp):
        ctx.save_for_backward(input_hp, weight_hp)
        shape = input_hp.shape
        input_r = input_hp.reshape(-1, shape[-1])
        output = torch.mm(_to_mx(input_r), _to_mx(weight_hp).t())
        return output.reshape(*shape[:-1], output.shape[-1])

    @staticmethod
    def backward(ctx, grad_output_hp):
        input_hp, weight_hp = ctx.saved_tensors
        g = grad_output_hp.reshape(-1, grad_output_hp.shape[-1])
        x = input_hp.reshape(-1, input_hp.shape[-1])
        w_dim1 = _to_mx(weight_hp.t().contiguous())
        grad_input = torch.mm(_to_mx(g), w_dim1.t()).reshape(*input_hp.shape)
        g_dim1 = _to_mx(g.t().contiguous())
        grad_weight = torch.mm(g_dim1, _to_mx(x.t().contiguous()).t())
        return grad_input, grad_weight


def _mx_linear(x, w):
    return _MxMm.apply(x, w)


def _bf16_linear(x, w):
    return torch.nn.functional.linear(x, w)


def _weights():
    torch.manual_seed(0)
    return [torch.randn(o, i, dtype=torch.bfloat16, requires_grad=True)
            for o, i in ((FF, K), (FF, K), (K, FF))]              # w1, w3, w2


def _ffn(linear, w1, w3, w2):
    # torchtitan FeedForward: w2(silu(w1(x)) * w3(x)); mm 1 (w1) and 3 (w2) saved, 2 recomputed
    return lambda x: linear(torch.nn.functional.silu(linear(x, w1)) * linear(x, w3), w2)


def _tensors(entry):
    # SAC's cache per op: a list (torch 2.4-2.9) or a dict by call index (2.13) of outputs,
    # each wrapped in _VersionWrapper (.val) from 2.5; recomputed calls hold a sentinel
    if isinstance(entry, dict):
        entry = list(entry.values())
    if isinstance(entry, (list, tuple)):
        return [t for e in entry for t in _tensors(e)]
    entry = getattr(entry, "val", entry)
    return [entry] if isinstance(entry, torch.Tensor) else []


def _sac_cache(linear):
    """Run the SwiGLU FFN under torch's non-reentrant checkpoint with torchtitan 6fc499f's
    per-op policy; return what SAC's caching mode holds after the forward: [(op, dtype, numel)]."""
    from torch.utils.checkpoint import checkpoint

    save = (aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default, aten.max.default)
    contexts = []
    inner = port.torchtitan_op_sac_context(save)

    def context_fn():
        contexts.append(inner())
        return contexts[-1]

    ws = _weights()
    x = torch.randn(TAU, K, dtype=torch.bfloat16, requires_grad=True)
    out = checkpoint(_ffn(linear, *ws), x, use_reentrant=False, context_fn=context_fn)
    (forward_mode, _), = contexts
    cached = [(op, t.dtype, t.numel()) for op, outs in forward_mode.storage.items()
              for t in _tensors(outs)]
    out.float().sum().backward()               # the recompute reads the cache: backward runs
    assert all(w.grad is not None for w in ws) and x.grad is not None
    return cached


def test_mx_mm_saves_the_bf16_input_and_the_weight_only():
    """Without checkpointing: the port saves its bf16 input (2 tau k bytes) and the weight
    parameter itself; no e4m3 data or e8m0 scales of either orientation."""
    (w, *_) = _weights()
    x = torch.randn(TAU, K, dtype=torch.bfloat16, requires_grad=True)
    dtypes = []

    def pack(t):
        dtypes.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _mx_linear(x, w)
    assert dtypes == [torch.bfloat16, torch.bfloat16]
    # the bytes beyond the parameter: the input, 128 x 64 x 2 = 16,384, as nn.Linear keeps
    assert port.saved_storage_bytes(lambda: _mx_linear(x, w), own=[w]) == 128 * 64 * 2 == 16384
    assert port.saved_storage_bytes(lambda: _bf16_linear(x, w), own=[w]) == 16384


def test_op_sac_caches_the_same_bf16_mm_outputs_for_mx_and_bf16_linears():
    """Under torchtitan's per-op SAC the MX FFN's cache is the bf16 FFN's: the bf16 outputs of
    mm 1 (w1: tau x FF) and mm 3 (w2: tau x K), 2 (128 x 160 + 128 x 64) = 57,344 bytes."""
    MX_MMS.clear()
    mx = _sac_cache(_mx_linear)
    # forward 3, recompute of mm 2 and the backward's 2 per linear: the MX GEMMs did run
    assert len(MX_MMS) == 3 + 1 + 2 * 3
    bf16 = _sac_cache(_bf16_linear)
    assert mx == bf16 == [(aten.mm.default, torch.bfloat16, TAU * FF),
                          (aten.mm.default, torch.bfloat16, TAU * K)]
    assert sum(2 * n for _, _, n in mx) == 2 * (128 * 160 + 128 * 64) == 57344


def test_measured_mxfp8_rows_are_priced_as_the_bf16_row():
    # the same job but the linears' recipe: SAC keeps the same bytes (above), so memsym's
    # allocated bytes and total for the three B200 MXFP8 rows equal the bf16 row's
    from tools.measured import predict

    base = predict("torchtitan.mxfp8.bf16")
    for pid in ("torchtitan.mxfp8.mxfp8-cublas", "torchtitan.mxfp8.mxfp8-cublas-rceil"):
        pred = predict(pid)
        assert (pred.allocated, pred.total) == (base.allocated, base.total)
