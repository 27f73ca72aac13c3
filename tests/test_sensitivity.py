"""``memsym estimate --sensitivity`` (issue 33): the slope of the per-GPU total in each knob,
and the change when the knob is doubled.

The slopes are checked against derivatives taken by hand from the papers' formulas, the
doublings against two separate estimates.
"""

import json
from fractions import Fraction

import pytest

from in_process import run

#: Llama 2 7B's parameter count by hand from its config.json (meta-llama/Llama-2-7b-hf:
#: h = 4096, intermediate f = 11008, 32 layers, V = 32000, untied embeddings, RMSNorm): each
#: layer 4h^2 (attention) + 3hf (SwiGLU MLP) + 2h (two norms), plus 2Vh and the final norm.
H, F, LAYERS, VOCAB = 4096, 11008, 32, 32000
LLAMA2_7B = LAYERS * (4 * H * H + 3 * H * F + 2 * H) + 2 * VOCAB * H + H
assert LLAMA2_7B == 6_738_415_616
JOB = ("estimate", "llama2-7b", "--dp", "8", "--seq-length", "2048", "--sharding", "zero3",
       "--sensitivity", "--json")


def _rows(out):
    return {r["knob"]: r for r in json.loads(out)["sensitivity"]}


def test_model_state_slope_in_d_is_the_zero3_hand_derivative(capsys):
    code, out, err = run(capsys, *JOB)
    assert code == 0 and err == ""
    rows = _rows(out)
    assert set(rows) == {"d", "t", "p", "c", "b", "s"}        # no v without pipelining
    d = rows["d"]
    # ZeRO §5 (Rajbhandari et al. 2020): stage 3 keeps (2 + 2 + 12) Psi / N_d bytes, so
    # d/dd of each part is -(bytes per parameter) Psi / d^2 at d = 8
    hand = {"weights": -2 * LLAMA2_7B / 64, "gradients": -2 * LLAMA2_7B / 64,
            "optimizer": -12 * LLAMA2_7B / 64}
    assert {k: d["by_term_bytes_per_unit"][k] for k in hand} == hand
    # the rows add up to the whole slope (JSON numbers: a fraction of a byte is a float)
    assert float(Fraction(d["bytes_per_unit_exact"])) == pytest.approx(
        sum(d["by_term_bytes_per_unit"].values()), rel=1e-12)
    # the activations do not depend on d (each GPU holds its own micro-batch)
    assert d["by_term_bytes_per_unit"]["activations"] == 0


@pytest.mark.parametrize("knob, option, value", [("d", "--dp", 8), ("s", "--seq-length", 2048)])
def test_doubling_is_two_estimates_difference(capsys, knob, option, value):
    code, out, _ = run(capsys, *JOB)
    row = _rows(out)[knob]
    assert row["value"] == value and row["doubled_value"] == 2 * value

    def total(v):
        argv = [w for w in JOB if w != "--sensitivity"]
        argv[argv.index(option) + 1] = str(v)
        code, out, _ = run(capsys, *argv)
        assert code == 0
        return json.loads(out)["bytes"]["total"]

    assert row["doubled_change_bytes"] == total(2 * value) - total(value)


def test_params_only_distributed_optimizer(capsys):
    # Megatron-core's distributed optimizer (framework convention): 2 + 4 + 12/d bytes per
    # parameter on N/(p t) parameters; d/dd = -12 N/(p t d^2); doubling t halves it all
    code, out, _ = run(capsys, "estimate", "--params", "7B", "--dp", "8", "--sensitivity",
                       "--json")
    rows = _rows(out)
    n = 7 * 10**9
    assert rows["d"]["bytes_per_unit"] == -12 * n // 64
    assert rows["t"]["doubled_change_bytes"] == -(Fraction(2 + 4) + Fraction(12, 8)) * n / 2
    assert rows["p"]["bytes_per_unit"] == -(Fraction(6) + Fraction(12, 8)) * n


def test_sensitivity_text_table_and_refusal(capsys):
    code, out, _ = run(capsys, *JOB)
    rows = _rows(out)
    code, out, _ = run(capsys, *[w for w in JOB if w != "--json"])
    assert code == 0 and "dM/dx GB per unit" in out
    # each row: knob, value, the slope in GB per unit, the doubled value, the change in GB
    shown = {x.split()[0]: x.split() for x in out.splitlines()
             if x.split() and x.split()[0] in rows and len(x.split()) == 5}
    assert set(shown) == set(rows)
    for knob, row in rows.items():
        change = "-" if row["doubled_change_bytes"] is None \
            else f"{row['doubled_change_bytes'] / 1e9:+.3f}"
        assert shown[knob] == [knob, str(row["value"]), f"{row['bytes_per_unit'] / 1e9:.6g}",
                               str(row["doubled_value"]), change]
    # ZeRO-3 at p = 2 is refused (DeepSpeed's PipelineEngine): said, not dropped
    assert rows["p"]["doubled_change_bytes"] is None and "p = 1" in rows["p"]["note"]
    assert "not doubled: p = 2: ZeRO-2/3" in out
    code, out, err = run(capsys, "estimate", "llama2-7b", "--sensitivity", "--convention",
                         "megatron-lm")
    assert code == 2 and out == "" and "--sensitivity differentiates memsym's own total" in err
