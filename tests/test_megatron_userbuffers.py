"""Megatron-LM's ``--tp-comm-overlap-cfg FILE`` (memsym.readers.megatron_userbuffers): read
under TP overlap on both readings of a job (a Megatron-LM command, a MODEL with Megatron's
arguments pasted), listed as ignored without it, never dropped; the file's subset of YAML
parsed as ``yaml.safe_load`` reads it, anything else refused in one line."""

import json

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.limits import MAX_INPUT_BYTES
from memsym.readers.megatron import read_megatron_args, read_megatron_overrides
from memsym.readers.megatron_userbuffers import parse_ub_yaml, read_tp_comm_overlap_cfg
from memsym.timing.userbuffers import UB_GEMMS, ub_config

#: Megatron-LM's own config (d98e8a64dd, tests/functional_tests/test_cases/gpt/
#: gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap/
#: tp_comm_overlap_cfg.yaml), verbatim.
MEGATRON_UB = """qkv_fprop:
  method: ring_exchange
  aggregate: 1

proj_fprop:
  method: pipeline
  num_sm: 4
  num_splits: 4
  set_sm_margin: 0

fc1_fprop:
  method: ring_exchange
  aggregate: 0

fc2_fprop:
  method: ring_exchange
  aggregate: 0

fc2_dgrad:
  method: ring_exchange
  aggregate: 0

fc1_dgrad:
  method: bulk
  num_sm: 2
  set_sm_margin: 0

fc1_wgrad:
  method: bulk
  num_sm: 2
  set_sm_margin: 0

proj_dgrad:
  method: ring_exchange
  aggregate: 1

qkv_dgrad:
  method: bulk
  num_sm: 2
  set_sm_margin: 0

qkv_wgrad:
  method: bulk
  num_sm: 2
  set_sm_margin: 0
"""

MEGATRON = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "8",
            "--seq-length", "2048", "--max-position-embeddings", "2048", "--micro-batch-size",
            "1", "--global-batch-size", "8", "--vocab-size", "1000", "--tokenizer-type",
            "NullTokenizer", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--bf16",
            "--world-size", "2"]


@pytest.fixture
def cfg_file(tmp_path):
    path = tmp_path / "tp_comm_overlap_cfg.yaml"
    path.write_text(MEGATRON_UB)
    return str(path)


def test_the_subset_reads_as_pyyaml_reads_it():
    yaml = pytest.importorskip("yaml")
    assert parse_ub_yaml(MEGATRON_UB) == yaml.safe_load(MEGATRON_UB)
    text = "# c\n---\nproj_fprop:   # x\n    num_sm: 8\n    set_sm_margin: True\n" \
           "    method: ring_exchange\nfc1_wgrad:\n  num_sm: +3\n  set_sm_margin: off\n"
    assert parse_ub_yaml(text) == yaml.safe_load(text)


def test_merged_over_transformer_engines_defaults(cfg_file):
    """Each entry over its GEMM's default (initialize_ub: get_default_config, then update):
    fc2_fprop's ring keeps the pipeline default's 16 SMs with margin; aggregate is not read."""
    notes = []
    cfg = ub_config(read_tp_comm_overlap_cfg(cfg_file, notes))
    assert set(cfg) == set(UB_GEMMS)
    assert (cfg["proj_fprop"].method, cfg["proj_fprop"].num_sm, cfg["proj_fprop"].set_sm_margin,
            cfg["proj_fprop"].num_splits) == ("pipeline", 4, False, 4)
    assert (cfg["fc2_fprop"].method, cfg["fc2_fprop"].num_sm, cfg["fc2_fprop"].set_sm_margin) \
        == ("ring_exchange", 16, True)
    assert cfg["qkv_wgrad"].math_sms(132) == 132      # set_sm_margin 0: the GEMM keeps every SM
    assert notes and "qkv_fprop.aggregate" in notes[0]


def _estimate(*argv):
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["estimate", *argv, "--gpu", "h100-80gb", "--json"]) in (0, 1)
    return json.loads(buf.getvalue())


@pytest.mark.parametrize("base", [MEGATRON, ["llama2-7b", "--tp", "2", "--sequence-parallel"]],
                         ids=["megatron-command", "model"])
def test_read_under_tp_overlap_else_listed_as_ignored(cfg_file, base):
    """Both readings of a job: under --tp-comm-overlap the file's config is the job's and
    changes the step time; without it the argument is listed as ignored (Megatron does not
    open the file), the job is TE's default."""
    on = _estimate(*base, "--tp-comm-overlap", "--tp-comm-overlap-cfg", cfg_file)
    default = _estimate(*base, "--tp-comm-overlap")
    off = _estimate(*base, "--tp-comm-overlap-cfg", cfg_file)
    assert on["training"]["tp_comm_overlap_cfg"] is not None
    assert "--tp-comm-overlap-cfg" not in on.get("ignored", [])
    assert on["step_time_s"] != default["step_time_s"]
    assert any("aggregate" in n for n in on["notes"])
    assert off["training"]["tp_comm_overlap_cfg"] is None
    assert "--tp-comm-overlap-cfg" in off["ignored"]


def test_reader_functions_take_the_tp_overlap_given_beside_them(cfg_file):
    words = MEGATRON + ["--tp-comm-overlap-cfg", cfg_file]
    assert "tp_comm_overlap_cfg" not in read_megatron_args(words).optimizer
    assert read_megatron_args(words).ignored == ("--tp-comm-overlap-cfg",)
    assert read_megatron_args(words + ["--tp-comm-overlap"]).optimizer["tp_comm_overlap_cfg"]
    assert read_megatron_args(words, tp_comm_overlap=True).ignored == ()
    o = read_megatron_overrides(["--tp-comm-overlap-cfg", cfg_file], num_layers=4)
    assert o.ignored == ("--tp-comm-overlap-cfg",) and "tp_comm_overlap_cfg" not in o.options
    o = read_megatron_overrides(["--tp-comm-overlap-cfg", cfg_file], num_layers=4,
                                tp_comm_overlap=True)
    assert o.ignored == () and len(o.options["tp_comm_overlap_cfg"]) == len(UB_GEMMS)


@pytest.mark.parametrize("text, what", [
    ("qkv_dgrad:\n  method: ring_exchange\n", "not modelled"),     # TE re-plans the dgrad
    ("qkv_fprop:\n  method: bulk\n", "not modelled"),
    ("qkv_fprop: {method: bulk}\n", "key: value"),                 # flow style is not read
    ("qkv_fprop:\n  method: !!python/object:os.system x\n", "not read"),
    ("qkv_fprop:\n  num_sm: &a 2\n", "not read"),
    ("qkv_fprop:\n  num_sm: 0\n", "1..1024"),
    ("qkv_fprop:\n  set_sm_margin: 2\n", "true or"),
    ("qkv_fprop:\n  method: bulk\nqkv_fprop:\n  num_sm: 2\n", "twice"),
    ("qkv_fprop:\n  num_sm: 2\n   num_splits: 2\n", "indented alike"),
    ("  num_sm: 2\n", "belongs under"),
    ("- qkv_fprop\n", "not a"),
])
def test_what_is_not_read_is_refused_in_one_line(tmp_path, text, what):
    path = tmp_path / "ub.yaml"
    path.write_text(text)
    with pytest.raises(InvalidValueError, match=what) as e:
        read_tp_comm_overlap_cfg(str(path), [])
    assert "\n" not in str(e.value)


def test_file_size_bounded(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * MAX_INPUT_BYTES + "\n")
    with pytest.raises(InvalidValueError, match="bytes"):
        read_tp_comm_overlap_cfg(str(path), [])
