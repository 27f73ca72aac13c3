r"""Model states per GPU under Megatron-FSDP (``--use-megatron-fsdp``): which of its buffers
each ``--data-parallel-sharding-strategy`` shards, and the states they hold.

:mod:`memsym.terms.model_state` owns the other schemes (Megatron-core's DDP and distributed
optimizer, DeepSpeed's ZeRO, FSDP2) and the shard :func:`~memsym.terms.model_state.shard_params`
this module divides; the unsharded buckets gathered for compute are transients
(:func:`memsym.terms.transients.megatron_fsdp_buckets`).

References
----------
.. [megatron-core] ``core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py`` at
   d98e8a64dd (the same code at 2a75ac12c5, Megatron-Bridge's pin).
"""

from __future__ import annotations

from ..errors import choose
from ..symbols import b_g, b_hp, b_m, b_mg, b_o, d
from ..term import Source, Term, Total
from ..values import as_expr
from .model_state import MEGATRON_FSDP_CAST_SOURCE, shard_params

__all__ = ["MEGATRON_FSDP_STRATEGIES", "megatron_fsdp_state"]


#: Megatron-FSDP ``--data-parallel-sharding-strategy`` -> which buffers are sharded
#: (model weights, main weights + optimizer, main grads): param_and_grad_buffer.py:2329-2345
#: at d98e8a64dd (the same at 2a75ac12c5), ``_init_each_parameter_group_buffers``.
MEGATRON_FSDP_STRATEGIES = {
    "no_shard": (False, False, False),
    "optim": (False, True, False),
    "optim_grads": (False, True, True),
    "optim_grads_params": (True, True, True),
}

_MFSDP = Source("megatron-core", "core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py "
                "at d98e8a64dd (the same code at 2a75ac12c5, Bridge's pin): 2329-2345 "
                "is_*_buffer_distributed per data_parallel_sharding_strategy; 2652 "
                "model_weight_buffer (none under no_shard: the module's 16-bit parameters); "
                "2694 main_weight_buffer in main_params_dtype (fp32); 2713 main_grad_buffer in "
                "_resolve_group_grad_dtype (2313: main_grads_dtype, else the parameter's dtype)")



def megatron_fsdp_state(strategy: str = "optim_grads_params", *, params=None, dp=None,
                        main_copy: bool = False) -> Total:
    r"""Model states per GPU under Megatron-FSDP (``--use-megatron-fsdp``) [bytes].

    .. math::

        \begin{aligned}
        \text{no\_shard}:\;& \Psi\,(b_{hp} + b_g + b_{mg} + b_m + b_o) \\
        \text{optim}:\;& \Psi\,(b_{hp} + b_g) + \Psi\,(b_{mg} + b_m + b_o)/d \\
        \text{optim\_grads}:\;& \Psi\,b_{hp} + \Psi\,(b_g + b_{mg} + b_m + b_o)/d \\
        \text{optim\_grads\_params}:\;& \Psi\,(b_{hp} + b_g + b_{mg} + b_m + b_o)/d
        \end{aligned}

    The 16-bit ``model_weight_buffer`` (:math:`b_{hp}`; under ``no_shard`` the module's own
    parameters), the ``main_grad_buffer`` (:math:`b_g`: ``megatron_fsdp_main_grads_dtype``,
    by default the parameters' dtype, bf16: Megatron-FSDP reads no ``grad_reduce_in_fp32``)
    and the fp32 ``main_weight_buffer`` with Adam's states on it (:math:`b_m + b_o`) are each
    sharded or not by the strategy.  With ``main_copy`` (a 16-bit main grad under fp32 main
    weights) ``update_main_grads`` casts the rank's gradient shard to fp32 for the optimizer
    (:math:`b_{mg} = 4`, sharded as the main weights), a step-only state
    (:data:`memsym.training.STEP_STATE_KEYS`).  The unsharded buckets gathered for compute
    are transients (:func:`memsym.terms.transients.megatron_fsdp_buckets`).  The CLI
    default is ``optim_grads_params``; ``DistributedDataParallelConfig``'s is ``no_shard``.

    Parameters
    ----------
    strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}
        Megatron-FSDP's ``--data-parallel-sharding-strategy``.
    params : sympy.Expr or int, optional
        Parameters Ψ on this GPU's model-parallel shard [parameters] (default :math:`N/(p\,t)`).
    dp : sympy.Expr or int, optional
        The sharding group's size d [GPUs] (default the symbol ``d``).
    main_copy : bool
        Whether the optimizer steps on an fp32 cast of a 16-bit main grad (``main_gradients``).

    Returns
    -------
    Total
        Terms ``weights``, ``gradients``, ``main_gradients`` (with ``main_copy``) and
        ``optimizer`` [bytes].

    Examples
    --------
    By hand, bf16 with fp32 main grads (:func:`memsym.terms.widths.byte_widths` of the
    distributed optimizer):
    ``optim`` at d = 8 is 2 + 4 + 12/8, ``optim_grads_params`` 18/8:

    >>> from memsym.terms.widths import byte_widths
    >>> w = byte_widths()
    >>> megatron_fsdp_state("optim").subs(w).evaluate(N=1, d=8, p=1, t=1)
    15/2
    >>> megatron_fsdp_state().subs(w).evaluate(N=1, d=8, p=1, t=1)
    9/4

    The default bf16 main grads: (2 + 2 + 4 + 12)/8 = 5/2 bytes per parameter:

    >>> w = byte_widths(grad_dtype="bf16")
    >>> megatron_fsdp_state(main_copy=True).subs(w).evaluate(N=1, d=8, p=1, t=1)
    5/2

    References
    ----------
    .. [megatron-core] ``core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py``
       at d98e8a64dd: 2313, 2329-2345, 2652-2724, 3351-3381.
    """
    strategy = choose("data_parallel_sharding_strategy", strategy, tuple(MEGATRON_FSDP_STRATEGIES))
    shard_w, shard_o, shard_g = MEGATRON_FSDP_STRATEGIES[strategy]
    psi = shard_params(params)
    dp = d if dp is None else as_expr(dp)

    def per_gpu(width, sharded):
        return psi * width / dp if sharded else psi * width

    def whole(sharded):
        return ", sharded" if sharded else ", whole"

    terms = [
        Term("weights", per_gpu(b_hp, shard_w), ("16-bit model_weight_buffer" + whole(shard_w))
             if strategy != "no_shard" else "16-bit module parameters, whole (no_shard makes no "
             "model_weight_buffer)", _MFSDP, label="weights"),
        Term("gradients", per_gpu(b_g, shard_g), "main_grad_buffer" + whole(shard_g), _MFSDP,
             label="gradients")]
    if main_copy:
        terms.append(Term("main_gradients", per_gpu(b_mg, shard_o), "fp32 cast of the main "
                          "grads the optimizer steps on (update_main_grads)" + whole(shard_o),
                          MEGATRON_FSDP_CAST_SOURCE, label="fp32 main grads"))
    terms.append(Term("optimizer", per_gpu(b_m + b_o, shard_o), "fp32 main_weight_buffer and "
                      "optimizer states" + whole(shard_o), _MFSDP, label="master + moments"))
    return Total(f"model states per GPU (Megatron-FSDP {strategy})", tuple(terms))
