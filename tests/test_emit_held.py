"""A searched job's own settings in its emitted launch (issue 32, deliverable 5).

``memsym search`` of a job holds the job's settings fixed over every row (``Space.held``);
``--emit`` writes them in the framework's own input (:mod:`memsym.emit_held`).  The oracle is
the round trip through two memsym paths: the search's best row (the vectorized templates and
the grid step time) against ``memsym estimate`` of the emitted launch
(:meth:`memsym.emit.Emitted.read_back`: the reader -> job -> total path), equal to the byte and
to 1e-9 in step time; and the same launch without the held settings (``held=False``) reads
back another job, so each setting written is one that the price depends on.

The spellings asserted are typed from the frameworks' sources: Megatron-LM
``megatron/training/arguments.py`` at ``d98e8a64dd`` (``--fp8-param-gather``,
``--grad-reduce-in-bf16``, ``--megatron-fsdp-main-grads-dtype``, ``--first-last-layers-bf16``
with ``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16``,
``--recompute-modules``, ``--use-precision-aware-optimizer``, ``--exp-avg-dtype``,
``--exp-avg-sq-dtype``, ``--no-overlap-p2p-communication``, ``--no-bias-swiglu-fusion``),
torchtitan v0.2.2 ``torchtitan/config/job_config.py`` (``[compile] enable`` / ``components``,
``[parallelism] disable_loss_parallel``), DeepSpeed 0.19.6 ``runtime/zero/config.py``
(``reduce_bucket_size``, ``stage3_prefetch_bucket_size``, ``contiguous_gradients``).
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import tomllib
from types import SimpleNamespace as NS

import pytest

from memsym.cli import main
from memsym.cli.search_report import bytes_json
from memsym.emit import NotExpressible, emit
from memsym.emit_held import (DEEPSPEED_HELD, MEGATRON_HELD, REFUSED, TORCHTITAN_HELD,
                              deepspeed_held, megatron_flag, megatron_held)
from memsym.job import job
from memsym.readers._megatron_flags import FLAGS
from memsym.search import search
from memsym.search.job_fields import HELD_FIELDS

GPU = "h100-80gb"


@pytest.fixture(autouse=True)
def _no_levers(monkeypatch):
    """No levers in this file's estimates: a read-back job that does not fit on the GPU gets
    ``memsym estimate``'s advice (:func:`memsym.advice.levers`, which solves and re-prices the
    job per knob), 20 of the file's 28 s, and no test here reads it; the bytes and step time
    are reported before it and do not depend on it.  The levers are the subject of
    tests/test_one_reading.py (each applied makes the job fit), test_no_fit_hint.py and
    test_published_runs.py."""
    from memsym.cli import training_options

    monkeypatch.setattr(training_options, "advice_report", lambda j: [])


def estimate(model, words):
    """``memsym estimate MODEL WORDS --json`` (in process): exit 0 (fits) or 1 (does not)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", model, *words, "--json"])
    assert code in (0, 1), (words, err.getvalue())
    return json.loads(out.getvalue())


def best(model, gpus, job_options, search_options):
    """The search of the job: its result, and its best row (fitting or not)."""
    res = search(job(model, **job_options), GPU, gpus, global_batch_size=64, **search_options)
    i = int(res.order(fitting=False)[0])
    return res, i, res.row(i)


def read_back(framework, model, e, tmp_path):
    """The estimate of an emitted layout ``e``: its words, or its file written to tmp_path."""
    path = None
    if framework != "megatron":
        path = tmp_path / f"layout.{e.suffix}"
        path.write_text(e.text, encoding="utf-8")
    return estimate(model, e.read_back(path))


def round_trip(framework, model, gpus, job_options, search_options, tmp_path, matters=True):
    """The best row of a job's search, emitted and read back: the row's bytes exactly and
    its step time; without the held settings (``matters``) the launch reads back another
    job."""
    res, i, row = best(model, gpus, job_options, search_options)
    e = emit(framework, row, res.space, gpus, model=model)
    est = read_back(framework, model, e, tmp_path)
    assert est["bytes"] == bytes_json(res.exact(i)["bytes"])
    assert est["step_time_s"] == pytest.approx(row["step_time"], rel=1e-9)
    plain = read_back(framework, model, emit(framework, row, res.space, gpus, model=model,
                                             held=False), tmp_path)
    assert ((plain["bytes"]["total"], plain["step_time_s"]) !=
            (est["bytes"]["total"], est["step_time_s"])) == matters
    return e, est, row


def contains(words, part) -> bool:
    """Whether ``part`` is a contiguous run of ``words``."""
    n = len(part)
    return any(list(words[i:i + n]) == list(part) for i in range(len(words) - n + 1))


FP8 = dict(precision="fp8", fp8_recipe="tensorwise")

#: name -> (job options, search options, the Megatron-LM words the row must carry).
MEGATRON_CASES = {
    "fp8-param-gather": (dict(FP8, fp8_param_gather=True), dict(tp=[1, 2], pp=[1]),
                         ["--fp8-param-gather"]),
    # the gradient buffer in bf16: Megatron-LM's distributed optimizer and DDP read
    # --grad-reduce-in-bf16; Megatron-FSDP reads no grad_reduce_in_fp32, but its own
    # --megatron-fsdp-main-grads-dtype
    "grad-reduce-in-bf16": (dict(grad_dtype="bf16"),
                            dict(tp=[2], pp=[1], sharding=["distributed-optimizer"],
                                 recompute=["full"]), ["--grad-reduce-in-bf16"]),
    "grad-reduce-in-bf16-ddp": (dict(grad_dtype="bf16"),
                                dict(tp=[2], pp=[1], sharding=["ddp"], recompute=["full"]),
                                ["--grad-reduce-in-bf16"]),
    # (Megatron-FSDP's default main grads, "auto", are the parameters' dtype, bf16 here: the
    # argument says what the launch does anyway, MATTERS_NOT)
    "grad-bf16-megatron-fsdp": (dict(grad_dtype="bf16"),
                                dict(tp=[2], pp=[1], sharding=["fsdp"], recompute=["full"]),
                                ["--megatron-fsdp-main-grads-dtype", "bf16"]),
    # fp16 gradients under --fp16 are Megatron-LM's own (megatron_precision: the parameters'
    # dtype without --accumulate-allreduce-grads-in-fp32): no argument, MATTERS_NOT
    "fp16-gradients": (dict(precision="fp16", grad_dtype="fp16"),
                       dict(tp=[2], pp=[1], sharding=["distributed-optimizer"],
                            recompute=["full"]), []),
    # the first layer and the last two in BF16 under FP8, over two pipeline stages
    "first-last-layers-bf16": (dict(FP8, bf16_layers=(1, 2)),
                               dict(tp=[2], pp=[2], vpp=[1], uneven=False),
                               ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", "1",
                                "--num-layers-at-end-in-bf16", "2"]),
    "recompute-modules": (dict(recompute="selective", recompute_modules=("core_attn", "mlp")),
                          dict(tp=[2], pp=[1], recompute=["selective"],
                               sharding=["distributed-optimizer"]),
                          ["--recompute-modules", "core_attn", "mlp"]),
    "precision-aware": (dict(precision_aware=True, exp_avg_dtype="bf16",
                             exp_avg_sq_dtype="bf16"),
                        dict(tp=[2], pp=[1], sharding=["distributed-optimizer"]),
                        ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16",
                         "--exp-avg-sq-dtype", "bf16"]),
    "no-overlap-p2p": (dict(overlap_p2p_comm=False),
                       dict(tp=[1], pp=[4], vpp=[2], uneven=False,
                            sharding=["distributed-optimizer"], recompute=["full"]),
                       ["--no-overlap-p2p-communication"]),
    # the same on uneven end stages (6 + 10 + 10 + 6 layers over pp 4, vpp 2): the search
    # prices its interleaved rows by the schedule's longest path as the estimate simulates
    # them (m = 32: 2 p m v = 512 chunk passes, within memsym.timing.interleaved.MAX_PASSES)
    "no-overlap-p2p-uneven": (dict(overlap_p2p_comm=False),
                              dict(tp=[1], pp=[4], vpp=[2], first_stage_layers=6,
                                   last_stage_layers=6, sharding=["distributed-optimizer"],
                                   recompute=["full"]),
                              ["--decoder-first-pipeline-num-layers", "6",
                               "--decoder-last-pipeline-num-layers", "6"]),
    "no-bias-swiglu-fusion": (dict(bias_activation_fusion=False),
                              dict(tp=[2], pp=[1], sharding=["distributed-optimizer"]),
                              ["--no-bias-swiglu-fusion"]),
}


#: The cases whose setting the row's price does not depend on.
MATTERS_NOT = {"grad-bf16-megatron-fsdp", "fp16-gradients"}


@pytest.mark.parametrize("case", sorted(MEGATRON_CASES))
def test_megatron_job_setting_is_emitted_and_reads_back(case, tmp_path):
    job_options, search_options, words = MEGATRON_CASES[case]
    e, est, row = round_trip("megatron", "llama3-8b", 8, job_options, search_options, tmp_path,
                             matters=case not in MATTERS_NOT)
    assert contains(e.arguments, words), e.arguments
    assert e.text.count("\n") == len([w for w in e.arguments if w.startswith("--")])
    trn = est["training"]
    if "bf16_layers" in job_options:
        assert tuple(trn["bf16_layers"]) == job_options["bf16_layers"]
    if "recompute_modules" in job_options:
        assert (trn["recompute"], tuple(trn["recompute_modules"])) == ("selective",
                                                                      ("core_attn", "mlp"))
    if "exp_avg_dtype" in job_options:
        assert (trn["exp_avg_dtype"], trn["exp_avg_sq_dtype"]) == ("bf16", "bf16")
    if "overlap_p2p_comm" in job_options:
        assert trn["overlap_p2p_comm"] is False


def test_recompute_modules_are_written_on_selective_rows_only(tmp_path):
    """Megatron-core reads --recompute-modules under selective granularity only, and the search
    prices them there only: a full or no-recompute row is written without them, and reads
    back the same bytes and step time."""
    res = search(job("llama3-8b", recompute="selective", recompute_modules=("core_attn", "mlp")),
                 GPU, 8, global_batch_size=64, tp=[2], pp=[1],
                 sharding=["distributed-optimizer"], recompute=["selective", "full", "none"])
    seen = {}
    for i in res.order(fitting=False):
        row = res.row(int(i))
        if row["recompute"] in seen:
            continue
        seen[row["recompute"]] = True
        e = emit("megatron", row, res.space, 8, model="llama3-8b")
        assert ("--recompute-modules" in e.arguments) == (row["recompute"] == "selective")
        est = estimate("llama3-8b", e.read_back())
        assert est["bytes"] == bytes_json(res.exact(int(i))["bytes"])
        assert est["step_time_s"] == pytest.approx(row["step_time"], rel=1e-9)
    assert set(seen) == {"selective", "full", "none"}


def test_te_cross_entropy_is_refused_for_megatron_lm():
    """Megatron-LM's validate_args asserts ``not (args.cross_entropy_loss_fusion and
    args.cross_entropy_fusion_impl == 'te')`` (arguments.py:1697-1702 at d98e8a64dd), and
    without --cross-entropy-loss-fusion the impl is not used: no Megatron-LM launch runs
    Transformer Engine's loss, so a job holding it is refused in one line naming the field
    (a Megatron-Bridge recipe carries it: emitted as the recipe's overrides)."""
    res, _, row = best("llama3-8b", 8, dict(cross_entropy_fusion_impl="te"),
                       dict(tp=[2], pp=[1], sharding=["distributed-optimizer"]))
    with pytest.raises(NotExpressible) as why:
        emit("megatron", row, res.space, 8, model="llama3-8b")
    assert "cross_entropy_fusion_impl te" in str(why.value) and "\n" not in str(why.value)


def test_row_settings_megatron_lm_refuses_are_refused():
    """validate_args: --fp8-param-gather needs the distributed optimizer or FSDP, and
    megatron_optimizer refuses --use-precision-aware-optimizer without
    --use-distributed-optimizer (the search prices neither row; the writer refuses them all
    the same), and --first-last-layers-bf16 acts under FP8 or FP4 only."""
    ddp = {"sharding": "ddp", "recompute": "none"}
    for held, says in ((("fp8_param_gather", True),), "fp8_param_gather on a ddp row"), \
                      ((("precision_aware", True),), "precision_aware on a ddp row"):
        with pytest.raises(NotExpressible, match=says):
            megatron_held(NS(held=held, precision="fp8"), ddp)
    # fp32 gradients under --fp16: Megatron-LM's --accumulate-allreduce-grads-in-fp32, which
    # memsym reads over a MODEL as without effect (read_megatron_overrides): not written
    with pytest.raises(NotExpressible, match="grad_dtype fp32 under fp16"):
        megatron_held(NS(held=(("grad_dtype", "fp32"),), precision="fp16"), ddp)
    with pytest.raises(NotExpressible, match="bf16_layers 1/1 under bf16"):
        megatron_held(NS(held=(("bf16_layers", (1, 1)),), precision="bf16"), ddp)


def test_deepspeed_zero_buckets_are_emitted_and_read_back(tmp_path):
    """zero_buckets as DeepSpeed's zero_optimization keys: reduce_bucket_size and
    stage3_prefetch_bucket_size [elements] as they are, no IPG buffer as
    contiguous_gradients false (stage_1_and_2.py setup_buckets allocates it only with them)."""
    buckets = (("reduce_bucket_size", 10**8), ("stage3_prefetch_bucket_size", 2 * 10**7),
               ("ipg_buffers", 0))
    e, est, _ = round_trip("deepspeed", "llama2-7b", 8,
                           dict(framework="deepspeed", sharding="zero2", zero_buckets=buckets),
                           dict(tp=[1], pp=[1], cp=[1], vpp=[1], sharding=["zero2"],
                                recompute=["none"]), tmp_path)
    zero = json.loads(e.text)["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"],
            zero["contiguous_gradients"]) == (10**8, 2 * 10**7, False)


def test_deepspeed_refuses_an_ipg_count_its_config_cannot_give():
    # overlap_comm on: two IPG buffers with contiguous_gradients (setup_buckets), none without
    space = NS(held=(("zero_buckets", (("ipg_buffers", 1),)),))
    with pytest.raises(NotExpressible, match="ipg_buffers 1"):
        deepspeed_held(space, True)
    assert deepspeed_held(NS(held=(("zero_buckets", (("ipg_buffers", 2),)),)), True) == {}


def test_torchtitan_compiled_loss_and_loss_parallel_are_emitted_and_read_back(tmp_path):
    e, est, _ = round_trip("torchtitan", "llama3-8b", 8,
                           dict(framework="torchtitan", compiled_loss=True, loss_parallel=False,
                                sharding="fsdp"),
                           dict(tp=[2], pp=[1], recompute=["full"]), tmp_path)
    toml = tomllib.loads(e.text)
    assert toml["compile"] == {"enable": True, "components": ["loss"]}
    assert toml["parallelism"]["disable_loss_parallel"] is True
    assert (est["training"]["compiled_loss"], est["training"]["loss_parallel"]) == (True, False)


def test_torchtitan_refuses_what_its_config_cannot_spell():
    # whether per-op SAC saves the SDPA output is the torchtitan version's and GPU's
    # (_save_list), no job-TOML key: refused, naming the field
    res, _, row = best("llama3-8b", 8, dict(framework="torchtitan", recompute="selective-op",
                                            sac_saves_attention=False, sharding="fsdp"),
                       dict(tp=[1], pp=[1], recompute=["selective-op"]))
    with pytest.raises(NotExpressible) as why:
        emit("torchtitan", row, res.space, 8, model="llama3-8b")
    assert "sac_saves_attention False" in str(why.value) and "\n" not in str(why.value)


# ---------------------------------------------------------------------------------------------
# the tables themselves
# ---------------------------------------------------------------------------------------------
def test_every_held_field_is_spelled_or_refused_for_megatron():
    assert set(MEGATRON_HELD) | set(REFUSED["megatron"]) == set(HELD_FIELDS)
    assert not set(MEGATRON_HELD) & set(REFUSED["megatron"])


def test_megatron_spellings_are_megatron_lm_arguments():
    # every dest written is one of Megatron-LM's own (the generated argparse dump of
    # arguments.py at d98e8a64dd), found by inverting its table, never a guessed name
    dests = {dest for dest, _, _ in FLAGS.values()}
    for field, (written, _) in MEGATRON_HELD.items():
        assert set(written) <= dests, field
    for option, dest, const in (("--fp8-param-gather", "fp8_param_gather", True),
                                ("--grad-reduce-in-bf16", "grad_reduce_in_bf16", True),
                                ("--no-overlap-p2p-communication", "overlap_p2p_comm", False),
                                ("--no-create-attention-mask-in-dataloader",
                                 "create_attention_mask_in_dataloader", False),
                                ("--exp-avg-dtype", "exp_avg_dtype", None)):
        assert megatron_flag(dest, const) == option
        assert FLAGS[option][0] == dest


def test_config_frameworks_spell_only_their_own():
    assert set(TORCHTITAN_HELD) == {"compiled_loss", "compiled_model", "loss_parallel"}
    assert set(DEEPSPEED_HELD) == {"zero_buckets"}


# ---------------------------------------------------------------------------------------------
# the command line: a job's search, emitted and read back
# ---------------------------------------------------------------------------------------------
def as_json(capsys, *argv):
    code = main([str(a) for a in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1) and out, err
    return json.loads(out)


@pytest.mark.parametrize("extra, words", [
    ((), ["--fp8-param-gather"]),
    (("--first-last-layers-bf16",), ["--fp8-param-gather", "--first-last-layers-bf16",
                                     "--num-layers-at-start-in-bf16", "1",
                                     "--num-layers-at-end-in-bf16", "1"]),
])
def test_the_issue_commands_emit_the_jobs_settings(capsys, extra, words):
    rows = as_json(capsys, "search", "llama3-8b", "--fp8-format", "hybrid", "--fp8-recipe",
                   "tensorwise", "--fp8-param-gather", "--use-distributed-optimizer", *extra,
                   "--gpu", GPU, "--gpus", 8, "--global-batch-size", 64, "--top", 1,
                   "--emit", "megatron")
    row = rows[0]
    assert contains(row["emit"]["arguments"], words), row["emit"]["arguments"]
    back = shlex.split(row["emit"]["read_back"])
    assert back.count("--fp8-param-gather") == 1         # said once, by the layout
    est = as_json(capsys, *back[1:-1])
    assert est["bytes"] == row["bytes"]
    assert est["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)


#: A Megatron-LM argument file of Llama 3 8B holding settings of its own (FP8 parameters,
#: bf16 gradients, the precision-aware optimizer, the modules recomputed, BF16 end layers,
#: the native fused loss, which is no held setting and stays the job's word).
ARGS = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --ffn-hidden-size 14336 --swiglu --seq-length 4096 "
        "--max-position-embeddings 8192 --position-embedding-type rope --normalization RMSNorm "
        "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 "
        "--tokenizer-type NullTokenizer --micro-batch-size 1 --global-batch-size 64 --bf16 "
        "--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather --grad-reduce-in-bf16 "
        "--use-precision-aware-optimizer --exp-avg-dtype bf16 --recompute-granularity selective "
        "--recompute-modules core_attn mlp --first-last-layers-bf16 "
        "--num-layers-at-end-in-bf16 2 --cross-entropy-loss-fusion "
        "--tensor-model-parallel-size 2 --use-distributed-optimizer --world-size 8")


def test_an_argument_file_job_is_relaunched_with_its_settings_once(capsys, tmp_path):
    path = tmp_path / "args.txt"
    path.write_text(ARGS + "\n", encoding="utf-8")
    rows = as_json(capsys, "search", "--args-file", path, "--gpu", GPU, "--gpus", 8,
                   "--top", 2, "--emit", "megatron")
    for row in rows:
        words = row["emit"]["arguments"]
        options = [w for w in words if w.startswith("--")]
        assert len(options) == len(set(options)), words       # each argument once
        for part in (["--fp8-param-gather"], ["--grad-reduce-in-bf16"],
                     ["--use-precision-aware-optimizer"], ["--exp-avg-dtype", "bf16"],
                     ["--recompute-modules", "core_attn", "mlp"],
                     ["--num-layers-at-end-in-bf16", "2"], ["--cross-entropy-loss-fusion"]):
            assert contains(words, part), part
        back = shlex.split(row["emit"]["read_back"])
        est = as_json(capsys, *back[1:-1])
        assert est["bytes"] == row["bytes"]
        assert est["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)


def test_an_eager_quick_geglu_is_spelled_by_the_gelu_fusion_flag(tmp_path):
    """GPT-OSS's clamped gated unit is Megatron's quick-GeGLU, whose fusion is
    ``args.bias_gelu_fusion``'s (argument_utils.py:314-319 at d98e8a64dd: bias_swiglu_fusion
    only under --swiglu): an eager one is written --no-bias-gelu-fusion."""
    e, _, _ = round_trip("megatron", "gpt-oss-120b", 32, dict(bias_activation_fusion=False),
                         dict(tp=[1], pp=[4], vpp=[1], ep=[8], uneven=False,
                              sharding=["distributed-optimizer"], recompute=["full"]), tmp_path)
    assert "--no-bias-gelu-fusion" in e.arguments and "--no-bias-swiglu-fusion" not in e.arguments


#: A DeepSpeed config of ZeRO-2 with its own buckets (1e8-element reduce bucket, no contiguous
#: gradient buffer), and a torchtitan job with a compiled loss and loss parallel off.
DS = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
      "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
      "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 100000000,
                            "contiguous_gradients": False}}
TT = ('[parallelism]\ntensor_parallel_degree = 2\ndata_parallel_shard_degree = 4\n'
      'disable_loss_parallel = true\n[training]\nseq_len = 4096\nlocal_batch_size = 2\n'
      'global_batch_size = 64\n[compile]\nenable = true\ncomponents = ["loss"]\n'
      '[activation_checkpoint]\nmode = "full"\n')


@pytest.mark.parametrize("framework, model, option, name, text, spelled", [
    ("deepspeed", "llama2-7b", "--deepspeed-config", "ds.json", json.dumps(DS),
     ('"reduce_bucket_size": 100000000', '"contiguous_gradients": false')),
    ("torchtitan", "llama3-8b", "--torchtitan-config", "tt.toml", TT,
     ("disable_loss_parallel = true", 'components = ["loss"]')),
])
def test_a_config_job_is_emitted_with_its_settings(capsys, tmp_path, framework, model, option,
                                                   name, text, spelled):
    config = tmp_path / name
    config.write_text(text, encoding="utf-8")
    rows = as_json(capsys, "search", model, option, config, "--gpu", GPU, "--gpus", 8,
                   "--top", 2, "--emit", framework, "--emit-dir", tmp_path / "out")
    for row in rows:
        written = open(row["emit"]["file"], encoding="utf-8").read()
        assert all(part in written for part in spelled), written
        est = as_json(capsys, *shlex.split(row["emit"]["read_back"])[1:-1])
        assert est["bytes"] == row["bytes"]
        assert est["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9)


def test_the_search_keys_its_stage_counts_by_the_bf16_layers():
    """The search's stage counts (memsym.search.templates.stage_count_items) are shared
    across searches in one process: a search of an all-FP8 job first, then one with the first
    layer and the last two in BF16, must not reuse the first's FP8 weight count.  By hand:
    Llama 3 8B's 32 decoder layers are alike, so the BF16 job keeps the FP8 copies of 29 of
    them, 29/32 of the all-FP8 job's (t = 2, one stage)."""
    def fp8_weights(**held):
        res, i, _ = best("llama3-8b", 8, dict(FP8, **held),
                         dict(tp=[2], pp=[1], sharding=["distributed-optimizer"],
                              recompute=["none"]))
        return res.exact(i)["bytes"]["fp8_weights"]

    plain = fp8_weights()
    assert fp8_weights(bf16_layers=(1, 2)) * 32 == plain * 29
