"""Megatron-Bridge recipes (issue 32): Muon's ``optimizer.muon_*`` fields,
``model.mla_down_proj_fusion``, and the ``use_distributed_optimizer`` / ``overlap_param_gather``
flags Bridge syncs between its ``ddp`` and ``optimizer`` sections.

Every expected value is read by hand from the source at Megatron-Bridge 067f987df0 and its
pinned Megatron-LM 2a75ac12c5 (``3rdparty/Megatron-LM``), file:line in each test:

* recipes/kimi/h100/kimi_k2.py:200 calls ``_apply_kimi_k2_optimizer(cfg, "muon")``, whose
  muon branch (:66-75) builds ``distributed_muon_with_cosine_annealing(...)`` with its defaults
  (recipes/utils/optimizer_utils.py:23 ``muon_use_nesterov=True``, :26 ``muon_num_ns_steps=5``,
  :27 ``muon_tp_mode="blockwise"``, passed at :86, :89, :90; :79 ``optimizer="dist_muon"``;
  no ``use_distributed_optimizer``) and sets ``cfg.ddp.use_distributed_optimizer = False``
  (:74) and ``cfg.ddp.overlap_param_gather = False`` (:75);
* Megatron-LM 2a75ac12c5 ``megatron/core/optimizer/optimizer_config.py``: ``muon_nesterov``
  False (:266), ``muon_num_ns_steps`` 5 (:279), ``muon_tp_mode`` "blockwise" (:282),
  ``use_distributed_optimizer`` False (:324), ``overlap_param_gather`` False (:333);
* recipes/common.py:53-58: ``_pretrain_common``'s optimizer is
  ``distributed_fused_adam_with_cosine_annealing``, an OptimizerConfig with ``optimizer="adam"``
  (optimizer_utils.py:141) and ``use_distributed_optimizer=True`` (:150);
* training/config.py:2101-2137 ``_validate_and_sync_distributed_optimizer_settings``: when
  either section's ``use_distributed_optimizer`` (``overlap_param_gather``) is True, both are
  set True (a warning, never an error).
"""

from __future__ import annotations

import json

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.readers._bridge_recipes import RECIPES
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe

KIMI = "kimi_k2_pretrain_config"


def opts_of(recipe, *overrides):
    model, opts, notes = bridge_job_options(read_bridge_recipe(recipe, list(overrides)))
    return model, opts, notes


def optimizer_phase(capsys, *overrides) -> int:
    """The optimizer step's bytes of the Kimi K2 recipe, without the fragmentation margin."""
    code = main(["estimate", "--bridge-recipe", KIMI, *overrides, "--gpu", "h100",
                 "--fragmentation", "0", "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return json.loads(out)["phases"]["optimizer"]


def test_the_table_holds_the_optimizer_helpers_values():
    """The generated table reads both optimizer helpers (values in the module docstring)."""
    kimi = RECIPES["kimi_k2_pretrain_512gpu_h100_bf16_config"]["values"]
    assert (kimi["optimizer.optimizer"], kimi["optimizer.muon_tp_mode"],
            kimi["optimizer.muon_num_ns_steps"], kimi["optimizer.muon_nesterov"]) == (
        "dist_muon", "blockwise", 5, True)
    assert kimi["optimizer.use_distributed_optimizer"] is False
    assert kimi["ddp.use_distributed_optimizer"] is False
    llama = RECIPES["llama3_8b_pretrain_2gpu_h100_bf16_config"]["values"]
    assert llama["optimizer.optimizer"] == "adam"
    assert llama["optimizer.use_distributed_optimizer"] is True


def test_kimi_k2_reads_its_muon_fields():
    """dist_muon is the layer-wise distributed optimizer (training/optim.py:109), Muon's
    fields the helper's: blockwise, 5 steps, Nesterov; the job record carries them."""
    model, opts, notes = opts_of(KIMI)
    assert (model, opts["optimizer"], opts["sharding"]) == (
        "kimi-k2", "muon", "distributed-optimizer")
    assert (opts["muon_tp_mode"], opts["muon_num_ns_steps"], opts["muon_nesterov"]) == (
        "blockwise", 5, True)
    j = job(model, **opts)
    assert (j.training.states.muon_tp_mode, j.training.states.muon_num_ns_steps,
            j.training.states.muon_nesterov) == ("blockwise", 5, True)
    model, opts, _ = opts_of(KIMI, "optimizer.muon_tp_mode=duplicated",
                             "optimizer.muon_num_ns_steps=8", "optimizer.muon_nesterov=false")
    j = job(model, **opts)
    assert (j.training.states.muon_tp_mode, j.training.states.muon_num_ns_steps,
            j.training.states.muon_nesterov) == ("duplicated", 8, False)


def test_kimi_k2_muon_fields_reach_the_optimizer_step(capsys):
    """Kimi K2's largest Muon matrix is its dense layer's linear_fc1, gate and up:
    2 x 18432 rows by 7168 (config.json intermediate_size 18432, hidden_size 7168; the
    experts' 2 x 2048 x 7168 and the attention's are smaller), split over TP 2 (kimi_k2.py:104).
    Blockwise orthogonalizes the TP shard, 36864 * 7168 / 2 = 132,120,576 elements (the
    largest shard: fc2's is 7168 * 18432 / 2); duplicated the whole 264,241,152.  The step's
    workspace is 12 m n bytes plus 4 m n with Nesterov (memsym.terms.muon
    newton_schulz_workspace, from Emerging-Optimizers' step), so the optimizer phase grows by
    16 x 132,120,576 = 2,113,929,216 bytes from blockwise to duplicated, and loses
    4 x 132,120,576 = 528,482,304 bytes without Nesterov."""
    whole, shard = 36864 * 7168, 36864 * 7168 // 2
    assert (whole, shard) == (264241152, 132120576)
    blockwise = optimizer_phase(capsys)
    duplicated = optimizer_phase(capsys, "optimizer.muon_tp_mode=duplicated")
    plain = optimizer_phase(capsys, "optimizer.muon_nesterov=false")
    assert duplicated - blockwise == 16 * (whole - shard) == 2113929216
    assert blockwise - plain == 4 * shard == 528482304


def test_muon_on_an_adam_recipe_takes_optimizerconfigs_defaults():
    """llama3_8b with optimizer.optimizer=muon: no muon_* set, so OptimizerConfig's
    blockwise, 5, no Nesterov (optimizer_config.py:266, 279, 282 at 2a75ac12c5).  Plain muon
    keeps its states whole even with use_distributed_optimizer (optimizer/__init__.py:946-952),
    said in a note; dist_muon or use_layer_wise_distributed_optimizer shards them."""
    _, opts, notes = opts_of("llama3_8b_pretrain_config", "optimizer.optimizer=muon")
    assert (opts["muon_tp_mode"], opts["muon_num_ns_steps"], opts["muon_nesterov"]) == (
        "blockwise", 5, False)
    assert opts["sharding"] == "ddp"
    assert any("keeps Muon's states whole" in n for n in notes)
    for words in (["optimizer.optimizer=dist_muon"],
                  ["optimizer.optimizer=muon", "optimizer.use_layer_wise_distributed_optimizer=true"]):
        assert opts_of("llama3_8b_pretrain_config", *words)[1]["sharding"] == \
            "distributed-optimizer", words


def test_muon_fields_under_another_optimizer_are_noted_not_read():
    _, opts, notes = opts_of(KIMI, "optimizer.optimizer=adam")
    assert opts["optimizer"] == "adam" and "muon_tp_mode" not in opts
    assert any(n.startswith("optimizer.muon_tp_mode, optimizer.muon_num_ns_steps, "
                            "optimizer.muon_nesterov: Muon-only") for n in notes)


@pytest.mark.parametrize("word, says", [
    ("optimizer.muon_tp_mode=rowwise", "optimizer.muon_tp_mode must be one of"),
    ("optimizer.muon_num_ns_steps=0", "optimizer.muon_num_ns_steps must be a whole number"),
    ("optimizer.muon_num_ns_steps=2.5", "optimizer.muon_num_ns_steps must be a whole number"),
    ("optimizer.muon_nesterov=3", "optimizer.muon_nesterov must be true or false"),
    ("model.mla_down_proj_fusion=true", "model.mla_down_proj_fusion: a field of Bridge's MLA")])
def test_a_bad_field_is_one_line_and_exit_2(capsys, word, says):
    """TensorParallelMuon raises below 1 Newton-Schulz step (emerging_optimizers.py:200-201 at
    2a75ac12c5); Llama 3's provider (GPTModelProvider) has no mla_down_proj_fusion, a field of
    MLATransformerConfig (transformer_config.py:3076), so Hydra's struct mode refuses it."""
    recipe = "llama3_8b_pretrain_config" if word.startswith("model.") else KIMI
    code = main(["estimate", "--bridge-recipe", recipe, word, "--gpu", "h100"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and says in err and err.count("\n") == 1


def test_mla_down_proj_fusion_on_an_mla_model():
    """DeepSeek-V3's provider is MLAModelProvider (deepseek_v3_bridge.py:47), whose
    MLATransformerConfig has mla_down_proj_fusion (False by default, :3076)."""
    model, opts, _ = opts_of("deepseek_v3_pretrain_config")
    assert job(model, **opts).training.memory.mla_down_proj_fusion is False
    model, opts, _ = opts_of("deepseek_v3_pretrain_config", "model.mla_down_proj_fusion=true")
    assert opts["mla_down_proj_fusion"] is True
    assert job(model, **opts).training.memory.mla_down_proj_fusion is True


def test_use_distributed_optimizer_is_either_sections():
    """config.py:2101-2123: True in either section wins.  Llama 3's optimizer section is True
    (optimizer_utils.py:150), so ddp=false alone stays distributed, noted; Kimi K2's both are
    False (kimi_k2.py:74; the Muon helper passes none, OptimizerConfig's False), so an Adam
    override is plain DDP until either section sets it."""
    _, opts, notes = opts_of("llama3_8b_pretrain_config", "ddp.use_distributed_optimizer=false")
    assert opts["sharding"] == "distributed-optimizer"
    assert any(n.startswith("ddp.use_distributed_optimizer false is turned on") for n in notes)
    _, opts, notes = opts_of("llama3_8b_pretrain_config", "ddp.use_distributed_optimizer=false",
                             "optimizer.use_distributed_optimizer=false")
    assert opts["sharding"] == "ddp"
    assert opts_of(KIMI, "optimizer.optimizer=adam")[1]["sharding"] == "ddp"
    for word in ("optimizer.use_distributed_optimizer=true", "ddp.use_distributed_optimizer=true"):
        assert opts_of(KIMI, "optimizer.optimizer=adam", word)[1]["sharding"] == \
            "distributed-optimizer", word


def test_overlap_param_gather_is_either_sections():
    """config.py:2125-2137: Kimi K2's ddp.overlap_param_gather False (kimi_k2.py:75) is turned
    on by optimizer.overlap_param_gather=true; its overlap_grad_reduce is on (:202)."""
    _, opts, _ = opts_of(KIMI, "optimizer.optimizer=adam")
    assert opts["overlap_param_gather"] is False
    _, opts, notes = opts_of(KIMI, "optimizer.optimizer=adam",
                             "optimizer.overlap_param_gather=true")
    assert opts["overlap_param_gather"] is True and opts["overlap_grad_reduce"] is True
    assert any(n.startswith("ddp.overlap_param_gather false is turned on") for n in notes)


def test_kimi_k2_layouts_from_its_builder():
    """kimi_k2.py:36 (16, 1), the recipe's (:104-107, :125): an embedding and 4 layers, 14
    stages of 4, 1 layer and the loss, no MTP (61 layers = 4 + 14 x 4 + 1); :39 (2, 8) is the
    same 16 chunks, which DeepSeek-V3's builder (deepseek_v3.py:53-61) lacks; :34 (8, 1) an
    embedding and 8, 6 stages of 8, 5 and the loss."""
    _, opts, _ = opts_of(KIMI)
    assert opts["pipeline_layout"].split("|") == ["Etttt"] + ["tttt"] * 14 + ["tL"]
    _, opts, _ = opts_of(KIMI, "model.pipeline_model_parallel_size=2",
                         "model.virtual_pipeline_model_parallel_size=8")
    assert opts["pipeline_layout"].split("|") == ["Etttt"] + ["tttt"] * 14 + ["tL"]
    _, opts, _ = opts_of(KIMI, "model.pipeline_model_parallel_size=8")
    assert opts["pipeline_layout"].split("|") == ["E" + "t" * 8] + ["t" * 8] * 6 + ["tttttL"]
    with pytest.raises(InvalidValueError, match="DeepSeek-V3's layout builder has no layout "
                                                "for PP 2, VPP 8"):
        opts_of("deepseek_v3_pretrain_config", "model.pipeline_model_parallel_size=2",
                "model.virtual_pipeline_model_parallel_size=8")


def test_kimi_k2_vocabulary_is_the_models():
    """kimi_k2.py:128-130: a NullTokenizer whose vocab_size is the model's own (a computed
    assignment): the preset's vocabulary, no override of it (the recipe was refused before)."""
    model, opts, _ = opts_of(KIMI)
    assert "vocab_size" not in opts
    assert job(model, **opts).model.vocab_size == 163840   # Kimi-K2-Instruct config.json
