"""The symbol registry: the one place where memsym creates SymPy symbols.

Each symbol is registered once, with its LaTeX form, meaning, unit and domain, so that
terms written in different modules share the very same ``Symbol`` objects (two symbols
with the same name but different assumptions would not cancel).  Metadata is kept
*beside* the symbols in a frozen record, never stored on them, as ``sympy.physics.units``
does.

User-supplied names are resolved with :func:`lookup`, which validates them against the
registry and never parses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import sympy as sp

from .errors import UnknownNameError

__all__ = ["SymbolInfo", "info", "lookup", "registry"]


@dataclass(frozen=True)
class SymbolInfo:
    """Metadata of one registered symbol.

    Attributes
    ----------
    symbol : sympy.Symbol
        The symbol itself (every registered symbol is ``positive`` or ``nonnegative``;
        none is ``integer``, so that ``solve`` works over the reals).
    latex : str
        Its LaTeX form, e.g. ``b_{\\mathrm{hp}}``.
    meaning : str
        One line saying what it stands for.
    unit : str
        Its unit, e.g. ``bytes``, ``parameters``, ``1`` for pure numbers.
    domain : str
        ``"positive integer"``, ``"positive"`` or ``"nonnegative"``: the values a user may give.
    """

    symbol: sp.Symbol
    latex: str
    meaning: str
    unit: str
    domain: str

    @property
    def name(self) -> str:
        return self.symbol.name

    @property
    def integer(self) -> bool:
        """Whether only whole values make sense (checked at the numeric boundary)."""
        return self.domain == "positive integer"


_REGISTRY: dict[str, SymbolInfo] = {}


def _register(name: str, latex: str, meaning: str, unit: str, domain: str = "positive") -> sp.Symbol:
    if name in _REGISTRY:  # pragma: no cover - guards the module against itself
        raise RuntimeError(f"symbol {name!r} registered twice")
    if domain not in ("positive integer", "positive", "nonnegative"):  # pragma: no cover
        raise RuntimeError(f"bad domain {domain!r}")
    # positive (or nonnegative) only: integer=True makes sympy.solve return [] silently.
    assumptions = {"nonnegative": True} if domain == "nonnegative" else {"positive": True}
    sym = sp.Symbol(name, **assumptions)
    _REGISTRY[name] = SymbolInfo(sym, latex, meaning, unit, domain)
    return sym


# --- model states (seed 000; ZeRO §3.1, §5) -------------------------------------------------
N = _register("N", "N", "total number of model parameters", "parameters")
d = _register("d", "d", "data-parallel size", "GPUs", "positive integer")
t = _register("t", "t", "tensor-parallel size", "GPUs", "positive integer")
p = _register("p", "p", "pipeline-parallel size (number of stages)", "GPUs", "positive integer")
b_hp = _register("b_hp", r"b_{\mathrm{hp}}", "bytes per model weight as used in forward/backward "
                 "(half precision: 2)", "bytes/parameter")
b_g = _register("b_g", r"b_{\mathrm{g}}", "bytes per gradient element held for the optimizer",
                "bytes/parameter", "nonnegative")
b_m = _register("b_m", r"b_{\mathrm{m}}", "bytes per parameter of the master-weight copy "
                "(fp32: 4; none when weights are already fp32)", "bytes/parameter", "nonnegative")
b_o = _register("b_o", r"b_{\mathrm{o}}", "bytes per parameter of optimizer moments "
                "(Adam: two fp32 moments = 8)", "bytes/parameter", "nonnegative")
C = _register("C", "C", "GPU memory capacity", "bytes")
G = _register("G", "G", "number of GPUs (world size)", "GPUs", "positive integer")

# --- layouts and model shapes (Korthikanti et al. 2022; Narayanan et al. 2021) --------------
c = _register("c", "c", "context-parallel size", "GPUs", "positive integer")
e = _register("e", "e", "expert-parallel size", "GPUs", "positive integer")
t_e = _register("t_e", r"t_{\mathrm{e}}", "expert tensor-parallel size", "GPUs", "positive integer")
v = _register("v", "v", "virtual pipeline stages (model chunks) per pipeline rank", "1",
              "positive integer")
m = _register("m", "m", "number of microbatches per step and pipeline", "1", "positive integer")
s = _register("s", "s", "sequence length", "tokens", "positive integer")
b = _register("b", "b", "micro-batch size", "sequences", "positive integer")
B = _register("B", "B", "global batch size", "sequences", "positive integer")
h = _register("h", "h", "hidden size", "1", "positive integer")
a = _register("a", "a", "number of attention heads", "1", "positive integer")
L = _register("L", "L", "number of transformer layers", "1", "positive integer")
V = _register("V", "V", "vocabulary size (padded)", "tokens", "positive integer")
f = _register("f", "f", "feed-forward (MLP) hidden size", "1", "positive integer")
g = _register("g", "g", "number of key/value heads (query groups)", "1", "positive integer")
d_h = _register("d_h", r"d_{\mathrm{head}}", "attention head dimension (kv channels)", "1",
                "positive integer")
E = _register("E", "E", "number of routed experts per MoE layer", "1", "positive integer")
k = _register("k", "k", "experts each token is routed to (top-k)", "1", "positive integer")
f_e = _register("f_e", r"f_{\mathrm{e}}", "expert feed-forward hidden size", "1", "positive integer")
f_sh = _register("f_sh", r"f_{\mathrm{sh}}", "shared-expert feed-forward hidden size", "1",
                 "nonnegative")
h_lat = _register("h_lat", r"h_{\mathrm{lat}}", "latent MoE width (moe_latent_size): the routed "
                  "experts' input and output width", "1", "positive integer")
# --- communication, compute and time (NCCL tests; Narayanan et al. 2021) --------------------
n = _register("n", "n", "number of ranks taking part in a collective", "GPUs", "positive integer")
S = _register("S", "S", "size of the buffer a collective operates on", "bytes")
beta = _register("beta", r"\beta", "link bandwidth per GPU, one direction", "bytes/s")
alpha = _register("alpha", r"\alpha", "latency per collective step", "s", "nonnegative")
F = _register("F", r"F_{\mathrm{peak}}", "peak dense throughput of one GPU", "FLOP/s")
eta = _register("eta", r"\eta", "achieved fraction of peak throughput (efficiency)", "1")
T = _register("T", "T", "number of training tokens", "tokens")
# --- architectures: shapes and parameter counts (memsym/model/) ---------------------------
s_max = _register("s_max", r"s_{\mathrm{max}}", "rows of the learned position-embedding table "
                  "(max_position_embeddings)", "tokens", "positive integer")
L_m = _register("L_m", r"L_{\mathrm{m}}", "number of MoE layers among the L layers", "1",
                "nonnegative")
n_mtp = _register("n_mtp", r"n_{\mathrm{mtp}}", "number of multi-token-prediction (MTP) layers",
                  "1", "nonnegative")
r_q = _register("r_q", r"r_{\mathrm{q}}", "MLA query low-rank (q_lora_rank)", "1",
                "positive integer")
r_kv = _register("r_kv", r"r_{\mathrm{kv}}", "MLA key/value low-rank (kv_lora_rank)", "1",
                 "positive integer")
d_qk = _register("d_qk", r"d_{\mathrm{qk}}", "MLA query/key head dim without RoPE "
                 "(qk_nope_head_dim; Megatron qk_head_dim)", "1", "positive integer")
d_r = _register("d_r", r"d_{\mathrm{r}}", "MLA decoupled RoPE head dim (qk_rope_head_dim; "
                "Megatron qk_pos_emb_head_dim)", "1", "positive integer")
d_v = _register("d_v", r"d_{\mathrm{v}}", "MLA value head dim (v_head_dim)", "1",
                "positive integer")
H_idx = _register("H_idx", r"H_{\mathrm{idx}}", "DeepSeek-V3.2 sparse-attention indexer heads "
                  "(index_n_heads)", "1", "positive integer")
d_idx = _register("d_idx", r"d_{\mathrm{idx}}", "DeepSeek-V3.2 sparse-attention indexer head dim "
                  "(index_head_dim)", "1", "positive integer")
# --- hybrid Mamba / attention models (memsym/model/counts.py, memsym/terms/mamba.py) --------
L_att = _register("L_att", r"L_{\mathrm{att}}", "number of layers with an attention mixer (hybrid "
                  "models; L otherwise)", "1", "nonnegative")
L_ssm = _register("L_ssm", r"L_{\mathrm{ssm}}", "number of layers with a Mamba (state-space) "
                  "mixer", "1", "nonnegative")
L_ffn = _register("L_ffn", r"L_{\mathrm{ffn}}", "number of layers with an MLP or MoE block "
                  "(hybrid models; L otherwise)", "1", "nonnegative")
d_ssm = _register("d_ssm", r"d_{\mathrm{ssm}}", "Mamba inner width (d_inner = expand h, or "
                  "heads x head dim)", "1", "positive integer")
N_ssm = _register("N_ssm", r"N_{\mathrm{ssm}}", "Mamba state size per channel (d_state, N)", "1",
                  "positive integer")
G_ssm = _register("G_ssm", r"G_{\mathrm{ssm}}", "Mamba-2 B/C groups (n_groups)", "1",
                  "positive integer")
H_ssm = _register("H_ssm", r"H_{\mathrm{ssm}}", "Mamba-2 heads (nheads)", "1", "positive integer")
k_conv = _register("k_conv", r"k_{\mathrm{conv}}", "Mamba causal depthwise convolution width "
                   "(d_conv)", "1", "positive integer")
r_dt = _register("r_dt", r"r_{\Delta}", "Mamba-1 time-step projection rank (dt_rank)", "1",
                 "positive integer")
# --- short-convolution mixers (memsym/model/token_mixers.py; LFM2) ---------------------------
L_conv = _register("L_conv", r"L_{\mathrm{conv}}", "number of layers with a short-convolution "
                   "mixer", "1", "nonnegative")
k_sc = _register("k_sc", r"k_{\mathrm{sc}}", "short-convolution mixer's causal depthwise "
                 "convolution width (conv_L_cache)", "1", "positive integer")
L_lin = _register("L_lin", r"L_{\mathrm{lin}}", "number of layers with a lightning-attention "
                  "mixer (MiniMax-01)", "1", "nonnegative")
B_lin = _register("B_lin", r"B_{\mathrm{lin}}", "lightning-attention block size (block_size: "
                  "the tokens of one intra-block product)", "tokens", "positive integer")
# --- "global" attention layers of their own head sizes (memsym/model/token_mixers.py; Gemma 4) -
L_glb = _register("L_glb", r"L_{\mathrm{glb}}", "number of global attention layers of their own "
                  "head width and KV heads (Gemma 4's full-attention layers)", "1", "nonnegative")
d_hg = _register("d_hg", r"d_{\mathrm{hglb}}", "the global attention layers' head dimension "
                 "(global_head_dim)", "1", "positive integer")
g_g = _register("g_g", r"g_{\mathrm{glb}}", "the global attention layers' key/value heads "
                "(num_global_key_value_heads)", "1", "positive integer")
# --- layers reusing an earlier layer's keys and values (memsym/model/kv_sharing.py; Gemma 4) --
L_kvr = _register("L_kvr", r"L_{\mathrm{kvr}}", "number of layers reusing an earlier layer's keys "
                  "and values, of the model's attention shape (num_kv_shared_layers)", "1",
                  "nonnegative")
L_kvrg = _register("L_kvrg", r"L_{\mathrm{kvrg}}", "number of global attention layers reusing an "
                   "earlier global layer's keys and values", "1", "nonnegative")
# --- Gemma 4's per-layer input embeddings (memsym/model/counts.py; hidden_size_per_layer_input) -
p_pl = _register("p_pl", r"p_{\mathrm{pl}}", "per-layer input width "
                 "(hidden_size_per_layer_input: Gemma 4's per-layer embeddings)", "1",
                 "positive integer")
V_pl = _register("V_pl", r"V_{\mathrm{pl}}", "per-layer input embedding vocabulary "
                 "(vocab_size_per_layer_input)", "tokens", "positive integer")
# --- Gated DeltaNet linear-attention mixers (memsym/model/token_mixers.py; Qwen3-Next) ------
L_gdn = _register("L_gdn", r"L_{\mathrm{gdn}}", "number of layers with a Gated DeltaNet "
                  "(linear-attention) mixer", "1", "nonnegative")
H_gk = _register("H_gk", r"H_{\mathrm{gk}}", "Gated DeltaNet query/key heads "
                 "(linear_num_key_heads)", "1", "positive integer")
H_gv = _register("H_gv", r"H_{\mathrm{gv}}", "Gated DeltaNet value heads "
                 "(linear_num_value_heads)", "1", "positive integer")
d_gk = _register("d_gk", r"d_{\mathrm{gk}}", "Gated DeltaNet query/key head dim "
                 "(linear_key_head_dim)", "1", "positive integer")
d_gv = _register("d_gv", r"d_{\mathrm{gv}}", "Gated DeltaNet value head dim "
                 "(linear_value_head_dim)", "1", "positive integer")
k_gdn = _register("k_gdn", r"k_{\mathrm{gdn}}", "Gated DeltaNet causal depthwise convolution "
                  "width (linear_conv_kernel_dim)", "1", "positive integer")
# --- communication and time: groups, links, FLOP/s (memsym/terms/communication.py) --------
n_node = _register("n_node", r"n_{\mathrm{node}}", "GPUs per node (one NVLink domain)", "GPUs",
                   "positive integer")
beta_intra = _register("beta_intra", r"\beta_{\mathrm{intra}}", "intra-node (NVLink) bandwidth "
                       "per GPU, one direction", "bytes/s")
beta_inter = _register("beta_inter", r"\beta_{\mathrm{inter}}", "inter-node (InfiniBand/RoCE) "
                       "bandwidth per GPU, one direction", "bytes/s")
b_c = _register("b_c", r"b_{\mathrm{c}}", "bytes per communicated activation element (bf16: 2)",
                "bytes/element")
omega = _register("omega", r"\omega", "fraction of communication time hidden behind compute",
                  "1", "nonnegative")
price = _register("price", r"c_{\mathrm{GPU\,h}}", "price per GPU-hour", "currency/(GPU h)",
                  "nonnegative")

# --- activations and the training total: memsym/terms/activations.py, training/ ----------
c_f = _register("c_f", r"c_{\mathrm{f}}", "MoE capacity factor: routed-token load of the busiest "
                "expert rank relative to a perfectly balanced one", "1")
M_ws = _register("M_ws", r"M_{\mathrm{ws}}", "allowance for workspace and temporary buffers "
                 "(CUDA context, cuBLAS/TE workspaces, transient tensors)", "bytes", "nonnegative")
M_nccl = _register("M_nccl", r"M_{\mathrm{nccl}}", "allowance for NCCL communicator buffers",
                   "bytes", "nonnegative")
phi_frag = _register("phi_frag", r"\varphi_{\mathrm{frag}}", "allocator fragmentation margin, as a "
                     "fraction of the memory the caching allocator hands out", "1", "nonnegative")
M_alloc = _register("M_alloc", r"M_{\mathrm{alloc}}", "memory the caching allocator hands out on "
                    "one GPU: model states + activations", "bytes", "nonnegative")

# --- adapters: LoRA / QLoRA, memsym/terms/adapters.py ---------------------------------------
r_lora = _register("r_lora", "r", "LoRA rank of each adapter", "1", "positive integer")
L_lora = _register("L_lora", r"\hat{L}_{\mathrm{LoRA}}", "number of weight matrices LoRA adapts "
                   "(all layers together)", "1", "positive integer")
N_a = _register("N_a", r"N_{\mathrm{a}}", "trainable adapter parameters held by one GPU "
                "(but N_ae)",
                "parameters", "nonnegative")
N_ae = _register("N_ae", r"N_{\mathrm{ae}}", "trainable adapter parameters of the routed "
                 "experts held by one GPU (Megatron-Bridge's adapter shared by a layer's grouped "
                 "experts: every EP rank holds it, its optimizer states split over expert data "
                 "parallel)", "parameters", "nonnegative")
N_u = _register("N_u", r"N_{\mathrm{u}}", "frozen parameters kept unquantized on one GPU "
                "(embeddings, norms, output layer under QLoRA)", "parameters", "nonnegative")

# --- one pipeline stage's parameters (memsym/training/model_states.py): the per-GPU total's counts --------
N_tp = _register("N_tp", r"N_{\mathrm{tp}}", "parameters of the pipeline stage that tensor "
                 "parallelism splits, all t ranks together", "parameters", "nonnegative")
N_rep = _register("N_rep", r"N_{\mathrm{rep}}", "parameters of the pipeline stage replicated on "
                  "every tensor-parallel rank (norms, row-parallel biases)", "parameters",
                  "nonnegative")
N_exp = _register("N_exp", r"N_{\mathrm{exp}}", "routed-expert parameters of the pipeline stage, "
                  "all e t_e ranks together", "parameters", "nonnegative")
N_xq = _register("N_xq", r"N_{\mathrm{xq}}", "routed-expert parameters of the pipeline stage in "
                 "FP8 / NVFP4 weights, all e t_e ranks together: N_exp less the BF16 layers' "
                 "(--first-last-layers-bf16)", "parameters", "nonnegative")
N_sc = _register("N_sc", r"N_{\mathrm{sc}}", "parameters of one GPU that Muon leaves to its "
                 "scalar Adam (embedding, output layer, 1-D norms)", "parameters", "nonnegative")
N_q = _register("N_q", r"N_{\mathrm{q}}", "frozen linear-layer parameters on one GPU (quantized "
                "under QLoRA; the base weights LoRA adapts)", "parameters", "nonnegative")

# --- published estimators: DeepSpeed's largest layer (memsym/terms/estimators.py) ----------
N_ll = _register("N_ll", r"N_{\mathrm{ll}}", "parameters of the largest single module "
                 "(DeepSpeed's largest_layer_params, gathered whole under ZeRO-3)", "parameters")


# --- step-time model: GEMM efficiency (memsym/timing) ---------------------------------------
eta_gemm = _register("eta_gemm", r"\eta_{\mathrm{GEMM}}", "achieved GEMM efficiency: the override "
                     "that replaces memsym.timing's size-dependent efficiency curve", "1")

# --- model states as the frameworks allocate them, and transient peaks ----------------------
# memsym/terms/model_state.py (convention "framework"), memsym/terms/transients.py
b_mg = _register("b_mg", r"b_{\mathrm{mg}}", "bytes per parameter of the optimizer's separate "
                 "fp32 main-gradient copy (Megatron .float() of a 16-bit grad buffer, DeepSpeed's fp32 "
                 "gradient partition; 0 when the gradient buffer is already fp32)", "bytes/parameter",
                 "nonnegative")
b_f8 = _register("b_f8", r"b_{\mathrm{f8}}", "bytes per linear-layer weight of Transformer Engine's "
                 "cached FP8 copies (rowwise + columnwise/transpose: 2)", "bytes/parameter",
                 "nonnegative")
N_lin = _register("N_lin", r"N_{\mathrm{lin}}", "parameters of one GPU held in linear (GEMM) "
                  "layer weights, the ones FP8 quantizes (not embeddings, norms, biases)",
                  "parameters", "nonnegative")
b_r = _register("b_r", r"b_{\mathrm{r}}", "bytes per element of the gradient reduce dtype "
                "(FSDP2 reduce_dtype, fp32: 4)", "bytes/element")
b_u = _register("b_u", r"b_{\mathrm{u}}", "bytes per element of the unsharded compute parameters "
                "(FSDP2 param_dtype, ZeRO-3 16-bit params: 2)", "bytes/element")
n_ag = _register("n_ag", r"n_{\mathrm{ag}}", "parameter groups (layers) held unsharded at once "
                 "under FSDP2 / ZeRO-3 (current + prefetched: 2)", "1", "positive integer")
N_bkt = _register("N_bkt", r"N_{\mathrm{bkt}}", "elements of one gradient-reduction bucket "
                  "(DeepSpeed reduce_bucket_size 5e8; Megatron bucket max(4e7, 1e6 d))", "elements")
n_bkt = _register("n_bkt", r"n_{\mathrm{bkt}}", "gradient buckets allocated at once "
                  "(DeepSpeed IPG: 2 with overlap_comm, else 1)", "1", "positive integer")
N_pf = _register("N_pf", r"N_{\mathrm{pf}}", "elements ZeRO-3 prefetches ahead "
                 "(stage3_prefetch_bucket_size, 5e7)", "elements", "nonnegative")
M_ctx = _register("M_ctx", r"M_{\mathrm{ctx}}", "CUDA context and loaded kernel modules per GPU "
                  "(outside the caching allocator)", "bytes", "nonnegative")
S_nccl = _register("S_nccl", r"S_{\mathrm{nccl}}", "NCCL buffer per channel and peer "
                   "(NCCL_BUFFSIZE, 4 MiB)", "bytes")
n_ch = _register("n_ch", r"n_{\mathrm{ch}}", "NCCL channels per communicator", "1",
                 "positive integer")


def registry() -> Mapping[str, SymbolInfo]:
    """All registered symbols by name (a read-only view).

    Examples
    --------
    >>> registry()["b_hp"].latex
    'b_{\\\\mathrm{hp}}'
    """
    return MappingProxyType(_REGISTRY)


def lookup(name: str) -> sp.Symbol:
    """The registered symbol called ``name``; never parses the string.

    Raises
    ------
    UnknownNameError
        When no symbol has that name; the message lists the closest names.

    Examples
    --------
    >>> lookup("d")
    d
    """
    if isinstance(name, sp.Symbol):
        name = name.name
    if not isinstance(name, str) or name not in _REGISTRY:
        raise UnknownNameError("symbol", name, list(_REGISTRY))
    return _REGISTRY[name].symbol


def info(symbol) -> SymbolInfo:
    """The :class:`SymbolInfo` of a registered symbol (or of its name)."""
    return _REGISTRY[lookup(symbol).name]
