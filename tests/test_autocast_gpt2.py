"""torch.autocast over fp32 weights on GPT-2 (run_clm.py's ``--dtype float32 --fp16`` /
``--bf16``, the Hugging Face tutorial's fine-tune) and GPT-NeoX (Pythia) against transformers'
own ``GPT2LMHeadModel`` / ``GPTNeoXForCausalLM`` and by-hand sums (memsym.terms.autocast).

The oracle: torch's MemTracker on transformers' model on the CPU, float32 under
``torch.autocast("cpu", torch.bfloat16)`` (as Accelerate runs the Trainer's forward) against
bfloat16 weights.  Both meet ops whose autocast dtype differs between CUDA and the CPU
(``LayerNorm``, gelu_new's ``pow``: fp32 on CUDA, left to their input's dtype on the CPU), so
they run in CUDA's dtypes (:func:`_cuda_policy`) and the measurement is what a GPU run keeps,
but for the CPU kernels' named differences (:func:`_cpu_only`).  Sizes: h = 128, 2 heads of
64, f = 4h, 2 layers, V = 1000 (GPT-2's lm_head tied, GPT-NeoX's embed_out not); s = 128
(--block_size), b = 2, tau = sb = 256.
"""

from __future__ import annotations

import json

import pytest

from in_process import json_report, refused_line
from tracked_model import tracker_of

H, HEADS, LAYERS, V, POSITIONS = 128, 2, 2, 1000, 256
F, S, B = 4 * H, 128, 2
TAU = S * B
# per layer: two LayerNorms (weight and bias), the fused q, k, v, the attention's output, the
# MLP's two (weights and biases: GPT-2's c_attn, c_proj, c_fc, c_proj; GPT-NeoX's
# query_key_value, dense, dense_h_to_4h, dense_4h_to_h); the final LayerNorm
LAYER_PARAMS = 2 * 2 * H + 3 * H * H + 3 * H + H * H + H + H * F + F + F * H + H
PARAMS = {"gpt2": V * H + POSITIONS * H + LAYERS * LAYER_PARAMS + 2 * H,   # wte, wpe (tied)
          "gpt_neox": 2 * V * H + LAYERS * LAYER_PARAMS + 2 * H}         # embed_in, embed_out
W_LAYER = 3 * H * H + H * H + 2 * H * F             # the four weights
B_LAYER = 3 * H + H + F + H                         # their biases
ROTARY = int(H // HEADS * 0.25)                     # GPTNeoXConfig's partial_rotary_factor
ALLOCATED = ("--metric", "allocated")               # no allowance: phases are allocations alone


def _config(tmp_path, family="gpt2", **extra) -> str:
    folder = tmp_path / family
    folder.mkdir()
    fields = {"n_embd": H, "n_layer": LAYERS, "n_head": HEADS, "n_positions": POSITIONS} \
        if family == "gpt2" else {"hidden_size": H, "num_hidden_layers": LAYERS,
                                  "num_attention_heads": HEADS, "intermediate_size": F,
                                  "max_position_embeddings": POSITIONS}
    (folder / "config.json").write_text(json.dumps({
        "model_type": family, "vocab_size": V, **fields, **extra}), encoding="utf-8")
    return str(folder)


def _launch(model, *extra, dtype="float32", autocast="--bf16"):
    return ["estimate", "torchrun", "--nproc_per_node", "2", "run_clm.py", "--model_name_or_path",
            model, "--dtype", dtype, *([autocast] if autocast else []), "--block_size", str(S),
            "--per_device_train_batch_size", str(B), "--output_dir", "o", *extra, "--gpu",
            "h100-80gb", *ALLOCATED]


def _by_hand(checkpointing: bool, family: str = "gpt2", parallel: bool = True) -> dict:
    """autocast - bf16, phase by phase, written out from modeling_gpt2.py (modeling_gpt_neox.py)
    under CUDA's autocast (memsym.terms.autocast's derivation): per layer the LayerNorms' fp32
    inputs (+2 tau h each; GPT-NeoX's parallel residual: one input for both), GPT-2's gelu_new
    pow input, tanh and 1 + tanh in fp32 (+2 x 4 tau h each; GPT-NeoX's F.gelu: none), the
    16-bit copies of the four weights; the final LayerNorm's fp32 input and the output layer's
    16-bit weight (GPT-2's tied wte); the biases' casts in autocast's cache to the forward's
    end; the states 2 + 2 + 2 + 4 bytes a parameter more (fp32 weights, param.grad, DDP's
    buckets, AdamW's moments)."""
    states = (2 + 2 + 2 + 4) * PARAMS[family]
    norms = 1 if family == "gpt_neox" and parallel else 2
    gelu = 3 * 2 * TAU * F if family == "gpt2" else 0
    layer = norms * 2 * TAU * H + gelu + 2 * W_LAYER
    output = 2 * TAU * H + 2 * V * H
    if not checkpointing:
        want = {"forward": states + LAYERS * (layer + 2 * B_LAYER) + output,
                "loss-backward": states + LAYERS * layer + output,     # autocast exited
                "backward": states + LAYERS * layer}                    # output freed
    else:
        checkpoints = LAYERS * 2 * TAU * H          # each layer's input is the fp32 residual
        want = {"forward": states + checkpoints + output + LAYERS * 2 * (W_LAYER + B_LAYER),
                "loss-backward": states + checkpoints + output,
                "backward": states + checkpoints + layer}              # one layer rebuilt
    want["optimizer"] = states
    return want


def test_the_gpt2_excess_is_the_derivation():
    """memsym's terms, symbol for symbol, against the by-hand excess."""
    from memsym.symbols import a, b, c, d_h, f, g, h, s
    from memsym.terms.autocast import AUTOCAST_LAYERS, autocast_layer_excess, layer_linear_biases
    import sympy as sp
    excess = autocast_layer_excess(**AUTOCAST_LAYERS["gpt2"]).expr.xreplace({c: 1})
    by_hand = 4 * s * b * h + 6 * s * b * f + 2 * (2 * h * a * d_h + 2 * h * g * d_h + 2 * h * f)
    assert sp.expand(excess - by_hand) == 0
    assert layer_linear_biases(True, True, True, False).subs(
        {h: H, a: HEADS, g: HEADS, d_h: H // HEADS, f: F}) == B_LAYER
    assert autocast_layer_excess("full", **AUTOCAST_LAYERS["gpt2"]).expr.xreplace({c: 1}) == (
        2 * s * b * h)


CASES = [("gpt2", True, False), ("gpt2", True, True), ("gpt_neox", True, False),
         ("gpt_neox", True, True), ("gpt_neox", False, False)]   # family, parallel, checkpointing


@pytest.mark.parametrize("family, parallel, checkpointing", CASES)
def test_a_float32_model_under_bf16_is_the_bf16_job_plus_autocasts_bytes(
        capsys, tmp_path, family, parallel, checkpointing):
    """``--dtype float32 --bf16`` against ``--dtype bfloat16`` without autocast (the plain
    16-bit model; its autocast's own excess: tests/test_autocast_16bit.py): each phase's
    difference is the by-hand sum."""
    model = _config(tmp_path, family, **({} if parallel else {"use_parallel_residual": False}))
    extra = ["--gradient_checkpointing"] if checkpointing else []
    fp32 = json_report(capsys, _launch(model, *extra))
    bf16 = json_report(capsys, _launch(model, *extra, dtype="bfloat16", autocast=None))
    assert fp32["training"]["autocast"] == "bf16" and bf16["training"]["autocast"] is None
    want = _by_hand(checkpointing, family, parallel)
    assert {ph: fp32["phases"][ph] - bf16["phases"][ph] for ph in want} == want


def test_the_tutorial_command_gets_a_total(capsys, tmp_path):
    """The issue's command (GPT-2 small's config, --fp16 over float32 weights) is estimated,
    and fp16's autocast keeps what bf16's does (both 2 bytes)."""
    folder = tmp_path / "g2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
        "n_positions": 1024}), encoding="utf-8")
    args = ["estimate", "accelerate", "launch", "--num_processes", "2", "run_clm.py",
            "--model_name_or_path", str(folder), "--per_device_train_batch_size", "4",
            "--block_size", "1024", "--do_train", "--dtype", "float32"]
    fp16 = json_report(capsys, [*args, "--fp16"])
    assert fp16["training"]["autocast"] == "fp16" and fp16["bytes"]["total"] > 0
    assert json_report(capsys, [*args, "--bf16"])["bytes"] == fp16["bytes"]
    # the peak (the loss's backward: transformers' loss, memsym.terms.loss_transients.
    # hf_cross_entropy_transient, makes it the peak) against --dtype bfloat16 (no autocast),
    # by hand at GPT-2 small: 12 layers of 4 tau h + 6 tau f + 2 x 12 h^2 (the bias casts,
    # held by autocast's cache alone, are freed when its context exits, before the loss's
    # backward); ln_f's fp32 input and the tied wte's 16-bit copy (tau = 4 x 1024, h = 768,
    # f = 3072, V = 50257)
    bf16 = json_report(capsys, [*args[:-1], "bfloat16"])
    tau, h, f = 4 * 1024, 768, 3072
    want = 12 * (4 * tau * h + 6 * tau * f + 2 * 12 * h * h) + 2 * tau * h + (
        2 * 50257 * h)
    held = {k: r["bytes"]["activations"] + r["bytes"].get("transients", 0)
            for k, r in (("fp16", fp16), ("bf16", bf16))}
    assert held["fp16"] - held["bf16"] == want


@pytest.mark.parametrize("family, field, measured", [
    ("gpt2", "activation_function", "gelu_new"), ("gpt_neox", "hidden_act", "gelu")])
def test_another_activation_is_refused(capsys, tmp_path, family, field, measured):
    """Only the config's default activation was measured (GPT-2's gelu_new, whose pow CUDA's
    autocast runs in fp32; GPT-NeoX's F.gelu, which it leaves in 16 bits); another is
    refused in one line naming it."""
    line = refused_line(capsys, _launch(_config(tmp_path, family, **{field: "gelu_fast"})))
    assert f"a {family} model of activation gelu_fast ({measured} is counted)" in line


# --- a real engine: torch's MemTracker on transformers' own GPT2LMHeadModel on the CPU -------
def _cuda_policy(torch):
    """CUDA's autocast dtypes for the ops of the measured models that CPU autocast runs
    otherwise, as kernels of CPU autocast's dispatch key (live while the returned Library is):
    CUDA runs ``layer_norm`` and ``pow`` in fp32 (torch 2.13.0 aten/src/ATen/autocast_mode.h
    ``AT_FORALL_FP32``), and ``softmax`` / ``log_softmax`` and ``sum`` over dimensions in fp32
    unless a dtype is given (``AT_FORALL_FP32_SET_OPT_DTYPE``, the ``fp32_set_opt_dtype``
    policy: :423-430); the CPU registers none of them
    (:func:`test_the_emulated_ops_are_cudas_own`) and runs them in their input's dtype.
    ``addmm``, ``linear`` and SDPA are 16-bit on both."""
    lib = torch.library.Library("aten", "IMPL")

    def fp32(op):
        def kernel(*args):
            with torch.autocast("cpu", enabled=False):     # redispatch below autocast
                return op(*(x.float() if isinstance(x, torch.Tensor) and x.is_floating_point()
                            else x for x in args))
        return kernel

    def fp32_set_opt_dtype(op):
        def kernel(x, dim, dtype=None):
            with torch.autocast("cpu", enabled=False):     # a dtype given is kept
                return op(x, dim, torch.float32 if dtype is None and x.is_floating_point()
                          else dtype)
        return kernel

    def fp32_sum(x, dim, keepdim=False, dtype=None):
        with torch.autocast("cpu", enabled=False):         # a dtype given is kept
            return torch.ops.aten.sum.dim_IntList(x, dim, keepdim, dtype=torch.float32 if (
                dtype is None and x.is_floating_point()) else dtype)

    lib.impl("sum.dim_IntList", fp32_sum, "AutocastCPU")
    lib.impl("layer_norm", fp32(torch.ops.aten.layer_norm.default), "AutocastCPU")
    lib.impl("pow.Tensor_Scalar", fp32(torch.ops.aten.pow.Tensor_Scalar), "AutocastCPU")
    for name in ("softmax.int", "log_softmax.int"):
        lib.impl(name, fp32_set_opt_dtype(getattr(torch.ops.aten, name.split(".")[0]).int),
                 "AutocastCPU")
    return lib


def test_the_emulated_ops_are_cudas_own():
    """This torch's CUDA autocast has its own kernel for the emulated ops, the CPU's none."""
    torch = pytest.importorskip("torch")
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    cpu = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCPU"))
    for op in ("aten::layer_norm", "aten::pow.Tensor_Scalar", "aten::softmax.int",
               "aten::log_softmax.int", "aten::sum.dim_IntList"):
        assert op in cuda and op not in cpu, op


def _cpu_only(checkpointing: bool, family: str) -> int:
    """What the CPU's kernels keep beyond CUDA's in autocast - bf16: native_layer_norm on the
    CPU keeps mean and rstd in its input's dtype (fp32 under autocast, 4 + 4 bytes a token;
    bf16 without, 2 + 2) where CUDA keeps fp32 in both (+4 tau for each LayerNorm call that
    keeps them: the final one, and the layers' two without checkpointing, parallel residual
    or not); GPT-2's embedding dropout on the CPU keeps ``input * noise``'s noise in the
    input's dtype (fp32: +2 tau h) where CUDA's native_dropout keeps a bool mask in both
    (torch aten/src/ATen/native/Dropout.cpp); GPT-NeoX's RoPE cos and sin, one [1, s, r]
    storage each for the model (``cos.to(x.dtype)``: fp32 under autocast), which memsym leaves
    out as for Llama (tests/test_autocast.py): 2 x 2 s r more (GPT-NeoX's dropouts are 0)."""
    norms = 1 + (0 if checkpointing else 2 * LAYERS)
    return norms * 4 * TAU + (2 * TAU * H if family == "gpt2" else 2 * 2 * S * ROTARY)


def _tracked(family: str, dtype: str, checkpointing: bool, parallel: bool = True,
             activation: str = "gelu_new") -> dict:
    """Activation bytes (MemTracker's ACT + TEMP) of the two-layer model's (GPT-2, GPT-NeoX,
    GPT-J or Phi; ``activation`` GPT-2's, GPT-J's and Phi's) training forward at
    the forward's end and as the loss's backward starts, the model in ``dtype`` (float32
    under CPU bf16 autocast with CUDA's dtypes, :func:`_cuda_policy`; bfloat16 without),
    its config's dropout (GPT-2's 0.1, GPT-NeoX's 0), SDPA, use_cache off as the Trainer sets
    it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    common = dict(vocab_size=V, use_cache=False, bos_token_id=None, eos_token_id=None,
                  attn_implementation="sdpa")
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_embd=H, n_layer=LAYERS, n_head=HEADS,
                                      n_positions=POSITIONS, activation_function=activation,
                                      **common)
        model = transformers.GPT2LMHeadModel(cfg)
    elif family == "gptj":
        cfg = transformers.GPTJConfig(n_embd=H, n_layer=LAYERS, n_head=HEADS, n_inner=F,
                                      n_positions=POSITIONS, rotary_dim=16,
                                      activation_function=activation, **common)
        model = transformers.GPTJForCausalLM(cfg)
    elif family == "phi":
        cfg = transformers.PhiConfig(hidden_size=H, num_hidden_layers=LAYERS,
                                     num_attention_heads=HEADS, intermediate_size=F,
                                     max_position_embeddings=POSITIONS, hidden_act=activation,
                                     **common)
        model = transformers.PhiForCausalLM(cfg)
    else:
        cfg = transformers.GPTNeoXConfig(
            hidden_size=H, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=F, max_position_embeddings=POSITIONS,
            use_parallel_residual=parallel, **common)
        model = transformers.GPTNeoXForCausalLM(cfg)
    model = model.to(getattr(torch, dtype)).train()
    if checkpointing:
        model.activation_checkpointing_enable()      # --gradient_checkpointing's call
    return tracked_phases(model, torch.randint(0, V, (B, S)), autocast=dtype == "float32")


def tracked_phases(model, ids, *, autocast: bool, cuda: bool = True) -> dict:
    """MemTracker's ACT + TEMP bytes of ``model``'s training step on ``ids`` at the forward's
    end and as the loss's backward starts, under CPU bf16 autocast with CUDA's dtypes
    (:func:`_cuda_policy`; ``cuda`` False: the CPU's own) when ``autocast``, else without
    autocast; frozen parameters (PEFT's base) given no gradient hook."""
    torch = pytest.importorskip("torch")
    tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    mt = tracker_of(tracker, model)
    policy = _cuda_policy(torch) if autocast and cuda else None
    with mt:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    del policy                                        # CPU autocast's own kernels again
    root = next(st for st in mt.memory_tracking.values()
                if st.mod_fqn == type(model).__name__)

    def kept(state) -> int:
        (snap,) = root.snapshots[state][0].values()
        return sum(v for k, v in snap.items() if k in (tracker._MemRefType.ACT,
                                                       tracker._MemRefType.TEMP))
    return {"forward": kept(tracker._ModState.POST_FW),
            "loss-backward": kept(tracker._ModState.PRE_BW)}


@pytest.mark.parametrize("family, parallel, checkpointing", CASES)
def test_torchs_memory_tracker_sees_autocasts_bytes_where_memsym_counts_them(
        capsys, tmp_path, family, parallel, checkpointing):
    """autocast - bf16 as torch's MemTracker measures transformers' own model = memsym's phase
    difference less the states', plus the CPU kernels' own (:func:`_cpu_only`), at the
    forward's end (autocast's cache still holding the biases' casts, and under checkpointing
    every weight's) and as the loss's backward starts."""
    model = _config(tmp_path, family, **({} if parallel else {"use_parallel_residual": False}))
    extra = ["--gradient_checkpointing"] if checkpointing else []
    memsym = {dtype: json_report(capsys, _launch(model, *extra, dtype=dtype, autocast=(
        "--bf16" if dtype == "float32" else None)))["phases"] for dtype in ("float32", "bfloat16")}
    measured = {dtype: _tracked(family, dtype, checkpointing, parallel)
                for dtype in ("float32", "bfloat16")}
    states = (2 + 2 + 2 + 4) * PARAMS[family]
    for phase in ("forward", "loss-backward"):
        ours = memsym["float32"][phase] - memsym["bfloat16"][phase] - states
        assert measured["float32"][phase] - measured["bfloat16"][phase] == (
            ours + _cpu_only(checkpointing, family)), phase


def test_gelu_new_keeps_three_more_tensors_than_a_fused_gelu(capsys, tmp_path):
    """GPT-2's default gelu_new against F.gelu ("gelu"), bf16 weights: transformers'
    NewGELUActivation runs op by op (activations.py:59-66), keeping tanh's output, 0.5 x and
    1 + tanh beside the input a fused GeLU keeps alone: 3 x 2 tau F more a layer, by hand;
    torch's MemTracker sees exactly that at the forward's end and as the loss's backward
    starts, and memsym's job counts it (memsym.terms.eager_glu.eager_tanh_gelu)."""
    want = LAYERS * 3 * 2 * TAU * F
    measured = {act: _tracked("gpt2", "bfloat16", False, activation=act)
                for act in ("gelu_new", "gelu")}
    ours = {}
    for act in ("gelu_new", "gelu"):
        (tmp_path / act).mkdir()
        ours[act] = json_report(capsys, _launch(_config(tmp_path / act, activation_function=act),
                                                dtype="bfloat16", autocast=None))["phases"]
    for phase in ("forward", "loss-backward"):
        assert measured["gelu_new"][phase] - measured["gelu"][phase] == want, phase
        assert ours["gelu_new"][phase] - ours["gelu"][phase] == want, phase


@pytest.mark.parametrize("family", ["gptj", "phi"])
def test_gelu_new_is_read_and_counted_for_gptj_and_phi(capsys, tmp_path, family):
    """GPT-J's and Phi's configs default to gelu_new too (GPTJConfig.activation_function,
    PhiConfig.hidden_act): the same three tensors, measured on their own MLPs, and counted by
    the job read from a config.json that leaves the activation to the default."""
    measured = (_tracked(family, "bfloat16", False, activation="gelu_new")["forward"]
                - _tracked(family, "bfloat16", False, activation="gelu")["forward"])
    assert measured == LAYERS * 3 * 2 * TAU * F
    field = "activation_function" if family == "gptj" else "hidden_act"
    ours = {}
    for act in ("gelu_new", "gelu"):
        folder = tmp_path / act
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(
            {"model_type": family, "vocab_size": V, "hidden_size": H, "n_inner": F,
             "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": F,
             **({} if act == "gelu_new" else {field: act})}), encoding="utf-8")
        ours[act] = json_report(capsys, _launch(str(folder), dtype="bfloat16",
                                                autocast=None))["phases"]
    assert ours["gelu_new"]["forward"] - ours["gelu"]["forward"] == measured
