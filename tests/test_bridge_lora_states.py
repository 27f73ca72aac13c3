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
"""

from __future__ import annotations

import sympy as sp

from memsym.symbols import N_a
from memsym.training import Layout, Training, training_memory
from memsym.training.model_states import stage_counts
from memsym.job import job as make_job


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

