"""Megatron's first / last decoder layers in BF16 under FP8 or FP4 (``--first-last-layers-bf16``,
issues 30 and 31): memory per stage, the readers, the rules and the step time.

What Megatron-LM does at d98e8a64dd (read for this test; :mod:`memsym.training.bf16_layers`
cites the lines): ``is_first_last_bf16_layer`` (fp8_utils.py:711-728) picks the global layers
``l < n_start`` and ``l >= L - n_end``; for them ``get_fp8_context`` (:836-850) returns
``nullcontext()``, both at build (``is_init=True``: no ``fp8_model_init``, so under
``--fp8-param-gather`` their weights stay bf16 tensors, in the distributed optimizer's 16-bit
``param_data``, param_and_grad_buffer.py:919-923) and in the forward (no FP8 autocast: no TE
FP8 weight copy, GEMM inputs saved 16-bit, GEMMs at the BF16 rate).

Llama 3 8B by hand (hidden h = 4096, 32 heads of 128, 8 KV groups of 128, FFN f = 14336,
32 layers): one layer's TE linear weights are QKV 4096 x (4096 + 2 x 1024) = 25,165,824,
proj 4096 x 4096 = 16,777,216, fc1 4096 x 2 x 14336 = 117,440,512, fc2 14336 x 4096 =
58,720,256: 218,103,808 in all.
"""

from __future__ import annotations

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe
from memsym.readers.jobs import megatron_job
from memsym.readers.megatron import read_megatron_args
from memsym.timing.job_step import job_step_time
from memsym.training.bf16_layers import chunk_layer_ids, rank_bf16_layers
from memsym.training.estimate import job_memory

H, F, L, S = 4096, 14336, 32, 8192
LAYER_LINEAR = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 4096 * 2 * 14336 + 14336 * 4096


def _llama8b(**kw):
    base = dict(pp=2, dp=1, seq_length=S, micro_batch_size=1, global_batch_size=8,
                precision="fp8", fp8_recipe="tensorwise")
    return job("llama3-8b", **{**base, **kw})


def _terms(j, stage):
    return {k: int(v) for k, v in job_memory(j, stage=stage).breakdown().items()}


def test_layer_linear_weights_by_hand():
    assert LAYER_LINEAR == 218_103_808


@pytest.mark.parametrize("stage", [0, 1])
def test_fp8_param_gather_keeps_the_bf16_layers_16_bit(stage):
    # stage 0 holds layer 0, stage 1 layer 31: one BF16 layer each.  With --fp8-param-gather
    # the layer's linear weights move from the FP8 parameters (1 byte and, with no GPU given
    # (TN-only), the 1-byte transpose made after each gather) to the 16-bit buffer (2 bytes);
    # gradients and optimizer states are the same (fp32 main grads and states).
    fp8 = _terms(_llama8b(fp8_param_gather=True), stage)
    mixed = _terms(_llama8b(fp8_param_gather=True, bf16_layers=(1, 1)), stage)
    assert mixed["weights"] - fp8["weights"] == 2 * LAYER_LINEAR
    assert fp8["fp8_weights"] - mixed["fp8_weights"] == 2 * LAYER_LINEAR
    for key in ("gradients", "optimizer"):
        assert mixed[key] == fp8[key]


def test_no_te_fp8_weight_cache_in_a_bf16_layer():
    # without --fp8-param-gather the weights are 16-bit anyway; TE's cached FP8 copy
    # (rowwise + transpose, 2 bytes a weight under per-tensor scaling) is gone for the layer
    fp8 = _terms(_llama8b(), 0)
    mixed = _terms(_llama8b(bf16_layers=(1, 1)), 0)
    assert mixed["weights"] == fp8["weights"]
    assert fp8["fp8_weights"] - mixed["fp8_weights"] == 2 * LAYER_LINEAR


@pytest.mark.parametrize("stage,in_flight", [(0, 2), (1, 1)])
def test_bf16_layer_saves_its_gemm_inputs_16_bit(stage, in_flight):
    # FP8 saves the QKV and fc1 inputs (h wide each) and the fc2 input (f wide) at 1 byte;
    # the output projection's input costs 2 + 1 bytes (the fused attention's own 16-bit
    # output and the FP8 copy), in BF16 the one 2-byte tensor (a d_h = h).  Per token:
    # +h +h +f -h = h + f bytes.  1F1B with p = 2: stage 0 holds 2 micro-batches, stage 1 one.
    fp8 = _terms(_llama8b(fp8_param_gather=True), stage)
    mixed = _terms(_llama8b(fp8_param_gather=True, bf16_layers=(1, 1)), stage)
    assert mixed["bf16_layer_activations"] == in_flight * S * (H + F) == in_flight * 150_994_944
    assert mixed["layer_activations"] == fp8["layer_activations"]


def test_full_recompute_block_keeps_no_excess_in_a_checkpointed_layer():
    # block 1: the first layer of each chunk is checkpointed (its input only, 16-bit either
    # way); the last layer (position 15 of stage 1) keeps everything
    kw = dict(recompute="full", recompute_method="block", recompute_num_layers=1,
              bf16_layers=(1, 1))
    assert "bf16_layer_activations" not in _terms(_llama8b(**kw), 0)
    assert _terms(_llama8b(**kw), 1)["bf16_layer_activations"] == S * (H + F)


def test_interleaved_chunks_place_the_layers_as_megatron_does():
    # get_transformer_layer_offset: chunk j of rank r starts at j * L/v + r * L/(p v)
    from memsym.model import preset
    from memsym.job import Layout, Training
    x = preset("llama3-8b")
    lay = Layout(p=4, v=2)
    assert chunk_layer_ids(x, lay, 3) == (tuple(range(12, 16)), tuple(range(28, 32)))
    trn = Training(precision="fp8", fp8_recipe="tensorwise", bf16_layers=(2, 2))
    assert rank_bf16_layers(x, lay, trn, 0) == ((0, 0, 0), (0, 1, 1))
    assert rank_bf16_layers(x, lay, trn, 3) == ((1, 2, 30), (1, 3, 31))
    assert rank_bf16_layers(x, lay, trn, 1) == ()


def _megatron_argv(*extra):
    return ["--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
            "--group-query-attention", "--num-query-groups", "8", "--ffn-hidden-size", "14336",
            "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
            "--untie-embeddings-and-output-weights", "--disable-bias-linear",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "128256",
            "--seq-length", "8192", "--max-position-embeddings", "8192",
            "--micro-batch-size", "1", "--global-batch-size", "768", "--world-size", "2",
            "--context-parallel-size", "2", "--bf16", "--use-distributed-optimizer",
            "--fp8-format", "hybrid", "--fp8-param-gather", *extra]


def test_megatron_flags_and_bridge_recipe_read_the_same_field():
    # Bridge's llama3_8b_pretrain_2gpu_h100_fp8cs_config (recipes/llama/h100/llama3.py:690 at
    # 067f987df0) takes bf16_with_fp8_current_scaling_mixed (training/mixed_precision.py:
    # 297-301: first_last_layers_bf16 True, 1 and 1); Megatron's flags, the same layers
    _, opts, _ = bridge_job_options(read_bridge_recipe("llama3_8b_pretrain_2gpu_h100_fp8cs_config"))
    assert opts["bf16_layers"] == (1, 1) and opts["fp8_recipe"] == "tensorwise"
    j = megatron_job(read_megatron_args(_megatron_argv(
        "--fp8-recipe", "tensorwise", "--first-last-layers-bf16")))
    assert j.training.states.bf16_layers == (1, 1)
    j = megatron_job(read_megatron_args(_megatron_argv(
        "--fp8-recipe", "tensorwise", "--first-last-layers-bf16",
        "--num-layers-at-start-in-bf16", "0", "--num-layers-at-end-in-bf16", "3")))
    assert j.training.states.bf16_layers == (0, 3)
    # the counts alone do nothing (Megatron reads them under first_last_layers_bf16 only)
    j = megatron_job(read_megatron_args(_megatron_argv(
        "--fp8-recipe", "tensorwise", "--num-layers-at-end-in-bf16", "3")))
    assert j.training.states.bf16_layers == (0, 0)


def test_perf_recipes_turn_the_bf16_layers_off():
    # perf_recipes/_common.py:99-124 _perf_precision("fp8_cs"): first_last_layers_bf16 False
    _, opts, _ = bridge_job_options(read_bridge_recipe("llama3_8b_pretrain_8gpu_h100_fp8cs_config"))
    assert opts["precision"] == "fp8" and "bf16_layers" not in opts


def test_rules_as_megatron_raises_them():
    # TransformerConfig.__post_init__ (transformer_config.py:1528-1530): delayed refused
    with pytest.raises(InvalidValueError, match="Delayed scaling does not support first / last"):
        megatron_job(read_megatron_args(_megatron_argv("--first-last-layers-bf16")))
    with pytest.raises(InvalidValueError, match="Delayed scaling does not support first / last"):
        _llama8b(fp8_recipe="delayed", bf16_layers=(1, 1))
    # :1538-1557: at most num_layers // pp = 16 each
    with pytest.raises(InvalidValueError, match=r"num_layers_at_start_in_bf16 \(17\) must be "
                       r"between 0 and number of layers per pipeline stage \(16\)"):
        _llama8b(bf16_layers=(17, 1))
    # without FP8 / FP4 Megatron enters no context at all: memsym refuses the no-op field
    with pytest.raises(InvalidValueError, match="bf16_layers"):
        _llama8b(precision="bf16", fp8_recipe=None, bf16_layers=(1, 1))


def test_bf16_layers_priced_at_the_bf16_rate():
    # each decoder layer's time is one mean layer; 2 of the 32 layers in BF16 add 2/32 of what
    # the whole model at BF16 adds (one GPU: no pipeline, no data parallelism)
    kw = dict(pp=1, fp8_param_gather=True, gpu="h100")
    fp8 = job_step_time(_llama8b(**kw)).total
    mixed = job_step_time(_llama8b(bf16_layers=(1, 1), **kw)).total
    bf16 = job_step_time(_llama8b(**{**kw, "precision": "bf16", "fp8_recipe": None,
                                     "fp8_param_gather": False})).total
    assert mixed > fp8
    assert mixed - fp8 == pytest.approx((bf16 - fp8) * 2 / L, rel=1e-9)


def test_pipeline_stages_take_the_bf16_layers():
    # p = 2, one BF16 layer on each stage: both stages grow by one 16-bit layer's excess, so
    # the 1F1B makespan (m + p - 1) x tau grows as the whole model at 16 bits does, by 1/16
    # of its stage's 16 layers (m = 8 micro-batches, no data parallelism)
    kw = dict(pp=2, fp8_param_gather=True, gpu="h100")
    fp8 = job_step_time(_llama8b(**kw)).total
    mixed = job_step_time(_llama8b(bf16_layers=(1, 1), **kw)).total
    bf16 = job_step_time(_llama8b(**{**kw, "precision": "bf16", "fp8_recipe": None,
                                     "fp8_param_gather": False})).total
    assert mixed - fp8 == pytest.approx((bf16 - fp8) / 16, rel=1e-6)
    # one BF16 layer at the end only: the last stage is the slowest by one layer's excess
    only_end = job_step_time(_llama8b(bf16_layers=(0, 1), **kw)).total
    assert fp8 < only_end < mixed


def test_cli_flags_read_megatrons_names(capsys):
    # memsym's own command line takes Megatron's spellings: stage 0's FP8 weights lose one
    # layer's (1 + 1 bytes a weight under --fp8-param-gather with no GPU given: the parameter
    # and its transpose), as the job API counts them
    base = ["estimate", "llama3-8b", "--pp", "2", "--seq-length", "8192", "--precision", "fp8",
            "--fp8-recipe", "tensorwise", "--fp8-param-gather"]
    assert main(base) == 0
    before = capsys.readouterr().out
    assert main(base + ["--first-last-layers-bf16"]) == 0
    after = capsys.readouterr().out
    fp8_all, fp8_mixed = (int(next(line.split()[1] for line in out.splitlines()
                                   if line.startswith("fp8_weights")).replace(",", ""))
                          for out in (before, after))
    assert fp8_all - fp8_mixed == 2 * LAYER_LINEAR
    assert "(first 1 / last 1 layers in BF16)" in after
    assert main(["estimate", "llama3-8b", "--pp", "2", "--first-last-layers-bf16"]) == 2
    assert "bf16_layers" in capsys.readouterr().err


def _json(capsys, *argv):
    import json

    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_estimate_adds_up_the_bf16_layers_activations(capsys):
    """The report's activations hold the BF16 layers' 16-bit saved inputs (a term of the
    stage's activations, memsym.groups.ACTIVATION_KEYS): the bytes add up to the peak phase.
    Llama 3 8B at CP 2 (s/c = 4096 tokens), one BF16 layer at each end, p = 1."""
    out = _json(capsys, "estimate", "--bridge-recipe", "llama3_8b_pretrain_2gpu_h100_fp8cs_config",
                "model.context_parallel_size=2", "--world-size", 8, "--gpu", "h100-80gb", "--json")
    acts = out["activation_bytes"]
    assert acts["bf16_layer_activations"] > 0
    assert out["bytes"]["activations"] == sum(acts.values())
    assert out["bytes"]["total"] == out["phases"][out["phases"]["peak"]]


def test_a_search_holds_the_bf16_layers_as_the_estimate_prices_them(capsys):
    """A Bridge fp8cs recipe searched: each row is the job with its BF16 layers, the bytes and
    the step time the estimate of that layout gives (one reading of the job on both paths)."""
    recipe = "llama3_8b_pretrain_2gpu_h100_fp8cs_config"
    rows = _json(capsys, "search", "--bridge-recipe", recipe, "--gpu", "h100-80gb", "--gpus", 8,
                 "--top", 1, "--json")
    lay = rows[0]["layout"]
    est = _json(capsys, "estimate", "--bridge-recipe", recipe,
                f"model.tensor_model_parallel_size={lay['tp']}",
                f"model.pipeline_model_parallel_size={lay['pp']}",
                f"model.context_parallel_size={lay['cp']}",
                f"train.micro_batch_size={lay['micro_batch_size']}",
                "--world-size", 8, "--gpu", "h100-80gb", "--json")
    assert est["training"]["bf16_layers"] == [1, 1]
    assert rows[0]["bytes"]["total"] == est["bytes"]["total"]
    assert rows[0]["step_time_s"] == pytest.approx(est["step_time_s"], rel=1e-9)


def test_the_search_masks_pipeline_stages_smaller_than_the_bf16_layers(capsys):
    """Megatron refuses more BF16 layers at one end than a stage holds under FP8
    (transformer_config.py:1538-1557 at d98e8a64dd): with 10 at the start, p = 4 (8 layers a
    stage of 32) is excluded by the rule, p = 2 (16) is searched."""
    from memsym.search import search

    res = search("llama3-8b", "h100-80gb", 8, pp=[2, 4], precision="fp8", fp8_recipe="tensorwise",
                 held={"bf16_layers": (10, 0)})
    assert res.excluded["bf16-layers-stage"] > 0
    assert set(res.columns["p"].tolist()) == {2}


def test_more_bf16_layers_than_the_model_has_is_refused():
    """A size a user gives is bounded: at most the model's 32 layers at either end (under FP4
    Megatron checks no per-stage limit)."""
    with pytest.raises(InvalidValueError, match="exceeds the model's 32 layers"):
        job("llama3-8b", precision="fp4", bf16_layers=(33, 0), world_size=8)
