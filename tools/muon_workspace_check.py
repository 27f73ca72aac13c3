"""memsym's Muon Newton-Schulz workspace against the source itself, run on the CPU.

Runs Emerging-Optimizers' ``muon_utils.py`` at the pinned commit (read from a git directory,
default the mirror ``/work/.mirror/NVIDIA-NeMo+Emerging-Optimizers/repo``; its ``absl`` logging
and Triton kernels replaced by inert stand-ins) inside the lines of Megatron-LM d98e8a64dd's
``TensorParallelMuon`` that call it, copied below (``emerging_optimizers.py:221-237``,
403-439; Emerging-Optimizers ``orthogonalized_optimizer.py:193-203``), on gloo groups of 1 to
3 CPU processes.  A ``TorchDispatchMode`` counts the bytes of every storage an op creates while
a Python tensor still holds it; the peak of that count is what the step holds beyond the
states (the gradient and the momentum buffer), 0-dim scalars left out as memsym leaves them.
Each peak is compared with :func:`memsym.terms.muon.newton_schulz_peak` (one matrix) and
:func:`memsym.terms.muon.newton_schulz_workspace` (``linear_qkv`` split into Q, K, V).

Run ``python tools/muon_workspace_check.py`` (needs torch); exit status 1 on a mismatch.
``tests/test_muon_workspace.py`` runs the one-process group when torch and the mirror exist.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import subprocess
import sys
import types
import weakref

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from memsym.symbols import t as t_sym  # noqa: E402
from memsym.terms.muon import newton_schulz_peak, newton_schulz_workspace  # noqa: E402

MIRROR = "/work/.mirror/NVIDIA-NeMo+Emerging-Optimizers/repo"
COMMIT = "fd77292"
PATH = "emerging_optimizers/orthogonalized_optimizers/muon_utils.py"
MODES = ("blockwise", "distributed", "duplicated")
#: (shard rows, shard cols, partition_dim): tall and wide shards split either way, a
#: Gram side longer than the other under distributed (1 x 8, dim 0; 6 x 2, dim 1)
SHAPES = ((2, 6, 0), (6, 2, 0), (6, 2, 1), (64, 256, 0), (256, 64, 1), (32, 512, 0),
          (512, 32, 0), (128, 96, 1), (1, 8, 0), (8, 1, 1))
#: linear_qkv of 2 KV groups: per group 4 x 32 Q rows, 32 K, 32 V; h 256
QKV_SPLIT, QKV_GROUPS, QKV_COLS = (128, 32, 32), 2, 256


def load_muon_utils(git_dir: str = MIRROR):
    """Emerging-Optimizers' ``muon_utils`` at :data:`COMMIT`, as a module."""
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{COMMIT}:{PATH}"],
                          check=True, capture_output=True, text=True).stdout
    text = text.replace("from absl import logging", "import logging")
    text = text.replace("from emerging_optimizers import triton_kernels", "triton_kernels = None")
    mod = types.ModuleType("muon_utils")
    exec(compile(text, PATH, "exec"), mod.__dict__)
    mod.logging = types.SimpleNamespace(log_first_n=lambda *a, **k: None, ERROR=logging.ERROR,
                                        INFO=logging.INFO, debug=lambda *a, **k: None)
    return mod


class LiveBytes(TorchDispatchMode):
    """The peak bytes of the storages ops create, alive while a tensor holds them."""

    def __init__(self, *held):
        super().__init__()
        self.held = {x.untyped_storage().data_ptr() for x in held}
        self.refs, self.size, self.now, self.peak = {}, {}, 0, 0

    def _drop(self, ptr):
        self.refs[ptr] -= 1
        if not self.refs[ptr]:
            del self.refs[ptr]
            self.now -= self.size.pop(ptr)

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in tree_flatten(out)[0]:
            if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
                continue
            ptr = x.untyped_storage().data_ptr()
            if ptr in self.held:
                continue
            if ptr not in self.refs:
                self.refs[ptr], self.size[ptr] = 0, x.untyped_storage().nbytes()
                self.now += self.size[ptr]
                self.peak = max(self.peak, self.now)
            self.refs[ptr] += 1
            weakref.finalize(x, self._drop, ptr)
        return out


def step_peak(mu, group, shape, mode, pdim, nesterov, qkv_split=None) -> int:
    """Peak bytes of one Muon step on a matrix of ``shape`` beyond its gradient and momentum."""
    grad = torch.randn(*shape)
    mom = torch.randn_like(grad)

    def scaled_orthogonalize_fn(g, tp_group, partition_dim):    # emerging_optimizers.py:221-237
        orth_grad = mu.newton_schulz_tp(
            g, steps=5, coefficient_type="quintic", tp_group=tp_group,
            partition_dim=partition_dim, tp_mode="duplicated" if mode == "blockwise" else mode)
        return orth_grad * 0.5 * 1.0

    def step():
        mom.lerp_(grad, 1 - 0.95)                               # orthogonalized_optimizer.py:193
        g = grad.lerp(mom, 0.95) if nesterov else mom           # :196-199
        partition_dim = None if mode == "blockwise" else pdim  # emerging_optimizers.py:403
        if qkv_split is None:
            return scaled_orthogonalize_fn(g, group, partition_dim)
        grad_shape = g.shape                                    # :408-437
        qkv_split_dim = sum(qkv_split)
        num_query_groups = grad_shape[0] // qkv_split_dim
        qkv_grads = torch.split(g.view(num_query_groups, qkv_split_dim, -1), qkv_split, dim=1)
        qkv_grads = [x.reshape(-1, grad_shape[-1]) for x in qkv_grads]
        qkv_grads = [scaled_orthogonalize_fn(x, group, partition_dim).view(
            num_query_groups, -1, grad_shape[-1]) for x in qkv_grads]
        return torch.cat(qkv_grads, dim=1).view(grad_shape)

    peaks = []
    # the least of 3 runs: gloo's work objects may keep a collective's tensor (the Gram
    # matrix all-reduced under distributed) a little longer, as its background thread
    # cleans up; the program's own references are the same each run
    for _ in range(3):
        with LiveBytes(grad, mom) as live:
            out = step()
            del out
        peaks.append(live.peak)
    return min(peaks)


def measure(mu, group, world: int) -> dict:
    """Every case's peak on this rank: ``{case: bytes}``."""
    torch.set_float32_matmul_precision("medium")    # Megatron's --muon-fp32-matmul-prec
    out = {}
    for mode in MODES:
        for nesterov in (False, True):
            for r, c, pdim in SHAPES:
                out[f"{r}x{c} dim{pdim} {mode} nesterov={nesterov}"] = step_peak(
                    mu, group, (r, c), mode, pdim, nesterov)
            if QKV_GROUPS % world:      # Megatron splits whole KV groups over TP
                continue
            rows = QKV_GROUPS // world * sum(QKV_SPLIT)
            out[f"qkv {mode} nesterov={nesterov}"] = step_peak(
                mu, group, (rows, QKV_COLS), mode, 0, nesterov, qkv_split=QKV_SPLIT)
    return out


def memsym_peaks(world: int) -> dict:
    """memsym's bytes of the same cases."""
    out = {}
    qkv = [(n, QKV_GROUPS * r, QKV_COLS, "rows", 1) for n, r in zip("qkv", QKV_SPLIT)]
    for mode in MODES:
        for nesterov in (False, True):
            for r, c, pdim in SHAPES:
                out[f"{r}x{c} dim{pdim} {mode} nesterov={nesterov}"] = int(newton_schulz_peak(
                    r, c, tp_mode=mode, partition_dim=pdim, ways=world, nesterov=nesterov))
            if QKV_GROUPS % world:
                continue
            out[f"qkv {mode} nesterov={nesterov}"] = int(newton_schulz_workspace(
                qkv, tp_mode=mode, nesterov=nesterov, qkv_groups=QKV_GROUPS).evaluate(
                    {t_sym: world}))
    return out


def _rank(rank, world, port, git_dir, where):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        got = measure(load_muon_utils(git_dir), dist.new_group(list(range(world))), world)
        if rank == 0:
            pathlib.Path(where).write_text(json.dumps(got))
    finally:
        dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=MIRROR, help="Emerging-Optimizers git directory")
    ap.add_argument("--worlds", default="1,2,3", help="gloo group sizes (TP ranks)")
    ap.add_argument("--port", type=int, default=29561)
    args = ap.parse_args(argv)
    import tempfile

    import torch.multiprocessing as mp

    bad = 0
    for i, world in enumerate(int(w) for w in args.worlds.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            where = f"{tmp}/peaks.json"
            mp.spawn(_rank, args=(world, args.port + i, args.source, where), nprocs=world)
            got = json.loads(pathlib.Path(where).read_text())
        want = memsym_peaks(world)
        for case, value in got.items():
            ok = value == want[case]
            bad += not ok
            print(f"t={world} {case:42s} source {value:>9d}  memsym {want[case]:>9d}"
                  f"{'' if ok else '  MISMATCH'}")
    print(f"{bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
