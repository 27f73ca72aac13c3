r"""Activation memory per transformer layer, as Korthikanti et al. printed it and as real models differ.

Two families live here.  :func:`korthikanti` returns the paper's per-layer formulas exactly as
printed (Eq. 1, Eq. 2, Eq. 4 and the Table 2 rows), each its own cited :class:`~memsym.term.Term`.
:func:`layer_activations`, :func:`embedding_activations` and :func:`output_activations` derive
the same bytes tensor by tensor, so that each departure from the paper's GPT layer (gated MLP,
GQA, flash attention, RMSNorm, context parallelism, MoE layers, MLA, the logits) is a named term
and not a fudge factor; with the paper's settings they reduce to the paper's formulas
(``tests/test_activations.py`` proves it).  :func:`layer_activations` (and what each of its
options adds or drops) lives in :mod:`memsym.terms.transformer_layer`, re-exported here.

Conventions (Korthikanti §4.1): 2 bytes per 16-bit element, 1 byte per dropout-mask element,
per micro-batch of ``b`` sequences of ``s`` tokens, for one GPU.

Derivation of the GPT layer (Korthikanti §4.1), the base of every variant:

================================  ====================  ==========================================
tensor kept for backward           bytes                 memsym key
================================  ====================  ==========================================
input of each of the 2 norms       2·2sbh                ``norm_inputs``
norm output = QKV GEMM input       2sbh                  ``qkv_input``
Q and K (for QK^T)                 2sb(a + g)d_h         ``qk``          (4sbh for g = a)
V (for softmax·V)                  2sb·g·d_h             ``v``           (2sbh)
softmax out, dropout mask, out     (2 + 1 + 2)as²b       ``scores``      (flash: ``softmax_stats``)
attention output = proj input      2sb·a·d_h             ``proj_input``  (2sbh)
attention dropout mask             sbh                   ``attn_dropout_mask``
norm output = fc1 input            2sbh                  ``mlp_input``
fc1 output = activation input      2sbf (gated: 4sbf)    ``mlp_activation``  (8sbh for f = 4h)
activation output = fc2 input      2sbf                  ``fc2_input``   (8sbh)
MLP dropout mask                   sbh                   ``mlp_dropout_mask``
================================  ====================  ==========================================

Sum: 34sbh + 5as²b = sbh(34 + 5as/h) (Eq. 1).  Tensor parallelism divides the head- and
f-sized tensors by t (Eq. 2: 10 + 24/t), sequence parallelism divides the rest by t too (Eq. 4),
and context parallelism divides every token count by c (each rank keeps s/c queries; its
scores are (s/c)×s per head).

References
----------
.. [korthikanti] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
   Models", arXiv:2205.05198, §4.1 (Eq. 1), §4.2 (Eq. 2, 4), Table 2, §4.3.
.. [flash-attention] Dao et al. 2022, arXiv:2205.14135 §3.1; Dao 2023, arXiv:2307.08691.
.. [megatron-lm] theoretical_memory_usage.py (8sbp int64 input ids).
"""

from __future__ import annotations

import sympy as sp

from ..errors import choose
from ..symbols import V, a, c, d_h, f, g, h, t
from ..term import Source, Term, Total
from ..values import as_expr
from ..vocabulary import RECOMPUTE, RECOMPUTE_MODULES, recompute_modules  # noqa: F401
from .eager_glu import glu_elements
from .korthikanti import PARALLEL, korthikanti, korthikanti_terms
from .low_precision import saved_input_bytes
from .schedule import first_stage_layers
# one layer's derivation, term by term, re-exported: every name stays importable from here
from .recompute_sources import RECOMPUTE_MODULE_SOURCES
from .transformer_layer import NORMS, layer_activations, token_split

__all__ = [
    "PARALLEL", "RECOMPUTE", "NORMS", "RECOMPUTE_MODULES", "RECOMPUTE_MODULE_SOURCES",
    "recompute_modules", "korthikanti", "korthikanti_terms",
    "layer_activations", "embedding_activations", "output_activations", "mtp_input_activations",
    "lora_gathered_inputs", "unfused_glu_products",
    "clamped_glu_copy", "fp8_glu_input", "paper_layer", "paper_first_stage",
]

_K = "korthikanti"
_DERIVED = Source("memsym-derivation", "memsym/terms/activations.py module docstring")


def embedding_activations(*, sequence_parallel: bool = False, dropout: bool = True) -> Total:
    r"""Activations of the input embedding on the first pipeline stage [bytes per micro-batch].

    .. math:: 8\,\frac{sb}{c} + \delta\,\frac{sbh}{c\,\sigma}

    int64 token ids (Megatron-LM's ``8sbp`` for p in-flight micro-batches) and the embedding
    dropout mask (Korthikanti §4.3: ``sbhp/t`` with SP).  The embedding lookup's backward
    needs only the ids, so its output is not counted (it is the first layer's norm input).

    Examples
    --------
    >>> embedding_activations(dropout=False).expr
    8*b*s/c

    References
    ----------
    .. [megatron-lm] ``theoretical_memory_usage.py``, ``compute_activation_memory`` (8sbp).
    .. [korthikanti] arXiv:2205.05198, §4.3 (embedding dropout mask sbhp/t).
    """
    tok, sig = token_split(sequence_parallel)
    terms = [Term("input_ids", 8 * tok, "int64 token ids",
                  Source("megatron-lm", "theoretical_memory_usage.py, compute_activation_memory "
                         "(8sbp: input to embedding)"), label="input ids")]
    if dropout:
        terms.append(Term("embedding_dropout_mask", tok * h / sig, "embedding dropout mask",
                          Source(_K, "§4.3 (sbhp/t)"), label="embedding dropout"))
    return Total("activations of the input embedding", tuple(terms))


def output_activations(*, sequence_parallel: bool = False, norm: str = "layernorm",
                       norm_statistics: bool = True, compiled_loss: bool = False,
                       gathered_output_input: bool = False, fp32_norm=False,
                       width: int = 2) -> Total:
    r"""Activations of the final norm, the output layer and the loss on the last stage [bytes].

    .. math::

        \frac{2\tau h}{\sigma} + \frac{2\tau h}{\sigma} + \frac{4\tau V}{t}
        \;(+\;\text{norm statistics})
        \qquad\text{or, with a compiled loss,}\qquad
        \ldots + \frac{2\tau V}{t} + 8\tau

    The final norm's input, the output layer's input, and the fp32 logits the cross-entropy
    keeps (Korthikanti §4.3: 2sbh/t, 2sbh/t, 4sbv/t; Megatron's vocab-parallel cross entropy
    keeps the fp32 softmax).  These are not recomputed under full recompute, and with a large
    vocabulary the logits alone reach tens of GB (seed 002, failure pattern 3: s·b·V).
    The bf16 logits (2τV/t) exist only transiently during the forward and are not counted.

    ``compiled_loss``: torchtitan compiles its loss (``F.cross_entropy(pred.float(), labels)``)
    when ``compile.enable`` and ``"loss"`` is in ``compile.components`` (the default
    components).  Inductor fuses the fp32 cast into the softmax reductions and its partitioner
    keeps the *16-bit* logits and two fp32 statistics per token (row max and log-sum-exp,
    8 bytes) for backward, which rebuilds the softmax from them: :math:`2\tau V/t + 8\tau`
    instead of the fp32 log-softmax (``tests/test_engine_compile.py`` runs it on CPU).

    ``gathered_output_input``: torch's ``ColwiseParallel`` (torchtitan's output layer under
    sequence parallelism, ``input_layouts=Shard(1)``) all-gathers the final norm's output as
    a DTensor redistribute and the local matmul saves that gathered input, :math:`2\tau h`
    rather than Megatron's :math:`2\tau h/t` (its linear layers save the shard and re-gather
    in backward); measured on a gloo group in ``tests/test_transients.py``.

    ``fp32_norm``: torchtitan's final RMSNorm runs eagerly in fp32 (its ``RMSNorm`` until
    5078e92e4: ``_norm(x.float()).type_as(x) * weight``; the ``torch.rms_norm`` it uses since
    decomposes the same way): autograd keeps the fp32 copy :math:`4\tau h/\sigma`, the rstd
    :math:`4\tau/\sigma` and the 16-bit normalised output :math:`2\tau h/\sigma`, not the 16-bit
    input, where Megatron's fused norm keeps the input and the statistics
    (``tests/test_transients.py`` hooks a port; torch 2.13's ``nn.RMSNorm`` keeps the
    normalised output in fp32, :math:`8\tau h/\sigma` in all).  ``fp32_norm="transformers"``:
    the same :math:`6\tau h/\sigma` under a framework that runs transformers' model code
    (DeepSpeed): ``LlamaModel.forward``'s ``self.norm`` is a ``LlamaRMSNorm``, whose fp32 copy
    and 16-bit ``weight *`` product autograd keeps (:mod:`memsym.terms.hf_norms`); ``True`` or
    ``"torchtitan"`` cites torchtitan.  This is the plain kind only: a model whose norm scales
    by ``1 + w`` in fp32 (Gemma) or multiplies the weight in fp32 (GPT-OSS, OLMo 2) keeps more,
    which :func:`memsym.terms.hf_norms.final_norm_excess` adds beside this Total.

    ``width``: the bytes of the model's compute dtype (4 training in fp32): each 16-bit tensor
    above (the norm's input and output, the compiled loss's logits) at that width; the fp32
    softmax and statistics unchanged, and an eager RMSNorm's fp32 copy is its input itself
    (``x.float()`` returns it), kept beside the normalised output: :math:`(4 + w)\tau h/\sigma`.

    Examples
    --------
    >>> float(output_activations()["logits"].evaluate(s=8192, b=8, c=1, t=1, V=128256)) / 1e9
    33.621540864
    >>> output_activations(compiled_loss=True)["logits"].expr
    2*V*b*s/(c*t) + 8*b*s/c

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.3 (final norm 2sbh/t, output input 2sbh/t, 4sbv/t).
    .. [torchtitan] ``models/norms.py`` ``RMSNorm.forward`` at 9dec370; ``components/loss.py``.
    .. [hf-transformers-5-25] transformers 5.25.0 ``models/llama/modeling_llama.py``
       ``LlamaModel.forward`` (line 404, ``self.norm``) and ``LlamaRMSNorm.forward`` (62-67).
    .. [pytorch-tensor-parallel] ``distributed/tensor/parallel/style.py``, ``ColwiseParallel``.
    """
    tok, sig = token_split(sequence_parallel)
    norm = choose("normalization", norm, NORMS)
    src = Source(_K, "§4.3 (final LayerNorm 2sbh/t, output-layer input 2sbh/t, logits 4sbv/t)")
    fp32_src = Source("torchtitan", "torchtitan/models/norms.py RMSNorm.forward at 9dec370 "
                      "(_norm(x.float()).type_as(x) * weight)") if fp32_norm != "transformers" \
        else Source("hf-transformers-5-25", "models/llama/modeling_llama.py LlamaModel.forward "
                    "(line 404: self.norm, a LlamaRMSNorm); LlamaRMSNorm.forward (lines 64-67: "
                    "the fp32 copy kept by pow(2) and the rsqrt multiply, the 16-bit weight * "
                    "product)")
    terms = (
        Term("final_norm_input", width * tok * h / sig, "input of the final norm", src)
        if not fp32_norm else
        Term("final_norm_input", (4 + width) * tok * h / sig, "the final norm's fp32 copy of its input and "
             "its 16-bit normalised output (eager RMSNorm"
             + (", transformers'" if fp32_norm == "transformers" else "") + ")", fp32_src),
        Term("final_norm_statistics", NORMS[norm] * tok / sig if norm_statistics else 0,
             "fp32 statistics of the final norm", _DERIVED),
        Term("output_input", width * tok * h / sig, "final norm output, input of the output "
             "layer", src)
        if not gathered_output_input else
        Term("output_input", width * tok * h, "final norm output all-gathered over the sequence, "
             "saved by the output layer's matmul (torch ColwiseParallel)",
             Source("pytorch-tensor-parallel", "torch/distributed/tensor/parallel/style.py, "
                    "ColwiseParallel (input redistributed to Replicate before the local mm)")),
        Term("logits", 4 * tok * V / t, "fp32 logits (softmax) kept by the cross-entropy loss", src)
        if not compiled_loss else
        Term("logits", width * tok * V / t + 8 * tok, "16-bit logits and fp32 row max and log-sum-exp "
             "kept by the compiled cross-entropy (Inductor rebuilds the softmax in backward)",
             Source("torchtitan", "torchtitan/components/loss.py, build_cross_entropy_loss "
                    "(torch.compile(loss_fn) when compile.enable and 'loss' in components)")),
    )
    return Total("activations of the output layer and loss", tuple(x for x in terms if x.expr != 0))


_MTP = ("megatron/core/transformer/multi_token_prediction.py at d98e8a64dd, "
        "MultiTokenPredictionLayer.")


def mtp_input_activations(*, sequence_parallel: bool = False, norm: str = "layernorm",
                          dropout: bool = True, checkpointed: bool = False,
                          fp8_inputs: bool | str = False, width: int = 2) -> Total:
    r"""Activations of one multi-token-prediction pass's own inputs, beside its block [bytes].

    Per micro-batch and MTP pass, with :math:`\tau = sb/c`, :math:`\sigma` as in
    :func:`token_split`, :math:`\nu` the norm's fp32 statistics per token (8 LayerNorm, 4
    RMSNorm) and :math:`\delta` 1 with dropout:

    .. math::

        8\tau + \delta\,\frac{\tau h}{\sigma} + \frac{2\tau h}{\sigma}
        + \frac{2\tau h}{\sigma} + \kappa\Big(2\nu\,\frac{\tau}{\sigma}
        + b_x\,\frac{2\tau h}{\sigma}\Big)

    ``_get_embeddings`` (lines 1279-1302) rolls the token ids and embeds them again, outside
    any checkpoint: the int64 ids the lookup's backward reads and the embedding dropout mask,
    as :func:`embedding_activations`.  ``_concat_embeddings`` (lines 1331-1359): ``enorm`` and
    ``hnorm`` (Transformer Engine norms, which save their input and fp32 statistics) on the
    embedding and on the previous depth's normalised output, then ``torch.cat`` of the two
    into the :math:`2h`-wide input that ``eh_proj`` (a column-parallel linear, which saves its
    sequence-parallel shard) keeps.  With the MTP layer checkpointed (``checkpointed``, full
    recompute other than block: lines 1584-1629, ``tensor_parallel.checkpoint`` of
    ``hidden_states`` and ``decoder_input``) only the two norms' inputs, the checkpoint's
    arguments, stay (:math:`\kappa = 0`); else :math:`\kappa = 1`.  The concatenation runs
    in the FP8 context under FP8 (lines 1387-1397): ``eh_proj`` keeps it quantized,
    :math:`b_x` bytes an element (:func:`memsym.terms.low_precision.saved_input_bytes`; 2 at 16 bits
    and under FP4, which the MTP layer ignores).

    Parameters
    ----------
    sequence_parallel : bool
        Megatron sequence parallelism (the MTP inputs are scattered over t).
    norm : str
        ``"layernorm"`` or ``"rmsnorm"``.
    dropout : bool
        Whether the embedding keeps a dropout mask.
    checkpointed : bool
        Whether the MTP layer runs under Megatron's MTP checkpoint.
    fp8_inputs : bool or {"mxfp8"}
        Transformer Engine FP8 compute (:func:`memsym.terms.low_precision.saved_input_bytes`).
    width : {2, 4}
        Bytes of a tensor in the compute dtype (every 2 above; 4 in fp32) [bytes/element].

    Examples
    --------
    >>> mtp_input_activations(dropout=False).expr
    8*b*h*s/c + 24*b*s/c
    >>> mtp_input_activations(norm="rmsnorm", dropout=False, checkpointed=True).expr
    4*b*h*s/c + 8*b*s/c
    >>> mtp_input_activations(dropout=False, fp8_inputs=True)["eh_proj_input"].expr
    2*b*h*s/c

    References
    ----------
    .. [megatron-lm] ``megatron/core/transformer/multi_token_prediction.py`` at d98e8a64dd,
       ``_get_embeddings``, ``_concat_embeddings``, ``_checkpointed_forward``.
    .. [transformer-engine] ``transformer_engine/pytorch/ops/basic/layer_norm.py:228`` and
       ``rmsnorm.py:209`` at d0067d0da6 (``save_for_backward(x, means, rstdevs)``).
    """
    tok, sig = token_split(sequence_parallel)
    norm = choose("normalization", norm, NORMS)
    keep = 0 if checkpointed else 1
    emb = embedding_activations(sequence_parallel=sequence_parallel, dropout=dropout)
    terms = (
        Term("mtp_input_ids", emb["input_ids"].expr, "the rolled int64 token ids the MTP "
             "embedding's backward reads", Source("megatron-lm", _MTP + "_get_embeddings "
                                                  "(lines 1279-1302)")),
        Term("mtp_embedding_dropout_mask", emb.expr - emb["input_ids"].expr,
             "the MTP embedding's dropout mask", Source(_K, "§4.3 (sbhp/t)")),
        Term("mtp_norm_inputs", 2 * (width * tok * h / sig), "inputs of enorm (the embedding) and "
             "hnorm (the previous depth's output): the checkpoint's arguments when checkpointed",
             Source("megatron-lm", _MTP + "_concat_embeddings (lines 1335, 1337); "
                    "_checkpointed_forward (lines 1584-1629)")),
        Term("mtp_norm_statistics", keep * 2 * NORMS[norm] * tok / sig,
             "fp32 statistics of enorm and hnorm", Source("transformer-engine", "transformer_"
             "engine/pytorch/ops/basic/layer_norm.py:228, rmsnorm.py:209 at d0067d0da6")),
        Term("eh_proj_input", keep * (saved_input_bytes(fp8_inputs) if fp8_inputs else width)
             * tok * (2 * h) / sig,
             "the 2h-wide concatenation eh_proj keeps" + (" (FP8)" if fp8_inputs else ""),
             Source("megatron-lm", _MTP + "_concat_embeddings (lines 1341-1342: torch.cat, "
                    "then eh_proj); the FP8 context at lines 1387-1397")),
    )
    return Total("activations of an MTP pass's inputs", tuple(x for x in terms if x.expr != 0))


def lora_gathered_inputs(eligible=1, *, sequence_parallel: bool = True,
                         regather: bool = False, width: int = 2) -> Term:
    r"""The gathered norm output each column-parallel LoRA-A keeps under sequence parallelism [bytes].

    Per micro-batch, layer and eligible adapter (Megatron-Bridge: LoRA-A of ``linear_qkv`` and of
    a dense layer's ``linear_fc1``), with :math:`\tau = sb/c`:

    .. math:: n_{\mathrm{el}}\; 2\tau h

    Without ``sequence_parallel_input_regather`` the adapter consumes the *gathered* 16-bit
    LayerNorm output (all :math:`\tau` tokens, not the :math:`\tau/t` shard the base layer
    keeps, counted in ``qkv_input`` / ``mlp_input``) and keeps it for its weight gradient; with it
    the adapter keeps only the local shard (the same tensor the base layer keeps) and gathers
    again in backward, so the term is 0.  Also 0 without sequence parallelism (nothing is
    gathered) and for expert, row-parallel adapters (they fall back, seed 001).

    Parameters
    ----------
    eligible : int or sympy.Expr
        Eligible column-parallel LoRA-A adapters of one layer (2 in a dense layer with
        qkv and fc1 targeted, 1 in an MoE layer).
    sequence_parallel : bool
        Sequence parallelism on (t > 1).
    regather : bool
        Bridge's ``LoRA(sequence_parallel_input_regather=True)``.

    width : {2, 4}
        Bytes of an element in the compute dtype (each 2 above; 4 in fp32) [bytes/element].
    Examples
    --------
    Qwen3-8B (h = 4096, 36 layers), s = 8192, b = 1: the saving of the regather is
    36 x 2 x 2 s h = 4.83 GB (seed 001 measured 4.731 GB):

    >>> per_layer = lora_gathered_inputs(2).evaluate(s=8192, b=1, c=1, h=4096)
    >>> 36 * per_layer == 36 * 2 * 2 * 8192 * 4096
    True

    References
    ----------
    Megatron-Bridge ``src/megatron/bridge/peft/lora.py`` (LoRA.sequence_parallel_input_regather:
    "the full LayerNorm output consumed by LoRA-A is gathered temporarily in forward, released
    after the LoRA-A computation, and gathered again during backward"), ``peft/utils.py``
    (get_adapter_attributes_from_linear, ParallelLinearAdapter); seed 001 (LoRA + SP table).
    """
    tok, _ = token_split(False)
    on = sequence_parallel and not regather
    expr = as_expr(eligible) * width * tok * h if on else sp.Integer(0)
    return Term("lora_gathered_inputs", expr, "gathered 16-bit norm output kept by each "
                "column-parallel LoRA-A until backward (no sequence_parallel_input_regather)",
                Source("megatron-bridge-peft", "src/megatron/bridge/peft/lora.py, LoRA "
                       "(sequence_parallel_input_regather); peft/utils.py, ParallelLinearAdapter"),
                label="LoRA-A gathered inputs")


def unfused_glu_products(fused: bool = True, *, moe: bool = False, width: int = 2) -> Term:
    r"""What an unfused SwiGLU keeps beyond its input [bytes per layer].

    Per micro-batch and layer, with :math:`\tau = sb/c` and the routed token copies
    :math:`R = c_f k \tau t_e / t` an expert rank receives:

    .. math:: \text{dense: } 2 \cdot 2\tau f / t, \qquad \text{MoE: } 3 \cdot 2 R f_e / t_e

    Without ``bias_activation_fusion`` (Megatron-core's default, which Megatron-Bridge's Qwen3
    bridges keep; its Llama bridge sets it) the gate runs eagerly:
    ``silu(x_glu) * (x_linear + glu_linear_offset)``.  ``silu`` keeps its input (a view of the
    fc1 output, ``mlp_activation`` / ``expert_activation``); the product keeps both operands, the
    16-bit ``silu`` output and ``x_linear + 0.0``, a new tensor because the offset is added even
    at its default 0.0.  The experts then weight the gate's output by the routing
    probabilities (``intermediate_parallel * permuted_probs``), which keeps that output too.
    The fused kernels keep only their inputs.  0 when fused.

    Parameters
    ----------
    fused : bool
        Megatron's ``bias_activation_fusion`` [1].
    moe : bool
        An MoE layer's grouped experts (``TEGroupedMLP``) instead of a dense MLP [1].
    width : {2, 4}
        Bytes of an element in the compute dtype (each 2 above; 4 in fp32) [bytes/element].

    Examples
    --------
    Qwen3-8B (f = 12288, 36 layers) at t = 2, s = 8192, b = 1: 36 x 2 x 2 x 8192 x 6144 bytes,
    7.25 GB:

    >>> per_layer = unfused_glu_products(False).evaluate(s=8192, b=1, c=1, f=12288, t=2)
    >>> 36 * per_layer == 36 * 2 * 2 * 8192 * 12288 // 2
    True
    >>> unfused_glu_products(True).expr, unfused_glu_products(True, moe=True).expr
    (0, 0)

    References
    ----------
    .. [megatron-core] megatron/core/transformer/mlp.py:320-334 at d98e8a64dd (``else:`` of
       ``elif self.config.bias_activation_fusion``, ``def glu``), moe/experts.py:995-1016
       (``TEGroupedMLP.forward``, ``bias_act_func``: the same ``glu``, then ``*
       permuted_probs``), transformer_config.py:231 (``glu_linear_offset: float = 0.0``) and
       :496 (``bias_activation_fusion: bool = False``); the same code at 8b3d8a5d97, the
       Megatron-LM of Megatron-Bridge 33655ef845 (mlp.py:313-327, experts.py:763-783).
    .. [megatron-bridge] src/megatron/bridge/models/qwen/qwen3_bridge.py:43-55 and
       qwen3_moe_bridge.py at 33655ef845 (``provider_bridge`` leaves it unset),
       models/llama/llama_bridge.py:65 (sets it True).
    """
    expr = sp.Integer(0) if fused else (3 if moe else 2) * width * glu_elements(moe)
    return Term("unfused_glu_products", expr, "16-bit silu(gate) and gate-offset up product "
                "operands kept by an unfused SwiGLU (bias_activation_fusion False)"
                + (", and its output the probability weighting keeps" if moe else ""),
                Source("megatron-core", "transformer/mlp.py:320-334 (unfused glu), "
                       "moe/experts.py:995-1016, transformer_config.py:231, :496 at "
                       "d98e8a64dd"),
                label="unfused SwiGLU")


def clamped_glu_copy(clamped: bool = True, *, width: int = 2) -> Term:
    r"""The clamped copy of the experts' fc1 output that a clamped quick-GeGLU keeps [bytes].

    Per micro-batch and MoE layer, with :math:`\tau = sb/c` and the routed token copies
    :math:`R = c_f k \tau t_e / t` an expert rank receives:

    .. math:: 2 \cdot 2 R f_e / t_e

    With ``activation_func_clamp_value`` set (GPT-OSS: 7.0, the Bridge's value for the HF
    config's ``swiglu_limit``), Megatron-core's experts run ``weighted_bias_quick_geglu_impl``,
    which clamps the two halves of the :math:`[R, 2f_e/t_e]` fc1 output in eager PyTorch
    before its fused function::

        x_glu, x_linear = input.chunk(2, -1)
        input = torch.cat((x_glu.clamp(min=None, max=c), x_linear.clamp(min=-c, max=c)), -1)

    Each ``clamp`` keeps its input for its backward, a view of the fc1 output that
    ``expert_activation`` already counts; ``cat`` keeps only its dimension; and
    ``WeightedQuickGeGLUFunction`` saves the concatenation, a new 16-bit tensor as wide as the
    fc1 output: :math:`2 f_e/t_e` elements of 2 bytes per routed row.  The experts' fc1 adds
    its bias inside the GEMM (``skip_bias_add=False``), so the unbiased function runs.  Inside
    a recomputed ``moe_act`` or ``moe`` the copy is rebuilt in the backward (not kept).
    ``activation_func_fp8_input_store`` is for SwiGLU only (Megatron-core refuses it for
    another activation, transformer_config.py:2467-2469): :func:`fp8_glu_input`.  0 unclamped.

    Parameters
    ----------
    clamped : bool
        The routed experts' GLU input is clamped under Megatron-core (GPT-OSS's
        ``swiglu_limit``; :attr:`memsym.frameworks.Framework.moe_glu_clamp_copy`) [1].

    width : {2, 4}
        Bytes of an element in the compute dtype (each 2 above; 4 in fp32) [bytes/element].
    Examples
    --------
    GPT-OSS-120B (f_e = 2880, top-4) at s = 2048, b = 1, TP 2, ETP 1: R = 4 x 2048 / 2 = 4096
    routed rows, each keeping 2 x 2880 more 16-bit elements, 36 layers:

    >>> per_layer = clamped_glu_copy().evaluate(s=2048, b=1, c=1, c_f=1, k=4, t=2, t_e=1,
    ...                                         f_e=2880)
    >>> per_layer == 4096 * 2 * 2880 * 2, round(float(36 * per_layer) / 1e9, 2)
    (True, 1.7)
    >>> clamped_glu_copy(False).expr
    0

    References
    ----------
    .. [megatron-core] megatron/core/fusions/fused_bias_geglu.py:410-442 at d98e8a64dd
       (``weighted_bias_quick_geglu_impl``: the clamps and ``torch.cat`` at :424-433,
       ``WeightedQuickGeGLUFunction.apply`` at :440) and :326-327 (``ctx.save_for_backward(
       input_for_backward, ...)``); moe/experts.py:973-981 (``TEGroupedMLP.forward``,
       ``bias_act_func``) and :224 (fc1 ``skip_bias_add=False``); the same code at
       8b3d8a5d97, the Megatron-LM of Megatron-Bridge 33655ef845.
    .. [pytorch] ``ClampBackward1`` saves ``self``, ``CatBackward0`` only ``dim`` (torch
       2.13.0: the nodes' ``_saved_*`` attributes; ``tests/test_clamped_glu.py``).
    """
    expr = 2 * width * glu_elements(moe=True) if clamped else sp.Integer(0)
    return Term("clamped_glu_copy", expr, "16-bit clamped copy of the expert fc1 output "
                "(torch.cat of the clamped halves) saved by the fused quick-GeGLU",
                Source("megatron-core", "core/fusions/fused_bias_geglu.py:424-440, :326-327; "
                       "moe/experts.py:973-981, :224 at d98e8a64dd"),
                label="clamped GLU copy")


def fp8_glu_input(stored: bool = True, *, moe: bool = False, shared: bool = False,
                  width: int = 2) -> Term:
    r"""What storing the SwiGLU's input in FP8 saves [bytes per layer], a negative term.

    Per micro-batch and layer, with :math:`\tau = sb/c` and the routed token copies
    :math:`R = c_f k \tau t_e / t` an expert rank receives:

    .. math:: \text{dense: } -2\tau f / t, \qquad
              \text{MoE: } -2 R f_e / t_e \; (- 2\tau f_{sh} / t \text{ with kept shared experts})

    Megatron-core's ``activation_func_fp8_input_store`` (a ``TransformerConfig`` field; no
    Megatron-LM flag, arguments.py:2306-2329 lists it among the fields with no CLI argument;
    Bridge's ``model.activation_func_fp8_input_store``) makes the fused SwiGLU save its input,
    the :math:`2f/t`-wide fc1 output, as ``torch.float8_e4m3fn``: one byte per element where
    the layer terms count two (``mlp_activation``, ``expert_activation``, ``shared_expert``).
    The 16-bit fc1 output itself is kept by nothing else (TE's linears keep no output) and is
    freed.  Only the fused path reads it (``bias_activation_fusion``); the eager gate and a
    recomputed MLP or ``moe_act`` keep no FP8 copy.  0 when not stored.

    Parameters
    ----------
    stored : bool
        ``activation_func_fp8_input_store`` on a fused SwiGLU [1].
    moe : bool
        An MoE layer: the routed experts' fc1 outputs (``TEGroupedMLP``) [1].
    shared : bool
        The MoE layer's shared experts keep their activation (not recomputed) [1].
    width : {2, 4}
        Bytes of an element in the compute dtype: the FP8 copy saves width - 1 on each of the
        2f-wide input's elements (1 at 16 bits, 3 in fp32) [bytes/element].

    Examples
    --------
    Qwen3-30B-A3B's experts (f_e = 768, top-8) at s = 4096, b = 1, TP 1, ETP 1: R = 8 x 4096 =
    32768 routed rows, each 2 x 768 elements stored in one byte instead of two:

    >>> fp8_glu_input(moe=True).evaluate(s=4096, b=1, c=1, c_f=1, k=8, t=1, t_e=1, f_e=768)
    -50331648
    >>> fp8_glu_input().evaluate(s=4096, b=1, c=1, f=14336, t=2) == -4096 * 14336
    True
    >>> fp8_glu_input(False).expr
    0

    References
    ----------
    .. [megatron-core] megatron/core/fusions/fused_bias_swiglu.py:180-184, :232-235 and
       :269-270 at d98e8a64dd (``input_for_backward = input.to(torch.float8_e4m3fn) if
       fp8_input_store else input``; ``ctx.save_for_backward(input_for_backward, ...)``);
       transformer/mlp.py:283-316 (the fused calls), moe/experts.py:966-972 and
       moe/shared_experts.py:285-290; transformer_config.py:227 (default False), :2467-2469.
    """
    expr = -2 * (width - 1) * glu_elements(moe, shared) if stored else sp.Integer(0)
    return Term("fp8_glu_input", expr, "one byte per element saved on the SwiGLU input kept "
                "in FP8 (activation_func_fp8_input_store)",
                Source("megatron-core", "core/fusions/fused_bias_swiglu.py:180-184, :232-235, "
                       ":269-270; transformer/mlp.py:283-316; moe/experts.py:966-972; "
                       "transformer_config.py:227, :2467-2469 at d98e8a64dd"),
                label="FP8 SwiGLU input")


def paper_layer(parallel: str = "none", recompute: str = "none") -> Total:
    r"""memsym's derivation specialised to the paper's setting [bytes per layer].

    :func:`layer_activations` for a GPT layer (g = a, d_h = h/a, f = 4h, LayerNorm, dropout,
    no flash attention, c = 1; t = 1 for ``parallel="none"``; SP for ``"tp+sp"``) without the
    norm statistics the paper neglects.  The catalogue proves it equals :func:`korthikanti`
    row by row, i.e. that the term-by-term derivation reproduces the printed formulas:

    .. math:: A_{\mathrm{layer}}\big|_{g=a,\,d_h=h/a,\,f=4h,\,c=1} = M_{\mathrm{Table\,2}}

    Examples
    --------
    >>> sp.factor_terms(sp.expand(paper_layer().expr))    # Korthikanti Eq. 1: sbh(34 + 5as/h)
    b*s*(5*a*s + 34*h)

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.1 (Eq. 1), §4.2 (Eq. 2, 4), Table 2.
    """
    parallel = choose("parallel setting", parallel, PARALLEL)
    recompute = choose("recompute mode", recompute, RECOMPUTE)
    A = layer_activations(sequence_parallel=parallel == "tp+sp", recompute=recompute,
                          norm_statistics=False)
    gpt = {g: a, d_h: h / a, f: 4 * h, c: sp.Integer(1)}
    if parallel == "none":
        gpt[t] = sp.Integer(1)
    return A.map(lambda x: sp.cancel(x.xreplace(gpt)))


def paper_first_stage(interleaved: bool = False) -> Term:
    r"""The first pipeline stage's activations, TP + SP, no recompute (Korthikanti Eq. 5) [bytes].

    .. math:: \frac{sbhL}{t}\left(34 + \frac{5as}{h}\right)\,\phi,\qquad
        \phi = 1 \text{ (1F1B)},\; 1 + \frac{p - 1}{p\,v} \text{ (interleaved)}

    Examples
    --------
    >>> paper_first_stage().expr
    L*b*h*s*(5*a*s/h + 34)/t

    References
    ----------
    .. [korthikanti] arXiv:2205.05198, §4.2.3, Eq. 5 and the interleaved factor.
    """
    return Term("korthikanti.first_stage" + (".interleaved" if interleaved else ""),
                first_stage_layers(interleaved=interleaved) * korthikanti("tp+sp").expr,
                "first pipeline stage: L layers' worth of TP+SP activations",
                Source(_K, "§4.2.3, Eq. 5" + (" and the interleaved factor" if interleaved else "")))
