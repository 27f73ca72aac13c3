"""The hardware records: a GPU (peak rates, memory, links) and a cluster of them.

:mod:`memsym.hardware` holds the cited catalogue of both and looks them up by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
import numbers

from .errors import InvalidValueError, choose
from .limits import BANDWIDTH_RANGE
from .units import UNITS

__all__ = ["GPU", "Cluster", "GB", "TFLOPS", "PRECISIONS", "FP32_PEAK_NOTE"]

GB = UNITS["GB"]
TFLOPS = 10**12
#: Precisions :meth:`GPU.peak` prices.
PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "fp4")
#: What ``peak("fp32")`` assumes (the step report repeats it under ``assumptions``).
FP32_PEAK_NOTE = ("fp32 priced at the TF32 tensor-core peak = half the BF16 dense peak "
                  "(vendor datasheets); with TF32 disabled fp32 matmuls run on CUDA cores, "
                  "several times slower")


@dataclass(frozen=True)
class GPU:
    """One accelerator.

    Attributes
    ----------
    name : str
        Catalogue name (lower-case, hyphens).
    memory_stated : int or float
        Memory as the vendor prints it, in ``memory_unit``.
    memory_unit : {"GB", "GiB"}
        The unit the vendor uses.
    bf16, fp16, fp8 : float or None
        Peak dense tensor-core throughput [FLOP/s].
    nvlink : float or None
        NVLink (or Infinity Fabric) bandwidth per GPU, both directions summed [bytes/s].
    source : str
        Reference key in ``memsym/references.toml``.
    locator : str
        Where in the source.
    note : str
        Anything a user must know (form factor, accumulate mode, ...).
    nvlink_bridge : bool
        NVLink is a bridge between two cards (PCIe boards), not a switch across the node.
    fp4 : float or None
        Peak dense FP4 throughput [FLOP/s] as the vendor prints it (listed, not priced).
    nvlink_domain : int or None
        GPUs joined by one NVLink switch domain when that spans more than a node (NVL72
        racks: 72) [GPUs]; :func:`cluster_for` carries it to the cluster.
    pcie : float
        PCIe bandwidth per GPU, one direction [bytes/s] (x16 4.0: 32e9; 5.0: 64e9).
    """

    name: str
    memory_stated: float
    memory_unit: str
    bf16: float | None
    fp16: float | None
    fp8: float | None
    nvlink: float | None
    source: str
    locator: str
    note: str = ""
    aliases: tuple = field(default=(), compare=False)
    nvlink_bridge: bool = False
    pcie: float = 32 * GB
    #: HBM bandwidth [bytes/s] from the datasheet (memory-bound operations are priced by it).
    hbm_bandwidth: float | None = None
    #: Streaming multiprocessors (AMD: compute units): the wave size of a GEMM's tiles.
    sm_count: int | None = None
    #: Efficiency class of :mod:`memsym.timing.efficiency` (``ampere``, ``hopper``, ...).
    arch_class: str | None = None
    #: The total CUDA reports (``cudaMemGetInfo``; PyTorch's "total capacity") [GiB], where a
    #: public report gives it; None: the capacity is the datasheet figure.
    cuda_total_gib: float | None = None
    #: Reference key in ``memsym/references.toml`` of ``cuda_total_gib``.
    cuda_total_source: str | None = None
    #: Peak dense FP4 tensor-core throughput [FLOP/s] where the vendor prints one (NVFP4 /
    #: MXFP4): the GEMMs of precision fp4 (Transformer Engine's NVFP4BlockScaling).
    fp4: float | None = None
    #: GPUs one NVLink switch domain joins (GB200 / GB300 NVL72: 72), where it is larger than
    #: a node; None: the node (``Cluster.gpus_per_node``) is the domain.
    nvlink_domain: int | None = None
    #: CUDA compute capability ``(major, minor)`` (NVIDIA's CUDA GPUs table; H100 (9, 0), B200
    #: (10, 0), B300 (10, 3)); None where not NVIDIA or not given: read as TN-only FP8 GEMMs.
    compute_capability: tuple | None = None

    def __post_init__(self):
        if self.memory_unit not in ("GB", "GiB"):
            raise InvalidValueError(f"memory_unit must be GB or GiB, got {self.memory_unit!r}")
        if not self.memory_stated or self.memory_stated <= 0:
            raise InvalidValueError(f"memory of {self.name} must be > 0")
        if self.cuda_total_gib is not None and self.cuda_total_source is None:
            raise InvalidValueError(f"cuda_total_gib of {self.name} needs its cuda_total_source")
        for what in ("bf16", "fp16", "fp8", "nvlink", "pcie", "hbm_bandwidth", "sm_count",
                     "cuda_total_gib", "fp4", "nvlink_domain"):
            val = getattr(self, what)
            if val is not None and not val > 0:
                raise InvalidValueError(f"{what} of {self.name} must be > 0 or None, got {val}")

    @property
    def memory_bytes(self) -> int:
        """Memory [bytes] as stated: ``memory_stated`` x 10^9 (GB) or x 2^30 (GiB).

        Examples
        --------
        >>> from memsym.hardware import cluster, gpu
        >>> gpu("a100-80gb").memory_bytes, gpu("h200-141gb").memory_bytes
        (80000000000, 141000000000)
        """

        scale = GB if self.memory_unit == "GB" else 2**30
        return int(Fraction(str(self.memory_stated)) * scale)

    @property
    def non_tn_fp8_gemm(self) -> bool:
        r"""Whether FP8 GEMMs take non-TN layouts here, so that Transformer Engine keeps no
        FP8 transpose of a per-tensor-scaled tensor [1].

        .. math:: (10, 0) \le \mathrm{cc} < (12, 0) \ \lor\ \mathrm{cc} \ge (13, 0)

        TE's own test of the device's compute capability cc; without one (AMD, a GPU
        registered without it) False, the TN-only reading that counts the transpose.

        Examples
        --------
        >>> from memsym.hardware import gpu
        >>> [gpu(n).non_tn_fp8_gemm for n in ("h100-80gb", "b200", "gb300", "mi300x-192gb")]
        [False, True, True, False]

        References
        ----------
        transformer-engine d0067d0da6: pytorch/utils.py:657-663
        (``is_non_tn_fp8_gemm_supported``), common/transformer_engine.cpp:1191-1204
        (``nvte_is_non_tn_fp8_gemm_supported``: sm_arch >= 100 and < 120, or >= 130).
        """
        cc = self.compute_capability
        return cc is not None and ((10, 0) <= tuple(cc) < (12, 0) or tuple(cc) >= (13, 0))

    @property
    def capacity_bytes(self) -> int:
        r"""The memory a job is checked against [bytes]: the CUDA-reported total where cited.

        .. math:: C = \mathrm{cuda\_total\_gib} \cdot 2^{30}
           \quad\text{else}\quad C = \mathrm{memory\_bytes}

        Examples
        --------
        >>> from memsym.hardware import cluster, gpu
        >>> round(gpu("h100-80gb").capacity_bytes / 2**30, 6)      # vllm-project/vllm#27508
        79.11
        >>> gpu("h100-80gb").capacity_bytes > gpu("h100-80gb").memory_bytes   # 80e9
        True
        >>> gpu("l40s-48gb").capacity_bytes == gpu("l40s-48gb").memory_bytes  # none cited
        True

        References
        ----------
        PyTorch c10/cuda/CUDACachingAllocator.cpp (the out-of-memory message: ``device_total``
        from ``cudaMemGetInfo``, printed by ``format_size`` in GiB with two decimals).
        """

        if self.cuda_total_gib is None:
            return self.memory_bytes
        return int(Fraction(str(self.cuda_total_gib)) * 2**30)

    @property
    def capacity_note(self) -> str:
        """Where :attr:`capacity_bytes` comes from, for a report's capacity line."""
        if self.cuda_total_gib is None:
            return f"datasheet {self.memory_stated:g} {self.memory_unit}"
        return (f"CUDA total {self.cuda_total_gib:g} GiB, {self.cuda_total_source}; "
                f"datasheet {self.memory_stated:g} {self.memory_unit}")

    def peak(self, precision: str = "bf16") -> float:
        """Peak dense FLOP/s at ``precision`` (bf16, fp16, fp8, fp32, fp4).

        ``fp32`` is the TF32 tensor-core peak, half the BF16 one (see the module notes and
        :data:`FP32_PEAK_NOTE`).

        Examples
        --------
        >>> from memsym.hardware import cluster, gpu
        >>> gpu("h100-80gb").peak("bf16") / 1e12
        989.4
        >>> gpu("a100-80gb").peak("FP32") / 1e12  # A100 datasheet: TF32 156 TFLOPS dense
        156.0
        """
        key = choose("precision", precision, PRECISIONS)
        if key == "fp32":
            # REF: vendor datasheets: dense TF32 = BF16 / 2 on every catalogue GPU.
            return self.bf16 / 2
        val = getattr(self, key)
        if val is None:
            raise InvalidValueError(f"{self.name} has no {key} tensor-core peak in its datasheet")
        return val


@dataclass(frozen=True)
class Cluster:
    """Nodes of identical GPUs: GPUs per node and the two link tiers.

    Attributes
    ----------
    name : str
    gpu : GPU
    gpus_per_node : int
    intra_node_bandwidth : float
        Per GPU inside a node, one direction [bytes/s] (NVLink: half the vendor's figure).
    inter_node_bandwidth : float
        Per GPU between nodes [bytes/s] (one NIC per GPU, one direction).
    latency : float
        Per collective step [s] (0: bandwidth-only, the large-message regime).
    source, locator : str
    intra_link : {"nvlink", "pcie", "infinity-fabric"}
        What joins the GPUs of a node (the step-time model prices NCCL's efficiency on
        NVLink, :data:`memsym.timing.collectives.NVLINK_NCCL_EFFICIENCY`).
    nvlink_domain : int or None
        GPUs that reach each other at ``intra_node_bandwidth`` when that is more than a node
        (GB200 / GB300 NVL72: 4 GPUs per compute tray, 72 on one NVLink switch domain);
        None: the node.  :attr:`domain` is what decides intra- vs inter-node pricing.
    """

    name: str
    gpu: GPU
    gpus_per_node: int
    intra_node_bandwidth: float
    inter_node_bandwidth: float
    latency: float = 0
    source: str = "nvidia-dgx-user-guides"
    locator: str = ("DGX H100: 8 GPUs, NVLink 4 900 GB/s both ways, 8 x 400 Gb/s ConnectX-7 "
                    "= 50 GB/s per GPU")
    intra_link: str = "nvlink"
    nvlink_domain: int | None = None

    def __post_init__(self):
        if int(self.gpus_per_node) != self.gpus_per_node or self.gpus_per_node < 1:
            raise InvalidValueError(f"gpus_per_node must be a whole number >= 1, got {self.gpus_per_node}")
        dom = self.nvlink_domain
        if dom is not None and (isinstance(dom, bool) or int(dom) != dom or dom < 1):
            raise InvalidValueError(f"nvlink_domain must be a whole number >= 1 or None, got "
                                    f"{dom!r:.40}")

        # a physical range (memsym.limits, in GB/s): 1e-300 bytes/s made step times inf and
        # every search column NaN, with numpy overflow warnings on stderr
        lo, hi = (x * 1e9 for x in BANDWIDTH_RANGE)
        for what in ("intra_node_bandwidth", "inter_node_bandwidth"):
            val = getattr(self, what)
            if isinstance(val, bool) or not isinstance(val, numbers.Real) or not lo <= val <= hi:
                raise InvalidValueError(f"{what} must be between {lo:g} and {hi:g} bytes/s "
                                        f"(0.1 to 1e5 GB/s), got {val!r:.40}")
        if self.latency < 0:
            raise InvalidValueError(f"latency must be >= 0 s, got {self.latency}")
        if self.intra_link not in ("nvlink", "pcie", "infinity-fabric"):
            raise InvalidValueError(f"intra_link must be nvlink, pcie or infinity-fabric, got "
                                    f"{self.intra_link!r:.40}")

    @property
    def domain(self) -> int:
        """GPUs one group may span and stay on the intra-node link [GPUs]: the NVLink domain
        where it is larger than the node, else ``gpus_per_node``.

        Examples
        --------
        >>> from memsym.hardware import cluster, gpu
        >>> cluster("dgx-h100").domain, cluster("gb200-nvl72").domain
        (8, 72)
        """
        return max(int(self.gpus_per_node), int(self.nvlink_domain or 0))

    def values(self, precision: str = "bf16") -> dict:
        """The cluster as symbol values: ``n_node``, ``beta_intra``, ``beta_inter``, ``alpha``, ``F``.

        Examples
        --------
        >>> from memsym.hardware import cluster, gpu
        >>> v = cluster("dgx-h100").values()
        >>> v["n_node"], v["beta_intra"], v["beta_inter"]
        (8, 450000000000, 50000000000)
        """
        return {"n_node": self.domain, "beta_intra": self.intra_node_bandwidth,
                "beta_inter": self.inter_node_bandwidth, "alpha": self.latency,
                "F": self.gpu.peak(precision)}

    def with_(self, **changes) -> "Cluster":
        """A copy with some fields changed (e.g. a measured inter-node bandwidth)."""
        return replace(self, **changes)
