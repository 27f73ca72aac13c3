"""NVFP4 parameters: Megatron's ``--fp4-param-gather`` / Bridge's ``fp4_param_gather``.

Every expected number here is hand arithmetic from the sources' tensor sizes, not memsym's
output: Megatron-LM d98e8a64dd ``param_and_grad_buffer.py:1084-1187`` (the NVFP4 parameter's
packed rowwise data, ``numel/2`` uint8 bytes, is the DDP buffer's ``param_data``; the
gradient buffer keeps ``numel`` fp32 elements), ``fp4_utils.py:80-108`` (its scales and
columnwise copy stay Transformer Engine's); TE d0067d0da6 ``nvfp4_tensor.py:273-307``
(``get_scale_shape``: one E4M3 byte per 16 elements, rowwise ``(M, K/16)`` and columnwise
``(K, M/16)``, 128 x 4 padded) and ``tensor/utils.py:1451-1520`` (the columnwise data is
``(K, M/2)`` uint8, made after the all-gather); ``module/base.py:1838-1849`` (the bf16
initial value is kept on the CPU, not the GPU).
"""

from __future__ import annotations

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.search.space import refuse_unsearched
from memsym.terms.model_state import model_state
from memsym.terms.widths import byte_widths
from memsym.training import Training
from memsym.training.estimate import job_memory

from tiny_megatron import tiny_megatron_job, tiny_megatron_states

# Llama 3 8B: hidden 4096, 32 layers, vocabulary 128256, 8030261248 parameters
H, V, L, N8B = 4096, 128256, 32, 8_030_261_248


def _nvfp4_param_bytes(m: int, k: int) -> int:
    """Bytes of one NVFP4 parameter of shape (M, K) on the GPU, from TE's shapes: rowwise data
    M x K/2, rowwise scales M x K/16, columnwise data K x M/2, columnwise scales K x M/16
    (shapes that are multiples of 128 and 64: no padding)."""
    return m * k // 2 + m * k // 16 + k * m // 2 + k * m // 16


def test_one_nvfp4_parameter_is_its_rowwise_and_columnwise_bytes():
    # a 4096 x 4096 projection: 8388608 + 1048576 bytes each way, no bf16 copy
    assert _nvfp4_param_bytes(H, H) == 18_874_368
    tot = model_state(precision="fp4", fp4_param_gather=True, params=H * H, dp=8).subs(
        byte_widths(precision="fp4", fp4_param_gather=True))
    parts = {term.key: term.expr for term in tot.terms}
    assert parts["weights"] == 0 and parts["fp8_weights"] == 18_874_368
    # beside it: the fp32 gradient buffer whole (4 B) and the fp32 main shard + Adam over d = 8
    assert parts["gradients"] == 4 * H * H and parts["optimizer"] == 12 * H * H // 8


def test_without_the_flag_the_bf16_weight_stays_beside_the_copies():
    tot = model_state(precision="fp4", params=H * H, dp=8).subs(byte_widths(precision="fp4"))
    parts = {term.key: term.expr for term in tot.terms}
    assert parts["weights"] == 2 * H * H and parts["fp8_weights"] == 18_874_368


def test_a_job_keeps_only_the_embeddings_and_norms_in_bf16():
    """Llama 3 8B, untied: the embedding and output rows (2 x 128256 x 4096) and 65 RMSNorm
    weights stay bf16; the other 6979321856 parameters are linear weights, 9/8 B each."""
    lin = N8B - 2 * V * H - (2 * L + 1) * H
    assert lin == 6_979_321_856
    j = job("llama3-8b", tp=1, dp=8, seq_length=8192, micro_batch_size=1, precision="fp4",
            fp4_param_gather=True, global_batch_size=128)
    parts = job_memory(j).breakdown()
    assert int(parts["weights"]) == 2 * (2 * V * H + (2 * L + 1) * H) == 2_101_878_784
    assert int(parts["fp8_weights"]) == lin * 9 // 8 == 7_851_737_088
    before = job_memory(job("llama3-8b", tp=1, dp=8, seq_length=8192, micro_batch_size=1,
                            precision="fp4", global_batch_size=128)).breakdown()
    assert int(before["weights"] - parts["weights"]) == 2 * lin     # the bf16 copy dropped


def test_megatron_flags_read_the_nvfp4_parameters():
    st = tiny_megatron_states("--fp4-format e2m1 --fp4-param-gather")
    assert (st.precision, st.fp4_param_gather) == ("fp4", True)
    with pytest.raises(InvalidValueError, match="--fp4-format"):     # validate_args 1104
        tiny_megatron_job("--fp4-param-gather")
    with pytest.raises(InvalidValueError, match="distributed-optimizer"):
        tiny_megatron_job("--fp4-format e2m1 --fp4-param-gather", distributed_optimizer=False)


def test_bridge_recipes_read_fp4_param_gather():
    """bf16_with_nvfp4_mixed sets fp4_param_gather True (mixed_precision.py:416); a recipe's
    own False (deepseek_v3 b200 nvfp4) and an override are kept."""
    _, opts, _ = bridge_job_options(read_bridge_recipe("llama3_70b_pretrain_64gpu_gb300_nvfp4_config"))
    assert opts["precision"] == "fp4" and opts["fp4_param_gather"] is True
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        "llama3_70b_pretrain_64gpu_gb300_nvfp4_config",
        ["mixed_precision.fp4_param_gather=False"]))
    assert opts["precision"] == "fp4" and "fp4_param_gather" not in opts
    # without the distributed optimizer: both sections' flags off (Bridge turns both on when
    # either is, training/config.py:2101-2123 at 067f987df0)
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "llama3_70b_pretrain_64gpu_gb300_nvfp4_config", ["ddp.use_distributed_optimizer=False",
                                                         "optimizer.use_distributed_optimizer=False"]))
    assert "fp4_param_gather" not in opts and any("fp4_param_gather" in n for n in notes)


def test_the_option_and_the_keyword_are_one_job(capsys):
    args = ["estimate", "llama3-8b", "--dp", "8", "--seq-length", "8192", "--precision", "fp4",
            "--fp4-param-gather", "--json"]
    assert main(args) == 0
    import json

    got = json.loads(capsys.readouterr().out)
    assert got["training"]["fp4_param_gather"] is True
    assert got["bytes"]["weights"] == 2_101_878_784
    assert not any(d["option"] == "fp4_param_gather" for d in got["defaults"])
    assert main(args[:-2] + ["--json"]) == 0            # not given: reported as a default
    got = json.loads(capsys.readouterr().out)
    assert any(d["option"] == "fp4_param_gather" and d["value"] is False for d in got["defaults"])


def test_refused_where_it_is_not_modelled():
    with pytest.raises(InvalidValueError, match="fp4_param_gather"):
        byte_widths(precision="bf16", fp4_param_gather=True)
    with pytest.raises(InvalidValueError, match="fp4_param_gather"):
        byte_widths("ddp", precision="fp4", fp4_param_gather=True)
    with pytest.raises(InvalidValueError, match="fp4_param_gather"):
        job("llama3-8b", dp=8, precision="bf16", fp4_param_gather=True)
    with pytest.raises(InvalidValueError, match="fp4_param_gather"):   # the search prices bf16 weights
        refuse_unsearched(Training(precision="fp4", fp4_param_gather=True))
