"""Review fixes of the search and the emitter (Megatron-LM rules read at d98e8a64dd)."""

from __future__ import annotations

import json

from memsym.cli import main


def cli(capsys, *argv):
    code = main(list(argv))
    got = capsys.readouterr()
    return code, got.out, got.err


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
    from memsym.cli.search import layout_json
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
