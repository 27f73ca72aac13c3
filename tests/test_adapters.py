"""LoRA / QLoRA memory: paper and seed numbers (issue 5, part 4)."""

from __future__ import annotations

import sympy as sp

from memsym.model import Architecture, lora_parameter_count, preset
from memsym.symbols import L_lora, N_a, b_g, b_m, b_o, h, r_lora
from memsym.training import Layout, Training, training_memory
from memsym.terms.adapters import (adapter_state, frozen_weights, lora, lora_parameters, qlora,
                                   quantization_bits, quantization_bytes)

GB = 10**9
ZERO = {"workspace": 0, "nccl": 0, "fragmentation": 0}


def test_double_quantization_arithmetic():
    # QLoRA §3: 32/64 = 0.5 bits of fp32 absmax per weight -> 8/64 + 32/(64*256) = 0.127 bits
    extra = quantization_bits("nf4-dq") - 4
    assert extra == sp.Rational(8, 64) + sp.Rational(32, 64 * 256)
    assert round(float(extra), 3) == 0.127
    assert quantization_bits("nf4") - 4 == sp.Rational(1, 2)
    assert quantization_bytes("nf4-dq") == (4 + sp.Rational(8, 64) + sp.Rational(32, 16384)) / 8


def test_lora_paper_table4_gpt3():
    # LoRA Table 4: GPT-3 175B, W_q and W_v adapted in 96 layers: 4.7M (r=1) and 37.7M (r=8)
    expr = lora_parameters()
    for r, printed in ((1, 4.7e6), (8, 37.7e6)):
        val = expr.subs({L_lora: 2 * 96, h: 12288, r_lora: r})
        assert abs(float(val) - printed) < 0.05e6
        # the exact per-matrix count r(d_in + d_out) agrees for square matrices
        assert lora_parameter_count(preset("gpt3-175b"), r, ("q", "v")) == val


def test_lora_count_non_square_by_hand():
    # Llama-2 7B, all 7 linear layers, r = 16: r*(in+out) per matrix, by hand
    h_, f_ = 4096, 11008
    per_layer = 16 * (4 * (h_ + h_) + 2 * (h_ + f_) + (f_ + h_))
    assert lora_parameter_count(preset("llama2-7b"), 16, "all") == 32 * per_layer


def test_seed004_case_b_weights():
    # seed 004: LoRA (FP16) 2P GB; QLoRA (4bit) 0.5P GB; 7B -> about 4 GB, 70B -> about 40 GB
    assert frozen_weights("bf16").evaluate(N=7 * GB, p=1, t=1) == 14 * GB
    assert frozen_weights("int4").evaluate(N=70 * GB, p=1, t=1) == 35 * GB
    seven = float(frozen_weights("nf4-dq").evaluate(N=7 * GB, p=1, t=1)) / GB
    assert 3.5 < seven < 4.0


def test_gradients_and_optimizer_only_for_adapters():
    M = lora().subs({b_g: 4, b_m: 0, b_o: 8})
    assert M.evaluate(N=7 * GB, p=1, t=1, N_a=0) == 14 * GB        # frozen weights only
    # fp32 adapters + fp32 grads + Adam moments: 16 bytes per trainable parameter (hand)
    assert adapter_state().subs({b_g: 4, b_m: 0, b_o: 8}).evaluate(N_a=10**6) == 16 * 10**6
    assert N_a in M.free_symbols


def test_qlora_paper_65b_model_memory_under_48gb():
    # QLoRA abstract: a 65B model fine-tunes on one 48 GB GPU.  LLaMA-65B (LLaMA paper Table 2:
    # 80 layers, d 8192, 64 heads; ffn 22016, vocab 32000), LoRA r = 64 on every linear layer
    # (QLoRA §4), NF4 + double quantization; embeddings and head at bf16.
    llama65 = Architecture(name="llama-65b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                           ffn_hidden_size=22016, swiglu=True, normalization="RMSNorm",
                           vocab_size=32000, untie_embeddings_and_output_weights=True,
                           position_embedding_type="rope", add_bias_linear=False)
    from memsym.model import parameter_count

    n_all = parameter_count(llama65)
    assert abs(n_all - 65.2e9) < 0.1e9
    n_emb = 2 * 32000 * 8192
    from memsym.symbols import N_u

    M = qlora(unquantized=N_u).subs({b_g: 4, b_m: 0, b_o: 8})
    val = M.evaluate(N=n_all - n_emb, N_u=n_emb, p=1, t=1,
                     N_a=lora_parameter_count(llama65, 64, "all"))
    assert float(val) < 48 * GB


def test_seed004_qlora_examples_through_the_search():
    from memsym.search import min_gpus

    # 70B QLoRA: one 80 GB card (seed 004: "A100 1枚で動作の可能性あり", 48-80 GB)
    r = min_gpus("llama2-70b", "a100-80gb", seq_length=4096, finetune="qlora",
                 recompute=["full"], micro_batch_sizes=[1])
    assert r.gpus == 1
    assert 48 * GB <= r.bytes["total"] <= 80 * GB
    # 7B QLoRA: 12-16 GB (model about 4 GB + activations), s = 2048, b = 1, no recompute,
    # the seed's count (no workspace / NCCL / fragmentation allowances)
    r7 = min_gpus("llama2-7b", "a100-80gb", seq_length=2048, finetune="qlora",
                  recompute=["none"], micro_batch_sizes=[1], allowances=ZERO)
    assert r7.gpus == 1
    assert 12 * GB <= r7.bytes["total"] <= 16 * GB
    assert r7.bytes["gradients"] < r7.bytes["total"] / 50   # adapters' gradients only: small


def test_frozen_experts_without_adapters_keep_no_gemm_inputs():
    """Transformer Engine keeps no GEMM input for a frozen weight (linear.py / grouped_linear.py:
    ``backward_needs_input = is_grad_enabled and weight_requires_grad``): with adapters on
    attention only (Bridge's qwen3_30b_a3b_peft_config), Qwen3-30B-A3B's experts keep neither
    their fc1 nor their fc2 input.  Hand-derived, TP 4 with SP, EP 4, ETP 1, s = 2048, b = 1:
    each expert GPU receives k s b t_e / t = 8 x 2048 / 4 = 4096 token copies, 2 x 4096 x
    (h + f_e) = 2 x 4096 x (2048 + 768) bytes per layer, x 48 layers."""
    layout = Layout(t=4, e=4, t_e=1, d=2, sequence_parallel=True)

    def acts(targets, finetune="lora", framework="megatron"):
        training = Training(seq_length=2048, micro_batch_size=1, finetune=finetune, lora_rank=8,
                            lora_targets=targets, recompute="none", dropout=False,
                            framework=framework)
        est = training_memory("qwen3-30b-a3b", layout, training, allowances=ZERO)
        return est.breakdown()["layer_activations"]

    attention_only = ("q", "k", "v", "o")
    assert acts("all") - acts(attention_only) == 48 * 2 * 4096 * (2048 + 768) == 1107296256
    # adapters on the experts keep their inputs (the LoRA-A GEMMs read them)
    assert acts(attention_only + ("gate", "up", "down")) == acts("all")


def test_a_bf16_lora_job_cites_lora_not_bitsandbytes(capsys):
    """A bf16 LoRA base is PEFT's frozen base as built (LoRA, Hu et al. §4.2: frozen W_0, no
    quantization): its embedding, norms and output layer are cited to LoRA.  bitsandbytes is
    QLoRA's quantizer (it replaces nn.Linear only, so those stay 16-bit): a QLoRA job's
    references name it."""
    from memsym.cli import main
    base = ["estimate", "llama3-8b", "--framework", "deepspeed", "--gpu", "h100-80gb",
            "--finetune"]
    refs = {}
    for kind in ("lora", "qlora"):
        assert main(base + [kind]) == 0
        out = capsys.readouterr().out
        refs[kind] = out[out.index("\n[1] "):]     # the references a user reads
    assert "bitsandbytes" not in refs["lora"] and "qlora" not in refs["lora"]
    assert "lora, §4.2" in refs["lora"]
    assert "bitsandbytes" in refs["qlora"] and "qlora, §3" in refs["qlora"]
    keep = lora("bf16", unquantized=N_a).terms[1]
    assert keep.source.key == "lora" and "bitsandbytes" not in keep.description
    keep = qlora(unquantized=N_a).terms[1]
    assert keep.source.key == "qlora" and "bitsandbytes" in keep.description
