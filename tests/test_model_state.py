"""Model-state memory: the seed numbers and ZeRO's figures, computed independently here."""

from fractions import Fraction

import pytest
import sympy as sp

from memsym import byte_widths, host_state, model_state
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.symbols import N, b_hp, d, p, t

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
    total = model_state(scheme).subs(byte_widths(scheme))
    for params_b, printed in zip((7, 13, 70), expected):
        value = gb(total, N=params_b * GB, d=8, t=1, p=1)
        # the seed prints Python's round(x, 1) of a binary float: 26.25 -> 26.2, 48.75 -> 48.8
        assert round(float(value), 1) == printed


def test_seed004_16p_rule():
    # seed 004: 2P (fp16 weights) + 2P (fp16 grads) + 12P (fp32 copy, m, v) = 16P GB
    total = model_state("ddp").subs(byte_widths("ddp"))
    for params_b, printed in ((7, 112), (13, 208), (70, 1120)):
        assert gb(total, N=params_b * GB, d=1, t=1, p=1) == printed


def test_zero_figure1_text_example():
    # ZeRO §5: Psi = 7.5B, N_d = 64: 120 / 31.4 / 16.6 / 1.9 GB
    psi, nd = Fraction(75, 10) * GB, 64
    expected = {"ddp": 120, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    for scheme, printed in expected.items():
        value = gb(model_state(scheme).subs(byte_widths(scheme)), N=psi, d=nd, t=1, p=1)
        assert round(float(value), 1) == printed


def test_seed000_form_is_derived_from_the_three_terms():
    total = model_state("distributed-optimizer")
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
    mine = model_state("distributed-optimizer").subs(byte_widths())
    assert mine.evaluate(N=1, d=1, p=1, t=1) == 18
    assert mine.evaluate(N=1, d=8, p=1, t=1) == 4 and per_param.evaluate(N=1, d=8, p=1, t=1) == Fraction(15, 2)


def test_fsdp_is_zero3():
    # PyTorch FSDP FULL_SHARD shards parameters, gradients and optimizer states over d, as
    # ZeRO-3 does (ZeRO §5, Figure 1).  By hand, with ZeRO's mixed-precision Adam widths (fp16 weights 2 B, fp16
    # gradients 2 B, fp32 master copy 4 B + momentum and variance 8 B): 16 N / (p t d)
    for scheme in ("fsdp", "zero3"):
        assert sp.simplify(model_state(scheme).subs(byte_widths(scheme)).expr
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
    widths = byte_widths("ddp", precision, optimizer)
    assert model_state("ddp").subs(widths).evaluate(N=1, d=1, p=1, t=1) == per_param


def test_offload():
    widths = byte_widths("zero3")
    on_gpu = model_state("zero3", offload="optimizer").subs(widths)
    # ZeRO-Offload: only the (sharded) fp16 weights stay on the GPU
    assert on_gpu.keys == ("weights",)
    assert on_gpu.evaluate(N=8, d=4, p=1, t=1) == 2 * 8 // 4
    host = host_state("zero3", offload="optimizer").subs(widths)
    assert host.evaluate(N=8, d=4, p=1, t=1) == (2 + 12) * 8 // 4
    everything = model_state("zero3", offload="optimizer+params")
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
    total = model_state("distributed-optimizer").subs(byte_widths())
    # dM/dd = -16 N / (p t d^2)
    assert sp.simplify(total.sensitivity("d") + 16 * N / (p * t * d**2)) == 0
    # elasticity in d: -(16/d) / (2 + 16/d) = -8/(d + 8)
    assert sp.simplify(total.elasticity("d") + 8 / (d + 8)) == 0
    assert total.elasticity("N") == 1
    assert total.elasticity("t") == -1


def test_huge_counts_stay_exact():
    total = model_state("ddp").subs(byte_widths("ddp"))
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
