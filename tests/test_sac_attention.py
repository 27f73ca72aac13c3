"""torchtitan's per-op SAC with the SDPA kernel off its ``_save_list`` (``sac_saves_attention``).

At torchtitan 6fc499f (the B200 MXFP8 runs of ``formulas/measured_memory.toml``)
``models/attention.py:205-211`` puts cuDNN attention first on compute capability 10.0, and the
llama3 ``_save_list`` (``models/llama3/infra/parallelize.py:234-243``) holds only the flash and
efficient SDPA ops, so the policy recomputes the attention in backward and no block keeps its
output; b39377f9f (#2095, December 2025) added the cuDNN op.  torchtitan #1196, which made
cuDNN the B200 default, printed 46.39 GiB before and 44.59 GiB after (1.8 GiB less).
"""

import pytest

from memsym.errors import InvalidValueError
from memsym.training import Layout, Training, training_memory

# Llama-3 8B: 32 layers, a = 32 heads of d_h = 128; one 8192-token sequence per GPU
LAYERS, HEADS, D_H, TAU = 32, 32, 128, 8192
COMMON = dict(seq_length=TAU, micro_batch_size=1, sharding="fsdp", recompute="selective-op",
              dropout=False, framework="torchtitan", compiled_model=True)
NONE = {"workspace": 0, "nccl": 0, "fragmentation": 0}


def test_recomputed_attention_drops_each_blocks_sdpa_output_and_logsumexp():
    saved = training_memory("llama3-8b", Layout(d=8), Training(**COMMON), allowances=NONE)
    recomputed = training_memory("llama3-8b", Layout(d=8),
                                 Training(sac_saves_attention=False, **COMMON), allowances=NONE)
    # by hand: per block the bf16 SDPA output, tau x a x d_h x 2 bytes, and its fp32
    # logsumexp, tau x a x 4 bytes: 32 x 8192 x (8192 + 128) = 2.18 GB
    per_block = TAU * HEADS * D_H * 2 + TAU * HEADS * 4
    assert per_block == 68_157_440
    for phase in ("forward", "loss-backward"):    # every block's activations alive
        assert dict(saved.phase_bytes)[phase] - dict(recomputed.phase_bytes)[phase] \
            == LAYERS * per_block
    # the optimizer step holds no activation: unchanged
    assert dict(saved.phase_bytes)["optimizer"] == dict(recomputed.phase_bytes)["optimizer"]


def test_flag_is_refused_outside_per_op_sac_and_when_not_boolean():
    with pytest.raises(InvalidValueError, match="sac_saves_attention changes only"):
        training_memory("llama3-8b", Layout(d=8), Training(
            sac_saves_attention=False, **{**COMMON, "recompute": "full", "compiled_model": False}))
    with pytest.raises(InvalidValueError, match="sac_saves_attention"):
        training_memory("llama3-8b", Layout(d=8), Training(sac_saves_attention="no", **COMMON))


def test_cli_switch_sets_it(capsys):
    from memsym.cli import main

    args = ["estimate", "llama3-8b", "--framework", "torchtitan", "--dp", "8",
            "--seq-length", "8192", "--micro-batch-size", "1", "--sharding", "fsdp",
            "--recompute", "selective-op", "--compiled-model", "--json"]
    assert main(args) == 0
    with_attention = capsys.readouterr().out
    assert main(args + ["--sac-recomputes-attention"]) == 0
    without = capsys.readouterr().out
    assert '"sac_saves_attention": false' in without and '"sac_saves_attention": false' \
        not in with_attention
