"""Muon's Newton-Schulz workspace in each ``--muon-tp-mode``, against a replay of the tensors the
source allocates and frees, written out here from Emerging-Optimizers fd77292
(``orthogonalized_optimizers/muon_utils.py``, ``orthogonalized_optimizer.py``) and Megatron-LM
d98e8a64dd (``megatron/core/optimizer/emerging_optimizers.py``), and against hand arithmetic.

What each mode runs (read at those commits):

- ``TensorParallelMuon.orthogonalize`` (emerging_optimizers.py:403) passes the weight's
  ``partition_dim`` on, except under blockwise (None); ``scaled_orthogonalize_fn`` (227-237)
  calls ``newton_schulz_tp`` with blockwise mapped to duplicated (233) and scales the result
  twice (``orth_grad * scale_factor * extra_scale_factor``).
- ``newton_schulz_tp`` (muon_utils.py:317-345): no partition_dim: ``newton_schulz`` on the
  tensor; duplicated: ``x_shards`` (one ``empty_like`` per rank) all-gathered, ``torch.cat``
  along partition_dim, ``newton_schulz`` on the whole matrix (its own orientation), the
  rank's chunk (a view) returned; distributed: ``newton_schulz`` on the shard with
  ``transpose = partition_dim == 0``.
- ``newton_schulz`` (149-274): ``transpose = rows > cols`` unless given (205-208); the fp32
  normalized copy (216; ``distributed_normalize_p2``'s ``x * x`` temporary then ``x / norm``,
  140-146), its bf16 cast (262), per step ``A = X X^T``, ``B = addmm(A, A, A)``,
  ``X = addmm(X, B, X)`` (370-375; A and B freed when the step returns), the fp32 cast back
  (269).
- ``OrthogonalizedOptimizer.step`` (orthogonalized_optimizer.py:193-208): Nesterov's
  ``grad.lerp(momentum_buffer)`` a new fp32 tensor of the shard, alive through the step.
- Megatron's default Nesterov is off: ``--muon-nesterov`` is ``store_true``
  (arguments.py:2633), ``OptimizerConfig.muon_nesterov = False`` (optimizer_config.py:266),
  and ``_kwargs_from_config`` passes the config's value (emerging_optimizers.py:533-556),
  so ``TensorParallelMuon``'s own default ``nesterov=True`` (185) never applies.
"""

from __future__ import annotations

import pytest

from memsym.job import job
from memsym.model import Architecture
from memsym.model.muon_matrices import muon_matrices
from memsym.symbols import t as t_sym, t_e as t_e_sym
from memsym.terms.muon import newton_schulz_peak, newton_schulz_workspace
from memsym.training import phase_transients, training_values

from test_muon_search import MLA   # the small MLA model both files price


# ----------------------------------------------------------------------------------------------
# A replay of the allocations: +name bytes, -name; the peak of what is alive
# ----------------------------------------------------------------------------------------------
def peak_of(events):
    alive, peak = {}, 0
    for ev in events:
        if ev[0] == "+":
            alive[ev[1]] = ev[2]
            peak = max(peak, sum(alive.values()))
        else:
            del alive[ev[1]]
    return peak, alive


def newton_schulz_events(rows, cols, tag, *, transpose=None, distributed=False, steps=5):
    """newton_schulz on a rows x cols fp32 tensor: what it allocates; leaves its fp32 result."""
    if transpose is None:
        transpose = rows > cols                          # muon_utils.py:205-206
    m, n = (cols, rows) if transpose else (rows, cols)
    ev = []
    if distributed:                                      # distributed_normalize_p2
        ev += [("+", tag + "sq", 4 * m * n), ("-", tag + "sq")]
    ev += [("+", tag + "x32", 4 * m * n),                # F.normalize / x / norm
           ("+", tag + "x16_0", 2 * m * n), ("-", tag + "x32")]   # .to(bfloat16)
    for k in range(steps):
        ev += [("+", tag + "A", 2 * m * m), ("+", tag + "B", 2 * m * m),
               ("+", tag + f"x16_{k + 1}", 2 * m * n),
               ("-", tag + "A"), ("-", tag + "B"), ("-", tag + f"x16_{k}")]
    ev += [("+", tag + "result", 4 * m * n), ("-", tag + f"x16_{steps}")]   # .to(float32)
    return ev


def orthogonalize_events(rows, cols, mode, pdim, ways, tag=""):
    """scaled_orthogonalize_fn on a rows x cols shard; leaves its scaled result tag+'out'."""
    s = rows * cols
    if mode == "blockwise" or pdim is None:
        ev = newton_schulz_events(rows, cols, tag)
        whole = tag + "result"
    elif mode == "distributed":
        ev = newton_schulz_events(rows, cols, tag, transpose=pdim == 0, distributed=True)
        whole = tag + "result"
    else:
        gr, gc = (rows * ways, cols) if pdim == 0 else (rows, cols * ways)
        ev = [("+", tag + "x_shards", 4 * ways * s), ("+", tag + "global_x", 4 * ways * s)]
        ev += newton_schulz_events(gr, gc, tag)
        ev += [("-", tag + "x_shards"), ("-", tag + "global_x")]   # newton_schulz_tp returns
        whole = tag + "result"                          # the chunk is a view: all of it stays
    ev += [("+", tag + "scaled", 4 * s), ("+", tag + "out", 4 * s), ("-", tag + "scaled"),
           ("-", whole)]
    return ev


def replayed_peak(rows, cols, mode, pdim=None, ways=1, nesterov=False):
    ev = [("+", "nesterov", 4 * rows * cols)] if nesterov else []
    return peak_of(ev + orthogonalize_events(rows, cols, mode, pdim, ways))[0]


MODES = ("blockwise", "distributed", "duplicated")


# ----------------------------------------------------------------------------------------------
# One matrix
# ----------------------------------------------------------------------------------------------
def test_a_row_split_matrix_by_hand_in_each_mode():
    # a 4 x 6 column-parallel weight over 2 ranks: the shard is 2 x 6 (s = 12), partition_dim 0
    # blockwise: newton_schulz on 2 x 6, no transpose (m 2, n 6): normalize 48 + bf16 24; a
    # step: X 24 + A 8 + B 8 + new X 24 = 64; fp32 result 48 + bf16 X 24; then the result
    # and its two scaled copies 3 x 48 = 144
    assert newton_schulz_peak(2, 6, tp_mode="blockwise", partition_dim=0, ways=2) == 144
    # distributed: transposed by partition_dim 0 to 6 x 2, so the Gram A is 6 x 6, m 6 > n 2:
    # a step holds X 24 + A 72 + B 72 + new X 24 = 192, over the end's 144
    assert newton_schulz_peak(2, 6, tp_mode="distributed", partition_dim=0, ways=2) == 192
    # duplicated: x_shards 2 x 48 and the cat 4 x 6 fp32 96 stay alive; NS on 4 x 6 (m 4):
    # normalize 96, bf16 48 (96 + 96 + 96 + 48 = 336), a step 192 + 48 + 32 + 32 + 48 = 352,
    # fp32 result 96 + bf16 48 (336)
    assert newton_schulz_peak(2, 6, tp_mode="duplicated", partition_dim=0, ways=2) == 352
    # Nesterov: the lerp of the 2 x 6 shard, 48 more in each
    assert [newton_schulz_peak(2, 6, tp_mode=m, partition_dim=0, ways=2, nesterov=True)
            for m in MODES] == [192, 240, 400]


@pytest.mark.parametrize("rows, cols, pdim, ways", [
    (2, 6, 0, 2), (6, 2, 0, 2), (6, 2, 1, 2), (2, 6, 1, 4), (1, 8, 0, 2), (8, 1, 1, 2),
    (3, 5, None, 1), (5, 3, None, 1), (16, 4, 0, 1), (4, 16, 1, 1), (7, 3, 0, 3),
])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nesterov", [False, True])
def test_the_peak_is_the_replayed_allocations(rows, cols, pdim, ways, mode, nesterov):
    assert newton_schulz_peak(rows, cols, tp_mode=mode, partition_dim=pdim, ways=ways,
                              nesterov=nesterov) == replayed_peak(rows, cols, mode, pdim, ways,
                                                                  nesterov)


def test_only_distributed_orients_by_the_split():
    # a 1 x 8 row shard (partition_dim 0, s = 8): blockwise keeps 1 x 8 (m = 1): 12 x 8 = 96;
    # distributed transposes it to 8 x 1 (muon_utils.py:335-336), m = 8 > n = 1:
    # 4 x 8 + max(8 x 8, 4 x 64) = 288, the Gram's 4 m^2 over 8 m n; duplicated gathers 2 x 8
    # and transposes by size: m = 2, W = 16: 12 x 16 + max(32, 16) = 224
    assert [newton_schulz_peak(1, 8, tp_mode=m, partition_dim=0, ways=2) for m in MODES] == \
        [96, 288, 224]
    # the same shard with no partition_dim (a plain parameter): every mode runs newton_schulz
    # on it as it is (muon_utils.py:317-319)
    assert {newton_schulz_peak(1, 8, tp_mode=m) for m in MODES} == {96}


# ----------------------------------------------------------------------------------------------
# The matrices of a model
# ----------------------------------------------------------------------------------------------
#: h 256, 8 heads of 32 in 2 KV groups, plain MLP f 64: Q 256 x 256, K and V 64 x 256 (the
#: split blocks of linear_qkv), proj 256 x 256, fc1 64 x 256, fc2 256 x 64
WIDE = Architecture(num_layers=2, hidden_size=256, num_attention_heads=8, num_query_groups=2,
                    kv_channels=32, ffn_hidden_size=64, vocab_size=256, swiglu=False,
                    normalization="RMSNorm", untie_embeddings_and_output_weights=True,
                    max_position_embeddings=4096, position_embedding_type="rope",
                    add_bias_linear=False)


def _workspace(arch, mode, t, nesterov=False):
    j = job(arch, t=t, optimizer="muon", muon_tp_mode=mode, muon_nesterov=nesterov,
            sharding="ddp", seq_length=128)
    vals = training_values(j.model, j.layout, j.training)
    got = [term for term in phase_transients(j, 0)["optimizer"]
           if term.key == "newton_schulz_workspace"]
    assert len(got) == 1
    return int(got[0].expr.subs(vals))


def qkv_replayed(t, mode, nesterov=False):
    """linear_qkv orthogonalized as Q, K, V (emerging_optimizers.py:407-437) at TP t."""
    groups = 2 // t                                     # local KV groups
    blocks = [("q", 256 // t), ("k", 64 // t), ("v", 64 // t)]   # rows of each block's shard
    fused = sum(r for _, r in blocks) * 256
    ev = [("+", "nesterov", 4 * fused)] if nesterov else []
    # grad.view(groups, 192, 256) (per group 4 x 32 Q rows, 32 K, 32 V) split by block, each reshape(-1, 256): a copy unless one
    # group is local (the slice is then contiguous)
    if groups > 1:
        ev += [("+", "copy_" + n, 4 * r * 256) for n, r in blocks]
    for n, r in blocks:
        ev += orthogonalize_events(r, 256, mode, 0, t, tag=n + "_")
    if groups > 1:                                      # the copies' list is rebound
        ev += [("-", "copy_" + n) for n, _ in blocks]
    ev += [("+", "cat", 4 * fused)]                     # torch.cat of the blocks' results
    return peak_of(ev)[0]


def test_the_qkv_split_replays_by_hand():
    # blockwise at t = 1: two local groups, so the blocks' copies (4 x 384 x 256 = 393216
    # bytes) stay alive under Q's own 12 x 256 x 256 = 786432
    assert qkv_replayed(1, "blockwise") == 393216 + 786432
    # at t = 2 one group is local: no copies; Q's shard 128 x 256 (12 x 32768 = 393216), the
    # V block after Q's and K's results (4 x 40960 + 12 x 8192 = 262144), the cat 8 x 49152
    assert qkv_replayed(2, "blockwise") == 393216


@pytest.mark.parametrize("t", [1, 2])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nesterov", [False, True])
def test_a_models_workspace_is_its_costliest_matrix_replayed(t, mode, nesterov):
    single = [replayed_peak(r // t if pd == 0 else r, c // t if pd == 1 else c, mode, pd, t,
                            nesterov)
              for r, c, pd in ((256, 256, 1), (64, 256, 0), (256, 64, 1))]   # proj, fc1, fc2
    want = max(single + [qkv_replayed(t, mode, nesterov)])
    assert _workspace(WIDE, mode, t, nesterov) == want


def test_a_models_workspace_by_hand():
    # t = 2: blockwise Q's shard 12 x 32768 = 393216 (proj's 256 x 128 too)
    assert _workspace(WIDE, "blockwise", 2) == 393216
    # distributed: the column-parallel K and V shards 32 x 256 run their Gram on 256 (A, B
    # 2 x 2 x 65536): V after Q's and K's results 4 x 40960, then 4 x 8192 + 262144 = 458752
    assert _workspace(WIDE, "distributed", 2) == 458752
    # duplicated: Q gathered whole 256 x 256, W = 65536, m = 256:
    # 12 x 65536 + max(2 x 65536, 4 x 65536) = 1048576 (proj the same)
    assert _workspace(WIDE, "duplicated", 2) == 1048576
    # with Nesterov the lerp of the fused QKV shard, 4 x 192 x 256 (its 192 rows at t = 2),
    # puts QKV over proj (whose own lerp is 4 x 256 x 128)
    assert _workspace(WIDE, "duplicated", 2, nesterov=True) == 1048576 + 4 * 49152
    # t = 1: two local groups, the blocks' copies 4 x 98304 under Q's 1048576
    assert _workspace(WIDE, "duplicated", 1) == 393216 + 1048576


def test_mlas_down_projections_are_gathered_as_row_shards():
    # Megatron's TELinear(parallel_mode="duplicated") (multi_latent_attention.py:526-527)
    # leaves TE's partition_dim 0 on the weight (TE linear.py:1857-1862), which orthogonalize
    # passes on (emerging_optimizers.py:403): a 384 x 1024 q_down at t = 2
    mats = [("q_down", 384, 1024, None, 1), ("router", 8, 1024, None, 1)]
    got = {m: newton_schulz_workspace(mats, tp_mode=m).evaluate({t_sym: 2, t_e_sym: 1})
           for m in MODES}
    s = 384 * 1024
    # blockwise: the weight alone, 12 s; distributed: transposed to 1024 x 384, Gram 1024:
    # 4 s + 4 x 1024^2; duplicated: the two ranks' copies stacked 768 x 1024 (W = 2 s, m 768):
    # 12 W + 4 x 768^2
    assert got == {"blockwise": 12 * s, "distributed": 4 * s + 4 * 1024 ** 2,
                   "duplicated": 24 * s + 4 * 768 ** 2}
    # the router, a plain nn.Parameter (moe/router.py:64), has no partition_dim: 12 x 8192
    alone = newton_schulz_workspace(mats[1:], tp_mode="duplicated").evaluate({t_sym: 2})
    assert alone == 12 * 8 * 1024


def test_a_models_matrices_are_what_the_workspace_reads():
    # the six per-layer matrices the replays above price (muon_matrices, split Q, K, V)
    assert [(n, r, c, sp) for n, r, c, sp, _ in muon_matrices(WIDE, False)] == [
        ("q", 256, 256, "rows"), ("k", 64, 256, "rows"), ("v", 64, 256, "rows"),
        ("proj", 256, 256, "cols"), ("fc1", 64, 256, "rows"), ("fc2", 256, 64, "cols")]


#: MLA (from test_muon_search.py): q_down 384 x 1024 and kv_down 288 x 1024
#: (replicated), q_up 768 x 384, kv_up 1024 x 256, proj 1024 x 512, fc1 5632 x 1024,
#: fc2 1024 x 2816


def test_mlas_down_projections_take_the_tp_path_in_the_step_time():
    # At t = 1 duplicated runs the same Newton-Schulz GEMMs as blockwise (one shard, the
    # whole matrix, rows <= columns) but torch.cat's the gathered shard: 8 bytes more per
    # element (read + write, muon_utils.py:330) of every weight with a partition_dim, MLA's
    # two down-projections included (TE marks them 0); no collective on one rank
    import numpy as np

    from memsym.hardware import cluster_for, gpu
    from memsym.timing.muon import muon_step_time

    dev = gpu("h100")
    shapes = {"q_down": (384, 1024), "q_up": (768, 384), "kv_down": (288, 1024),
              "kv_up": (1024, 256), "proj": (1024, 512), "fc1": (5632, 1024),
              "fc2": (1024, 2816)}
    assert {n: (r, c) for n, r, c, _, _ in muon_matrices(MLA, False)} == shapes

    def step(mode):
        return float(muon_step_time(MLA, dev, cluster_for(dev.name), 4, t=np.array(1.0), e=1,
                                    t_e=1, ndp=1, edp=1, layer_wise=False, tp_mode=mode))

    elements = sum(r * c for r, c in shapes.values())
    assert step("duplicated") - step("blockwise") == \
        pytest.approx(4 * 8 * elements / dev.hbm_bandwidth, rel=1e-9)


EO_MIRROR = "/work/.mirror/NVIDIA-NeMo+Emerging-Optimizers/repo"


@pytest.mark.torch
def test_the_source_run_on_one_rank_holds_what_memsym_counts():
    # Emerging-Optimizers' own muon_utils.py at fd77292 inside TensorParallelMuon's lines
    # (tools/muon_workspace_check.py), on a gloo group of one CPU process: the peak bytes of
    # the storages the step creates, each case against memsym (the t = 2 and 3 groups: run
    # the tool itself, python tools/muon_workspace_check.py)
    import os

    pytest.importorskip("torch")
    if not os.path.isdir(EO_MIRROR):
        pytest.skip("no Emerging-Optimizers git directory")
    import torch.distributed as dist

    from tools.muon_workspace_check import load_muon_utils, measure, memsym_peaks

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        got = measure(load_muon_utils(EO_MIRROR), dist.new_group([0]), 1)
    finally:
        dist.destroy_process_group()
    assert len(got) == 66 and got == memsym_peaks(1)
