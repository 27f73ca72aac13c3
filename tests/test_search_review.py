"""Review fixes of the search and the emitter (Megatron-LM rules read at d98e8a64dd)."""

from __future__ import annotations

import json

from in_process import run as cli


def test_overlap_param_gather_with_megatron_fsdp_no_shard_is_accepted(capsys):
    # megatron/training/arguments.py l. 1024-1026: --overlap-param-gather asserts
    # use_distributed_optimizer or use_megatron_fsdp (or dist_muon), whatever the strategy;
    # l. 1028-1029: and --overlap-grad-reduce, given here
    code, out, err = cli(capsys, "estimate", "llama3-8b", "--world-size", "16", "--pp", "2",
                         "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "no_shard",
                         "--overlap-grad-reduce", "--overlap-param-gather", "--json")
    assert code == 0, err
    trn = json.loads(out)["training"]
    assert (trn["megatron_fsdp"], trn["sharding"]) == ("no_shard", "ddp")


def test_overlap_param_gather_on_plain_ddp_is_still_refused(capsys):
    # the same assertion without the distributed optimizer or Megatron-FSDP
    code, _, err = cli(capsys, "estimate", "llama3-8b", "--world-size", "16", "--pp", "2",
                       "--sharding", "ddp", "--overlap-grad-reduce", "--overlap-param-gather", "--json")
    assert code == 2
    assert "needs the distributed optimizer" in err


def test_plain_ddp_rows_run_without_the_parameter_gather():
    # a job's overlaps both on: the plain DDP row has no parameter all-gather to overlap
    # (arguments.py l. 1024-1026 refuses the flag there; memsym.emit leaves it out), the
    # distributed optimizer's row keeps it; Megatron-FSDP no_shard keeps it (accepted)
    from memsym.cli.search_report import layout_json
    from memsym.search import search

    on = {"overlap_grad_reduce": True, "overlap_param_gather": True}
    res = search("llama2-7b", "h100-80gb", 8, global_batch_size=64, tp=[2], pp=[1],
                 sharding=["ddp", "distributed-optimizer", "no_shard"], recompute=["full"],
                 overlaps=on)
    seen = {}
    for i in range(len(res)):
        row = res.row(i)
        lay = layout_json(row, res.space.framework, res.space.overlaps)
        seen[row["sharding"]] = lay["overlap_param_gather"]
        assert res.space.training(sharding=row["sharding"]).comm.overlap_param_gather \
            == lay["overlap_param_gather"]
    assert seen == {"ddp": False, "distributed-optimizer": True, "no_shard": True}


def _deepspeed_search(capsys, tmp_path, config: dict, *more):
    """``memsym search llama2-7b --gpu h100 --gpus 8`` on ``config`` written as a file."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(config))
    return cli(capsys, "search", "llama2-7b", "--gpu", "h100", "--deepspeed-config", str(cfg),
               "--gpus", "8", *more)


def test_deepspeed_config_with_numeric_micro_batch_searches_on_gpus(capsys, tmp_path):
    # train_micro_batch_size_per_gpu 2 and gradient_accumulation_steps 4, no train_batch_size
    # and no --world-size: the config is read on the searched --gpus 8, so DeepSpeed's batch
    # rule (train_batch_size = micro x accumulation x world size) holds 2 x 4 x 8 = 64
    code, out, err = _deepspeed_search(capsys, tmp_path, {
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
        "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows
    for row in rows:
        lay = row["layout"]
        assert lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == 8
        assert lay["micro_batch_size"] * lay["num_microbatches"] * lay["dp"] == 64
    assert rows[0]["job"]["gpus_from"] == "--gpus"


def test_deepspeed_config_search_keeps_to_zero_data_parallelism(capsys, tmp_path):
    # deepspeed.initialize (deepspeed/__init__.py) runs a plain model (the HF Trainer's, as an
    # "auto" micro-batch implies) on DeepSpeedEngine, never the PipelineEngine, and the config
    # holds no TP / CP degree: every row is t = p = c = 1, d = 8, and --emit deepspeed writes it
    config = {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": 64,
              "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
    code, out, err = _deepspeed_search(capsys, tmp_path, config, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows
    assert {(r["layout"]["tp"], r["layout"]["pp"], r["layout"]["cp"], r["layout"]["dp"])
            for r in rows} == {(1, 1, 1, 8)}
    code, _, err = _deepspeed_search(capsys, tmp_path, config, "--emit", "deepspeed",
                                     "--emit-dir", str(tmp_path / "o"))
    assert code == 0, err


def test_deepspeed_config_without_a_world_size_is_one_clear_line(capsys, tmp_path):
    # no train_batch_size: DeepSpeed's d comes from the launcher's world size alone
    # (train_batch_size = micro-batch x accumulation x d is the only place a config gives it),
    # so estimate asks for --world-size instead of failing inside the layout check
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2,
                               "gradient_accumulation_steps": 4,
                               "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}))
    code, out, err = cli(capsys, "estimate", "llama2-7b", "--deepspeed-config", str(cfg))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "give --world-size N" in err
    code, out, _ = cli(capsys, "estimate", "llama2-7b", "--deepspeed-config", str(cfg),
                       "--world-size", "8", "--json")
    assert code == 0 and json.loads(out)["layout"]["dp"] == 8
