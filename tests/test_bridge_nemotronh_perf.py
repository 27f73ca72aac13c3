"""Megatron-Bridge's Nemotron 3 performance recipes (perf_recipes/nemotronh/<system>/nemotronh.py
at 067f987df0), read by tools/bridge_recipes.py into memsym/readers/_bridge_recipes.py.
Each expected value is the recipe's source line named beside it."""

from __future__ import annotations

from memsym.readers._bridge_recipes import PERF_RECIPES
from memsym.readers.bridge import bridge_job_options, read_bridge_recipe


def test_super_b200_mxfp8_reads_its_layout_precision_and_mtp():
    # b200/nemotronh.py:116-140: the base nemotron_3_super_pretrain_config (nemotronh/common.py:
    # the 16-GPU H100 recipe, whose lines 96-102 set two MTP passes of a repeated layer),
    # _perf_precision("fp8_mx"), TP 1, EP 64, MBS 1, GBS 512, moe_act + layernorm recompute
    model, opts, _ = bridge_job_options(read_bridge_recipe(
        "nemotron_3_super_pretrain_64gpu_b200_fp8mx_config"))
    assert model == "nemotron-3-super"
    assert (opts["t"], opts["p"], opts["e"], opts["micro_batch_size"],
            opts["global_batch_size"]) == (1, 1, 64, 1, 512)
    assert (opts["precision"], opts["fp8_recipe"]) == ("fp8", "mxfp8")
    assert opts["recompute"] == "selective" and opts["recompute_modules"] == ("moe_act",
                                                                              "layernorm")
    assert (opts["mtp_num_layers"], opts["mtp_repeated"]) == (2, True)


def test_nano_h100_fp8cs_reads_its_cuda_graph_modules():
    # h100/nemotronh.py:161-186: EP 16, set_cuda_graph_modules(cfg.model, ["attn", "mamba"]),
    # recompute_modules ["layernorm"] under selective granularity
    values = read_bridge_recipe("nemotron_3_nano_pretrain_16gpu_h100_fp8cs_config")["values"]
    assert values["model.cuda_graph_scope"] == ["attn", "mamba"]
    assert values["model.cuda_graph_impl"] == "transformer_engine"
    assert values["model.expert_model_parallel_size"] == 16
    assert values["model.recompute_modules"] == ["layernorm"]


def test_super_nvfp4_is_read_as_fp4_with_its_bf16_layers():
    # gb300/nemotronh.py:180: _nemotron_3_super_nvfp4_precision (nemotronh/common.py: the
    # nemotron_3_super_bf16_with_nvfp4_mixed recipe, fp4_param_gather False); that recipe's
    # first_last_layers_bf16 with num_layers_at_end_in_bf16 14 (training/mixed_precision.py:
    # 427-428 at 067f987df0): the last 14 layers in BF16, no first ones (its default 0, :73)
    _, opts, notes = bridge_job_options(read_bridge_recipe(
        "nemotron_3_super_pretrain_64gpu_gb300_nvfp4_config"))
    assert opts["precision"] == "fp4" and not opts.get("fp4_param_gather")
    assert opts["bf16_layers"] == (0, 14)


def test_lightning_recipes_are_not_read_as_nano():
    # h100/nemotronh.py:217-230: Nemotron 3.5 Lightning builds on Nano's recipe and names its
    # own checkpoint (cfg.model.hf_model_id): a model memsym has no preset for, read from the
    # Hub (memsym.readers.bridge_models), never as Nano
    lightning = [PERF_RECIPES[name] for name in PERF_RECIPES if "lightning" in name]
    assert lightning and {row["hf_model"] for row in lightning} == {
        "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16"}
    # the 3 + 3 + 3 + 3 + 1 + 3 Super functions of b200, b300, gb200, gb300, h100, vr200 (the
    # gb200 bf16 one under its module path: recipes/nemotronh/gb200/nemotron_3_super.py has a
    # pretrain recipe of the same name)
    assert len([n for n in PERF_RECIPES
                if n.rsplit(".", 1)[-1].startswith("nemotron_3_super")]) == 16
