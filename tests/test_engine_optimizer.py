"""Real PyTorch training steps: bytes of params, grads and optimizer state vs memsym's terms.

A small model is trained one step with torch.optim.AdamW and SGD(momentum), in fp32 and in
bf16 with an fp32 master copy (as mixed-precision code does: bf16 model, fp32 master params
that own the optimizer).  Every tensor's bytes are counted from the tensors themselves
(numel * element_size) and compared exactly with memsym's per-parameter widths.
"""

import pytest

torch = pytest.importorskip("torch")

from memsym import byte_widths, model_state  # noqa: E402
from memsym.terms.framework_state import adam_state_bytes, sgd_state_bytes  # noqa: E402

pytestmark = pytest.mark.torch


def _model(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.GELU(), torch.nn.Linear(20, 6),
                               torch.nn.LayerNorm(6)).to(dtype)


def _nbytes(tensors):
    return sum(x.numel() * x.element_size() for x in tensors)


def _step(model, opt, dtype):
    x = torch.randn(5, 12, dtype=dtype)
    model(x).float().pow(2).mean().backward()


def _state_bytes(opt):
    """moments (tensors with the param's numel) and step scalars, from the optimizer itself."""
    moments = steps = 0
    for state in opt.state.values():
        for key, value in state.items():
            if key == "step":
                steps += value.numel() * value.element_size()
            else:
                moments += value.numel() * value.element_size()
    return moments, steps


@pytest.mark.parametrize("optim", ["adamw", "sgd"])
def test_fp32_training_matches_memsym(optim):
    model = _model(torch.float32)
    n = sum(p.numel() for p in model.parameters())
    params = list(model.parameters())
    opt = (torch.optim.AdamW(params, lr=1e-3) if optim == "adamw"
           else torch.optim.SGD(params, lr=1e-2, momentum=0.9))
    _step(model, opt, torch.float32)
    opt.step()
    weights, grads = _nbytes(params), _nbytes(p.grad for p in params)
    moments, steps = _state_bytes(opt)
    # PyTorch: 4 B weights, 4 B grads, AdamW 2 x 4 B moments (SGD: one 4 B momentum buffer)
    assert (weights, grads) == (4 * n, 4 * n)
    assert moments == (8 if optim == "adamw" else 4) * n
    # step: one 0-d float32 tensor per parameter tensor (AdamW), on the CPU, none for SGD
    assert steps == (4 * len(params) if optim == "adamw" else 0)
    expected = (adam_state_bytes if optim == "adamw" else sgd_state_bytes)([p.numel() for p in params])
    assert (moments, steps) == (expected["moments"], expected["step"])
    # memsym's fp32 DDP model states (zero-paper widths: no master copy for fp32 weights)
    widths = byte_widths("ddp", "fp32", optim, convention="zero-paper")
    total = model_state("ddp", convention="zero-paper").subs(widths)
    assert total.evaluate(N=n, d=1, p=1, t=1) == weights + grads + moments
    assert total["weights"].evaluate(N=n, p=1, t=1) == weights
    assert total["gradients"].evaluate(N=n, p=1, t=1) == grads
    # framework convention for fp32 Megatron DDP: same 16 B/param with Adam
    fw = model_state("ddp", precision="fp32", optimizer=optim).subs(byte_widths("ddp", "fp32", optim))
    assert fw.evaluate(N=n, p=1, t=1) == weights + grads + moments


@pytest.mark.parametrize("optim", ["adamw", "sgd"])
def test_bf16_model_with_fp32_master_matches_memsym(optim):
    """bf16 weights/grads + fp32 master params owning the optimizer (ZeRO §3.1's 2 + 2 + 12)."""
    model = _model(torch.bfloat16)
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = (torch.optim.AdamW(master, lr=1e-3) if optim == "adamw"
           else torch.optim.SGD(master, lr=1e-2, momentum=0.9))
    _step(model, opt, torch.bfloat16)
    for mp, p in zip(master, params):  # the optimizer steps on an fp32 copy of the grads
        mp.grad = p.grad.float()
    opt.step()
    with torch.no_grad():
        for mp, p in zip(master, params):
            p.copy_(mp)
    weights, grads = _nbytes(params), _nbytes(p.grad for p in params)
    master_bytes, main_grads = _nbytes(master), _nbytes(m.grad for m in master)
    moments, steps = _state_bytes(opt)
    assert (weights, grads, master_bytes, main_grads) == (2 * n, 2 * n, 4 * n, 4 * n)
    # ZeRO §3.1 (K = 12 for Adam: master 4 + moments 8; SGD: master 4 + momentum 4)
    widths = byte_widths("ddp", "bf16", optim, convention="zero-paper")
    zp = model_state("ddp", convention="zero-paper").subs(widths)
    assert zp.evaluate(N=n, p=1, t=1) == weights + grads + master_bytes + moments
    # framework (Megatron DDP with a 16-bit grad buffer: Float16OptimizerWithFloat16Params's
    # main_grad.float() is the 4 B main gradient) counts the fp32 grads too: 20 B with Adam
    fw = model_state("ddp", precision="bf16", grad_dtype="bf16", optimizer=optim).subs(
        byte_widths("ddp", "bf16", optim, grad_dtype="bf16"))
    assert fw["main_gradients"].evaluate(N=n, p=1, t=1) == main_grads
    assert fw.evaluate(N=n, p=1, t=1) == weights + grads + main_grads + master_bytes + moments
    assert steps == (4 * len(master) if optim == "adamw" else 0)


def test_adamw_state_dtypes_follow_the_param():
    """zeros_like(param): a bf16 parameter gets bf16 moments (2 + 2 B), the step stays fp32."""
    p = torch.nn.Parameter(torch.zeros(17, 3, dtype=torch.bfloat16))
    opt = torch.optim.AdamW([p], lr=1e-3)
    p.grad = torch.ones_like(p)
    opt.step()
    moments, steps = _state_bytes(opt)
    assert (moments, steps) == tuple(adam_state_bytes([51], state_bytes=2).values())
    assert opt.state[p]["step"].dtype == torch.float32 and opt.state[p]["step"].device.type == "cpu"
