"""The three settings of Megatron-Bridge's performance recipes (memsym.terms.recipe_buffers):
the precision-aware optimizer's dtypes, Transformer Engine's fused cross-entropy and CPU
activation offloading, each against a hand derivation from the framework source.

Sources: Megatron-LM d98e8a64dd (arguments.py, optimizer/optimizer_config.py:433-480,
transformer/transformer_config.py:1884-1899); Transformer Engine v2.17.1 4329ff84bf
(pytorch/cross_entropy.py, pytorch/triton/cross_entropy.py, pytorch/cpu_offload.py);
Megatron-Bridge 067f987df0 (perf_recipes/_common.py:31,70; the recipes' optimizer dtypes).
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.cli import main
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.symbols import V, b, c, s, t
from memsym.terms.recipe_buffers import offloaded_activations, te_cross_entropy
from memsym.training import Layout, Training, training_memory

# llama2-7b: 32 layers, h 4096, vocab 32000 (padded at t = 1: 32000), seq 4096, one sequence
TAU, VOCAB = 4096, 32000


def _term(est, key):
    return est.total[key].expr.subs(est.values)


def _est(**training):
    return training_memory("llama2-7b", Layout(d=8), Training(seq_length=TAU, micro_batch_size=1,
                                                              dropout=False, **training))


# --- the precision-aware optimizer's dtypes -------------------------------------------------

def test_bf16_moments_keep_six_of_ten_bytes():
    """bf16 params under the precision-aware optimizer: TE FusedAdam keeps a 16-bit remainder
    of the fp32 master (store_param_remainders) and exp_avg, exp_avg_sq in their dtypes:
    2 + 4 + 4 = 10 B per parameter with fp32 moments, 2 + 2 + 2 = 6 with bf16 ones, and
    2 + 1 + 1 = 4 with fp8 ones, all sharded the same way."""
    pa = dict(precision_aware=True)
    fp32 = _term(_est(**pa), "optimizer")
    bf16 = _term(_est(**pa, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"), "optimizer")
    fp8 = _term(_est(**pa, exp_avg_dtype="fp8", exp_avg_sq_dtype="fp8"), "optimizer")
    assert bf16 * 10 == fp32 * 6 and fp8 * 10 == fp32 * 4
    # without the precision-aware optimizer: fp32 master (4) and moments (8), 12 B
    assert _term(_est(), "optimizer") * 10 == fp32 * 12


@pytest.mark.parametrize("given, error", [
    (dict(exp_avg_dtype="bf16"), InvalidValueError),          # OptimizerConfig asserts fp32
    (dict(main_params_dtype="fp16"), InvalidValueError),
    (dict(precision_aware=True, main_params_dtype="bf16"), UnknownNameError),  # fp32 / fp16
    (dict(precision_aware=True, exp_avg_sq_dtype="int4"), UnknownNameError),
])
def test_optimizer_dtypes_are_refused_where_megatron_refuses_them(given, error):
    with pytest.raises(error):
        _est(**given)


def test_the_cli_refuses_a_moment_dtype_without_the_flag_in_one_line(capsys):
    assert main(["estimate", "llama2-7b", "--exp-avg-dtype", "bf16"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "precision-aware" in err


# --- Transformer Engine's fused cross-entropy -----------------------------------------------

def test_te_cross_entropy_keeps_the_16bit_logits():
    """CrossEntropyFunction.forward saves its bf16 input and writes the gradient into it:
    2 tau V / t kept, where Megatron-core's loss keeps the fp32 softmax (4 tau V / t)."""
    native, te = _est(), _est(cross_entropy_fusion_impl="te")
    kept = _term(native, "output_activations") - _term(te, "output_activations")
    assert kept == 2 * TAU * VOCAB
    # forward: loss (4 B) and (m, d, X_y) (12 B) per token, their all-gather 12 t B
    assert te_cross_entropy()["ce_per_token"].expr.subs({s: 10, b: 3, c: 1, t: 2}) == \
        30 * (4 + 12 + 12 * 2)
    assert te_cross_entropy(tokens=7, vocab=100, tp=4)["logits"].expr == 2 * 7 * 100 // 4
    assert te_cross_entropy()["logits"].expr == 2 * s * b * V / (c * t)


def test_te_cross_entropy_is_megatron_only():
    with pytest.raises(InvalidValueError, match="torchtitan"):
        training_memory("llama2-7b", Layout(), Training(framework="torchtitan", sharding="fsdp",
                                                        cross_entropy_fusion_impl="te"))
    with pytest.raises(UnknownNameError):
        _est(cross_entropy_fusion_impl="apex")


# --- CPU activation offloading --------------------------------------------------------------

def test_offloading_k_layers_keeps_l_minus_k_layers():
    """TE's DefaultOffloadSynchronizer: saved activations peak at (num_layers - k) T."""
    full = _term(_est(), "layer_activations")
    off = _est(cpu_offloading_num_layers=10)
    assert _term(off, "layer_activations") + _term(off, "cpu_offloaded_activations") == \
        full * (32 - 10) / 32
    assert offloaded_activations([sp.Integer(3)] * 4).expr == -12


@pytest.mark.parametrize("layout, training, match", [
    (Layout(d=4, p=2), dict(), "p = 1"),
    (Layout(d=8), dict(recompute="full"), "recomputation"),
    (Layout(d=8), dict(cpu_offloading_num_layers=32), "below the model's 32"),
    (Layout(d=8), dict(cpu_offloading_num_layers=-1), "whole number"),
])
def test_offloading_is_refused_where_megatron_refuses_it(layout, training, match):
    training = {"cpu_offloading_num_layers": 4, **training}
    with pytest.raises(InvalidValueError, match=match):
        training_memory("llama2-7b", layout, Training(seq_length=TAU, **training))


# --- read from the Bridge recipes -----------------------------------------------------------

def test_the_bridge_recipes_set_them():
    """llama3_70b_pretrain_64gpu_gb200_fp8cs_config: cpu_offloading_num_layers 40 and
    _benchmark_common's "te" loss; the library's gpt_oss_120b_pretrain_64gpu_h100_bf16_config
    (recipes/gpt_oss/h100/gpt_oss.py:162): the native loss (:233), while the perf recipe of
    that name, which run_recipe.py runs for it, keeps _benchmark_common's "te"
    (perf_recipes/gpt_oss/h100/gpt_oss.py:42, perf_recipes/_common.py:31); DeepSeek-V3: bf16
    moments (deepseek_v3.py)."""
    _, opts, _ = bridge_job_options(read_bridge_recipe("llama3_70b_pretrain_64gpu_gb200_fp8cs_config"))
    assert opts["cpu_offloading_num_layers"] == 40 and opts["cross_entropy_fusion_impl"] == "te"
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        "recipes.gpt_oss.h100.gpt_oss.gpt_oss_120b_pretrain_64gpu_h100_bf16_config"))
    assert opts["cross_entropy_fusion_impl"] == "native" and "cpu_offloading_num_layers" not in opts
    _, opts, _ = bridge_job_options(read_bridge_recipe("gpt_oss_120b_pretrain_64gpu_h100_bf16_config"))
    assert opts["cross_entropy_fusion_impl"] == "te"
    # the 1024-GPU recipe: its 64gpu twin (deepseek_v3.py:163-166, the same layout) does not fit
    # its 64 GPUs (EP 64 x PP 8), which run_recipe.py refuses (benchmark_parallelism.py:106-121)
    _, opts, _ = bridge_job_options(read_bridge_recipe("deepseek_v3_pretrain_1024gpu_h100_bf16_config"))
    assert (opts["exp_avg_dtype"], opts["exp_avg_sq_dtype"]) == ("bf16", "bf16")
    assert opts["precision_aware"] is True
    with pytest.raises(InvalidValueError, match="exp_avg_dtype"):
        bridge_job_options(read_bridge_recipe("llama3_8b_pretrain_config",
                                              ["optimizer.exp_avg_dtype=int8"]))


def test_an_unset_loss_fusion_is_the_model_providers():
    """Nemotron 3 Super's recipes set cross_entropy_fusion_impl "te" (the base recipe,
    recipes/nemotronh/h100/nemotron_3_super.py:93, and _benchmark_common,
    perf_recipes/_common.py:70) and leave cross_entropy_loss_fusion unset: the AutoBridge's
    HybridModelProvider sets it True (models/hybrid/hybrid_provider.py:149 at Megatron-Bridge
    067f987df0), so the fused loss is TE's; a recipe's False stays False."""
    name = "nemotron_3_super_pretrain_64gpu_b200_fp8mx_config"
    assert "model.cross_entropy_loss_fusion" not in read_bridge_recipe(name)["values"]
    _, opts, _ = bridge_job_options(read_bridge_recipe(name))
    assert opts["cross_entropy_fusion_impl"] == "te"
    _, opts, _ = bridge_job_options(read_bridge_recipe(
        name, ["model.cross_entropy_loss_fusion=False"]))
    assert opts.get("cross_entropy_fusion_impl", "native") == "native"


# --- read from a Megatron-LM command --------------------------------------------------------

_MEGATRON = ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
             "--seq-length", "4096", "--max-position-embeddings", "4096", "--micro-batch-size",
             "1", "--bf16", "--use-distributed-optimizer", "--vocab-size", "32000"]


def _megatron(*extra):
    from memsym.readers.jobs import megatron_job
    from memsym.readers.megatron import read_megatron_args

    return megatron_job(read_megatron_args(_MEGATRON + ["--world-size", "8", *extra]))


def test_megatron_arguments_set_them():
    """arguments.py: --main-params-dtype / --exp-avg-dtype / --exp-avg-sq-dtype under
    --use-precision-aware-optimizer; --cpu-offloading-num-layers N > 0 turns offloading on
    (arguments.py:1950-1951)."""
    j = _megatron("--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                  "--main-params-dtype", "fp16")
    st = j.training.states
    assert (st.main_params_dtype, st.exp_avg_dtype, st.exp_avg_sq_dtype) == ("fp16", "bf16", "fp32")
    assert _megatron("--cpu-offloading-num-layers", "4").training.memory.cpu_offloading_num_layers == 4
    assert _megatron().training.memory.cpu_offloading_num_layers == 0


def test_megatron_refuses_te_cross_entropy_fusion():
    """arguments.py:1697-1702: --cross-entropy-loss-fusion with --cross-entropy-fusion-impl te
    is asserted against; the impl alone has no effect (the fusion is off by default)."""
    with pytest.raises(InvalidValueError, match="refused by Megatron-LM"):
        _megatron("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te")
    assert _megatron("--cross-entropy-fusion-impl", "te").training.memory \
        .cross_entropy_fusion_impl == "native"
    assert _megatron("--cross-entropy-loss-fusion").training.memory \
        .cross_entropy_fusion_impl == "native"


def _json(capsys, *argv):
    import json

    assert main(["estimate", "llama3-8b", "--world-size", "8", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_cli_rows_set_them(capsys):
    """--use-precision-aware-optimizer --exp-avg-dtype bf16: 2 (remainder) + 2 + 4 B per
    parameter against 2 + 4 + 4; --cpu-offloading-num-layers and --cross-entropy-fusion-impl
    reach the job (the JSON's training block)."""
    pa = _json(capsys, "--use-precision-aware-optimizer")
    bf16 = _json(capsys, "--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16")
    assert bf16["bytes"]["optimizer"] * 10 == pa["bytes"]["optimizer"] * 8
    assert bf16["training"]["exp_avg_dtype"] == "bf16"
    got = _json(capsys, "--cpu-offloading-num-layers", "4", "--cross-entropy-fusion-impl", "te")
    assert (got["training"]["cpu_offloading_num_layers"], got["training"][
        "cross_entropy_fusion_impl"]) == (4, "te")


def test_a_pasted_te_loss_fusion_is_refused_in_one_line(capsys):
    """With a MODEL, Megatron-LM's --cross-entropy-loss-fusion beside te is refused as
    validate_args refuses it; alone it changes nothing memsym counts (listed as ignored)."""
    assert main(["estimate", "llama3-8b", "--world-size", "8", "--cross-entropy-loss-fusion",
                 "--cross-entropy-fusion-impl", "te"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "refused by Megatron-LM" in err
    assert "--cross-entropy-loss-fusion" in _json(capsys, "--cross-entropy-loss-fusion")["ignored"]
