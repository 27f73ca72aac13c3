"""GPUs and clusters: memory, peak dense FLOP/s and link bandwidths, each with its source.

Names are lower-case with hyphens, like the model presets (``a100-80gb``, ``h100-80gb``,
``h200-141gb``) and are matched case-insensitively; a miss raises
:class:`~memsym.errors.UnknownNameError` with the closest names.  Users add their own with
:func:`register_gpu` / :func:`register_cluster`.

Units, stated as the vendor states them
---------------------------------------
* Memory: every vendor datasheet here prints "GB".  memsym stores ``memory_bytes`` as that
  figure times 10^9 (``memory_unit = "GB"``).  The HBM parts are in fact binary-sized
  (an A100 80GB has 80 GiB = 85.9e9 bytes; nvidia-smi shows 81920 MiB), and the driver keeps
  part of it.  What a job can use is the total ``cudaMemGetInfo`` reports, which PyTorch
  prints in every out-of-memory error as "GPU 0 has a total capacity of X GiB"
  (c10/cuda/CUDACachingAllocator.cpp; two decimals).  Where a public report gives that total
  for a catalogue GPU (``cuda_total_gib``, cited in ``cuda_total_source``), it is the capacity
  memsym checks a job against (:attr:`GPU.capacity_bytes`): an H100 80GB reports 79.11 GiB =
  84.9e9 bytes, 6 % above the decimal 80e9.  Elsewhere the capacity is the datasheet's decimal
  figure, the conservative reading.  The CUDA context counts inside that total, so memsym's
  ``workspace`` allowance (which holds it) is subtracted from it, as on the device.  Give
  ``--gpu-memory 80GB`` (Python ``capacity=80 * GB``) for the datasheet reading, as the
  rules of thumb that size GPUs from parameter counts do.
* Peak FLOP/s: **dense** tensor-core throughput (the datasheets' "with sparsity" figures
  halved), in FLOP/s, for BF16, FP16 and FP8 (None where the GPU has no FP8 tensor cores).
  Consumer cards are quoted with FP32 accumulation, the mode used for training.
* FP32 training: its matrix multiplies run on the tensor cores in TF32 (PyTorch with
  ``torch.backends.cuda.matmul.allow_tf32 = True`` or ``set_float32_matmul_precision("high")``;
  cuDNN convolutions by default), and every datasheet here prints a dense TF32 peak of half
  its BF16 peak (A100 156 / 312, H100 SXM 494.7 / 989.4 TFLOPS, RTX 3090 35.6 / 71, MI300X
  653.7 / 1307.4), so ``peak("fp32")`` is half the BF16 peak.  With TF32 off, matrix
  multiplies run on the CUDA cores at the much lower FP32 peak (H100 SXM 67 TFLOPS): give
  the efficiency accordingly.
* NVLink: the vendor's figure, the **sum of both directions** per GPU (H100: 900 GB/s =
  450 GB/s each way); None where there is no NVLink.  nccl-tests' bus bandwidth is one
  direction, so a measured ``busbw`` is compared with half of it.  On the PCIe cards
  (H100 PCIe and NVL, RTX 3090, RTX A6000) NVLink is a bridge joining **two** GPUs; a
  node of more than two of them talks over PCIe (:func:`cluster_for`).
* PCIe x16, per direction: 4.0 (16 GT/s a lane, 128b/130b) 31.5 GB/s, quoted 32 GB/s;
  5.0 (32 GT/s) 63 GB/s, quoted 64 GB/s — half the "64 / 128 GB/s" the datasheets print for
  both directions (H100 PCIe: "PCIe Gen5 128 GB/s").
* Timing data (issue 17, :mod:`memsym.timing`): ``hbm_bandwidth`` (datasheet memory
  bandwidth, bytes/s, pricing memory-bound operations), ``sm_count`` (the wave size of a
  GEMM's tiles) and ``arch_class`` (the key of the calibrated GEMM ceiling in
  :data:`memsym.timing.efficiency.GEMM_CEILING`).
* Cluster presets price links **per direction**, as a ring collective uses them (every rank
  sends and receives at once; nccl-tests' bus bandwidth is per direction): NVLink at half the
  vendor figure (H100: 450 GB/s) and 400 Gb/s InfiniBand = 50 GB/s per GPU.  Seed 002 divides
  by the both-direction 900 GB/s ("about 10 ms" for 7.5 GB), which is 2x optimistic; pass
  ``intra_node_bandwidth=900e9`` (``--intra-node-bandwidth 900``) to reproduce it.

References
----------
Vendor datasheets: NVIDIA A100 (2021), H100 (2023), H200 (2024), HGX/DGX B200 (2024),
L40S (2023), RTX A6000 (2020); NVIDIA Ampere GA102 and Ada Lovelace whitepapers (RTX
3090 / 4090); AMD Instinct MI300X data sheet (2023); DGX H100 / A100 user guides (cluster tiers).  Issue 31:
HGX B300 and Blackwell Ultra (2025), GB200 NVL72 (2024), GB300 NVL72 (2025), AMD Instinct
MI325X (2024) and MI355X (2025), each read where its ``memsym/references.toml`` entry says
(public copies where the vendor page was not readable here).

NVLink domains
--------------
An NVL72 rack (GB200, GB300) joins 72 GPUs on one NVLink switch domain although a compute
tray (the node the job launcher sees) holds 4: ``GPU.nvlink_domain`` and
``Cluster.nvlink_domain`` carry the 72, and :attr:`Cluster.domain` (not ``gpus_per_node``)
decides whether a group's collectives stay on NVLink (:mod:`memsym.timing.collectives`).
"""

from __future__ import annotations


from .devices import FP32_PEAK_NOTE, GB, GPU, PRECISIONS, TFLOPS, Cluster
from .errors import InvalidValueError, UnknownNameError, catalogue_key

__all__ = ["GPU", "Cluster", "gpu", "cluster", "gpus", "clusters", "register_gpu",
           "register_cluster", "GB", "TFLOPS", "PRECISIONS", "FP32_PEAK_NOTE",
           "KERNEL_FRACTION", "kernel_fraction"]


def _nv(name, mem, bf16_tf, fp8_tf, nvlink_gb, locator, note="", aliases=(), source=None,
        bridge=False, pcie_gb=32, fp4_tf=None, domain=None):
    hbm_gb, sms, klass = _TIMING[name]
    total, total_src = _CUDA_TOTAL.get(name, (None, None))
    return GPU(name, mem, "GB", bf16_tf * TFLOPS, bf16_tf * TFLOPS,
               None if fp8_tf is None else fp8_tf * TFLOPS,
               None if nvlink_gb is None else nvlink_gb * GB,
               source or "nvidia-datasheets", locator, note, tuple(aliases), bridge, pcie_gb * GB,
               hbm_gb * GB, sms, klass, total, total_src,
               None if fp4_tf is None else fp4_tf * TFLOPS, domain, _COMPUTE_CAPABILITY.get(name))


# REF: nvidia-cuda-gpus (NVIDIA's "CUDA GPUs: Compute Capability" table): A100 8.0, RTX 3090
# and RTX A6000 8.6, RTX 4090 and L40S 8.9, H100 and H200 9.0, B200 and GB200 10.0, B300 and
# GB300 10.3.  GPU.non_tn_fp8_gemm reads it as Transformer Engine does (FP8 GEMMs in any
# layout from 10.0: no FP8 transpose is kept).  AMD parts have none.
_COMPUTE_CAPABILITY = {
    "a100-40gb": (8, 0), "a100-80gb": (8, 0), "rtx3090-24gb": (8, 6), "rtx-a6000-48gb": (8, 6),
    "rtx4090-24gb": (8, 9), "l40s-48gb": (8, 9), "h100-80gb": (9, 0), "h100-pcie-80gb": (9, 0),
    "h100-nvl-94gb": (9, 0), "h200-141gb": (9, 0), "b200": (10, 0), "gb200": (10, 0),
    "b300": (10, 3), "gb300": (10, 3),
}


# REF: PyTorch's out-of-memory message, "GPU 0 has a total capacity of X GiB" (cudaMemGetInfo's
# total, two decimals), as public reports print it for these GPUs: one cited report each.  The
# total moves a little with the driver and board (H100 80GB: 79.10 GiB in huggingface/trl#2688,
# 79.11 in vllm-project/vllm#27508), far less than the fragmentation allowance keeps back.
# GPUs not listed have no report cited and keep the datasheet's decimal figure.
_CUDA_TOTAL = {  # name -> (GiB, reference key)
    "h100-80gb": (79.11, "cuda-total-h100"),
    "a100-80gb": (79.14, "cuda-total-a100-80gb"),
    "a100-40gb": (39.50, "cuda-total-a100-40gb"),
    "rtx4090-24gb": (23.68, "cuda-total-rtx4090"),
}


# REF: vendor datasheets (memory bandwidth) and architecture whitepapers (SM counts):
# A100 datasheet (2021): 40GB SXM 1,555 GB/s, 80GB SXM 2,039 GB/s; 108 SMs (Ampere GA100
# whitepaper).  H100 datasheet (2023): SXM 3.35 TB/s, PCIe 2 TB/s, NVL 3.9 TB/s; 132 SMs (SXM5),
# 114 (PCIe) (Hopper whitepaper).  H200 datasheet (2024): 4.8 TB/s, 132 SMs.  DGX B200 datasheet:
# 64 TB/s for 8 GPUs = 8 TB/s; 148 SMs.  GA102 whitepaper: RTX 3090 936 GB/s, 82 SMs; Ada
# whitepaper: RTX 4090 1,008 GB/s, 128 SMs; RTX A6000 datasheet 768 GB/s, 84 SMs; L40S
# datasheet 864 GB/s, 142 SMs; MI300X data sheet 5.3 TB/s, 304 CUs.
_TIMING = {  # name -> (HBM GB/s, SMs, efficiency class)
    "a100-40gb": (1555, 108, "ampere"), "a100-80gb": (2039, 108, "ampere"),
    "h100-80gb": (3350, 132, "hopper"), "h100-pcie-80gb": (2000, 114, "hopper"),
    "h100-nvl-94gb": (3900, 132, "hopper"), "h200-141gb": (4800, 132, "hopper"),
    "b200": (8000, 148, "blackwell"), "rtx3090-24gb": (936, 82, "ampere"),
    "rtx4090-24gb": (1008, 128, "ada"), "rtx-a6000-48gb": (768, 84, "ampere"),
    "l40s-48gb": (864, 142, "ada"), "mi300x-192gb": (5300, 304, "cdna3"),
    # Blackwell / Blackwell Ultra and CDNA 3 / 4 (issue 31).  HBM: B300 and GB300 8 TB/s
    # ("Inside NVIDIA Blackwell Ultra", NVIDIA technical blog 2025: "8 TB/s per GPU"); GB200
    # 576 TB/s per NVL72 rack / 72 = 8 TB/s (GB200 NVL72 page); MI325X 6 TB/s, MI355X 8 TB/s
    # (AMD).  SMs: Blackwell Ultra 160 (the blog: "160 Streaming Multiprocessors"), GB200's
    # Blackwell the 148 of b200; CUs from ROCm's GPU specifications table (MI325X 304,
    # MI355X 256).  Classes: B200 and GB200 (Blackwell) share GEMM_CEILING's blackwell
    # ceilings; B300 and GB300 are Blackwell Ultra, their own class blackwell-ultra: NVIDIA
    # sells it as a distinct GPU ("Inside NVIDIA Blackwell Ultra": 160 SMs to 148, twice the
    # SFU exponential rate for attention) run at a higher power envelope (GB300 1,400 W,
    # GB200 1,200 W: the clocks a GEMM sustains at the same datasheet peak), each class's
    # ceilings fixed on Megatron-Bridge runs of its own (docs/time-accuracy.md; the split was
    # made after GB300's FP8 errors were seen).  No CDNA run is calibrated (cdna3 carries
    # Hopper's calibrated ceiling); CDNA 4 (MI355X) is priced as cdna3, the nearest class, an
    # assumption its entry states.
    "b300": (8000, 160, "blackwell-ultra"), "gb200": (8000, 148, "blackwell"),
    "gb300": (8000, 160, "blackwell-ultra"), "mi325x-256gb": (6000, 304, "cdna3"),
    "mi355x-288gb": (8000, 256, "cdna3"),
}


# REF: tileops-moe-permute (tile-ai/TileOPs pull request #2125, "Parallelize staged token
# movement", Benchmark, MoePrePermuteFwdOp): the MoE token permute, a gather of each token's
# hidden row into expert order, shape (tokens 4096, top-k 8, experts 128, hidden 7168), bf16,
# on an NVIDIA H200: 0.220384 ms, printed as 2.399 TB/s = (4096 + 4096 x 8) rows x 7168 x 2
# bytes / 0.220384 ms, against the H200 datasheet's 4.8 TB/s: 0.4998; the vLLM Triton kernel
# beside it, 0.274944 ms, reaches 0.40.  A row gather (copies addressed by an index, one
# 14 KB row per slot) reaches half of the HBM bandwidth a streaming kernel does.  Per
# efficiency class where a measurement is published: only Hopper's is; the other classes
# take it (an assumption: no Ampere or Blackwell measurement of a permute kernel was found).
# REF: rocm-te-mxfp8-quantize (ROCm/TransformerEngine pull request #598, "Mxfp8 grouped and
# multi quantize", Single Kernel Optimization Results, CAST_ONLY, column "B200 (us)": NVIDIA
# Transformer Engine's MXFP8 quantize kernel timed on a B200 beside the ROCm port): BF16 input
# 8192 x 8192, both directions (row-wise and column-wise FP8 copies, an E8M0 scale per 32
# elements each), 52.34 us.  The kernel reads 2 bytes an element and writes 1 + 1 and
# 2 x 1/32 scale bytes: (4 + 1/16) x 8192^2 bytes = 272,629,760 bytes / 52.34 us = 5.209 TB/s,
# against the B200's 8 TB/s: 0.6511 (row-wise alone, 34.84 us: (3 + 1/32) x 8192^2 bytes,
# 5.839 TB/s, 0.730).  memsym prices Transformer Engine's MXFP8 casts both ways (two copies,
# memsym.timing.quantize.cast_copies), so the both-directions figure.  Per efficiency class
# where a measurement is published: only Blackwell's is; blackwell-ultra takes it (an
# assumption: no B300 / GB300 measurement was found); Hopper and older have no MXFP8.
#: Measured kernels' fraction of the datasheet HBM bandwidth: kernel -> (the class measured,
#: its fraction, the source: a key of memsym/references.toml and the locator).  Every other
#: class takes the one measurement (stated, not measured).
KERNEL_FRACTION = {
    "gather": ("hopper", 2.399 / 4.8, ("tileops-moe-permute", "PR #2125, Benchmark, "
               "MoePrePermuteFwdOp, row (4096, 8, 128, 7168) bfloat16: 0.220384 ms, 2.399 TB/s, "
               "H200")),
    "cast": ("blackwell", (4 + 1 / 16) * 8192 ** 2 / 52.34e-6 / 8e12, ("rocm-te-mxfp8-quantize",
             "PR #598, Single Kernel Optimization Results, CAST_ONLY, BF16 both 8192x8192: "
             "B200 52.34 us")),
}


def kernel_fraction(kernel: str) -> float:
    r"""Fraction of the datasheet HBM bandwidth a memory-bound kernel is measured at [1].

    .. math:: f = \frac{\text{bytes moved}}{t\, B_{datasheet}}

    ``"gather"``: the MoE dispatcher's token permute, chunk sort and unpermute, which copy
    whole hidden rows by an index ((4096 + 4096 x 8) rows x 7168 x 2 bytes in 0.220384 ms on
    an H200, 2.399 of 4.8 TB/s); ``"cast"``: Transformer Engine's MXFP8 quantize, reading the
    bf16 tensor and writing a row-wise and a column-wise FP8 copy with an E8M0 scale per 32
    elements each ((2 + 2 + 2/32) x 8192^2 bytes in 52.34 us on a B200 of 8 TB/s).  One
    published measurement each (:data:`KERNEL_FRACTION`, with the class it was measured on);
    every GPU class takes it (stated, not measured).

    Parameters
    ----------
    kernel : {"gather", "cast"}
        The kernel [1].

    Returns
    -------
    float
        The fraction [1].

    Examples
    --------
    >>> round(kernel_fraction("gather"), 4), round(kernel_fraction("cast"), 4)
    (0.4998, 0.6511)

    References
    ----------
    .. [tileops-moe-permute] tile-ai/TileOPs PR #2125 (MoePrePermuteFwdOp on an H200).
    .. [rocm-te-mxfp8-quantize] ROCm/TransformerEngine PR #598 (CAST_ONLY, the B200 column).
    """
    return KERNEL_FRACTION[kernel][1]


# REF: vendor datasheets (dense = "with sparsity" / 2).  Each locator names the document.
_GPUS = [
    _nv("a100-40gb", 40, 312, None, 600, "A100 datasheet (2021), SXM: BF16/FP16 312 TFLOPS, NVLink 600 GB/s",
        "SXM4; no FP8 tensor cores", ("a100-sxm-40gb",)),
    _nv("a100-80gb", 80, 312, None, 600, "A100 datasheet (2021), SXM: BF16/FP16 312 TFLOPS, NVLink 600 GB/s",
        "SXM4; no FP8 tensor cores", ("a100-sxm-80gb",)),
    _nv("h100-80gb", 80, 989.4, 1978.9, 900,
        "H100 datasheet (2023), SXM: BF16 1,979 / FP8 3,958 TFLOPS with sparsity; NVLink 900 GB/s",
        "SXM5", ("h100-sxm-80gb", "h100", "h100-sxm")),
    _nv("h100-pcie-80gb", 80, 756.5, 1513, 600,
        "H100 datasheet (2023), PCIe: BF16 1,513 / FP8 3,026 TFLOPS with sparsity; NVLink bridge 600 GB/s",
        "PCIe; NVLink only through a 2-GPU bridge", ("h100-pcie",), bridge=True, pcie_gb=64),
    _nv("h100-nvl-94gb", 94, 835.5, 1670.5, 600,
        "H100 datasheet (2023), H100 NVL: BF16 1,671 / FP8 3,341 TFLOPS with sparsity; NVLink 600 GB/s",
        "PCIe dual-slot, NVLink bridge", ("h100-nvl",), bridge=True, pcie_gb=64),
    _nv("h200-141gb", 141, 989.5, 1979, 900,
        "H200 datasheet (2024), SXM: BF16 1,979 / FP8 3,958 TFLOPS with sparsity; NVLink 900 GB/s",
        "SXM; same compute as H100 SXM", ("h200", "h200-sxm-141gb")),
    _nv("b200", 180, 2250, 4500, 1800,
        "HGX B200 datasheet (2024): FP16/BF16 4.5 / FP8 9 / FP4 18 PFLOPS with sparsity per GPU; "
        "180 GB; NVLink 5 1.8 TB/s (DGX B200: FP4 144 PFLOPS sparse, 72 dense, for 8 GPUs)",
        "HGX B200 (1,000 W); announced as 192 GB, the HGX/DGX datasheets list 180 GB per GPU",
        ("b200-180gb",), fp4_tf=9000),
    _nv("rtx3090-24gb", 24, 71, None, 112.5,
        "NVIDIA Ampere GA102 whitepaper, RTX 3090: FP16/BF16 tensor with FP32 accumulate 71 TFLOPS dense; "
        "NVLink bridge 112.5 GB/s", "GeForce: FP32-accumulate rate is half the FP16-accumulate rate",
        ("rtx-3090", "rtx3090", "3090"), source="nvidia-ga102", bridge=True),
    _nv("rtx4090-24gb", 24, 165.2, 330.3, None,
        "NVIDIA Ada Lovelace whitepaper, RTX 4090: FP16/BF16 with FP32 accumulate 165.2, FP8 330.3 TFLOPS dense",
        "GeForce; no NVLink (PCIe 4.0 x16)", ("rtx-4090", "rtx4090", "4090"), source="nvidia-ada"),
    _nv("rtx-a6000-48gb", 48, 154.8, None, 112.5,
        "RTX A6000 datasheet (2020): tensor 309.7 TFLOPS with sparsity; NVLink bridge 112.5 GB/s",
        "workstation Ampere", ("rtx-a6000", "a6000"), bridge=True),
    _nv("l40s-48gb", 48, 362.05, 733, None,
        "L40S datasheet (2023): BF16/FP16 362.05 (733 sparse), FP8 733 (1,466 sparse) TFLOPS",
        "PCIe 4.0 x16, no NVLink", ("l40s",)),
    _nv("mi300x-192gb", 192, 1307.4, 2614.9, 896,
        "AMD Instinct MI300X data sheet (2023): FP16/BF16 1307.4, FP8 2614.9 TFLOPS dense; "
        "Infinity Fabric 7 x 128 GB/s", "AMD; 'nvlink' holds the Infinity Fabric aggregate",
        ("mi300x",), source="amd-mi300x"),
    # --- issue 31: Blackwell Ultra, the NVL72 racks, CDNA 3 refresh and CDNA 4.  Where a
    # vendor page could not be read here the entry names the public copy its figures were
    # read from (memsym/references.toml); figures found in no source are left out.
    _nv("b300", 288, 2250, 4500, 1800,
        "NVIDIA HGX platform page, HGX B300 column (8 GPUs): FP16/BF16 36 / FP8 72 PFLOPS with "
        "sparsity, NVLink GPU-to-GPU 1.8 TB/s, networking 1.6 TB/s; 288 GB HBM3e and 8 TB/s "
        "per GPU ('Inside NVIDIA Blackwell Ultra')",
        "HGX B300 (Blackwell Ultra SXM); dense = sparse / 2 per GPU; FP4 left out (the HGX "
        "B300 dense FP4 figure differs between the copies read: 13.5 and 14 PFLOPS); timing "
        "class blackwell-ultra (its fp8 ceiling fixed on a GB300 run; docs/time-accuracy.md)",
        ("b300-288gb", "hgx-b300"), source="nvidia-blackwell-ultra"),
    _nv("gb200", 186, 2500, 5000, 1800,
        "NVIDIA GB200 NVL72 page, rack of 72 GPUs: FP16/BF16 360 / FP8 720 / FP4 1,440 PFLOPS "
        "with sparsity; up to 13.4 TB HBM3e (186 GB per GPU), 576 TB/s; NVLink 1.8 TB/s per GPU "
        "in one 72-GPU domain",
        "Blackwell in a GB200 superchip (1,200 W); per GPU = rack / 72, dense = sparse / 2; "
        "NVLink domain 72 (4 GPUs per compute tray); timing class blackwell (its "
        "ceilings fixed on B200 and GB200 runs; docs/time-accuracy.md)",
        ("gb200-186gb",), source="nvidia-gb200-nvl72", fp4_tf=10000, domain=72),
    _nv("gb300", 279, 2500, 5000, 1800,
        "NVIDIA GB300 NVL72 page, rack of 72 GPUs: FP16/BF16 180, FP8 360, FP4 1,080 PFLOPS "
        "dense, 20 TB HBM3e at 576 TB/s, NVLink 130 TB/s (1.8 TB/s per GPU, one 72-GPU domain); "
        "per GPU 279 GB HBM3E, 8 TB/s; 'Inside NVIDIA Blackwell Ultra': 15 PFLOPS dense NVFP4",
        "Blackwell Ultra in a GB300 superchip (1,400 W); the GB300 rack lists 279 GB per GPU "
        "of the chip's 288 GB (the lower, conservative figure is kept); NVLink domain 72; "
        "timing class blackwell-ultra (its fp8 ceiling fixed on a GB300 run; "
        "docs/time-accuracy.md)",
        ("gb300-279gb",), source="nvidia-gb300-nvl72", fp4_tf=15000, domain=72),
    _nv("mi325x-256gb", 256, 1307.4, 2614.9, 896,
        "AMD Instinct MI325X: FP16/BF16 1307.4, FP8 2614.9 TFLOPS dense (the MI300X's CDNA 3 "
        "compute: 304 CUs at 2,100 MHz); 256 GB HBM3E, 6 TB/s; 7 Infinity Fabric links, drop-in "
        "for the MI300X platform (7 x 128 GB/s)",
        "AMD; memory as AMD prints it (GB; ROCm's table lists 256 GiB); 'nvlink' holds the "
        "Infinity Fabric aggregate; timing class cdna3 = Hopper's calibrated ceiling "
        "(assumption)", ("mi325x",), source="amd-mi325x", pcie_gb=64),
    _nv("mi355x-288gb", 288, 2516.6, 5033.2, None,
        "AMD Instinct MI355X: FP8 5033.2 TFLOPS dense = 256 CUs x 2,400 MHz x 8,192 FLOP per "
        "clock and CU (ISSCC 2026), FP16/BF16 half of it, 2516.6; 288 GB HBM3E, 8 TB/s",
        "AMD CDNA 4; memory as AMD prints it (GB; ROCm's table lists 288 GiB); Infinity Fabric "
        "bandwidth and FP4 left out (no figure found that two sources agree on): a node prices "
        "its intra-node link at PCIe unless --intra-node-bandwidth is given; timing class "
        "cdna3, the nearest (CDNA 3; itself Hopper's calibrated ceiling): an assumption",
        ("mi355x",), source="amd-mi355x", pcie_gb=64),
]

_GPU_TABLE: dict = {}
_GPU_ALIASES: dict = {}
_CLUSTER_TABLE: dict = {}


def register_gpu(new: GPU, *, replace_existing: bool = False) -> GPU:
    """Add a GPU to the catalogue (its name and aliases become valid ``--gpu`` values).

    Examples
    --------
    >>> my = GPU("my-gpu-64gb", 64, "GB", 400e12, 400e12, None, 200e9, "nvidia-datasheets", "measured")
    >>> register_gpu(my).name
    'my-gpu-64gb'
    >>> gpu("MY-GPU-64GB").memory_bytes
    64000000000
    """
    if not isinstance(new, GPU):
        raise InvalidValueError(f"register_gpu expects a GPU, got {type(new).__name__}")
    key = catalogue_key(new.name)
    if not replace_existing and (key in _GPU_TABLE or key in _GPU_ALIASES):
        raise InvalidValueError(f"GPU {new.name!r} is already in the catalogue "
                                "(pass replace_existing=True to replace it)")
    _GPU_TABLE[key] = new
    for alias in new.aliases:
        _GPU_ALIASES[catalogue_key(alias)] = key
    return new


def gpu(name) -> GPU:
    """The catalogue GPU called ``name`` (case-insensitive; aliases such as ``h100`` work).

    Examples
    --------
    >>> gpu("H100-80GB").nvlink / 1e9
    900.0
    >>> try:
    ...     gpu("h100-80")
    ... except UnknownNameError as err:
    ...     print(err.suggestions[0])
    h100-80gb
    """
    if isinstance(name, GPU):
        return name
    key = catalogue_key(name)
    key = _GPU_ALIASES.get(key, key)
    if key not in _GPU_TABLE:
        raise UnknownNameError("GPU", name, list(_GPU_TABLE) + list(_GPU_ALIASES))
    return _GPU_TABLE[key]


def gpus() -> tuple:
    """Names of the catalogue GPUs."""
    return tuple(_GPU_TABLE)


for _g in _GPUS:
    register_gpu(_g)


def register_cluster(new: Cluster, *, replace_existing: bool = False) -> Cluster:
    """Add a cluster preset.

    Examples
    --------
    >>> c = Cluster("lab-4x4090", gpu("rtx4090-24gb"), 4, 32e9, 12.5e9, source="nvidia-ada",
    ...             locator="PCIe 4.0 x16; 100 Gb/s Ethernet")
    >>> register_cluster(c).gpus_per_node
    4
    """
    if not isinstance(new, Cluster):
        raise InvalidValueError(f"register_cluster expects a Cluster, got {type(new).__name__}")
    key = catalogue_key(new.name)
    if key in _CLUSTER_TABLE and not replace_existing:
        raise InvalidValueError(f"cluster {new.name!r} already exists (pass replace_existing=True)")
    _CLUSTER_TABLE[key] = new
    return new


def cluster(name) -> Cluster:
    """The cluster preset called ``name`` (case-insensitive).

    Examples
    --------
    >>> cluster("DGX-H100").gpu.name
    'h100-80gb'
    """
    if isinstance(name, Cluster):
        return name
    key = catalogue_key(name)
    if key not in _CLUSTER_TABLE:
        raise UnknownNameError("cluster", name, list(_CLUSTER_TABLE))
    return _CLUSTER_TABLE[key]


def clusters() -> tuple:
    """Names of the cluster presets."""
    return tuple(_CLUSTER_TABLE)


def cluster_for(gpu_name, gpus_per_node: int = 8, intra=None, inter=None) -> Cluster:
    """A cluster of ``gpu_name`` nodes: intra-node = the GPU's NVLink figure per direction
    (half the vendor's both-direction figure), inter-node = 50 GB/s (one 400 Gb/s NIC per
    GPU, as DGX H100: nvidia-dgx-user-guides).

    Without NVLink, and for the bridge-only NVLink cards (H100 PCIe / NVL, RTX 3090,
    RTX A6000) in a node of more than two GPUs, the intra-node link is PCIe x16 per
    direction (``GPU.pcie``: 4.0 32 GB/s, 5.0 64 GB/s): a bridge joins a pair of cards, and
    a ring over the node crosses PCIe between pairs, which sets its pace.

    Examples
    --------
    >>> cluster_for("a100-80gb").intra_node_bandwidth / 1e9
    300.0
    >>> cluster_for("h100-pcie", 8).intra_node_bandwidth / 1e9  # PCIe 5.0 x16, one direction
    64.0
    >>> cluster_for("rtx3090", 2).intra_node_bandwidth / 1e9    # the 2-GPU NVLink bridge
    56.25
    >>> cluster_for("gb200", 4).domain                          # one NVL72 rack on NVLink
    72
    """
    dev = gpu(gpu_name)
    if int(gpus_per_node) != gpus_per_node or gpus_per_node < 1:
        raise InvalidValueError(f"gpus_per_node must be a whole number >= 1, got {gpus_per_node}")
    bridged = dev.nvlink_bridge and int(gpus_per_node) > 2
    # AMD's 'nvlink' holds its Infinity Fabric aggregate
    link = "pcie" if (not dev.nvlink or bridged) else (
        "infinity-fabric" if dev.source.startswith("amd") else "nvlink")
    if intra is not None:
        how = "intra-node bandwidth given (line rate per direction)"
    elif link != "pcie":
        intra, how = dev.nvlink / 2, "NVLink per direction (half the vendor figure)"
    else:
        intra = dev.pcie
        how = (f"PCIe x16 per direction ({dev.pcie / GB:g} GB/s)"
               + ("; the NVLink bridge joins only 2 GPUs" if bridged else ""))
    inter = inter if inter is not None else 50 * GB
    # an NVLink domain wider than the node (NVL72) keeps its groups on NVLink
    domain = dev.nvlink_domain if link == "nvlink" else None
    return Cluster(f"{dev.name}-x{gpus_per_node}", dev, int(gpus_per_node), intra, inter,
                   locator=f"{how}; 400 Gb/s NIC per GPU = 50 GB/s (as DGX H100's ConnectX-7)"
                   + (f"; NVLink domain of {domain} GPUs" if domain else ""),
                   intra_link=link, nvlink_domain=domain)


# REF: nvidia-dgx-user-guides (DGX H100: 8 GPUs per node, NVLink 4 900 GB/s, 8 x 400 Gb/s
# ConnectX-7 = 50 GB/s per GPU, the tiers seed 002 uses; DGX A100: 8 x 200 Gb/s HDR = 25 GB/s
# per GPU); DGX B200: 8 x 400 Gb/s ConnectX-7.
for _c in (
    # per direction: NVLink 4 900 GB/s both ways = 450 each way
    Cluster("dgx-h100", gpu("h100-80gb"), 8, 450 * GB, 50 * GB),
    Cluster("hgx-h200", gpu("h200-141gb"), 8, 450 * GB, 50 * GB),
    Cluster("dgx-a100", gpu("a100-80gb"), 8, 300 * GB, 25 * GB, locator="DGX A100: NVLink 600 GB/s (both ways), 8 x 200 Gb/s HDR"),
    Cluster("dgx-b200", gpu("b200"), 8, 900 * GB, 50 * GB, source="nvidia-datasheets", locator="DGX B200: NVLink 5 1.8 TB/s (both ways), 8 x 400 Gb/s"),
    Cluster("mi300x-8", gpu("mi300x-192gb"), 8, 448 * GB, 50 * GB, source="amd-mi300x",
            locator="8 x MI300X platform: Infinity Fabric 896 GB/s (both ways), 400 Gb/s per GPU",
            intra_link="infinity-fabric"),
    # issue 31.  HGX B300: NVLink 5 1.8 TB/s both ways = 900 each way; "networking 1.6 TB/s"
    # for 8 GPUs = 800 Gb/s ConnectX-8 per GPU = 100 GB/s each way (HGX platform page).
    Cluster("hgx-b300", gpu("b300"), 8, 900 * GB, 100 * GB, source="nvidia-blackwell-ultra",
            locator="HGX B300: NVLink 5 1.8 TB/s (both ways); networking 1.6 TB/s = 8 x 800 Gb/s"),
    # NVL72 racks: 4 GPUs per compute tray, all 72 on one NVLink switch domain (NVLink 5,
    # 1.8 TB/s per GPU); the scale-out NIC per GPU: GB200 400 Gb/s ConnectX-7 (DGX H100's
    # 400 Gb/s per GPU; the rack page prints no per-GPU figure: an assumption), GB300
    # 800 Gb/s ConnectX-8 (72 ConnectX-8 per rack).
    Cluster("gb200-nvl72", gpu("gb200"), 4, 900 * GB, 50 * GB, source="nvidia-gb200-nvl72",
            locator="GB200 NVL72: 72 GPUs on NVLink 5 (1.8 TB/s both ways), 4 per compute tray; "
            "400 Gb/s per GPU (assumption)", nvlink_domain=72),
    Cluster("gb300-nvl72", gpu("gb300"), 4, 900 * GB, 100 * GB, source="nvidia-gb300-nvl72",
            locator="GB300 NVL72: 72 GPUs on NVLink 5 (1.8 TB/s both ways), 4 per compute tray; "
            "72 ConnectX-8 800 Gb/s", nvlink_domain=72),
    Cluster("mi325x-8", gpu("mi325x-256gb"), 8, 448 * GB, 50 * GB, source="amd-mi325x",
            locator="8 x MI325X platform (the MI300X's UBB): Infinity Fabric 896 GB/s (both "
            "ways), 400 Gb/s per GPU", intra_link="infinity-fabric"),
):
    register_cluster(_c)
