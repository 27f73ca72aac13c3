"""FSDP2's side-stream pools in the reserved and device counts (issue 30).

PyTorch's caching allocator re-uses a freed block only on the stream that allocated it
(c10/cuda/CUDACachingAllocator.cpp, its opening comment).  FSDP2 allocates the reduce-scatter
outputs, the sharded gradients, under its reduce-scatter stream (``foreach_reduce``) and the
all-gather outputs under its copy-in stream (``foreach_all_gather``), freeing a group's only
after the next group's all-gather in forward (``AllGatherState``).  So under torchtitan, whose
step starts with ``zero_grad()``, the gradients' blocks stay reserved through the forward and
the loss's backward, where the peak is, and the copy-in pool holds two consecutive groups.
"""

from fractions import Fraction

from memsym.training import Layout, Training, training_memory

MIB = 2 ** 20
# Llama-3 8B: 8030261248 parameters, V = 128256, h = 4096, a block of 218112000; FSDP2 over
# 8 GPUs (every dim-0 divisible by 8: no padding), one 8192-token sequence, compiled per-op SAC
JOB = dict(seq_length=8192, micro_batch_size=1, sharding="fsdp", recompute="selective-op",
           compiled_model=True, dropout=False, framework="torchtitan")


def _estimate(metric, **allowances):
    return training_memory("llama3-8b", Layout(d=8), Training(metric=metric, **JOB),
                           allowances=allowances or None)


def test_pools_are_the_gradient_shard_and_two_groups_by_hand():
    reserved = _estimate("reserved")
    grp = reserved.grouped()
    # fp32 reduce-scatter outputs: 4 bytes x 8030261248 / 8
    assert grp["reduce_scatter_pool"] == 4 * 8030261248 // 8 == 4015130624
    # bf16 all-gather outputs of the [norm, output] group (V h + h) with the last block
    assert grp["all_gather_pool"] == 2 * (128256 * 4096 + 4096 + 218112000) == 1486905344
    # the gradients are in the pool, not among the states
    assert "gradients" not in grp


def test_reserved_is_the_margin_on_the_default_stream_plus_the_pools():
    # the peak is the loss's backward, where no gradient exists: the default stream's peak is
    # the allocated count's, less its 64 MiB of workspaces; the 10 % margin is on it alone
    allocated = _estimate("allocated")
    reserved = _estimate("reserved")
    assert allocated.phase == reserved.phase == "loss-backward"
    default_peak = allocated.bytes_total - 64 * MIB
    pools = 4015130624 + 1486905344
    assert reserved.bytes_total == default_peak * Fraction(11, 10) + 64 * MIB + pools
    # nothing of it in the allocated count
    assert "reduce_scatter_pool" not in allocated.grouped()


def test_device_count_holds_them_too_and_megatron_has_none():
    device = _estimate("device", fragmentation=0)
    reserved = _estimate("reserved", fragmentation=0)
    # reserved + the CUDA context (500 MiB) and NCCL's buffers (512 MiB), outside the allocator
    assert device.bytes_total - reserved.bytes_total == (500 + 512) * MIB
    megatron = training_memory("llama3-8b", Layout(d=8), Training(
        seq_length=8192, micro_batch_size=1, metric="reserved"))
    assert "reduce_scatter_pool" not in megatron.grouped()
