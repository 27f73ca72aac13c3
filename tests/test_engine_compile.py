"""torchtitan's loss, eager and under ``torch.compile``, run for real on CPU (Inductor).

torchtitan's ``cross_entropy_loss`` is ``F.cross_entropy(pred.flatten(0, 1).float(), labels)``
(``torchtitan/components/loss.py``); since bbb1b616e ``build_cross_entropy_loss`` wraps it in
``torch.compile`` when compilation is on.  A saved-tensor hook records what each version keeps
for backward; memsym's ``output_activations`` must count the same floating-point bytes:
eager, the fp32 log-softmax (4TV); compiled, the 16-bit logits themselves and two fp32
statistics per token (2TV + 8T).  The integer labels are the data loader's tensor, alive
anyway, and the 0-d total weight of the mean is 4 bytes: neither is counted.
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

T, V = 64, 1000        # tokens, vocabulary


def _loss(pred, labels):
    # the port: torchtitan components/loss.py cross_entropy_loss at e7c0cae
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def _saved_float_bytes(fn) -> int:
    torch.manual_seed(0)
    pred = torch.randn(1, T, V, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (1, T))
    storages, kept = {}, []

    def pack(x):
        if x.is_floating_point() and x.dim() > 0:   # not the mean's 0-d weight
            st = x.untyped_storage()
            storages[st.data_ptr()] = st.nbytes()
            # held until backward (autograd holds it anyway): no address is freed and reused
            # by another saved tensor in between, which would merge two storages in this count
            kept.append(x)
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        loss = fn(pred, labels)
    loss.backward()                      # the saved set is a working backward's
    assert pred.grad.dtype == torch.bfloat16 and torch.isfinite(pred.grad).all()
    return sum(storages.values())


def _memsym_logits(compiled: bool) -> int:
    from memsym.terms.activations import output_activations

    term = output_activations(compiled_loss=compiled)["logits"]
    return int(term.evaluate(s=T, b=1, c=1, t=1, V=V))


def test_eager_loss_keeps_the_fp32_log_softmax():
    assert _saved_float_bytes(_loss) == _memsym_logits(False) == 4 * T * V


def _compiled_saved_bytes() -> int:
    """The saved floating-point bytes of the loss under torch.compile (Inductor, CPU)."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    # scalar C++ loops (vec_isa_ok=False): what is saved for backward is fixed by AOTAutograd's
    # partitioner before Inductor generates code, and the kernels' outputs have the same
    # shapes and dtypes either way; the vectorised build costs g++ a few seconds more for
    # each kernel and for probing the CPU's vector instruction sets (22 s against 13 s)
    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        return _saved_float_bytes(torch.compile(_loss, backend="inductor"))


#: The functions of this module :func:`compiled` runs, in this order, in one fresh interpreter.
COMPILED = ("_compiled_saved_bytes", "_compiled_grad_buffer")

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                               reason="Inductor's CPU backend needs a C++ compiler")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    """The words each function of :data:`COMPILED` prints (its result, a tuple spread), by
    name, called one after the other in a fresh interpreter with an Inductor cache of its own:
    what earlier tests of the same worker left in torch's global state (dispatch modes, dynamo
    caches), or a graph cached on disk by another process, never stands in for these
    compilations.  One interpreter for both (issue 29, the suite's time: each interpreter
    imports torch and builds the loss's kernels with g++, 9 s): both compile the same
    ``_loss`` at the same shapes, so the second finds the graph the first compiled in this
    interpreter (the same Inductor code either way) and each function resets dynamo first."""
    here = pathlib.Path(__file__).resolve().parent
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path_factory.mktemp("inductor")),
               PYTHONPATH=os.pathsep.join([str(here.parent), str(here),
                                           os.environ.get("PYTHONPATH", "")]))
    calls = "".join(f"r = t.{name}(); print(*(r if isinstance(r, tuple) else (r,))); "
                    for name in COMPILED)
    run = subprocess.run([sys.executable, "-c", "import test_engine_compile as t; " + calls],
                         capture_output=True, text=True, timeout=600, env=env, cwd=here)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()[-len(COMPILED):]    # one line each, after anything else
    return {name: line.split() for name, line in zip(COMPILED, lines)}


@needs_cxx
def test_compiled_loss_keeps_the_16bit_logits_and_two_statistics(compiled):
    saved = int(compiled["_compiled_saved_bytes"][-1])
    assert saved == _memsym_logits(True) == 2 * T * V + 8 * T, \
        f"saved {saved} bytes, expected {2 * T * V + 8 * T}"


def _compiled_grad_buffer() -> tuple:
    """(whether the compiled loss's backward wrote the logits' gradient into the logits' own
    storage, that gradient's bytes): the logits come from a matmul as torchtitan's output
    layer makes them, and only the loss keeps them once ``pred`` is dropped (train step)."""
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(T, 32, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(V, 32, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (1, T))
    pred = (x @ w.t()).unsqueeze(0)
    ptr, seen = pred.untyped_storage().data_ptr(), {}
    pred.register_hook(lambda g: seen.update(ptr=g.untyped_storage().data_ptr(),
                                             nbytes=g.untyped_storage().nbytes()) or None)
    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        loss = torch.compile(_loss, backend="inductor")(pred, labels)
    del pred
    loss.backward()
    return seen["ptr"] == ptr, seen["nbytes"]


@needs_cxx
def test_compiled_loss_backward_makes_a_new_16bit_gradient(compiled):
    """The saved 16-bit logits are the compiled graph's input, which AOTAutograd does not
    donate to the backward: the logits' gradient is a new 2TV-byte buffer beside them (memsym's
    ``logits_grad_16bit`` in the loss's backward), not written over them."""
    from memsym.terms.transients import torch_cross_entropy_transient

    same, nbytes = compiled["_compiled_grad_buffer"][-2:]
    grad = torch_cross_entropy_transient()["logits_16bit"].evaluate(s=T, b=1, c=1, t=1, V=V)
    assert same == "False" and int(nbytes) == grad == 2 * T * V == 128000
