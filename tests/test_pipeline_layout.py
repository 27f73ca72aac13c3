"""Megatron-Core's custom pipeline layouts (--pipeline-model-parallel-layout and the
account-for-embedding/loss split): parsing, Megatron's rules, the layers each chunk builds,
the memory in flight, the readers and the command line."""

from __future__ import annotations

import itertools

import pytest
import sympy as sp
from hypothesis import given, settings, strategies as st

from memsym.cli import main
from memsym.errors import InvalidValueError
from memsym.job import job
from memsym.model.pipeline_layout import PipelineLayout, parse_layout_string
from memsym.timing.schedule import chunk_peak
from memsym.training import job_memory


def _megatron_num_layers_to_build(num_layers, pp, vp, pp_rank, vp_stage, embedding, loss):
    """TEST-ONLY: megatron/core/transformer/transformer_block.py get_num_layers_to_build
    (rev d98e8a6), the account-for branch, line by line (vp None when not interleaved)."""
    n = num_layers
    if embedding:
        n += 1
    if loss:
        n += 1
    assert n % pp == 0
    num_layers_per_pipeline_rank = n // pp
    if vp is not None and pp > 1:
        assert num_layers_per_pipeline_rank % vp == 0
        num_layers_to_build = num_layers_per_pipeline_rank // vp
    else:
        num_layers_to_build = num_layers_per_pipeline_rank
    first_vp = vp is None or vp_stage == 0
    last_vp = vp is None or vp_stage == vp - 1
    if embedding and first_vp and pp_rank == 0:
        num_layers_to_build -= 1
    if loss and last_vp and pp_rank == pp - 1:
        num_layers_to_build -= 1
    return num_layers_to_build


def test_megatron_docstring_layouts():
    # parse_str_to_list's docstring: "Ettt|(tt|)*29,m|L" ->
    # [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]
    stages = parse_layout_string("Ettt|(tt|)*29,m|L")
    assert stages == ([["embedding"] + ["decoder"] * 3] + [["decoder"] * 2] * 29
                      + [["mtp"], ["loss"]])
    # transformer_config.py's list example: pp rank 0 holds embedding, decoder; pp rank 1
    # decoder*3, loss
    lay = PipelineLayout.from_spec([["embedding", "decoder"],
                                    ["decoder", "decoder", "decoder", "loss"]], 2)
    assert (lay.v, lay.stages[0][0], lay.stages[1][0]) == \
        (1, ("embedding", "decoder"), ("decoder",) * 3 + ("loss",))
    # its string example 'E|(tt|)*2,(t|)*4,mL' (8 stages; the ranks it lists are 0..3, so
    # p = 4 and v = 2): vpp 0: E | tt | tt | t, vpp 1: t | t | t | mL
    lay = PipelineLayout.from_spec("E|(tt|)*2,(t|)*4,mL", 4)
    assert lay.v == 2
    assert [lay.chunk_layers(r) for r in range(4)] == [(0, 1), (2, 1), (2, 1), (1, 0)]
    assert lay.stages[3][1] == ("mtp", "loss")
    # get_layer_offset: chunk 1 of rank 0 starts after every rank's chunk 0 (5 layers)
    assert lay.layer_ids(0) == ((), (5,)) and lay.layer_ids(3) == ((4,), ())


def test_account_flags_build_what_megatron_builds():
    for L, pp, vp in ((126, 16, 4), (126, 16, 8), (126, 16, None), (30, 4, 2), (62, 8, None)):
        for emb, loss in ((True, True), (True, False), (False, True)):
            if (L + emb + loss) % pp or ((L + emb + loss) // pp) % (vp or 1):
                with pytest.raises(InvalidValueError):
                    PipelineLayout.from_account_flags(L, pp, vp, embedding=emb, loss=loss)
                continue
            lay = PipelineLayout.from_account_flags(L, pp, vp, embedding=emb, loss=loss)
            for r, j in itertools.product(range(pp), range(vp or 1)):
                assert lay.chunk_layers(r)[j] == _megatron_num_layers_to_build(
                    L, pp, vp, r, j, emb, loss), (L, pp, vp, emb, loss, r, j)
    # Llama 3 405B, 16 ranks, both counted: Meta's 7 + 14 x 8 + 7, now with v = 4
    lay = PipelineLayout.from_account_flags(126, 16, 4, embedding=True, loss=True)
    assert [lay.rank_layers(r) for r in (0, 1, 15)] == [7, 8, 7]


def test_megatrons_layout_rules():
    x = dict(num_layers=6, hidden_size=512, num_attention_heads=8, vocab_size=1000,
             seq_length=256, num_microbatches=4, p=2)
    for bad, match in (("t|tt|tt|tL", "first layer must be the embedding"),
                       ("Et|tt|tt|tt", "last layer must be the loss"),
                       ("Et|tt|tt|ttL", "7 decoder layers"),
                       ("Et|tt|tt|tmL", "MTP layers"),
                       ("Et|tt|tt", "divisible by the pipeline-parallel size"),
                       ("Et|tX|tt|tL", "invalid layer character 'X'"),
                       ("Et|t*99999999|tt|tL", r"larger than 10\^7")):
        with pytest.raises(InvalidValueError, match=match):
            job(None, pipeline_model_parallel_layout=bad, **x)
    with pytest.raises(InvalidValueError, match="first/last stage sizes"):
        job(None, pipeline_model_parallel_layout="Et|tt|tt|tL", first_stage_layers=1, **x)
    with pytest.raises(InvalidValueError, match="conflicts"):
        job(None, pipeline_model_parallel_layout="Et|tt|tt|tL", v=4, **x)
    with pytest.raises(InvalidValueError, match="account-for"):
        job(None, pipeline_model_parallel_layout="Et|tt|tt|tL",
            account_for_loss_in_pipeline_split=True, **x)
    with pytest.raises(InvalidValueError, match="Megatron-Core"):
        job(None, pipeline_model_parallel_layout="Et|tt|tt|tL", framework="torchtitan", **x)


def test_unequal_chunks_peak_where_the_schedule_holds_most():
    # 6 layers on p = 2, v = 2 as 'Et|tt|tt|tL': rank 0 builds chunks of 1 and 2 layers,
    # rank 1 of 2 and 1.  Megatron's order for m = 4 (N = 2), by hand:
    #   rank 0: F0c0 F1c0 F0c1 F1c1 | F2c0 (5 passes, chunk 0 x3 + chunk 1 x2 = 7 layers) ...
    #   rank 1: F0c0 F1c0 | F0c1 B0c1 F1c1 B1c1 F2c0 (chunk 0 x3 = 6 layers) B0c0 ...
    # against the even 3 + 3 split without interleaving, which holds min(p - i, m)
    # micro-batches of 3 layers: 6 and 3 layer-passes
    assert chunk_peak(0, 2, 4, 2, (1, 2)) == (3, 2)
    assert chunk_peak(1, 2, 4, 2, (2, 1)) == (3, 0)
    x = dict(num_layers=6, hidden_size=1024, num_attention_heads=8, vocab_size=32000,
             seq_length=1024, num_microbatches=4, p=2)
    custom = job(None, pipeline_model_parallel_layout="Et|tt|tt|tL", **x)
    even = job(None, **x)
    assert custom.layout.v == 2
    for stage, ratio in ((0, sp.Rational(7, 6)), (1, 2)):
        a = job_memory(custom, stage=stage).activations()
        b = job_memory(even, stage=stage).activations()
        assert a["layer_activations"] / b["layer_activations"] == ratio
    a, b = job_memory(custom, stage=0).activations(), job_memory(even, stage=0).activations()
    assert a["embedding_activations"] / b["embedding_activations"] == sp.Rational(3, 2)


def test_deepseek_v3_bridge_layouts():
    # Megatron-Bridge's DeepSeek-V3 recipe (recipes/deepseek/h100/deepseek_v3.py,
    # _get_deepseek_v3_pipeline_layout): PP 16 holds [E + 4], [4] x 14, [1 + mtp + loss];
    # the same list serves PP 8 with VP 2.  With one chunk per rank it is the uneven split
    # first 4 / last 1, to the byte in memory; the step time runs the MTP layer as one more
    # decoder layer on the last rank (Megatron-LM's MultiTokenPredictionLayer holds a
    # TransformerLayer, multi_token_prediction.py rev d98e8a6), where the first / last split
    # places it too (get_mtp_num_layers_to_build: the last stage): the same step.  With VP 2
    # the last rank's chunks are 4 and 1, which --decoder-last-pipeline-num-layers cannot say
    # (5 is not a multiple of v)
    from memsym.timing.step import step_time

    bridge = [["embedding"] + ["decoder"] * 4] + [["decoder"] * 4] * 14 + \
        [["decoder", "mtp", "loss"]]
    kw = dict(t=2, e=64, sequence_parallel=True, seq_length=4096, global_batch_size=1024,
              recompute="full", world_size=2048, gpu="h100-80gb")
    a = job("deepseek-v3", p=16, pipeline_model_parallel_layout=bridge, **kw)
    b = job("deepseek-v3", p=16, first_stage_layers=4, last_stage_layers=1, **kw)
    assert job_memory(a).bytes_total == job_memory(b).bytes_total
    ta = step_time(a.model, a.layout, a.training, "h100-80gb")
    tb = step_time(b.model, b.layout, b.training, "h100-80gb")
    assert ta.parts["compute"] == pytest.approx(tb.parts["compute"], rel=1e-12)
    assert ta.total == pytest.approx(tb.total, rel=1e-12)
    c = job("deepseek-v3", p=8, pipeline_model_parallel_layout="Et*4|(tttt|)*14,tmL", **kw)
    assert c.layout.v == 2 and c.layout.pipeline_layout.chunk_layers(7) == (4, 1)
    assert PipelineLayout.from_spec(bridge, 8).stages == c.layout.pipeline_layout.stages
    with pytest.raises(InvalidValueError, match="multiple of|divide the layers"):
        job("deepseek-v3", p=8, v=2, first_stage_layers=8, last_stage_layers=5, **kw)
    # an MTP stage on a rank of its own (Megatron's mtp_standalone) is refused, not guessed
    with pytest.raises(InvalidValueError, match="mtp_standalone"):
        job("deepseek-v3", p=4, pipeline_model_parallel_layout="Et*20|t*20|t*21,m|L", **kw)


def test_megatron_command_and_cli_take_layouts(capsys):
    from memsym.readers.jobs import megatron_job
    from memsym.readers.megatron import read_megatron_args

    base = ["--num-layers", "126", "--hidden-size", "16384", "--num-attention-heads", "128",
            "--group-query-attention", "--num-query-groups", "8", "--ffn-hidden-size", "53248",
            "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
            "--untie-embeddings-and-output-weights", "--disable-bias-linear",
            "--seq-length", "8192", "--max-position-embeddings", "8192", "--vocab-size",
            "128256", "--tokenizer-type", "NullTokenizer", "--micro-batch-size", "1",
            "--global-batch-size", "2048", "--bf16", "--tensor-model-parallel-size", "8",
            "--pipeline-model-parallel-size", "16", "--sequence-parallel",
            "--use-distributed-optimizer", "--world-size", "16384",
            "--recompute-granularity", "full", "--recompute-method", "uniform",
            "--recompute-num-layers", "1"]
    flags = megatron_job(read_megatron_args(
        base + ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
                "--num-virtual-stages-per-pipeline-rank", "4"]))
    text = megatron_job(read_megatron_args(
        base + ["--pipeline-model-parallel-layout", "Et|(tt|)*62,tL"]))
    assert flags.layout.v == text.layout.v == 4
    assert flags.layout.pipeline_layout.stages == text.layout.pipeline_layout.stages
    assert job_memory(flags).bytes_total == job_memory(text).bytes_total
    with pytest.raises(InvalidValueError, match="num-virtual-stages-per-pipeline-rank"):
        read_megatron_args(base + ["--pipeline-model-parallel-layout", "Et|(tt|)*62,tL",
                                   "--num-layers-per-virtual-pipeline-stage", "2"])
    args = ["estimate", "llama3-405b", "--tp", "8", "--pp", "16", "--world-size", "16384",
            "--sequence-parallel", "--seq-length", "8192", "--global-batch-size", "2048",
            "--recompute", "full"]
    assert main(args + ["--pipeline-model-parallel-layout", "Et|(tt|)*62,tL"]) == 0
    out = capsys.readouterr().out
    assert "1+2+2+2, 2+2+2+2 x14, 2+2+2+1" in out
    assert main(args + ["--pipeline-model-parallel-layout", "Et*4|(tttt|)*14,tmL"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "61 decoder layers" in err and "Traceback" not in err


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(alphabet="EtmLx|()*,0123456789 \x07", max_size=40))
def test_any_layout_text_parses_or_is_refused_in_one_line(text):
    # a layout string from a user or a launch script: Megatron's stages, or memsym's own
    # InvalidValueError (never another exception, never an unbounded expansion)
    try:
        stages = parse_layout_string(text)
    except InvalidValueError as exc:
        assert "\n" not in str(exc) and "\x07" not in str(exc)
        return
    assert all(kind in ("embedding", "decoder", "mtp", "loss") for s in stages for kind in s)


def test_bad_layout_on_the_command_line_is_one_line(capsys):
    for bad in ("((((", "Et*99999999999|L", "E\x1b[2J|L"):
        code = main(["estimate", "llama2-7b", "--pp", "2", "--pipeline-model-parallel-layout", bad])
        err = capsys.readouterr()
        assert code == 2 and err.out == "" and err.err.count("\n") == 1
        assert "\x1b" not in err.err and "Traceback" not in err.err
