"""The per-GPU training total: stages compared, allowances, seed 001/004 claims, the CLI."""

from __future__ import annotations

import json

import pytest
import sympy as sp

from memsym.cli import main
from memsym.errors import DivisibilityError, InvalidValueError, UnknownNameError
from memsym.model import Architecture, parameter_count, preset
from memsym.terms.model_state import byte_widths, model_state
from memsym.training import (ALLOWANCES, Layout, Training, allowance_values, stage_total,
                             training_memory)

NOALLOW = {"workspace": 0, "nccl": 0, "fragmentation": 0}
# seed 001 (Megatron-Bridge card): Llama3 70B SFT, TP=4 PP=4 VPP=5 DP=2 MBS=1 GBS=32 seq 4096
SEED001 = Training(seq_length=4096, micro_batch_size=1, global_batch_size=32,
                   flash_attention=True, dropout=False)


def gb(x):
    return float(x) / 1e9


def test_allowances_named_with_defaults_and_sources():
    assert set(ALLOWANCES) == {"workspace", "nccl", "fragmentation"}
    for al in ALLOWANCES.values():
        assert al.source.key and al.default >= 0
    assert allowance_values({"workspace": 0, "phi_frag": 0.05})[ALLOWANCES["fragmentation"].symbol] \
        == sp.Rational(1, 20)
    with pytest.raises(UnknownNameError):
        allowance_values({"workspaces": 0})


def test_allowances_settable_to_zero():
    base = training_memory("llama2-7b", Layout(), Training(seq_length=1024), allowances=NOALLOW)
    grouped = base.grouped()
    assert grouped["workspace"] == grouped["nccl"] == grouped["fragmentation"] == 0
    full = training_memory("llama2-7b", Layout(), Training(seq_length=1024))
    states_act = grouped["total"]
    # hand: M_ws (500 MiB CUDA context + 2 x 32 MiB cuBLAS/TE workspaces) + M_nccl
    # (4 communicators x 32 channels x NCCL_BUFFSIZE 4 MiB) + 10 % of the peak allocation
    assert full.grouped()["total"] == states_act + (500 + 64 + 512) * 2**20 + states_act / 10


def test_model_states_use_exact_stage_parameters():
    est = training_memory("llama2-7b", Layout(), Training(seq_length=1024), allowances=NOALLOW)
    n = 6_738_415_616        # Llama-2 7B as published (Touvron et al. 2023; HF model card)
    # p = t = 1: the one stage holds every parameter (padded vocab 32000 is already a multiple of
    # 128); Megatron-core at d = 1: bf16 weights 2n, the fp32 gradient buffer 4n
    assert est.grouped()["weights"] == 2 * n and est.grouped()["gradients"] == 4 * n


def test_most_loaded_stage_is_compared_not_assumed():
    # a huge vocabulary and few layers: the last stage's logits outweigh the first stage
    arch = Architecture(name="tiny-vocab-heavy", num_layers=4, hidden_size=1024,
                        num_attention_heads=8, vocab_size=256000, position_embedding_type="rope",
                        untie_embeddings_and_output_weights=True)
    est = training_memory(arch, Layout(p=4), Training(seq_length=4096, flash_attention=True),
                          allowances=NOALLOW)
    assert est.stage == 3 and est.role == "last"
    # stage_bytes holds the candidate stages (0, 1, 3: the middle stages share one make-up)
    assert est.stage_bytes[-1] == max(est.stage_bytes) == est.bytes_total
    deep = training_memory("llama2-7b", Layout(p=4), Training(seq_length=4096), allowances=NOALLOW)
    assert deep.stage == 0 and deep.role == "first"


def test_first_stage_follows_eq5():
    # with 1F1B the first stage holds L layers' worth: activations do not shrink with p
    tr = Training(seq_length=2048, flash_attention=True, dropout=False)
    a1 = training_memory("llama2-7b", Layout(p=1), tr, allowances=NOALLOW).activations()
    a4 = training_memory("llama2-7b", Layout(p=4), tr, allowances=NOALLOW, stage=0).activations()
    assert a1["layer_activations"] == a4["layer_activations"]


def test_seed002_full_stack_without_recompute():
    # seed 002's 104.15 GB per sample is the L = 32 layer stack; memsym adds the embedding,
    # the output layer/logits and the norm statistics on top (so it is larger, not smaller)
    gpt7 = Architecture(name="seed002", num_layers=32, hidden_size=4096, num_attention_heads=32,
                        vocab_size=32000, position_embedding_type="rope")
    # seed 002 counts Korthikanti's Eq. 1: no flash attention, dropout on
    est = training_memory(gpt7, Layout(), Training(seq_length=4096, flash_attention=False),
                          allowances=NOALLOW)
    layers = est.activations()["layer_activations"]
    stats = 32 * 2 * 8 * 4096          # two LayerNorms x (mean, rstd) fp32 per token
    assert round(gb(layers - stats), 2) == 104.15


def test_seed004_13b_full_finetune():
    # seed 004: 13B x 16 bytes = 208 GB; + 20-30 % activations ~ 250 GB -> 4 x A100 80GB
    states = model_state("ddp", convention="zero-paper").subs(byte_widths("ddp", convention="zero-paper")).evaluate(N=13 * 10**9, d=1, p=1, t=1)
    assert states == 208 * 10**9
    # memsym: Llama-2 13B, ZeRO-3 over 4 GPUs, s = 4096, b = 1, flash attention, full recompute
    tr = Training(seq_length=4096, flash_attention=True, dropout=False, sharding="zero3",
                  recompute="full")
    est4 = training_memory("llama2-13b", Layout(d=4), tr)
    assert est4.grouped()["total"] <= 80 * 10**9
    # without recompute the activations alone exceed the seed's 20-30 % allowance at s = 4096
    none = training_memory("llama2-13b", Layout(d=4),
                           Training(seq_length=4096, flash_attention=True, dropout=False,
                                    sharding="zero3"), allowances=NOALLOW)
    act_all_gpus = 4 * none.grouped()["activations"]
    assert act_all_gpus / states > sp.Rational(3, 10)


def _seed001(**kw):
    lay = dict(t=4, p=4, d=2, v=5, sequence_parallel=True)
    lay.update(kw)
    return training_memory("llama3-70b", Layout(**lay), SEED001)


def test_seed001_vpp_barely_changes_peak():
    # measured: VPP 5 -> 10: 58.8 -> 60.2 GB (+2.4 %); memsym: the interleaved factor
    # 1 + 3/20 -> 1 + 3/40 changes the total by about 2 %
    v5, v10 = _seed001(v=5), _seed001(v=10)
    change = abs(v10.bytes_total - v5.bytes_total) / v5.bytes_total
    assert change < sp.Rational(5, 100)
    # by hand (Narayanan et al. 2021 §2.2.2, Korthikanti §4.2.3): interleaved 1F1B keeps
    # L (1 + (p-1)/(p v)) layers' worth on the first stage; at p = 4 that is 1 + 3/20 for
    # v = 5 and 1 + 3/40 for v = 10, so the layer activations scale by
    # (1 + 3/40) / (1 + 3/20) = (43/40) / (46/40) = 43/46
    ratio = v10.activations()["layer_activations"] / v5.activations()["layer_activations"]
    assert ratio == sp.Rational(43, 46)


def test_seed001_pp8_reduces_memory_vs_pp4():
    # measured peaks: PP=4 58.8 GB, PP=8 (DP 2 -> 1) 53.2 GB, TP=8 50.2 GB
    base, pp8, tp8 = _seed001(), _seed001(p=8, d=1), _seed001(t=8, d=1)
    assert pp8.bytes_total < base.bytes_total
    assert tp8.bytes_total < pp8.bytes_total       # same order as the measurements
    assert base.stage == 0


def test_bad_input_refused():
    with pytest.raises(DivisibilityError):
        training_memory("llama3-70b", Layout(t=3), Training(seq_length=4096))
    with pytest.raises(DivisibilityError):
        training_memory("llama3-70b", Layout(p=3), Training(seq_length=4096))
    with pytest.raises(InvalidValueError):        # Megatron: MoE with TP needs SP
        training_memory("mixtral-8x7b", Layout(t=2), Training(seq_length=4096))
    with pytest.raises(DivisibilityError):
        training_memory("llama2-7b", Layout(d=2), Training(seq_length=4096, micro_batch_size=3,
                                                           global_batch_size=32))


def test_stage_total_is_symbolic():
    tot = stage_total("llama2-7b", Layout(), Training(seq_length=4096), 0)
    assert {"s", "b"} <= {x.name for x in tot.free_symbols}


# --- the command line ---------------------------------------------------------------------------
def run_json(argv, capsys):
    code = main(argv + ["--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == (1 if data.get("fits") is False else 0)   # estimate: 1 when it does not fit
    return data


def test_cli_estimate_model_json(capsys):
    out = run_json(["estimate", "llama3-70b", "--tp", "4", "--pp", "4", "--vpp", "5", "--dp", "2",
                    "--sequence-parallel", "--seq-length", "4096", "--micro-batch-size", "1",
                    "--global-batch-size", "32", "--use-flash-attn", "--hidden-dropout", "0",
                    "--gpu-memory", "80GB"], capsys)
    byt = out["bytes"]
    assert {"weights", "gradients", "optimizer", "activations", "workspace", "nccl",
            "fragmentation", "total"} <= set(byt)
    assert byt["total"] == sum(v_ for k_, v_ in byt.items() if k_ != "total")
    assert out["stage"]["index"] == 0 and out["gpu_memory_bytes"] == 80 * 10**9
    assert isinstance(out["fits"], bool)


def test_cli_params_path_unchanged(capsys):
    out = run_json(["estimate", "--params", "7B", "--dp", "8"], capsys)
    assert set(out["bytes"]) == {"weights", "gradients", "optimizer", "total"}


def test_cli_megatron_convention_routes(capsys):
    out = run_json(["estimate", "llama3-70b", "--tp", "4", "--pp", "4", "--seq-length", "4096",
                    "--sequence-parallel", "--recompute-granularity", "selective",
                    "--convention", "megatron-lm"], capsys)
    assert out["convention"] == "megatron-lm"
    # expected bytes from the literal port of Megatron-LM's theoretical_memory_usage.py
    # (tests/framework_ports.py), fed Llama 3 70B's config.json values and the command's
    # defaults (d = 1, b = 1; the distributed optimizer changes nothing at d = 1: 18 B/param)
    import framework_ports as port

    llama3_70b = Architecture(name="llama3-70b", num_layers=80, hidden_size=8192,
                              num_attention_heads=64, num_query_groups=8, ffn_hidden_size=28672,
                              vocab_size=128256, swiglu=True, normalization="RMSNorm",
                              untie_embeddings_and_output_weights=True, add_bias_linear=False,
                              position_embedding_type="rope")
    wo, act = port.lm_report_theoretical_memory_bytes(port.lm_args(
        llama3_70b, t=4, p=4, d=1, s=4096, b=1, sequence_parallel=True, recompute="selective"))
    assert out["bytes"]["weights_and_optimizer"] == wo
    assert out["bytes"]["activations"] == act
    assert out["bytes"]["total"] == wo + act


@pytest.mark.parametrize("argv", [
    ["llama3-70b", "--tp", "3", "--seq-length", "4096"],
    ["llama3-70b", "--pp", "3", "--seq-length", "4096"],
    ["llama3-70x", "--seq-length", "4096"],
    ["llama3-70b", "--tp", "4", "--dp", "2", "--world-size", "16", "--seq-length", "4096"],
])
def test_cli_bad_input_exit_2(argv, capsys):
    assert main(["estimate"] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("memsym: error:")


def test_cli_malformed_config(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 12')
    assert main(["estimate", str(bad), "--seq-length", "128"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_sp_warning_at_t1(capsys):
    assert main(["estimate", "llama3-8b", "--seq-length", "1024", "--sequence-parallel"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sequence-parallel" in err[0]


def test_cli_solve_micro_batch_and_pp(capsys):
    out = run_json(["solve", "micro-batch-size", "llama2-7b", "--seq-length", "2048",
                    "--use-flash-attn", "--dp", "8", "--gpu-memory", "80GB"], capsys)
    b_ = out["value"]
    assert out["memory_bytes"] <= 80 * 10**9 and b_ >= 1
    assert out["tried"][-1]["memory_bytes"] > 80 * 10**9      # the next one does not fit
    out = run_json(["solve", "pp", "llama3-70b", "--tp", "8", "--seq-length", "4096",
                    "--sequence-parallel", "--use-flash-attn", "--gpu-memory", "80GB"], capsys)
    assert 80 % out["value"] == 0 and out["memory_bytes"] <= 80 * 10**9


def test_training_total_is_differentiable_in_t():
    # the stage's parameters enter as tp/t + replicated, so dM/dt sees the model states:
    # for the weights term, (t/M) dM/dt = -(tp/t) / (tp/t + replicated), from the counts
    from memsym.model import stage_parameters
    from memsym.symbols import t as sym_t

    lay = Layout(t=4, p=4, d=2, sequence_parallel=True)
    est = training_memory("llama3-70b", lay, Training(seq_length=4096, recompute="selective"))
    sp_ = stage_parameters(preset("llama3-70b"), 4, 4, est.stage)
    weights = est.total["weights"]
    elasticity = sp.simplify((sym_t * sp.diff(weights.expr, sym_t) / weights.expr).xreplace(est.values))
    assert elasticity == -sp.Rational(sp_.tp, 4) / (sp.Rational(sp_.tp, 4) + sp_.replicated)
    # and the whole total falls with t, but less than proportionally (allowances stay)
    total_el = est.total.elasticity("t", est.values)
    assert -1 < total_el < 0


# --- review fixes: one schedule model, uneven VPP, inputs, the solver --------------------------
def _megatron_peak_chunks(p_, v_, m_, rank):
    """Model chunks in flight at the peak on pipeline ``rank``, by walking Megatron-LM's loop
    (core/pipeline_parallel/schedules.py): warm-up forwards, then 1F1B steps (one forward,
    then one backward), then cool-down backwards."""
    total = m_ * v_
    if v_ == 1:   # forward_backward_pipelining_without_interleaving
        warmup = min(p_ - rank - 1, m_)
    else:         # with interleaving: (p - rank - 1)*2 + (v - 1)*p, capped at m*v
        warmup = min((p_ - rank - 1) * 2 + (v_ - 1) * p_, total)
    live = peak = 0
    for _ in range(warmup):
        live += 1
        peak = max(peak, live)
    for _ in range(total - warmup):
        live += 1                  # forward of the next micro-batch chunk
        peak = max(peak, live)
        live -= 1                  # backward frees one
    return peak


@pytest.mark.parametrize("p_,v_,m_", [(4, 2, 2), (4, 2, 8), (4, 3, 4), (2, 5, 16), (8, 2, 1),
                                      (4, 1, 2), (4, 1, 16), (3, 2, 7)])
def test_schedule_model_matches_megatron_loop(p_, v_, m_):
    from memsym.symbols import L, m, p, v
    from memsym.terms.schedule import pipeline_factor, stage_layers

    vv = v_ if v_ > 1 else None
    for rank in range(p_):
        expect = _megatron_peak_chunks(p_, v_, m_, rank) * L / (p_ * v_)
        assert stage_layers(rank, pp=p_, vv=vv, mm=m_) == expect
    # pipeline_factor is the first stage's row of the same model
    phi = pipeline_factor(interleaved=v_ > 1, limited=True).expr.subs({p: p_, v: v_, m: m_})
    assert phi == sp.Rational(_megatron_peak_chunks(p_, v_, m_, 0), p_ * v_)


def test_interleaved_limited_factor_hand_value():
    # the review's case, by hand: p = 4, v = 2, m = 2, L = 32.  Rank 0 warm-up
    # (4 - 0 - 1)*2 + (2 - 1)*4 = 10 > m v = 4, so all 4 chunks run forward first:
    # 4 chunks of L/(p v) = 4 layers = 16 layers' worth (the old factor gave 22)
    from memsym.symbols import m, p, v
    from memsym.terms.schedule import pipeline_factor, stage_layers

    assert stage_layers("first", pp=4, vv=2, mm=2, layers=32) == 16
    assert 32 * pipeline_factor(interleaved=True, limited=True).expr.subs({p: 4, v: 2, m: 2}) == 16


def test_stage_outside_pipeline_refused():
    from memsym.terms.schedule import stage_microbatches

    for bad in (5, 4, -1):
        with pytest.raises(InvalidValueError, match="0..3"):
            stage_microbatches(bad, pp=4)
    assert stage_microbatches(3, pp=4) == 1      # the last of 4 stages: one micro-batch


def test_uneven_stages_with_vpp_need_whole_chunks():
    tr = Training(seq_length=1024, flash_attention=True, dropout=False)
    # Llama-2 7B has 32 layers; first 5 and last 9 leave 9 + 9 for the middle stages, and
    # v = 2 would put 5/2 layers in a chunk of stage 0 (Megatron-Core refuses it)
    with pytest.raises(DivisibilityError, match=r"v=2 .*stage 0 has 5"):
        training_memory("llama2-7b", Layout(p=4, v=2, first_stage_layers=5,
                                            last_stage_layers=9), tr)
    # first 6 and last 10 leave 8 + 8: every stage even, accepted.  Stage 0 holds, by hand,
    # 2(p-1) + (v-1)p + 1 = 6 + 4 + 1 = 11 chunks of 6/2 = 3 layers = 33 layers' worth,
    # against 32 for the whole stack at p = 1 (one micro-batch of L = 32 layers)
    est = training_memory("llama2-7b", Layout(p=4, v=2, first_stage_layers=6,
                                              last_stage_layers=10), tr, allowances=NOALLOW, stage=0)
    one = training_memory("llama2-7b", Layout(), tr, allowances=NOALLOW)
    assert 32 * est.activations()["layer_activations"] == 33 * one.activations()["layer_activations"]


def test_config_path_accepted_as_pathlib(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
           "intermediate_size": 1376, "num_attention_heads": 8, "num_key_value_heads": 8,
           "num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
           "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    tr = Training(seq_length=256)
    assert training_memory(path, Layout(), tr).bytes_total == \
        training_memory(str(path), Layout(), tr).bytes_total


def test_layout_or_training_as_dict_refused():
    with pytest.raises(InvalidValueError, match="Layout"):
        training_memory("llama2-7b", {"t": 2}, Training(seq_length=128))
    with pytest.raises(InvalidValueError, match="Training"):
        training_memory("llama2-7b", Layout(), {"seq_length": 128})
    with pytest.raises(InvalidValueError, match="Layout"):
        stage_total("llama2-7b", {"t": 2}, Training(seq_length=128))


def test_estimate_breakdown_evaluated_once(monkeypatch):
    from memsym.term import Total

    est = training_memory("llama2-7b", Layout(), Training(seq_length=128))
    calls = []
    original = Total.breakdown
    monkeypatch.setattr(Total, "breakdown", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    grouped, acts, total = est.grouped(), est.activations(), est.bytes_total
    assert len(calls) <= 1
    assert grouped["total"] == total and sum(acts.values()) == grouped["activations"]


def test_cli_solve_micro_batch_uses_d_from_world_size(capsys):
    # G = 16 GPUs at t = p = c = 1 -> d = 16; B = 64 -> b must divide B/d = 4: b in {1, 2, 4}.
    # Capacity between the totals at b = 2 and b = 4 (computed through the library, one b at a
    # time, independently of the command's search) -> the answer is b = 2
    tr = dict(seq_length=2048, flash_attention=True, global_batch_size=64)
    mem = {bb: training_memory("llama2-7b", Layout(d=16), Training(micro_batch_size=bb, **tr)).bytes_total
           for bb in (1, 2, 4)}
    cap = int((mem[2] + mem[4]) / 2)
    out = run_json(["solve", "micro-batch-size", "llama2-7b", "--seq-length", "2048",
                    "--use-flash-attn", "--world-size", "16", "--global-batch-size", "64",
                    "--gpu-memory", f"{cap}B"], capsys)
    assert out["value"] == 2 and 64 % (2 * 16) == 0
    assert out["memory_bytes"] == sp.ceiling(mem[2])
    assert out["tried"][-1] == {"value": 4, "memory_bytes": sp.ceiling(mem[4])}


def test_cli_solve_micro_batch_bisects_and_verifies(capsys):
    # no B: every b is admissible; the command must return b with M(b) <= C < M(b + 1),
    # checked here with the library, in far fewer evaluations than one per b
    argv = ["llama2-7b", "--seq-length", "128", "--use-flash-attn", "--dp", "8"]
    out = run_json(["solve", "micro-batch-size", *argv, "--gpu-memory", "80GB"], capsys)
    b_ = out["value"]

    def mem(bb):
        return training_memory("llama2-7b", Layout(d=8), Training(
            seq_length=128, micro_batch_size=bb, flash_attention=True)).bytes_total

    assert b_ > 16 and mem(b_) <= 80 * 10**9 < mem(b_ + 1)
    assert out["tried"][-1]["value"] == b_ + 1
    assert len(out["tried"]) <= 2 * b_.bit_length() + 3


def test_cli_solve_warns_once_and_tp_with_world_size(capsys):
    assert main(["solve", "micro-batch-size", "llama2-7b", "--seq-length", "1024", "--use-flash-attn",
                 "--dp", "8", "--sequence-parallel", "--gpu-memory", "80GB"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sequence-parallel" in err[0]
    # G = 16 with d = 2: only t = 8 makes t*p*c*d = 16 (t = 1, 2, 4 are skipped, not errors)
    out = run_json(["solve", "tp", "llama2-7b", "--dp", "2", "--world-size", "16", "--seq-length",
                    "2048", "--use-flash-attn", "--sequence-parallel", "--gpu-memory", "80GB"], capsys)
    assert out["value"] == 8 and [row["value"] for row in out["tried"]] == [8]


def test_cli_capacity_factor_zero_refused(capsys):
    assert main(["estimate", "mixtral-8x7b", "--seq-length", "1024",
                 "--moe-expert-capacity-factor", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "capacity factor" in err


def test_context_parallel_needs_2c_to_divide_the_sequence():
    # Megatron cuts the sequence into 2c chunks (rank i keeps chunks i and 2c-1-i): c = s/2
    # works, c = s does not, although c divides s
    train = Training(seq_length=4096)
    training_memory("llama2-7b", Layout(c=2048), train)
    with pytest.raises(DivisibilityError, match="2c"):
        training_memory("llama2-7b", Layout(c=4096), train)


# --- the peak over the step's phases (issue 14) ----------------------------------------------
def test_phase_peak_megatron_last_stage_by_hand():
    # Llama-2 7B, p = t = 1, s = 4096, b = 1, V = 32000: the forward ends with the 16-bit
    # logits (2 s b V / t) and 29 bytes per token of CE buffers beside the saved fp32 softmax;
    # the backward's 16-bit logits gradient is 2 s b V / t; FusedAdam adds nothing.
    est = training_memory("llama2-7b", Layout(), Training(seq_length=4096), allowances=NOALLOW)
    assert est.breakdown()["phase_transient"] == 2 * 4096 * 32000 + 29 * 4096
    ph = est.phases()
    assert est.phase == "forward"
    assert ph["forward"] - ph["loss-backward"] == 29 * 4096
    # the blocks' backward: the loss's buffers and the output layer's activations (final norm
    # and output-layer inputs 2sbh each, the fp32 softmax 4sbV, 4 bytes per token) are freed
    out_layer = 4 * 4096 * 32000 + 4 * 4096 * 4096 + 4 * 4096
    assert ph["backward"] == ph["forward"] - (2 * 4096 * 32000 + 29 * 4096) - out_layer
    assert est.bytes_total == max(ph.values()) == ph["forward"]
    # the optimizer step holds the model states only (all activations freed)
    states = sum(v for k, v in est.grouped().items() if k in ("weights", "gradients", "optimizer"))
    assert ph["optimizer"] == states


def test_phase_peak_fsdp_by_hand():
    # FSDP2 over d = 8, Llama-2 7B: the largest block has 4h^2 + 3hf + 2h parameters
    # (q, k, v, o; gate, up, down; two RMSNorm weights) = 202383360 at h = 4096, f = 11008.
    from memsym.model import preset
    from memsym.symbols import N_ll, c, d
    from memsym.training import phase_transients, stage_counts
    from memsym.unchecked_job import unchecked

    tr = Training(seq_length=4096, sharding="fsdp")
    x = preset("llama2-7b")
    n_ll = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert stage_counts(unchecked(x, Layout(d=8), tr), 0)[N_ll] == n_ll
    ph = phase_transients(unchecked(x, Layout(d=8), tr), 0)
    vals = {N_ll: n_ll, d: 8, c: 1}
    fwd = {t_.key: t_.expr.subs(vals) for t_ in ph["forward"]}
    # two blocks all-gathered in bf16 (current + prefetched)
    assert fwd["unsharded_params"] == 2 * n_ll * 2
    bwd = {t_.key: t_.expr.subs(vals) for t_ in ph["backward"]}
    # + the block's bf16 unsharded grads + fp32 reduce-scatter input and 1/8 output
    assert bwd["unsharded_grads"] == 2 * n_ll
    assert bwd["reduce_scatter"] == 4 * n_ll + sp.Rational(4 * n_ll, 8)
    opt = {t_.key for t_ in ph["optimizer"]}
    assert opt == {"adam_sqrt"}          # torch AdamW foreach: sqrt(exp_avg_sq) out of place
    est = training_memory(x, Layout(d=8), tr, allowances=NOALLOW)
    assert est.bytes_total == max(est.phases().values())


def test_torchtitan_fsdp2_phases_by_hand():
    # Llama-3 8B (8030261248 parameters; h = 4096, V = 128256; blocks of 218112000) under
    # FSDP2 over d = 8, full recompute, one 8192-token sequence: torchtitan's train step
    # against the same FSDP2 job without its runtime.  torchtitan zero_grads (set_to_none)
    # first, so forward and the loss's backward hold no sharded gradient (4 N / 8); v0.2's
    # apply_fsdp keeps [norm, output] gathered after forward (2 (Vh + h)) and reshards every
    # block (not the n_ag = 2 blocks of a plain FSDP2 forward); in the blocks' backward the
    # gradients are made as the blocks' inputs (2 s h each, full recompute) are freed (the
    # output layer's activations are freed by then in both), and at its end (the first
    # block's backward) the prefetched group is the embedding (2 V h), not a block; the
    # output group's own backward (the output's fp32 reduce-scatter, 4 V h (1 + 1/8), beside
    # the last block prefetched, 12 bytes per logit freed) stays below the loss's backward.
    # These are the tensors allocated: the reserved and device counts keep the gradients'
    # blocks in the reduce-scatter stream's pool in every phase (tests/test_stream_pools.py)
    common = dict(seq_length=8192, micro_batch_size=1, global_batch_size=8, sharding="fsdp",
                  recompute="full", dropout=False, metric="allocated")
    tt, plain = (training_memory("llama3-8b", Layout(d=8), Training(framework=fw, **common),
                                 allowances=NOALLOW).phases() for fw in ("torchtitan", "megatron"))
    grads = 4 * 8030261248 // 8
    out_group = 2 * (128256 * 4096 + 4096)
    blocks = 2 * 2 * 218112000
    # and its eager fp32 final RMSNorm keeps 6 s h (fp32 copy, 16-bit output), not 2 s h
    final_norm = (6 - 2) * 8192 * 4096
    for phase in ("forward", "loss-backward"):
        assert tt[phase] - plain[phase] == out_group - blocks - grads + final_norm
    layer_inputs = 32 * 2 * 8192 * 4096
    embedding_over_block = 2 * (128256 * 4096 - 218112000)
    # the block rebuilt for its backward keeps its eager SwiGLU's SiLU output, 2 s f
    # (torchtitan's FeedForward; Megatron's fused SwiGLU keeps none)
    silu = 2 * 8192 * 14336
    assert tt["backward"] - plain["backward"] == \
        embedding_over_block - min(grads + embedding_over_block, layer_inputs) + silu
    assert tt["optimizer"] == plain["optimizer"]


def test_phase_peak_is_the_max_of_the_phase_totals_with_allowances():
    est = training_memory("llama2-7b", Layout(p=2, d=2), Training(seq_length=2048,
                                                                   global_batch_size=8))
    assert est.bytes_total == max(est.phases().values())


def test_lora_gathered_inputs_by_hand():
    # Qwen3-8B LoRA at t = 2 with SP, s = 8192, b = 1: each of 36 layers keeps the gathered
    # bf16 norm output for LoRA-A of linear_qkv and linear_fc1: 36 * 2 * 2 s h bytes, 0 with
    # the regather (Megatron-Bridge peft/lora.py)
    lay = Layout(t=2, sequence_parallel=True)
    base = Training(seq_length=8192, finetune="lora", lora_rank=32, flash_attention=True,
                    dropout=False)
    off = training_memory("qwen3-8b", lay, base, allowances=NOALLOW)
    on = training_memory("qwen3-8b", lay, Training(**{**base.__dict__, "lora_regather": True}),
                         allowances=NOALLOW)
    assert off.breakdown()["lora_gathered_inputs"] == 36 * 2 * 2 * 8192 * 4096
    assert "lora_gathered_inputs" not in on.breakdown()
    assert off.bytes_total - on.bytes_total == 36 * 2 * 2 * 8192 * 4096


# --- the fp32 main gradients of a 16-bit gradient buffer live only in the optimizer step ----
# Megatron-core DistributedOptimizer._copy_model_grads_to_main_grads makes
# shard_main_param.grad = shard_model_grad.float() in step(); zero_grad (set_to_none on
# shard_fp32_from_float16_groups) frees it at the start of the next step, before forward.
def test_bf16_grad_main_copy_is_an_optimizer_step_transient():
    lay = Layout(t=1, p=1, d=4)
    trn = Training(seq_length=2048, micro_batch_size=1, global_batch_size=16, grad_dtype="bf16",
                   dropout=False)
    est = training_memory("llama2-7b", lay, trn, allowances=NOALLOW)
    N = parameter_count(preset("llama2-7b"))
    step = dict(est.step_bytes)
    assert step == {"main_gradients": sp.Rational(4 * N, 4)}     # 4 bytes over d = 4
    g = est.grouped()
    assert "main_gradients" not in g
    # steady states: bf16 weights 2 + bf16 grad buffer 2 (whole) + master and Adam 12/d
    states = g["weights"] + g["gradients"] + g["optimizer"]
    assert states == N * (2 + 2) + sp.Rational(12 * N, 4)
    ph = est.phases()
    assert ph["optimizer"] == states + step["main_gradients"]     # no activations, no logits
    assert ph["forward"] == states + g["activations"] + g.get("transients", 0)
    # the textbook convention keeps the published steady sum (2 + 2 + 16/d at bf16 grads: none
    # is moved), so the step-only list is empty there
    seed = training_memory("llama2-7b", lay, Training(seq_length=2048, micro_batch_size=1,
                                                      global_batch_size=16, dropout=False,
                                                      convention="seed000"), allowances=NOALLOW)
    assert seed.step_bytes == ()


def test_peak_over_phases_solves_in_closed_form():
    # ZeRO-3 holds its fp32 gradient partition only in the step: the total is a Max over
    # phases; the smallest d is still exact and equals a brute-force scan of the estimate
    from memsym.job_solver import solve_job
    from memsym.job import job

    j = job("llama2-13b", dp=2, sharding="zero3", seq_length=4096, recompute="full",
            micro_batch_size=1, capacity=40 * 10**9)
    sol = solve_job(j, "dp")
    fits = [dd for dd in range(1, 65)
            if training_memory(j.replace(dp=dd)).bytes_total <= 40 * 10**9]
    assert sol.value == fits[0]
    assert sol.closed_form is not None


def test_cli_grad_reduce_in_bf16_and_fp8_param_gather(capsys):
    # Megatron's flags in memsym mode: --grad-reduce-in-bf16 halves the whole gradient buffer
    # (fp32 -> bf16) and makes the 4-byte fp32 copy of the rank's 1/d shard at the optimizer
    # step (at d = 2 the same bytes as the bf16 buffer); --fp8-param-gather keeps the linear
    # weights in FP8 only
    base = ["estimate", "llama3-8b", "--tp", "2", "--dp", "2", "--seq-length", "2048",
            "--global-batch-size", "8", "--json"]

    def run(*extra):
        assert main([*base, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    fp32, bf16 = run(), run("--grad-reduce-in-bf16")
    assert fp32["optimizer_step_bytes"] == {}
    assert bf16["bytes"]["gradients"] * 2 == fp32["bytes"]["gradients"]
    assert bf16["optimizer_step_bytes"]["main_gradients"] == bf16["bytes"]["gradients"]
    fp8 = run("--precision", "fp8", "--fp8-param-gather")
    cached = run("--precision", "fp8")
    # TE's cache is rowwise + transpose (2 B per linear weight); with fp8_param_gather the FP8
    # parameter keeps the same two where no GPU says FP8 GEMMs take non-TN layouts (TE's
    # post_all_gather_processing makes the transpose after each gather): only the bf16 copy goes
    assert cached["bytes"]["fp8_weights"] == fp8["bytes"]["fp8_weights"]
    assert fp8["bytes"]["weights"] < cached["bytes"]["weights"]
    # Megatron's validate_args: the flag only stops --bf16 forcing fp32 gradients; with fp16
    # parameters the buffer is fp16 either way, and memsym says the flag did nothing
    f16, f16_flag = run("--precision", "fp16"), run("--precision", "fp16", "--grad-reduce-in-bf16")
    assert f16_flag["bytes"] == f16["bytes"]
    assert any("has effect only with bf16" in n for n in f16_flag["notes"])


def test_compiled_loss_keeps_16bit_logits_and_drops_the_fp32_copies():
    # torchtitan's loss F.cross_entropy(pred.float(), labels): eager, the fp32 log-softmax is
    # saved (4 tau V) and the bf16 pred plus its .float() copy exist at the end of forward
    # (2 + 4 tau V); compiled, Inductor saves the bf16 pred and 8 bytes per token and makes no
    # copy (tests/test_engine_compile.py runs both).  Llama-3 8B, FSDP2 over 8 GPUs, one
    # 8192-token sequence: tau = 8192, V = 128256
    tau, V = 8192, 128256
    common = dict(seq_length=tau, micro_batch_size=1, sharding="fsdp", recompute="selective-op",
                  dropout=False)
    lay = Layout(d=8)
    eager = training_memory("llama3-8b", lay, Training(**common), allowances=NOALLOW)
    comp = training_memory("llama3-8b", lay, Training(compiled_loss=True, **common),
                           allowances=NOALLOW)
    fe, le, be = (dict(eager.phase_bytes)[ph] for ph in ("forward", "loss-backward", "backward"))
    fc, lc, bc = (dict(comp.phase_bytes)[ph] for ph in ("forward", "loss-backward", "backward"))
    assert fe - fc == (4 + 6) * tau * V - (2 * tau * V + 8 * tau)
    # the loss's backward: eager adds the fp32 nll and log_softmax gradients (8 tau V) to
    # its saved 4 tau V, compiled the 16-bit gradient (2 tau V) to its 2 tau V + 8 tau
    assert le - lc == (4 + 8) * tau * V - (2 * tau * V + 8 * tau + 2 * tau * V)
    # the blocks' backward: both losses' buffers are gone
    assert be == bc
    with pytest.raises(InvalidValueError, match="compiled_loss"):
        training_memory("llama3-8b", lay, Training(compiled_loss="yes", **common))


def test_cli_compiled_loss_and_selective_op(capsys):
    base = ["estimate", "llama3-8b", "--dp", "8", "--sharding", "fsdp", "--seq-length", "8192",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--hidden-dropout", "0",
            "--attention-dropout", "0", "--json"]

    def run(*extra):
        assert main([*base, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    eager, comp = run("--recompute", "selective-op"), run("--recompute", "selective-op",
                                                          "--compiled-loss")
    assert comp["training"]["recompute"] == "selective-op"
    # the saved logits: fp32 log-softmax (4 tau V) -> bf16 pred + 8 bytes per token
    tau, V = 8192, 128256
    assert (eager["activation_bytes"]["output_activations"]
            - comp["activation_bytes"]["output_activations"] == 2 * tau * V - 8 * tau)
    assert "torchtitan, torchtitan/components/loss.py" in comp["sources"]["activations"]
    # without a MODEL only model states are estimated: the flag is refused, not ignored
    assert main(["estimate", "--params", "8e9", "--compiled-loss"]) == 2
    assert "--compiled-loss" in capsys.readouterr().err


def test_recompute_block_and_uniform_follow_megatron():
    # Megatron's transformer_block.py _checkpointed_forward under full recompute:
    # block N checkpoints the first N layers (their input kept, 2sbh each, Korthikanti §4.1)
    # and the rest keep everything (Korthikanti Eq. 1, sbh(34 + 5as/h), plus memsym's fp32
    # statistics of the two LayerNorms, 16 bytes per token); uniform N keeps one input per
    # group of N and rematerialises a whole group.  GPT-3 175B, t = p = 1, one sequence.
    s, b, h, a, L = 2048, 1, 12288, 96, 96
    none_layer = s * b * h * (34 + 5 * a * s // h) + 16 * s * b
    common = dict(t=1, p=1, d=1, seq_length=s, micro_batch_size=b, num_microbatches=1,
                  recompute="full", flash_attention=False, dropout=True, sharding="zero3")

    def parts(**kw):
        from memsym.job import job as make_job
        from memsym.training import job_memory

        bd = job_memory(make_job("gpt3-175b", **common, **kw)).breakdown()
        return bd["layer_activations"], bd["recompute_working_set"]

    full, ws = parts()
    assert (full, ws) == (L * 2 * s * b * h, none_layer)
    assert parts(recompute_method="uniform", recompute_num_layers=1) == (full, ws)
    assert parts(recompute_method="block", recompute_num_layers=L) == (full, ws)
    blk, ws_b = parts(recompute_method="block", recompute_num_layers=10)
    assert (blk, ws_b) == (10 * 2 * s * b * h + (L - 10) * none_layer, none_layer)
    uni, ws_u = parts(recompute_method="uniform", recompute_num_layers=4)
    assert (uni, ws_u) == (L // 4 * 2 * s * b * h, 4 * none_layer)
    # Megatron's rules: both flags with full recompute; an N beyond the chunk's layers is not
    # refused (TransformerConfig raises only for a missing N) and checkpoints all of them
    # (core/recompute.py: layer_idx < N in the block method, min(layer_idx + N, layers) uniform)
    with pytest.raises(InvalidValueError, match="need recompute full"):
        training_memory("gpt3-175b", Layout(), Training(
            recompute="selective", recompute_method="block", recompute_num_layers=2))
    from memsym.job import job as make_job

    assert parts(recompute_method="block", recompute_num_layers=L + 30) == (full, ws)
    assert parts(recompute_method="uniform", recompute_num_layers=L + 30) == \
        parts(recompute_method="uniform", recompute_num_layers=L)
    with pytest.raises(InvalidValueError, match="needs both"):
        make_job("gpt3-175b", **common, recompute_method="block")


def test_recompute_block_step_time_reruns_only_its_layers():
    # the backward reruns the forward of N of the chunk's layers: the compute between no
    # recompute and full recompute, in proportion N / (L / (p v))
    from memsym.job import job as make_job
    from memsym.timing.step import step_time

    base = dict(t=8, p=4, d=4, seq_length=8192, global_batch_size=512, sequence_parallel=True)
    part = {}
    for key, kw in (("none", {"recompute": "none"}), ("full", {"recompute": "full"}),
                    ("block", {"recompute": "full", "recompute_method": "block",
                               "recompute_num_layers": 5})):
        j = make_job("llama3-70b", **base, **kw)
        part[key] = step_time(j.model, j.layout, j.training, "h100-80gb").parts["compute"]
    assert part["block"] == pytest.approx(part["none"] + (part["full"] - part["none"]) * 5 / 20,
                                          rel=1e-12)


def test_microbatch_group_size_sets_the_interleaved_warm_up():
    # Megatron's --microbatch-group-size-per-virtual-stage N: the warm-up runs
    # 2(p - i - 1) + (v - 1) N + 1 chunk forwards before the first backward.  The oracle is
    # memsym.timing.schedule.simulate, which runs the schedule's order and counts the forwards
    # not yet backwarded: p = 4, v = 2, m = 16 holds 11 / 15 / 23 chunks on rank 0 at
    # N = 4 (default) / 8 / 16, and the first chunk's embedding activations max(N, 2p - 1)
    from memsym.timing.schedule import simulate

    lay = Layout(t=1, p=4, d=1, v=2)
    act = {}
    for n_ in (None, 8, 16):
        tr = Training(seq_length=2048, global_batch_size=16, micro_batch_size=1,
                      microbatch_group_size=n_)
        act[n_] = training_memory("llama2-7b", lay, tr, allowances=NOALLOW).activations()
        assert simulate(4, 16, 2, n_).in_flight[0] == {None: 11, 8: 15, 16: 23}[n_]
    for n_, chunks in ((8, 15), (16, 23)):
        assert act[n_]["layer_activations"] / act[None]["layer_activations"] == \
            sp.Rational(chunks, 11)
        assert act[n_]["embedding_activations"] / act[None]["embedding_activations"] == \
            sp.Rational(n_, 7)


def test_microbatch_group_size_reaches_the_step_time():
    # Megatron's schedule rule (schedules.py): m = 9 on p = 4 runs with N = 5 (groups of 5
    # and 4) and is refused with the default N = p (9 mod 4 = 1 < p)
    from memsym.timing.schedule import schedule_rule
    from memsym.timing.step import step_time

    lay = Layout(t=1, p=4, d=1, v=2)
    for n_, ok in ((None, False), (5, True)):
        assert (schedule_rule(4, 9, 2, n_) is None) == ok
        tr = Training(seq_length=2048, global_batch_size=9, micro_batch_size=1,
                      microbatch_group_size=n_, flash_attention=True, dropout=False)
        assert step_time(preset("llama2-7b"), lay, tr, "h100-80gb").assumptions["launchable"] == ok


def test_gpipe_without_a_pipeline_is_gradient_accumulation():
    # with p = 1 there is no pipeline to fill: each micro-batch's backward follows its
    # forward and frees its activations, so schedule="gpipe" holds what 1F1B holds (one
    # micro-batch), not all m (GPipe's m micro-batches in flight need p > 1 stages); with
    # p = 2 GPipe's first stage holds all m micro-batches of its L/2 layers
    from memsym.job import job

    def acts(p_, schedule):
        j = job("llama3-8b", p=p_, d=8 // p_, seq_length=4096, global_batch_size=64,
                schedule=schedule, dropout=False)
        return training_memory(j.model, j.layout, j.training).grouped()["activations"]

    assert acts(1, "gpipe") == acts(1, "1f1b")
    m_ = 64 // 4                      # micro-batches per pipeline at p = 2, d = 4
    assert acts(2, "gpipe") > acts(2, "1f1b") * (m_ / 2) * 0.9
