"""The routing tensors transformers' own MoE blocks keep (memsym.terms.hf_moe_routing), measured
on transformers' blocks and counted per MoE layer of a job that runs transformers' model code.

The measurement: autograd's saved tensors of one ``Qwen3MoeSparseMoeBlock`` / ``MixtralSparseMoe
Block`` forward in bf16 on the CPU, on the ``grouped_mm`` path (transformers 5.25.0
``integrations/moe.py:424-533``), one storage once.  The routing's tensors are the saved ones of
no width memsym's MoE layer counts (h, the experts' f_e and 2 f_e, the router's (tau, E) scores)
and not parameters: their bytes must equal the term at the block's tau, k and E.  The job: a
two-layer Qwen3-MoE config through ``memsym estimate trl sft`` without gradient checkpointing,
whose activations grow by two layers of 38 tau k + 4 tau + 4E (the by-hand count of the
module's derivation) over the same job with the term left out.
"""

from __future__ import annotations

import json

import pytest

from in_process import json_report
from memsym.terms.hf_moe_routing import hf_routing_indices

H, F_E, E, K, TAU = 64, 48, 8, 2, 40        # h, f_e, E, k, tokens: distinct widths


def _saved_routing_bytes(block) -> int:
    """The bytes of the saved tensors of one forward of ``block`` that are neither parameters
    nor of a width memsym's MoE layer counts."""
    import torch

    x = torch.randn(2, TAU // 2, H, dtype=torch.bfloat16, requires_grad=True)
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = (tuple(t.shape), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = block(x)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    counted_widths = {H, F_E, 2 * F_E}
    got = sum(nbytes for ptr, (shape, nbytes) in saved.items()
              if ptr not in params and ptr != x.untyped_storage().data_ptr()
              and shape[-1] not in counted_widths and shape != (TAU, E))
    y.float().pow(2).mean().backward()        # the graph the hooks saw runs backward
    return got


def _block(kind: str, **cfg):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if kind == "qwen3_moe":
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock as cls
        config = transformers.Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=F_E,
                                             num_experts=E, num_experts_per_tok=K, **cfg)
    else:
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock as cls
        config = transformers.MixtralConfig(hidden_size=H, intermediate_size=F_E,
                                            num_local_experts=E, num_experts_per_tok=K)
    # what a model's from_pretrained sets when experts_implementation is left unset
    # (modeling_utils.py:1893-1894)
    config._experts_implementation = "grouped_mm"
    torch.manual_seed(0)
    block = cls(config).to(torch.bfloat16)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return block


@pytest.mark.parametrize("kind,cfg,normalized,weight_width", [
    ("qwen3_moe", {"norm_topk_prob": True}, True, 2),
    ("qwen3_moe", {"norm_topk_prob": False}, False, 2),
    ("mixtral", {}, True, 4),
])
def test_the_block_keeps_what_the_term_counts(kind, cfg, normalized, weight_width):
    measured = _saved_routing_bytes(_block(kind, **cfg))
    term = hf_routing_indices(normalized=normalized, weight_width=weight_width)
    assert measured == term.evaluate(s=TAU, b=1, c=1, k=K, E=E)
    # the module's by-hand count: four int64 (tau k) index tensors, the normalised fp32
    # top-k weights and their sum, the sorted weights, the int32 offsets
    assert measured == 32 * TAU * K + (4 * TAU * K + 4 * TAU if normalized else 0) \
        + weight_width * TAU * K + 4 * E


LAYERS, SEQ, BATCH, K_JOB, E_JOB = 2, 1024, 2, 4, 16


def _qwen3_moe(tmp_path, norm: bool) -> str:
    folder = tmp_path / f"qwen3-moe-{norm}"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "hidden_size": 256, "num_hidden_layers": LAYERS,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "intermediate_size": 512, "moe_intermediate_size": 128, "num_experts": E_JOB,
        "num_experts_per_tok": K_JOB, "norm_topk_prob": norm, "vocab_size": 1000,
        "max_position_embeddings": 4096, "tie_word_embeddings": False}), encoding="utf-8")
    return str(folder)


def _activations(capsys, model, *extra) -> int:
    # TRL's default max_length 1024 (sft_config.py:205); checkpointing off: the layers keep
    # their tensors (with it a block keeps only its input)
    return json_report(capsys, [
        "estimate", "trl", "sft", "--num_processes", "2", "--model_name_or_path", model,
        "--dataset_name", "trl-lib/Capybara", "--per_device_train_batch_size", str(BATCH),
        "--loss_type", "nll", "--dtype", "bfloat16", *extra])["bytes"]["activations"]


def test_a_trl_job_counts_the_term_on_every_moe_layer(capsys, tmp_path, monkeypatch):
    import memsym.training.layer_model as lm

    model = _qwen3_moe(tmp_path, True)
    off = ("--gradient_checkpointing", "false")
    counted = _activations(capsys, model, *off)
    tau = SEQ * BATCH
    per_layer = 38 * tau * K_JOB + 4 * tau + 4 * E_JOB
    # the same job with the routing left out (the layer model rebuilt without it)
    monkeypatch.setattr(lm, "_hf_routing", lambda *a: 0)
    lm._layer_model.cache_clear()
    try:
        without = _activations(capsys, model, *off)
    finally:
        monkeypatch.undo()
        lm._layer_model.cache_clear()
    assert counted - without == LAYERS * per_layer
    # norm_topk_prob false: no fp32 top-k weights and sum (4 tau k + 4 tau a layer)
    plain = _activations(capsys, _qwen3_moe(tmp_path, False), *off)
    assert counted - plain == LAYERS * (4 * tau * K_JOB + 4 * tau)
    # TRL's gradient checkpointing (its default): a block keeps its input only, and the one
    # block recomputed in the backward holds its routing tensors again: one layer's difference
    assert _activations(capsys, model) - _activations(capsys, _qwen3_moe(tmp_path, False)) \
        == 4 * tau * K_JOB + 4 * tau
