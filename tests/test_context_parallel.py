"""Context-parallel attention buffers (memsym/terms/context_parallel.py).

The unit tests count each method's buffers by hand from the sources read (torch 2.13's
``_context_parallel/_attention.py``, Transformer Engine d0067d0da6's ``context_parallel.py``)
at small sizes; the oracle runs torch's own ring attention on a 2-process gloo group and
counts the tensors it keeps alive.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

import pytest

from memsym.errors import InvalidValueError, UnknownNameError
from memsym.job import job
from memsym.symbols import a, b, c, d_h, g, s, t
from memsym.terms.context_parallel import (add_phase_buffers, cp_method, te_cp_attention,
                                           torch_ring_attention)
from memsym.training import phase_transients

# one rank's tokens b s/c = 4, a/t = 2 heads of d_h = 8: Q = 2*4*2*8 = 128 bytes, K (2 KV
# heads) = 128, K (1 KV head) = 64, logsumexp 4*4*2 = 32 bytes
SMALL = {b: 1, s: 16, c: 4, t: 1, a: 2, d_h: 8}


def test_torch_allgather_by_hand():
    f, bw = torch_ring_attention("allgather", 2)
    # F = 2cK + 8Q + 2L = 2*4*128 + 8*128 + 2*32; B = 2cK + 2Q + 17K = 1024 + 256 + 2176
    assert f.expr.subs(SMALL) == 1024 + 1024 + 64
    assert bw.expr.subs(SMALL) == 1024 + 256 + 2176


def test_torch_alltoall_by_hand():
    f, bw = torch_ring_attention("alltoall", 1)
    # K = 64: F = 6K + 8Q + 2L = 384 + 1024 + 64; B = 4K + 2Q + 17K = 256 + 256 + 1088
    assert f.expr.subs(SMALL) == 384 + 1024 + 64
    assert bw.expr.subs(SMALL) == 256 + 256 + 1088
    # one permute at c = 2 (8 tokens a rank: Q = 256, K = 128, L = 64): 2K in both
    two = {**SMALL, c: 2}
    assert f.expr.subs(two) == 2 * 128 + 8 * 256 + 2 * 64
    assert bw.expr.subs(two) == 2 * 128 + 2 * 256 + 17 * 128


def test_te_methods_by_hand():
    vals = {}
    for method in ("p2p", "all_gather", "a2a", "a2a+p2p"):
        f, bw = te_cp_attention(method, g)
        vals[method] = (f.expr.subs({**SMALL, g: 2}), bw.expr.subs({**SMALL, g: 2}))
    # Q = K = 128, L = 32, c = 4
    assert vals["p2p"] == (2 * 4 * 128 + 4 * 128 + 4 * 32, 128 + 8 * 128)
    assert vals["all_gather"] == (3 * 4 * 128, 5 * 4 * 128)
    assert vals["a2a+p2p"] == vals["p2p"]     # counted as p2p over all c ranks
    assert vals["a2a"] == (2 * 128 + 2 * 128, 2 * 128 + 2 * 128)
    # the ring buffers grow with c, Ulysses' do not (per rank, s/c fixed)
    f_ag, _ = te_cp_attention("all_gather", g)
    f_a2a, _ = te_cp_attention("a2a", g)
    scaled = {**SMALL, s: 32, c: 8, g: 2}
    assert f_ag.expr.subs(scaled) == 2 * f_ag.expr.subs({**SMALL, g: 2})
    assert f_a2a.expr.subs(scaled) == f_a2a.expr.subs({**SMALL, g: 2})


def test_methods_per_framework():
    assert cp_method("megatron", None) == "p2p"          # arguments.py: default ["p2p"]
    assert cp_method("torchtitan", None) == "allgather"  # _cp_options.rotate_method
    # Ulysses (ulysses_sp.py, UlyssesSPAttentionHF): the all-to-all, its only method
    assert cp_method("deepspeed", None) == "a2a"
    with pytest.raises(InvalidValueError, match="runs a2a, not p2p"):
        cp_method("deepspeed", "p2p")
    with pytest.raises(InvalidValueError, match="allgather or alltoall, not p2p"):
        cp_method("torchtitan", "p2p")
    with pytest.raises(UnknownNameError, match="unknown context-parallel method 'ring'"):
        cp_method("megatron", "ring")
    with pytest.raises(InvalidValueError, match="not alltoall"):
        job("llama2-7b", c=2, cp_comm_type="alltoall")
    # Megatron's --cp-comm-type spells the type once or once per layer (TransformerConfig)
    assert job("llama2-7b", c=2, cp_comm_type=["a2a"] * 2).training.comm.cp_comm_type == "a2a"
    with pytest.raises(InvalidValueError, match="per layer"):
        job("llama2-7b", c=2, cp_comm_type=["a2a", "p2p"])
    # TE takes all_gather (allgather is Megatron-core's DSA spelling: tests/test_cp_comm_type.py)
    with pytest.raises(InvalidValueError, match="takes all_gather"):
        job("llama2-7b", c=2, cp_comm_type="allgather")


def test_phase_placement_and_cp1():
    out = {"forward": [], "loss-backward": [], "backward": [], "optimizer": []}
    add_phase_buffers(out, 1, "megatron", "a2a")
    assert not any(out.values())
    j = job("llama3-8b", c=2, d=4, seq_length=8192, framework="torchtitan", sharding="fsdp")
    ph = phase_transients(j, 0)
    keys = {name: [term.key for term in terms] for name, terms in ph.items()}
    assert "cp_attention" in keys["backward"]
    assert all("cp_attention" not in keys[p] for p in ("forward", "loss-backward", "optimizer"))
    (term,) = [x for x in ph["backward"] if x.key == "cp_attention"]
    # torchtitan's Llama repeats the 8 KV heads to 32: K = Q = 2*4096*32*128 = 32 MiB, L =
    # 4*4096*32 = 0.5 MiB; all-gather backward 2cK + 2Q + 17K = 23 Q beats 2cK + 8Q + 2L
    q = 2 * 4096 * 32 * 128
    assert term.expr.subs({b: 1, s: 8192, c: 2, t: 1, a: 32, d_h: 128}) == 4 * q + 2 * q + 17 * q


def test_megatron_arguments_map(tmp_path):
    from memsym.readers.jobs import megatron_job
    from memsym.readers.megatron import read_megatron_args
    base = ("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 1024 "
            "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 4 "
            "--context-parallel-size 2 --bf16 --vocab-size 1024 --world-size 4 ")
    j = megatron_job(read_megatron_args((base + "--cp-comm-type a2a a2a").split()))
    assert j.training.comm.cp_comm_type == "a2a"
    j = megatron_job(read_megatron_args(base.split()))
    assert j.training.comm.cp_comm_type is None          # Megatron's default: p2p


def test_cli_refuses_a_foreign_method():
    proc = subprocess.run([sys.executable, "-m", "memsym", "estimate", "llama2-7b", "--cp", "2",
                           "--framework", "torchtitan", "--cp-comm-type", "a2a"],
                          capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "not a2a" in proc.stderr


# ---------------------------------------------------------------------------------------------
# the oracle: torch's ring attention on gloo, its live tensors counted
# ---------------------------------------------------------------------------------------------
def _live_tensor_mode():
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    import torch

    class LiveTensors(TorchDispatchMode):
        """The peak bytes of the storages the ops under it make, live at once (tensors made
        before it, ``keep``, excluded; a collective's own scratch is not a tensor here)."""

        def __init__(self, *kept):
            super().__init__()
            self.refs, self.live, self.peak = {}, 0, 0
            self.kept = {x.untyped_storage().data_ptr() for x in kept}

        def _drop(self, ptr):
            self.refs[ptr][1] -= 1
            if self.refs[ptr][1] == 0:
                self.live -= self.refs.pop(ptr)[0]

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for x in tree_flatten(out)[0]:
                if not isinstance(x, torch.Tensor):
                    continue
                try:
                    st = x.untyped_storage()
                    ptr = st.data_ptr()
                except RuntimeError:        # a wrapper subclass without storage of its own
                    continue
                if ptr in self.kept or st.nbytes() == 0:
                    continue
                if ptr not in self.refs:
                    self.refs[ptr] = [st.nbytes(), 0]
                    self.live += st.nbytes()
                    self.peak = max(self.peak, self.live)
                self.refs[ptr][1] += 1
                weakref.finalize(x, self._drop, ptr)
            return out

    return LiveTensors


#: Repetitions of each case, the least peak kept (a late free by gloo's thread only adds).
_REPEATS = 4


def _ring_worker(rank, world, port, cases, queue):
    try:
        import torch
        import torch.distributed as dist
        from torch.distributed.tensor.experimental._context_parallel import _attention as A

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        live = _live_tensor_mode()

        # the kernels' outputs at their sizes (the ring's own buffers are what is counted;
        # a CPU kernel's workspace is not a GPU flash kernel's)
        def fwd_op(q, k, v, is_causal=None, **kw):
            return torch.empty_like(q), torch.empty(q.shape[:-1], dtype=torch.float32)

        def bwd_op(query, key, value, out, logsumexp, is_causal=None, **kw):
            return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)

        res = {}
        # A buffer a collective used is freed when gloo's thread drops its last reference,
        # which can come after the main thread's next allocation: a late free only raises the
        # observed peak, never lowers it, so the least of a few repetitions is the schedule's
        # own peak (one run alone read up to two K/V blocks high about one time in three).
        for method, heads, kv_heads, tokens, dh in cases * _REPEATS:
            A._cp_options.rotate_method = getattr(A._RotateMethod, method)
            q = torch.randn(1, heads, tokens, dh, dtype=torch.bfloat16)
            k = torch.randn(1, kv_heads, tokens, dh, dtype=torch.bfloat16)
            v = torch.randn(1, kv_heads, tokens, dh, dtype=torch.bfloat16)
            group = dist.group.WORLD
            with live(q, k, v) as fw:
                out, lse, *_ = A._templated_ring_attention(group, 2, fwd_op, q, k, v,
                                                           is_causal=True)
            dout = torch.randn_like(out)
            with live(q, k, v, out, lse, dout) as bw:
                grads = A._templated_ring_attention_backward(
                    group, 2, bwd_op, dout, "grad_out", q, k, v, out, lse, is_causal=True,
                    dropout_p=0.0)
            # dK and dV are views of one storage (the last received buffer, cast)
            made_f = sum({x.untyped_storage().data_ptr(): x.untyped_storage().nbytes()
                          for x in (out, lse)}.values())
            made_b = sum({x.untyped_storage().data_ptr(): x.untyped_storage().nbytes()
                          for x in grads[:3]}.values())
            peaks = (fw.peak - made_f, bw.peak - made_b)
            key = (method, kv_heads)
            res[key] = tuple(map(min, res[key], peaks)) if key in res else peaks
            del out, lse, dout, grads
            gc.collect()
        queue.put((rank, res))
        dist.destroy_process_group()
    except Exception as exc:  # pragma: no cover - reported to the parent
        queue.put((rank, repr(exc)))


@pytest.mark.torch
def test_torch_ring_attention_oracle():
    """torch 2.13's _templated_ring_attention and its backward on 2 gloo ranks: the forward
    peak beyond a plain attention's outputs is F exactly on the busier rank; the backward's
    is B, or B plus one logsumexp (rank 0's contiguous half-logsumexp copy)."""
    pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is needed")
    from gloo_group import run_group

    heads, tokens, dh = 2, 64, 32
    cases = [(m, heads, kv, tokens, dh) for m in ("ALL_GATHER", "ALL_TO_ALL") for kv in (2, 1)]
    ranks = run_group(_ring_worker, 2, cases, timeout=120)
    vals = {b: 1, s: 2 * tokens, c: 2, t: 1, a: heads, d_h: dh}
    lse = 4 * tokens * heads
    for method, _, kv, _, _ in cases:
        f, bw = torch_ring_attention("allgather" if method == "ALL_GATHER" else "alltoall", kv)
        fwd = max(r[(method, kv)][0] for r in ranks.values())
        bwd = max(r[(method, kv)][1] for r in ranks.values())
        assert fwd == f.expr.subs(vals), (method, kv)
        assert bw.expr.subs(vals) <= bwd <= bw.expr.subs(vals) + lse, (method, kv)


def test_a2a_attention_keeps_its_kernel_output_beside_the_projections_copy():
    """Transformer Engine's AttnFuncWithCPAndQKVOA2A saves ``out_part`` (its kernel's output,
    s tokens of a/c heads) and returns the all-to-all's result, which linear_proj saves: per
    layer one more 16-bit s/c x a d_h tensor than p2p, which returns the tensor it saves.
    Llama 3 8B, c = 2, s = 8192, b = 1, t = 1, d = 4, no recompute: 32 layers x 2 x 4096 x
    4096 bytes; core_attn recomputed drops it with the kernel's saved tensors."""
    from memsym.training.estimate import job_memory

    def layers(**kw):
        j = job("llama3-8b", c=2, d=4, seq_length=8192, micro_batch_size=1,
                global_batch_size=4, gpu="h100-80gb", **kw)
        return job_memory(j).activations()["layer_activations"]

    assert layers(cp_comm_type="a2a") - layers(cp_comm_type="p2p") == 32 * 2 * 4096 * 4096
    assert layers(cp_comm_type="a2a", recompute="selective") == \
        layers(cp_comm_type="p2p", recompute="selective")
