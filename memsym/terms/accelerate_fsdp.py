r"""FSDP2 as Accelerate's plugin runs it under the Hugging Face Trainer (beside torchtitan's).

The Trainer (transformers 5.25.0) hands ``--fsdp`` / ``--fsdp_config`` to Accelerate 1.16.0's
``FullyShardedDataParallelPlugin`` (FSDP2 unless ``fsdp_config`` says version 1:
training_args.py:2826), and Accelerate wraps transformers' model with torch's ``fully_shard``
(``utils/fsdp_utils.py:740-904``, ``fsdp2_prepare_model``).  The sharded parameters, gradients
and AdamW moments are those of :func:`memsym.terms.model_state.model_state`'s ``fsdp`` scheme;
what the plugin decides is their dtype, the gathered and reduced dtypes, and the groups:

* mixed precision (``--bf16`` / ``--fp16``): the state sets the plugin's
  ``MixedPrecisionPolicy(param_dtype=reduce_dtype=`` the 16-bit dtype ``)`` (state.py:975-976,
  utils/dataclasses.py:2008-2012) and ``fsdp2_prepare_model`` upcasts every parameter that
  requires a gradient to fp32 (fsdp_utils.py:799-806): fp32 shards, fp32 sharded gradients
  (``foreach_reduce`` casts the 16-bit reduce-scatter output back to the parameters' dtype),
  fp32 moments, 4 + 4 + 8 bytes over d; gathered and reduced in 16 bits
  (:math:`b_u = b_r = 2`, where torchtitan reduces in fp32).  Accelerate's ``_prepare_fsdp2``
  never calls ``prepare_model`` (accelerator.py:1643-1735), so no ``torch.autocast`` wraps the
  forward: the model computes in the gathered 16-bit weights;
* no mixed precision: ``MixedPrecisionPolicy()`` (fsdp_utils.py:768), every tensor in the
  weights' dtype as loaded, :math:`w + w + 2w` bytes over d (:func:`accelerate_fsdp_widths`);
* the groups (fsdp_utils.py:850-904): each decoder layer (the model's ``_no_split_modules``),
  an untied embedding, and ``[final norm, (the tied embedding,) output layer]`` with
  ``reshard_after_forward=False``, the root last.  ``_find_final_norm`` (fsdp_utils.py:722-737)
  takes the final norm only among the base model's direct children: where transformers puts it
  deeper (:data:`ACCELERATE_ROOT_NORM`) it stays in the root group and the tail group is
  ``[(tied embedding,) output layer]``.  A tied group's first module is the
  embedding, whose token ids need no gradient, so FSDP2 registers no post-backward hook on it
  (``_fsdp_param_group.py:540-555``, ``pre_forward``; ``:890-903``): the group stays gathered
  and its unsharded gradient waits until the root's final callback at the backward's end
  (``_fsdp_state.py:395-420``) (:func:`accelerate_output_group`);
* gradient accumulation: the Trainer runs every micro-batch but the last under Accelerate's
  ``no_sync`` (trainer.py:1941-1952), ``set_requires_gradient_sync(False)`` for FSDP2
  (accelerator.py:1126-1131): each parameter's unsharded gradient is kept
  (``_fsdp_param_group.py:588-612``) in the reduce dtype, which is its own here
  (``_fsdp_param.py:802-813``), until the last micro-batch's backward reduce-scatters it
  (:func:`accelerate_accumulated_grads`);
* ``model.zero_grad()`` after every step (trainer.py:1991; ``set_to_none=True``: torch
  ``nn/modules/module.py:2948``): the sharded gradients exist only from the backward on;
* the optimizer is ``torch.optim.AdamW(fused=True)`` (``--optim adamw_torch_fused``, the
  default: trainer_optimizer.py:201-208), whose ``_fused_adamw_`` updates in place
  (torch/optim/adam.py:802-899): no step copy of the moments (torchtitan's foreach AdamW has
  one, :func:`memsym.terms.transients.optimizer_step_transient`).

References
----------
.. [hf-accelerate] Accelerate 1.16.0 ``src/accelerate/``.
.. [hf-trainer] transformers 5.25.0 ``training_args.py``, ``trainer.py``, ``trainer_optimizer.py``.
.. [pytorch-fsdp2] torch 2.13.0 ``torch/distributed/fsdp/_fully_shard/``.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import choose
from ..symbols import N_ll, V, b_f8, b_g, b_hp, b_m, b_mg, b_o, b_r, b_u, h, n_ag, t
from ..term import Source, Term
from ..values import as_expr
from ..vocabulary import ACCELERATE_FSDP_MODES
from .widths import byte_widths

__all__ = ["ACCELERATE_FSDP_MODES", "ACCELERATE_PRECISIONS", "ACCELERATE_MIXED",
           "ACCELERATE_PLAIN", "ACCELERATE_GROUPS", "TRAINER_ZERO_GRAD", "accelerate_fsdp_widths",
           "accelerate_fsdp_states", "accelerate_output_group",
           "accelerate_accumulated_grads", "accelerate_root_group", "ACCELERATE_ROOT_NORM",
           "ACCELERATE_FINAL_NORM", "accelerate_root_norm_grad"]

#: The precisions each mode is counted for [bytes per element of the gathered parameters].
ACCELERATE_PRECISIONS = {"mixed": {"bf16": 2, "fp16": 2},
                         "plain": {"fp32": 4, "bf16": 2, "fp16": 2}}

#: Where the mixed-precision upcast and policy come from.
ACCELERATE_MIXED = Source("hf-accelerate", "utils/fsdp_utils.py:799-806 (fsdp2_prepare_model: "
                          "every parameter that requires a gradient upcast to fp32 when "
                          "mixed_precision is not 'no'); state.py:975-976 and "
                          "utils/dataclasses.py:2008-2012 (MixedPrecisionPolicy(param_dtype="
                          "reduce_dtype=the 16-bit dtype)); torch _fsdp_collectives.py:699 "
                          "(foreach_reduce: the reduce-scatter output cast to the parameters' "
                          "dtype, the sharded gradient)")
#: Where the unmixed states come from.
ACCELERATE_PLAIN = Source("hf-accelerate", "utils/fsdp_utils.py:764-770 (mp_policy "
                          "MixedPrecisionPolicy() without mixed precision: the parameters "
                          "gathered, reduced and sharded in their own dtype); torch "
                          "torch/optim/adam.py:178-184 (AdamW's moments zeros_like(p))")
#: Where the groups come from.
ACCELERATE_GROUPS = Source("hf-accelerate", "utils/fsdp_utils.py:850-904 (fsdp2_prepare_model: "
                           "each decoder layer, an untied embedding, and [final norm, (tied "
                           "embedding,) output] with reshard_after_forward=False, the root "
                           "last); torch _fsdp_param_group.py:540-555, 890-903 (pre_forward "
                           "registers the post-backward hook on the group's first inputs that "
                           "need a gradient: none where the embedding's token ids come first), "
                           "_fsdp_state.py:395-420 (_root_post_backward_final_callback)")
#: model_type -> where transformers' causal LM of that type holds its final norm, for the types
#: whose final norm is not a direct child of the base model (``getattr(model,
#: model.base_model_prefix)``), so that Accelerate's ``_find_final_norm`` misses it and it stays
#: in the root group.  Every other type memsym reads has it there (tests/test_engine_accelerate_
#: fsdp.py runs ``_find_final_norm`` on each type's model on the meta device).
ACCELERATE_ROOT_NORM = {
    # OPTForCausalLM.model is OPTModel, whose only child is its decoder (modeling_opt.py:410);
    # the norm is the decoder's (:309)
    "opt": "model.decoder.final_layer_norm",
    # Llama4ForCausalLM's base_model_prefix "language_model" (modeling_llama4.py:577) names no
    # attribute of it (its model is self.model, :585): no base model, no final norm found
    "llama4": "model.norm", "llama4_text": "model.norm",
    # the vision-language classes: the base model's children are the towers and the language
    # model (modeling_gemma3.py:757, 909; modeling_gemma4.py:2234, 2598;
    # modeling_gemma4_unified.py:947, 1349)
    "gemma3": "model.language_model.norm", "gemma4": "model.language_model.norm",
    "gemma4_unified": "model.language_model.norm",
}
#: Where the final norm's group comes from.
ACCELERATE_FINAL_NORM = Source("hf-accelerate", "utils/fsdp_utils.py:722-737 (_find_final_norm: "
                               "the last module whose class name holds 'Norm' among the base "
                               "model's direct children, else None), :884-898 (the tail group "
                               "without it), :900-904 (the root keeps it)")
#: The Trainer's zero_grad (the sharded gradients absent until the backward makes them).
TRAINER_ZERO_GRAD = Source("hf-trainer", "trainer.py:1991 (model.zero_grad() after each "
                           "optimizer step); torch nn/modules/module.py:2948 (set_to_none=True)")
_ACCUMULATED = Source("hf-trainer", "trainer.py:1941-1952 (every micro-batch but the last "
                      "under accelerator.no_sync); Accelerate accelerator.py:1126-1131 "
                      "(set_requires_gradient_sync(False) under FSDP2); torch "
                      "_fsdp_param_group.py:588-612 (post_backward without reduce_grads keeps "
                      "each unsharded gradient), _fsdp_param.py:802-813 (upcast only to a "
                      "reduce_dtype of its own)")


def accelerate_fsdp_widths(mode: str, precision: str) -> dict:
    r"""Bytes per element of Accelerate's FSDP2 states, gathers and reductions.

    .. math::

        \text{mixed}:\; b_{hp} = b_g = 4,\ b_o = 8,\ b_u = b_r = 2;\qquad
        \text{plain}:\; b_{hp} = b_g = b_u = b_r = w,\ b_o = 2w

    (:math:`b_{mg} = b_m = 0`: AdamW steps on the shards themselves), ``w`` the weights'
    width [bytes/parameter].

    Parameters
    ----------
    mode : {"mixed", "plain"}
        Accelerate's mixed precision on (``--bf16`` / ``--fp16``) or off.
    precision : {"bf16", "fp16", "fp32"}
        The gathered (compute) dtype: the 16-bit one under ``mixed``, the weights' under
        ``plain``.

    Returns
    -------
    dict
        ``{b_hp, b_g, b_mg, b_m, b_o, b_f8, b_u, b_r}`` [bytes per element].

    Examples
    --------
    >>> w = accelerate_fsdp_widths("mixed", "bf16")
    >>> [int(w[x]) for x in (b_hp, b_g, b_o, b_u, b_r)]
    [4, 4, 8, 2, 2]
    >>> [int(v) for v in accelerate_fsdp_widths("plain", "bf16").values()][:5]
    [2, 2, 0, 0, 4]

    References
    ----------
    hf-accelerate: Accelerate 1.16.0 ``utils/fsdp_utils.py:764-806``, ``state.py:975-976``,
    ``utils/dataclasses.py:2008-2012``.
    """
    mode = choose("Accelerate FSDP mode", mode, ACCELERATE_FSDP_MODES)
    precision = choose(f"precision under Accelerate's FSDP ({mode})", precision,
                       tuple(ACCELERATE_PRECISIONS[mode]))
    half, zero = sp.Integer(ACCELERATE_PRECISIONS[mode][precision]), sp.Integer(0)
    if mode == "mixed":
        # the fp32 shards are the master copy: byte_widths' fsdp scheme says the same
        return {**byte_widths("fsdp", precision), b_u: half, b_r: half}
    return {b_hp: half, b_g: half, b_mg: zero, b_m: zero, b_o: 2 * half, b_f8: zero,
            b_u: half, b_r: half}


def accelerate_fsdp_states(terms, mode: str) -> tuple:
    """The ``fsdp`` scheme's model-state Terms re-cited to Accelerate's plugin: the sharded
    parameters, their gradients and AdamW's moments, in fp32 under ``mixed`` (the upcast), in
    the weights' dtype under ``plain``.

    Parameters
    ----------
    terms : iterable of Term
        :func:`memsym.terms.model_state.model_state` Terms of the ``fsdp`` scheme.
    mode : {"mixed", "plain"}
        Accelerate's mixed precision on or off.

    Examples
    --------
    >>> from memsym.terms.model_state import model_state
    >>> st = model_state("fsdp").subs(accelerate_fsdp_widths("mixed", "bf16"))
    >>> [(x.key, x.evaluate(N=16, d=2, p=1, t=1))
    ...  for x in accelerate_fsdp_states(st.terms, "mixed")]
    [('weights', 32), ('gradients', 32), ('optimizer', 64)]
    """
    mode = choose("Accelerate FSDP mode", mode, ACCELERATE_FSDP_MODES)
    src = ACCELERATE_MIXED if mode == "mixed" else ACCELERATE_PLAIN
    dtype = "fp32 (upcast)" if mode == "mixed" else "the weights' dtype"
    what = {"weights": f"sharded parameters in {dtype}, dim-0 shards over the group",
            "gradients": f"sharded gradients in {dtype} (the reduce-scatter output, cast)",
            "optimizer": f"AdamW's two moments of the shards, in {dtype}"}
    what.update({"expert_" + key: "routed experts: " + text for key, text in what.items()})
    return tuple(replace(term, source=src, description=what[term.key])
                 if term.key in what else term for term in terms)


def accelerate_output_group(tied: bool = False, norm_params=1, group_params=None) -> dict:
    r"""Accelerate's ``[final norm, (tied embedding,) output]`` group, beyond the blocks'.

    With :math:`P_o = Vh/t + n_{\mathrm{norm}} h` (the output matrix, once where tied, and the
    final norm's weight and bias) in ``param_dtype``:

    .. math::

        T_{\mathrm{fwd}} = T_{\mathrm{loss}} = P_o b_u - n_{\mathrm{ag}} N_{\mathrm{ll}} b_u,
        \qquad T_{\mathrm{bwd}} = \begin{cases} 2 P_o b_u & \text{tied} \\
        0 & \text{untied} \end{cases}

    The group is built with ``reshard_after_forward=False`` (fsdp_utils.py:884-898): gathered
    at the loss, where every block is resharded.  Untied, its post-backward hook (registered
    on the final norm's input) reshards it after its own backward, as torchtitan's
    ``[norm, output]`` (:func:`memsym.terms.transients.fsdp2_io_groups`).  Tied, the embedding
    runs first and its token ids need no gradient, so no post-backward hook is registered: the
    group stays gathered through the backward with its unsharded gradients (the output
    layer's share of the tied weight's, held by autograd until the embedding's backward adds
    its own, and the final norm's) until the root's final callback.

    Parameters
    ----------
    tied : bool
        Whether the output layer is the embedding's matrix.
    norm_params : int
        Parameter vectors of the final norm (1 RMSNorm, 2 a LayerNorm with bias) [1].
    group_params : sympy.Expr, optional
        Parameters of one block on one GPU [parameters]; default ``N_ll``.

    Returns
    -------
    dict
        Phase name (``forward``, ``loss-backward``, ``backward``) -> tuple of Terms.

    Examples
    --------
    >>> ph = accelerate_output_group(tied=True)
    >>> sum(x.evaluate(V=32, h=16, t=1, b_u=2) for x in ph["backward"])
    2112
    >>> accelerate_output_group()["backward"]
    ()

    References
    ----------
    hf-accelerate: ``utils/fsdp_utils.py:876-898``; pytorch-fsdp2: ``_fsdp_param_group.py:540-555``,
    ``_fsdp_state.py:395-420``.
    """
    n = N_ll if group_params is None else as_expr(group_params)
    out = V * h / t + as_expr(norm_params) * h
    what = "[final norm, tied embedding, output]" if tied else "[final norm, output]"
    kept = Term("output_group_gathered", out * b_u, what + " gathered "
                + ("from the forward's start to the backward's end (no post-backward hook on "
                   "token ids)" if tied else "after forward (reshard_after_forward=False)"),
                ACCELERATE_GROUPS, label=what.replace("final ", "") + " gathered")
    none = Term("blocks_gathered_at_the_loss", -n_ag * n * b_u, "no block gathered at the "
                "loss and its backward (all resharded after forward)", ACCELERATE_GROUPS,
                label="blocks' all-gathers freed at the loss")
    if not tied:
        return {"forward": (kept, none), "loss-backward": (kept, none), "backward": ()}
    grad = Term("output_grad_unsharded", out * b_u, "the group's unsharded gradients (tied "
                "weight, final norm), reduce-scattered by the root's final callback at the "
                "backward's end", ACCELERATE_GROUPS, label="tied output grads unsharded")
    return {"forward": (kept, none), "loss-backward": (kept, none), "backward": (kept, grad)}


def accelerate_root_norm_grad(norm_params) -> Term:
    r"""The unsharded gradient of a final norm left in Accelerate's root group [bytes].

    .. math:: T_{\mathrm{bwd}} = n_{\mathrm{norm}}\, h\, b_r

    The root registers no post-backward hook (its forward input, the token ids, needs no
    gradient), so the gradient the final norm's backward makes first is held through every
    block's backward until the root's final callback reduce-scatters it.

    Parameters
    ----------
    norm_params : int
        Parameter vectors of the final norm (1 RMSNorm, 2 a LayerNorm with bias) [1].

    Examples
    --------
    >>> accelerate_root_norm_grad(2).evaluate(h=768, b_r=2)     # OPT-125m's final LayerNorm
    3072

    References
    ----------
    hf-accelerate: ``utils/fsdp_utils.py:722-737, 900-904``; pytorch-fsdp2:
    ``_fsdp_state.py:395-420``.
    """
    return Term("root_norm_grad_unsharded", as_expr(norm_params) * h * b_r, "the final norm's "
                "unsharded gradient in the root group (Accelerate's _find_final_norm misses a "
                "norm below the base model's children), reduce-scattered at the backward's end",
                ACCELERATE_FINAL_NORM, label="root final norm grad unsharded")


def accelerate_accumulated_grads(stage_params) -> Term:
    r"""The unsharded gradients Accelerate's ``no_sync`` keeps across micro-batches [bytes].

    .. math:: \Psi_{\mathrm{stage}}\, b_r

    every parameter's unsharded gradient, in the reduce dtype (the gathered one, :math:`b_r =
    b_u`), from the first micro-batch's backward to the last's, when the Trainer accumulates
    over more than one micro-batch; the last backward reduce-scatters them block by block.

    Parameters
    ----------
    stage_params : sympy.Expr
        Parameters one GPU trains, whole [parameters].

    Examples
    --------
    >>> accelerate_accumulated_grads(10**9).evaluate(b_r=2)
    2000000000

    References
    ----------
    hf-trainer: ``trainer.py:1941-1952``; hf-accelerate: ``accelerator.py:1126-1131``;
    pytorch-fsdp2: ``_fsdp_param_group.py:588-612``, ``_fsdp_param.py:802-813``.
    """
    return Term("accumulated_grads", as_expr(stage_params) * b_r, "every parameter's unsharded "
                "gradient kept across the micro-batches (Accelerate's no_sync), reduced by the "
                "last", _ACCUMULATED, label="accumulated unsharded grads")


def accelerate_root_group(root_params) -> Term:
    r"""The parameters Accelerate leaves in the root ``fully_shard(model)`` group [bytes].

    .. math:: T_{\mathrm{fwd}} = T_{\mathrm{loss}} = T_{\mathrm{bwd}} = R\, b_u

    with :math:`R` the parameters outside the decoder layers, the embedding and the
    ``[final norm, output]`` group (a learned position table, an embedding norm): the root is
    never resharded after forward (``reshard_after_forward`` None: fsdp_utils.py:900-904) and
    its forward input, the token ids, needs no gradient, so it is resharded only by the final
    callback at the backward's end.  Its gradients are made by the embedding's backward, after
    every block's: none is held in the blocks' backward.

    Parameters
    ----------
    root_params : sympy.Expr
        :math:`R` on one GPU [parameters].

    Returns
    -------
    Term
        ``root_group_gathered``, held in the forward, the loss's and the blocks' backward.

    Examples
    --------
    >>> accelerate_root_group(1024 * 768).evaluate(b_u=2)     # GPT-2's wpe table
    1572864

    References
    ----------
    hf-accelerate: ``utils/fsdp_utils.py:900-904``; pytorch-fsdp2: ``_fsdp_state.py:395-420``.
    """
    return Term("root_group_gathered", as_expr(root_params) * b_u, "the root group's "
                "parameters (position table, embedding norm) gathered from the forward's start "
                "to the backward's end", ACCELERATE_GROUPS, label="root group gathered")
