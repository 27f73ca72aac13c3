"""GPUs and clusters: memory, peak dense FLOP/s and link bandwidths, each with its source.

Names are lower-case with hyphens, like the model presets (``a100-80gb``, ``h100-80gb``,
``h200-141gb``) and are matched case-insensitively; a miss raises
:class:`~memsym.errors.UnknownNameError` with the closest names.  Users add their own with
:func:`register_gpu` / :func:`register_cluster`.

Units, stated as the vendor states them
---------------------------------------
* Memory: every vendor datasheet here prints "GB".  memsym stores ``memory_bytes`` as that
  figure times 10^9 (``memory_unit = "GB"``).  The HBM parts are in fact binary-sized
  (an A100 80GB has 80 GiB = 85.9e9 bytes; nvidia-smi shows 81920 MiB), so the decimal
  reading is the conservative, lower figure; give ``--gpu-memory 80GiB`` to use the other.
* Peak FLOP/s: **dense** tensor-core throughput (the datasheets' "with sparsity" figures
  halved), in FLOP/s, for BF16, FP16 and FP8 (None where the GPU has no FP8 tensor cores).
  Consumer cards are quoted with FP32 accumulation, the mode used for training.
* NVLink: the vendor's figure, the **sum of both directions** per GPU (H100: 900 GB/s =
  450 GB/s each way); None where there is no NVLink.  nccl-tests' bus bandwidth is one
  direction, so a measured ``busbw`` is compared with half of it.
* Cluster presets price links **per direction**, as a ring collective uses them (every rank
  sends and receives at once; nccl-tests' bus bandwidth is per direction): NVLink at half the
  vendor figure (H100: 450 GB/s) and 400 Gb/s InfiniBand = 50 GB/s per GPU.  Seed 002 divides
  by the both-direction 900 GB/s ("about 10 ms" for 7.5 GB), which is 2x optimistic; pass
  ``intra_node_bandwidth=900e9`` (``--intra-node-bandwidth 900``) to reproduce it.

References
----------
Vendor datasheets: NVIDIA A100 (2021), H100 (2023), H200 (2024), HGX/DGX B200 (2024),
L40S (2023), RTX A6000 (2020); NVIDIA Ampere GA102 and Ada Lovelace whitepapers (RTX
3090 / 4090); AMD Instinct MI300X data sheet (2023); seed 002 (cluster tiers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .errors import InvalidValueError, UnknownNameError

__all__ = ["GPU", "Cluster", "gpu", "cluster", "gpus", "clusters", "register_gpu",
           "register_cluster", "GB", "TFLOPS"]

GB = 10**9
TFLOPS = 10**12


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
        Reference key in ``formulas/references.toml``.
    locator : str
        Where in the source.
    note : str
        Anything a user must know (form factor, accumulate mode, ...).
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

    def __post_init__(self):
        if self.memory_unit not in ("GB", "GiB"):
            raise InvalidValueError(f"memory_unit must be GB or GiB, got {self.memory_unit!r}")
        if not self.memory_stated or self.memory_stated <= 0:
            raise InvalidValueError(f"memory of {self.name} must be > 0")
        for what in ("bf16", "fp16", "fp8", "nvlink"):
            val = getattr(self, what)
            if val is not None and not val > 0:
                raise InvalidValueError(f"{what} of {self.name} must be > 0 or None, got {val}")

    @property
    def memory_bytes(self) -> int:
        """Memory [bytes] as stated: ``memory_stated`` x 10^9 (GB) or x 2^30 (GiB).

        Examples
        --------
        >>> gpu("a100-80gb").memory_bytes, gpu("h200-141gb").memory_bytes
        (80000000000, 141000000000)
        """
        from fractions import Fraction

        scale = GB if self.memory_unit == "GB" else 2**30
        return int(Fraction(str(self.memory_stated)) * scale)

    def peak(self, precision: str = "bf16") -> float:
        """Peak dense FLOP/s at ``precision`` (bf16, fp16, fp8).

        Examples
        --------
        >>> gpu("h100-80gb").peak("bf16") / 1e12
        989.4
        """
        key = str(precision).strip().lower()
        if key not in ("bf16", "fp16", "fp8"):
            raise UnknownNameError("precision", precision, ("bf16", "fp16", "fp8"))
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
    """

    name: str
    gpu: GPU
    gpus_per_node: int
    intra_node_bandwidth: float
    inter_node_bandwidth: float
    latency: float = 0
    source: str = "seed002"
    locator: str = "tensor parallelism section (NVLink 900 GB/s both ways vs 400 Gb/s InfiniBand = 50 GB/s)"

    def __post_init__(self):
        if int(self.gpus_per_node) != self.gpus_per_node or self.gpus_per_node < 1:
            raise InvalidValueError(f"gpus_per_node must be a whole number >= 1, got {self.gpus_per_node}")
        for what in ("intra_node_bandwidth", "inter_node_bandwidth"):
            if not getattr(self, what) > 0:
                raise InvalidValueError(f"{what} must be > 0 bytes/s, got {getattr(self, what)}")
        if self.latency < 0:
            raise InvalidValueError(f"latency must be >= 0 s, got {self.latency}")

    def values(self, precision: str = "bf16") -> dict:
        """The cluster as symbol values: ``n_node``, ``beta_intra``, ``beta_inter``, ``alpha``, ``F``.

        Examples
        --------
        >>> v = cluster("dgx-h100").values()
        >>> v["n_node"], v["beta_intra"], v["beta_inter"]
        (8, 450000000000, 50000000000)
        """
        return {"n_node": self.gpus_per_node, "beta_intra": self.intra_node_bandwidth,
                "beta_inter": self.inter_node_bandwidth, "alpha": self.latency,
                "F": self.gpu.peak(precision)}

    def with_(self, **changes) -> "Cluster":
        """A copy with some fields changed (e.g. a measured inter-node bandwidth)."""
        return replace(self, **changes)


def _nv(name, mem, bf16_tf, fp8_tf, nvlink_gb, locator, note="", aliases=(), fp16_tf=None,
        source=None, unit="GB"):
    return GPU(name, mem, unit, bf16_tf * TFLOPS, (fp16_tf or bf16_tf) * TFLOPS,
               None if fp8_tf is None else fp8_tf * TFLOPS,
               None if nvlink_gb is None else nvlink_gb * GB,
               source or "nvidia-datasheets", locator, note, tuple(aliases))


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
        "PCIe; NVLink only through a 2-GPU bridge", ("h100-pcie",)),
    _nv("h100-nvl-94gb", 94, 835.5, 1670.5, 600,
        "H100 datasheet (2023), H100 NVL: BF16 1,671 / FP8 3,341 TFLOPS with sparsity; NVLink 600 GB/s",
        "PCIe dual-slot, NVLink bridge", ("h100-nvl",)),
    _nv("h200-141gb", 141, 989.5, 1979, 900,
        "H200 datasheet (2024), SXM: BF16 1,979 / FP8 3,958 TFLOPS with sparsity; NVLink 900 GB/s",
        "SXM; same compute as H100 SXM", ("h200", "h200-sxm-141gb")),
    _nv("b200", 180, 2250, 4500, 1800,
        "HGX B200 datasheet (2024): FP16/BF16 4.5 / FP8 9 PFLOPS with sparsity per GPU; 180 GB; NVLink 5 1.8 TB/s",
        "HGX B200 (1,000 W); announced as 192 GB, the HGX/DGX datasheets list 180 GB per GPU",
        ("b200-180gb",)),
    _nv("rtx3090-24gb", 24, 71, None, 112.5,
        "NVIDIA Ampere GA102 whitepaper, RTX 3090: FP16/BF16 tensor with FP32 accumulate 71 TFLOPS dense; "
        "NVLink bridge 112.5 GB/s", "GeForce: FP32-accumulate rate is half the FP16-accumulate rate",
        ("rtx-3090", "rtx3090", "3090"), source="nvidia-ga102"),
    _nv("rtx4090-24gb", 24, 165.2, 330.3, None,
        "NVIDIA Ada Lovelace whitepaper, RTX 4090: FP16/BF16 with FP32 accumulate 165.2, FP8 330.3 TFLOPS dense",
        "GeForce; no NVLink (PCIe 4.0 x16)", ("rtx-4090", "rtx4090", "4090"), source="nvidia-ada"),
    _nv("rtx-a6000-48gb", 48, 154.8, None, 112.5,
        "RTX A6000 datasheet (2020): tensor 309.7 TFLOPS with sparsity; NVLink bridge 112.5 GB/s",
        "workstation Ampere", ("rtx-a6000", "a6000")),
    _nv("l40s-48gb", 48, 362.05, 733, None,
        "L40S datasheet (2023): BF16/FP16 362.05 (733 sparse), FP8 733 (1,466 sparse) TFLOPS",
        "PCIe 4.0 x16, no NVLink", ("l40s",)),
    _nv("mi300x-192gb", 192, 1307.4, 2614.9, 896,
        "AMD Instinct MI300X data sheet (2023): FP16/BF16 1307.4, FP8 2614.9 TFLOPS dense; "
        "Infinity Fabric 7 x 128 GB/s", "AMD; 'nvlink' holds the Infinity Fabric aggregate",
        ("mi300x",), source="amd-mi300x"),
]

_GPU_TABLE: dict = {}
_GPU_ALIASES: dict = {}
_CLUSTER_TABLE: dict = {}


def _key(name) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


def register_gpu(new: GPU, *, replace_existing: bool = False) -> GPU:
    """Add a GPU to the catalogue (its name and aliases become valid ``--gpu`` values).

    Examples
    --------
    >>> my = GPU("my-gpu-64gb", 64, "GB", 400e12, 400e12, None, 200e9, "seed002", "measured")
    >>> register_gpu(my).name
    'my-gpu-64gb'
    >>> gpu("MY-GPU-64GB").memory_bytes
    64000000000
    """
    if not isinstance(new, GPU):
        raise InvalidValueError(f"register_gpu expects a GPU, got {type(new).__name__}")
    key = _key(new.name)
    if not replace_existing and (key in _GPU_TABLE or key in _GPU_ALIASES):
        raise InvalidValueError(f"GPU {new.name!r} is already in the catalogue "
                                "(pass replace_existing=True to replace it)")
    _GPU_TABLE[key] = new
    for alias in new.aliases:
        _GPU_ALIASES[_key(alias)] = key
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
    key = _key(name)
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
    >>> c = Cluster("lab-4x4090", gpu("rtx4090-24gb"), 4, 32e9, 12.5e9, source="seed002",
    ...             locator="PCIe 4.0 x16; 100 Gb/s Ethernet")
    >>> register_cluster(c).gpus_per_node
    4
    """
    if not isinstance(new, Cluster):
        raise InvalidValueError(f"register_cluster expects a Cluster, got {type(new).__name__}")
    key = _key(new.name)
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
    key = _key(name)
    if key not in _CLUSTER_TABLE:
        raise UnknownNameError("cluster", name, list(_CLUSTER_TABLE))
    return _CLUSTER_TABLE[key]


def clusters() -> tuple:
    """Names of the cluster presets."""
    return tuple(_CLUSTER_TABLE)


def cluster_for(gpu_name, gpus_per_node: int = 8, intra=None, inter=None) -> Cluster:
    """A cluster of ``gpu_name`` nodes: intra-node = the GPU's NVLink figure per direction
    (half the vendor's both-direction figure; PCIe 4.0 x16, 32 GB/s per direction, without
    NVLink), inter-node = 50 GB/s (one 400 Gb/s NIC per GPU, seed 002).

    Examples
    --------
    >>> cluster_for("a100-80gb").intra_node_bandwidth / 1e9
    300.0
    """
    dev = gpu(gpu_name)
    intra = intra if intra is not None else (dev.nvlink / 2 if dev.nvlink else 32 * GB)
    inter = inter if inter is not None else 50 * GB
    return Cluster(f"{dev.name}-x{gpus_per_node}", dev, int(gpus_per_node), intra, inter)


# REF: seed002 (8 GPUs per node, NVLink 4 900 GB/s, 400 Gb/s InfiniBand = 50 GB/s per GPU);
# DGX A100: 8 x 200 Gb/s HDR = 25 GB/s per GPU; DGX B200: 8 x 400 Gb/s ConnectX-7.
for _c in (
    # per direction: NVLink 4 900 GB/s both ways = 450 each way
    Cluster("dgx-h100", gpu("h100-80gb"), 8, 450 * GB, 50 * GB),
    Cluster("hgx-h200", gpu("h200-141gb"), 8, 450 * GB, 50 * GB),
    Cluster("dgx-a100", gpu("a100-80gb"), 8, 300 * GB, 25 * GB, locator="DGX A100: NVLink 600 GB/s (both ways), 8 x 200 Gb/s HDR"),
    Cluster("dgx-b200", gpu("b200"), 8, 900 * GB, 50 * GB, locator="DGX B200: NVLink 5 1.8 TB/s (both ways), 8 x 400 Gb/s"),
    Cluster("mi300x-8", gpu("mi300x-192gb"), 8, 448 * GB, 50 * GB,
            locator="8 x MI300X platform: Infinity Fabric 896 GB/s (both ways), 400 Gb/s per GPU"),
):
    register_cluster(_c)
