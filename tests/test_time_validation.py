"""The step-time validation set (formulas/measured_time.toml, issue 31 deliverable 5).

The Megatron-Bridge rows are checked against the table they were copied from: the step each
prices is the table's own arithmetic (GBS x seq / (tokens/s/GPU x GPUs)), the layout is the
row's, the row's printed gradient-accumulation count agrees with it, and the two throughputs
a row prints (tokens/s and model TFLOP/s) give one FLOPs-per-token value per model, which a
mistyped digit would break.  The calibration runs are exactly the named ones.  Everything here
reuses one ``validate()`` (about 2 s).
"""

from __future__ import annotations

import dataclasses
import re
import statistics

import numpy as np
import pytest

from memsym.hardware import cluster, gpu
from memsym.timing import efficiency, moe_host
from memsym.timing.step import step_time_grid
from memsym.timing.userbuffers import UB_CONFIGS, UB_GEMMS, ub_config
from tools import time_accuracy

MBRIDGE = "mbridge-perf-summary"
#: The one calibration run of each class and precision (docs/time-accuracy.md says why each).
CALIBRATION = {
    "korthikanti.t5.175b.present": "ampere/bf16",
    "llama3.t4.8192": "hopper/bf16",
    "seed001.baseline": "hopper/fp8",
    "mbridge.25.11.gb200.deepseek-v3.bf16": "blackwell/bf16",
    "mbridge.25.11.b200.llama3-8b.fp8": "blackwell/fp8",
    "mbridge.25.11.gb300.llama3-8b.fp8": "blackwell-ultra/fp8",
    "mbridge.26.04.01.gb300.llama3-70b.nvfp4": "blackwell-ultra/fp4",
    # the parenthesised FP8-MX values of the two fp8 rows
    "mbridge.25.11.b200.llama3-8b.mxfp8": "blackwell/mxfp8",
    "mbridge.25.11.gb300.llama3-8b.mxfp8": "blackwell-ultra/mxfp8",
    # not a GEMM ceiling: the MoE layer's host seconds (memsym.timing.moe_host)
    "mbridge.26.02.b200.qwen3-30b-a3b.mxfp8": "moe/host",
}


def _lead(cell) -> float:
    """The number a table cell starts with: '37556 (36108)' -> 37556, '475[^note]' -> 475,
    '[888](https://...)' (a Markdown link) -> 888."""
    return float(re.search(r"\d+(?:\.\d+)?", str(cell)).group())


def _printed(run, key) -> float:
    """The run's number in its table row's ``key`` cell: the lead one, or the parenthesised
    one for an MXFP8 run read off an 'FP8-CS (FP8-MX)' row ('37556 (36108)' -> 36108)."""
    cell = str(run["table"][key])
    if _parenthesised(run):
        return float(re.search(r"\((\d+(?:\.\d+)?)\)", cell).group(1))
    return _lead(cell)


def _parenthesised(run) -> bool:
    """An MXFP8 run read off a 25.11 'FP8-CS (FP8-MX)' row: the row's parenthesised value."""
    return (run["table"]["precision"] == "FP8-CS (FP8-MX)"
            and run["settings"].get("fp8_recipe") == "mxfp8")


@pytest.fixture(scope="module")
def runs():
    return time_accuracy.runs()


@pytest.fixture(scope="module")
def mbridge(runs):
    out = [r for r in runs if r["source"] == MBRIDGE]
    assert len(out) >= 60     # the 26.04.01 table and its archive: 64 expressible rows
    return out


@pytest.fixture(scope="module")
def tabled(runs):
    """Every run copied from a framework's table (Megatron-Bridge, NeMo): its row as printed."""
    return [r for r in runs if "table" in r]


@pytest.fixture(scope="module")
def results():
    return {r.id: r for r in time_accuracy.validate()}


def test_step_is_the_tables_arithmetic(tabled):
    assert len(tabled) >= 70
    for run in tabled:
        tb = run["table"]
        step = tb["gbs"] * tb["seq"] / (_printed(run, "tps") * tb["gpus"])
        assert time_accuracy.measured_step(run) == pytest.approx(step, rel=1e-12), run["id"]


def test_layout_and_settings_are_the_rows(tabled, mbridge):
    na = lambda v: 1 if v == "n/a" else v      # noqa: E731  (the table prints n/a for 1)
    for run in tabled:
        tb, lay, st = run["table"], run["layout"], run["settings"]
        # two rows' layouts contradict their release's config and their measured step; the
        # entry says so (table_note) and prices the config's layout
        printed = (lay["t"], lay["p"], lay["c"], lay["v"], lay.get("e", 1)) == (
            tb["tp"], tb["pp"], tb["cp"], na(tb["vp"]), na(tb.get("ep", 1)))
        assert printed != ("release's config" in run.get("table_note", "")), run["id"]
        assert time_accuracy.gpus_of(run) == tb["gpus"], run["id"]
        assert (st["B"], st["seq"]) == (tb["gbs"], tb["seq"]), run["id"]
        # one row's MBS contradicts its release's config too; the entry says so
        assert (st["b"] != tb["mbs"]) == ("the row's MBS" in run.get("table_note", "")), run["id"]
        assert st.get("fsdp", False) == (tb.get("fsdp", 0) > 0), run["id"]
        assert st["precision"] == {"BF16": "bf16", "NVFP4": "fp4"}.get(tb["precision"], "fp8"), \
            run["id"]
        assert tb["precision"] in ("BF16", "FP8", "FP8-CS", "FP8-CS (FP8-MX)", "MXFP8",
                                   "FP8-MX", "NVFP4"), run["id"]
        # the MXFP8 rows (26.x MXFP8, 25.11 FP8-MX, and a 25.11 FP8-CS row's parenthesised
        # FP8-MX value) and only they run the mxfp8 recipe
        assert (st.get("fp8_recipe") == "mxfp8") == (
            tb["precision"] in ("MXFP8", "FP8-MX") or _parenthesised(run)), run["id"]
        # EP is carved from the data-parallel ranks (Megatron: expert layers reuse DP x CP,
        # and TP too where the expert tensor-parallel size t_e is below it)
        edp = lay["d"] * lay["c"] * lay["t"] // lay.get("t_e", lay["t"])
        assert edp % lay.get("e", 1) == 0, run["id"]
        if "ga" in tb:   # the 25.11 tables print the accumulation count: GBS / (MBS x DP)
            agrees = tb["ga"] * tb["mbs"] * lay["d"] == tb["gbs"]
            # one row contradicts itself; the entry says so (table_note) and prices its layout
            assert agrees != ("GA" in run.get("table_note", "")), run["id"]
    noted = [r["id"] for r in mbridge if "table_note" in r]
    assert sorted(noted) == sorted([
        "mbridge.26.02.01.h100.qwen3-30b-a3b.fp8", "mbridge.25.11.b200.gpt-oss-120b.bf16",
        "mbridge.25.11.h100.gpt-oss-120b.bf16", "mbridge.25.11.gb300.qwen3-235b-a22b.bf16",
        "mbridge.26.02.01.gb300.llama3-70b.mxfp8", "mbridge.26.02.01.gb300.llama3-70b.nvfp4"])


def test_flops_per_token_agree_within_each_model(tabled):
    # model TFLOP/s / tokens/s is the model's FLOPs per token: one value per (source, model,
    # seq; the 25.11 DeepSeek-V3 rows "w/o MTP" count no MTP layer, 4 % fewer FLOPs).  The
    # tables round (26.04.01's tokens/s are multiples of 32), up to 2.2 % apart; a wrong digit
    # in either column moves a row by 10 % or more
    groups = {}
    for run in tabled:
        tb = run["table"]
        model = (run.get("preset") or tuple(run["gpt"]), "(w/o MTP)" in run["locator"])
        groups.setdefault((run["source"], model, tb["seq"]), []).append(
            (_printed(run, "tflops") * 1e12 / _printed(run, "tps"), run["id"]))
    for key, rows in groups.items():
        mid = statistics.median(x for x, _ in rows)
        bad = [(rid, round(x / mid - 1, 3)) for x, rid in rows if abs(x / mid - 1) > 0.03]
        assert not bad, (key, bad)
    # and the check can fail: one digit changed in a tokens/s cell
    assert abs(_lead("5248") / _lead("4248") - 1) > 0.03
    assert (_lead("37556 (36108)"), _lead("475[^note-1]"), _lead("[888](https://x/1)")) == (
        37556, 475, 888)


def test_calibration_runs_are_exactly_the_named_ones(runs):
    named = {r["id"]: r["calibrates"] for r in runs if r["role"] == "calibration"}
    assert named == CALIBRATION
    assert all("calibrates" not in r for r in runs if r["role"] != "calibration")
    # one run per class and precision, each a key of the ceiling table, and the MoE host run
    assert len(set(named.values())) == len(named)
    assert {tuple(v.split("/")) for v in named.values()} - {("moe", "host")} \
        <= set(efficiency.GEMM_CEILING)


@pytest.mark.parametrize("klass,prec", [("blackwell", "bf16"), ("blackwell", "fp8"),
                                        ("blackwell", "mxfp8"), ("blackwell-ultra", "fp8"),
                                        ("blackwell-ultra", "mxfp8"),
                                        ("blackwell-ultra", "fp4")])
def test_blackwell_ceilings_come_from_their_runs(klass, prec):
    # the stored value reproduces its run's measured step (the Hopper and Ampere ones:
    # tests/test_timing.py); not Hopper's 0.587 / 0.570 any more (Hopper has no fp4)
    fitted = time_accuracy.calibrate(klass, prec)
    stored = efficiency.GEMM_CEILING[(klass, prec)]
    assert fitted == pytest.approx(stored, abs=0.002)
    assert abs(fitted - efficiency.GEMM_CEILING.get(("hopper", prec), 0)) > 0.02


def test_every_run_is_priced_and_every_slice_counted(runs, results):
    assert set(results) == {r["id"] for r in runs}
    assert all(np.isfinite(r.predicted) and r.predicted > 0 for r in results.values())
    val = [r for r in results.values() if r.role == "validation"]
    for keys in (("gpu",), ("klass", "precision"), ("kind",)):
        assert sum(v["n"] for v in time_accuracy.slices(tuple(results.values()), keys).values()) \
            == len(val)
    kinds = {time_accuracy.describe(r)["kind"] for r in runs if r["role"] == "validation"}
    gpus = {r["gpu"] for r in runs if r["role"] == "validation"}
    assert kinds == {"dense", "MoE"} and {"b200", "b300", "gb200", "gb300", "h100-80gb"} <= gpus


def test_skipped_rows_say_why_and_are_not_expressible():
    rows = time_accuracy.skipped()
    # 75 before the Qwen3-235B-A22B, Nemotron and Nemotron 3 Nano presets made 35 rows and one
    # entry runs, 39 before Nemotron 3 Super's latent MoE made 12 more and Muon
    # (memsym.timing.muon) Kimi K2's 3, 22 since the B200's FP4 peak (HGX B200 datasheet) made
    # its 2 NVFP4 Super rows run (the 2 B300 ones stay: no FP4 peak in memsym's catalogue)
    assert len(rows) >= 22
    for row in rows:
        loc, why = row["locator"], row["reason"]
        assert row["source"] in (MBRIDGE, "nemo-perf-2407", "nemo-long-sequence") and why
        assert not why.startswith("precision "), loc   # every printed precision is memsym's
        if "25.09" in why:
            assert "25.09 NeMo Container" in loc
    # the MXFP8 and NVFP4 rows left out are NVFP4 rows on GPUs without a catalogued FP4 peak;
    # Kimi K2's Muon rows run (memsym.timing.muon)
    mx = [r for r in rows if r["locator"].endswith((" MXFP8", " FP8-MX", " NVFP4"))]
    assert {r["reason"].split(" (")[0] for r in mx} <= {
        "no FP4 tensor-core peak for the B300 in memsym's GPU catalogue",
        "no FP4 tensor-core peak for the B200 in memsym's GPU catalogue"}
    assert all(r["locator"].endswith(" NVFP4") for r in mx)
    assert not [r for r in rows if "Kimi_K2" in r["locator"]]
    # the latent MoE is modelled (preset nemotron-3-super): no row is left out for it
    assert not [r for r in rows if "latent MoE" in r["reason"].split(":")[0]]
    # hybrid Mamba-2 models have a step time (memsym.timing.ssm): none is left out for it
    assert not [r for r in rows if "Mamba" in r["reason"]]
    # a row of a precision memsym has is never left out for its precision
    assert not [r for r in rows if r["locator"].endswith((" BF16", " FP8", " FP8-CS", " MXFP8",
                                                          " FP8-MX", " NVFP4"))
                and r["reason"].startswith("precision")]


def test_recipe_recompute_modules_are_priced(runs):
    # Megatron-core reads recompute_modules only under selective granularity: GPT-OSS's perf
    # recipes set it on a line of their own, DeepSeek-V3's through _deepseek_v3_common
    # (perf_recipes/deepseek: cfg.model.recompute_granularity = "selective")
    by_id = {r["id"]: r for r in runs}
    oss = time_accuracy._settings(by_id["mbridge.26.04.01.gb200.gpt-oss-120b.bf16"])
    assert (oss.recompute, oss.recompute_modules) == ("selective", ("layernorm", "moe_act"))
    ds = time_accuracy._settings(by_id["mbridge.25.11.gb200.deepseek-v3.bf16"])
    assert (ds.recompute, ds.recompute_modules) == ("selective", ("mla_up_proj",))
    # a recipe that names no modules keeps the run's own recompute setting
    qwen = time_accuracy._settings(by_id["mbridge.26.04.01.h100.qwen3-30b-a3b.fp8"])
    assert qwen.recompute == "none"
    # priced now: no run says they are not
    assert not any("recompute_modules" in u for r in runs for u in r.get("unmodelled", ()))


def test_recipe_pipeline_split_counts_embedding_and_loss(runs):
    # The Llama 3.1 405B base recipe sets account_for_embedding/loss_in_pipeline_split
    # (Megatron-Bridge recipes/llama/h100/llama3.py:1227-1228): Megatron-core builds
    # (126 + 2) / p layers per rank, one fewer on the first and on the last
    # (transformer_block.py get_num_layers_to_build)
    by_id = {r["id"]: r for r in runs}
    assert time_accuracy.recipe_end_stages(by_id["mbridge.26.04.gb300.llama3-405b.fp8"]) == (15, 15)
    assert time_accuracy.recipe_end_stages(by_id["mbridge.26.04.gb200.llama3-405b.fp8"]) == (7, 7)
    # a recipe without the flags (Llama 3 8B) and a run that states its own split keep theirs
    assert time_accuracy.recipe_end_stages(by_id["mbridge.25.11.b200.llama3-8b.fp8"]) == (None, None)
    assert time_accuracy.recipe_end_stages(by_id["llama3.t4.8192"]) == (None, None)


def test_recipe_userbuffers_config_is_priced(runs):
    # Megatron-Bridge comm_overlap.py:190-201 (userbuffers_fp8_b200_h16384_tp4_cp2_...): the
    # bulk dgrad / wgrad overlaps keep every SM (set_sm_margin=False), proj and fc2 forward
    # reduce-scatter by ring exchange on 1 SM taken from the GEMM; TE's default takes 16
    assert all(set(cfg) == set(UB_GEMMS) for cfg in UB_CONFIGS.values())
    name = "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192"
    cfg, default, sms = ub_config(name), ub_config(), gpu("gb300").sm_count
    assert [cfg[k].math_sms(sms) for k in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")] \
        == [sms] * 4
    assert [default[k].math_sms(sms) for k in ("qkv_dgrad", "fc1_wgrad")] == [sms - 16] * 2
    assert (cfg["fc2_fprop"].method, cfg["fc2_fprop"].math_sms(sms)) == ("ring_exchange", sms - 1)
    run = {r["id"]: r for r in runs}["mbridge.26.04.gb300.llama3-405b.fp8"]
    assert time_accuracy._settings(run).tp_overlap_cfg == name
    # fewer SMs taken from the GEMMs: the run is priced faster than under TE's default
    st = time_accuracy._settings(run)
    kw = dict(t=4, p=8, d=8, v=4, m=192, cluster=cluster("gb300-nvl72"),
              overlap=time_accuracy._overlap(run), first_stage_layers=15, last_stage_layers=15)
    arch = time_accuracy._arch(run)
    ours = float(step_time_grid(arch, "gb300", settings=st, **kw)["step"][()])
    te = float(step_time_grid(arch, "gb300", settings=dataclasses.replace(st, tp_overlap_cfg=None),
                              **kw)["step"][()])
    assert ours < te


def test_blackwell_ultra_is_its_own_class():
    # NVIDIA's Blackwell Ultra (B300, GB300) against Blackwell (B200, GB200): its own fp8
    # ceiling, blackwell's bf16 one (shared, stated), twice the SFU exponential rate
    from memsym.model import preset
    from memsym.timing.gemm import shape_of
    from memsym.timing.layer import _attention
    from memsym.timing.records import Settings

    assert {gpu(n).arch_class for n in ("b300", "gb300")} == {"blackwell-ultra"}
    assert {gpu(n).arch_class for n in ("b200", "gb200")} == {"blackwell"}
    assert efficiency.ceiling("gb300", "bf16") == efficiency.ceiling("gb200", "bf16")
    assert efficiency.ceiling("gb300", "fp8") > efficiency.ceiling("gb200", "fp8") + 0.05
    assert float(efficiency.exp_time(1e12, "gb200") / efficiency.exp_time(1e12, "gb300")) \
        == pytest.approx(10.7 / 5)
    # the exponentials bind only where the matrix products are faster than them: head
    # dimension 64 at a full-peak GEMM rate on GB200, not at the calibrated ceiling
    x, st = shape_of(preset("gpt-oss-120b")), Settings(seq_length=8192, micro_batch_size=1,
                                                        flash_attention=True, dropout=False)
    fast = [float(_attention(x, st, gpu(g), 1, 1, 1, 1.0)[0]) for g in ("gb200", "gb300")]
    slow = [float(_attention(x, st, gpu(g), 1, 1, 1, None)[0]) for g in ("gb200", "gb300")]
    assert fast[0] > fast[1] * 1.5 and slow[0] == pytest.approx(slow[1])


def test_bridge_recipe_job_prices_the_recipes_userbuffers_as_the_validation(runs, capsys):
    # memsym estimate --bridge-recipe reads comm_overlap.tp_comm_overlap_cfg into the job
    # (Training.comm.tp_comm_overlap_cfg): its step is the validation's pricing of the same
    # job (tools/time_accuracy reads the config from the run's recipe_settings), not TE's
    # default userbuffers.  The 26.04.01 GB300 405B row runs the recipe's own layout.
    import json

    from memsym.cli import main

    run = {r["id"]: r for r in runs}["mbridge.26.04.01.gb300.llama3-405b.fp8"]
    recipe = run["recipe"].split(":")[-1].split()[0]
    argv = ["estimate", "--bridge-recipe", recipe, "--gpu", run["gpu"], "--gpus-per-node", "4",
            "--inter-node-bandwidth", "100", "--json"]     # the gb300-nvl72 cluster

    def step(*extra):
        assert main(argv + list(extra)) == 0
        out = json.loads(capsys.readouterr().out)
        return out["step_time_s"], out["training"].get("tp_comm_overlap_cfg")

    ours, cfg = step()
    assert cfg == time_accuracy.recipe_ub_config(run) is not None
    assert ours == pytest.approx(time_accuracy.predict(run)["step"], rel=1e-9)
    te, none = step("comm_overlap.tp_comm_overlap_cfg=null")
    assert none is None and te > ours * 1.02


def test_recipe_pipeline_layout_is_priced_per_rank_and_chunk(runs):
    """The H100 Llama 3 70B FP8 recipe's ``"Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"`` (perf_recipes/
    llama/h100/llama3.py at Megatron-Bridge 067f987df0), PP 8, VP 5: 40 stages, stage
    8 j + r chunk j of rank r; stage 35 (rank 3, chunk 4) holds 3 layers, stage 39 (rank 7,
    chunk 4) 1 beside the loss, every other 2.  DeepSeek-V3 at the table's PP 16 where the
    recipe sets PP 8, VP 2: Bridge's sync_model_pipeline_layout rebuilds the layout with
    _get_deepseek_v3_pipeline_layout (recipes/deepseek/h100/deepseek_v3.py), (16, 1):
    4 layers per rank, the last holding 1 and the MTP layer (priced as a decoder layer).
    Its map has no (2, 4): that row keeps the even split."""
    by_id = {r["id"]: r for r in runs}
    chunks = time_accuracy.recipe_chunk_layers(by_id["mbridge.26.04.01.h100.llama3-70b.fp8"])
    want = [(2, 2, 2, 2, 2)] * 8
    want[3], want[7] = (2, 2, 2, 2, 3), (2, 2, 2, 2, 1)
    assert list(chunks) == want
    ds = by_id["mbridge.26.04.b300.deepseek-v3.mxfp8"]
    assert (ds["layout"]["p"], ds["layout"]["v"]) == (16, 1)
    assert time_accuracy.recipe_chunk_layers(ds) == ((4,),) * 15 + ((2,),)
    assert time_accuracy.recipe_pipeline_layout(by_id["mbridge.25.11.gb300.deepseek-v3.bf16"]) \
        is None
    # no "priced as even chunks" left where the layout is priced; the rows without one say why
    for r in runs:
        notes = " ".join(r.get("open", ()))
        assert "priced as even chunks" not in notes, r["id"]
        if time_accuracy.recipe_pipeline_layout(r) is not None:
            assert "priced per rank and chunk" in notes, r["id"]


@pytest.mark.parametrize("rid", ["mbridge.26.04.01.h100.llama3-70b.fp8",
                                 "mbridge.26.04.01.b200.deepseek-v3.mxfp8"])
def test_bridge_recipe_job_prices_the_recipes_layout_as_the_validation(runs, capsys, rid):
    # memsym estimate --bridge-recipe reads the recipe's pipeline_model_parallel_layout (the
    # 70B string; DeepSeek-V3's set_deepseek_v3_pipeline_model_parallel_layout, MTP layer
    # included) into the job: its step is the validation's pricing of the same row
    import json

    from memsym.cli import main

    run = {r["id"]: r for r in runs}[rid]
    recipe = run["recipe"].split(":")[-1].split()[0]
    assert main(["estimate", "--bridge-recipe", recipe, "--gpu", run["gpu"], "--json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert time_accuracy.recipe_pipeline_layout(run) is not None
    assert out["step_time_s"] == pytest.approx(time_accuracy.predict(run)["step"], rel=1e-9)


def test_rows_run_by_their_release_config_say_so(runs):
    """The 25.11 / 26.02 Qwen3-30B-A3B rows whose layout is not the recipe read at 067f987df0
    ran their release's perf config (Megatron-Bridge v0.2.2 / v0.3.0, whose
    docs/performance-summary.md prints them): B200 FP8-MX, scripts/performance/configs/
    qwen3/workload_base_configs.py:211-219 (v0.2.2) and qwen/qwen3_workload_base_configs.py:
    397-405 (v0.3.0) set no dispatcher backend and no moe_a2a_overlap (WorkloadBaseConfig:
    MBS 1, None, False), so Qwen3MoEModelProvider's "alltoall" runs without the EP overlap;
    H100 FP8-CS (v0.2.2 :233-239, v0.3.0 :421-429) set moe_a2a_overlap True, v0.3.0 with
    moe_flex_dispatcher_backend "deepep"."""
    want = {"mbridge.25.11.b200.qwen3-30b-a3b.mxfp8": (1, False, "alltoall"),
            "mbridge.26.02.b200.qwen3-30b-a3b.mxfp8": (1, False, "alltoall"),
            "mbridge.25.11.h100.qwen3-30b-a3b.fp8": (2, True, "alltoall"),
            "mbridge.26.02.h100.qwen3-30b-a3b.fp8": (1, True, "deepep")}
    by_id = {r["id"]: r for r in runs}
    for rid, (mbs, overlap, dispatcher) in want.items():
        run = by_id[rid]
        st = run["settings"]
        assert (st["b"], st["ep_comm_overlap"], st["moe_dispatcher"]) == (mbs, overlap, dispatcher)
        assert st["b"] == run["table"]["mbs"]
        assert "release's config" in run["open"][0]
        assert time_accuracy._settings(run).moe_dispatcher == dispatcher


def test_release_dispatchers_where_the_release_config_differs(runs):
    """The dispatcher each row's release ran, read from its perf config, where it is not the
    recipe read at 067f987df0's: GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2 / _B200_BF16_V2 name
    moe_flex_dispatcher_backend "hybridep" at Megatron-Bridge v0.4.0 (26.02.01) and
    26.04-alpha.rc2 (26.04), scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py
    :102-107 and :118-123, and no backend at v0.4.2 (26.04.01), whose set_workload_base_configs
    then sets "alltoall" (utils/overrides.py:230-233); apply_flex_dispatcher_backend takes
    HybridEP on compute capability 10 (training/flex_dispatcher_backend.py:57-72).  The 25.11
    B200 DeepSeek-V3 config (v0.2.2 deepseek/workload_base_configs.py:63-74) names no backend:
    DeepSeekV3ModelProvider's "alltoall" (models/deepseek/deepseek_provider.py:76)."""
    want = {"mbridge.26.02.01.gb200.gpt-oss-120b.bf16": ("hybridep", "v0.4.0"),
            "mbridge.26.02.01.b200.gpt-oss-120b.bf16": ("hybridep", "v0.4.0"),
            "mbridge.26.04.gb200.gpt-oss-120b.bf16": ("hybridep", "26.04-alpha.rc2"),
            "mbridge.26.04.b200.gpt-oss-120b.bf16": ("hybridep", "26.04-alpha.rc2"),
            "mbridge.26.04.01.gb200.gpt-oss-120b.bf16": ("alltoall", None),
            "mbridge.26.04.01.b200.gpt-oss-120b.bf16": ("alltoall", None),
            "mbridge.25.11.b200.deepseek-v3.mxfp8": ("alltoall", "v0.2.2")}
    by_id = {r["id"]: r for r in runs}
    for rid, (dispatcher, tag) in want.items():
        run = by_id[rid]
        assert time_accuracy._settings(run).moe_dispatcher == dispatcher
        if tag is not None:
            assert any(f"Megatron-Bridge {tag} " in line for line in run["open"])


def test_gb200_llama3_70b_nvfp4_rows_ran_no_cuda_graph(runs):
    """LLAMA3_70B_PRETRAIN_CONFIG_GB200_NVFP4_V2 sets cuda_graph_impl "none" in every release
    read (Megatron-Bridge v0.3.0, v0.4.0, 26.04-alpha.rc2, v0.4.2 scripts/performance/configs/
    llama/llama3_workload_base_configs.py:256-264): no graph is listed as left unpriced."""
    for rel in ("26.02", "26.02.01", "26.04", "26.04.01"):
        run = {r["id"]: r for r in runs}[f"mbridge.{rel}.gb200.llama3-70b.nvfp4"]
        assert run.get("unmodelled", []) == []
        assert any('cuda_graph_impl "none"' in line for line in run["open"])


def test_super_nvfp4_rows_run_their_last_14_layers_in_bf16(runs):
    """nemotron_3_super_bf16_with_nvfp4_mixed (Megatron-Bridge v0.4.2 / 26.04-alpha.rc2
    src/megatron/bridge/training/mixed_precision.py:427-435) sets first_last_layers_bf16 True,
    num_layers_at_end_in_bf16 14 and leaves num_layers_at_start_in_bf16 at its 0 (:73); the
    releases' set_nemotron_3_super_common_configs (scripts/performance/configs/nemotronh/
    nemotron_3_llm_pretrain.py:40-46) use it for NVFP4: the step prices (0, 14) BF16 layers."""
    super_fp4 = [r for r in runs if "nemotron-3-super.nvfp4" in r["id"] and r["role"] == "validation"]
    assert len(super_fp4) == 6
    for run in super_fp4:
        assert time_accuracy._settings(run).bf16_layers == (0, 14)
    others = [r for r in runs if r["settings"].get("precision") == "fp4" and r not in super_fp4]
    assert all(time_accuracy._settings(r).bf16_layers == (0, 0) for r in others)


def test_the_dispatcher_is_the_recipes(runs):
    """perf_recipes/deepseek/b200/deepseek_v3.py:141 names DeepEP on top of a base whose
    apply_flex_dispatcher_backend makes the dispatcher flex (recipes/deepseek/h100/
    deepseek_v3.py:256 at Megatron-Bridge 067f987df0); the GB200 one keeps HybridEP."""
    by_id = {r["id"]: r for r in runs}
    b200 = by_id["mbridge.26.04.01.b200.deepseek-v3.mxfp8"]
    assert 'model.moe_flex_dispatcher_backend = "deepep"' in b200["recipe_settings"]
    assert time_accuracy.recipe_moe_dispatcher(b200) == "deepep"
    assert time_accuracy.recipe_moe_dispatcher(
        by_id["mbridge.26.04.01.gb200.deepseek-v3.mxfp8"]) == "hybridep"
    assert time_accuracy.recipe_moe_dispatcher(by_id["korthikanti.t5.22b.full"]) == "alltoall"


def test_release_rows_run_without_the_ep_overlap_their_config_left_off(runs):
    """The 25.11 / 26.02 perf configs (Megatron-Bridge v0.2.2 / v0.3.0, whose
    docs/performance-summary.md prints the rows) set moe_a2a_overlap=False for DeepSeek-V3
    (deepseek/workload_base_configs.py, deepseek/deepseek_workload_base_configs.py) and leave
    WorkloadBaseConfig's False for Qwen3-30B-A3B on GB300 / GB200 / B300 and GPT-OSS on GB200;
    the recipes read at 067f987df0 turn overlap_moe_expert_parallel_comm on later."""
    off = [r for r in runs if r.get("release") in ("25.11", "26.02")
           and r["preset"] in ("deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b")
           and r["gpu"] != "h100-80gb"] if runs else []
    # the later releases' configs (v0.4.0: 26.02.01, 26.04-alpha.rc2: 26.04, v0.4.2:
    # 26.04.01) keep it off for Qwen3-30B-A3B and for DeepSeek-V3 on GB300 / GB200
    # (qwen/qwen3_workload_base_configs.py, deepseek/deepseek_workload_base_configs.py)
    off += [r for r in runs if r.get("release") in ("26.02.01", "26.04", "26.04.01")
            and (r.get("preset") == "qwen3-30b-a3b" and r["gpu"] != "h100-80gb"
                 or r.get("preset") == "deepseek-v3" and r["gpu"] in ("gb300", "gb200"))
            and r["settings"].get("precision") == "fp8"]
    assert len(off) >= 29
    for run in off:
        assert run["settings"]["ep_comm_overlap"] is False, run["id"]


def test_moe_host_constant_comes_from_its_run(runs):
    # the stored host seconds reproduce the published step of the one run they are fixed on:
    # 26.02 DGX-B200 Qwen3-30B-A3B MXFP8 prints 9691 tokens/s/GPU on 8 GPUs at GBS 512 x 4096
    # tokens: 27.05 s by the table's own arithmetic, a value from the source, not from memsym
    run = next(r for r in runs if r["id"] == moe_host.MOE_HOST_RUN)
    assert run["role"] == "calibration" and run["calibrates"] == "moe/host"
    measured = run["settings"]["B"] * run["settings"]["seq"] / (8 * run["measured"]["tps"])
    assert time_accuracy.measured_step(run) == pytest.approx(measured) == pytest.approx(27.05,
                                                                                      abs=0.01)
    assert time_accuracy.calibrate_moe_host() == pytest.approx(moe_host.MOE_LAYER_HOST,
                                                               abs=0.02e-3)
    assert time_accuracy.predict(run)["step"] == pytest.approx(measured, rel=0.005)


def test_release_rows_wait_on_the_host_where_the_recipe_would_not(runs):
    """The recipe read (067f987df0, perf_recipes/qwen/common.py
    _enable_hybridep_full_iteration_mxfp8, perf_recipes/deepseek/common.py
    _enable_deepseek_full_iteration_mxfp8) gives the GB300 / GB200 / B300 Qwen3-30B-A3B and
    DeepSeek-V3 MXFP8 rows full-iteration CUDA graphs and moe_expert_rank_capacity_factor 1.5
    (no host read); the releases' perf configs that ran them (Megatron-Bridge v0.2.2, v0.3.0,
    v0.4.0, 26.04-alpha.rc2, v0.4.2: scripts/performance/configs/qwen*/ and deepseek/
    *workload_base_configs.py) set neither, so HybridEP reads tokens_per_expert.sum() on the
    host every layer (token_dispatcher.py _HybridEPManager.dispatch at core_v0.17.0)."""
    rows = [r for r in runs if r.get("release") in ("25.11", "26.02", "26.02.01", "26.04",
                                                    "26.04.01")
            and r.get("preset") in ("qwen3-30b-a3b", "deepseek-v3")
            and r["gpu"] in ("gb300", "gb200", "b300")
            and r["settings"].get("fp8_recipe") == "mxfp8"]
    # 25.11: GB300 and GB200 only (4 rows); 26.02 ... 26.04.01: three GPUs, two models
    assert len(rows) == 4 + 4 * 6
    for run in rows:
        assert time_accuracy.recipe_moe_host_sync(run) is False, run["id"]
        assert run["settings"]["moe_host_sync"] is True, run["id"]
        assert time_accuracy._settings(run).moe_host_sync is True, run["id"]
        assert "full_iteration" not in " ".join(run["unmodelled"]), run["id"]
        assert any("release's perf config" in o and "capacity_factor" in o
                   for o in run["open"]), run["id"]


def test_release_rows_recompute_what_their_config_names(runs):
    """The DeepSeek-V3 MXFP8 rows' release configs (Megatron-Bridge scripts/performance/
    configs/deepseek/*workload_base_configs.py) name other recompute modules than the recipe
    read at 067f987df0: GB300 ["moe_act"] in v0.2.2 (:38), ["mla_up_proj"] in v0.3.0 ...
    v0.4.2 (:53), where the recipe names none; GB200 ["mlp"] in v0.4.0, 26.04-alpha.rc2 and
    v0.4.2 (:81), where the recipe names ["mla_up_proj"].  The row's own list is priced."""
    by_id = {r["id"]: r for r in runs}
    want = {"mbridge.25.11.gb300.deepseek-v3.mxfp8": ("moe_act",),
            **{f"mbridge.{rel}.gb300.deepseek-v3.mxfp8": ("mla_up_proj",)
               for rel in ("26.02", "26.02.01", "26.04", "26.04.01")},
            **{f"mbridge.{rel}.gb200.deepseek-v3.mxfp8": ("mlp",)
               for rel in ("26.02.01", "26.04", "26.04.01")}}
    for rid, mods in want.items():
        run = by_id[rid]
        assert time_accuracy.recipe_recompute_modules(run) != mods, rid
        st = time_accuracy._settings(run)
        assert (st.recompute, st.recompute_modules) == ("selective", mods), rid
    # the 26.02 GB200 config (v0.3.0 :81) names the recipe's own ["mla_up_proj"]
    assert "recompute_modules" not in by_id["mbridge.26.02.gb200.deepseek-v3.mxfp8"]["settings"]
