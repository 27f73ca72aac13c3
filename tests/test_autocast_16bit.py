"""torch.autocast over 16-bit weights (the Trainer's ``--bf16`` over a bf16 checkpoint) on
transformers' GPT-2 and GPT-NeoX (Pythia), against the same model without autocast, and by-hand
sums (memsym.terms.autocast16: autocast16_layer_excess, autocast16_output).

Autocast casts no bf16 weight and leaves the residual bf16; what a GPU run keeps beyond the
plain bf16 model comes from the ops CUDA's autocast runs in fp32 that the CPU's leaves in 16
bits (``layer_norm``, gelu_new's ``pow``: torch 2.13 aten/src/ATen/autocast_mode.h
``AT_FORALL_FP32``).  The oracle: torch's MemTracker on transformers' model on the CPU, bfloat16
under ``torch.autocast("cpu", torch.bfloat16)`` with those ops run in CUDA's dtype
(``test_autocast_gpt2._cuda_policy``, its ``tracked_phases``), against bfloat16 without
autocast.  Sizes: h = 128, 2 heads of 64, f = 4h, 2 layers, V = 1000; s = 128
(--block_size), b = 2, tau = sb = 256.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re

import pytest

from in_process import json_report, refused_line
from memsym.model.hf_config import from_hf_config
from memsym.terms.autocast import AUTOCAST_ACTIVATIONS
from memsym.terms.autocast16 import AUTOCAST16_LAYERS
from test_autocast_gpt2 import tracked_phases

H, HEADS, LAYERS, V, POSITIONS = 128, 2, 2, 1000, 256
F, S, B = 4 * H, 128, 2
TAU = S * B
ALLOCATED = ("--metric", "allocated")               # no allowance: phases are allocations alone
#: what CPU autocast must run in fp32 to be CUDA's: the AutocastCUDA kernels emulated below
# the ops test_autocast_gpt2._cuda_policy runs in fp32 under CPU autocast, as CUDA runs them
EMULATED = {"aten::layer_norm": "layer_norm", "aten::pow.Tensor_Scalar": "pow.Tensor_Scalar",
            "aten::softmax.int": "softmax.int", "aten::log_softmax.int": "log_softmax.int",
            "aten::sum.dim_IntList": "sum.dim_IntList"}


def _config(tmp_path, family="gpt2", **extra) -> str:
    folder = tmp_path / family
    folder.mkdir()
    fields = {"n_embd": H, "n_layer": LAYERS, "n_head": HEADS, "n_positions": POSITIONS} \
        if family in GPT2_STYLE else OWN_FIELDS[family] if family in OWN_FIELDS else {
                                  "hidden_size": H, "num_hidden_layers": LAYERS,
                                  "num_attention_heads": HEADS, "intermediate_size": F,
                                  "max_position_embeddings": POSITIONS,
                                  **({} if family == "gpt_neox"
                                     else {"num_key_value_heads": HEADS}),
                                  **({"ffn_dim": F} if family == "opt" else {})}
    (folder / "config.json").write_text(json.dumps({
        "model_type": family, "vocab_size": V, **fields, **extra}), encoding="utf-8")
    return str(folder)


def _launch(model, *extra, autocast=("--bf16",)):
    return ["estimate", "torchrun", "--nproc_per_node", "2", "run_clm.py", "--model_name_or_path",
            model, "--dtype", "bfloat16", *autocast, "--block_size", str(S),
            "--per_device_train_batch_size", str(B), "--output_dir", "o", *extra, "--gpu",
            "h100-80gb", *ALLOCATED]


#: per family, by hand from transformers 5.25.0: (LayerNorms a layer, linears reading their
#: outputs, gelu_new); GPT-2 modeling_gpt2.py:254-256 (ln_1, ln_2), :187, :241 (c_attn, c_fc),
#: :237 (gelu_new); GPT-NeoX modeling_gpt_neox.py:232-233, :250, :261, :266 (query_key_value,
#: dense_h_to_4h; F.gelu); Phi modeling_phi.py:258, :190-192, :247 (one input_layernorm read by
#: q_proj, k_proj, v_proj and fc1; gelu_new); StableLM modeling_stablelm.py:327-330, :267-269,
#: :152 (input_layernorm read by q, k, v; post_attention_layernorm by gate and up; SiLU), with
#: use_parallel_residual one norm read by all five (:359-364); GPT-J modeling_gptj.py:213,
#: :141-143, :202 (ln_1 read by q, k, v and fc_in in parallel; gelu_new); CodeGen
#: modeling_codegen.py:212, :138, :201 (ln_1 read by the fused qkv_proj and fc_in; gelu_new);
#: GPTBigCode modeling_gpt_bigcode.py:266-270, :203, :253 (GPT-2's layout, gelu_pytorch_tanh);
#: StarCoder2 modeling_starcoder2.py:212-213, :171-173, :63 (q, k, v; c_fc; gelu_pytorch_tanh);
#: OPT modeling_opt.py:197-202, :218, :153-157, :242-244 (self_attn_layer_norm read by q, k,
#: v; final_layer_norm by fc1; relu); Falcon modeling_falcon.py:371-381, :396-420, :296, :352
#: (input_layernorm read by query_key_value and dense_h_to_4h in parallel; parallel_attn false:
#: input_layernorm, post_attention_layernorm; new_decoder_architecture: ln_attn and ln_mlp on
#: one residual; gelu); BLOOM modeling_bloom.py:373, :392, :258, :327 (input_layernorm read by
#: query_key_value, post_attention_layernorm by dense_h_to_4h, on an fp32 residual after the
#: embedding's norm, :500; BloomGelu); MPT modeling_mpt.py:193, :207, :98, :150 (norm_1 read by
#: Wqkv, norm_2 by up_proj, weight-only norms :165-174; nn.GELU)
SHAPES = {"gpt2": (2, 2, True), "gpt_neox": (2, 2, False), "phi": (1, 4, True),
          "stablelm": (2, 5, False), "gptj": (1, 4, True), "codegen": (1, 2, True),
          "gpt_bigcode": (2, 2, False), "starcoder2": (2, 4, False), "opt": (2, 4, False),
          "falcon": (1, 2, False), "bloom": (2, 2, False), "mpt": (2, 2, False)}
#: the parallel blocks: one LayerNorm read by attention and MLP, or two on one residual
PARALLEL = ("gpt_neox", "phi", "stablelm", "gptj", "codegen")
#: transformers' GPT-2-style configs (n_embd, n_layer, n_head, n_positions)
GPT2_STYLE = ("gpt2", "gptj", "codegen", "gpt_bigcode")
#: the config.json fields of the types that name them their own way (BLOOM's, MPT's)
OWN_FIELDS = {"bloom": {"hidden_size": H, "n_layer": LAYERS, "n_head": HEADS},
              "mpt": {"d_model": H, "n_layers": LAYERS, "n_heads": HEADS,
                      "max_seq_len": POSITIONS}}
#: weight-only LayerNorms (MPT's: bias None), 4 bytes of fp32 weight an element
WEIGHT_ONLY = ("mpt",)


def _by_hand(checkpointing: bool, family: str, parallel: bool = True) -> dict:
    """--bf16 - no autocast over bf16 weights, phase by phase, under CUDA's autocast: each
    nn.LayerNorm keeps an fp32 copy of its bf16 input (4 tau h) where the bf16 model keeps the
    bf16 input (2 tau h, once for the norms of a parallel residual, which read one residual:
    GPT-NeoX's two) and fp32 copies of its weight and bias (8 h); each linear reading a norm's
    fp32 output keeps its own bf16 cast, where the bf16 model keeps the norm's bf16 output once
    (2 tau h for each reader beyond one a norm: Phi's 3, StableLM's 3); gelu_new keeps its pow
    input, tanh and 1 + tanh in fp32 (+2 x 3 tau f); the final LayerNorm 2 tau h + 8 h.  No
    weight is cast, the states are the same, a checkpoint is the bf16 residual.  MPT's norms
    have no bias (4 h of fp32 weight a norm).  BLOOM's embedding norm keeps 2 tau h + 8 h more
    and makes the residual fp32, which its norms keep themselves (4 tau h a norm, as a cast
    would), which each checkpoint is (2 tau h more a layer) and which the fp32 alibi every
    checkpoint holds follows (b a s elements, 2 bytes more each)."""
    norms, readers, gelu_new = SHAPES[family]
    if family == "falcon":
        parallel = _FALCON_LAYOUT.get(parallel, parallel)    # alibi: the layout's own norms
    if family == "stablelm" and parallel:
        norms = 1                                     # no post_attention_layernorm
    if family == "falcon":
        norms = 1 if parallel == "old" else 2         # one input_layernorm, or two norms
    inputs = 1 if family in PARALLEL and parallel or family == "falcon" and parallel else norms
    gelu = 3 * 2 * TAU * F if gelu_new else 0
    weights = 4 * H if family in WEIGHT_ONLY else 8 * H       # a norm's fp32 weight (and bias)
    # Phi's qk_layernorm: fp32 copies of q (a heads) and k (g = a here) of d_h = H / HEADS,
    # 4 bytes where the bf16 layer keeps 2, and of each norm's weight and bias of d_h
    qk = 2 * TAU * (HEADS + HEADS) * (H // HEADS) + 2 * 8 * (H // HEADS) \
        if parallel == "qk" else 0
    layer = norms * 4 * TAU * H - inputs * 2 * TAU * H + (readers - norms) * 2 * TAU * H \
        + gelu + norms * weights + qk
    output = 2 * TAU * H + weights                    # the final LayerNorm
    bloom = family == "bloom"
    start = 2 * TAU * H + 8 * H + (2 * B * HEADS * S if checkpointing else 0) if bloom else 0
    if not checkpointing:
        return {"forward": start + LAYERS * layer + output,
                "loss-backward": start + LAYERS * layer + output,
                "backward": start + LAYERS * layer, "optimizer": 0}          # output freed
    checkpoints = LAYERS * 2 * TAU * H if bloom else 0
    return {"forward": start + checkpoints + output, "loss-backward": start + checkpoints + output,
            "backward": start + checkpoints + layer, "optimizer": 0}   # one layer rebuilt


CASES = [("gpt2", True, False), ("gpt2", True, True), ("gpt_neox", True, False),
         ("gpt_neox", True, True), ("gpt_neox", False, False), ("phi", True, False),
         ("phi", True, True), ("stablelm", False, False), ("stablelm", True, False),
         ("stablelm", False, True), ("gptj", True, False), ("codegen", True, False),
         ("gpt_bigcode", True, False), ("starcoder2", True, False),
         ("starcoder2", True, True), ("opt", True, False),
         ("opt", True, True), ("falcon", "old", False), ("falcon", "new", False),
         ("falcon", False, False), ("falcon", "old", True), ("bloom", True, False),
         ("bloom", True, True), ("bloom", "post", False), ("mpt", True, False),
         ("mpt", True, True), ("phi", "qk", False), ("phi", "qk", True),
         ("falcon", "old-alibi", False), ("falcon", "seq-alibi", False),
         ("falcon", "old-alibi", True)]   # family, parallel, checkpointing


#: Falcon's layouts (``parallel`` in CASES): the old parallel block (one input_layernorm,
#: multi-query), the new decoder architecture (ln_attn and ln_mlp, grouped KV), sequential
_FALCON = {"old": {}, "new": {"new_decoder_architecture": True, "num_kv_heads": HEADS},
           False: {"parallel_attn": False}, "old-alibi": {"alibi": True},
           "seq-alibi": {"alibi": True, "parallel_attn": False}}
#: the alibi cases' layouts (their norms the rotary ones')
_FALCON_LAYOUT = {"old-alibi": "old", "seq-alibi": False}
#: Phi without and with qk_layernorm (q_layernorm, k_layernorm of h / a)
_PHI = {True: {}, "qk": {"qk_layernorm": True}}
#: BLOOM's layouts: the residual taken before each norm (the default) or after it
_BLOOM = {True: {}, "post": {"apply_residual_connection_post_layernorm": True}}


def _phases(capsys, tmp_path, family, parallel, checkpointing, autocast) -> dict:
    folder = tmp_path / ("amp" if autocast else "plain")
    folder.mkdir()
    model = _config(folder, family, **({"use_parallel_residual": parallel}
                                       if family in ("gpt_neox", "stablelm") else
                                       _FALCON[parallel] if family == "falcon" else
                                       _BLOOM[parallel] if family == "bloom" else
                                       _PHI[parallel] if family == "phi" else {}))
    extra = ["--gradient_checkpointing"] if checkpointing else []
    rep = json_report(capsys, _launch(model, *extra, autocast=("--bf16",) if autocast else ()))
    assert rep["training"]["autocast"] == ("bf16" if autocast else None)
    return rep["phases"]


@pytest.mark.parametrize("family, parallel, checkpointing", CASES)
def test_a_bf16_model_under_bf16_is_the_bf16_job_plus_its_fp32_layernorms(
        capsys, tmp_path, family, parallel, checkpointing):
    """``--dtype bfloat16 --bf16`` against ``--dtype bfloat16``: each phase's difference is the
    by-hand sum."""
    amp, plain = (_phases(capsys, tmp_path, family, parallel, checkpointing, on)
                  for on in (True, False))
    want = _by_hand(checkpointing, family, parallel)
    assert {ph: amp[ph] - plain[ph] for ph in want} == want


def test_the_terms_are_the_derivation():
    """memsym's terms, symbol for symbol, against the by-hand excess (GPT-2's layer, GPT-NeoX's
    parallel one, the final norm)."""
    import sympy as sp
    from memsym.symbols import b, c, f, h, s
    from memsym.terms.autocast16 import autocast16_layer_excess, autocast16_output
    tau = s * b
    assert sp.expand(autocast16_layer_excess(tanh_gelu=True).expr.xreplace({c: 1})
                     - (8 * tau * h - 4 * tau * h + 6 * tau * f + 16 * h)) == 0
    assert sp.expand(autocast16_layer_excess(norm_tensors=1).expr.xreplace({c: 1})
                     - (8 * tau * h - 2 * tau * h + 16 * h)) == 0
    assert sp.expand(autocast16_output().expr.xreplace({c: 1}) - (2 * tau * h + 8 * h)) == 0
    # Phi: one norm (4 tau h over a 2 tau h input), three more casts of its output, gelu_new
    phi = autocast16_layer_excess(tanh_gelu=True, norms=1, norm_tensors=1, readers=4)
    assert sp.expand(phi.expr.xreplace({c: 1})
                     - (4 * tau * h - 2 * tau * h + 3 * 2 * tau * h + 6 * tau * f + 8 * h)) == 0
    # StableLM: two norms, q, k, v on the first and gate, up on the second (three more casts)
    stablelm = autocast16_layer_excess(readers=5)
    assert sp.expand(stablelm.expr.xreplace({c: 1})
                     - (8 * tau * h - 4 * tau * h + 3 * 2 * tau * h + 16 * h)) == 0
    # MPT: weight-only norms (4 h of fp32 weight each); BLOOM: an fp32 checkpoint, and its
    # embedding's norm with the fp32 alibi the checkpoints hold (b a s elements, 2 bytes more)
    from memsym.symbols import a
    from memsym.terms.autocast16 import autocast16_input
    assert sp.expand(autocast16_layer_excess(norm_weights=1).expr.xreplace({c: 1})
                     - (8 * tau * h - 4 * tau * h + 8 * h)) == 0
    assert sp.expand(autocast16_output(1).expr.xreplace({c: 1}) - (2 * tau * h + 4 * h)) == 0
    assert sp.expand(autocast16_layer_excess("full", fp32_residual=True).expr.xreplace({c: 1})
                     - 2 * tau * h) == 0
    assert sp.expand(autocast16_input("full").expr.xreplace({c: 1})
                     - (2 * tau * h + 8 * h + 2 * b * a * s)) == 0
    assert sp.expand(autocast16_input().expr.xreplace({c: 1}) - (2 * tau * h + 8 * h)) == 0
    assert sp.expand(autocast16_input(frozen=True).expr.xreplace({c: 1})
                     - (4 * tau * h + 8 * h)) == 0
    # Phi's q and k LayerNorms of d_h: fp32 copies of a and g heads, weights and biases
    from memsym.symbols import d_h, g
    from memsym.terms.autocast16 import autocast16_qk_norms
    assert sp.expand(autocast16_qk_norms().expr.xreplace({c: 1})
                     - (4 * tau * (a + g) * d_h - 2 * tau * (a + g) * d_h + 2 * 2 * 4 * d_h)) == 0
    assert autocast16_qk_norms("full").expr == 0


def test_fp16_weights_under_fp16_autocast_keep_what_bf16_ones_do(capsys, tmp_path):
    """memsym's own options (the Trainer refuses --fp16 over fp16 weights: its GradScaler):
    the same 2-byte widths, the same excess."""
    model = _config(tmp_path, "gpt2")
    common = ["estimate", model, "--framework", "deepspeed", "--sharding", "ddp",
              "--torch-ddp-buckets", "--optimizer", "adam", "--seq-length", str(S),
              "--micro-batch-size", str(B), *ALLOCATED]
    got = {p: json_report(capsys, [*common, "--precision", p, "--autocast", p])["phases"]
           for p in ("bf16", "fp16")}
    assert got["bf16"] == got["fp16"]


def _notes(capsys, tmp_path, family, *extra, **fields) -> tuple:
    rep = json_report(capsys, _launch(_config(tmp_path, family, **fields), *extra))
    return rep["training"]["autocast"], " ".join(rep["notes"])


def test_an_unmeasured_layernorm_model_says_what_is_not_counted(capsys, tmp_path):
    """Persimmon (LayerNorms, not measured) stays the bf16 job, and its note says the fp32
    LayerNorm copies are not counted; GPT-2 of another activation and OPT without the
    LayerNorms' weights too; Phi with
    qk_layernorm and Falcon with alibi are counted (measured below); the Llama family keeps
    nothing more (measured below)."""
    amp, notes = _notes(capsys, tmp_path, "persimmon")
    assert amp is None and "not counted for a persimmon model" in notes and "LayerNorm" in notes
    amp, notes = _notes(capsys, tmp_path, "opt", layer_norm_elementwise_affine=False)
    assert amp is None and "not counted for a opt model with qk_layernorm or " \
        "LayerNorms without weight" in notes
    amp, notes = _notes(capsys, tmp_path, "gpt2", activation_function="gelu_fast")
    assert amp is None and "not counted for a gpt2 model of activation gelu_fast" in notes
    for family, fields in (("gpt_neox", {}), ("phi", _PHI["qk"]), ("falcon", {"alibi": True})):
        amp, notes = _notes(capsys, tmp_path, family, **fields)
        assert amp == "bf16" and "autocast16_layer_excess" in notes, family
    amp, notes = _notes(capsys, tmp_path, "llama")
    assert amp is None and "its RMSNorm casts to fp32" in notes


# --- a real engine: torch's MemTracker on transformers' own models on the CPU ----------------
def test_the_emulated_ops_are_cudas_own():
    """This torch's CUDA autocast has its own kernel for each emulated op, the CPU's none."""
    torch = pytest.importorskip("torch")
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    cpu = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"))
    for op in EMULATED:
        assert op in cuda and op not in cpu, op


def _model(family, dtype="bfloat16", parallel=True, checkpointing=False):
    """transformers' two-layer model of ``family``, SDPA, use_cache off as the Trainer sets it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = dict(vocab_size=V, use_cache=False, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None, attn_implementation="sdpa")
    if family in ("bloom", "mpt"):         # eager attention alone (no SDPA in their classes)
        del common["attn_implementation"]
        cfg = transformers.BloomConfig(hidden_size=H, n_layer=LAYERS, n_head=HEADS,
                                       **_BLOOM[parallel], **common) if family == "bloom" else \
            transformers.MptConfig(d_model=H, n_layers=LAYERS, n_heads=HEADS,
                                   max_seq_len=POSITIONS, **common)
        model = (transformers.BloomForCausalLM if family == "bloom"
                 else transformers.MptForCausalLM)(cfg)
    elif family in GPT2_STYLE:
        name = {"gpt2": "GPT2", "gptj": "GPTJ", "codegen": "CodeGen",
                "gpt_bigcode": "GPTBigCode"}[family]
        head = "LMHeadModel" if family == "gpt2" else "ForCausalLM"
        model = getattr(transformers, name + head)(getattr(transformers, name + "Config")(
            n_embd=H, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS, **common))
    else:
        classes = {"gpt_neox": "GPTNeoX", "llama": "Llama", "mistral": "Mistral",
                   "qwen2": "Qwen2", "qwen3": "Qwen3", "phi": "Phi", "stablelm": "StableLm",
                   "starcoder2": "Starcoder2", "opt": "OPT", "falcon": "Falcon"}[family]
        extra = {"use_parallel_residual": parallel} if family == "gpt_neox" else {
            "num_key_value_heads": HEADS, **({"use_parallel_residual": parallel}
                                             if family == "stablelm" else {}),
            **({"ffn_dim": F, "word_embed_proj_dim": H} if family == "opt" else {}),
            **(_FALCON.get(parallel, {}) if family == "falcon" else {}),
            **(_PHI[parallel] if family == "phi" else {})}
        if family == "falcon":
            extra.pop("num_key_value_heads")
        cfg = getattr(transformers, classes + "Config")(
            hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=F, max_position_embeddings=POSITIONS, **extra, **common)
        model = getattr(transformers, classes + "ForCausalLM")(cfg)
    model = model.to(getattr(torch, dtype)).train()
    if checkpointing:
        model.activation_checkpointing_enable()      # --gradient_checkpointing's call
    return model


@pytest.mark.parametrize("family, parallel", [*((family, True) for family in SHAPES),
                                              ("phi", "qk"), ("falcon", "old-alibi"),
                                              ("bloom", "post"), *((family, True) for family in
                                              ("llama", "mistral", "qwen2", "qwen3"))])
def test_no_other_op_cuda_alone_runs_in_fp32_meets_a_16bit_tensor(family, parallel):
    """Every op of the bf16 model's forward under CPU autocast that CUDA's autocast registers
    and the CPU's does not, on a 16-bit input, is one :data:`EMULATED` covers (``layer_norm``
    reaches the kernels as ``native_layer_norm``); the Llama family meets none (its RMSNorm
    casts to fp32 itself), so its CPU run is CUDA's and it keeps nothing more."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    cuda_only = (set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
                 - set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU")))
    half = (torch.bfloat16, torch.float16)
    met = set()

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._schema.name + ("" if func._overloadname == "default"
                                        else "." + func._overloadname)
            if name in cuda_only and any(isinstance(x, torch.Tensor) and x.dtype in half
                                         for x in (*args, *(kwargs or {}).values())):
                met.add(name)
            return func(*args, **(kwargs or {}))

    model = _model(family, parallel=parallel)
    ids = torch.randint(0, V, (B, S))
    with torch.autocast("cpu", dtype=torch.bfloat16), Ops():
        model(input_ids=ids, labels=ids)
    covered = {"aten::native_layer_norm" if op == "aten::layer_norm" else op for op in EMULATED}
    assert met <= covered, met - covered
    assert (met == set()) == (family not in SHAPES), met


def _tracked(family: str, autocast: bool, checkpointing: bool, parallel: bool = True) -> dict:
    """Activation bytes (MemTracker's ACT + TEMP) of the bf16 model's training forward at the
    forward's end and as the loss's backward starts, under CPU bf16 autocast with CUDA's
    dtypes (``test_autocast_gpt2._cuda_policy``) or without autocast."""
    torch = pytest.importorskip("torch")
    model = _model(family, parallel=parallel, checkpointing=checkpointing)
    return tracked_phases(model, torch.randint(0, V, (B, S)), autocast=autocast)


def _cpu_only(checkpointing: bool, family: str, parallel: bool) -> int:
    """What the CPU's kernels keep beyond CUDA's in autocast - plain: native_layer_norm on the
    CPU keeps mean and rstd in its input's dtype (fp32 under the emulated autocast, 4 + 4 bytes
    a token; bf16 without, 2 + 2) where CUDA keeps fp32 in both: +4 tau for each LayerNorm
    call that keeps them (the final one, BLOOM's embedding norm, and the layers' without
    checkpointing; Phi's q and k norms, a and g rows a token each)."""
    norms = 1 if family in ("phi", "gptj", "codegen") or (family == "stablelm" and parallel) \
        or (family == "falcon" and _FALCON_LAYOUT.get(parallel, parallel) == "old") else 2
    qk = (HEADS + HEADS) * 4 * TAU if parallel == "qk" else 0
    return (1 + (family == "bloom") + (0 if checkpointing else norms * LAYERS)) * 4 * TAU \
        + (0 if checkpointing else LAYERS * qk)


@pytest.mark.parametrize("family, parallel, checkpointing", CASES)
def test_torchs_memory_tracker_sees_the_excess_memsym_counts(
        capsys, tmp_path, family, parallel, checkpointing):
    """bf16 under (emulated CUDA) autocast - bf16 as torch's MemTracker measures transformers'
    own model = the by-hand sum = memsym's phase difference, plus the CPU kernels' own
    (:func:`_cpu_only`), at the forward's end and as the loss's backward starts."""
    amp, plain = (_phases(capsys, tmp_path, family, parallel, checkpointing, on)
                  for on in (True, False))
    measured = {on: _tracked(family, on, checkpointing, parallel) for on in (True, False)}
    want = _by_hand(checkpointing, family, parallel)
    for phase in ("forward", "loss-backward"):
        seen = measured[True][phase] - measured[False][phase] - _cpu_only(checkpointing, family,
                                                                          parallel)
        assert seen == want[phase] == amp[phase] - plain[phase], phase


def test_the_llama_family_keeps_nothing_more_under_autocast():
    """Llama's bf16 model under CPU autocast (CUDA's, as no op CUDA alone runs in fp32 meets
    its 16-bit tensors) keeps what it keeps without: memsym's 16-bit job is its count."""
    measured = {on: _tracked("llama", on, False) for on in (True, False)}
    assert measured[True] == measured[False]


def test_gpt_bigcodes_default_activation_is_its_config_classs(capsys, tmp_path):
    """A GPTBigCode config.json without activation_function runs GPTBigCodeConfig's default,
    gelu_pytorch_tanh (a fused F.gelu: none of gelu_new's three more tensors), read as such."""
    transformers = pytest.importorskip("transformers")
    assert transformers.GPTBigCodeConfig().activation_function == "gelu_pytorch_tanh"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    default = json_report(capsys, _launch(_config(tmp_path / "a", "gpt_bigcode"), autocast=()))
    named = json_report(capsys, _launch(_config(tmp_path / "b", "gpt_bigcode",
                                                activation_function="gelu_pytorch_tanh"),
                                        autocast=()))
    assert default["phases"] == named["phases"]


#: the config field each LayerNorm family's MLP reads its activation from, as transformers
#: 5.25.0 spells it (modeling_gpt2.py:237, modeling_gpt_neox.py:43, modeling_phi.py:242,
#: modeling_stablelm.py:149, modeling_gptj.py:198, modeling_codegen.py:197,
#: modeling_gpt_bigcode.py:248, modeling_starcoder2.py:59, modeling_opt.py:195,
#: modeling_falcon.py:347)
ACTIVATION_FIELDS = {"gpt2": "activation_function", "gpt_neox": "hidden_act", "phi": "hidden_act",
                     "stablelm": "hidden_act", "gptj": "activation_function",
                     "codegen": "activation_function", "gpt_bigcode": "activation_function",
                     "starcoder2": "hidden_act", "opt": "activation_function",
                     "falcon": "activation"}


@pytest.mark.parametrize("family", sorted(ACTIVATION_FIELDS))
def test_each_reader_records_the_activation_its_model_runs(tmp_path, family):
    """Each LayerNorm family's config.json reader records the activation transformers' model
    runs (``hf_activation``, what autocast's checks compare with the measured one): the
    config class's default where the file leaves the field out, the file's where it names one;
    the field is the one the modeling code reads (``config.<field>`` in its source)."""
    transformers = pytest.importorskip("transformers")
    field = ACTIVATION_FIELDS[family]
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    assert re.search(rf"config\.{field}\b", inspect.getsource(modeling))
    default = getattr(transformers.AutoConfig.for_model(family), field)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert from_hf_config(_config(tmp_path / "a", family)).extra["hf_activation"] == default
    named = from_hf_config(_config(tmp_path / "b", family, **{field: "gelu_fast"}))
    assert named.extra["hf_activation"] == "gelu_fast" != default
    # the one table autocast's check and the Trainer launch read says the same
    assert AUTOCAST_ACTIVATIONS[family] == (field, default)


#: the measured LayerNorm types whose activation is their code's, named by no config field
#: (BLOOM's BloomGelu, modeling_bloom.py:322; MPT's nn.GELU, modeling_mpt.py:145)
FIXED_ACTIVATION = ("bloom", "mpt")


def test_the_activation_table_holds_each_measured_layernorm_type():
    """One entry per LayerNorm type measured (those of AUTOCAST16_LAYERS with keywords) whose
    config names its activation; BLOOM's and MPT's modeling code reads no activation field."""
    assert set(AUTOCAST_ACTIVATIONS) == set(ACTIVATION_FIELDS) == {
        k for k, v in AUTOCAST16_LAYERS.items() if v is not None} - set(FIXED_ACTIVATION)
    for family in FIXED_ACTIVATION:
        pytest.importorskip("transformers")
        source = inspect.getsource(importlib.import_module(
            f"transformers.models.{family}.modeling_{family}"))
        assert not re.search(r"config\.(hidden_act|activation_function|activation)\b", source)


@pytest.mark.parametrize("family", sorted(ACTIVATION_FIELDS))
def test_another_activation_under_16bit_autocast_is_refused(capsys, tmp_path, family):
    """memsym's own --autocast over 16-bit weights counts the measured activation only: the
    config's default is estimated, gelu_new where it is not the default (or gelu where it is)
    refused in one line naming both."""
    common = ["--framework", "deepspeed", "--sharding", "ddp", "--optimizer", "adam",
              "--seq-length", str(S), "--micro-batch-size", str(B), "--precision", "bf16",
              "--autocast", "bf16", *ALLOCATED]
    field, measured = ACTIVATION_FIELDS[family], AUTOCAST_ACTIVATIONS[family][1]
    other = "gelu" if measured == "gelu_new" else "gelu_new"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert json_report(capsys, ["estimate", _config(tmp_path / "a", family), *common])[
        "training"]["autocast"] == "bf16"
    line = refused_line(capsys, ["estimate", _config(tmp_path / "b", family, **{field: other}),
                                 *common])
    assert f"a {family} model of activation {other} ({measured} is counted)" in line
# --- PEFT's LoRA under the Trainer's --bf16 over bf16 weights ----------------------------------
#: (family, parallel) of the LoRA cases, all under gradient checkpointing (TRL's default, whose
#: enable_input_require_grads gives every norm an input needing a gradient)
LORA_CASES = [("gpt2", True), ("gpt_neox", True), ("phi", "qk"), ("bloom", True)]


def _lora_by_hand(family: str, parallel) -> dict:
    """--autocast - without over a LoRA job (its adapters fp32, cast by autocast either way),
    checkpointed: what full training keeps (:func:`_by_hand`) but for the linears reading a
    norm's fp32 output, all frozen, which keep no input (their casts are not kept, nor is the
    16-bit norm output without CUDA's autocast: PEFT's lora_A casts its own copy either way),
    so the rebuilt layer keeps no extra cast; BLOOM's embedding output, the leaf
    enable_input_require_grads makes, stays beside its norm's fp32 copy."""
    want = _by_hand(True, family, parallel)
    if family == "bloom":
        # the embedding's bf16 output is the leaf enable_input_require_grads makes (its
        # gradient's accumulator holds it), kept beside the norm's fp32 copy: 2 tau h more
        want = {ph: v + (2 * TAU * H if ph != "optimizer" else 0) for ph, v in want.items()}
    norms, readers, _ = SHAPES[family]
    want["backward"] -= (readers - norms) * 2 * TAU * H
    return want


def _lora_phases(capsys, tmp_path, family, parallel, autocast) -> dict:
    folder = tmp_path / ("amp" if autocast else "plain")
    folder.mkdir()
    model = _config(folder, family, **(_PHI[parallel] if family == "phi" else {}))
    return json_report(capsys, [
        "estimate", model, "--framework", "deepspeed", "--sharding", "ddp",
        "--torch-ddp-buckets", "--optimizer", "adam", "--seq-length", str(S),
        "--micro-batch-size", str(B), "--precision", "bf16", "--finetune", "lora",
        "--lora-rank", "16", "--lora-dropout", "--recompute-granularity", "full", *ALLOCATED,
        *(("--autocast", "bf16") if autocast else ())])["phases"]


@pytest.mark.parametrize("family, parallel", LORA_CASES)
def test_lora_under_bf16_keeps_what_full_training_keeps_but_the_readers_casts(
        capsys, tmp_path, family, parallel):
    """PEFT's LoRA (all-linear, r 16, dropout 0.05, fp32 adapters) on transformers' bf16 model,
    checkpointed: under CPU autocast with CUDA's dtypes less under the CPU's own (the job
    without --autocast: memsym's LoRA counts the adapters under autocast already), as torch's
    MemTracker measures it, less the CPU kernels' own (:func:`_cpu_only`) = the by-hand sum =
    memsym's phase difference (and memsym's rebuilt layer: the by-hand one)."""
    peft = pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    amp, plain = (_lora_phases(capsys, tmp_path, family, parallel, on) for on in (True, False))
    want = _lora_by_hand(family, parallel)
    assert {ph: amp[ph] - plain[ph] for ph in want} == want
    ids = torch.randint(0, V, (B, S))
    measured = {}
    for cuda in (True, False):
        model = peft.get_peft_model(_model(family, parallel=parallel, checkpointing=True),
                                    peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
                                                    target_modules="all-linear"))
        measured[cuda] = tracked_phases(model, ids, autocast=True, cuda=cuda)
    for phase in ("forward", "loss-backward"):
        seen = measured[True][phase] - measured[False][phase] - _cpu_only(True, family, parallel)
        assert seen == want[phase], phase


def _trl(model, *extra) -> list:
    return ["estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", model,
            "--per_device_train_batch_size", str(B), "--max_length", str(S), "--dtype",
            "bfloat16", "--use_peft", "--lora_target_modules", "all-linear", *extra, *ALLOCATED]


def test_a_trl_lora_launch_is_counted_as_measured_and_said_otherwise(capsys, tmp_path):
    """TRL's --use_peft over bf16 weights under its default --bf16: counted (--autocast) with
    gradient checkpointing (its default) and the model's own loss; without checkpointing (the
    first layer's norms then keep nothing: not measured) and with TRL's chunked loss (its
    default) the 16-bit job, a note saying why; memsym's own options refuse LoRA under
    autocast over 16-bit weights without full recompute, in one line."""
    model = _config(tmp_path, "gpt2")
    assert json_report(capsys, _trl(model, "--loss_type", "nll"))["training"]["autocast"] \
        == "bf16"
    for extra, why in ((("--loss_type", "nll", "--gradient_checkpointing", "false"),
                        "under --use_peft with no gradient checkpointing"),
                       ((), "under --use_peft with TRL's chunked loss")):
        rep = json_report(capsys, _trl(model, *extra))
        assert rep["training"]["autocast"] is None
        assert f"not counted for a gpt2 model {why}" in " ".join(rep["notes"])
    line = refused_line(capsys, ["estimate", model, "--framework", "deepspeed", "--sharding",
                                 "ddp", "--torch-ddp-buckets", "--optimizer", "adam",
                                 "--precision", "bf16", "--autocast", "bf16", "--finetune",
                                 "lora"])
    assert "not finetune lora under recompute none" in line


def test_trls_chunked_loss_packs_the_final_layernorms_fp32_output(capsys, tmp_path):
    """Why TRL's chunked loss under autocast over bf16 weights is not counted on a LayerNorm
    model: TRL's own _patch_chunked_ce_lm_head (tests/trl_chunked_vendored.py) packs the
    backbone's output, the final LayerNorm's fp32 output under CUDA's autocast, so at the
    forward's end and as the loss's backward starts MemTracker sees, beyond the final norm's
    own (2 tau h + 8 h, and the CPU's statistics 4 tau), the n = b (s - 1) packed rows at 4
    bytes where they are 2 (GPT-2, checkpointed, full training and LoRA alike).  The launch
    says so in its note; memsym's own options are refused in one line."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    pytest.importorskip("packaging")
    import trl_chunked_vendored as trl
    ids = torch.randint(0, V, (B, S))
    for lora in (False, True):
        measured = {}
        for cuda in (True, False):
            model = _model("gpt2", checkpointing=True)
            top = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules=["c_attn"])) \
                if lora else model
            trl._patch_chunked_ce_lm_head(top.get_base_model() if lora else top,
                                          chunk_size=trl._CHUNKED_LM_HEAD_CHUNK_SIZE)
            measured[cuda] = tracked_phases(top, ids, autocast=True, cuda=cuda)
        for phase in ("forward", "loss-backward"):
            assert measured[True][phase] - measured[False][phase] == (
                2 * TAU * H + 8 * H + 4 * TAU + 2 * B * (S - 1) * H), (lora, phase)
    model = _config(tmp_path, "gpt2")
    rep = json_report(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                               "--model_name_or_path", model, "--per_device_train_batch_size",
                               str(B), "--max_length", str(S), "--dtype", "bfloat16", *ALLOCATED])
    assert rep["training"]["autocast"] is None and rep["training"]["chunked_loss"]
    assert "not counted for a gpt2 model with TRL's chunked loss" in " ".join(rep["notes"])
    line = refused_line(capsys, ["estimate", model, "--framework", "deepspeed", "--sharding",
                                 "ddp", "--torch-ddp-buckets", "--optimizer", "adam",
                                 "--precision", "bf16", "--autocast", "bf16", "--chunked-loss",
                                 "--recompute-granularity", "full"])
    assert "autocast over bf16 weights on a gpt2 model (its final LayerNorm's fp32 output " \
        "packed: not measured)" in line
