"""Megatron-Bridge's LoRA adapter states, byte by byte, from the sources.

Megatron-Bridge builds the adapters in the base weight's dtype (peft/lora.py:154
``lora_dtype: torch.dtype = None``; lora_layers.py:435 ``dtype = lora_dtype or base_dtype`` at
067f987df0): bf16, 2 bytes.  Megatron-core's DDP gives each trainable parameter a slot in its
gradient buffer, fp32 under ``grad_reduce_in_fp32`` (distributed_data_parallel.py:180, :192 at
d98e8a64dd), which bf16_mixed sets and its ``setup`` writes into the DDP config over the
recipe's own value (training/mixed_precision.py:185-197, :113-135 at 33655ef845): 4 bytes.
The optimizer keeps an fp32 main copy of each 16-bit shard (distrib_optimizer.py:445) and the
two fp32 Adam moments, 4 + 8 = 12 bytes, split over d c ranks by the distributed optimizer,
which Bridge's PEFT recipes run (``distributed_fused_adam_with_cosine_annealing``:
``use_distributed_optimizer=True``, synced onto the DDP config, training/config.py:1812-1833 at
33655ef845).

fp16_mixed sets ``params_dtype=torch.half`` and ``grad_reduce_in_fp32=False``
(training/mixed_precision.py:201-213 at 067f987df0), so the gradient buffer takes the
parameter's dtype (param_and_grad_buffer.py:924 at d98e8a64dd, ``grad_dtype = torch.float if
grad_reduce_in_fp32 else param.dtype``): 2 bytes, and the optimizer steps on an fp32 copy of
it (distrib_optimizer.py:2792 ``shard_model_grad.float()`` of the rank's shard; optimizer.py:1097
``main_grad.float()`` whole under DDP): 4 bytes, made at the step.  fp32 parameters have no
main copy (the ``torch.cuda.FloatTensor`` branch, distrib_optimizer.py:466) and ``.float()``
of an fp32 gradient is the same tensor.  The FP8 and NVFP4 recipes start from bf16_mixed
(mixed_precision.py:225, :411) and the adapters are Megatron-core linears (peft/utils.py:1033-1080,
not Transformer Engine's), so they keep bf16's widths.
"""

from __future__ import annotations

import sympy as sp

from memsym.symbols import N_a
from memsym.training import Layout, Training, training_memory
from memsym.training.model_states import stage_counts
from memsym.job import job as make_job
from memsym.symbols import b_g, b_m, b_mg, b_o, c, d
from memsym.terms.megatron_lora import megatron_adapter_widths
from memsym.training.model_states import state_terms, state_training


def _per_adapter(layout, training):
    est = training_memory("qwen3-8b", layout, training)
    grp = est.grouped()
    n_a = stage_counts(make_job("qwen3-8b", layout=layout, training=training), est.stage)[N_a]
    return tuple(sp.nsimplify(grp[k] / n_a) for k in ("adapter_weights", "gradients",
                                                        "optimizer"))


def _lora(**kw):
    return Training(seq_length=2048, micro_batch_size=1, global_batch_size=8, finetune="lora",
                    lora_rank=32, **kw)


def test_bridge_adapters_distributed_optimizer():
    # bf16 weight 2, fp32 gradient 4, (4 + 8) / (d = 4) = 3
    assert _per_adapter(Layout(t=2, d=4), _lora()) == (2, 4, 3)


def test_bridge_adapters_bf16_gradient_buffer_and_ddp():
    # grad_reduce_in_fp32 False: the parameter's bf16, 2; without the distributed optimizer
    # the main copy and the moments stay whole, 12
    assert _per_adapter(Layout(t=2, d=4), _lora(grad_dtype="bf16", sharding="ddp")) == (2, 2, 12)



def _widths(precision, grad_dtype=None, scheme="distributed-optimizer", n=4):
    w = megatron_adapter_widths(precision, grad_dtype, scheme=scheme, shards=n)
    return (w["adapter_dtype"], w["base_dtype"], w[b_g], w[b_mg], w[b_m], w[b_o])


def test_widths_every_precision_and_gradient_dtype():
    # (adapter dtype, base dtype, grad, fp32 main grad / n, fp32 main param / n, Adam 8 / n),
    # by hand from the rules in the module docstring, n = d c = 4
    q = sp.Rational
    assert _widths("bf16") == ("bf16", "bf16", 4, 0, 1, 2)            # grad_reduce_in_fp32
    assert _widths("bf16", "bf16") == ("bf16", "bf16", 2, 1, 1, 2)    # --grad-reduce-in-bf16
    assert _widths("fp16") == ("fp16", "fp16", 2, 1, 1, 2)            # fp16_mixed: fp16 grads
    assert _widths("fp16", "fp32") == ("fp16", "fp16", 4, 0, 1, 2)    # fp16 + grad_reduce_in_fp32
    assert _widths("fp8") == ("bf16", "bf16", 4, 0, 1, 2)             # bf16_mixed-based FP8
    assert _widths("fp8", "bf16") == ("bf16", "bf16", 2, 1, 1, 2)
    assert _widths("fp4") == ("bf16", "bf16", 4, 0, 1, 2)             # bf16_with_nvfp4_mixed
    assert _widths("fp32") == ("fp32", "fp32", 4, 0, 0, 2)            # no main copies
    # DDP (Float16OptimizerWithFloat16Params): the copies whole, n = 1
    assert _widths("fp16", scheme="ddp", n=1) == ("fp16", "fp16", 2, 4, 4, 8)
    assert _widths("bf16", n=3)[4:] == (q(4, 3), q(8, 3))


def test_fp16_lora_job_states():
    # the fp16 job per adapter parameter: 2 (fp16 weight) + 2 (fp16 grad) + (4 + 4 + 8)/(d c),
    # the fp16 frozen base at 2 bytes; the fp32 main grad is a step state
    tr = _lora(precision="fp16")
    terms = {t.key: t.expr for t in state_terms(False, state_training(tr))}
    per = {k: sp.simplify(terms[k].subs(N_a, 1).subs({d: 4, c: 1}))
           for k in ("adapter_weights", "gradients", "main_gradients", "optimizer")}
    assert per == {"adapter_weights": 2, "gradients": 2, "main_gradients": 1, "optimizer": 3}
    assert _per_adapter(Layout(t=2, d=4), tr) == (2, 2, 3)


def test_fp32_lora_job_keeps_an_fp32_base():
    # params_dtype fp32: the frozen base 4 bytes a weight, twice the bf16 job's
    lay = Layout(t=2, d=4)
    grp32 = training_memory("qwen3-8b", lay, _lora(precision="fp32")).grouped()
    grp16 = training_memory("qwen3-8b", lay, _lora()).grouped()
    assert sp.nsimplify(grp32["weights"] / grp16["weights"]) == 2
    # nothing quantized: the embeddings, norms and output layer are in the one frozen row
    assert "weights_unquantized" not in grp32 and "weights_unquantized" not in grp16
    assert _per_adapter(lay, _lora(precision="fp32")) == (4, 4, 2)   # 8 / 4, no main copy


def test_megatron_lora_frozen_base_cites_the_bridge_not_bitsandbytes():
    # Megatron-Bridge's LoRA freezes the base as built (peft/base.py:176-193 at 067f987df0:
    # requires_grad = False, no cast, no bitsandbytes in src/): the embeddings, norms and output
    # layer stay in params_dtype like the linear layers, so their Term cites the Bridge's PEFT
    terms = {t.key: t for t in state_terms(False, state_training(_lora()))}
    keep = terms["weights"]
    assert keep.source.key == "megatron-bridge-peft" and "base.py:176-193" in keep.source.locator
    assert "bitsandbytes" not in keep.description and "params_dtype" in keep.description
    # QLoRA (bitsandbytes + PEFT whatever the framework) keeps the QLoRA attribution
    q = {t.key: t for t in state_terms(False, state_training(
        Training(seq_length=2048, micro_batch_size=1, global_batch_size=8, finetune="qlora",
                 lora_rank=32)))}["weights_unquantized"]
    assert q.source.key == "qlora" and "bitsandbytes" in q.description
