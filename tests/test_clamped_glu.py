"""GPT-OSS's clamped quick-GeGLU keeps a clamped copy of the experts' fc1 output (issue 30).

Megatron-core at d98e8a64dd, ``megatron/core/fusions/fused_bias_geglu.py``:

* :410-440 ``weighted_bias_quick_geglu_impl``: with ``clamp_value`` set,
  ``x_glu, x_linear = input.chunk(2, -1)`` and
  ``input = torch.cat((x_glu.clamp(min=None, max=clamp_value),
  x_linear.clamp(min=-clamp_value, max=clamp_value)), -1)``, then
  ``WeightedQuickGeGLUFunction.apply(input, weights, fp8_input_store, linear_offset)`` (no bias:
  ``moe/experts.py:224`` builds the experts' fc1 with ``skip_bias_add=False``);
* :326-327 ``WeightedQuickGeGLUFunction.forward``: ``ctx.save_for_backward(input_for_backward,
  weights, linear_offset)``, the concatenation itself (no FP8 store).

Each clamp keeps its input (a view of the fc1 output, which memsym already counts as
``expert_activation``); the concatenation is a new ``[R, 2 f_e / t_e]`` 16-bit tensor: 2 x 2 f_e
/ t_e bytes per routed row.  The expected values below are that count written out by hand.
"""

from __future__ import annotations

import dataclasses

import pytest

from memsym.frameworks import FRAMEWORK
from memsym.model import preset
from memsym.terms.activations import clamped_glu_copy, unfused_glu_products
from memsym.terms.eager_glu import eager_clamped_glu_input
from memsym.training import Layout, Training, training_memory

from framework_ports import saved_storage_bytes, saved_storages


def test_copy_by_hand_small_config():
    # s = 16, b = 2, top-2, TP 2, ETP 1: a rank receives R = 2 x 16 x 2 / 2 = 32 routed rows;
    # each keeps 2 f_e = 16 more bf16 elements (32 bytes): 32 x 32 = 1024 bytes per layer
    per_layer = clamped_glu_copy().evaluate(s=16, b=2, c=1, c_f=1, k=2, t=2, t_e=1, f_e=8)
    assert per_layer == 1024
    # ETP 2 halves each expert's f_e on a rank and doubles the rows it receives (the all-gather)
    assert clamped_glu_copy().evaluate(s=16, b=2, c=1, c_f=1, k=2, t=2, t_e=2, f_e=8) == 1024
    assert clamped_glu_copy(False).expr == 0


def test_the_saved_width_replayed_in_torch():
    # the source's eager code (fused_bias_geglu.py:424-440) with a stand-in for
    # WeightedQuickGeGLUFunction that saves what its forward saves (:326-327); the saved
    # storages are read through torch's saved-tensor hooks, not from memsym
    torch = pytest.importorskip("torch")

    class SavesInput(torch.autograd.Function):
        @staticmethod
        def forward(ctx, inp, weights, linear_offset):
            ctx.save_for_backward(inp, weights, linear_offset)
            return inp[..., : inp.shape[-1] // 2] * weights

        @staticmethod
        def backward(ctx, grad):
            return None, None, None

    rows, f_e, clamp = 6, 5, 7.0
    fc1 = torch.randn(rows, 2 * f_e, dtype=torch.bfloat16, requires_grad=True)
    weights = torch.rand(rows, 1, dtype=torch.float32)
    out = fc1 * 1                         # the fc1 GEMM's output
    made = {}

    def run():
        x_glu, x_linear = out.chunk(2, -1)
        inp = torch.cat((x_glu.clamp(min=None, max=clamp),
                         x_linear.clamp(min=-clamp, max=clamp)), -1)
        made["inp"] = inp = inp.view(-1, out.shape[-1])
        made["offset"] = torch.tensor(1.0, dtype=inp.dtype)
        SavesInput.apply(inp, weights, made["offset"])

    saved = saved_storages(run)
    fc1_storage = out.untyped_storage().data_ptr()
    assert fc1_storage in saved                          # the clamps keep the fc1 output
    # beside it, the routing weights and the scalar offset, the function saves one new tensor
    others = {fc1_storage, weights.untyped_storage().data_ptr(),
              made["offset"].untyped_storage().data_ptr()}
    new = {p: n for p, n in saved.items() if p not in others}
    assert new == {made["inp"].untyped_storage().data_ptr(): rows * 2 * f_e * 2}  # 2f_e bf16


def _gpt_oss_activations(clamped: bool, **training) -> int:
    arch = preset("gpt-oss-120b")
    if not clamped:    # a copy is no longer the preset: dropout is given, not the recipe's
        arch = dataclasses.replace(arch, extra={k: v for k, v in arch.extra.items()
                                                if k != "swiglu_limit"})
    layout = Layout(t=2, d=4, e=8, t_e=1, sequence_parallel=True)
    tr = Training(seq_length=2048, micro_batch_size=1, global_batch_size=128, finetune="lora",
                  lora_rank=32, dropout=False, metric="allocated", **training)
    return training_memory(arch, layout, tr).grouped()["activations"]


def test_gpt_oss_120b_lora_row_by_hand():
    # seed 001's GPT-OSS-120B LoRA row (TP 2, EP 8, ETP 1, s 2048, mbs 1, top-4, f_e = 2880,
    # 36 MoE layers): R = 4 x 2048 / 2 = 4096 rows, 36 x 4096 x 2 x 2880 x 2 = 1.70 GB more
    delta = _gpt_oss_activations(True) - _gpt_oss_activations(False)
    assert delta == 36 * 4096 * 2 * 2880 * 2
    assert round(float(delta) / 1e9, 2) == 1.70


def test_recomputed_moe_act_keeps_no_copy():
    # CheckpointWithoutOutput of bias_act_func (moe/experts.py:1019-1024): the clamps and the
    # concatenation run inside it, so nothing of them is kept until the backward
    kw = dict(recompute="selective", recompute_modules=("core_attn", "moe_act"))
    assert _gpt_oss_activations(True, **kw) == _gpt_oss_activations(False, **kw)


def test_only_megatron_core_keeps_the_copy():
    assert FRAMEWORK["megatron"].moe_glu_clamp_copy
    assert not FRAMEWORK["torchtitan"].moe_glu_clamp_copy
    assert not FRAMEWORK["deepspeed"].moe_glu_clamp_copy


# A pasted Megatron-LM command: --activation-func-clamp-value is TransformerConfig's
# activation_func_clamp_value (transformer_config.py:235), so a --quick-geglu MoE model keeps
# the clamped copy; 4 MoE layers, 32 experts top-4 over EP 8 (d = 8), s = 4096, b = 1, t = 1.
# Biases stay on (no --disable-bias-linear), so bias_gelu_fusion, the fusion of a model without
# --swiglu (argument_utils.py:318-319), stays on: the fused path (moe/experts.py:973-981).
_CMD = ("--num-layers 4 --hidden-size 2880 --num-attention-heads 64 --group-query-attention "
        "--num-query-groups 8 --kv-channels 64 --ffn-hidden-size 2880 --num-experts 32 "
        "--moe-router-topk 4 --quick-geglu --seq-length 4096 --max-position-embeddings 4096 "
        "--micro-batch-size 1 --vocab-size 201088 --bf16 --moe-grouped-gemm "
        "--expert-model-parallel-size 8 --world-size 8 --gpu h100-80gb --json").split()
_CLAMP = ("--activation-func-clamp-value", "7.0")
# a rank receives R = 4096 x 4 routed rows (balanced over EP 8 from 8 ranks' 4096 tokens) of
# f_e = 2880 per expert; 4 layers; 2 bytes per bf16 element
_ROWS, _FE, _LAYERS = 4096 * 4, 2880, 4


def _activations(capsys, *extra):
    import json

    from in_process import estimate

    code, out, err = estimate(capsys, *_CMD, *extra)
    assert code == 0, err
    return json.loads(out)


def test_megatron_clamp_flag_keeps_the_copy(capsys):
    base = _activations(capsys)
    clamped = _activations(capsys, *_CLAMP)
    assert "--activation-func-clamp-value" not in clamped["ignored"]
    # fused: one concatenated copy of the fc1 output, 2 f_e bf16 elements per row
    assert clamped["bytes"]["activations"] - base["bytes"]["activations"] \
        == _LAYERS * _ROWS * (2 * _FE) * 2


@pytest.mark.parametrize("unfuse", [("--no-bias-gelu-fusion",), ("--disable-bias-linear",)])
def test_megatron_eager_quick_geglu(capsys, unfuse):
    # --no-bias-gelu-fusion, or --disable-bias-linear (validate_args turns bias_gelu_fusion off,
    # arguments.py:1604-1606): the experts run the eager glu (moe/experts.py:995-1016).  Per
    # routed row it keeps, beside the fc1 output: quick_gelu's output, x_linear + offset and
    # the gate's output the probability weighting keeps (3 f_e), and clamped, the clamped gate
    # half that the torch.compile'd quick_gelu saves (1 f_e more); the replay below measures it
    eager = _activations(capsys, *unfuse)
    eager_clamped = _activations(capsys, *unfuse, *_CLAMP)
    assert unfuse[0] not in eager["ignored"]
    assert eager_clamped["bytes"]["activations"] - eager["bytes"]["activations"] \
        == _LAYERS * _ROWS * _FE * 2
    if unfuse[0] == "--no-bias-gelu-fusion":    # the same model fused, biases and all
        fused = _activations(capsys)
        fused_clamped = _activations(capsys, *_CLAMP)
        assert eager["bytes"]["activations"] - fused["bytes"]["activations"] \
            == _LAYERS * _ROWS * 3 * _FE * 2
        assert eager_clamped["bytes"]["activations"] - fused_clamped["bytes"]["activations"] \
            == _LAYERS * _ROWS * (3 + 1 - 2) * _FE * 2


def test_gelu_fusion_flag_without_a_gated_unit_is_noted_not_ignored(capsys):
    # a non-gated GELU MLP's fusion is bias_gelu_fusion's (argument_utils.py:318-319): off, the
    # bias add and the GELU run apart (mlp.py), one elementwise pass more, the same tensor kept
    plain = [w for w in _CMD if w != "--quick-geglu"]
    from in_process import estimate
    import json

    code, out, err = estimate(capsys, *plain, "--no-bias-gelu-fusion")
    assert code == 0, err
    data = json.loads(out)
    assert "--no-bias-gelu-fusion" not in data["ignored"]
    assert any(n.startswith("--no-bias-gelu-fusion: ") and "changes step time" in n
               for n in data["notes"])
    # under --swiglu the fusion is bias_swiglu_fusion's (:314-317): then without effect
    code, out, err = estimate(capsys, *plain, "--swiglu", "--no-bias-gelu-fusion")
    assert code == 0, err
    assert "--no-bias-gelu-fusion" in json.loads(out)["ignored"]


def _eager_glu_saved(torch, quick_gelu, *, clamp, moe, rows=6, f=5):
    """The 16-bit elements per row the eager glu (moe/experts.py:996-1016; dense:
    transformer/mlp.py:321-334) saves beyond the fc1 output and the routing weights."""
    fc1 = torch.randn(rows, 2 * f, dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(rows, 1, dtype=torch.float32, requires_grad=True)
    out = fc1 * 1                         # the fc1 GEMM's output
    made = {}

    def run():
        x_glu, x_linear = torch.chunk(out, 2, dim=-1)
        if clamp:
            x_glu = x_glu.clamp(min=None, max=7.0)
            x_linear = x_linear.clamp(min=-7.0, max=7.0)
        y = quick_gelu(x_glu) * (x_linear + 1.0)
        made["y"] = (y * probs).to(torch.bfloat16) if moe else y

    kept = saved_storage_bytes(run, own=(out, probs))
    made["y"].float().sum().backward()
    return kept // 2 // rows


@pytest.mark.parametrize("moe", [True, False])
def test_the_eager_products_replayed_in_torch(moe):
    # Megatron's quick_gelu is @jit_fuser (fused_bias_geglu.py:184-187), torch.compile from
    # torch 2.2 (core/jit.py:16-21, :33); Inductor partitions the graph with the min-cut
    # partitioner, as the aot_eager_decomp_partition backend does without a C++ compiler
    torch = pytest.importorskip("torch")

    def quick_gelu(y):
        return y * torch.sigmoid(1.702 * y)

    compiled = torch.compile(quick_gelu, backend="aot_eager_decomp_partition", dynamic=False)
    f, t = 5, 1
    sizes = dict(s=6, b=1, c=1, c_f=1, k=1, t=t, t_e=1, f=f, f_e=f)    # 6 rows
    per_row = {clamp: (unfused_glu_products(False, moe=moe).evaluate(**sizes)
                       + eager_clamped_glu_input(clamp, moe=moe).evaluate(**sizes)) // 2 // 6
               for clamp in (False, True)}
    for clamp in (False, True):
        measured = _eager_glu_saved(torch, compiled, clamp=clamp, moe=moe, f=f)
        # the compiled quick_gelu saves its input only (as silu does): MoE 3f / 4f, dense
        # 2f / 3f, the same count as memsym's terms
        assert measured == ((3 if moe else 2) + clamp) * f
        assert per_row[clamp] == measured


@pytest.mark.parametrize("value, message", [
    # argparse's type=float takes inf; memsym's own bound of 10^6 refuses it, naming itself
    ("inf", "its own bound, not Megatron's"),
    # the token as written, not 1e400's 401 digits
    ("1e400", "--activation-func-clamp-value 1e400: memsym reads finite values up to 1000000"),
    ("abc", "must be a number, got 'abc'"),
])
def test_megatron_clamp_flag_bad_values(capsys, value, message):
    from in_process import estimate

    code, out, err = estimate(capsys, *_CMD, "--activation-func-clamp-value", value)
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err
    assert len(err) < 300


@pytest.mark.parametrize("value", ["0", "-1.5"])
def test_quick_geglu_takes_any_clamp_value(capsys, value):
    # transformer_config.py:2470-2485 checks the value for SwiGLU only (activation_func ==
    # F.silu); under quick_gelu the experts clamp with it whatever it is (experts.py:1004-1006,
    # fused_bias_geglu.py:424-433 run whenever it is not None): the same copy as 7.0
    base = _activations(capsys, *_CLAMP)
    assert _activations(capsys, "--activation-func-clamp-value", value)["bytes"] \
        == base["bytes"]


def _swiglu(*drop):
    cmd = " ".join(_CMD).replace("--quick-geglu", "--swiglu")
    for words in drop:
        cmd = cmd.replace(words, "")
    return cmd.split()


@pytest.mark.parametrize("value", ["0", "-7", "inf"])
def test_megatron_clamped_swiglu_needs_a_positive_finite_value(capsys, value):
    # transformer_config.py:2470-2480: "activation_func_clamp_value for SwiGLU must be finite
    # and greater than zero."
    from in_process import estimate

    code, out, err = estimate(capsys, *_swiglu(), "--activation-func-clamp-value", value)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "for SwiGLU must be finite and greater than zero" in err


def test_megatron_clamped_swiglu_needs_experts(capsys):
    from in_process import estimate

    dense = _swiglu("--num-experts 32 --moe-router-topk 4 ",
                    "--moe-grouped-gemm --expert-model-parallel-size 8 ")
    code, out, err = estimate(capsys, *dense, "--activation-func-clamp-value", "7.0")
    assert (code, out) == (2, "") and "needs MoE" in err


def test_a_dense_mlp_cannot_fuse_quick_geglu(capsys):
    # MLP.forward (transformer/mlp.py:299-319): with bias_activation_fusion and no
    # per_token_scale it fuses gelu and swiglu only, else raises "Only support fusion of gelu
    # and swiglu"; a dense first layer of a --quick-geglu model with biases (fusion on) fails
    from in_process import estimate

    code, out, err = estimate(capsys, *_CMD, "--moe-layer-freq", "[0]+[1]*3")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "mlp.py:299-319" in err


def test_the_eager_clamp_of_a_dense_layer(capsys):
    # unfused, the dense MLP runs the same eager glu (mlp.py:321-334): clamped, the
    # torch.compile'd quick_gelu keeps the clamped gate half, s b f / t = 4096 x 2880 bf16
    # elements in the dense layer; the 3 MoE layers keep f_e per routed row each
    dense = ("--moe-layer-freq", "[0]+[1]*3", "--no-bias-gelu-fusion")
    delta = _activations(capsys, *dense, *_CLAMP)["bytes"]["activations"] \
        - _activations(capsys, *dense)["bytes"]["activations"]
    assert delta == 4096 * 2880 * 2 + 3 * _ROWS * _FE * 2


def test_a_gpt_oss_model_with_megatron_arguments_runs_the_eager_glu(capsys):
    # GPT-OSS's clamped gated unit is Megatron's quick-GeGLU, whose fusion is
    # bias_gelu_fusion's (argument_utils.py:318-319), off with --disable-bias-linear
    # (arguments.py:1604-1606) or --no-bias-gelu-fusion; --no-bias-swiglu-fusion (a
    # --swiglu model's) does not reach it
    import json

    from in_process import estimate
    from memsym.readers.megatron import read_megatron_overrides

    for argv in (["--no-bias-gelu-fusion"], ["--disable-bias-linear"]):
        o = read_megatron_overrides(argv, num_layers=36, has_experts=True, quick_geglu=True)
        assert o.options["bias_activation_fusion"] is False and o.ignored == ()
    o = read_megatron_overrides(["--no-bias-swiglu-fusion"], num_layers=36, quick_geglu=True)
    assert "bias_activation_fusion" not in o.options and o.ignored == ("--no-bias-swiglu-fusion",)
    assert read_megatron_overrides(["--no-bias-gelu-fusion"], num_layers=36).ignored \
        == ("--no-bias-gelu-fusion",)     # a SwiGLU model's fusion is not bias_gelu_fusion

    def acts(*extra):
        code, out, err = estimate(capsys, "gpt-oss-120b", "--framework", "megatron",
                                  "--world-size", "8", "--expert-model-parallel-size", "8",
                                  "--gpu", "h100-80gb", "--json", *extra)
        assert code in (0, 1), err
        return json.loads(out)["bytes"]["activations"]

    # 36 MoE layers, s = 4096, top-4 over EP 8: R = 4 x 4096 routed rows a rank; eager
    # (3 + 1) f_e against the fused copy's 2 f_e, f_e = 2880, 2 bytes
    assert acts("--disable-bias-linear") - acts() == 36 * 4 * 4096 * (4 - 2) * 2880 * 2


def test_memsyms_swiglu_fusion_option_is_megatrons(capsys):
    # memsym's --no-bias-swiglu-fusion is Megatron's flag: core_transformer_config_from_args
    # reads args.bias_swiglu_fusion under --swiglu only (argument_utils.py:314-319 at
    # d98e8a64dd), so GPT-OSS's quick-GeGLU (whose fusion is bias_gelu_fusion) and a model
    # without a gated unit keep their fused path and the flag is listed as ignored, with a
    # preset as with a pasted Megatron-LM command
    import json

    from in_process import estimate

    def run(*argv):
        code, out, err = estimate(capsys, *argv, "--json")
        assert code in (0, 1), err
        got = json.loads(out)
        return got["bytes"]["activations"], got.get("ignored") or []

    oss = ("gpt-oss-120b", "--framework", "megatron", "--world-size", "8",
           "--expert-model-parallel-size", "8", "--gpu", "h100-80gb")
    fused, _ = run(*oss)
    assert run(*oss, "--no-bias-swiglu-fusion") == (fused, ["--no-bias-swiglu-fusion"])
    # with --no-bias-gelu-fusion the experts run the eager glu: (3 + 1) f_e per routed row
    # against the fused copy's 2 f_e (test_a_gpt_oss_model_with_megatron_arguments_...)
    eager, ignored = run(*oss, "--no-bias-swiglu-fusion", "--no-bias-gelu-fusion")
    assert eager - fused == 36 * 4 * 4096 * (4 - 2) * 2880 * 2
    assert ignored == ["--no-bias-swiglu-fusion"]
    # the pasted command (no MODEL, --quick-geglu): Megatron's reader ignores it alike
    cmd = [w for w in _CMD if w != "--json"]
    assert run(*cmd, "--no-bias-swiglu-fusion") == (run(*cmd)[0], ["--no-bias-swiglu-fusion"])
    # no gated unit (GPT-3): nothing reads it
    gpt3 = ("gpt3-175b", "--seq-length", "2048", "--world-size", "8")
    assert run(*gpt3, "--no-bias-swiglu-fusion") == (run(*gpt3)[0], ["--no-bias-swiglu-fusion"])
    # a SwiGLU model (Llama 2 7B: 32 layers, f = 11008, s = 2048, b = 1, t = 1) runs the eager
    # glu (mlp.py:325-332): silu(gate) and the product kept, 2 more s b f 16-bit tensors a layer
    llama = ("llama2-7b", "--seq-length", "2048", "--world-size", "8")
    on, off = run(*llama)[0], run(*llama, "--no-bias-swiglu-fusion")
    assert off == (on + 32 * 2048 * 11008 * 2 * 2, [])


def test_eager_silu_replayed_in_torch():
    # --swiglu's activation is F.silu itself (not compiled): it saves its input, so the clamp
    # adds the clamped gate half, one f per row, as under quick_gelu (measured, not assumed)
    torch = pytest.importorskip("torch")
    f = 5
    for moe in (False, True):
        plain = _eager_glu_saved(torch, torch.nn.functional.silu, clamp=False, moe=moe, f=f)
        clamped = _eager_glu_saved(torch, torch.nn.functional.silu, clamp=True, moe=moe, f=f)
        assert (plain, clamped) == ((3 if moe else 2) * f, (4 if moe else 3) * f)


def test_megatron_eager_clamped_swiglu(capsys):
    # --swiglu --no-bias-swiglu-fusion: bias_activation_fusion False (argument_utils.py:314-317),
    # so the MLP and the experts run the eager glu with the clamp (mlp.py:327-329,
    # moe/experts.py:1004-1006); F.silu saves the clamped gate half, a new bf16 tensor of f_e
    # per routed row: 4 MoE layers x R = 4096 x 4 rows x 2880 x 2 bytes.  A dense first layer
    # (--moe-layer-freq) keeps s b f = 4096 x 2880 elements more
    def acts(*extra):
        import json

        from in_process import estimate

        code, out, err = estimate(capsys, *_swiglu(), *extra)
        assert code == 0, err
        return json.loads(out)["bytes"]["activations"]

    unfused = ("--no-bias-swiglu-fusion",)
    assert acts(*unfused, *_CLAMP) - acts(*unfused) == _LAYERS * _ROWS * _FE * 2
    dense = ("--moe-layer-freq", "[0]+[1]*3", *unfused)
    assert acts(*dense, *_CLAMP) - acts(*dense) == 4096 * 2880 * 2 + 3 * _ROWS * _FE * 2
    # fused: WeightedSwiGLUFunction clamps inside its forward and saves only its input
    # (fused_bias_swiglu.py:266-276): no change
    assert acts(*_CLAMP) == acts()
