"""Framework behaviour as data (issue 29): one record per framework, no ``framework ==`` branches.

:mod:`memsym.frameworks` holds what each framework does differently.  These tests check the
table against the code that reads the frameworks' own inputs (the readers' scheme tables, the
readers' refusals) and count the string comparisons of a framework name left in the package:
the allow-list below may only shrink (a test fails when a module has fewer than listed, so a
conversion lowers its number), and the goal is an empty one.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import pathlib

import pytest
import sympy as sp

from memsym.cli import main
from memsym.errors import InvalidValueError, UnknownNameError
from memsym.frameworks import FRAMEWORK, FRAMEWORK_SCHEMES, Framework, framework
from memsym.job import REPORTED_DEFAULTS, Layout, Training, job
from memsym.readers.jobs import DEEPSPEED_SCHEMES
from memsym.symbols import V, b, c, h, s, t
from memsym.timing.step_settings import overlap_of
from memsym.training import phase_transients, stage_activations
from memsym.vocabulary import FRAMEWORKS, SCHEMES
from source_trees import parsed

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "memsym"

#: module -> comparisons of a framework name (``x == "torchtitan"``, ``x != "megatron"``, ``x in
#: ("deepspeed", ...)``) still in it.  May only shrink.
ALLOWED = {
    # the log reader tells the log formats apart (Megatron-Bridge's among them), by their lines
    "memsym/readers/logs.py": 2,
    # TrainingArguments' own field and launcher words ("--deepspeed", "deepspeed train.py"),
    # compared as the words of a Hugging Face Trainer launch, not as memsym's framework
    "memsym/readers/hf_trainer.py": 4,
    # TrainingArguments' --deepspeed beside --fsdp (the Trainer refuses both), a launch's word
    "memsym/readers/hf_fsdp.py": 1,
}


def _framework_comparisons(tree) -> int:
    """Comparisons with a framework's name as a string constant on either side."""
    names = set(FRAMEWORKS)

    def named(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Compare)
               and any(named(n) for n in (node.left, *node.comparators)))


#: the package's modules, as the counts name them (parametrizes the test at collection; the
#: trees are walked only in the worker that runs the tests: :func:`counts`)
MODULES = {p.relative_to(PACKAGE.parent).as_posix(): p for p in sorted(PACKAGE.rglob("*.py"))}


@functools.lru_cache(maxsize=None)
def counts() -> dict[str, int]:
    """module -> its comparisons of a framework's name (:func:`_framework_comparisons`)."""
    return {name: _framework_comparisons(parsed(p)) for name, p in MODULES.items()}


def test_the_counter_sees_a_branch():
    """The counter finds the comparisons it is meant to find (so an empty count can fail)."""
    tree = ast.parse('if t.framework == "torchtitan" or "deepspeed" != f or f in ("megatron",):'
                     '\n    pass\nif f == "fsdp":\n    pass')
    assert _framework_comparisons(tree) == 3


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_new_framework_branch(module):
    allowed, found = ALLOWED.get(module, 0), counts()[module]
    assert found <= allowed, (
        f"{module} compares a framework's name {found} times (allowed {allowed}): read "
        "the behaviour from memsym.frameworks.FRAMEWORK instead")


def test_the_allow_list_only_shrinks():
    stale = {m: (n, counts().get(m, 0)) for m, n in ALLOWED.items() if counts().get(m, 0) < n}
    assert not stale, f"lower these allowances to the module's count (allowed, now): {stale}"


def test_the_table_names_the_vocabulary_frameworks():
    assert tuple(FRAMEWORK) == FRAMEWORKS
    for name, record in FRAMEWORK.items():
        assert record.name == name
        assert set(record.schemes) <= set(SCHEMES) and record.default_scheme in record.schemes
        assert set(record.overlap_schemes) <= set(record.schemes)


def test_deepspeed_runs_exactly_the_stages_its_config_takes():
    """DeepSpeed's ``zero_optimization.stage`` 0..3 (``deepspeed/runtime/zero/config.py``), read
    by the DeepSpeed reader, are the schemes the table says DeepSpeed runs."""
    assert set(FRAMEWORK["deepspeed"].schemes) == set(DEEPSPEED_SCHEMES.values())


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_each_framework_default_scheme_is_what_a_job_gets(name, capsys):
    """A job of each framework with no sharding given is sharded as the table's default."""
    code = main(["estimate", "llama2-7b", "--framework", name, "--world-size", "8", "--json"])
    assert code in (0, 1)
    got = json.loads(capsys.readouterr().out)
    applied = {d["option"]: d["value"] for d in got["defaults"]}
    assert applied["sharding"] == FRAMEWORK[name].default_scheme


def test_unknown_framework_is_one_line():
    with pytest.raises(UnknownNameError, match="framework"):
        framework("megatorn")


def test_every_field_is_documented():
    """Each field of the record has its entry (and so its source) in the class docstring."""
    doc = Framework.__doc__
    missing = [f.name for f in dataclasses.fields(Framework) if f"\n    {f.name} : " not in doc]
    assert not missing, f"document these Framework fields with their source: {missing}"


def test_the_schemes_by_framework_read_by_the_search():
    """:data:`FRAMEWORK_SCHEMES` lists the frameworks that run fewer than every scheme."""
    assert FRAMEWORK_SCHEMES == {"deepspeed": ("ddp", "zero1", "zero2", "zero3"),
                                 "torchtitan": ("fsdp", "ddp")}
    with pytest.raises(InvalidValueError, match="deepspeed shards with ddp or zero1"):
        job("llama3-8b", d=8, framework="deepspeed", sharding="fsdp")


# ---------------------------------------------------------------------------------------------
# each field as the code reads it: a job of each framework does what the frameworks' sources
# say (the expectations are the sources', not the table's, so a wrong field fails)
# ---------------------------------------------------------------------------------------------
def _keys(j) -> set:
    return {term.key for terms in phase_transients(j, 0).values() for term in terms}


@pytest.mark.parametrize("name, scheme, on", [
    # Megatron-LM arguments.py: --overlap-grad-reduce is store_true (off unless given)
    ("megatron", "ddp", False), ("megatron", "distributed-optimizer", False),
    # DeepSpeed zero/config.py: overlap_comm defaults to True for stage 3 only
    ("deepspeed", "zero1", False), ("deepspeed", "zero2", False), ("deepspeed", "zero3", True),
    # torchtitan: FSDP2 reduce-scatters in the backward, torch DDP all-reduces its buckets there
    ("torchtitan", "fsdp", True), ("torchtitan", "ddp", True)])
def test_overlaps_by_default(name, scheme, on):
    """A job that sets no overlap overlaps as its framework does with nothing set."""
    o = overlap_of(job("llama3-8b", d=8, framework=name, sharding=scheme).training)
    assert o.grad_reduce is on and FRAMEWORK[name].overlaps_by_default(scheme) is on


def test_tp_comm_overlap_is_userbuffers_except_under_torchtitan():
    # Transformer Engine's userbuffers split the GEMMs; torchtitan's async TP is torch's
    assert overlap_of(job("llama3-8b", t=2, d=4, sequence_parallel=True,
                          tp_comm_overlap=True).training).tp_comm_split
    assert not overlap_of(Training(framework="torchtitan", sharding="fsdp")).tp_comm_split


def test_deepspeed_autotp_refuses_sequence_parallelism():
    # AutoTP's LinearAllreduce all-reduces its output and LinearLayer takes the whole input
    # (DeepSpeed edaa722126 module_inject/layers.py:770-776, 851-869): no sequence split
    with pytest.raises(InvalidValueError, match="AutoTP"):
        job("llama3-8b", t=2, d=4, framework="deepspeed", sequence_parallel=True)


@pytest.mark.parametrize("name", ["deepspeed", "torchtitan"])
def test_megatron_options_are_refused_elsewhere(name):
    with pytest.raises(InvalidValueError, match=f"not a {name} option"):
        job("llama3-8b", t=2, d=4, framework=name, sequence_parallel=name != "deepspeed",
            tp_comm_overlap=True)
    with pytest.raises(InvalidValueError, match=f"not a {name} option"):
        job("llama3-8b", d=8, framework=name, recompute="selective",
            recompute_modules=["core_attn"])
    assert FRAMEWORK[name].megatron_options is False


def test_torchtitan_refuses_dropout_and_builds_none():
    """torchtitan's models have no dropout layers; Megatron-LM and DeepSpeed keep masks."""
    with pytest.raises(InvalidValueError, match="no dropout layers"):
        job("llama3-8b", d=8, framework="torchtitan", dropout=True)
    assert job("llama3-8b", d=8, framework="torchtitan").training.memory.dropout is False
    for name in ("megatron", "deepspeed"):
        assert job("llama3-8b", d=8, framework=name, dropout=True).training.memory.dropout


def test_only_megatron_takes_the_preset_recipe():
    """Megatron-Bridge's Llama-3 recipe trains without dropout; DeepSpeed runs the model's own
    code: a preset's transformers class (LlamaForCausalLM applies attention_dropout only, 0.0
    in its config.json), and Megatron-LM's 0.1 dropouts for a model without one (GPT-3)."""
    kept = {name: job("llama3-70b", t=8, framework=name).training.memory.dropout
            for name in ("megatron", "deepspeed")}
    assert kept == {"megatron": False, "deepspeed": False}
    assert job("gpt3-175b", t=8, framework="deepspeed").training.memory.dropout is True
    assert [FRAMEWORK[n].recipe_defaults for n in FRAMEWORKS] == [True, False, False]


@pytest.mark.parametrize("name, bounded", [("megatron", True), ("deepspeed", False),
                                           ("torchtitan", True)])
def test_rope_positions_bound_the_sequence_except_in_transformers_code(name, bounded):
    """Megatron-LM asserts max_position_embeddings >= seq_length; transformers' Llama computes
    RoPE's angles for any position (LlamaRotaryEmbedding.forward), so DeepSpeed runs longer."""
    run = lambda: job("llama2-7b", d=8, framework=name, seq_length=8192)   # noqa: E731
    if bounded:
        with pytest.raises(InvalidValueError, match="max_position_embeddings=4096"):
            run()
    else:
        assert run().training.batch.seq_length == 8192


@pytest.mark.parametrize("name, allowed", [("megatron", False), ("torchtitan", True)])
def test_every_nth_block_checkpointing_is_torchtitans(name, allowed):
    """torchtitan's selective_ac_option = "N"; Megatron checkpoints uniform or block."""
    kw = dict(d=8, framework=name, recompute="full", recompute_method="every",
              recompute_num_layers=2)
    if allowed:
        assert job("llama3-8b", **kw).training.memory.recompute_method == "every"
    else:
        with pytest.raises(InvalidValueError, match="layer selective AC"):
            job("llama3-8b", **kw)


@pytest.mark.parametrize("name, sequence_parallel", [("megatron", False), ("deepspeed", False),
                                                     ("torchtitan", True)])
def test_torchtitan_tensor_parallelism_is_sequence_parallel(name, sequence_parallel):
    """apply_tp shards the norms over the sequence whatever the job says."""
    lay = job("llama3-8b", t=2, d=4, framework=name, sequence_parallel=False).layout
    assert lay.sequence_parallel is sequence_parallel


def test_torchtitan_splits_the_pipeline_itself():
    """generate_llm_fqn_per_model_part: Llama-3 405B's 126 layers with the embedding and the
    output counted as one layer each are 128 = 8 x 16, so the end stages hold 15 decoder layers."""
    lay = job("llama3-405b", t=8, p=8, framework="torchtitan").layout
    assert (lay.first_stage_layers, lay.last_stage_layers) == ((126 + 2) // 8 - 1,) * 2
    assert [FRAMEWORK[n].torch_pipelining for n in FRAMEWORKS] == [False, False, True]


def test_the_loss_and_the_gradients_as_each_framework_makes_them():
    """torchtitan: torch's cross-entropy on a .float() copy of the logits, loss_parallel at
    t > 1, zero_grad(set_to_none) before the step and its own embedding / output FSDP groups;
    Megatron-core's fused vocab-parallel cross-entropy (its per-token fp32 buffers) for Megatron;
    transformers' ForCausalLMLoss for DeepSpeed, which runs its model code (a .float() copy of
    the 16-bit logits, int64 labels; tests/test_hf_loss.py measures it).  Megatron's torch-FSDP2
    path keeps its gradients and its groups.  (The
    allocated count: the reserved and device counts keep the gradients' blocks in the
    reduce-scatter stream's pool, memsym.training.transients.stream_pools.)"""
    titan = _keys(job("llama3-8b", d=8, framework="torchtitan", global_batch_size=8,
                      metric="allocated"))
    assert {"logits_fp32_copy", "gradients_not_yet_made", "output_group_gathered"} <= titan
    assert "ce_per_token" not in titan
    keys = _keys(job("llama3-8b", d=8, framework="megatron", sharding="distributed-optimizer",
                     global_batch_size=8))
    assert "ce_per_token" in keys and "logits_fp32_copy" not in keys
    keys = _keys(job("llama3-8b", d=8, framework="deepspeed", sharding="zero1",
                     global_batch_size=8))
    assert {"logits_fp32_copy", "labels_int64", "log_softmax_grad_fp32"} <= keys
    assert "ce_per_token" not in keys
    fsdp = _keys(job("llama3-8b", d=8, framework="megatron", sharding="fsdp", global_batch_size=8))
    assert not {"gradients_not_yet_made", "output_group_gathered"} & fsdp
    # torch's DTensor loss_parallel at t > 1 (its exp of the shifted logits), unless disabled
    tp = dict(t=2, d=4, framework="torchtitan", global_batch_size=8)
    assert "shifted_fp32" in _keys(job("llama3-8b", **tp))
    assert "shifted_fp32" not in _keys(job("llama3-8b", loss_parallel=False, **tp))
    assert any("has effect only" in n for n in job("llama3-8b", t=2, d=4, global_batch_size=8,
                                                   loss_parallel=False).notes)


def test_torchtitan_output_layer_saves_its_gathered_input():
    """torch's ColwiseParallel saves the all-gathered input (2 s b h rather than Megatron's
    2 s b h / t) and its final RMSNorm runs in fp32: more than Megatron-LM's and DeepSpeed's
    output layer.  DeepSpeed's runs transformers' LlamaRMSNorm: Megatron's plus the fp32 copy,
    4 tau h / sigma (tests/test_hf_norms.py), and under AutoTP every rank holds all the fp32
    logits, 4 s b V / c rather than Megatron's 4 s b V / (c t): its output layer is
    colwise_gather_output (DeepSpeed edaa722126 module_inject/tp_plan_converter.py:48-50)."""
    def out(name):
        a = stage_activations(job("llama3-8b").model, Layout(t=2, d=4, sequence_parallel=True),
                              Training(framework=name, sharding="ddp", seq_length=4096))
        return next(t_ for t_ in a.terms if t_.key == "output_activations").expr
    mlm, ds, titan = (out(n) for n in FRAMEWORKS)
    gathered = 4 * s * b * V / c - 4 * s * b * V / (c * t)
    assert sp.simplify(ds - mlm - 4 * s * b * h / (c * t) - gathered) == 0 and titan - mlm > 0


def test_deepspeed_overlap_comm_adds_an_ipg_buffer():
    """DeepSpeed's setup_buckets allocates buf_1 beside buf_0 under overlap_comm: two
    reduce_bucket_size (5e8, its default) buffers of 2-byte gradients, else one."""
    def ipg(overlap):
        j = job("llama3-8b", d=8, framework="deepspeed", sharding="zero2",
                overlap_grad_reduce=overlap, global_batch_size=8)
        return [int(t_.expr) for t_ in phase_transients(j, 0)["backward"] if t_.key == "ipg_buckets"]
    assert (ipg(True), ipg(False)) == ([2 * 500_000_000 * 2], [500_000_000 * 2])


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_the_default_sharding_says_where_it_comes_from(name):
    applied = {k: (v, why) for k, v, why in job("llama3-8b", d=8, framework=name).defaults}
    assert applied["sharding"] == (FRAMEWORK[name].default_scheme,
                                   FRAMEWORK[name].default_scheme_source)
    assert FRAMEWORK["megatron"].default_scheme_source == REPORTED_DEFAULTS["sharding"]
    assert "stage 0" in FRAMEWORK["deepspeed"].default_scheme_source


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_the_default_attention_kernel_cites_the_framework_s_own_code(name):
    # each framework's model code picks its kernel: Megatron-core's --attention-backend auto,
    # transformers' attn_implementation "sdpa" (modeling_utils.py:1856 at 5.25.0) under
    # DeepSpeed, torchtitan's SDPA wrapper (cuDNN, flash, math: models/attention.py, v0.2.2)
    applied = {k: (v, why) for k, v, why in job("llama3-8b", d=8, framework=name).defaults}
    assert applied["flash_attention"] == (True, FRAMEWORK[name].attention_source)
    assert FRAMEWORK["megatron"].attention_source == REPORTED_DEFAULTS["flash_attention"]
    assert "sdpa" in FRAMEWORK["deepspeed"].attention_source
    assert "ScaledDotProductAttentionWrapper" in FRAMEWORK["torchtitan"].attention_source
