"""Gemma 4's per-layer input embeddings (``hidden_size_per_layer_input``, Gemma4TextConfig's
default 256): parameters against transformers 5.25.0's own model on the meta device
(``tests/hf_oracle.py``), by hand; activations against ``Gemma4TextDecoderLayer`` and
``Gemma4TextModel`` run forward on CPU with saved-tensor hooks (``memsym.measure.saved_bytes``),
and the job's stage activations against the terms' hand derivation.

Shapes named after the published E2B / E4B checkpoints are written here from their
``text_config`` sizes with ``num_kv_shared_layers`` 0 (KV sharing, which those files use, is
refused in one line: ``tests/test_hf_gemma4.py``); transformers' model of each dict is the
oracle, not a published total.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memsym.errors import InvalidValueError
from memsym.model import from_hf_config, parameter_count, parameter_counts, stage_parameters
from memsym.symbols import L, b, c, h, p, p_pl, s
from memsym.terms.gemma4_ple import gemma4_ple_layer, gemma4_ple_model

from hf_oracle import TOKENS, class_defaults, language_model_count, write_config
from in_process import estimate

_TEXT = {"model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 6,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "global_head_dim": 16, "intermediate_size": 96, "vocab_size": 128,
         "max_position_embeddings": 64, "hidden_size_per_layer_input": 8,
         "vocab_size_per_layer_input": 100, **TOKENS}
_MOE = {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
        "moe_intermediate_size": 24}

# E2B's and E4B's text_config sizes (hidden, layers, MLP, heads, KV heads, head widths, PLE),
# their layer pattern of sliding layers and one full-attention layer, without KV sharing
_E2B_SHAPED = {"model_type": "gemma4_text", "hidden_size": 1536, "num_hidden_layers": 35,
               "intermediate_size": 6144, "num_attention_heads": 8, "num_key_value_heads": 1,
               "head_dim": 256, "global_head_dim": 512, "vocab_size": 262144,
               "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262144,
               "num_kv_shared_layers": 0,
               "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7}
_E4B_SHAPED = {"model_type": "gemma4_text", "hidden_size": 2560, "num_hidden_layers": 42,
               "intermediate_size": 10240, "num_attention_heads": 8, "num_key_value_heads": 2,
               "head_dim": 256, "global_head_dim": 512, "vocab_size": 262144,
               "hidden_size_per_layer_input": 256, "vocab_size_per_layer_input": 262144,
               "num_kv_shared_layers": 0,
               "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 7}

CASES = {
    "ple": _TEXT,
    "ple-untied-bias": {**_TEXT, "tie_word_embeddings": False, "attention_bias": True},
    "ple-global": {**_TEXT, "global_head_dim": 32, "attention_k_eq_v": True,
                   "num_global_key_value_heads": 1},
    "ple-moe": {**_TEXT, **_MOE},
    "ple-default-vocab": {k: v for k, v in _TEXT.items() if k != "vocab_size_per_layer_input"},
    "ple-vlm": {"model_type": "gemma4", "text_config": _TEXT},
}


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_small_configs_match_transformers(tmp_path, case):
    path = write_config(tmp_path, CASES[case])
    assert parameter_count(from_hf_config(path)) == language_model_count(path)


@pytest.mark.torch
@pytest.mark.parametrize("cfg,total", [
    # Gemma4TextConfig(): 30 layers, PLE 256 over a 262,144-row table
    ("defaults", 5_077_177_856),
    (_E2B_SHAPED, None), (_E4B_SHAPED, None)])
def test_the_class_defaults_and_the_e2b_e4b_shapes_match_transformers(tmp_path, cfg, total):
    cfg = class_defaults("gemma4_text") if cfg == "defaults" else cfg
    path = write_config(tmp_path, cfg)
    got = parameter_count(from_hf_config(path))
    assert got == language_model_count(path)
    if total is not None:
        assert got == total


def test_the_per_layer_inputs_counted_by_hand(tmp_path):
    # the packed table 100 x 6*8, the model projection 64 x 6*8, its norm of 8; each layer's
    # gate 64 x 8, projection 8 x 64, norm of 64 (Gemma4TextDecoderLayer.__init__)
    model_level = 100 * 48 + 64 * 48 + 8
    layer = 64 * 8 + 8 * 64 + 64
    arch = from_hf_config(write_config(tmp_path, _TEXT))
    assert parameter_counts(arch)["per_layer_inputs"] == model_level + 6 * layer == 14408
    # the rest as tests/test_hf_gemma4.py's dense count of the same shapes: 194,304
    assert parameter_count(arch) == 194_304 + 14_408
    assert arch.per_layer_input_size == 8 and arch.per_layer_input_vocab == 100


def test_the_table_and_projection_are_on_the_first_stage(tmp_path):
    # two stages of three layers: the model-level parts on the first, the layers' own on both
    arch = from_hf_config(write_config(tmp_path, _TEXT))
    plain = from_hf_config(write_config(tmp_path, {**_TEXT, "hidden_size_per_layer_input": 0},
                                        "plain"))
    got = [stage_parameters(arch, p=2, stage=i, pad_vocab=False).total
           - stage_parameters(plain, p=2, stage=i, pad_vocab=False).total for i in (0, 1)]
    assert got == [100 * 48 + 64 * 48 + 8 + 3 * 1088, 3 * 1088]


@pytest.mark.parametrize("value", [0, None])
def test_zero_or_null_builds_none(tmp_path, value):
    arch = from_hf_config(write_config(tmp_path, {**_TEXT, "hidden_size_per_layer_input": value}))
    assert arch.per_layer_input_size is None and parameter_counts(arch)["per_layer_inputs"] == 0


def test_a_bad_width_is_refused_in_one_line(tmp_path):
    with pytest.raises(InvalidValueError) as err:
        from_hf_config(write_config(tmp_path, {**_TEXT, "hidden_size_per_layer_input": -3}))
    assert "\n" not in str(err.value) and "hidden_size_per_layer_input" in str(err.value)


# --- activations ------------------------------------------------------------------------------
# (s, b, a, g, d_h, f, p) of the layers measured
_SHAPES = [(5, 2, 4, 2, 8, 12, 4), (3, 1, 2, 1, 8, 4, 8), (4, 3, 6, 3, 16, 8, 16)]


def _conf(shape, p_, n_layers=2):
    transformers = pytest.importorskip("transformers")
    s_, b_, a_, g_, d_, f_, _ = shape
    conf = transformers.Gemma4TextConfig(
        hidden_size=a_ * d_, num_attention_heads=a_, num_key_value_heads=g_, head_dim=d_,
        global_head_dim=d_, intermediate_size=f_, num_hidden_layers=n_layers, vocab_size=16,
        max_position_embeddings=64,
        layer_types=["sliding_attention"] * (n_layers - 1) + ["full_attention"],
        hidden_size_per_layer_input=p_, vocab_size_per_layer_input=16)
    conf._attn_implementation = "sdpa"
    return conf


def _layer_bytes(shape, p_, frozen=False):
    """What Gemma4TextDecoderLayer keeps for backward, its per-layer input given (p_ > 0);
    ``frozen``: its weights need no gradient, nor the per-layer input (LoRA's frozen base)."""
    torch = pytest.importorskip("torch")
    from transformers.models.gemma4 import modeling_gemma4 as g4

    from memsym.measure import saved_bytes

    s_, b_, a_, g_, d_, f_, _ = shape
    conf = _conf(shape, p_)
    torch.manual_seed(0)
    layer = g4.Gemma4TextDecoderLayer(conf, 0).to(torch.bfloat16).requires_grad_(not frozen)
    rope = g4.Gemma4TextRotaryEmbedding(conf)
    pos = torch.arange(s_)[None].expand(b_, s_)

    class Called(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x, per_layer_input):
            with torch.no_grad():
                tables = rope(x, pos, layer_type="sliding_attention")
            return self.layer(x, per_layer_input if p_ else None, position_embeddings=tables,
                              position_ids=pos, shared_kv_states={}, attention_mask=None)

    x = torch.randn(b_, s_, a_ * d_, dtype=torch.bfloat16, requires_grad=True)
    pli = torch.randn(b_, s_, max(p_, 1), dtype=torch.bfloat16, requires_grad=not frozen)
    return saved_bytes(Called(), (x, pli), depth=2)


def _model_bytes(shape, p_, n_layers, frozen=False):
    """What Gemma4TextModel keeps for backward on random input ids; ``frozen``: every weight
    but the q projections' (which, as LoRA's adapters would, make each layer need its
    input's gradient) needs none."""
    torch = pytest.importorskip("torch")
    from transformers.models.gemma4 import modeling_gemma4 as g4

    from memsym.measure import saved_bytes

    s_, b_ = shape[:2]
    torch.manual_seed(0)
    model = g4.Gemma4TextModel(_conf(shape, p_, n_layers)).to(torch.bfloat16)
    if frozen:
        model.requires_grad_(False)
        for layer in model.layers:
            layer.self_attn.q_proj.weight.requires_grad_(True)

    class Called(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).last_hidden_state

    return saved_bytes(Called(), (torch.randint(1, 16, (b_, s_)),), depth=2)


def _at(shape, n_layers=2):
    s_, b_, a_, g_, d_, f_, p_ = shape
    return {s: s_, b: b_, c: 1, h: a_ * d_, p_pl: p_, L: n_layers}


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES)
def test_the_layers_path_is_the_term(shape):
    s_, b_, a_, g_, d_, f_, p_ = shape
    with_ple, without = _layer_bytes(shape, p_), _layer_bytes(shape, 0)
    assert with_ple.total - without.total == gemma4_ple_layer().expr.xreplace(_at(shape))
    # by hand: the gate's input 2 tau h, its norm of h 8 tau h + 8 tau + 4 h
    tau, h_ = s_ * b_, a_ * d_
    assert with_ple.groups["layer.per_layer_input_gate"] == 2 * tau * h_
    assert with_ple.groups["layer.post_per_layer_input_norm"] == 8 * tau * h_ + 8 * tau + 4 * h_


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES[:2])
@pytest.mark.parametrize("n_layers", [2, 3])
def test_the_models_extra_is_its_layers_and_the_projection(shape, n_layers):
    # the whole Gemma4TextModel with and without per-layer inputs: each layer's term (its
    # slice of per_layer_inputs one storage, counted once) and the model-level projection
    got = _model_bytes(shape, shape[-1], n_layers).total - _model_bytes(shape, 0, n_layers).total
    at = _at(shape, n_layers)
    assert got == (n_layers * gemma4_ple_layer().expr + gemma4_ple_model().expr).xreplace(at)


@pytest.mark.torch
@pytest.mark.parametrize("shape", _SHAPES[:2])
def test_a_frozen_base_keeps_the_frozen_term(shape):
    # LoRA's frozen base: the gate and projection keep no input, the product only the
    # per-layer input (which needs no gradient), the norm no fp32 product; the model-level
    # projection nothing (none of it needs a gradient): the model's extra is its layers'
    s_, b_, a_, g_, d_, f_, p_ = shape
    got = _layer_bytes(shape, p_, frozen=True).total - _layer_bytes(shape, 0, frozen=True).total
    assert got == gemma4_ple_layer(frozen=True).expr.xreplace(_at(shape))
    model = _model_bytes(shape, p_, 2, frozen=True).total \
        - _model_bytes(shape, 0, 2, frozen=True).total
    assert model == 2 * got


def _stage0(arch, framework, recompute="none", **more):
    from memsym.training import Training, stage_activations

    total = stage_activations(arch, training=Training(framework=framework, recompute=recompute,
                                                      **more))
    return {term.key: term.expr for term in total}


def test_a_lora_job_adds_the_frozen_terms(tmp_path):
    arch = from_hf_config(write_config(tmp_path, _TEXT))
    plain = from_hf_config(write_config(tmp_path, {**_TEXT, "hidden_size_per_layer_input": 0},
                                        "plain"))
    got, base = (_stage0(m, "deepspeed", finetune="lora") for m in (arch, plain))
    tau = s * b / c
    layer = 4 * tau * h + 4 * tau * p_pl + 8 * tau + 4 * h
    assert sp.simplify((got["layer_activations"] - base["layer_activations"]
                        - 6 * layer).subs({L: 6, p: 1})) == 0
    assert "gemma4_per_layer_projection" not in got


@pytest.mark.parametrize("framework", ["deepspeed", "megatron"])
@pytest.mark.parametrize("case", ["ple", "ple-global"])
def test_a_job_adds_the_terms(tmp_path, framework, case):
    # six layers on one stage, one micro-batch in flight: six layer terms and the projection
    cfg = CASES[case]
    arch = from_hf_config(write_config(tmp_path, cfg))
    plain = from_hf_config(write_config(tmp_path, {**cfg, "hidden_size_per_layer_input": 0},
                                        "plain"))
    got, base = _stage0(arch, framework), _stage0(plain, framework)
    tau = s * b / c
    layer = 10 * tau * h + 8 * tau * p_pl + 8 * tau + 4 * h
    assert sp.simplify((got["layer_activations"] - base["layer_activations"]
                        - 6 * layer).subs({L: 6, p: 1})) == 0
    assert sp.simplify((got["gemma4_per_layer_projection"]
                        - (2 * tau * h + 48 * tau * p_pl + 48 * tau + 4 * p_pl)).subs(p, 1)) == 0
    # full recompute: each checkpoint keeps its slice of per_layer_inputs beside its input
    got, base = _stage0(arch, framework, "full"), _stage0(plain, framework, "full")
    assert sp.simplify((got["layer_activations"] - base["layer_activations"]
                        - 6 * 2 * tau * p_pl).subs({L: 6, p: 1})) == 0


def test_an_estimate_and_a_step_time_run(tmp_path, capsys):
    from memsym.job_record import Layout
    from memsym.timing.step import step_time
    from memsym.training import Training

    path = write_config(tmp_path, class_defaults("gemma4_text"))
    job = [str(path), "--gpu", "h100-80gb", "--seq-length", "512", "--micro-batch-size", "1"]
    code, out, err = estimate(capsys, *job, "--framework", "deepspeed")
    assert code in (0, 1) and "GPU memory" in out and "per-layer" in out, err
    # Megatron-Bridge builds its own Gemma 4 (models/gemma/modeling_gemma4.py at 067f987df0,
    # Transformer Engine's norms), not the module measured here; PEFT's all-linear adapts the
    # per-layer input linears too (modeling_gemma4.py:1348-1349, 1574), which are not counted
    for extra, said in ((["--framework", "megatron"], "Megatron-Bridge's own Gemma 4"),
                        (["--framework", "deepspeed", "--finetune", "lora"], "all-linear")):
        code, out, err = estimate(capsys, *job, *extra)
        assert (code, out) == (2, "") and said in err and len(err.strip().splitlines()) == 1
    arch = from_hf_config(path)
    assert any("not in the step time" in note for note in arch.extra["notes"])
    training = Training(framework="deepspeed", seq_length=512, micro_batch_size=1,
                        global_batch_size=1)
    assert step_time(arch, Layout(), training, "h100-80gb").total > 0
