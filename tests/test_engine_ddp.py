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
"""

import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from gloo_group import run_group  # noqa: E402
from memsym.terms.torch_ddp import ddp_bucket_copy  # noqa: E402

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
