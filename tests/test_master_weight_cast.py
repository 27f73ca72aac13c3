"""The optimizer step of FP8 parameters and the first iteration's missing moments (issue 30).

Expected numbers are hand counts of Llama 3 70B (h 8192, 8 KV heads of 128, FFN 28,672,
80 layers) at TP 4, PP 4, VPP 5, d 2: 20 layers per rank, each with
8192 x (8192 + 2048 + 8192) + 3 x 8192 x 28672 = 855,638,016 linear weights, two RMSNorm
weights of 8192 (replicated over TP).  Transformer Engine's ``quantize_master_weights`` casts
every fp32 master shard to bf16 before requantizing (``tensor/utils.py:291`` at d0067d0da6):
2 bytes per FP8 parameter of the shard.  TE's FusedAdam makes ``exp_avg`` and ``exp_avg_sq``
(fp32) in its first step: 8 bytes per parameter of the shard.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.symbols import c, d, t
from memsym.training import Layout, Training, training_memory
from memsym.training.model_states import stage_counts
from memsym.training.transients import phase_transients

LAYERS = 20
LINEAR_PER_LAYER = 8192 * (8192 + 2048 + 8192) + 3 * 8192 * 28672
LAYOUT = Layout(t=4, p=4, v=5, d=2, sequence_parallel=True)


def _training(**kw):
    base = dict(seq_length=4096, micro_batch_size=1, global_batch_size=32, precision="fp8",
                fp8_param_gather=True, grad_dtype="bf16", recompute="selective",
                metric="allocated")
    return Training(**{**base, **kw})


def _cast(j, stage):
    terms = [term for term in phase_transients(j, stage)["optimizer"]
             if term.key == "master_weight_cast"]
    if not terms:
        return None
    vals = {**stage_counts(j, stage), t: 4, d: 2, c: 1}
    return int(terms[0].expr.subs(vals))


def test_the_step_casts_every_master_shard_to_bf16():
    j = job("llama3-70b", layout=LAYOUT, training=_training())
    # 2 bytes x (20 layers x 855,638,016 / t 4) / d 2, on a middle stage and on the first
    hand = 2 * (LAYERS * LINEAR_PER_LAYER // 4) // 2
    assert hand == 4_278_190_080
    assert _cast(j, 1) == hand and _cast(j, 0) == hand
    for phase in ("forward", "loss-backward", "backward"):
        assert all(term.key != "master_weight_cast" for term in phase_transients(j, 1)[phase])


@pytest.mark.parametrize("kw", [dict(precision="bf16", fp8_param_gather=False),
                                dict(fp8_param_gather=False),
                                dict(precision_aware=True)])   # delayed scaling: TE's Adam casts
def test_no_cast_without_fp8_parameters_the_optimizer_requantizes(kw):
    assert _cast(job("llama3-70b", layout=LAYOUT, training=_training(**kw)), 1) is None


def test_the_first_iteration_runs_forward_and_backward_without_the_moments():
    steady = training_memory("llama3-70b", LAYOUT, _training(), stage=1).phases()
    first = training_memory("llama3-70b", LAYOUT, _training(first_iteration=True),
                            stage=1).phases()
    # per GPU of a middle stage: 20 x (855,638,016 / 4 + 2 x 8192); fp32 moments over d 2
    params = LAYERS * (LINEAR_PER_LAYER // 4 + 2 * 8192)
    moments = 8 * params // 2
    assert moments == 17_114_071_040
    for phase in ("forward", "loss-backward", "backward"):
        assert steady[phase] - first[phase] == moments, phase
    assert steady["optimizer"] == first["optimizer"]   # the step holds them either way


def test_the_rows_say_the_moments_are_missing_not_the_activations():
    """The report's rows at the first iteration's peak: the activations are those held, the
    missing moments a ``transients`` part of their own, and the stacked bars (``held``) take
    them off the optimizer row, whose fp32 master shard (4 of its 12 bytes) stays."""
    bf16 = dict(precision="bf16", fp8_param_gather=False, grad_dtype="fp32")  # a forward peak
    steady = training_memory("llama3-70b", LAYOUT, _training(**bf16), stage=1)
    first = training_memory("llama3-70b", LAYOUT, _training(first_iteration=True, **bf16),
                            stage=1)
    assert first.phase == "forward"
    params = LAYERS * (LINEAR_PER_LAYER // 4 + 2 * 8192)
    moments = 8 * params // 2
    rows = first.grouped()
    assert rows["activations"] == steady.grouped()["activations"]
    assert [(key, val) for key, _, val in first.peak_parts if val < 0] == [
        ("moments_not_yet_made", -moments)]
    assert rows["transients"] == steady.grouped().get("transients", 0) - moments
    held = first.held()
    assert held["optimizer"] == 4 * params // 2            # the fp32 master shard alone
    assert held["activations"] == rows["activations"]
    assert sum(v for k, v in held.items() if k != "total") == held["total"] == first.bytes_total


def test_the_first_iteration_is_refused_where_it_is_not_modelled():
    with pytest.raises(InvalidValueError, match="first_iteration") as exc:
        job("llama3-8b", training=Training(first_iteration=True, framework="deepspeed",
                                           sharding="zero2"))
    assert "\n" not in str(exc.value)
    with pytest.raises(InvalidValueError, match="first_iteration"):
        job("llama3-8b", training=Training(first_iteration=True, optimizer="sgd"))


def test_the_command_line_takes_first_iteration(capsys):
    from memsym.cli import main

    words = ["estimate", "llama3-8b", "--tp", "2", "--dp", "4", "--metric", "allocated"]
    assert main(words + ["--json"]) in (0, 1)
    steady = capsys.readouterr().out
    assert main(words + ["--first-iteration", "--json"]) in (0, 1)
    first = capsys.readouterr().out
    assert '"first_iteration": true' in first and steady != first
    assert main(words + ["--first-iteration", "--framework", "deepspeed", "--sharding",
                         "zero2"]) == 2
    err = capsys.readouterr().err
    assert "first_iteration" in err and "Traceback" not in err
