"""One reading of a job: Megatron-LM's Muon and MLA switches (``--muon-tp-mode``,
``--muon-num-ns-steps``, ``--muon-nesterov``, ``--mla-down-proj-fusion``) are fields of the job
record with Megatron's defaults, read from a pasted command, a model's overrides and memsym's
own options alike, and reach the step time's Settings.

Every expected number is Megatron-LM's (read from its arguments.py at d98e8a64dd, kept in
tools/data) or derived by hand below from the step-time formulas' constants (12 B per Muon
parameter for Nesterov's ``grad.lerp``, memsym.timing.muon; 4 T h bytes per recomputed norm,
memsym.timing.recompute) and the H100's 3.35 TB/s HBM (its datasheet).
"""

from __future__ import annotations

import ast
import json
import pathlib

import pytest

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import DEFAULTS, job
from memsym.readers.megatron import read_megatron_args, read_megatron_overrides
from memsym.timing.job_step import job_step_time

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARGUMENTS = ROOT / "tools/data/megatron-lm-d98e8a64dd/megatron/training/arguments.py"
HBM = 3.35e12            # H100 SXM [bytes/s] (NVIDIA's datasheet)


def _megatron_argument(flag: str) -> dict:
    """The keywords of Megatron-LM's ``add_argument(flag, ...)`` (read, not imported)."""
    for node in ast.walk(ast.parse(ARGUMENTS.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" \
                and node.args and getattr(node.args[0], "value", None) == flag:
            return {k.arg: ast.literal_eval(k.value) for k in node.keywords
                    if k.arg in ("default", "choices", "action", "type") and
                    not isinstance(k.value, ast.Name)}
    raise AssertionError(f"{flag} is not a Megatron-LM argument")


def test_the_job_record_has_megatrons_defaults_and_choices():
    from memsym.vocabulary import MUON_TP_MODES

    tp = _megatron_argument("--muon-tp-mode")            # arguments.py:2650-2655
    assert DEFAULTS["muon_tp_mode"] == tp["default"] == "duplicated"
    assert set(MUON_TP_MODES) == set(tp["choices"])
    assert DEFAULTS["muon_num_ns_steps"] == _megatron_argument("--muon-num-ns-steps")["default"]
    assert _megatron_argument("--muon-nesterov")["action"] == "store_true"   # :2633, off
    assert DEFAULTS["muon_nesterov"] is False
    fusion = _megatron_argument("--mla-down-proj-fusion")                     # :3566-3572
    assert fusion["action"] == "store_true" and fusion["default"] is False
    assert DEFAULTS["mla_down_proj_fusion"] is False


# a small dense model as a Megatron-LM command: h 1024, 16 heads of 64 (MHA), f 4096 (GeLU),
# 4 layers, TP 2 over 8 GPUs, plain DDP (no --use-distributed-optimizer)
_DENSE = ["--bf16", "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16",
          "--ffn-hidden-size", "4096", "--seq-length", "2048", "--max-position-embeddings",
          "2048", "--micro-batch-size", "1", "--global-batch-size", "8", "--world-size", "8",
          "--vocab-size", "32000", "--tensor-model-parallel-size", "2", "--optimizer", "muon"]


def _step(capsys, words) -> float:
    code = main(["estimate", *words, "--gpu", "h100", "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return json.loads(out)["step_time_s"]


def test_a_pasted_muon_nesterov_adds_twelve_bytes_per_muon_parameter(capsys):
    base = _step(capsys, _DENSE)
    nesterov = _step(capsys, _DENSE + ["--muon-nesterov"])
    # Muon's matrices on one GPU, by hand: Q, K, V, the output projection (h x h each) and
    # fc1, fc2 (f x h each), all split over t = 2, in 4 layers; DDP steps every one of them
    h, f, t, layers = 1024, 4096, 2, 4
    muon_params = layers * (4 * h * h + 2 * f * h) // t
    assert muon_params == 25_165_824
    assert nesterov - base == pytest.approx(12 * muon_params / HBM, rel=1e-9)


def test_newton_schulz_steps_and_tp_mode_reach_the_step(capsys):
    # k Newton-Schulz iterations: GEMM seconds k times one iteration's, the element-wise passes
    # and the all-gather once per step, so the step is affine in k (and grows with it)
    k5, k10, k15 = (_step(capsys, _DENSE + ["--muon-num-ns-steps", str(k)]) for k in (5, 10, 15))
    assert k10 > k5 and k15 - k10 == pytest.approx(k10 - k5, rel=1e-9)
    assert _step(capsys, _DENSE + ["--muon-num-ns-steps", "5"]) == _step(capsys, _DENSE)
    # blockwise orthogonalizes each TP shard alone: fewer FLOPs (a 512 x 1024 shard's
    # 4 m^2 n + 2 m^3 is under half the whole 1024 x 1024's), no all-gather, no torch.cat
    assert _step(capsys, _DENSE + ["--muon-tp-mode", "blockwise"]) < _step(capsys, _DENSE)


def test_the_flags_reach_the_settings_from_every_reading():
    mj = read_megatron_args(_DENSE + ["--muon-tp-mode", "distributed", "--muon-num-ns-steps",
                                      "7", "--muon-nesterov"])
    from memsym.readers.jobs import megatron_job

    j = megatron_job(mj, gpu="h100")
    st = job_step_time(j).assumptions["settings"]
    assert (st.muon_tp_mode, st.muon_ns_steps, st.muon_nesterov) == ("distributed", 7, True)
    o = read_megatron_overrides(["--muon-tp-mode", "blockwise", "--mla-down-proj-fusion"],
                                num_layers=4)
    assert o.options == {"muon_tp_mode": "blockwise", "mla_down_proj_fusion": True}
    j = job("llama2-7b", t=2, world_size=8, global_batch_size=16, optimizer="muon",
            muon_tp_mode="Blockwise", muon_num_ns_steps=3, gpu="h100")
    st = job_step_time(j).assumptions["settings"]
    assert (st.muon_tp_mode, st.muon_ns_steps, st.muon_nesterov) == ("blockwise", 3, False)


def test_mla_down_proj_fusion_leaves_the_input_norm_unrecomputed(capsys):
    mla = ["--bf16", "--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16",
           "--ffn-hidden-size", "4096", "--seq-length", "2048", "--max-position-embeddings",
           "2048", "--micro-batch-size", "1", "--global-batch-size", "16", "--world-size", "8",
           "--vocab-size", "32000", "--multi-latent-attention", "--q-lora-rank", "512",
           "--kv-lora-rank", "256", "--qk-head-dim", "64", "--qk-pos-emb-head-dim", "32",
           "--v-head-dim", "64", "--recompute-granularity", "selective",
           "--recompute-modules", "layernorm"]
    unfused, fused = _step(capsys, mla), _step(capsys, mla + ["--mla-down-proj-fusion"])
    # the MLA input norm's forward, no longer rerun: 4 T h bytes (bf16 read and write) per
    # layer and micro-batch, T = s b = 2048 tokens, m = 16 / (1 x 8) = 2 micro-batches, p = 1
    assert unfused - fused == pytest.approx(2 * 4 * 4 * 2048 * 1024 / HBM, rel=1e-9)


@pytest.mark.parametrize("words", [
    _DENSE + ["--muon-tp-mode", "rowwise"],                          # Megatron's reader
    ["llama2-7b", "--optimizer", "muon", "--muon-tp-mode", "rowwise"],   # memsym's option
])
def test_an_unknown_tp_mode_is_refused_in_one_line(capsys, words):
    code = main(["estimate", *words, "--gpu", "h100"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "rowwise" in err


def test_refusals_and_notes_as_megatron():
    # validate_args (arguments.py:1976-1977): the fusion needs MLA
    with pytest.raises(InvalidValueError, match="--multi-latent-attention"):
        read_megatron_args(_DENSE + ["--mla-down-proj-fusion"])
    with pytest.raises(InvalidValueError, match="multi-latent attention"):
        job("llama2-7b", mla_down_proj_fusion=True)
    with pytest.raises(InvalidValueError, match="muon_num_ns_steps"):
        job("llama2-7b", optimizer="muon", muon_num_ns_steps=0)
    # under Adam the Muon arguments change nothing (Megatron builds no Muon): noted, not read
    adam = [w for w in _DENSE if w not in ("--optimizer", "muon")]
    mj = read_megatron_args(adam + ["--muon-nesterov"])
    assert "muon_nesterov" not in mj.optimizer
    assert any(n.startswith("--muon-nesterov: Muon-only") for n in mj.notes)


@pytest.mark.parametrize("sharding", ["ddp", "distributed-optimizer"])
def test_the_newton_schulz_workspace_follows_tp_mode_and_nesterov(sharding):
    from memsym.training.transients import phase_transients

    # Llama-2-7B's largest Muon matrix is fc1, 2 x 11008 rows by 4096 (SwiGLU), W elements,
    # its shard s = W/2 at t = 2 (column-parallel).  As Emerging-Optimizers fd77292
    # muon_utils.py allocates it (memsym.terms.muon.newton_schulz_peak):
    # - duplicated (Megatron's default, 327-332): the gathered shards and their torch.cat stay
    #   alive through the whole-matrix iteration: 12 W, plus max(2 W, 4 m^2) with m = 4096
    #   the shorter side (2 W is the larger): 14 W;
    # - blockwise (partition_dim None, emerging_optimizers.py:403): the shard alone, 12 s;
    # - distributed (334-341): 4 s + max(8 s, 4 m^2) with the 4096 x 4096 Gram: 12 s;
    # Nesterov's grad.lerp copy is the shard's, 4 s (orthogonalized_optimizer.py:193-208).
    whole = 2 * 11008 * 4096
    shard = whole // 2

    def optimizer_phase(**kw):
        from memsym.training import training_values

        j = job("llama2-7b", t=2, world_size=8, optimizer="muon", sharding=sharding, **kw)
        vals = training_values(j.model, j.layout, j.training)   # the workspace is in t
        return {term.key: term.evaluate(vals) for term in phase_transients(j, 0)["optimizer"]}

    assert optimizer_phase() == {"newton_schulz_workspace": 14 * whole}
    assert optimizer_phase(muon_nesterov=True) == {"newton_schulz_workspace": 14 * whole
                                                   + 4 * shard}
    assert optimizer_phase(muon_tp_mode="blockwise") == {"newton_schulz_workspace": 12 * shard}
    assert optimizer_phase(muon_tp_mode="distributed") == {"newton_schulz_workspace": 12 * shard}
