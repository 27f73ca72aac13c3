"""Model-state memory: the seed numbers and ZeRO's figures, computed independently here."""

from fractions import Fraction

import pytest
import sympy as sp

from memsym import byte_widths, host_state, model_state
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.symbols import N, b_g, b_hp, b_m, b_o, d, p, t

GB = 10**9


def gb(total, **values):
    return total.evaluate(values) / GB


@pytest.mark.parametrize("stage,scheme,expected", [
    # seed 002, per_gpu_state_gb(params_b, world=8, stage): printed rows (GB = 1e9)
    (0, "ddp", (112.0, 208.0, 1120.0)),
    (1, "zero1", (38.5, 71.5, 385.0)),
    (2, "zero2", (26.2, 48.8, 262.5)),
    (3, "zero3", (14.0, 26.0, 140.0)),
])
def test_seed002_zero_table(stage, scheme, expected):
    total = model_state(scheme, convention="zero-paper").subs(byte_widths(scheme, convention="zero-paper"))
    for params_b, printed in zip((7, 13, 70), expected):
        value = gb(total, N=params_b * GB, d=8, t=1, p=1)
        # the seed prints Python's round(x, 1) of a binary float: 26.25 -> 26.2, 48.75 -> 48.8
        assert round(float(value), 1) == printed


def test_seed004_16p_rule():
    # seed 004: 2P (fp16 weights) + 2P (fp16 grads) + 12P (fp32 copy, m, v) = 16P GB
    total = model_state("ddp", convention="zero-paper").subs(byte_widths("ddp", convention="zero-paper"))
    for params_b, printed in ((7, 112), (13, 208), (70, 1120)):
        assert gb(total, N=params_b * GB, d=1, t=1, p=1) == printed


def test_zero_figure1_text_example():
    # ZeRO §5: Psi = 7.5B, N_d = 64: 120 / 31.4 / 16.6 / 1.9 GB
    psi, nd = Fraction(75, 10) * GB, 64
    expected = {"ddp": 120, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    for scheme, printed in expected.items():
        value = gb(model_state(scheme, convention="zero-paper").subs(byte_widths(scheme, convention="zero-paper")), N=psi, d=nd, t=1, p=1)
        assert round(float(value), 1) == printed


def test_seed000_form_is_derived_from_the_three_terms():
    total = model_state("distributed-optimizer", convention="seed000")
    assert total.keys == ("weights", "gradients", "optimizer")
    fp32 = {"b_g": 4, "b_m": 4, "b_o": 8}
    # seed 000: Mem = N/(p t) (b_hp + 16/d)
    assert total.factored(fp32) == N / (p * t) * (b_hp + sp.Integer(16) / d)
    # the three boxed terms of seed 000, one by one
    assert total["weights"].expr == N / (p * t) * b_hp
    assert total["gradients"].subs(fp32).expr == N / (p * t * d) * 4
    assert total["optimizer"].subs(fp32).expr == N / (p * t * d) * 12


def test_megatron_lm_convention_6_plus_12_over_d():
    # Megatron-LM: 18 bytes/param without, 6 + 12/d with the distributed optimizer
    w = byte_widths("distributed-optimizer", convention="megatron-lm")
    per_param = model_state("distributed-optimizer", convention="megatron-lm").subs(w)
    assert sp.simplify(per_param.expr.subs({N: 1, p: 1, t: 1}) - (6 + sp.Integer(12) / d)) == 0
    ddp = model_state("ddp", convention="megatron-lm").subs(byte_widths("ddp", convention="megatron-lm"))
    assert ddp.evaluate(N=1, p=1, t=1) == 18
    # memsym convention (seed 000): 2 + 16/d; they agree at d = 1 (18) and differ beyond
    mine = model_state("distributed-optimizer", convention="memsym").subs(byte_widths(convention="memsym"))
    assert mine.evaluate(N=1, d=1, p=1, t=1) == 18
    assert mine.evaluate(N=1, d=8, p=1, t=1) == 4 and per_param.evaluate(N=1, d=8, p=1, t=1) == Fraction(15, 2)


def test_fsdp_is_zero3():
    # PyTorch FSDP FULL_SHARD shards parameters, gradients and optimizer states over d, as
    # ZeRO-3 does (ZeRO §5, Figure 1).  By hand, with ZeRO's mixed-precision Adam widths (fp16 weights 2 B, fp16
    # gradients 2 B, fp32 master copy 4 B + momentum and variance 8 B): 16 N / (p t d)
    for scheme in ("fsdp", "zero3"):
        assert sp.simplify(model_state(scheme, convention="zero-paper").subs(byte_widths(scheme, convention="zero-paper")).expr
                           - 16 * N / (p * t * d)) == 0, scheme


@pytest.mark.parametrize("optimizer,precision,per_param", [
    ("adam", "bf16", 16),        # ZeRO §3.1
    ("sgd", "bf16", 12),         # seed 002: master + momentum
    ("adam8bit", "bf16", 10),    # 2 + 2 + 4 + 2 (two 1-byte moments)
    ("adafactor", "bf16", 8),    # factored second moment neglected: 2 + 2 + 4
    ("none", "bf16", 2),         # frozen: weights only
    ("adam", "fp32", 16),        # 4 + 4 + 0 master + 8
    ("adam", "fp8", 15),         # 1 + 2 (bf16 grads) + 4 + 8
])
def test_optimizers_and_precisions_are_substitutions(optimizer, precision, per_param):
    widths = byte_widths("ddp", precision, optimizer, convention="zero-paper")
    assert model_state("ddp", convention="zero-paper").subs(widths).evaluate(N=1, d=1, p=1, t=1) == per_param


def test_offload():
    widths = byte_widths("zero3", convention="zero-paper")
    on_gpu = model_state("zero3", offload="optimizer", convention="zero-paper").subs(widths)
    # ZeRO-Offload: only the (sharded) fp16 weights stay on the GPU
    assert on_gpu.keys == ("weights",)
    assert on_gpu.evaluate(N=8, d=4, p=1, t=1) == 2 * 8 // 4
    host = host_state("zero3", offload="optimizer").subs(widths)
    assert host.evaluate(N=8, d=4, p=1, t=1) == (2 + 12) * 8 // 4
    everything = model_state("zero3", offload="optimizer+params")  # framework: nothing either
    assert len(everything) == 0
    # DDP/ZeRO-1 offload keeps the gradients on the GPU (no partitioned update)
    assert model_state("zero1", offload="optimizer").keys == ("weights", "gradients")


def test_tp_pp_divide_the_weights():
    total = model_state("distributed-optimizer").subs(byte_widths())
    one = total.evaluate(N=64 * GB, d=1, t=1, p=1)
    assert total.evaluate(N=64 * GB, d=1, t=8, p=1) == one / 8
    assert total.evaluate(N=64 * GB, d=1, t=2, p=4) == one / 8


def test_bad_names_and_values():
    with pytest.raises(UnknownNameError, match="zero3"):
        model_state("zer03")
    with pytest.raises(UnknownNameError):
        byte_widths(optimizer="adamm")
    with pytest.raises(InvalidValueError, match="megatron-lm"):
        model_state("zero2", convention="megatron-lm")
    with pytest.raises(InvalidValueError, match="zero3 or fsdp"):
        model_state("zero2", offload="optimizer+params")
    total = model_state("zero3").subs(byte_widths("zero3"))
    for bad in ({"d": 0}, {"d": -1}, {"d": 1.5}, {"N": float("nan")}, {"N": float("inf")}):
        with pytest.raises(InvalidValueError):
            total.evaluate({"N": 10, "d": 2, "p": 1, "t": 1, **bad})
    with pytest.raises(UnknownNameError):
        total.evaluate({"__import__('os')": 1})


def test_sensitivity_and_elasticity():
    total = model_state("distributed-optimizer", convention="seed000").subs(
        byte_widths(convention="seed000"))
    # dM/dd = -16 N / (p t d^2)
    assert sp.simplify(total.sensitivity("d") + 16 * N / (p * t * d**2)) == 0
    # elasticity in d: -(16/d) / (2 + 16/d) = -8/(d + 8)
    assert sp.simplify(total.elasticity("d") + 8 / (d + 8)) == 0
    assert total.elasticity("N") == 1
    assert total.elasticity("t") == -1


def test_huge_counts_stay_exact():
    total = model_state("ddp", convention="zero-paper").subs(byte_widths("ddp", convention="zero-paper"))
    assert total.evaluate(N=10**15, d=1, t=1, p=1) == 16 * 10**15


@pytest.mark.parametrize("precision,plain,distributed", [
    # Megatron-LM docs/user-guide/features/dist_optimizer.md, bytes per parameter table
    ("bf16", 18, 6 + Fraction(12, 8)),   # bf16 param, fp32 grads: 18 or 6 + 12/d
    ("fp16", 20, 4 + Fraction(16, 8)),   # fp16 param, fp16 grads: 20 or 4 + 16/d
    ("fp32", 16, 8 + Fraction(8, 8)),    # fp32 param, fp32 grads: 16 or 8 + 8/d
])
def test_megatron_lm_table_rows(precision, plain, distributed):
    for scheme, expected in (("ddp", plain), ("distributed-optimizer", distributed)):
        w = byte_widths(scheme, precision, convention="megatron-lm")
        total = model_state(scheme, convention="megatron-lm").subs(w)
        assert total.evaluate(N=1, d=8, p=1, t=1) == expected


def test_floats_are_read_exactly_and_none_is_not_a_name():
    from memsym import Source, Term
    from memsym.errors import UnknownNameError

    # a float enters through its shortest decimal, once: 0.1 is 1/10 exactly, and the
    # float 1/3.0 = 0.3333333333333333 is that decimal (never "guessed" back to 1/3)
    assert Term("x", N * 0.1, "a tenth", Source("zero", "§5")).evaluate(N=10**10 + 1) == \
        sp.Rational(10**10 + 1, 10)
    assert Term("y", N / 3.0, "a float third", Source("zero", "§5")).evaluate(N=1) == \
        sp.Rational(3333333333333333, 10**16)
    with pytest.raises(UnknownNameError):
        byte_widths(optimizer=None)  # None must not become the optimizer "none"


# --- framework convention (issue 14): what Megatron-core, DeepSpeed and FSDP2 allocate ----------

def _per_param(scheme, dd, precision="bf16", optimizer="adam", linear_params=None, **kw):
    w = byte_widths(scheme, precision, optimizer, **kw)
    kw.pop("store_param_remainders", None)
    kw.pop("exp_avg_dtype", None)
    kw.pop("exp_avg_sq_dtype", None)
    total = model_state(scheme, precision=precision, optimizer=optimizer,
                        linear_params=linear_params, **kw)
    return total.subs(w).evaluate(N=1, d=dd, p=1, t=1)


@pytest.mark.parametrize("precision,grad_dtype,plain,distributed", [
    # Megatron-LM dist_optimizer.md table, printed: 18 / 6 + 12/d, 20 / 4 + 16/d, 16 / 8 + 8/d
    ("bf16", None, 18, lambda dd: 6 + Fraction(12, dd)),
    ("fp16", None, 20, lambda dd: 4 + Fraction(16, dd)),
    ("fp32", None, 16, lambda dd: 8 + Fraction(8, dd)),
    # --grad-reduce-in-bf16: bf16 buffer + fp32 .float() shard, the fp16 row's 4 + 16/d
    ("bf16", "bf16", 20, lambda dd: 4 + Fraction(16, dd)),
])
def test_framework_default_is_megatron_allocation(precision, grad_dtype, plain, distributed):
    for dd in (1, 2, 8, 64):
        assert _per_param("distributed-optimizer", dd, precision=precision,
                          grad_dtype=grad_dtype) == distributed(dd)
    assert _per_param("ddp", 1, precision=precision, grad_dtype=grad_dtype) == plain


def test_default_convention_is_framework_and_aliases_hold():
    # the API default: Megatron's whole gradient buffer (NVIDIA/Megatron-LM#654: 2 + 4 + 4 + 8)
    total = model_state()
    assert total.keys == ("weights", "gradients", "optimizer")
    assert total["gradients"].expr == N / (p * t) * b_g  # whole, not divided by d
    assert model_state().subs(byte_widths()).evaluate(N=1, d=8, p=1, t=1) == Fraction(15, 2)
    # "memsym" (the old default name) is seed000 exactly
    for scheme in ("ddp", "zero1", "zero2", "zero3", "fsdp", "distributed-optimizer"):
        a = model_state(scheme, convention="memsym").subs(byte_widths(scheme, convention="memsym"))
        b_ = model_state(scheme, convention="seed000").subs(byte_widths(scheme, convention="seed000"))
        assert sp.simplify(a.expr - b_.expr) == 0
    # zero-paper's distributed optimizer is ZeRO's P_os: 4 + 12/d
    zp = model_state(convention="zero-paper").subs(byte_widths(convention="zero-paper"))
    assert zp.evaluate(N=1, d=4, p=1, t=1) == 7


def test_gpt3_gradient_buffer_difference_is_9_57_gb():
    # GPT-3 175B, t8 p8 d8: psi = 175e9/64 per GPU. Megatron keeps the whole fp32 grad buffer
    # (4 psi), seed 000 shards it (4 psi/8): difference 4 psi (1 - 1/8) = 3.5 psi, by hand
    psi = Fraction(175 * 10**9, 64)
    fw = model_state().subs(byte_widths()).evaluate(N=175 * 10**9, d=8, p=8, t=8)
    seed = model_state(convention="seed000").subs(byte_widths(convention="seed000")).evaluate(
        N=175 * 10**9, d=8, p=8, t=8)
    assert fw == psi * Fraction(15, 2) and seed == psi * 4
    assert fw - seed == Fraction(9570312500)          # 9.57 GB, not 5.5 GB
    assert round(float(fw - seed) / 2**30, 2) == 8.91  # GiB


def test_deepspeed_framework_forms():
    # stage_1_and_2.py: 16-bit params whole; 16-bit grads; fp32 grad partition (.to(fp32)),
    # fp32 master + Adam partitioned. ZeRO-2 = the estimator's 2 + 18/N
    for dd in (1, 4, 8):
        assert _per_param("zero2", dd) == 2 + Fraction(18, dd)
        assert _per_param("zero1", dd) == 4 + Fraction(16, dd)
        assert _per_param("zero3", dd) == Fraction(20, dd)  # + the fp32 grad of a sub-group
    # fp32 models: no separate fp32 grad copy; DeepSpeed still clones the fp32 partition
    assert _per_param("zero2", 4, precision="fp32") == 4 + Fraction(4 + 4 + 8, 4)


def test_fsdp2_framework_form():
    # FSDP2: fp32 sharded params (they are the master), fp32 sharded grads, Adam 8 B: 16/d,
    # the same total as ZeRO-3's textbook form but split 4 + 4 + 8 (no fp16 copy kept)
    w = byte_widths("fsdp")
    assert (w[b_hp], w[b_g], w[b_m], w[b_o]) == (4, 4, 0, 8)
    assert _per_param("fsdp", 8) == 2
    total = model_state("fsdp").subs(w)
    assert total["weights"].evaluate(N=8, d=8, p=1, t=1) == 4


def test_fp8_transformer_engine_caches():
    # TE keeps the bf16 weight and caches rowwise + transpose FP8 copies of linear weights:
    # 6 + 12/d + 2 (all params linear); with 30 % in embeddings: + 2 x 0.7
    assert _per_param("distributed-optimizer", 8, precision="fp8") == Fraction(15, 2) + 2
    half = _per_param("distributed-optimizer", 8, precision="fp8", linear_params=Fraction(7, 10))
    assert half == Fraction(15, 2) + Fraction(14, 10)
    # --fp8-param-gather: fp8 linear weights only (1 B, and where no GPU says FP8 GEMMs take
    # non-TN layouts the transpose TE makes after each gather, 1 B), 16-bit elsewhere
    pg = _per_param("distributed-optimizer", 8, precision="fp8", fp8_param_gather=True,
                    linear_params=Fraction(7, 10))
    assert pg == 2 * Fraction(3, 10) + 2 * Fraction(7, 10) + 4 + Fraction(12, 8)


def test_precision_aware_optimizer():
    # store_param_remainders: bf16 param + int16 remainder = fp32 master (2 B); bf16 moments
    v = _per_param("distributed-optimizer", 4, precision_aware=True, exp_avg_dtype="bf16",
                   exp_avg_sq_dtype="bf16")
    assert v == 2 + 4 + Fraction(2 + 2 + 2, 4)
    # bf16 grads under the precision-aware optimizer: decoupled_grad is a view, no fp32 copy
    v = _per_param("distributed-optimizer", 4, precision_aware=True, grad_dtype="bf16",
                   store_param_remainders=False)
    assert v == 2 + 2 + Fraction(4 + 8, 4)


def test_framework_bad_combinations():
    with pytest.raises(InvalidValueError, match="fp8"):
        byte_widths("zero2", "fp8")
    with pytest.raises(InvalidValueError, match="precision_aware"):
        byte_widths("zero1", precision_aware=True)
    with pytest.raises(InvalidValueError, match="framework"):
        byte_widths(convention="seed000", grad_dtype="bf16")
    with pytest.raises(UnknownNameError):
        model_state(grad_dtype="fp64")


def test_megatron_fsdp_strategies_by_hand():
    from memsym.terms.megatron_fsdp import megatron_fsdp_state
    w = byte_widths()  # bf16 params, fp32 main grads, fp32 main params + Adam
    per = {s: megatron_fsdp_state(s).subs(w).evaluate(N=1, d=4, p=1, t=1)
           for s in ("no_shard", "optim", "optim_grads", "optim_grads_params")}
    # by hand at d = 4: 2 + 4 + 12; 2 + 4 + 12/4; 2 + 16/4; 18/4
    assert per == {"no_shard": 18, "optim": 9, "optim_grads": 6, "optim_grads_params": Fraction(9, 2)}
    with pytest.raises(UnknownNameError):
        megatron_fsdp_state("full_shard")


def test_deepspeed_pipeline_rule():
    from memsym.terms.model_state import deepspeed_allows_pipeline
    # DeepSpeed runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    assert deepspeed_allows_pipeline("zero1") and not deepspeed_allows_pipeline("zero2")
    assert not deepspeed_allows_pipeline("zero3")


def test_megatron_buffer_layout_by_hand():
    from memsym.terms.framework_state import megatron_buffer_layout, megatron_distopt_rank_bytes
    # three params [50, 200, 10] in module order; Megatron lays them out in reverse:
    # 10 at [0, 10); 200 at [64, 264) (start aligned to 64); 50 at [320, 370);
    # one bucket, end padded to lcm(8, 128) = 128: 384
    ranges, buckets, numel = megatron_buffer_layout([50, 200, 10], 8)
    assert ranges == [(320, 370), (64, 264), (0, 10)] and buckets == [(0, 384)] and numel == 384
    # bucket_size 100: the 200-element param closes the first bucket at 264 -> 384; the 50
    # starts the next bucket at 384 and ends at 434 -> padded to 512
    ranges, buckets, numel = megatron_buffer_layout([50, 200, 10], 8, bucket_size=100)
    assert buckets == [(0, 384), (384, 512)] and ranges[0] == (384, 434) and numel == 512
    # per rank: whole param_data/grad_data; main params + Adam only for owned real elements,
    # which over the ranks add up to 12 bytes per parameter exactly (padding costs no state)
    per_rank = [megatron_distopt_rank_bytes([50, 200, 10], 8, r) for r in range(8)]
    assert all(x["grad_data"] == 384 * 4 and x["param_data"] == 384 * 2 for x in per_rank)
    assert sum(x["main_and_moments"] for x in per_rank) == 12 * 260
    # rank 0 owns [0, 48): the 10-element param and 200's first 0 elements in [64, ...) -> 10
    assert per_rank[0]["main_and_moments"] == 12 * 10
    # model_state's framework form is the unpadded N (2 + 4) + 12 N/d
    ms = model_state().subs(byte_widths())
    assert ms.evaluate(N=260, d=8, p=1, t=1) * 8 == 8 * 260 * 6 + 12 * 260
