"""A Hugging Face Trainer launch with ``--fsdp`` read as the job Accelerate's FSDP2 plugin runs
(memsym.readers.hf_fsdp, memsym.cli.hf_fsdp_launch, memsym.terms.accelerate_fsdp).

The expectations are by-hand counts of the two-layer Llama of tests/tiny_llama.py (1 824 000
parameters, untied) from transformers 5.25.0's and Accelerate 1.16.0's sources (cited where
asserted); tests/test_engine_accelerate_fsdp.py runs Accelerate's own FSDP2 wrapping on a gloo
group and measures the bytes.
"""

from __future__ import annotations

import json

import pytest

from in_process import json_report, refused_line
from tiny_llama import F, H, LAYERS, TINY, V, tiny_llama

#: One decoder layer: q, k, v, o (h x h each), the SwiGLU's three h x f, two RMSNorms.
BLOCK = 4 * H * H + 3 * H * F + 2 * H


@pytest.fixture
def tiny(tmp_path):
    return tiny_llama(tmp_path, dtype="bfloat16")


def _fsdp(model, *extra, gpus=2):
    return ["estimate", "torchrun", "--nproc_per_node", str(gpus), "run_clm.py",
            "--model_name_or_path", model, "--block_size", "128",
            "--per_device_train_batch_size", "2", "--output_dir", "o", "--metric", "allocated",
            *extra]


def _terms(rep):
    return {p["key"]: p["bytes"] for p in rep["peak_parts"]}


def test_mixed_precision_holds_fp32_shards_over_the_gpus(capsys, tiny):
    """--bf16 is Accelerate's mixed precision: the bf16 checkpoint's parameters upcast to fp32
    (fsdp_utils.py:799-806) and sharded over 2 GPUs with their fp32 gradients and AdamW's two
    fp32 moments: (4 + 4 + 8) x 1 824 000 / 2 bytes."""
    rep = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "full_shard auto_wrap"))
    got = rep["bytes"]
    assert (got["weights"], got["gradients"], got["optimizer"]) == (
        4 * TINY // 2, 4 * TINY // 2, 8 * TINY // 2)
    trn = rep["training"]
    assert (trn["framework"], trn["sharding"], trn["accelerate_fsdp"], trn["precision"]) == (
        "deepspeed", "fsdp", "mixed", "bf16")
    assert trn["overlap_grad_reduce"] is True and trn["fsdp_keep_gathered"] is False
    assert rep["read_as"].startswith("a Hugging Face Trainer launch (run_clm.py with "
                                     "Accelerate's FSDP2")
    assert any("upcasts every trained parameter to fp32" in n for n in rep["notes"])
    # the reading's defaults, each with its line (training_args.py:2826, :2859-2861, :2833)
    said = {r["option"]: (r["value"], r["source"]) for r in rep["defaults"]}
    assert said["fsdp version"][0] == 2 and ":2826" in said["fsdp version"][1]
    assert said["fsdp auto_wrap_policy"][0] == "TRANSFORMER_BASED_WRAP"
    assert "fsdp reshard_after_forward" not in said        # full_shard sets it
    assert "megatron_fsdp" not in said
    # the peak (the blocks' backward): the first block and the prefetched embedding gathered
    # in bf16, the block's bf16 gradients and its bf16 reduce-scatter input and half-output
    # (reduce_dtype bf16: dataclasses.py:2008-2012)
    parts = _terms(rep)
    assert parts["unsharded_params"] == 2 * (BLOCK + V * H)
    assert parts["unsharded_grads"] == 2 * BLOCK
    assert parts["reduce_scatter"] == 2 * (BLOCK + BLOCK // 2)


def test_without_mixed_precision_every_tensor_is_the_weights_dtype(capsys, tiny, tmp_path):
    """No --bf16: MixedPrecisionPolicy() (fsdp_utils.py:768), so the bf16 checkpoint's shards,
    gradients and moments stay bf16 (2 + 2 + 4 bytes over d); --dtype float32 makes them fp32
    (4 + 4 + 8) and the activations fp32."""
    bf16 = json_report(capsys, _fsdp(tiny, "--fsdp"))
    assert (bf16["bytes"]["weights"], bf16["bytes"]["gradients"],
            bf16["bytes"]["optimizer"]) == (TINY, TINY, 2 * TINY)
    assert bf16["training"]["accelerate_fsdp"] == "plain"
    assert bf16["training"]["precision"] == "bf16"
    said = {r["option"]: r["value"] for r in bf16["defaults"]}
    assert said["fsdp mixed precision"] == "no" and said["dtype"] == "auto"
    fp32 = json_report(capsys, _fsdp(tiny, "--fsdp", "--dtype", "float32"))
    assert (fp32["bytes"]["weights"], fp32["bytes"]["optimizer"]) == (2 * TINY, 4 * TINY)
    assert fp32["training"]["precision"] == "fp32"
    assert fp32["bytes"]["activations"] > bf16["bytes"]["activations"]


def test_shard_grad_op_keeps_every_parameter_gathered(capsys, tiny):
    """shard_grad_op is FSDP2's reshard_after_forward False (training_args.py:2924-2925): at
    the forward's end every parameter stays gathered in bf16, 2 x 1 824 000 bytes, where
    full_shard holds the [norm, output] group alone (reshard_after_forward False on it:
    fsdp_utils.py:895-898)."""
    full = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "full_shard"))
    kept = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "shard_grad_op"))
    assert kept["training"]["fsdp_keep_gathered"] is True
    assert kept["phases"]["forward"] - full["phases"]["forward"] == \
        2 * TINY - 2 * (V * H + H)
    assert any("shard_grad_op" in n for n in kept["notes"])
    # fsdp_config says the same (JSON inline, true/false strings converted: :161-176)
    cfg = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--fsdp_config",
                                    '{"reshard_after_forward": "false"}'))
    assert cfg["bytes"] == kept["bytes"]


def test_accumulation_keeps_the_unsharded_gradients(capsys, tiny):
    """Every micro-batch but the last runs under Accelerate's no_sync (trainer.py:1941-1952,
    accelerator.py:1126-1131): each parameter's unsharded bf16 gradient is kept, 2 x 1 824 000
    bytes more from the second micro-batch's forward on."""
    one = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp"))
    four = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp",
                                     "--gradient_accumulation_steps", "4"))
    for phase in ("forward", "loss-backward", "backward"):
        assert four["phases"][phase] - one["phases"][phase] == 2 * TINY, phase
    assert any("no_sync" in n for n in four["notes"])


def test_a_tied_output_group_stays_gathered_through_the_backward(capsys, tmp_path):
    """With tied embeddings the [norm, embedding, output] group runs first and gets no
    post-backward hook (token ids need no gradient): gathered, with its unsharded gradients,
    until the backward's end."""
    tied = tiny_llama(tmp_path, "tied", dtype="bfloat16", tie_word_embeddings=True)
    rep = json_report(capsys, _fsdp(tied, "--bf16", "--fsdp"))
    assert rep["params"] == TINY - V * H
    parts = _terms(rep)
    assert parts["output_group_gathered"] == parts["output_grad_unsharded"] == 2 * (V * H + H)


def test_the_launch_is_the_same_job_as_memsyms_options(capsys, tiny):
    """The launch is written as memsym's options (memsym.cli.hf_fsdp_launch)."""
    hf = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "shard_grad_op",
                                   "--gradient_accumulation_steps", "3"))
    own = json_report(capsys, [
        "estimate", tiny, "--framework", "deepspeed", "--sharding", "fsdp", "--accelerate-fsdp",
        "mixed", "--precision", "bf16", "--optimizer", "adam", "--overlap-grad-reduce",
        "--overlap-param-gather", "--fsdp-keep-gathered", "--world-size", "2",
        "--micro-batch-size", "2", "--num-microbatches", "3", "--recompute-granularity", "none",
        "--seq-length", "128", "--metric", "allocated"])
    assert own["bytes"] == hf["bytes"]


def test_fsdp_activation_checkpointing_is_full_recompute(capsys, tiny, tmp_path):
    """fsdp_config activation_checkpointing wraps each decoder layer in Accelerate's
    checkpoint_wrapper (fsdp_utils.py:690-719): the same full recompute as the Trainer's own
    gradient checkpointing; a JSON file with fsdp_-prefixed keys (training_args.py:2784-2786)."""
    path = tmp_path / "fsdp.json"
    path.write_text(json.dumps({"fsdp_activation_checkpointing": True, "fsdp_version": 2,
                                "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                                "fsdp_cpu_ram_efficient_loading": True,
                                "backward_prefetch": "BACKWARD_PRE", "limit_all_gathers": True,
                                "fsdp_offload_params": False}), encoding="utf-8")
    fsdp_ac = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--fsdp_config", str(path)))
    own_ac = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--gradient_checkpointing"))
    assert fsdp_ac["training"]["recompute"] == "full"
    assert "recompute" not in {r["option"] for r in fsdp_ac["defaults"]}
    assert fsdp_ac["bytes"] == own_ac["bytes"]
    ignored = " ".join(fsdp_ac["ignored"])
    for key in ("state_dict_type", "cpu_ram_efficient_loading", "backward_prefetch",
                "limit_all_gathers", "offload_params"):
        assert f"fsdp_config {key}" in ignored, key


def test_fsdp_config_alone_is_unread(capsys, tiny):
    """Without --fsdp the Trainer never reads --fsdp_config (training_args.py:2776-2777):
    plain DDP, the config listed as ignored."""
    rep = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp_config", '{"version": 2}'))
    assert rep["training"]["sharding"] == "ddp" and "--fsdp_config" in rep["ignored"]


def test_the_models_own_layer_class_is_accepted(capsys, tiny):
    """transformer_layer_cls_to_wrap naming the model's _no_split_modules (LlamaDecoderLayer,
    Accelerate's default: fsdp_utils.py:960-970) is the same job; another class is refused."""
    base = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp"))
    named = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--fsdp_config",
                                      '{"transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}'))
    assert named["bytes"] == base["bytes"]
    err = refused_line(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--fsdp_config",
                                     '{"transformer_layer_cls_to_wrap": "LlamaMLP"}'))
    assert "LlamaDecoderLayer" in err


@pytest.mark.parametrize("extra, said", [
    (["--fsdp", "hybrid_shard"], "only FSDP1 runs it"),
    (["--fsdp", "no_shard"], "only FSDP1 runs it"),
    (["--fsdp", "FULL_SHARD"], "only FSDP1 runs it"),           # :2922 compares lowercase
    (["--fsdp", "false"], "not an fsdp option"),                # a str field: 'Unknown' option
    (["--fsdp", "full_shard offload"], "offload"),
    (["--fsdp", "--fsdp_config", '{"version": 1}'], "FSDP1"),
    # a string the inline conversion leaves ("no": only true/false are converted, :161-176)
    # is truthy where training_args.py:2830 tests cpu_offload
    (["--fsdp", "--fsdp_config", '{"cpu_offload": "no"}'], "offload"),
    (["--fsdp", "--fsdp_config", '{"xla": true}'], "XLA"),
    (["--fsdp", "--fsdp_config", '{"auto_wrap_policy": "SIZE_BASED_WRAP"}'], "SIZE_BASED_WRAP"),
    (["--fsdp", "--fsdp_config", '{"reshard_after_forward": "maybe"}'], "invalid truth value"),
    (["--fsdp", "--fsdp_config", '{"activation_checkpointing": true}',
      "--gradient_checkpointing"], "trainer.py:879-884"),
    (["--fsdp", "--optim", "adamw_torch"], "foreach AdamW"),
])
def test_what_memsym_does_not_model_is_refused_in_one_line(capsys, tiny, extra, said):
    err = refused_line(capsys, _fsdp(tiny, "--bf16", *extra))
    assert said in err


def test_fsdp_needs_a_distributed_launch(capsys, tiny):
    """The Trainer runs FSDP in distributed training only (trainer.py:477-478)."""
    err = refused_line(capsys, ["estimate", "python", "run_clm.py", "--model_name_or_path",
                                tiny, "--fsdp", "--bf16", "--block_size", "128"])
    assert "trainer.py:477-478" in err


def test_activation_checkpointing_wins_over_its_deprecated_alias(capsys, tiny):
    """gradient_checkpointing counts only where activation_checkpointing is unset
    (training_args.py:1536-1545)."""
    rep = json_report(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--activation_checkpointing",
                                    "false", "--gradient_checkpointing"))
    assert rep["training"]["recompute"] == "none"
    assert LAYERS == 2       # the model the counts above are of


def test_inline_fsdp_config_starts_with_its_brace(capsys, tiny, tmp_path, monkeypatch):
    """transformers parses --fsdp_config as JSON only where its first character is '{'
    (training_args.py:1528, passed_value.startswith("{"), no strip): with a leading space the
    text is a file's path, read as the file it names."""
    monkeypatch.chdir(tmp_path)
    err = refused_line(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--fsdp_config",
                                     ' {"version": 1}'))
    assert "FSDP1" not in err and "fsdp_config" in err
    # a file of that very name is what the Trainer reads
    (tmp_path / ' {"version": 1}').write_text('{"version": 1}')
    err = refused_line(capsys, _fsdp(tiny, "--bf16", "--fsdp", "--fsdp_config",
                                     ' {"version": 1}'))
    assert "FSDP1" in err


@pytest.mark.parametrize("words", [
    lambda tiny: ["--gpu", "h100-80gb", "torchrun", "--nproc_per_node", "2", "run_clm.py",
                  "--model_name_or_path", tiny, "--block_size", "128",
                  "--per_device_train_batch_size", "2", "--output_dir", "o", "--bf16",
                  "--fsdp", "full_shard"],
    lambda tiny: [tiny, "--gpus", "2", "--gpu", "h100-80gb", "--framework", "deepspeed",
                  "--sharding", "fsdp", "--accelerate-fsdp", "mixed"]])
def test_search_refuses_accelerates_fsdp_in_its_own_words(capsys, tiny, words):
    # the search's rows price no Accelerate FSDP2 groups: refused as what it is (not as
    # "not sharding ddp", the probe's default it once blamed)
    err = refused_line(capsys, ["search", *words(tiny)])
    assert "Accelerate's FSDP2" in err and "not a searched setting" in err
    assert "sharding ddp" not in err
