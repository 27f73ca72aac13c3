r"""torch ``DistributedDataParallel``'s model states: the reducer's bucket copy of the gradients.

torch's ``DistributedDataParallel`` (``torch/nn/parallel/distributed.py``, torch 2.13.0) hands
the parameters to a C++ ``Reducer`` (``torch/csrc/distributed/c10d/reducer.cpp``), which groups
them into buckets of at most ``bucket_cap_mb`` (25 MiB, ``_DEFAULT_BUCKET_CAP_MB``
distributed.py:31; the first bucket ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB where the cap is
left at its default, :108-110) and allocates, per bucket, one flat ``gradients`` tensor of the
bucket's element count in the parameters' dtype (``Reducer::initialize_buckets``:
``bucket.gradients = at::empty({offset}, options)``).  With ``gradient_as_bucket_view=False``
(torch's default, distributed.py:828; Accelerate 1.16's ``DistributedDataParallelKwargs``
keeps it, ``utils/dataclasses.py:169``, and the Hugging Face Trainer passes only
``find_unused_parameters``, ``bucket_cap_mb``, ``broadcast_buffers`` and ``static_graph``,
transformers 5.25.0 ``trainer.py:758-766``) each ``param.grad`` stays a tensor of its own: the
backward copies it into the bucket (``mark_variable_ready_dense``), the all-reduce runs on the
bucket, and the result is copied back.  The buckets live as long as the model is wrapped, a
second copy of every gradient beside ``param.grad``.  With ``gradient_as_bucket_view=True``
the gradients are views into the buckets and no second copy exists (distributed.py:731-741).

The bucket cap decides only how the elements are grouped: the buckets together hold every
parameter that requires a gradient once, whatever ``bucket_cap_mb`` (``ddp_bucket_cap_mb`` of
the Trainer, training_args.py:1404) is.

The optimizer is ``torch.optim.AdamW`` (the Trainer's ``adamw_torch_fused``, ``adamw_torch``
before torch 2.8: transformers 5.25.0 training_args.py:806-814, trainer_optimizer.py:201-208
``_get_adamw_torch``) on the module's own parameters: it updates them in place, with no fp32
master copy, and makes its two moments ``torch.zeros_like(p, memory_format=torch.preserve_format)``
(torch/optim/adam.py:178-184, ``Adam._init_group``; ``AdamW`` subclasses ``Adam``,
adamw.py:20), in the parameters' dtype.  A 16-bit model (run_clm.py's ``--dtype bfloat16``
or a bf16 checkpoint loaded with ``dtype="auto"``) so keeps 2 + 2 + 4 bytes per parameter and
2 more in the buckets (:func:`torch_adamw_widths`).

References
----------
.. [pytorch-ddp] PyTorch ``torch/nn/parallel/distributed.py`` and
   ``torch/csrc/distributed/c10d/reducer.cpp`` (torch 2.13.0, git cf30153c4c).
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..errors import choose
from ..symbols import b_f8, b_g, b_hp, b_m, b_mg, b_o
from ..term import Source, Term
from ..values import as_expr
from .model_state import shard_params

__all__ = ["DDP_BUCKETS", "TORCH_DDP_STATES", "TORCH_DDP_PRECISIONS", "ddp_bucket_copy",
           "torch_adamw_widths", "torch_ddp_states"]

#: The parameters' dtypes torch DDP with torch.optim.AdamW is counted for -> bytes per element
#: (run_clm.py's ``--dtype`` choices float32, bfloat16, float16).
TORCH_DDP_PRECISIONS = {"fp32": 4, "bf16": 2, "fp16": 2}

#: Where the bucket copy is made.
DDP_BUCKETS = Source("pytorch-ddp", "reducer.cpp, Reducer::initialize_buckets (bucket.gradients "
                     "= at::empty of the bucket's numel, the parameters' dtype) and "
                     "mark_variable_ready_dense (param.grad copied in unless "
                     "gradient_as_bucket_view); distributed.py:828 (gradient_as_bucket_view "
                     "False by default)")
#: Where torch DDP's weights, gradients and AdamW states are: the module's own parameters,
#: autograd's ``param.grad`` and ``torch.optim.AdamW``'s two moments (no master copy).
TORCH_DDP_STATES = Source("pytorch-ddp", "distributed.py, DistributedDataParallel (the module's "
                          "parameters whole on every rank, param.grad from autograd, both in "
                          "the parameters' dtype); torch/optim/adam.py:178-184 Adam._init_group "
                          "(exp_avg, exp_avg_sq = torch.zeros_like(p, memory_format="
                          "torch.preserve_format): the parameters' dtype, no master copy; "
                          "AdamW subclasses Adam, adamw.py:20)")


def ddp_bucket_copy(params=None, grad_bytes=b_g) -> Term:
    r"""The torch DDP reducer's flat gradient buckets, a second copy of the gradients [bytes].

    .. math:: M_{\mathrm{bkt}} = \Psi\, b_g

    with :math:`\Psi` the parameters one GPU holds (every one, DDP replicates the model) and
    :math:`b_g` the gradients' width, the parameters' dtype (4 B for an fp32 model).

    Parameters
    ----------
    params : sympy.Expr, optional
        Parameters that require a gradient on this GPU [parameters]; default :math:`N/(p\,t)`.
    grad_bytes : sympy.Expr
        Bytes per gradient element [bytes/parameter]; default the symbol ``b_g``.

    Returns
    -------
    Term
        ``ddp_buckets``.

    References
    ----------
    pytorch-ddp: PyTorch (torch 2.13.0) ``torch/csrc/distributed/c10d/reducer.cpp``,
    ``Reducer::initialize_buckets`` and ``mark_variable_ready_dense``;
    ``torch/nn/parallel/distributed.py:828`` (``gradient_as_bucket_view=False``).

    Examples
    --------
    >>> ddp_bucket_copy(grad_bytes=4).evaluate(N=1000, p=1, t=1)
    4000
    """
    psi = shard_params(params)
    return Term("ddp_buckets", psi * as_expr(grad_bytes), "torch DDP reducer's gradient buckets "
                "(gradient_as_bucket_view False): a second copy of every gradient",
                DDP_BUCKETS, label="DDP buckets")


def torch_adamw_widths(precision: str = "fp32") -> dict:
    r"""Bytes per parameter of torch DDP with ``torch.optim.AdamW`` on the module's parameters.

    .. math:: b_{hp} = b_g = w,\quad b_{mg} = b_m = 0,\quad b_o = 2\,w,\qquad
              w = 4\ \text{(fp32)},\ 2\ \text{(bf16, fp16)}

    the weights, ``param.grad`` and the two moments all in the parameters' dtype ``w``
    [bytes/parameter]; no fp32 master copy (:math:`b_m`) and no fp32 gradient copy
    (:math:`b_{mg}`): the optimizer updates the parameters in place from ``param.grad``.
    The reducer's buckets take :math:`b_g` (:func:`ddp_bucket_copy`).

    Parameters
    ----------
    precision : {"fp32", "bf16", "fp16"}
        The parameters' dtype (the model as loaded; not autocast's).

    Returns
    -------
    dict
        ``{b_hp, b_g, b_mg, b_m, b_o, b_f8}`` [bytes/parameter].

    Examples
    --------
    >>> w = torch_adamw_widths("bf16")      # 2 + 2 + (2 + 2) bytes, no master copy
    >>> [int(w[x]) for x in (b_hp, b_g, b_mg, b_m, b_o)]
    [2, 2, 0, 0, 4]

    References
    ----------
    pytorch-ddp: PyTorch (torch 2.13.0) ``torch/optim/adam.py:178-184`` (``Adam._init_group``:
    ``torch.zeros_like(p, memory_format=torch.preserve_format)``), ``torch/optim/adamw.py:20``;
    transformers 5.25.0 ``trainer_optimizer.py:201-208`` (``_get_adamw_torch``: ``AdamW``).
    """
    w = sp.Integer(TORCH_DDP_PRECISIONS[choose("torch DDP parameters' dtype", precision,
                                               tuple(TORCH_DDP_PRECISIONS))])
    zero = sp.Integer(0)
    return {b_hp: w, b_g: w, b_mg: zero, b_m: zero, b_o: 2 * w, b_f8: zero}


def torch_ddp_states(terms, params) -> tuple:
    """The model-state Terms of memsym's ``ddp`` scheme as torch DDP holds them: the weights,
    gradients and optimizer cited to torch, and the reducer's bucket copy
    (:func:`ddp_bucket_copy`) of the gradients' Term added beside it (same count, same width).
    A fp32 gradient copy (``main_gradients``, which Megatron's ``ddp`` scheme makes under fp16)
    is dropped: ``torch.optim.AdamW`` steps on ``param.grad`` itself.

    Parameters
    ----------
    terms : iterable of Term
        The ``ddp`` scheme's model-state Terms (:func:`memsym.terms.model_state.model_state`).
    params : sympy.Expr
        Parameters one GPU holds [parameters].

    Examples
    --------
    >>> from memsym.terms.model_state import model_state, byte_widths
    >>> st = model_state("ddp", precision="fp32").subs(byte_widths("ddp", "fp32"))
    >>> [(x.key, x.evaluate(N=10, p=1, t=1)) for x in torch_ddp_states(st.terms, shard_params())]
    [('weights', 40), ('gradients', 40), ('optimizer', 80), ('ddp_buckets', 40)]
    """
    out, grads = [], None
    for term in terms:
        if term.key in ("main_gradients", "expert_main_gradients"):
            continue
        if term.key in ("weights", "gradients", "optimizer"):
            what = {"weights": "parameters, whole on every data-parallel rank",
                    "gradients": "param.grad of every parameter, whole on every rank",
                    "optimizer": "AdamW's two moments in the parameters' dtype (no master "
                                 "copy)"}[term.key]
            term = replace(term, source=TORCH_DDP_STATES, description=what)
        if term.key == "gradients":
            grads = term
        out.append(term)
    if grads is not None:
        out.append(replace(ddp_bucket_copy(params), expr=grads.expr))
    return tuple(out)
