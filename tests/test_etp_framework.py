"""``--etp`` where the framework has no experts' TP of its own (``Framework.expert_tp``):
DeepSpeed splits the experts by the layers' TP size, so a t_e != t is refused in one line
(exit 2), in estimate and in search alike, instead of being priced as t_e = t unsaid."""

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.frameworks import FRAMEWORK
from memsym.training import Layout, Training, training_memory

_SAID = "expert_tensor_parallel_size t_e=2 (--etp) is not a deepspeed option"


def test_deepspeed_has_no_experts_tp_and_megatron_does():
    assert not FRAMEWORK["deepspeed"].expert_tp and FRAMEWORK["megatron"].expert_tp


@pytest.mark.parametrize("cmd", [
    ["estimate", "mixtral-8x7b", "--framework", "deepspeed", "--etp", "2", "--world-size", "16"],
    ["search", "mixtral-8x7b", "--framework", "deepspeed", "--gpus", "16", "--gpu",
     "h100-80gb", "--etp", "2"]])
def test_etp_under_deepspeed_is_refused_in_one_line(capsys, cmd):
    assert main(cmd) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and _SAID in err


def test_the_library_refuses_it_and_accepts_t_e_equal_t():
    with pytest.raises(InvalidValueError, match=r"not a deepspeed option"):
        training_memory("mixtral-8x7b", Layout(t=1, d=16, t_e=2),
                        Training(seq_length=256, framework="deepspeed", sharding="zero1"))
    # t_e = t is what DeepSpeed runs: the same bytes as t_e left out
    same = [training_memory("mixtral-8x7b", Layout(t=1, d=16, t_e=te),
                            Training(seq_length=256, framework="deepspeed", sharding="zero1"))
            for te in (1, None)]
    assert same[0].bytes_total == same[1].bytes_total
    # and its TP (AutoTP) never splits the sequence, which Megatron's MoE TP needs
    # (DeepSpeed edaa722126 module_inject/layers.py:770-776, 851-869)
    with pytest.raises(InvalidValueError, match="AutoTP"):
        training_memory("mixtral-8x7b", Layout(t=2, d=8, t_e=2, sequence_parallel=True),
                        Training(seq_length=256, framework="deepspeed", sharding="zero1"))


def test_megatron_takes_etp(capsys):
    assert main(["estimate", "mixtral-8x7b", "--etp", "2", "--tp", "2", "--world-size", "16",
                 "--seq-length", "256", "--sequence-parallel"]) == 0


# --- one name for the experts' TP in text: t_e, as t, p, c, d, e are (JSON: etp, as tp, ep) --
def test_the_search_table_and_the_no_fit_line_say_t_e(capsys):
    # Mixtral on 2 GPUs: 2 x 46.7B parameters' Adam states do not fit any layout
    assert main(["search", "mixtral-8x7b", "--gpus", "2", "--gpu", "h100-80gb"]) == 1  # no fit: 1
    err = capsys.readouterr().err.splitlines()[0]
    assert "no layout of 2 x h100-80gb fits" in err
    layout = err.split(" GB (")[1]
    assert ", e=" in layout and ", t_e=" in layout
    assert main(["search", "mixtral-8x7b", "--gpus", "16", "--gpu", "h100-80gb", "--tp", "2",
                 "--top", "1"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines()
                  if line.lstrip().startswith("#"))
    assert header.split()[:9] == ["#", "t", "p", "c", "d", "e", "t_e", "v", "b"]


def test_a_dense_no_fit_line_has_no_experts(capsys):
    assert main(["search", "llama2-70b", "--gpus", "1", "--gpu", "h100-80gb"]) == 1  # no fit: 1
    err = capsys.readouterr().err.splitlines()[0]
    assert "(t=1, p=1, c=1, d=1, b=" in err and "t_e=" not in err
