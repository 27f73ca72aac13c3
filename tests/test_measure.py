"""memsym.measure: activation formulas derived from real PyTorch layers, checked by hand.

Expected values come from Korthikanti et al. 2022 (arXiv:2205.05198) §4.1, Eq. 1, and from
hand derivations written next to each assertion (which tensor each op saves, in which dtype),
never from the code's own output.  PyTorch is the optional extra: the whole module is skipped
without it.
"""

import pytest
import sympy as sp

from memsym.errors import InvalidValueError, MemsymError, UnknownNameError
from memsym.measure import MeasureError, fit_polynomial, monomial_basis
from memsym.symbols import a, b, d_h, f, g, h, lookup, s

torch = pytest.importorskip("torch")

from memsym.measure import derive_saved_bytes, measure_saved, model_state_bytes  # noqa: E402
from memsym.reference_layers import gpt_layer, llama_layer  # noqa: E402

pytestmark = pytest.mark.torch

GPT = ("s", "b", "h", "a")
GPT_RANGES = dict(s=(1, 8), b=(1, 5), h=(1, 20), a=(1, 5))


def heads_divide(x):
    return x["h"] % x["a"] == 0


# Korthikanti et al. 2022 §4.1, Eq. 1, per block (16-bit activations, 1-byte dropout masks).
EQ1_ATTENTION = 11 * s * b * h + 5 * a * s**2 * b
EQ1_MLP = 19 * s * b * h
EQ1_LAYERNORMS = 4 * s * b * h
EQ1 = s * b * h * (34 + 5 * a * s / h)


@pytest.fixture(scope="module")
def gpt_fit():
    """Degree-4 fit of the CPU GPT layer (F.dropout), held back on shapes up to twice the range."""
    make, inputs = gpt_layer(dtype="bfloat16")
    return derive_saved_bytes(make, inputs, GPT, degree=4, ranges=GPT_RANGES, valid=heads_divide,
                              holdout=6)


@pytest.fixture(scope="module")
def gpt_native_fit():
    make, inputs = gpt_layer(dtype="bfloat16", dropout="native")
    return derive_saved_bytes(make, inputs, GPT, degree=4, ranges=GPT_RANGES, valid=heads_divide)


def test_gpt_layer_fit_is_exact_on_held_back_shapes(gpt_fit):
    fitted = {tuple(p.values()) for p in gpt_fit.points + gpt_fit.checks}
    assert len(gpt_fit.holdout) == 6
    for point in gpt_fit.holdout:
        assert tuple(point.values()) not in fitted
    # Independent re-measurement of bigger shapes than any fitted (s up to 8, h up to 20).
    make, inputs = gpt_layer(dtype="bfloat16")
    for shape in (dict(s=24, b=3, h=48, a=6), dict(s=33, b=1, h=35, a=7)):
        measured = measure_saved(make, inputs, shape).total
        assert gpt_fit.expr.subs({lookup(k): v for k, v in shape.items()}) == measured


def test_gpt_layer_matches_eq1_with_explained_differences(gpt_fit):
    parts = gpt_fit.parts
    # Attention, by hand (bf16 = 2 bytes): QKV input 2sbh; the fused QKV output 6sbh, kept
    # whole because Q, K and V are views of it (Eq. 1 counts Q, K as 4sbh and V as 2sbh: the
    # same 6sbh); softmax output 2as^2b; the dropout of the probabilities keeps on this CPU
    # build a scaled noise tensor in bf16, 2as^2b instead of Eq. 1's 1-byte mask as^2b; the
    # dropped probabilities 2as^2b; projection input 2sbh; the output dropout's noise 2sbh
    # instead of sbh; the causal mask of masked_fill, s x s bools = s^2 (Eq. 1 assumes a fused
    # softmax that masks in-kernel).
    attention = 2*s*b*h + 6*s*b*h + 2*a*s**2*b + 2*a*s**2*b + 2*a*s**2*b + 2*s*b*h + 2*s*b*h + s**2
    assert sp.expand(parts["attention"] - attention) == 0
    assert sp.expand(parts["attention"] - EQ1_ATTENTION) == a * s**2 * b + s * b * h + s**2
    # MLP: fc1 input 2sbh, GeLU input 8sbh, fc2 input 8sbh, dropout noise 2sbh (Eq. 1: sbh mask).
    assert sp.expand(parts["mlp"] - (2 + 8 + 8 + 2) * s * b * h) == 0
    assert sp.expand(parts["mlp"] - EQ1_MLP) == s * b * h
    # Each LayerNorm: its input 2sbh (Eq. 1) plus mean and rstd, one per row of s*b rows,
    # kept in bf16 on the CPU: 2 * 2sb = 4sb per LayerNorm (not counted by Eq. 1).
    layernorms = sp.expand(parts["ln1"] + parts["ln2"])
    assert sp.expand(layernorms - EQ1_LAYERNORMS) == 8 * s * b
    # Leading terms side by side: sbh(36 + 6as/h) against Eq. 1's sbh(34 + 5as/h).
    total = sp.Poly(gpt_fit.expr, s, b, h, a)
    assert total.coeff_monomial(s * b * h) == 36 and total.coeff_monomial(a * s**2 * b) == 6
    # Sum of the differences above: sbh (attention dropout) + sbh (MLP dropout) + as^2b
    # (probability dropout) + 8sb (LayerNorm statistics) + s^2 (causal mask).
    assert sp.expand(gpt_fit.expr - EQ1) == 2 * s * b * h + a * s**2 * b + 8 * s * b + s**2


def test_native_dropout_restores_eq1_masks(gpt_native_fit):
    # torch.native_dropout (CUDA's fused kernel) keeps a bool mask: 1 byte, as Eq. 1 assumes.
    # What remains is the LayerNorm statistics (8sb) and the causal mask (s^2).
    assert sp.expand(gpt_native_fit.expr - EQ1) == 8 * s * b + s**2
    assert sp.expand(gpt_native_fit.parts["attention"] - EQ1_ATTENTION) == s**2
    assert sp.expand(gpt_native_fit.parts["mlp"] - EQ1_MLP) == 0


def test_wrong_degree_is_refused():
    # The attention scores are a*s^2*b, total degree 4: no cubic explains the layer.
    make, inputs = gpt_layer(dtype="bfloat16", dropout="native")
    with pytest.raises(MeasureError, match="no polynomial of total degree 3 in s, b, h, a fits"):
        derive_saved_bytes(make, inputs, GPT, degree=3, ranges=GPT_RANGES, valid=heads_divide)


def test_non_polynomial_layer_is_refused():
    # Eager GQA with g = 1 (multi-query): repeat_kv's reshape of the expanded K/V is a view
    # (2 s b d_h kept), but for 1 < g < a it copies (2 s b a d_h kept): piecewise in g.
    make, inputs = llama_layer(dtype="bfloat16")
    with pytest.raises(MeasureError, match="no polynomial") as err:
        derive_saved_bytes(make, inputs, ("s", "b", "a", "g", "d_h", "f"), degree=4,
                           max_degree=dict(b=1, a=1, g=1, d_h=1, f=1),
                           ranges=dict(s=(1, 6), b=(1, 3), a=(1, 8), g=(1, 4), d_h=(1, 4), f=(1, 6)),
                           valid=lambda x: x["a"] % x["g"] == 0)
    assert isinstance(err.value, MemsymError) and err.value.shape is not None


def test_padded_kernel_is_not_polynomial():
    # A deliberately non-polynomial module: pads s to a multiple of 8 before GeLU.
    class Padded(torch.nn.Module):
        def forward(self, x):
            pad = (-x.shape[0]) % 8
            return torch.nn.functional.gelu(torch.nn.functional.pad(x, (0, 0, 0, 0, 0, pad)))

    def inputs(s, b, h):
        return torch.ones(s, b, h, requires_grad=True)

    with pytest.raises(MeasureError, match="no polynomial of total degree 4"):
        derive_saved_bytes(lambda **x: Padded(), inputs, ("s", "b", "h"), degree=4,
                           ranges=dict(s=(1, 12), b=(1, 5), h=(1, 5)))


LLAMA = ("s", "b", "a", "g", "d_h", "f")
LLAMA_FIT = dict(degree=4, max_degree=dict(b=1, a=1, g=1, d_h=1, f=1),
                 ranges=dict(s=(1, 6), b=(1, 3), a=(2, 8), g=(2, 4), d_h=(1, 4), f=(1, 6)),
                 valid=lambda x: x["a"] % x["g"] == 0)


def test_llama_eager_layer():
    make, inputs = llama_layer(dtype="bfloat16", attention="eager")
    fit = derive_saved_bytes(make, inputs, LLAMA, **LLAMA_FIT)
    H = a * d_h
    # RMSNorm (transformers): fp32 copy of the input 4sbh (saved by pow and mul, one storage),
    # fp32 rsqrt per row 4sb, the bf16 cast saved by the weight multiply 2sbh.
    rms = 4 * s * b * H + 4 * s * b + 2 * s * b * H
    # Attention (1 < g): projections' shared input 2sbh; matmul copies Q 2sbh; repeated K and V
    # are copies at a heads, 2sbh each (GQA saves nothing in eager mode); softmax in fp32 keeps
    # 4as^2b; its bf16 cast 2as^2b for the second matmul; o_proj input 2sbh.
    attention = 5 * 2 * s * b * H + 4 * a * s**2 * b + 2 * a * s**2 * b
    # SwiGLU: shared input 2sbh; gate output 2sbf (SiLU), SiLU output and up output 2sbf each
    # (the product), the product 2sbf (down_proj).
    mlp = 2 * s * b * H + 4 * 2 * s * b * f
    assert sp.expand(fit.parts["input_layernorm"] - rms) == 0
    assert sp.expand(fit.parts["self_attn"] - attention) == 0
    assert sp.expand(fit.parts["mlp"] - mlp) == 0
    assert sp.expand(fit.expr - (2 * rms + attention + mlp)) == 0


def test_llama_sdpa_layer():
    make, inputs = llama_layer(dtype="bfloat16", attention="sdpa")
    fit = derive_saved_bytes(make, inputs, LLAMA, **LLAMA_FIT)
    H = a * d_h
    # SDPA (CPU flash kernel, enable_gqa): input 2sbh; Q 2sbh; K and V at g heads 2sbgd_h each;
    # fp32 log-sum-exp per query row 4asb; output 2sbh, which o_proj's input is a view of.
    # No s^2 term at all.
    attention = 2 * s * b * H + 2 * s * b * H + 4 * s * b * g * d_h + 4 * a * s * b + 2 * s * b * H
    assert sp.expand(fit.parts["self_attn"] - attention) == 0
    assert not sp.Poly(fit.expr, s).degree() > 1
    # the whole layer: two RMSNorms as in the eager test, 2 (4sbh + 4sb + 2sbh) = 12sbh + 8sb;
    # attention above 6sbh + 4sbgd_h + 4asb; SwiGLU 2sbh + 8sbf (eager test) -> with h = a d_h:
    # 20 a d_h s b + 4 s b g d_h + 4 a s b + 8 s b f + 8 s b
    assert sp.expand(fit.expr - (20 * a * d_h * s * b + 4 * s * b * g * d_h + 4 * a * s * b
                                 + 8 * s * b * f + 8 * s * b)) == 0


@pytest.mark.parametrize("optimizer, options, states", [
    ("adam", {}, {"exp_avg": 4, "exp_avg_sq": 4}),
    ("adamw", {}, {"exp_avg": 4, "exp_avg_sq": 4}),
    ("sgd", {"momentum": 0.9}, {"momentum_buffer": 4}),
    ("sgd", {}, {}),
])
def test_optimizer_states_after_a_real_step(optimizer, options, states):
    from memsym.terms.model_state import byte_widths
    from memsym.symbols import b_g, b_hp, b_o

    make, inputs = gpt_layer(dtype="float32")
    got = model_state_bytes(make, inputs, dict(s=4, b=2, h=8, a=2), optimizer=optimizer, **options)
    # GPT layer parameters by hand: QKV 3h^2 + 3h, projection h^2 + h, fc1 4h^2 + 4h,
    # fc2 4h^2 + h, two LayerNorms 4h = 12h^2 + 13h = 872 at h = 8, in 12 tensors.
    assert got.parameters == 12 * 8**2 + 13 * 8 and got.tensors == 12
    per = got.per_parameter()
    widths = byte_widths("ddp", precision="fp32", optimizer="adam" if not states else
                         ("adam" if "exp_avg" in states else "sgd"))
    assert per["weights"] == widths[b_hp] == 4 and per["gradients"] == widths[b_g] == 4
    moments = sum(per[k] for k in states)
    assert moments == sum(states.values())
    if states:
        assert moments == widths[b_o]  # Adam 8 = two fp32 moments; SGD momentum 4
    if optimizer.startswith("adam"):
        # Not in b_o: PyTorch keeps a one-element fp32 step counter per parameter tensor.
        assert got.optimizer["step"] == 4 * got.tensors
    else:
        assert "step" not in got.optimizer


def test_bf16_adam_keeps_moments_in_parameter_dtype():
    # torch.optim.Adam on bf16 parameters keeps bf16 moments (2 + 2 bytes), not the fp32
    # master + moments (4 + 8) of mixed-precision training that byte_widths("...", "bf16") models.
    make, inputs = gpt_layer(dtype="bfloat16")
    got = model_state_bytes(make, inputs, dict(s=4, b=1, h=8, a=2), optimizer="adam")
    per = got.per_parameter()
    assert per["weights"] == per["gradients"] == per["exp_avg"] == per["exp_avg_sq"] == 2


def test_bad_arguments():
    assert monomial_basis(("s",), 2) == (1, s, s**2)
    with pytest.raises(UnknownNameError):
        monomial_basis(("seq",), 2)
    with pytest.raises(InvalidValueError):
        fit_polynomial(lambda x: 1, ("s",))
    with pytest.raises(InvalidValueError):
        fit_polynomial(lambda x: 1, ("s",), basis=[2 * s])
    with pytest.raises(InvalidValueError):
        fit_polynomial(lambda x: 1, ("s",), degree=1, ranges={"h": (1, 4)})
    with pytest.raises(MeasureError, match="cannot tell"):
        fit_polynomial(lambda x: 1, ("s",), degree=3, ranges={"s": (1, 2)})
    with pytest.raises(UnknownNameError):
        gpt_layer(dropout="fused")
    with pytest.raises(UnknownNameError):
        model_state_bytes(*gpt_layer(), dict(s=2, b=1, h=4, a=2), optimizer="lion")


def test_user_basis_and_exact_rationals():
    # A user-given basis, and a non-integer coefficient kept exact.
    fit = fit_polynomial(lambda x: x["s"] * x["b"] * x["h"] * 3 // 2 if x["h"] % 2 == 0 else 0,
                         ("s", "b", "h"), basis=[s * b * h], ranges=dict(h=(2, 2)), holdout=0,
                         valid=lambda x: x["h"] == 2)
    assert fit.expr == sp.Rational(3, 2) * s * b * h
    assert fit.total().evaluate(s=2, b=1, h=2) == 6


def test_names_go_through_errors_choose_and_missing_torch_is_one_error(monkeypatch):
    # dtype, dropout, attention, group_by and optimizer: case forgiven, misses suggest
    make, inputs = gpt_layer(dtype="BFloat16", dropout="Native")
    x = inputs(s=2, b=1, h=4)
    from memsym.measure import saved_bytes
    assert saved_bytes(make(s=2, b=1, h=4, a=2), x, group_by="DType").total == \
        saved_bytes(make(s=2, b=1, h=4, a=2), x, group_by="dtype").total
    with pytest.raises(UnknownNameError) as err:
        llama_layer(attention="spda")
    assert "sdpa" in err.value.suggestions
    with pytest.raises(UnknownNameError):
        gpt_layer(dtype="bf16")
    with pytest.raises(UnknownNameError):
        saved_bytes(make(s=2, b=1, h=4, a=2), x, group_by="layer")
    st = model_state_bytes(*gpt_layer(), dict(s=2, b=1, h=4, a=2), optimizer="AdamW")
    assert st.optimizer
    # without PyTorch the layer factories refuse with MeasureError (install hint), no ImportError
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    with pytest.raises(MeasureError, match="memsym\\[torch\\]"):
        gpt_layer()
    with pytest.raises(MeasureError):
        llama_layer()
