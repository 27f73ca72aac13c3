"""torch DistributedDataParallel on a one-process CPU gloo group: the reducer's bucket copy of
the gradients, measured, against memsym's term (memsym.terms.torch_ddp.ddp_bucket_copy).

The live bytes of PyTorch's CPU allocator (tests/live_memory.py, the profiler's memory events)
are read around wrapping the model (the reducer allocates its flat buckets,
``Reducer::initialize_buckets``) and around one forward and backward (autograd's
``param.grad``, copied into the buckets for the all-reduce).  With
``gradient_as_bucket_view=False`` (torch's default and the Hugging Face Trainer's) the buckets
stay beside ``param.grad``: two copies of the gradients after the backward; with True the
gradients are views into the buckets: one.  Either way the buckets hold every parameter once,
whatever ``bucket_cap_mb``.  The wrap is made with ``init_sync=False``: the broadcast of the
module's states at construction (``_sync_module_states``) flattens them into a temporary that
gloo's thread may free after the measured phase ends; the buckets do not depend on it (on one
rank the broadcast changes no value).

A bf16 model (transformers' LlamaForCausalLM cast to bfloat16, as ``from_pretrained`` loads a
bf16 checkpoint) trained with ``torch.optim.AdamW``: every state is measured in bf16, the
buckets included, and no fp32 master copy exists (memsym.terms.torch_ddp.torch_adamw_widths).
Under Accelerate's bf16 mixed precision (the Trainer's ``--bf16``) its logits come back fp32,
the copy memsym's plain-DDP reading names in a note and does not count.
"""

import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from gloo_group import run_group  # noqa: E402
from memsym.symbols import N  # noqa: E402
from memsym.terms.model_state import model_state  # noqa: E402
from memsym.terms.torch_ddp import ddp_bucket_copy, torch_adamw_widths, torch_ddp_states  # noqa: E402

pytestmark = pytest.mark.torch

#: (gradient_as_bucket_view, bucket_cap_mb): torch's defaults (False, 25 MiB with a 1 MiB first
#: bucket), the view, and a cap smaller than one weight (0.25 MiB: a bucket per tensor).
CASES = ((False, None), (True, None), (False, 0.25))


def _wrap_and_step(view, cap):
    """(parameters, live bytes the wrap added, live bytes the step added, param.grad bytes)."""
    from live_memory import Phases
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(300, 400), torch.nn.GELU(),
                                torch.nn.Linear(400, 300))
    x = torch.randn(4, 300)
    ph = Phases()
    with ph.run():
        with ph.phase("wrap"):
            ddp = DistributedDataParallel(model, gradient_as_bucket_view=view, bucket_cap_mb=cap,
                                          init_sync=False)
        with ph.phase("step"):
            loss = ddp(x).pow(2).sum()
            loss.backward()
            del loss
    wrap, step = ph.result["wrap"], ph.result["step"]
    grads = sum(q.grad.numel() * q.grad.element_size() for q in model.parameters())
    n = sum(q.numel() for q in model.parameters())
    return n, wrap[2] - wrap[0], step[2] - step[0], grads


def _worker(rank, world, port, cases, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        queue.put((rank, {case: _wrap_and_step(*case) for case in cases}))
        dist.destroy_process_group()
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put((rank, repr(exc)))


@pytest.fixture(scope="module")
def measured():
    return run_group(_worker, 1, CASES)[0]


@pytest.mark.parametrize("case", CASES)
def test_the_reducer_allocates_one_bucket_copy_of_every_gradient(measured, case):
    """Wrapping allocates 4 B per fp32 parameter (300 x 400 + 400 + 400 x 300 + 300 = 240 700
    parameters: 962 800 B), memsym's ddp_bucket_copy at b_g = 4, whatever the cap."""
    n, wrapped, _, _ = measured[case]
    assert n == 300 * 400 + 400 + 400 * 300 + 300
    assert wrapped == 4 * n == ddp_bucket_copy(grad_bytes=4).evaluate(N=n, p=1, t=1)


@pytest.mark.parametrize("case", CASES)
def test_param_grad_is_a_second_copy_unless_it_is_the_buckets_view(measured, case):
    """After the backward, param.grad (4 B per parameter) is live beside the buckets with
    gradient_as_bucket_view False: the step adds it; with True it is the buckets' view and
    the step adds nothing that outlives it."""
    view, _ = case
    n, _, stepped, grads = measured[case]
    assert grads == 4 * n
    assert stepped == (0 if view else grads)


#: A bf16 Llama small enough for a CPU step (transformers' LlamaForCausalLM from a LlamaConfig:
#: h 64, 2 layers, 4 heads and 4 KV heads of 16, FFN 128, V 100, untied): by hand, word
#: embedding and output layer V h each, per layer q, k, v, o h^2 each, the SwiGLU's three
#: h x f matrices and two RMSNorm weights, the final norm: 2 V h + L (4 h^2 + 3 h f + 2 h) + h,
#: in 2 L (9 tensors) + 3 = 21 parameter tensors.
LLAMA_H, LLAMA_F, LLAMA_V, LLAMA_L = 64, 128, 100, 2
LLAMA_N = 2 * LLAMA_V * LLAMA_H + LLAMA_L * (4 * LLAMA_H ** 2 + 3 * LLAMA_H * LLAMA_F
                                              + 2 * LLAMA_H) + LLAMA_H
LLAMA_TENSORS = LLAMA_L * 9 + 3
assert LLAMA_N == 95_040


def _bf16_llama_step():
    """Live bytes added by wrapping a bf16 tiny Llama in DDP, by its forward and backward, and
    by torch.optim.AdamW's first step; the optimizer's state tensors as (name, dtype, bytes)."""
    from live_memory import Phases
    from torch.nn.parallel import DistributedDataParallel
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=LLAMA_H, num_hidden_layers=LLAMA_L, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=LLAMA_F, vocab_size=LLAMA_V,
                      max_position_embeddings=64, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    ids = torch.randint(0, LLAMA_V, (2, 16))
    ph = Phases()
    with ph.run():
        with ph.phase("wrap"):
            ddp = DistributedDataParallel(model, init_sync=False)
        with ph.phase("backward"):
            loss = ddp(input_ids=ids, labels=ids).loss
            loss.backward()
            del loss
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with ph.phase("step"):
            opt.step()
    added = {name: end - first for name, (first, _, end) in ph.result.items()}
    params = [(q.dtype, q.numel() * q.element_size()) for q in model.parameters()]
    grads = [(q.grad.dtype, q.grad.numel() * q.grad.element_size()) for q in model.parameters()]
    state = [(name, x.dtype, x.numel() * x.element_size())
             for s in opt.state.values() for name, x in s.items()]
    return added, params, grads, state


def _bf16_worker(rank, world, port, _, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        queue.put((rank, _bf16_llama_step()))
        dist.destroy_process_group()
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put((rank, repr(exc)))


@pytest.fixture(scope="module")
def bf16_llama():
    pytest.importorskip("transformers")
    return run_group(_bf16_worker, 1)[0]


def test_a_bf16_model_under_ddp_and_adamw_holds_every_state_in_bf16(bf16_llama):
    """torch DDP + torch.optim.AdamW on a bf16 LlamaForCausalLM, measured: the weights, the
    reducer's buckets (the wrap), param.grad (the backward) and AdamW's two moments (its first
    step) are each 2 B per parameter, bf16, with no fp32 master copy; the step counters (one
    4-byte fp32 scalar per parameter tensor, adam.py:168-175) are the only fp32 state, which
    memsym does not count.  memsym's torch DDP terms at the same count: 2, 2, 2 and 2 + 2."""
    added, params, grads, state = bf16_llama
    b = 2 * LLAMA_N                                  # one bf16 copy of every parameter
    assert {d for d, _ in params} == {d for d, _ in grads} == {torch.bfloat16}
    assert sum(n for _, n in params) == sum(n for _, n in grads) == b
    assert added["wrap"] == b and added["backward"] == b
    moments = {(name, d) for name, d, _ in state if name != "step"}
    assert moments == {("exp_avg", torch.bfloat16), ("exp_avg_sq", torch.bfloat16)}
    steps = [n for name, d, n in state if name == "step"]
    assert len(steps) == LLAMA_TENSORS and set(steps) == {4}
    assert added["step"] == 2 * b + 4 * LLAMA_TENSORS

    st = model_state("ddp", precision="bf16").subs(torch_adamw_widths("bf16"))
    got = {x.key: x.evaluate(N=LLAMA_N, p=1, t=1) for x in torch_ddp_states(st.terms, N)}
    assert got == {"weights": b, "gradients": b, "ddp_buckets": b, "optimizer": 2 * b}


def _accelerate_outputs(rank, world, port, _, queue):
    """The dtypes Accelerate's bf16 mixed precision (the Trainer's --bf16) gives a bf16
    model's parameters and outputs, in a process of its own (AcceleratorState is global)."""
    try:
        from accelerate import Accelerator
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        cfg = LlamaConfig(hidden_size=LLAMA_H, num_hidden_layers=LLAMA_L, num_attention_heads=4,
                          num_key_value_heads=4, intermediate_size=LLAMA_F, vocab_size=LLAMA_V,
                          max_position_embeddings=64, tie_word_embeddings=False)
        acc = Accelerator(cpu=True, mixed_precision="bf16")
        model = acc.prepare(LlamaForCausalLM(cfg).to(torch.bfloat16))
        ids = torch.randint(0, LLAMA_V, (2, 16))
        logits = model(input_ids=ids, labels=ids).logits
        queue.put((rank, ({q.dtype for q in model.parameters()}, logits.dtype,
                          logits.numel() * logits.element_size())))
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put((rank, repr(exc)))


def test_accelerates_bf16_returns_fp32_logits_of_a_bf16_model():
    """What memsym's plain-DDP reading names and does not count under --bf16 over bf16
    weights: Accelerate 1.16 wraps the forward in autocast and convert_outputs_to_fp32
    (accelerator.py:1791-1801), so the bf16 model's logits come back fp32, 4 b s V bytes:
    4 x 2 x 16 x 100 = 12 800; the parameters stay bf16."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    params, dtype, nbytes = run_group(_accelerate_outputs, 1)[0]
    assert params == {torch.bfloat16} and dtype == torch.float32
    assert nbytes == 4 * 2 * 16 * LLAMA_V
