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
    refs = tomllib.loads((Path(__file__).resolve().parent.parent / "memsym" / "references.toml").read_text())
    for name in hardware.gpus():
        assert gpu(name).source in refs, name
    for name in hardware.clusters():
        assert cluster(name).source in refs, name


def test_capacity_is_the_cited_cuda_total():
    # The capacity a job is checked against is the "total capacity" PyTorch's out-of-memory
    # error prints for the card (cudaMemGetInfo, GiB with two decimals), where a report cites
    # it; each reference's title quotes the figure the catalogue uses
    import tomllib
    from fractions import Fraction
    from pathlib import Path
    refs = tomllib.loads((Path(__file__).resolve().parent.parent / "memsym" / "references.toml").read_text())
    cited = {"h100-80gb": "79.11", "a100-80gb": "79.14", "a100-40gb": "39.50", "rtx4090-24gb": "23.68"}
    for name in hardware.gpus():
        g = gpu(name)
        if name in cited:
            assert g.capacity_bytes == int(Fraction(cited[name]) * 2**30), name
            assert f"{cited[name]} GiB" in refs[g.cuda_total_source]["title"], name
            # binary-sized HBM less the driver's share: above the decimal reading, below 2^30
            assert g.memory_bytes < g.capacity_bytes < g.memory_stated * 2**30, name
        else:
            assert g.cuda_total_gib is None and g.capacity_bytes == g.memory_bytes, name
    with pytest.raises(InvalidValueError, match="cuda_total_source"):
        GPU("x-gpu", 8, "GB", 1e12, 1e12, None, None, "seed002", "test", cuda_total_gib=7.5)
    # every default capacity follows it: job, search and the CLI
    from memsym.job import job
    assert job("llama2-7b", seq_length=2048, gpu="h100-80gb").capacity == gpu("h100-80gb").capacity_bytes


def test_seed002_cluster_preset():
    # seed 002: 8 GPUs per node, NVLink 4 900 GB/s, 400 Gb/s InfiniBand = 50 GB/s per GPU;
    # the preset prices one direction, as ring collectives use the link: 900 / 2 = 450 GB/s
    dgx = cluster("dgx-h100")
    assert dgx.gpus_per_node == 8
    assert dgx.intra_node_bandwidth == 900 * 10**9 // 2
    assert dgx.inter_node_bandwidth == 400 * 10**9 // 8
    assert dgx.values()["F"] == gpu("h100-80gb").bf16


@pytest.fixture
def scratch_catalogue(monkeypatch):
    """Registrations made by a test are undone afterwards: the module's tables are swapped for
    copies that monkeypatch restores, so a second run in the same process starts clean."""
    for table in ("_GPU_TABLE", "_GPU_ALIASES", "_CLUSTER_TABLE"):
        monkeypatch.setattr(hardware, table, dict(getattr(hardware, table)))


def test_user_registration(scratch_catalogue):
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


def test_fp32_peak_is_tf32_half_of_bf16():
    # datasheets, dense TF32: A100 156 TFLOPS ("312 with sparsity"); H100 SXM 494.7 ("989");
    # MI300X 653.7; precision names go through errors.choose
    assert gpu("a100-80gb").peak("fp32") == pytest.approx(156e12)
    assert gpu("h100-80gb").peak("FP32") == pytest.approx(494.7e12)
    assert gpu("mi300x-192gb").peak("fp32") == pytest.approx(653.7e12)
    assert cluster("dgx-h100").values("fp32")["F"] == pytest.approx(494.7e12)
    with pytest.raises(UnknownNameError) as err:
        gpu("h100-80gb").peak("bf61")
    assert "bf16" in err.value.suggestions
    with pytest.raises(InvalidValueError, match="fp8"):
        gpu("a100-80gb").peak("fp8")   # no FP8 tensor cores


@pytest.mark.parametrize("name, node, expect", [
    ("h100-pcie", 8, 64e9),       # PCIe 5.0 x16, one direction (datasheet: Gen5 128 GB/s both)
    ("h100-nvl", 4, 64e9),
    ("rtx3090", 8, 32e9),         # PCIe 4.0 x16, one direction
    ("rtx-a6000", 4, 32e9),
    ("h100-pcie", 2, 300e9),      # the pair on its NVLink bridge: 600 GB/s / 2
    ("rtx3090", 2, 56.25e9),      # bridge 112.5 GB/s / 2
    ("h100-80gb", 8, 450e9),      # SXM: NVLink switch across the node
    ("rtx4090", 8, 32e9),         # no NVLink at all
])
def test_bridge_only_nvlink_uses_pcie_beyond_a_pair(name, node, expect):
    clu = hardware.cluster_for(name, node)
    assert clu.intra_node_bandwidth == pytest.approx(expect)
    assert clu.inter_node_bandwidth == 50e9


def test_gb_is_the_units_table():
    from memsym.units import UNITS
    assert hardware.GB == UNITS["GB"] == 10**9


def test_issue31_entries_from_their_datasheets():
    # per GPU, dense = "with sparsity" / 2, typed from the tables memsym/references.toml names:
    # HGX B300 (8 GPUs): BF16 36, FP8 72 PFLOPS sparse -> 2.25, 4.5 PFLOPS dense per GPU
    b300 = gpu("b300")
    assert (b300.bf16, b300.fp8) == (2250e12, 4500e12) and b300.memory_bytes == 288 * 10**9
    assert b300.fp4 is None and b300.nvlink == 1800e9 and b300.nvlink_domain is None
    # HGX B200, per GPU: FP16/BF16 4.5, FP8 9, FP4 18 PFLOPS sparse (DGX B200, 8 GPUs: FP4
    # 144 sparse, 72 dense)
    b200 = gpu("b200")
    assert (b200.bf16, b200.fp8, b200.fp4) == (4.5e15 / 2, 9e15 / 2, 18e15 / 2) == (
        2250e12, 4500e12, 72e15 / 8)
    # GB200 NVL72 (72 GPUs): BF16 360, FP8 720, FP4 1,440 PFLOPS sparse; 13.4 TB -> 186 GB
    gb200 = gpu("gb200")
    assert (gb200.bf16, gb200.fp8, gb200.fp4) == (360e15 / 72 / 2, 720e15 / 72 / 2,
                                                  1440e15 / 72 / 2)
    assert gb200.memory_bytes == 186 * 10**9 and gb200.hbm_bandwidth == 576e12 / 72
    # GB300 NVL72, dense per rack: BF16 180, FP8 360, FP4 1,080 PFLOPS
    gb300 = gpu("gb300")
    assert (gb300.bf16, gb300.fp8, gb300.fp4) == (180e15 / 72, 360e15 / 72, 1080e15 / 72)
    assert gpu("mi325x").bf16 == pytest.approx(1307.4e12) and gpu("mi325x").nvlink == 7 * 128e9
    # MI355X: 256 CUs x 2.4 GHz x 8,192 FP8 FLOP per clock (ISSCC 2026)
    assert gpu("mi355x").fp8 == pytest.approx(256 * 2.4e9 * 8192, rel=1e-5)
    assert gpu("mi355x").nvlink is None          # no citable Infinity Fabric figure
    for name in ("b300", "gb200", "gb300", "mi325x", "mi355x"):
        assert gpu(name).memory_unit == "GB" and gpu(name).capacity_note.startswith("datasheet")


def test_nvl72_domain_keeps_groups_on_nvlink():
    from memsym.timing.collectives import group_link, link_name

    rack, h100 = cluster("gb200-nvl72"), cluster("dgx-h100")
    assert (rack.gpus_per_node, rack.domain, h100.domain) == (4, 72, 8)
    # DP of 16 over TP 4: ranks 0..63 of one 72-GPU domain (stride t = 4, span 64)
    assert link_name("dp", 16, rack, t=4, c=1, d=16) == "intra"
    assert link_name("dp", 16, h100, t=4, c=1, d=16) == "inter"
    # span 4 x 32 = 128 > 72: the ring leaves the rack
    assert link_name("dp", 32, rack, t=4, c=1, d=32) == "inter"
    assert bool(group_link("ep", 72, rack.domain, t=1, t_e=1))
    assert hardware.cluster_for("gb300", 4).domain == 72
    assert hardware.cluster_for("b300", 8).domain == 8       # HGX: the node is the domain
    with pytest.raises(InvalidValueError):
        Cluster("x", gpu("gb200"), 4, 900e9, 50e9, nvlink_domain=0)


def test_gpus_command_lists_the_issue31_entries(capsys):
    import json

    from memsym.cli import main

    assert main(["gpus", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["gpus"]}
    # capacities as the vendors print them, decimal GB (no CUDA total is cited for these)
    for name, gb in (("b300", 288), ("gb200", 186), ("gb300", 279), ("mi325x-256gb", 256),
                     ("mi355x-288gb", 288)):
        assert rows[name]["capacity_bytes"] == gb * 10**9
        assert rows[name]["capacity_note"] == f"datasheet {gb} GB"
    assert rows["gb200"]["nvlink_domain"] == 72 and rows["gb300"]["fp4_tflops"] == 15000
