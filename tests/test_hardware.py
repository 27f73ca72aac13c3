"""The GPU catalogue and cluster presets (issue 4): vendor datasheet numbers, typed by hand."""

from __future__ import annotations

import pytest

from memsym import hardware
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.hardware import GPU, Cluster, cluster, gpu, register_cluster, register_gpu

REQUIRED = ("a100-40gb", "a100-80gb", "h100-80gb", "h100-pcie-80gb", "h100-nvl-94gb",
            "h200-141gb", "b200", "rtx3090-24gb", "rtx4090-24gb", "rtx-a6000-48gb",
            "l40s-48gb", "mi300x-192gb")


def test_catalogue_has_the_issue_gpus():
    for name in REQUIRED:
        assert gpu(name).name == name


def test_datasheet_numbers():
    # H100 SXM datasheet: BF16 1,979 TFLOPS with sparsity -> 989.4 dense; FP8 3,958 -> 1978.9
    h100 = gpu("h100-80gb")
    assert h100.bf16 == pytest.approx(989.4e12) and h100.fp8 == pytest.approx(1978.9e12)
    assert h100.nvlink == 900e9 and h100.memory_bytes == 80 * 10**9 and h100.memory_unit == "GB"
    assert gpu("a100-80gb").bf16 == 312e12 and gpu("a100-80gb").fp8 is None
    assert gpu("h200-141gb").memory_bytes == 141 * 10**9
    assert gpu("l40s-48gb").bf16 == pytest.approx(362.05e12)
    assert gpu("mi300x-192gb").bf16 == pytest.approx(1307.4e12)
    with pytest.raises(InvalidValueError):
        gpu("a100-80gb").peak("fp8")


def test_names_case_insensitive_and_suggestions():
    assert gpu("H100-80GB") is gpu("h100-80gb") is gpu("h100")
    with pytest.raises(UnknownNameError) as err:
        gpu("h200-141")
    assert "h200-141gb" in err.value.suggestions
    with pytest.raises(UnknownNameError):
        cluster("dgx-h10")


def test_every_source_is_a_reference():
    import tomllib
    from pathlib import Path
    refs = tomllib.loads((Path(__file__).resolve().parent.parent / "formulas" / "references.toml").read_text())
    for name in hardware.gpus():
        assert gpu(name).source in refs, name
    for name in hardware.clusters():
        assert cluster(name).source in refs, name


def test_seed002_cluster_preset():
    # seed 002: 8 GPUs per node, NVLink 4 900 GB/s, 400 Gb/s InfiniBand = 50 GB/s per GPU;
    # the preset prices one direction, as ring collectives use the link: 900 / 2 = 450 GB/s
    dgx = cluster("dgx-h100")
    assert dgx.gpus_per_node == 8
    assert dgx.intra_node_bandwidth == 900 * 10**9 // 2
    assert dgx.inter_node_bandwidth == 400 * 10**9 // 8
    assert dgx.values()["F"] == gpu("h100-80gb").bf16


def test_user_registration():
    mine = GPU("test-gpu-32gb", 32, "GiB", 100e12, 100e12, None, None, "seed002", "hand")
    register_gpu(mine)
    assert gpu("Test-GPU-32GB").memory_bytes == 32 * 2**30
    with pytest.raises(InvalidValueError):
        register_gpu(mine)
    register_cluster(Cluster("test-cluster", mine, 4, 64e9, 12.5e9))
    assert cluster("test-cluster").gpu is mine
    with pytest.raises(InvalidValueError):
        GPU("bad", 0, "GB", 1, 1, None, None, "seed002", "")
    with pytest.raises(InvalidValueError):
        GPU("bad", 16, "gb", 1, 1, None, None, "seed002", "")
    with pytest.raises(InvalidValueError):
        Cluster("bad", mine, 0, 1, 1)
