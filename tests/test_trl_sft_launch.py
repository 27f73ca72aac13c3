"""TRL's SFT launch (``trl sft ...``, ``trl/scripts/sft.py``) read as the job it runs
(memsym.readers.trl_sft, memsym.readers.hf_trainer, memsym.cli.hf_launch).

The expectations are TRL's and PEFT's sources (huggingface/trl f2cd57710a, huggingface/peft
5d602fdbff; cited where asserted) and by-hand counts of the two-layer Llama of tests/tiny_llama.py.
"""

from __future__ import annotations

import json

import pytest

from in_process import json_report, refused_line
from tiny_llama import F, H, LAYERS, TINY, tiny_llama
from memsym.cli.hf_launch import hf_trainer_words
from memsym.readers.hf_trainer import read_hf_trainer_launch

@pytest.fixture
def tiny(tmp_path):
    return tiny_llama(tmp_path, dtype="bfloat16")


def _args(model, *extra):
    return ["--model_name_or_path", model, "--dataset_name", "trl-lib/Capybara",
            "--per_device_train_batch_size", "2", "--loss_type", "nll", *extra]


def test_sftconfigs_defaults_are_read_with_their_sources(capsys, tiny):
    """SFTConfig's defaults: gradient checkpointing on (base_config.py:61-66), bf16 = not fp16
    (:67-75, 104-105), max_length 1024 (sft_config.py:205); bf16 weights (--dtype bfloat16)
    under plain DDP: weights, param.grad, the buckets 2 B each and AdamW's two bf16 moments
    4 B over every parameter."""
    rep = json_report(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                         *_args(tiny, "--dtype", "bfloat16")])
    got = rep["bytes"]
    assert (got["weights"], got["gradients"], got["ddp_buckets"], got["optimizer"]) == (
        2 * TINY, 2 * TINY, 2 * TINY, 4 * TINY)
    assert rep["training"]["recompute"] == "full" and rep["training"]["precision"] == "bf16"
    assert rep["layout"]["dp"] == 2
    text = json.dumps(rep)
    assert "trl/trainer/sft_config.py:205" in text and "base_config.py:61-66" in text
    assert "base_config.py:67-75, 104-105" in text


def test_trl_sft_and_the_script_read_the_same_job(tiny):
    """``trl sft`` starts trl/scripts/sft.py under accelerate launch, handing it
    --num_processes (trl/cli/commands/training.py:50-68): the three spellings are one job."""
    arities = {"--world-size": 1}
    cli, _ = hf_trainer_words(arities, ["trl", "sft", "--num_processes", "4",
                                        *_args(tiny, "--dtype", "bfloat16")])
    script, _ = hf_trainer_words(arities, ["accelerate", "launch", "--num_processes", "4",
                                           "trl/scripts/sft.py",
                                           *_args(tiny, "--dtype", "bfloat16")])
    one, _ = hf_trainer_words(arities, ["trl", "sft", "--num_processes", "1",
                                        *_args(tiny, "--dtype", "bfloat16")])
    module, _ = hf_trainer_words(arities, ["python", "-m", "trl.scripts.sft", *_args(
        tiny, "--dtype", "bfloat16")])        # python starts one process
    assert cli == script and module == one
    assert cli[cli.index("--world-size") + 1] == "4" and one[one.index("--world-size") + 1] == "1"
    assert "--seq-length" in cli and cli[cli.index("--seq-length") + 1] == "1024"


def test_the_command_pasted_as_a_user_pastes_it(capsys, tiny):
    """Through the command line, as typed: `memsym estimate trl sft ...` and, with the shell's
    end-of-options `--` before the pasted command, the same job (`--` used to stop at `trl`)."""
    words = ["trl", "sft", "--num_processes", "2", *_args(tiny, "--dtype", "bfloat16")]
    plain = json_report(capsys, ["estimate", *words])
    assert json_report(capsys, ["estimate", "--", *words]) == plain
    assert plain["layout"]["dp"] == 2 and plain["training"]["recompute"] == "full"


def test_the_batch_and_sequence_are_read():
    r = read_hf_trainer_launch(["trl", "sft", "--model_name_or_path", "m", "--max_length",
                                "4096", "--per_device_train_batch_size", "3",
                                "--gradient_accumulation_steps", "5", "--loss_type", "nll",
                                "--fp16", "--gradient_checkpointing", "false"])
    assert (r.seq_length, r.micro_batch_size, r.gradient_accumulation_steps) == (4096, 3, 5)
    # bf16 = not fp16 (base_config.py:105); checkpointing turned off is read as given
    assert (r.precision, r.recompute) == ("fp16", False)


def test_use_peft_is_memsyms_lora():
    """get_peft_config (trl/trainer/utils.py:254-279): LoraConfig(r=lora_r,
    target_modules=lora_target_modules); lora_r default 16 (model_config.py:107)."""
    base = ["trl", "sft", "--model_name_or_path", "m", "--loss_type", "nll", "--use_peft"]
    r = read_hf_trainer_launch([*base, "--lora_r", "8", "--lora_target_modules", "q_proj",
                                "k_proj", "v_proj", "o_proj"])
    # lora_dropout default 0.05 (model_config.py:115): PEFT's nn.Dropout; use_dora False
    assert r.lora == {"finetune": "lora", "rank": 8, "targets": ("q", "k", "v", "o"),
                      "quantization": None, "dropout": True, "dora": False,
                      "expert_params": ()}
    r = read_hf_trainer_launch([*base, "--lora_dropout", "0", "--use_dora"])
    assert (r.lora["dropout"], r.lora["dora"]) == (False, True)
    r = read_hf_trainer_launch([*base, "--lora_target_modules", "all-linear"])
    assert (r.lora["rank"], r.lora["targets"]) == (16, "all")
    r = read_hf_trainer_launch([*base, "--load_in_4bit"])
    # bnb_4bit_quant_type nf4, use_bnb_nested_quant False (model_config.py:160, 164)
    assert (r.lora["finetune"], r.lora["quantization"], r.lora["targets"]) == ("qlora", "nf4",
                                                                              None)
    r = read_hf_trainer_launch([*base, "--load_in_4bit", "--use_bnb_nested_quant"])
    assert r.lora["quantization"] == "nf4-dq"


def test_peft_default_targets_count_r_in_plus_out(capsys, tiny):
    """lora_target_modules None: PEFT's default for llama is q_proj, v_proj (constants.py:85).
    The adapters of the mapped targets: r (in + out) per matrix, q and v both h -> 4 x 64, so
    2 layers x 16 x ((256 + 256) + (256 + 256)) = 32 768 parameters, fp32 (PEFT's
    autocast_adapter_dtype) 4 B each."""
    from memsym.readers.trl_sft import peft_default_targets

    r = read_hf_trainer_launch(["trl", "sft", *_args(tiny, "--use_peft")])
    assert r.lora["targets"] is None and peft_default_targets("llama", r) == ("q", "v")
    rep = json_report(capsys, ["estimate", tiny, "--framework", "deepspeed", "--sharding", "ddp",
                         "--precision", "bf16", "--world-size", "2", "--seq-length", "1024",
                         "--micro-batch-size", "2", "--finetune", "lora", "--lora-rank",
                         str(r.lora["rank"]), "--lora-targets", ",".join(("q", "v"))])
    assert rep["bytes"]["adapter_weights"] == 4 * LAYERS * 16 * ((H + 4 * 64) + (H + 4 * 64))


#: The adapters of PEFT's default llama targets q_proj, v_proj (constants.py:85) at TRL's
#: lora_r 16 (model_config.py:107): r (in + out) per matrix, q and v both h -> 4 x 64.
N_A = LAYERS * 16 * ((H + 4 * 64) + (H + 4 * 64))
#: The frozen linear weights (q, k, v, o, gate, up, down) and the rest (embeddings, norms).
N_Q = LAYERS * (4 * H * H + 3 * H * F)
N_U = TINY - N_Q


def test_lora_under_plain_ddp_is_estimated(capsys, tiny):
    """Only the adapters require a gradient: param.grad, DDP's buckets (reducer.cpp
    Reducer::initialize_buckets) and AdamW's two moments are the adapters', fp32
    (get_peft_model's autocast_adapter_dtype, sft_trainer.py:1077-1096): 4 + 4 + 4 + 8 B per
    adapter parameter; the bf16 base frozen, 2 B per weight."""
    rep = json_report(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                         *_args(tiny, "--use_peft", "--dtype", "bfloat16")])
    got = rep["bytes"]
    assert N_A == 32_768 and N_Q + N_U == TINY
    assert (got["adapter_weights"], got["gradients"], got["ddp_buckets"], got["optimizer"]) == (
        4 * N_A, 4 * N_A, 4 * N_A, 8 * N_A)
    # nothing quantized: the embeddings and norms are frozen in bf16 as the linear layers are
    assert got["weights"] == 2 * (N_Q + N_U) and "weights_unquantized" not in got
    assert rep["training"]["recompute"] == "full"
    assert "constants.py:67-108" in json.dumps(rep)


def test_load_in_4bit_is_qlora(capsys, tiny):
    """--load_in_4bit: bitsandbytes NF4 (bnb_4bit_quant_type nf4, no nested quantization:
    model_config.py:160, 164), 4 bits and one fp32 absmax per block of 64 (QLoRA §3): 4.5 bits
    per frozen linear weight; the rest of the model stays bf16."""
    rep = json_report(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                         *_args(tiny, "--use_peft", "--dtype", "bfloat16", "--load_in_4bit")])
    got = rep["bytes"]
    assert (got["weights"], got["weights_unquantized"], got["ddp_buckets"]) == (
        N_Q * 9 // 16, 2 * N_U, 4 * N_A)


@pytest.mark.parametrize("extra, said", [
    (["--use_dora", "--load_in_4bit"], "dora with QLoRA"),
    (["--lora_dropout", "1.5"], "a probability in [0, 1)"),
    (["--bf16", "false"], "without --bf16 / --fp16"),
    (["--packing"], "packing"),
    (["--padding_free", "true"], "padding_free"),
    (["--activation_offloading"], "activation_offloading"),
    (["--load_in_8bit"], "8-bit bitsandbytes"),
    (["--lora_modules_to_save", "lm_head"], "full copies"),
    (["--loss_type", "dft"], "loss_type dft"),
    (["--load_in_4bit", "--bnb_4bit_quant_type", "fp4"], "NF4"),
    (["--attn_implementation", "eager"], "eager"),
    (["--lora_target_modules", "lm_head"], "memsym adapts"),
    (["--block_size", "128"], "unknown Hugging Face Trainer argument"),
    (["--chat_template_path", "t.jinja"], "lm_head trainable"),
])
def test_what_memsym_does_not_model_is_refused_in_one_line(capsys, tiny, extra, said):
    err = refused_line(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                            *_args(tiny, "--use_peft", "--dtype", "bfloat16"), *extra])
    assert said in err


def test_the_default_loss_is_chunked_nll_and_the_default_dtype_is_autocast(capsys, tiny):
    """loss_type None is chunked_nll (sft_config.py:283-295, 334-336), said as a default and
    read as memsym's --chunked-loss (its bytes: tests/test_chunked_loss.py); dtype float32
    (model_config.py:89) under bf16 autocast (bf16 = not fp16) is read as memsym's
    --precision fp32 --autocast bf16 (its bytes: tests/test_autocast.py)."""
    words = ["estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", tiny]
    rep = json_report(capsys, words)
    assert (rep["training"]["precision"], rep["training"]["autocast"]) == ("fp32", "bf16")
    assert rep["training"]["recompute"] == "full"     # gradient_checkpointing True
    assert rep["training"]["chunked_loss"] is True
    said = [d for d in rep["defaults"] if d["option"] == "loss_type"]
    assert said[0]["value"] == "chunked_nll"
    assert "sft_config.py:283-295, 334-336" in said[0]["source"]
    assert json_report(capsys, [*words, "--loss_type", "chunked_nll"])["bytes"] == rep["bytes"]
    assert json_report(capsys, [*words, "--loss_type", "nll"])["training"]["chunked_loss"] is False


@pytest.mark.parametrize("extra, said", [
    # TRL's own refusals (sft_trainer.py:1325-1326, 1307-1318)
    (["--loss_type", "chunked_nll", "--use_liger_kernel"], "TRL refuses them together"),
    (["--use_peft", "--lora_target_modules", "lm_head"], "TRL refuses a PEFT adapter on lm_head"),
    (["--use_peft"], "not finetune lora"),      # LoRA under autocast: memsym's refusal
    (["--loss_type", "mse"], "TRL supports nll, dft and chunked_nll"),
])
def test_chunked_nll_is_refused_where_trl_or_memsym_refuses_it(capsys, tiny, extra, said):
    err = refused_line(capsys, ["estimate", "trl", "sft", "--num_processes", "2",
                                "--model_name_or_path", tiny, *extra])
    assert said in err


def test_chunked_nll_without_autocast_is_refused(capsys, tiny):
    """Not measured: fp32 weights without autocast (h.float() is then no copy); the refusal
    says --loss_type nll, which is read.  (Under --deepspeed it is counted:
    tests/test_chunked_loss_deepspeed.py.)"""
    words = ["estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", tiny]
    assert "give --loss_type nll" in refused_line(capsys, [*words, "--bf16", "false"])
    json_report(capsys, [*words, "--bf16", "false", "--loss_type", "nll"])


def test_trl_arguments_outside_trl_and_other_trainers_are_refused(capsys, tiny):
    assert "memsym reads `trl sft" in refused_line(capsys, ["estimate", "trl", "dpo",
                                                        *_args(tiny)])
    assert "other TRL trainers" in refused_line(capsys, ["estimate", "python",
                                                     "trl/scripts/grpo.py", *_args(tiny)])
    assert "TRL's argument" in refused_line(capsys, ["estimate", "torchrun", "--nproc_per_node",
                                                 "2", "run_clm.py", "--model_name_or_path",
                                                 tiny, "--use_peft"])


def _activations(capsys, tiny, *extra):
    return json_report(capsys, ["estimate", "trl", "sft", "--num_processes", "2", *_args(
        tiny, "--use_peft", "--dtype", "bfloat16", *extra)])["bytes"]


def test_lora_dropout_keeps_a_mask_per_adapted_input(capsys, tiny):
    """TRL's lora_dropout 0.05 (model_config.py:115) is PEFT's nn.Dropout before each lora_A
    (peft v0.20.0 lora/layer.py:251-254): on CUDA torch's native_dropout keeps a bool mask,
    1 byte per element of the adapted matrix's input.  The dropped copy itself replaces the
    autocast cast lora_A keeps anyway (PEFT's fp32 adapters under --bf16): no change.  Under
    TRL's gradient checkpointing one layer is recomputed whole: q and v of h = 256 over
    b s = 2 x 1024 tokens, 2048 (256 + 256) bytes."""
    off = _activations(capsys, tiny, "--lora_dropout", "0")
    on = _activations(capsys, tiny)
    assert on["activations"] - off["activations"] == 2048 * (H + H)


def test_use_dora_counts_its_magnitudes_and_what_its_forward_keeps(capsys, tiny):
    """--use_dora (model_config.py:142): the magnitude vector nn.Parameter(weight_norm), d_out
    per adapted matrix (peft v0.20.0 lora/dora.py:124-130), trained in fp32 with its gradient
    and AdamW's moments; each forward (dora.py:93-165) keeps, in the one recomputed layer:
    the identity's bf16 cast d_in^2 and lora_A's output on it d_in r (2 bytes each), three
    fp32 d_out vectors (the weight norm, mag_norm_scale, mag_norm_scale - 1), the base and
    LoRA results (2 b s d_out each, bf16) and, with dropout under autocast, the frozen
    weight's bf16 cast d_out d_in kept by F.linear on the dropped input."""
    lora, dora = _activations(capsys, tiny), _activations(capsys, tiny, "--use_dora")
    mags = LAYERS * (H + 4 * 64)              # q (h -> h) and v (h -> 4 x 64) per layer
    assert dora["adapter_weights"] - lora["adapter_weights"] == 4 * mags
    assert dora["ddp_buckets"] - lora["ddp_buckets"] == 4 * mags
    tokens, r = 2 * 1024, 16
    identity = 2 * (2 * H * H + 2 * H * r)
    scales = 3 * 4 * (H + H)
    results = 2 * 2 * tokens * (H + H)
    base_weight = 2 * (H * H + H * H)
    assert dora["activations"] - lora["activations"] == identity + scales + results + base_weight
