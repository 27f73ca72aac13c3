"""LoRA over FP8 parameters (issue 30): Megatron-Bridge's performance LoRA recipes in FP8
(``llama3_70b_peft_8gpu_<system>_fp8cs_config`` / ``_fp8mx_config``) counted as the source
allocates them, by hand from Llama-3 70B's architecture.

``_perf_precision("fp8_cs")`` / ``("fp8_mx")`` set ``fp8_param_gather`` (Megatron-Bridge
067f987df0 training/mixed_precision.py:302 and :262-264), which sets ``fp8_param`` (:81-100).
Megatron-core (d98e8a64dd) builds the decoder layers' Transformer Engine linears inside
``fp8_model_init`` then (fp8_utils.py:848, ``need_fp8_context = config.fp8_param`` at init).
Transformer Engine (d0067d0da6) initialises each weight in 16 bits and quantizes it once,
``quantizer.set_usage(rowwise=True, columnwise=torch.is_grad_enabled())``, ``param =
quantizer(param)`` (pytorch/module/base.py:1835-1864: the 16-bit value is kept on the CPU
only); the forward uses the parameter itself, no cached cast (``quantize_weight``,
base.py:836-845).  What the parameter holds:

- per-tensor FP8 (current scaling, ``fp8cs``): the rowwise data, 1 byte, and its transpose
  where FP8 GEMMs are TN-only (Hopper); on Blackwell (B200, GB200, B300, GB300) the rowwise data
  serves both usages and no transpose is kept (float8_tensor_storage.py:279-317,
  ``is_non_tn_fp8_gemm_supported``): 2 bytes on H100, 1 on Blackwell;
- MXFP8 (``fp8mx``): rowwise and columnwise data, each with an E8M0 scale byte per 32
  elements, and ``update_usage`` only disables usages, never asked of a weight
  (mxfp8_tensor_storage.py:276-316): 2 (1 + 1/32) bytes.

LoRA freezes it (peft/base.py:176-193): no gradient-buffer slot
(distributed_data_parallel.py:180) and no fp32 main copy (optimizer/__init__.py:332), and no
16-bit copy.  The embedding and the output layer (not TE modules), the norms (no
``fp8_meta_index``) stay bf16; the adapters on linear_qkv are Megatron-core linears in bf16
(rank 16: A is h x r, B is r x (q + k + v) = r x 10240).

Published runs: Megatron-Bridge's docs/performance-summary-archive.md (067f987df0), "26.06
NeMo Container", LoRA Performance, LLAMA3_70B: DGX-GB300 and DGX-GB200 FP8 and MXFP8, DGX-H100
FP8, 8 GPUs each, at the recipes' layouts.  The B200 recipes (perf_recipes/llama/b200/
llama3.py:416, 466) run the GB200 FP8 row's layout (TP 1, PP 2, VP 20) on 180 GB.
"""

from __future__ import annotations

import json

import pytest
import sympy as sp

from in_process import run as cli

# Meta-Llama-3-70B config.json: hidden 8192, intermediate 28672, 64 heads, 8 KV heads (head
# dim 128), 80 layers, vocabulary 128256 (use_tokenizer_vocab_size False: unpadded)
H, F, A, G, V = 8192, 28672, 64, 8, 128256
LAYER = 2 * H * H + 2 * H * G * (H // A) + 3 * H * F     # q, o; k, v; gate, up, down
ADAPTER = 16 * (H + H + 2 * G * (H // A))                  # linear_qkv's A and B at rank 16
MX = 2 * (1 + sp.Rational(1, 32))


def test_layer_hand_count():
    # 2 * 8192^2 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    assert LAYER == 855638016 and ADAPTER == 294912


def _estimate(capsys, system, fmt):
    code, out, err = cli(capsys, "estimate", "--bridge-recipe",
                         f"llama3_70b_peft_8gpu_{system}_{fmt}_config", "--gpu", system,
                         "--json")
    assert code in (0, 1), err        # 1: "tight" or "does not fit", with its report
    return json.loads(out)


#: (system, recipe precision, t, layers on stage 0, bytes per frozen linear weight)
CASES = [
    ("b200", "fp8cs", 1, 40, 1),        # PP 2; Blackwell: rowwise data only
    ("b200", "fp8mx", 1, 40, MX),       # PP 2
    ("gb200", "fp8cs", 1, 40, 1),       # PP 2
    ("gb200", "fp8mx", 1, 20, MX),      # PP 4
    ("gb300", "fp8mx", 1, 40, MX),      # PP 2
    ("h100", "fp8cs", 2, 20, 2),        # TP 2, PP 4; Hopper: rowwise + transpose
]


@pytest.mark.parametrize("system, fmt, t, layers, width", CASES)
def test_perf_lora_weights_are_fp8_parameters(capsys, system, fmt, t, layers, width):
    got = _estimate(capsys, system, fmt)
    rows = got["bytes"]
    assert got["stage"]["index"] == 0
    # the frozen linear base: FP8 parameters with the copies TE keeps, no 16-bit copy
    assert rows["fp8_weights"] == width * layers * LAYER / t
    # 16-bit: the first stage's embedding (split over t) and two norms per layer
    assert rows["weights"] == 2 * (V * H // t + layers * 2 * H)
    assert "weights_unquantized" not in rows
    # the adapters, bf16 on linear_qkv (split over t)
    assert rows["adapter_weights"] == 2 * layers * ADAPTER // t


def test_the_fp8cs_b200_recipe_fits_a_b200(capsys):
    """190.7 GB ("tight") when the base was counted bf16 beside TE's cached copies: 68.5 GB
    of bf16 linear weights that Bridge does not hold."""
    got = _estimate(capsys, "b200", "fp8cs")
    assert got["verdict"] == "fits" and got["fits"] is True


@pytest.mark.parametrize("system, fmt", [("gb300", "fp8cs"), ("gb300", "fp8mx"),
                                         ("gb200", "fp8cs"), ("gb200", "fp8mx"),
                                         ("h100", "fp8cs"), ("b200", "fp8mx")])
def test_the_published_lora_runs_fit(capsys, system, fmt):
    assert _estimate(capsys, system, fmt)["verdict"] in ("fits", "tight")


def test_no_note_where_counted(capsys):
    notes = _estimate(capsys, "b200", "fp8cs")["notes"]
    assert not any("fp8_param_gather" in n and "frozen base" in n for n in notes)
