"""VENDORED TEST DATA (Copyright 2020-2026 The HuggingFace Team, Apache License 2.0): TRL's
chunked cross-entropy (``loss_type="chunked_nll"``, SFTConfig's default), copied verbatim
from huggingface/trl at f2cd57710ae345ea6428ae95363267fcf38a3dc8,
trl/trainer/sft_trainer.py lines 86-378 (``_CHUNKED_LM_HEAD_CHUNK_SIZE``,
``_ChunkedCELMHeadOutput``, ``_chunk``, ``_chunked_cross_entropy_loss``,
``_patch_chunked_ce_lm_head``), so that tests run TRL's own code without installing trl (its
module imports accelerate, datasets and the rest of trl).  Not memsym code; do not edit.

Only the imports differ: the module's own (sft_trainer.py:15-49) that these lines use, and
``maybe_gather_lm_head_ctx`` (trl/trainer/utils.py:188-211), which returns ``nullcontext()``
when DeepSpeed ZeRO-3 is not enabled (:210-211), the only case run here.
"""
# ruff: noqa
# fmt: off

import inspect
import types
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import transformers
from packaging.version import Version
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast


def maybe_gather_lm_head_ctx(*params):
    """trl/trainer/utils.py:188-211 without DeepSpeed ZeRO-3: ``nullcontext()``."""
    return nullcontext()


_CHUNKED_LM_HEAD_CHUNK_SIZE = 256


@dataclass
class _ChunkedCELMHeadOutput(CausalLMOutputWithPast):
    """`CausalLMOutputWithPast` with extra fields populated by the chunked-CE path."""

    num_correct_tokens: torch.Tensor | None = None
    entropy_sum: torch.Tensor | None = None
    num_valid_tokens: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None


def _chunk(h, w, b, lbl, logit_scale, final_logit_softcapping):
    with maybe_gather_lm_head_ctx(w, b):
        logits = h.float() @ w.float().t()
        if b is not None:
            logits = logits + b.float()
    if logit_scale != 1.0:
        logits = logits * logit_scale
    if final_logit_softcapping is not None:
        logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
    log_p = F.log_softmax(logits, dim=-1)
    # A chunk's tail may be `-100` padding: `ignore_index` zeroes their loss; `valid` does the same for accuracy/entropy.
    chunk_loss = F.nll_loss(log_p, lbl, ignore_index=-100, reduction="sum")
    valid = lbl != -100
    chunk_correct = ((logits.argmax(dim=-1) == lbl) & valid).sum().float()
    chunk_entropy = (-(log_p.exp() * log_p).sum(dim=-1) * valid).sum()
    return chunk_loss, chunk_correct, chunk_entropy


def _chunked_cross_entropy_loss(
    hidden_states: torch.Tensor,
    lm_head_weight: torch.Tensor,
    chunk_size: int,
    labels: torch.Tensor | None = None,
    shift_labels: torch.Tensor | None = None,
    num_items_in_batch: torch.Tensor | int | None = None,
    logit_scale: float = 1.0,
    final_logit_softcapping: float | None = None,
    lm_head_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """
    Memory-efficient next-token cross-entropy over hidden states and an `lm_head` weight.

    The full `lm_head` projection is never materialized. Valid (non-`-100`) tokens are packed to the front (via
    `argsort` on the label mask, a static-shape op) and processed in chunks of `chunk_size`, rounding the count up to a
    whole chunk so masked positions land in a skippable tail. Each chunk's `[chunk_size, vocab_size]` logits are kept
    alive only during its own forward/backward via gradient checkpointing, so peak logits memory is `chunk_size *
    vocab_size` instead of `batch_size * seq_len * vocab_size`. Quantizing the chunk count to a multiple of
    `chunk_size` keeps this XLA/Neuron-safe (at most `total / chunk_size` distinct traced shapes, not one per
    valid-token count) while still dropping fully-masked chunks on GPU.

    At least one of `labels` or `shift_labels` must be provided. `labels` triggers the internal `labels[..., 1:]` /
    `hidden_states[..., :-1, :]` shift; `shift_labels` skips it, assuming the caller already aligned labels with hidden
    states (the contract under context / sequence parallelism). If both are given, `shift_labels` wins (matching
    [`~transformers.loss.ForCausalLMLoss`]).

    Args:
        hidden_states (`torch.Tensor`):
            Base decoder output of shape `(B, S, H)`, i.e. before the `lm_head` projection.
        lm_head_weight (`torch.Tensor`):
            Weight of the `lm_head` linear layer, shape `(V, H)`.
        chunk_size (`int`):
            Number of valid tokens processed per chunk. Peak memory scales linearly with this.
        labels (`torch.Tensor`, *optional*):
            Labels of shape `(B, S)`. Positions equal to `-100` are excluded from both the `lm_head` matmul and the
            loss. Mutually exclusive with `shift_labels`.
        shift_labels (`torch.Tensor`, *optional*):
            Pre-shifted labels of shape `(B, S)`, aligned with `hidden_states` (position `i` predicts
            `shift_labels[i]`). Mutually exclusive with `labels`.
        num_items_in_batch (`torch.Tensor`, `int` or `None`, *optional*):
            Total number of valid tokens across the global batch, as plumbed by [`~transformers.Trainer`]. When
            provided, the loss is reduced as `sum / num_items_in_batch`, matching the gradient-accumulation-correct
            behavior of HF's default cross-entropy. When `None`, reduction is `mean` over local valid tokens.
        logit_scale (`float`, *optional*, defaults to `1.0`):
            Multiplier applied to each chunk's logits before the cross-entropy, matching the `logit_scale` behavior of
            Cohere-style models.
        final_logit_softcapping (`float`, *optional*):
            If set, applies `softcap * tanh(logits / softcap)` to each chunk's logits before the cross-entropy,
            matching the `final_logit_softcapping` behavior of Gemma-style models. Applied after `logit_scale`.
        lm_head_bias (`torch.Tensor`, *optional*):
            Bias of the `lm_head` linear layer, shape `(V,)`. Added to each chunk's logits when provided.

    Returns:
        `tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]`: scalar loss, number of correctly-predicted
        tokens (count), sum of per-token Shannon entropy (in nats), and number of valid (non-`-100`) target tokens —
        all over the local batch. Raw sums are returned so callers can reduce correctly across ranks.
    """
    if labels is None and shift_labels is None:
        raise ValueError("At least one of `labels` or `shift_labels` must be provided.")

    if shift_labels is not None:
        hidden = hidden_states.reshape(-1, hidden_states.size(-1))
        labels = shift_labels.reshape(-1)
    else:
        hidden = hidden_states[..., :-1, :].reshape(-1, hidden_states.size(-1))
        labels = labels[..., 1:].reshape(-1)

    valid = labels != -100
    n_valid_tensor = valid.sum()

    correct = hidden.new_zeros((), dtype=torch.float32)
    entropy_sum = hidden.new_zeros((), dtype=torch.float32)
    if n_valid_tensor == 0:
        # Whole micro-batch masked (e.g. completion-only loss + truncation). Keep the loss connected
        # to the autograd graph through every trainable parameter so `.backward()` succeeds and DDP /
        # FSDP gradient sync doesn't hang on a missing param.
        with maybe_gather_lm_head_ctx(lm_head_weight, lm_head_bias):
            loss = (hidden_states.float().sum() + lm_head_weight.float().sum()) * 0.0
            if lm_head_bias is not None:
                loss = loss + lm_head_bias.float().sum() * 0.0
        return loss, correct, entropy_sum, n_valid_tensor

    # Pack valid tokens to the front so masked positions form whole trailing chunks. `argsort` on the boolean mask is
    # a static-shape op (unlike `hidden[valid]`, whose output shape is data-dependent and poisons XLA compilation).
    order = valid.to(torch.int8).argsort(descending=True, stable=True)
    hidden = hidden[order]
    labels = labels[order]

    # Process only the whole chunks covering the valid prefix: bounds XLA recompiles and drops fully-masked chunks on GPU.
    n_padded = (n_valid_tensor / chunk_size).ceil().to(torch.int64) * chunk_size

    loss = hidden.new_zeros((), dtype=torch.float32)

    for start in range(0, n_padded, chunk_size):
        h_chunk = hidden[start : start + chunk_size]
        lbl_chunk = labels[start : start + chunk_size]
        chunk_loss, chunk_correct, chunk_entropy = torch.utils.checkpoint.checkpoint(
            _chunk,
            h_chunk,
            lm_head_weight,
            lm_head_bias,
            lbl_chunk,
            logit_scale,
            final_logit_softcapping,
            use_reentrant=False,
        )
        loss = loss + chunk_loss
        correct = correct + chunk_correct
        entropy_sum = entropy_sum + chunk_entropy

    if num_items_in_batch is None:
        loss = loss / n_valid_tensor
    else:
        if isinstance(num_items_in_batch, torch.Tensor):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss / num_items_in_batch
    return loss, correct, entropy_sum, n_valid_tensor


def _patch_chunked_ce_lm_head(model: torch.nn.Module, chunk_size: int, is_vlm: bool = False) -> None:
    """
    Patch `model.forward` to compute the LM loss via [`_chunked_cross_entropy_loss`].

    When `labels` (or pre-shifted `shift_labels`, for CP/SP) are provided, the patched forward runs the decoder up to
    `last_hidden_state` (skipping the `lm_head` matmul), drops `labels == -100` positions, and computes the
    cross-entropy in chunks of `chunk_size` valid tokens. Returns a [`_ChunkedCELMHeadOutput`] with `loss` set,
    `logits=None`, and `num_correct_tokens` / `entropy_sum` / `num_valid_tokens` over non-ignored tokens. For MoE
    models (`output_router_logits=True`), the load-balancing aux loss is added with the same coefficient and formula as
    the model's reference forward.

    Without labels, the original forward runs unchanged — generation and labels-free eval preserve any per-model logits
    post-processing (`logit_scale`, `final_logit_softcapping`, `logits_to_keep` slicing).

    Args:
        model (`torch.nn.Module`):
            Model to patch. For PEFT, pass `peft_model.get_base_model()` rather than the `PeftModel` wrapper, so
            prompt-learning variants (PromptTuning, PrefixTuning, PTuning) keep their virtual-token injection in
            `PeftModel.forward` before delegating into the patched forward.
        chunk_size (`int`):
            Number of valid tokens processed per CE chunk.
        is_vlm (`bool`):
            Set to `True` for VLMs. Only used to read `logit_scale` / `final_logit_softcapping` /
            `output_router_logits` from `model.config.text_config` instead of the top-level config.
    """
    # VLM scaling configs (`logit_scale`, `final_logit_softcapping`, MoE `output_router_logits`) live on `text_config`;
    # text-only models keep them on the top-level config.
    text_config = model.config.text_config if is_vlm else model.config
    final_logit_softcapping = getattr(text_config, "final_logit_softcapping", None)
    logit_scale = getattr(text_config, "logit_scale", 1.0)
    original_forward = model.forward
    lm_head = model.get_output_embeddings()

    def _chunked_ce_forward(
        self: torch.nn.Module,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        shift_labels: torch.Tensor | None = None,
        output_router_logits: bool | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        # Without labels, fall back to the original forward so generation and labels-free evaluation
        # preserve any per-model logits post-processing (e.g. Cohere `logit_scale`, Gemma
        # `final_logit_softcapping`, `logits_to_keep` slicing).
        if labels is None and shift_labels is None:
            # MoE models: request router logits so the model returns `outputs.aux_loss`. VLM wrappers honor this only
            # as a forward kwarg (not from the model config), so it must be passed here.
            if output_router_logits is not None:
                kwargs["output_router_logits"] = output_router_logits
            return original_forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

        if output_router_logits is None:
            output_router_logits = getattr(text_config, "output_router_logits", False)

        kwargs.pop("use_cache", None)
        decoder_kwargs = {}
        # MoE models: request router logits so the model returns `outputs.aux_loss`. VLM wrappers honor this only
        # as a forward kwarg (not from the model config), so it must be passed here.
        if output_router_logits:
            decoder_kwargs["output_router_logits"] = True
        # `base_model` gives the backbone model (skipping `lm_head`) — text decoder for LMs, multimodal wrapper
        # for VLMs (so vision-token injection runs before the text decoder). `get_decoder()` won't do: on VLMs it
        # returns just the text stack and feeds image-placeholder IDs through it.
        # Pre-5.0 transformers VLMs set `base_model_prefix = ""` so `self.base_model is self` (re-runs `lm_head`).
        # Fall back to `self.model` there.
        if is_vlm and Version(transformers.__version__) < Version("5.0.0"):
            backbone = self.model
        else:
            backbone = self.base_model
        outputs: BaseModelOutputWithPast = backbone(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **decoder_kwargs, **kwargs
        )
        hidden_states = outputs.last_hidden_state

        lm_head_weight = lm_head.weight
        lm_head_bias = lm_head.bias
        # Under FSDP2, lm_head.weight is a DTensor (Shard(0) or Replicate). Passing it directly
        # into the gradient-checkpointed chunk loop causes FSDP2 to re-gather it once per chunk
        # during backward recomputation. full_tensor() converts it to a plain tensor once; all
        # chunks reference that tensor, so only one all-gather occurs (in full_tensor()'s backward).
        if isinstance(lm_head_weight, torch.distributed.tensor.DTensor):
            lm_head_weight = lm_head_weight.full_tensor()
            if lm_head_bias is not None:
                lm_head_bias = lm_head_bias.full_tensor()
        loss, num_correct_tokens, entropy_sum, num_valid_tokens = _chunked_cross_entropy_loss(
            hidden_states,
            lm_head_weight,
            chunk_size,
            labels=labels,
            shift_labels=shift_labels,
            num_items_in_batch=num_items_in_batch,
            logit_scale=logit_scale,
            final_logit_softcapping=final_logit_softcapping,
            lm_head_bias=lm_head_bias,
        )

        aux_loss = None
        if output_router_logits:
            # Mirror the per-family MoE forward: add `router_aux_loss_coef * load_balancing_loss_func(...)` to
            # the main loss. Mixtral is the source of truth — every MoE family (Qwen3Moe, GptOss, OLMoE,
            # Qwen2Moe, DBRX, JetMoE, PhiMoE, …) pulls this function from mixtral via the modular system, so a
            # single import keeps us in lockstep with upstream for every family we test.
            from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

            if Version(transformers.__version__) < Version("5.0.0") and not is_vlm:
                num_experts = self.num_experts
                num_experts_per_tok = self.num_experts_per_tok
                router_aux_loss_coef = self.router_aux_loss_coef
            else:
                # Upstream bug AttributeError: 'GptOssConfig' object has no attribute 'num_experts'; see #5754
                if text_config.model_type == "gpt_oss" and Version("5.0.0") <= Version(
                    transformers.__version__
                ) < Version("5.6.0"):
                    num_experts = self.num_experts
                else:
                    num_experts = text_config.num_experts
                num_experts_per_tok = text_config.num_experts_per_tok
                router_aux_loss_coef = text_config.router_aux_loss_coef
            aux_loss = load_balancing_loss_func(
                outputs.router_logits, num_experts, num_experts_per_tok, attention_mask
            )
            loss = loss + router_aux_loss_coef * aux_loss.to(loss.device)

        return _ChunkedCELMHeadOutput(
            loss=loss,
            logits=None,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            num_correct_tokens=num_correct_tokens,
            entropy_sum=entropy_sum,
            num_valid_tokens=num_valid_tokens,
            aux_loss=aux_loss,
        )

    # Keep the original forward signature so `generate`'s `_validate_model_kwargs` still sees the
    # model's real inputs (e.g. VLM `pixel_values`, `spatial_shapes`) and doesn't reject them. The
    # unbound `__func__` signature makes `MethodType`'s `self`-stripping land correctly.
    _chunked_ce_forward.__signature__ = inspect.signature(original_forward.__func__)
    model.forward = types.MethodType(_chunked_ce_forward, model)
