"""The published measured peak-memory data set: consistent with its sources, and reported.

Expected numbers here are the sources' printed ones (seed 001's tables, torchtitan's
benchmark tables) and unit arithmetic by hand; the error thresholds on memsym's predictions
are asserted elsewhere (by the lead) once the model is improved.
"""

from __future__ import annotations

import math
import pathlib

import pytest
import sympy as sp

from memsym.training import training_memory
from tools import measured
from tools.measured import DataError, load
from tools.reference import references

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEED001 = next((ROOT.parent.parent / "shared" / "seeds").glob("001_*.txt"), None) \
    if (ROOT.parent.parent / "shared" / "seeds").is_dir() else None


@pytest.fixture(scope="module")
def data():
    return load()


@pytest.fixture(scope="module")
def rows(data):
    return measured.report(data[0])


def test_at_least_twelve_points_each_cited_and_fully_described(data):
    points, _ = data
    assert len(points) >= 12
    refs = references()
    for pt in points:
        assert pt.source in refs and pt.locator
        assert pt.unit in ("GB", "GiB") and pt.metric in measured.METRICS
        cfg = pt.config()
        assert "seq_length" in cfg, pt.id
        assert any(k in cfg for k in ("mbs", "local_batch")), pt.id
        for key in pt.assumed:      # every assumption is of a setting the source leaves open
            assert pt.open, pt.id


def test_seed001_points_are_the_printed_numbers(data):
    """Seed 001 as printed: 58.8 / 53.2 / 50.2 / 60.2 GB and the LoRA pairs."""
    by = {p.id: p for p in data[0]}
    printed = {"seed001.llama3-70b.baseline": 58.8, "seed001.llama3-70b.pp8": 53.2,
               "seed001.llama3-70b.tp8": 50.2, "seed001.llama3-70b.vpp10": 60.2,
               "seed001.qwen3-8b.lora": 47.545, "seed001.qwen3-8b.lora-regather": 42.814,
               "seed001.qwen3-30b-a3b.lora": 29.890, "seed001.qwen3-30b-a3b.lora-regather": 28.321,
               "seed001.gpt-oss-120b.lora": 52.185, "seed001.gpt-oss-120b.lora-regather": 51.371}
    for pid, val in printed.items():
        assert by[pid].measured == val and by[pid].unit == "GB"
    base = by["seed001.llama3-70b.baseline"].settings
    assert (base["tp"], base["pp"], base["vpp"], base["dp"], base["mbs"], base["gbs"],
            base["seq_length"]) == (4, 4, 5, 2, 1, 32, 4096)
    assert (by["seed001.llama3-70b.pp8"].settings["pp"], by["seed001.llama3-70b.pp8"].settings["dp"]) == (8, 1)
    assert (by["seed001.llama3-70b.tp8"].settings["tp"], by["seed001.llama3-70b.tp8"].settings["dp"]) == (8, 1)
    if SEED001 is not None:   # the numbers appear in the seed text itself
        text = SEED001.read_text(encoding="utf-8")
        for val in ("58.8", "53.2", "50.2", "60.2", "47.545", "42.814", "29.890", "28.321",
                    "52.185", "51.371"):
            assert val in text


def test_units_convert_exactly(data):
    by = {p.id: p for p in data[0]}
    # GiB: 82.4 x 2^30 = 88,476,469,657.6 bytes, kept exact
    assert by["torchtitan.2412.t1.fsdp"].measured_bytes == sp.Rational(824, 10) * 2**30
    assert by["seed001.llama3-70b.baseline"].measured_bytes == 58_800_000_000


def test_relations_hold_in_the_measurements_and_deltas_match(data, rows):
    _, rels = data
    by = {p.id: p for p in data[0]}
    for rel in rels:
        x, y = by[rel.a].measured, by[rel.b].measured
        assert (x < y) if rel.kind == "below" else (x > y), rel
        if rel.delta is not None:   # the printed saving is the printed difference
            assert round(y - x, 3) == rel.delta
    rep = measured.relations_report(rows, rels)
    assert all(r["measured_holds"] for r in rep)


def test_every_point_is_predicted_or_refused_with_a_reason(rows):
    assert rows
    for r in rows:
        if r.predicted is None:
            assert r.reason.startswith("not predicted:")
        else:
            assert r.predicted > r.allocated > 0
            if abs(r.error_pct) > 10:
                assert r.reason, r.point.id   # a named unknown for every large error


def test_seed001_job_mapping(data):
    by = {p.id: p for p in data[0]}
    j = measured.job(by["seed001.llama3-70b.vpp10"])
    assert (j.layout.t, j.layout.p, j.layout.v, j.layout.d) == (4, 4, 10, 2)
    assert j.training.global_batch_size == 32 and j.training.seq_length == 4096
    lora = measured.job(by["seed001.qwen3-8b.lora"])
    assert lora.training.finetune == "lora" and lora.training.lora_rank == 32
    assert lora.training.lora_regather is False
    assert measured.job(by["seed001.qwen3-8b.lora-regather"]).training.lora_regather is True


def test_page_is_current():
    """docs/measured-accuracy.md equals what `python -m tools.measured` would write now."""
    page = ROOT / "docs" / "measured-accuracy.md"
    assert page.read_text(encoding="utf-8") == measured.generate(), \
        "stale docs/measured-accuracy.md: run `python -m tools.measured`"
    assert measured.main(["--check"]) == 0


def test_bad_files_are_refused_with_one_line(tmp_path):
    good = (ROOT / "formulas" / "measured_memory.toml").read_text(encoding="utf-8")
    cases = {
        "unit": (good.replace('unit = "GB"', 'unit = "gb"', 1), "unit must be one of"),
        "source": (good.replace('source = "mbridge-memory-tuning"', 'source = "nowhere"', 1),
                   "not a key"),
        "setting": (good.replace("tp = 4", "tq = 4", 1), "unknown setting 'tq'"),
        "size": (good.replace("tp = 4", "tp = 10000000", 1), "whole number"),
        "model": (good.replace('model = "llama3-70b"', 'model = "llama9"', 1), "not a memsym preset"),
    }
    for name, (text, msg) in cases.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=msg) as exc:
            load(path)
        assert "\n" not in str(exc.value) and isinstance(exc.value, ValueError)
    with pytest.raises(DataError, match="no such data file"):
        load(tmp_path / "missing.toml")
    with pytest.raises(ValueError):
        measured.main(["--write-everything"])


def test_predict_by_id_and_refusals():
    by_id = measured.predict("seed001.llama3-70b.tp8")
    point = {p.id: p for p in load()[0]}["seed001.llama3-70b.tp8"]
    assert by_id == measured.predict(point)
    with pytest.raises(ValueError, match="unknown measured point"):
        measured.predict("seed001.llama3-70b.tp16")
    with pytest.raises(ValueError, match="needs a tools.measured.Point"):
        measured.predict(42)
    with pytest.raises(ValueError, match="needs a tools.measured.Point"):
        measured.job({"id": "x"})


def test_seed001_orderings_and_lora_savings():
    """Seed 001's measured orderings (PP 8 below baseline, TP 8 lowest) and the sign of the
    three LoRA regather savings; Qwen3-8B's saving is 36 layers x 2 adapters x 2 s h bytes."""
    pred = {pid: measured.predict(pid).total for pid in (
        "seed001.llama3-70b.baseline", "seed001.llama3-70b.pp8", "seed001.llama3-70b.tp8",
        "seed001.llama3-70b.vpp10")}
    assert pred["seed001.llama3-70b.pp8"] < pred["seed001.llama3-70b.baseline"]
    assert pred["seed001.llama3-70b.tp8"] == min(pred.values())
    for model in ("qwen3-8b", "qwen3-30b-a3b", "gpt-oss-120b"):
        off = measured.predict(f"seed001.{model}.lora").total
        on = measured.predict(f"seed001.{model}.lora-regather").total
        assert on < off, model
    saving = (measured.predict("seed001.qwen3-8b.lora").total
              - measured.predict("seed001.qwen3-8b.lora-regather").total)
    assert saving == 36 * 2 * 2 * 8192 * 4096      # measured 4.731 GB: within 2.2 %
    assert abs(float(saving) / 4.731e9 - 1) < 0.03


def test_seed001_lora_rows_follow_the_bridge_recipes(data):
    """The LoRA rows take what the table leaves open from Bridge's PEFT recipes at 33655ef845:
    Qwen3-30B-A3B dim 8 on linear_qkv + linear_proj (qwen3_30b_a3b_peft_config) and TE's
    fused cross entropy (qwen3_moe.py:604), the others _peft_common's dim 32 on all four
    modules; ETP 1 (Bridge's _set_moe_expert_tensor_parallel_default when EP > 1); packed
    sequences at micro-batch 1; the sequence length read off the measured savings (next test)."""
    by = {p.id: p for p in data[0]}
    moe = measured.job(by["seed001.qwen3-30b-a3b.lora"])
    assert moe.training.lora_rank == 8
    assert moe.training.adapters.lora_targets == ("q", "k", "v", "o")
    assert (moe.layout.t, moe.layout.e, moe.layout.expert_tp, moe.layout.d) == (4, 4, 1, 2)
    assert moe.training.memory.cross_entropy_fusion_impl == "te"
    assert moe.training.seq_length == 8192
    oss = measured.job(by["seed001.gpt-oss-120b.lora"])
    assert oss.training.lora_rank == 32 and oss.training.seq_length == 4096
    assert oss.training.memory.cross_entropy_fusion_impl == "native"
    assert oss.training.adapters.lora_targets == ("q", "k", "v", "o", "gate", "up", "down")
    assert (oss.layout.t, oss.layout.e, oss.layout.expert_tp) == (2, 8, 1)
    for pid in ("seed001.qwen3-8b.lora", "seed001.qwen3-30b-a3b.lora", "seed001.gpt-oss-120b.lora"):
        assert by[pid].config()["packed_sequence"] is True and by[pid].config()["mbs"] == 1
        assert by[pid].recipe.startswith("Megatron-Bridge 33655ef845 src/megatron/bridge/recipes/")


def test_seed001_moe_sequence_length_from_the_measured_savings(data):
    """The MoE rows print no sequence length.  Re-gather frees one gathered 16-bit qkv LoRA-A
    input, 2 s h bytes, per layer (the fc1/fc2 adapters of an all-MoE model are expert
    adapters, which fall back), and packed sequences force micro-batch 1, so the measured
    saving gives the tokens: 1.569e9 / (48 x 2 x 2048) = 7980 (Qwen3-30B-A3B) and
    0.814e9 / (36 x 2 x 2880) = 3926 (GPT-OSS-120B).  The assumed lengths are the powers of
    two nearest those (the 8B row, s = 8192 printed, measures 2 % below its 2sbh); the
    recipes' 2048 would save a quarter and a half of what was measured."""
    by = {p.id: p for p in data[0]}
    for model, layers, hidden, saved in (("qwen3-30b-a3b", 48, 2048, 1.569e9),
                                         ("gpt-oss-120b", 36, 2880, 0.814e9)):
        tokens = saved / (layers * 2 * hidden)
        nearest = 2 ** round(math.log2(tokens))
        assert by[f"seed001.{model}.lora"].config()["seq_length"] == nearest, model
        assert by[f"seed001.{model}.lora-regather"].config()["seq_length"] == nearest, model
        assert 0.95 < tokens / nearest < 1      # below, as the 8B row (4.731 of 4.83 GB)
        assert layers * 2 * 2048 * hidden < saved / 1.9     # s = 2048 saves at most half


def test_seed001_moe_regather_savings_are_one_qkv_input_per_layer():
    """Only linear_qkv's LoRA-A is eligible in an all-MoE model (fc1/fc2 adapters are expert
    adapters, which fall back): the saving is L x 2 s h bytes (hand-derived: Qwen3-30B-A3B
    48 x 2 x 8192 x 2048 = 1.61 GB against 1.569 measured, GPT-OSS-120B 36 x 2 x 4096 x 2880
    = 0.85 GB against 0.814)."""
    for model, layers, s, hidden, saved in (("qwen3-30b-a3b", 48, 8192, 2048, 1.569e9),
                                            ("gpt-oss-120b", 36, 4096, 2880, 0.814e9)):
        saving = (measured.predict(f"seed001.{model}.lora").total
                  - measured.predict(f"seed001.{model}.lora-regather").total)
        assert saving == layers * 2 * s * hidden, model
        assert abs(float(saving) / saved - 1) < 0.05, model


def test_lora_targets_are_megatron_module_names(tmp_path):
    good = (ROOT / "formulas" / "measured_memory.toml").read_text(encoding="utf-8")
    bad = good.replace('lora_targets = "linear_qkv,linear_proj"', 'lora_targets = "q_proj"', 1)
    assert bad != good
    path = tmp_path / "targets.toml"
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(DataError, match="lora_targets must be comma-separated names"):
        load(path)


def test_seed001_vpp10_against_baseline_under_both_readings():
    """seed 001: VPP 5 -> 10 raises the printed peak 1.4 GB (58.8 -> 60.2 GB).

    Read at steady state (the Adam moments through the forward), the mechanism the source
    names acts on the last stage: the recipe defers the output layer's weight gradients to
    the flush (CommOverlapConfig(defer_embedding_wgrad_compute=True, wgrad_deferral_limit=22)),
    the last stage keeps 16 micro-batches' input and logits gradient (4.5 GB) and its warm-up
    holds more layers at VPP 10 ((v - 1) p + 1 chunk passes: 17 x 4 -> 37 x 2 layers): the
    last stage rises about 1.4 GB.  Read at the first iteration (the points' reading, issue
    30), the optimizer step sets the peak and holds the same states at v = 5 and v = 10 (they
    do not depend on v): the two peaks are equal and the measured +1.4 GB stays open."""
    vpp10 = measured.predict("seed001.llama3-70b.vpp10")
    base = measured.predict("seed001.llama3-70b.baseline")
    assert vpp10.phase == base.phase == "optimizer" and vpp10.total == base.total
    points = {x.id: x for x in load()[0]}

    def last_stage(pid):
        j = measured.job(points[f"seed001.llama3-70b.{pid}"])
        steady = j.training.replace(first_iteration=False)
        return training_memory(j.model, j.layout, steady, allowances=j.allowances,
                               stage=3).grouped()["total"]
    assert abs(float(last_stage("vpp10") - last_stage("baseline")) - 1.4e9) < 0.5e9


def test_torchtitan_compiled_loss_rows_within_ten_percent():
    """The Trainy runs (torchtitan e7c0cae, whose build_cross_entropy_loss compiles the loss):
    48.0 and 47.0 GiB reserved on H200, predicted within 10 % once the compiled loss keeps the
    16-bit logits (they were +26 % with the eager loss's fp32 copies).  They were within 5 %
    while the compiled blocks were counted with eager SAC's w2 outputs (4.3 GB they do not
    keep: tests/test_op_sac_compile.py); what was left, 18 to 20 % above memsym's allocated
    bytes where its margin allows 10 %, is mostly FSDP2's side-stream pools (issue 30): with
    them both are within 3 %."""
    rows = {r.point.id: r for r in measured.report()}
    for pid in ("torchtitan.trainy.4nodes", "torchtitan.trainy.8nodes"):
        assert abs(rows[pid].error_pct) < 10, (pid, rows[pid].error_pct)


def test_torchtitan_rows_with_the_side_stream_pools():
    """torchtitan's memory log is max_memory_reserved: with FSDP2's side-stream pools counted
    (the reduce-scatter outputs cached for their stream from the last step, two all-gather
    outputs cached for the copy-in stream; tests/test_stream_pools.py) every torchtitan and
    torchao row is within 10 % and their median within 5 % (it was 7.2 % without the pools,
    the rows 4 to 16 % low but the B200 ones).  The B200 rows keep no SDPA output (torchtitan
    6fc499f's SAC recomputes cuDNN attention, tests/test_sac_attention.py): the MI300X rows,
    the same job with a flash kernel that keeps it, reserve 5.4 GiB more."""
    rows = [r for r in measured.report() if r.point.framework == "torchtitan"]
    assert len(rows) >= 32
    errors = sorted(abs(r.error_pct) for r in rows)
    assert errors[-1] < 10, [(r.point.id, r.error_pct) for r in rows if abs(r.error_pct) >= 10]
    assert errors[len(errors) // 2] < 5


def test_torchtitan_eager_and_compiled_rows_reserve_alike():
    """Tables 1 and 3 of torchtitan's 2024 benchmark run the same job eager and compiled
    (per-op SAC, 8B, 2 x 8192 tokens): eager measures 5.4 and 5.0 GiB more.  memsym puts the
    difference in the blocks' w2 outputs, which eager SAC's cache keeps and the compiled
    block's partition does not save (tests/test_op_sac_compile.py measures both), 32 x 2 tau h
    = 4.3 GB.  Then both runs of a table reserve the same fraction above memsym's allocated
    bytes (within 1.5 points; with the w2 outputs counted in both, the compiled runs were 8
    to 9 points below the eager ones)."""
    rows = {r.point.id: r for r in measured.report()}

    def reserve(pid):
        return float(rows[pid].measured) / float(rows[pid].allocated)

    for table in ("t1", "t3"):
        eager = reserve(f"torchtitan.2412.{table}.fsdp")
        for compiled in ("fsdp-compile", "fsdp-compile-float8"):
            assert abs(reserve(f"torchtitan.2412.{table}.{compiled}") - eager) < 0.015, table
    tau, h, layers = 2 * 8192, 4096, 32
    drop = (measured.predict("torchtitan.2412.t1.fsdp").total
            - measured.predict("torchtitan.2412.t1.fsdp-compile").total)
    assert drop == sp.Rational(11, 10) * layers * 2 * tau * h       # with the 10 % margin


def test_torchtitan_pipeline_rows_are_predicted():
    """Tables 5 and 6 of torchtitan's 2024 benchmark (405B, FSDP 8 or 1 x TP 8 x PP 8) are
    torchtitan jobs memsym now models (FSDP2 with PP, torchtitan's split) within 15 %."""
    rows = {r.point.id: r for r in measured.report()}
    for pid in ("torchtitan.2412.t5.1f1b", "torchtitan.2412.t5.interleaved",
                "torchtitan.2412.t6.cp1", "torchtitan.2412.t6.cp8"):
        assert rows[pid].error_pct is not None and abs(rows[pid].error_pct) < 15, pid


def test_torchtitan_interleaved_below_1f1b():
    # Table 5: Interleaved 1F1B 72.7 GiB, 1F1B 82.5 GiB (10.5 GB lower).  At m = p = 8 rank 0
    # runs all 8 backwards of its second stage before its first stage's first, and each
    # stage's unsharded fp32 gradients (12.6 GB) live from its first backward to its last:
    # it never holds both beside its 16 chunk passes.  memsym predicts the drop to within
    # 2 GB (9.3 GB); no constant is fitted to it
    inter = measured.predict("torchtitan.2412.t5.interleaved").total
    flat = measured.predict("torchtitan.2412.t5.1f1b").total
    measured_drop = (82.5 - 72.7) * 2**30          # [bytes]
    assert inter < flat
    assert abs(float(flat - inter) - measured_drop) < 2e9
