r"""Megatron-LM's ``--fp32-residual-connection``: what an fp32 residual stream keeps beyond the
16-bit one, under Transformer Engine's layer spec.

The flag (``TransformerConfig.fp32_residual_connection``, allowed under ``--bf16`` or
``--fp16`` only: ``training/arguments.py:1374-1376``) casts the embedding's output to fp32
(``models/common/embeddings/language_model_embedding.py:139-140``), each layer's residual
(``transformer/transformer_layer.py:730-731, 890-891``) and so each bias-dropout-add's output
(``fusions/fused_bias_dropout.py:29-36``: the 16-bit branch output cast to the residual's dtype
before the add), and it turns the pipeline's p2p dtype to fp32
(``transformer/transformer_config.py:1419-1430``; the receive buffers are
``torch.empty(..., dtype=config.pipeline_dtype)``, ``pipeline_parallel/p2p_communication.py:
335-349``).  The layer's saved tensors do not change: ``TELayerNormColumnParallelLinear``
casts its fp32 input to the 16-bit ``layer_norm_weight`` dtype before the fused norm and GEMM,
which save that copy (``extensions/transformer_engine.py:1592-1597``), and the final norm,
Transformer Engine's ``RMSNorm`` / ``LayerNorm`` op, casts its input to the weight's dtype and
saves the cast (``ops/basic/rmsnorm.py:188-209``, ``layer_norm.py:205-228`` at d0067d0da6);
the bias-dropout-add's ``x.to(...)``, ``residual + out`` and its dropout keep no fp32 tensor
(the mask is one byte an element in either dtype).  Two kept tensors do change:

* a pipeline stage's received input: the schedule keeps it for its backward
  (``input_tensors.append(input_tensor)``, ``pipeline_parallel/schedules.py:2366, 2421``),
  the fp32 receive buffer, beside the 16-bit copy the first layer's fused norm saves (which is
  the received tensor itself without the flag: ``LayerNormLinear`` saves ``inputmat``, a view
  of its input when no cast is needed, ``module/layernorm_linear.py:181-188, 526-536``):
  :func:`fp32_stage_input`;
* under full recompute a checkpoint's input, the fp32 hidden states
  (``tensor_parallel/random.py:628``: ``ctx.save_for_backward(*args)``):
  :func:`fp32_checkpoint_input`.

Paths are Megatron-LM ``megatron/core/`` at d98e8a64dd unless said (the validation under
``megatron/training/``), Transformer Engine ``transformer_engine/pytorch/`` at d0067d0da6.
"""

from __future__ import annotations

from ..symbols import h
from ..term import Source, Term
from .transformer_layer import token_split

__all__ = ["fp32_stage_input", "fp32_checkpoint_input"]

_P2P = Source("megatron-core", "transformer/transformer_config.py:1419-1430 (pipeline_dtype "
              "torch.float), pipeline_parallel/p2p_communication.py:335-349, schedules.py:2366, "
              "2421 (input_tensors kept), extensions/transformer_engine.py:1592-1597 at "
              "d98e8a64dd")


def fp32_stage_input(*, sequence_parallel: bool = False) -> Term:
    r"""One received micro-batch's fp32 stage input kept beside its 16-bit copy [bytes].

    .. math:: 4\,\frac{\tau h}{\sigma}

    with :math:`\tau = sb/c` and :math:`\sigma = t` under sequence parallelism (the p2p tensor
    is sequence-sharded then), per micro-batch a model chunk holds in flight that it received
    from the previous stage.  Without the flag this tensor is the first layer's saved norm input
    (counted in the layer's ``norm_inputs``); with it that norm saves a 16-bit cast, still
    counted there, and the fp32 buffer the schedule keeps for the backward is this term.

    Parameters
    ----------
    sequence_parallel : bool
        Megatron sequence parallelism (the hidden states sharded over t) [1].

    Examples
    --------
    Llama 3 8B (h = 4096), s = 4096, b = 1, t = 2 with SP: 4 x 4096 x 4096 / 2 bytes:

    >>> fp32_stage_input(sequence_parallel=True).evaluate(s=4096, b=1, c=1, h=4096, t=2)
    33554432

    References
    ----------
    .. [megatron-core] transformer/transformer_config.py:1419-1430,
       pipeline_parallel/p2p_communication.py:335-349, pipeline_parallel/schedules.py:2366,
       2421, extensions/transformer_engine.py:1592-1597 at d98e8a64dd.
    """
    tok, sig = token_split(sequence_parallel)
    return Term("fp32_stage_input", 4 * tok * h / sig, "the received fp32 stage input the "
                "pipeline schedule keeps for the backward, beside the first layer's 16-bit copy "
                "(--fp32-residual-connection)", _P2P, label="fp32 stage input")


def fp32_checkpoint_input(*, sequence_parallel: bool = False) -> Term:
    r"""What a full-recompute checkpoint's fp32 input keeps beyond the 16-bit one [bytes].

    .. math:: 2\,\frac{\tau h}{\sigma}

    per checkpointed group and micro-batch: ``CheckpointFunction`` saves the hidden states it
    is called with, fp32 under the flag, :math:`4\tau h/\sigma` where the layer's
    ``layer_input`` term counts :math:`2\tau h/\sigma`.

    Parameters
    ----------
    sequence_parallel : bool
        Megatron sequence parallelism (the hidden states sharded over t) [1].

    Examples
    --------
    >>> fp32_checkpoint_input().expr
    2*b*h*s/c

    References
    ----------
    .. [megatron-core] tensor_parallel/random.py:628 (``ctx.save_for_backward(*args)``),
       transformer/transformer_layer.py:730-731, 890-891 at d98e8a64dd.
    """
    tok, sig = token_split(sequence_parallel)
    return Term("fp32_checkpoint_input", 2 * tok * h / sig, "a full-recompute checkpoint's "
                "fp32 input beyond its 16-bit size (--fp32-residual-connection)",
                Source("megatron-core", "tensor_parallel/random.py:628, "
                       "transformer/transformer_layer.py:730-731, 890-891 at d98e8a64dd"),
                label="fp32 checkpoint input")
