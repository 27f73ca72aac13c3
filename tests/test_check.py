"""``memsym check LOG JOB`` (issue 31, deliverable 6): a run's own log against the prediction.

The fixtures under tests/data/logs/ are published log excerpts (README.md there names each
source).  The expected numbers below are read off the fixtures by hand: the printed digits,
times their unit as the frameworks' source defines it (Megatron-LM's MB = 1024.0 * 1024.0
bytes, Megatron-Bridge's GB = 1e9 bytes, torchtitan's GiB = 2^30 bytes), never memsym's output.
"""

import hashlib
import json
import pathlib
from fractions import Fraction

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from memsym.errors import InvalidValueError
from memsym.readers import logs
from memsym.readers.logs import parse_log, read_log, steady_step, warmup_count
from in_process import run

DATA = pathlib.Path(__file__).resolve().parent / "data" / "logs"
MEGATRON = DATA / "megatron_ling_v2.log"
BRIDGE = DATA / "bridge_llama3_8b.log"
TITAN = DATA / "torchtitan_pr1287.log"
TITAN_RANKS = DATA / "torchtitan_pr2389.log"

#: The Ling-V2 excerpt's "elapsed time per iteration (ms)" of iterations 1..10, as printed.
MEGATRON_MS = ("79489.9", "11182.0", "10883.5", "10840.4", "10765.6", "10827.5", "10767.4",
               "10758.5", "10727.4", "10720.6")
#: ... and its "throughput per GPU (TFLOP/s/GPU)".
MEGATRON_TFLOPS = ("18.0", "128.2", "131.7", "132.2", "133.1", "132.4", "133.1", "133.2",
                   "133.6", "133.7")
#: The job the CLI tests price (any job will do: the tests check the reading and the mapping).
JOB = ("llama3-8b", "--seq-length", "8192", "--gpu", "h100-80gb", "--dp", "8",
       "--global-batch-size", "128")


# ---------------------------------------------------------------------------------------------
# reading the logs
# ---------------------------------------------------------------------------------------------
def test_megatron_iteration_times_and_throughput_as_printed():
    log = read_log(MEGATRON)
    assert log.framework == "megatron"
    assert [i.iteration for i in log.iterations] == list(range(1, 11))
    assert [i.step_time_s for i in log.iterations] == [Fraction(ms) / 1000 for ms in MEGATRON_MS]
    assert [i.tflops for i in log.iterations] == [Fraction(t) for t in MEGATRON_TFLOPS]


def test_megatron_memory_line_is_max_allocated_and_max_reserved_in_mebibytes():
    log = read_log(MEGATRON)
    allocated, reserved = log.peak("allocated"), log.peak("reserved")
    # 63359.77001953125 MB: 0.77001953125 * 1024 = 788.5, * 1024 = 807424 bytes
    assert allocated.bytes == 63359 * 2**20 + 807424 == 66_437_534_208
    assert reserved.bytes == 66802 * 2**20 == 70_046_973_952
    assert (allocated.rank, allocated.iteration, allocated.line) == (0, 1, 2)
    assert logs.METRIC_OF == {"max allocated": "allocated", "max reserved": "reserved"}


def test_bridge_memory_line_is_in_gigabytes_of_1e9_bytes():
    log = read_log(BRIDGE)
    assert log.framework == "megatron-bridge"
    assert [i.step_time_s for i in log.iterations] == [Fraction("20.2891")]
    assert log.peak("allocated").bytes == 194_410_000_000       # mem-max-allocated-gigabytes
    assert log.peak("reserved").bytes == 216_890_000_000        # mem-max-reserved-gigabytes


def test_torchtitan_steps_tps_and_reserved_gibibytes():
    log = read_log(TITAN)
    assert log.framework == "torchtitan"
    assert [i.iteration for i in log.iterations] == [200, 210, 220, 230, 240, 250]
    assert [i.tokens_per_s for i in log.iterations] == [5856, 5593, 5868, 5869, 5864, 5862]
    assert log.iterations[0].tflops == Fraction("339.16")
    assert {m.metric for m in log.memory} == {"reserved"}            # max_reserved_gib
    assert log.peak("reserved").bytes == round(Fraction(4966, 100) * 2**30) == 53_322_018_980
    assert log.peak("allocated") is None


def test_torchtitan_lines_of_several_ranks_count_once_per_step():
    log = read_log(TITAN_RANKS)      # step 4 printed by seven ranks, step 5 by one
    assert [(i.iteration, i.tokens_per_s) for i in log.iterations] == [(4, 10050), (5, 10007)]
    assert len(log.memory) == 8


def test_torchtitan_keeps_the_first_ranks_lines():
    text = ("[rank0]:[titan] step: 1  memory: 10.00GiB(10.00%)  tps: 1,000  tflops: 1.00\n"
            "[rank1]:[titan] step: 1  memory: 90.00GiB(90.00%)  tps: 9,000  tflops: 9.00\n")
    log = parse_log(text)
    assert [i.tokens_per_s for i in log.iterations] == [1000]
    assert log.peak("reserved").bytes == 10 * 2**30


def test_ansi_colours_are_stripped():
    log = parse_log("\x1b[31mstep:  3  \x1b[32mloss:  7.1  \x1b[38;2;54;234;195mmemory: "
                    "1.50GiB(2.00%)  \x1b[34mtps: 12,345  \x1b[36mtflops: 1,234.50\x1b[39m\n")
    assert log.iterations[0].tokens_per_s == 12345
    assert log.iterations[0].tflops == Fraction("1234.50")
    assert log.peak("reserved").bytes == 3 * 2**29


def test_a_line_over_the_length_limit_is_skipped():
    long = "iteration 1/ 9 | elapsed time per iteration (ms): 5.0 |" + " x" * 2**14
    with pytest.raises(InvalidValueError, match="no iteration line"):
        parse_log(long + "\n")


_PIECES = st.sampled_from(["iteration ", "1", "/", " | ", "elapsed time per iteration (ms): ",
                           "5.0", "step: ", "tps: ", "1,000", "memory: ", "GiB(", "%)",
                           "[Rank 0] ", "(after 2 iterations) memory (MB)", " | max allocated: ",
                           "\x1b[31m", "\n", " ", "9" * 30, "."])


# Hypothesis budget: 60 examples of at most 40 pieces (well under a second in all)
@settings(max_examples=60, deadline=None)
@given(st.lists(_PIECES, max_size=40))
def test_any_text_is_read_or_refused_in_one_line(pieces):
    try:
        log = parse_log("".join(pieces))
    except InvalidValueError as exc:
        assert "\n" not in str(exc)
        return
    assert log.iterations and all(i.step_time_s is None or i.step_time_s > 0
                                  for i in log.iterations)


# ---------------------------------------------------------------------------------------------
# warm-up and median
# ---------------------------------------------------------------------------------------------
def test_warmup_is_a_tenth_rounded_up_and_at_least_two():
    assert [warmup_count(n) for n in (1, 3, 10, 20, 21, 30, 31)] == [2, 2, 2, 2, 3, 3, 4]
    assert warmup_count(50, warmup=0) == 0


def test_median_after_warmup_megatron():
    skipped, median, kept = steady_step(read_log(MEGATRON))
    assert skipped == 2 and [i.iteration for i in kept] == list(range(3, 11))
    # sorted 10720.6 10727.4 10758.5 10765.6 | 10767.4 10827.5 10840.4 10883.5 ms
    assert median == (Fraction("10.7656") + Fraction("10.7674")) / 2 == Fraction("10.7665")
    _, median0, _ = steady_step(read_log(MEGATRON), warmup=0)
    # ten values: the middle two are 10767.4 and 10827.5 ms
    assert median0 == (Fraction("10.7674") + Fraction("10.8275")) / 2


def test_median_after_warmup_torchtitan_is_tokens_over_tps_times_gpus():
    _, median, kept = steady_step(read_log(TITAN), tokens_per_step=8 * 8192, gpus=8)
    assert [i.iteration for i in kept] == [220, 230, 240, 250]
    # tps 5868 5869 5864 5862: the middle two are 5864 and 5868 tokens/s per GPU
    assert median == (Fraction(8192, 5864) + Fraction(8192, 5868)) / 2
    with pytest.raises(InvalidValueError, match="global batch size"):
        steady_step(read_log(TITAN))


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------
def test_check_json_measured_values_and_metric_mapping(capsys):
    code, out, err = run(capsys, "check", MEGATRON, *JOB, "--json")
    assert code == 0, err
    rep = json.loads(out)
    step = rep["step_time"]
    assert step["measured_s"] == 10.7665
    assert step["per_iteration_s"] == [float(Fraction(ms) / 1000) for ms in MEGATRON_MS[2:]]
    assert rep["warmup"]["skipped"] == 2 and rep["warmup"]["kept"] == 8
    assert step["log_tflops_per_gpu_median"] == 133.1     # 132.2 132.4 133.1 133.1 133.2 ...
    assert step["ratio"] == pytest.approx(step["measured_s"] / step["predicted_s"])
    assert set(step["parts_s"]) == {"compute", "memory", "comm", "bubble", "optimizer", "other"}
    assert sum(step["parts_s"].values()) == pytest.approx(step["predicted_s"])
    rows = {r["metric"]: r for r in rep["memory"]}
    assert rows["allocated"]["is"] == "torch.cuda.max_memory_allocated"
    assert rows["reserved"]["is"] == "torch.cuda.max_memory_reserved"
    assert rows["allocated"]["measured_bytes"] == 66_437_534_208
    assert rows["reserved"]["measured_bytes"] == 70_046_973_952
    for row in rows.values():
        assert sum(row["groups_bytes"].values()) == row["predicted_bytes"]
        assert row["gap_bytes"] == row["measured_bytes"] - row["predicted_bytes"]
    # max_memory_allocated sees the two 32 MiB cuBLAS / Transformer Engine workspaces and no
    # NCCL buffer, CUDA context or allocator reserve (memsym.terms.allowances.METRICS)
    assert rows["allocated"]["groups_bytes"]["allowances"] == 64 * 2**20
    assert rep["calibration"] is None and rep["calibrated"] is None


def test_check_text_fits_100_columns_and_names_the_metric(capsys):
    code, out, _ = run(capsys, "check", MEGATRON, *JOB)
    assert code == 0
    assert max(map(len, out.splitlines())) <= 100
    assert "max allocated = torch.cuda.max_memory_allocated" in out
    assert "2 iteration lines skipped" in out and "CALIBRATION" not in out


def test_calibration_round_trip(capsys, tmp_path):
    cal = tmp_path / "cal.json"
    code, out, err = run(capsys, "check", MEGATRON, *JOB, "--calibrate", cal, "--json")
    assert code == 0, err
    written = json.loads(cal.read_text())
    assert written["gpu"] == "h100-80gb" and written["measured_step_time_s"] == 10.7665
    assert written["log"]["sha256"] == hashlib.sha256(MEGATRON.read_bytes()).hexdigest()
    assert written["job"]["layout"]["dp"] == 8 and written["date"]
    assert json.loads(out)["calibrated"]["compute_factor_exact"] == written["compute_factor"]
    code, out, err = run(capsys, "check", MEGATRON, *JOB, "--calibration", cal, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["step_time"]["ratio"] == 1.0 and rep["step_time"]["gap_s"] == 0.0
    assert rep["calibration"]["compute_factor_exact"] == written["compute_factor"]
    code, out, _ = run(capsys, "check", MEGATRON, *JOB, "--calibration", cal)
    assert "CALIBRATION APPLIED" in out
    code, out, _ = run(capsys, "estimate", *JOB, "--calibration", cal)
    # exit 1: the job as estimated does not fit 80 GB (an answer, not an error)
    assert code in (0, 1) and "calibration applied" in out and "(calibrated" in out


def test_calibration_of_the_same_gpu_class_is_applied_and_said(capsys, tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"format": "memsym-calibration/1", "compute_factor": "3/4",
                               "gpu": "h200-141gb", "gpu_class": "hopper"}))
    code, out, err = run(capsys, "check", MEGATRON, *JOB, "--calibration", cal, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["calibration"]["compute_factor"] == 0.75
    assert any("applied on h100-80gb of the same class hopper" in n for n in rep["notes"])
    # the compute part is scaled by 3/4 and the step time moves by the same seconds
    before = rep["calibration"]["uncalibrated_step_time_s"]
    compute = rep["step_time"]["parts_s"]["compute"]
    assert rep["step_time"]["predicted_s"] == pytest.approx(before - compute / 3)


def test_calibration_on_another_gpu_is_refused(capsys, tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"format": "memsym-calibration/1", "compute_factor": "3/4",
                               "gpu": "a100-80gb"}))
    code, out, err = run(capsys, "check", MEGATRON, *JOB, "--calibration", cal)
    assert (code, out) == (2, "") and "a100-80gb" in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# bad logs: one line on stderr, exit 2, nothing on stdout (refused before the job is priced)
# ---------------------------------------------------------------------------------------------
_TITAN_LINE = "step: 1  memory: 1.00GiB(1.00%)  tps: 10  tflops: 1.00\n"
_MEGATRON_LINE = "iteration 1/ 9 | elapsed time per iteration (ms): {} |\n"


@pytest.mark.parametrize("text, message", [
    ("", "no iteration line"),
    ("hello\nworld\n", "no iteration line"),
    (_TITAN_LINE + _MEGATRON_LINE.format("10.0"), "mixes torchtitan"),
    (_MEGATRON_LINE.format("0.0") * 3, "must be positive"),
    (_MEGATRON_LINE.format("5.0"), "warm-up"),                 # one line, two are warm-up
])
def test_bad_logs_are_refused_in_one_line(capsys, tmp_path, text, message):
    bad = tmp_path / "bad.log"
    bad.write_text(text)
    code, out, err = run(capsys, "check", bad, *JOB)
    assert (code, out) == (2, "")
    assert message in err and len(err.splitlines()) == 1


def test_bridge_log_of_one_iteration_is_refused(capsys):
    code, out, err = run(capsys, "check", BRIDGE, *JOB)
    assert (code, out) == (2, "") and "warm-up" in err


def test_log_limits_are_checked_before_reading(capsys, tmp_path, monkeypatch):
    bad = tmp_path / "big.log"
    bad.write_text(_MEGATRON_LINE.format("5.0") * 10)
    monkeypatch.setattr(logs, "MAX_LOG_BYTES", 100)
    code, out, err = run(capsys, "check", bad, *JOB)
    assert (code, out) == (2, "") and "larger than 100 bytes" in err
    monkeypatch.setattr(logs, "MAX_LOG_BYTES", 2**26)
    monkeypatch.setattr(logs, "MAX_LOG_LINES", 5)
    code, out, err = run(capsys, "check", bad, *JOB)
    assert (code, out) == (2, "") and "MAX_LOG_LINES" in err
    code, out, err = run(capsys, "check", tmp_path, *JOB)      # a directory
    assert (code, out) == (2, "") and "not a regular file" in err


def test_check_without_a_job_or_gpu_is_refused(capsys):
    code, out, err = run(capsys, "check", MEGATRON)
    assert (code, out) == (2, "") and "needs the job" in err
    code, out, err = run(capsys, "check", MEGATRON, "llama3-8b", "--global-batch-size", "128")
    assert (code, out) == (2, "") and "--gpu" in err
    code, out, err = run(capsys, "check", MEGATRON, *JOB, "--calibrate", "a", "--calibration", "b")
    assert (code, out) == (2, "") and "not both" in err
