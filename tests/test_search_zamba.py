"""``memsym search`` of a Zamba (Mamba-1 mixers, transformers' model code: --framework
deepspeed): its rows are the estimate of the same job, and t > 1 is one masked rule.

Before the fix the Mamba-1 mixer's ``[b, H > 1]`` indicator was a Piecewise of ``Eq | Eq``,
whose numpy printing stacks the conditions into one array and failed on a scalar H and an
array b (the search's grid); the mixers' refusal of tensor parallelism then stopped the whole
search instead of excluding its rows.
"""

import numpy as np
import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.search import launch_overlaps, search
from memsym.training import Layout, Training, training_memory

from hf_oracle import write_config
from test_hf_zamba import SMALL


def test_zamba_search_rows_are_the_estimate_of_the_same_job(tmp_path):
    path = str(write_config(tmp_path, SMALL["zamba"]))
    res = search(path, "h100-80gb", 8, seq_length=64, framework="deepspeed")
    assert len(res) > 0
    rng = np.random.default_rng(3)
    for i in rng.choice(len(res), min(8, len(res)), replace=False):
        row = res.row(int(i))
        lay = Layout(t=row["t"], p=row["p"], d=row["d"], c=row["c"])
        # the job a row stands for: DeepSpeed's overlap_comm on, as the search launches it
        tr = Training(seq_length=64, micro_batch_size=row["b"], recompute=row["recompute"],
                      sharding=row["sharding"], framework="deepspeed",
                      **launch_overlaps("deepspeed", row["sharding"]))
        est = training_memory(path, lay, tr)
        assert row["memory"] == pytest.approx(float(est.bytes_total), rel=1e-12), row


def test_zamba_tensor_parallel_rows_are_masked_by_one_rule(tmp_path):
    path = str(write_config(tmp_path, SMALL["zamba"]))
    # t named: a DeepSpeed search holds t = 1 unless told (Framework.searched_sizes)
    res = search(path, "h100-80gb", 8, seq_length=64, framework="deepspeed", tp=[1, 2, 4])
    assert set(res.columns["t"].tolist()) == {1}
    assert res.excluded["mamba1-tp"] > 0
    # the estimate of one such job refuses it with the rule's message
    with pytest.raises(InvalidValueError, match=r"tensor parallelism \(t > 1\) of Zamba's"):
        training_memory(path, Layout(t=2, d=4), Training(seq_length=64, framework="deepspeed"))


def test_zamba_search_command_line_exits_0(tmp_path, capsys):
    path = str(write_config(tmp_path, SMALL["zamba"]))
    code = main(["search", path, "--framework", "deepspeed", "--gpus", "8", "--gpu",
                 "h100-80gb", "--seq-length", "64", "--top", "3", "--tp", "1", "2", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "mamba1-tp" in out
