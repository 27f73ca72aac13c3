r"""Activation and model-state formulas derived by measuring a real PyTorch module.

Owns the measurement side of memsym: run tiny instances of a ``torch.nn.Module`` on the
CPU, count the bytes autograd saves for backward (through
``torch.autograd.graph.saved_tensors_hooks``), and fit the *exact* polynomial in the
registry's shape symbols with rational coefficients; also the bytes of parameters,
gradients and optimizer states after a real optimizer step.

PyTorch is the optional extra ``memsym[torch]``; it is imported only inside the functions
that need it, so ``import memsym.measure`` works without it (and :func:`fit_polynomial`
needs no PyTorch at all).

References
----------
.. [pytorch-saved-tensors-hooks] PyTorch documentation, "Hooks for saved tensors"
   (``torch.autograd.graph.saved_tensors_hooks``).
.. [korthikanti] Korthikanti et al., "Reducing Activation Recomputation in Large
   Transformer Models", arXiv:2205.05198, §4.1, Eq. 1: :math:`sbh(34 + 5as/h)`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Mapping
import importlib.util

import sympy as sp

from .errors import InvalidValueError, choose
from .polyfit import Fit, MeasureError, fit_polynomial, monomial_basis

__all__ = [
    "MeasureError",
    "SavedTensor",
    "SavedBytes",
    "Fit",
    "ModelStateBytes",
    "torch_available",
    "monomial_basis",
    "fit_polynomial",
    "saved_bytes",
    "measure_saved",
    "derive_saved_bytes",
    "model_state_bytes",
]


def torch_available() -> bool:
    """Whether PyTorch (the optional extra ``memsym[torch]``) can be imported.

    Examples
    --------
    >>> isinstance(torch_available(), bool)
    True
    """

    return importlib.util.find_spec("torch") is not None


def import_torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MeasureError("memsym.measure needs PyTorch: pip install 'memsym[torch]'") from exc
    return torch


# ------------------------------------------------------------------ saved tensors


@dataclass(frozen=True)
class SavedTensor:
    """One tensor autograd saved for backward.

    Attributes
    ----------
    group : str
        The (sub)module that was running when it was first saved.
    shape : tuple of int
    dtype : str
    storage_bytes : int
        The full size of the storage it lives in [bytes] (a view keeps its base alive).
    counted : bool
        ``False`` when its storage was already counted (shared, e.g. Q, K and V views of
        one fused QKV output, or one input saved by several operations).
    """

    group: str
    shape: tuple
    dtype: str
    storage_bytes: int
    counted: bool


@dataclass(frozen=True)
class SavedBytes:
    """Bytes saved for backward by one forward pass [bytes].

    Attributes
    ----------
    total : int
        Sum over distinct storages, parameters (and buffers) excluded.
    groups : dict
        Group -> bytes (each storage in the group that saved it first).
    tensors : tuple of SavedTensor
        Every saved tensor in the order autograd saved it, including those whose storage
        was already counted (``counted=False``); tensors of the module's parameters and
        buffers (and empty storages) are not listed.
    """

    total: int
    groups: dict
    tensors: tuple


def saved_bytes(module, inputs, *, group_by: str = "module", depth: int = 1) -> SavedBytes:
    r"""Run ``module(*inputs)`` and count the bytes autograd saves for backward.

    Each saved tensor is traced to its storage (``untyped_storage().data_ptr()`` and
    ``nbytes()``); every storage is counted once, in full, because a saved view keeps
    its whole base alive; storages of the module's parameters and buffers are left out
    (they are model state, not activations):

    .. math::

        A = \sum_{\text{distinct storages } u \text{ saved}} \mathrm{nbytes}(u)

    Parameters
    ----------
    module : torch.nn.Module
    inputs : tensor or tuple of tensors
        Give the activations ``requires_grad=True`` as a layer inside a model would have.
    group_by : {"module", "dtype", "none"}
        Attribute each storage to the submodule that saved it first (``depth`` levels of
        the module path, ``""`` for the module's own code), to its dtype, or to nothing.
    depth : int
        Levels of the submodule path kept in group names.

    Returns
    -------
    SavedBytes

    Examples
    --------
    >>> if torch_available():  # the optional extra memsym[torch]
    ...     import torch
    ...     x = torch.ones(3, 2, 8, dtype=torch.bfloat16, requires_grad=True)
    ...     saved_bytes(torch.nn.GELU(), (x,)).total   # GeLU keeps its input: 48 bf16 values
    ... else:
    ...     96
    96
    """
    torch = import_torch()
    group_by = choose("group_by", group_by, ("module", "dtype", "none"))
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    excluded = {t.untyped_storage().data_ptr() for t in itertools.chain(module.parameters(), module.buffers())}
    stack: list[str] = [""]
    handles = []
    if group_by == "module":
        for name, sub in module.named_modules():
            if not name:
                continue
            key = ".".join(name.split(".")[:depth])
            handles.append(sub.register_forward_pre_hook(_push(stack, key)))
            handles.append(sub.register_forward_hook(_pop(stack)))
    seen: dict[int, int] = {}
    groups: dict[str, int] = {}
    records: list[SavedTensor] = []
    keep = []  # hold the saved tensors so that no storage address is reused while counting

    def pack(t):
        storage = t.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if ptr in excluded or nbytes == 0:
            return t
        keep.append(t)
        grp = {"module": stack[-1], "dtype": str(t.dtype).replace("torch.", ""), "none": ""}[group_by]
        counted = ptr not in seen
        if counted:
            seen[ptr] = nbytes
            groups[grp] = groups.get(grp, 0) + nbytes
        records.append(SavedTensor(grp, tuple(t.shape), str(t.dtype).replace("torch.", ""), nbytes, counted))
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module(*inputs)  # the output is not needed: ``keep`` holds every saved tensor
    finally:
        for hnd in handles:
            hnd.remove()
    return SavedBytes(sum(seen.values()), groups, tuple(records))


def _push(stack, key):
    def hook(module, args):
        stack.append(key)  # returns None: a hook's return value would replace the input

    return hook


def _pop(stack):
    def hook(module, args, out):
        stack.pop()  # returns None: a hook's return value would replace the output

    return hook


def _build(make, make_inputs, shape, dtype, seed):
    torch = import_torch()
    torch.manual_seed(seed)  # saved sizes do not depend on values; fixed anyway for repeatability
    module = make(**shape)
    if dtype is not None:
        module = module.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    module.train()
    inputs = make_inputs(**shape)
    return module, inputs if isinstance(inputs, (tuple, list)) else (inputs,)


def measure_saved(make, make_inputs, shape: Mapping, *, dtype=None, group_by: str = "module",
                  depth: int = 1, seed: int = 0) -> SavedBytes:
    """:func:`saved_bytes` of the instance ``make(**shape)`` on ``make_inputs(**shape)``.

    ``dtype`` (e.g. ``"bfloat16"``) converts the module; the inputs are used as given.
    """
    module, inputs = _build(make, make_inputs, dict(shape), dtype, seed)
    return saved_bytes(module, inputs, group_by=group_by, depth=depth)


def derive_saved_bytes(make, make_inputs, symbols, *, dtype=None, group_by: str = "module",
                       depth: int = 1, seed: int = 0, **fit) -> Fit:
    r"""The exact activation formula of a module family, derived by measurement.

    .. math::

        A(s, b, h, \dots) = \sum_m c_m\, m(s, b, h, \dots) \quad [\text{bytes}]

    Parameters
    ----------
    make : callable
        ``make(**shape) -> torch.nn.Module`` (shape: symbol name -> int).
    make_inputs : callable
        ``make_inputs(**shape) -> tensor or tuple of tensors``.
    symbols : sequence of str
        Registered shape symbols to fit in.
    dtype : str or torch.dtype, optional
        Convert each module to it (``"bfloat16"`` for the 2-byte comparison).
    group_by, depth
        As in :func:`saved_bytes`: each group gets its own exact polynomial.
    **fit
        ``degree``, ``max_degree``, ``basis``, ``ranges``, ``valid``, ``extra``,
        ``holdout``, ``holdout_ranges`` as in :func:`fit_polynomial`.

    Returns
    -------
    Fit

    Examples
    --------
    >>> if torch_available():
    ...     import torch
    ...     make = lambda **x: torch.nn.GELU()
    ...     inputs = lambda s, b, h: torch.ones(s, b, h, requires_grad=True)
    ...     derive_saved_bytes(make, inputs, ("s", "b", "h"), degree=3).expr
    ... else:  # by hand: GeLU keeps its fp32 input, 4 bytes per element
    ...     4 * lookup("s") * lookup("b") * lookup("h")
    4*b*h*s
    """
    import_torch()

    def measure(shape):
        return measure_saved(make, make_inputs, shape, dtype=dtype, group_by=group_by, depth=depth,
                             seed=seed).groups

    return fit_polynomial(measure, symbols, seed=seed, **fit)


# ------------------------------------------------------------------ model states


@dataclass(frozen=True)
class ModelStateBytes:
    """Parameter, gradient and optimizer-state bytes after a real optimizer step.

    Attributes
    ----------
    parameters : int
        Number of parameters (distinct storages) [parameters].
    tensors : int
        Number of parameter tensors.
    weights, gradients : int
        Bytes of the parameters and of their ``.grad`` [bytes].
    optimizer : dict
        Optimizer state name (``exp_avg``, ``exp_avg_sq``, ``step``, ``momentum_buffer``)
        -> bytes.
    """

    parameters: int
    tensors: int
    weights: int
    gradients: int
    optimizer: dict

    def per_parameter(self) -> dict:
        """Bytes per parameter of each state, exact [bytes/parameter]."""
        per = {"weights": sp.Rational(self.weights, self.parameters),
               "gradients": sp.Rational(self.gradients, self.parameters)}
        per.update({k: sp.Rational(v, self.parameters) for k, v in self.optimizer.items()})
        return per


def model_state_bytes(make, make_inputs, shape: Mapping, *, optimizer: str = "adam", dtype=None,
                      steps: int = 1, seed: int = 0, **options) -> ModelStateBytes:
    r"""Run ``steps`` real optimizer steps and count the model-state bytes they leave.

    .. math::

        M = \Psi\,(b_{hp} + b_g) + \textstyle\sum_{\text{states}} \mathrm{nbytes}

    Parameters
    ----------
    make, make_inputs, shape
        As in :func:`measure_saved`.
    optimizer : {"adam", "adamw", "sgd"}
        ``torch.optim.Adam``/``AdamW`` or ``SGD`` (give ``momentum=0.9`` for momentum).
    dtype : str or torch.dtype, optional
        Convert the module first (PyTorch's optimizers keep states in the parameter dtype).
    **options
        Passed to the optimizer (``lr`` defaults to ``1e-3``).

    Returns
    -------
    ModelStateBytes

    Examples
    --------
    >>> if torch_available():
    ...     import torch
    ...     lin = lambda **x: torch.nn.Linear(4, 4, bias=False)
    ...     inp = lambda **x: torch.ones(2, 4)
    ...     st = model_state_bytes(lin, inp, {}, optimizer="adam")
    ...     (st.weights, st.gradients, st.optimizer["exp_avg"], st.optimizer["exp_avg_sq"])
    ... else:
    ...     (64, 64, 64, 64)
    (64, 64, 64, 64)
    """
    torch = import_torch()
    kinds = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    key = choose("optimizer", optimizer, tuple(kinds))
    if not isinstance(steps, int) or steps < 1:
        raise InvalidValueError(f"steps must be a whole number >= 1, not {steps!r}")
    module, inputs = _build(make, make_inputs, dict(shape), dtype, seed)
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise MeasureError("the module has no trainable parameters")
    options.setdefault("lr", 1e-3)
    opt = kinds[key](params, **options)
    for _ in range(steps):
        opt.zero_grad()
        out = module(*inputs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        out.float().sum().backward()
        opt.step()

    def distinct(tensors):
        seen = {}
        for t in tensors:
            if t is not None and isinstance(t, torch.Tensor):
                u = t.untyped_storage()
                seen[u.data_ptr()] = u.nbytes()
        return sum(seen.values())

    count = {}
    for p in params:
        count[p.untyped_storage().data_ptr()] = p.numel()
    states: dict[str, list] = {}
    for p in params:
        for name, val in opt.state.get(p, {}).items():
            states.setdefault(name, []).append(val)
    return ModelStateBytes(sum(count.values()), len(params), distinct(params),
                           distinct(p.grad for p in params),
                           {name: distinct(vals) for name, vals in sorted(states.items())})
