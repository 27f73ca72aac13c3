"""DeepSpeed Ulysses (``sequence_parallel_size``, ALST) read as context parallelism c with the
``a2a`` method (issue 32).

The oracle is DeepSpeed 0.19.6 (deepspeedai/DeepSpeed ``edaa722126``), read by hand:

* ``runtime/config.py:713-724``: with Ulysses' mpu (or without one, the config's own
  ``sequence_parallel_size``) the batch rule's world size is ``world / sp``, and
  ``_batch_assertion`` asks train_batch_size = micro-batch x accumulation x that;
* ``deepspeed/__init__.py:203-206``: ``data_parallel_size`` beside ``sequence_parallel_size``
  builds a (data, sequence) mesh whose data dimension the rule counts (``config.py:719-720``);
* ``runtime/sequence_parallel/parallel_state_sp.py:29-31``: sp must divide the world;
* ``runtime/sequence_parallel/ulysses_sp.py``: ``UlyssesSPDataLoaderAdapter.refill`` gives each
  SP rank ``seq_length // sp`` tokens and refuses a sequence sp does not divide (:697-698);
  ``UlyssesSPAttentionHF.__init__`` refuses heads sp does not divide and KV heads neither
  divisible by sp nor dividing it (:145-150), and replicates each KV head sp / kv_heads times
  where sp is larger (:131-136, :182-184), which memsym refuses;
* ``runtime/engine.py:1898-1900``: AutoEP with ZeRO-3 refuses sequence parallelism;
* ``ulysses_sp.py:461-468``: ``register_with_transformers`` refuses eager attention.
"""

from __future__ import annotations

import json

import pytest

from memsym.errors import InvalidValueError
from memsym.frameworks import FRAMEWORK
from memsym.job import job
from memsym.readers.deepspeed import read_deepspeed_config
from memsym.readers.jobs import deepspeed_job
from memsym.symbols import a, b, c, d_h, g, s, t
from memsym.terms.context_parallel import cp_method, ulysses_attention
from memsym.training import job_memory
from in_process import run

BASE = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
        "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}


# ---------------------------------------------------------------------------------------------
# the batch rule: world / sp data-parallel ranks
# ---------------------------------------------------------------------------------------------
def test_the_batch_rule_counts_world_over_sp():
    # 8 GPUs, sp 4: DeepSpeedConfig.world_size = 8 / 4 = 2 (config.py:713-724); the batch
    # 1 x 2 x 2 = 4 sequences a step, two SP groups of four GPUs each reading one sequence
    r = read_deepspeed_config({**BASE, "sequence_parallel_size": 4}, 8)
    assert r["layout"] == {"d": 2, "e": None, "t": 1, "c": 4}
    assert r["training"]["global_batch_size"] == 4
    # train_batch_size 16 and micro-batch 2 on 8 GPUs at sp 2: d = 4, accumulation
    # 16 // 2 // 4 = 2 (_set_batch_related_parameters)
    r = read_deepspeed_config({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                               "sequence_parallel_size": 2}, 8)
    assert (r["layout"]["d"], r["training"]["gradient_accumulation_steps"]) == (4, 2)
    # no world size: d = 8 / (1 x 2) = 4 from the triple, the job's world d c = 16
    r = read_deepspeed_config({**BASE, "train_batch_size": 8, "sequence_parallel_size": 4})
    assert r["layout"]["d"] == 4
    assert deepspeed_job(r, "llama3-8b", seq_length=8192).world_size == 16


def test_a_batch_counting_every_gpu_fails_deepspeeds_rule():
    # 16 = 1 x 2 x 8 counts all 8 GPUs; DeepSpeed's rule wants 1 x 2 x 8/4 = 4
    with pytest.raises(InvalidValueError, match="batch rule fails"):
        read_deepspeed_config({**BASE, "train_batch_size": 16, "sequence_parallel_size": 4}, 8)


def test_a_data_sequence_mesh_is_its_data_dimension():
    cfg = {**BASE, "sequence_parallel_size": 4, "data_parallel_size": 2}
    r = read_deepspeed_config(cfg, 8)
    assert r["layout"]["d"] == 2 and "data_parallel_size" not in r["ignored"]
    with pytest.raises(InvalidValueError, match="not the world size 16"):
        read_deepspeed_config(cfg, 16)
    # without sequence parallelism DeepSpeed builds no mesh from it: ignored
    assert "data_parallel_size" in read_deepspeed_config(
        {**BASE, "data_parallel_size": 2}, 8)["ignored"]


def test_the_auto_batch_is_accelerates_over_world_over_sp():
    # the Trainer fills world x micro x accumulation; Accelerate writes it // sp, then
    # micro x accumulation x its data-parallel size (accelerate 1.16.0 accelerator.py:2191-2197,
    # :2321-2328): 2 x 1 x 8 / 4 = 4
    r = read_deepspeed_config({**BASE, "train_batch_size": "auto", "sequence_parallel_size": 4},
                              8)
    said = {k: (v, why) for k, v, why in r["defaults"]}
    assert said["train_batch_size"][0] == 4 and "accelerator.py" in said["train_batch_size"][1]


# ---------------------------------------------------------------------------------------------
# per-GPU memory: the c-split activations, the all-to-all's buffers
# ---------------------------------------------------------------------------------------------
def test_per_gpu_activations_are_the_c_split_ones():
    # UlyssesSPDataLoaderAdapter gives each rank s/c tokens, and every layer but the attention
    # kernel runs on them; the kernel's re-sharded Q, K, V hold s tokens of a/c heads, the
    # bytes of s/c tokens of a heads: every saved activation is the s/c job's, and one more:
    # the kernel saved its own output, o_proj the all-to-all's copy of it (ulysses_sp.py
    # _partition_global_sequence), 2 bytes x 8192 tokens x 4096 per layer, 32 layers
    uly = job_memory(deepspeed_job(read_deepspeed_config({**BASE, "sequence_parallel_size": 4},
                                                         8), "llama3-8b", seq_length=32768))
    one = job_memory(deepspeed_job(read_deepspeed_config(BASE, 2), "llama3-8b",
                                   seq_length=8192))
    keys = ("layer_activations", "embedding_activations", "output_activations")
    got = {x.key: x.expr.subs(uly.values) for x in uly.total.terms if x.key in keys}
    want = {x.key: x.expr.subs(one.values) for x in one.total.terms if x.key in keys}
    assert set(got) == set(keys)
    assert got["layer_activations"] == want["layer_activations"] + 32 * 2 * 8192 * 4096
    assert {k: got[k] for k in keys[1:]} == {k: want[k] for k in keys[1:]}
    # ZeRO-3 partitions over every GPU, the sequence-data-parallel group (engine.py:2351):
    # 2 bytes x 8.03e9 parameters / 8
    # (Meta-Llama-3-8B's 8,030,261,248 parameters)
    assert uly.grouped()["weights"] == 2 * 8030261248 // 8


def test_the_all_to_all_buffers_by_hand():
    # llama3-8b, b = 1, s = 32768, c = 4: Q = 2 x 8192 x 32 x 128 = 67108864 bytes,
    # K = 2 x 8192 x 8 x 128 = 16777216; F = 4Q + 2K, B = 2Q + 2K
    f, bw = ulysses_attention(g)
    at = {b: 1, s: 32768, c: 4, t: 1, a: 32, g: 8, d_h: 128}
    assert f.expr.subs(at) == 4 * 67108864 + 2 * 16777216
    assert bw.expr.subs(at) == 2 * 67108864 + 2 * 16777216
    assert cp_method("deepspeed", None) == "a2a"
    assert FRAMEWORK["deepspeed"].cp_attention == ("deepspeed-ulysses", ("a2a",))


# ---------------------------------------------------------------------------------------------
# refusals, one line each
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cfg,world,seq,said", [
    ({"sequence_parallel_size": 4}, 6, 8192, "does not divide the world size 6"),
    ({"sequence_parallel_size": 3}, 6, 8193, "must divide the attention heads"),     # 32 % 3
    ({"sequence_parallel_size": 16}, 16, 8192, "replicates each KV head c/8 times"),  # g = 8
    ({"sequence_parallel_size": 4}, 8, 8194, "must divide the sequence length s=8194"),
    ({"sequence_parallel_size": 2, "tensor_parallel": {"autotp_size": 2}}, 8, 8192,
     "Ulysses beside AutoTP is not modelled"),
    ({"sequence_parallel_size": 2, "expert_parallel": {"enabled": True, "autoep_size": 2}}, 8,
     8192, "AutoEP with ZeRO Stage 3 beside sequence parallelism"),
    ({"sequence_parallel_size": 0}, 8, 8192, "sequence_parallel_size must be between 1"),
])
def test_refusals_are_one_line(cfg, world, seq, said):
    with pytest.raises(InvalidValueError) as err:
        deepspeed_job(read_deepspeed_config({**BASE, **cfg}, world), "llama3-8b",
                      seq_length=seq)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_eager_attention_is_refused_as_ulysses_refuses_it():
    # register_with_transformers: "eager" needs a 4D mask, refused (ulysses_sp.py:461-468)
    with pytest.raises(InvalidValueError, match="refuses eager attention"):
        job("llama3-8b", framework="deepspeed", c=2, d=4, flash_attention=False)
    job("llama3-8b", framework="deepspeed", c=1, d=4, flash_attention=False)    # no Ulysses


def test_deepspeeds_cp_is_the_all_to_all_only():
    with pytest.raises(InvalidValueError, match="runs a2a, not p2p"):
        job("llama3-8b", framework="deepspeed", c=2, d=4, cp_comm_type="p2p")
    given = job("llama3-8b", framework="deepspeed", c=2, d=4).training.comm.cp_comm_type
    assert cp_method("deepspeed", given) == "a2a"       # unset: the framework's only method


# ---------------------------------------------------------------------------------------------
# the command line: estimate, the Trainer launch, search --emit
# ---------------------------------------------------------------------------------------------
def test_estimate_reads_it_with_notes(capsys, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({**BASE, "sequence_parallel_size": 4}), encoding="utf-8")
    code, out, err = run(capsys, "estimate", "llama3-8b", "--deepspeed-config", cfg,
                         "--world-size", 8, "--seq-length", 32768, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert (rep["layout"]["cp"], rep["layout"]["dp"], rep["layout"]["world_size"]) == (4, 2, 8)
    notes = " ".join(rep["notes"])
    assert "Ulysses" in notes and "UlyssesSPAttentionHF" in notes and "cp_comm_type a2a" in notes
    assert "8 GPUs / sequence_parallel_size 4" in notes


def _trainer_launch(capsys, tmp_path, config: dict) -> dict:
    """The JSON estimate of an 8-GPU Trainer launch (per-device batch 1, accumulation 2) with
    DeepSpeed config ``config``, read as c = 4 Ulysses ranks, d = 2."""
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    code, out, err = run(capsys, "estimate", "--json", "--", "deepspeed", "--num_gpus", 8,
                         "train.py", "--model_name_or_path", "llama3-8b", "--deepspeed", cfg,
                         "--bf16", "--per_device_train_batch_size", 1,
                         "--gradient_accumulation_steps", 2, "--seq-length", 32768)
    assert code == 0, err
    rep = json.loads(out)
    assert (rep["layout"]["cp"], rep["layout"]["dp"]) == (4, 2)
    return rep


def test_a_trainer_launch_reads_it_with_accelerates_batch(capsys, tmp_path):
    rep = _trainer_launch(capsys, tmp_path, {
        "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
        "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3}, "sequence_parallel_size": 4})
    # 1 x 2 x 8 / 4 = 4 sequences a step (Accelerate's train_batch_size)
    assert {x["option"]: x["value"] for x in rep["defaults"]}["train_batch_size"] == 4
    assert any("ParallelismConfig" in n and "sp_size=4" in n for n in rep["notes"])


def test_a_trainer_launchs_own_train_batch_is_replaced_as_accelerate_replaces_it(capsys,
                                                                                   tmp_path):
    # the Trainer's fill_match wants 8 GPUs x 1 x 2 = 16 (trainer_config_process); Accelerate
    # then writes 1 x 2 x 8 / 4 = 4 under Ulysses (accelerator.py:2321-2328), DeepSpeed's rule
    rep = _trainer_launch(capsys, tmp_path,
                          {**BASE, "train_batch_size": 16, "sequence_parallel_size": 4})
    assert any("train_batch_size replaced" in n for n in rep["notes"])


def test_search_emits_what_estimate_reads_back(capsys, tmp_path):
    code, out, err = run(capsys, "search", "llama3-8b", "--gpu", "h100-80gb", "--seq-length",
                         49152, "--gpus", 8, "--framework", "deepspeed", "--cp", 8,
                         "--recompute", "none", "--sharding", "zero3", "--global-batch-size", 8,
                         "--emit", "deepspeed", "--top", 1)
    assert code == 0, err
    head, _, body = out.partition("\n{")
    cfg = json.loads("{" + body)
    assert cfg["sequence_parallel_size"] == 8 and cfg["train_batch_size"] == 8
    assert "UlyssesSPAttentionHF.register_with_transformers" in head
    total = int(head.split("# layout 1:")[1].split(": ")[1].split(" bytes")[0])
    path = tmp_path / "layout_1.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    code, out, err = run(capsys, "estimate", "llama3-8b", "--deepspeed-config", path,
                         "--world-size", 8, "--seq-length", 49152, "--gpu", "h100-80gb", "--json")
    assert code == 0, err
    assert json.loads(out)["bytes"]["total"] == total
