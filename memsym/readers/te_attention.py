"""Which attention Transformer Engine runs for a softmax sink under FP8 attention.

Transformer Engine d0067d0da6 ``get_attention_backend``
(``transformer_engine/pytorch/attention/dot_product_attention/utils.py``), for training with
FP8 attention (an FP8 recipe with ``fp8_dpa``):

* ``:646-673``: FlashAttention 2 and 4 are off for FP8 attention, FlashAttention 3 for FP8
  training, and the unfused attention unless ``NVTE_UnfusedDPA_Emulate_FP8=1``;
* ``:1113-1139`` (softmax_type other than vanilla: an off-by-one or learnable sink): FlashAttention
  off; with FP8 attention the unfused attention off, and cuDNN's fused attention off on a
  compute capability below 10.0 or with cuDNN below 9.21 (``device_compute_capability <
  (10, 0) or cudnn_version < (9, 21, 0)``);
* ``:724-737``: on compute capability 12.0 neither flash nor fused attention runs FP8.

So a sink under FP8 attention runs only in cuDNN's fused attention, on Blackwell (10.x) with
cuDNN >= 9.21; on Hopper (9.0) no backend is left and TE stops the run.  Megatron-LM has no
``--fp8-dot-product-attention`` argument (:data:`memsym.readers.megatron_arguments.CONFIG_ONLY`):
FP8 attention comes from a Megatron-Bridge recipe (``mixed_precision.fp8_dot_product_attention``,
:func:`memsym.readers.bridge_precision.recipe_fp8_attention`).
"""

from __future__ import annotations

from ..errors import InvalidValueError
from ..hardware import gpu as gpu_named
from ..model import resolve_model
from .bridge_precision import recipe_fp8_attention

__all__ = ["fp8_attention_notes", "recipe_attention_notes"]

#: The lines of get_attention_backend cited (Transformer Engine d0067d0da6).
_WHERE = "dot_product_attention/utils.py:646-673, 1122-1139 at d0067d0da6"


def fp8_attention_notes(kind: str, dpa_recipe: str | None, gpu=None) -> list:
    """The notes of FP8 attention under TE recipe ``dpa_recipe`` (None: none) with a ``kind``
    softmax (``vanilla``, ``off-by-one``, ``learnable``) on ``gpu`` (a GPU name, or None): the
    attention Transformer Engine runs a sink in, or :class:`memsym.errors.InvalidValueError`
    where it has none (a sink on compute capability below 10.0, or 12.0).

    Parameters
    ----------
    kind : str
        The softmax type.
    dpa_recipe : str or None
        ``delayed``, ``tensorwise``, ``mxfp8`` or ``nvfp4``.
    gpu : str, optional
        The GPU the job runs on (its compute capability decides).

    Examples
    --------
    >>> fp8_attention_notes("learnable", "mxfp8", "gb200")[1][:55]
    'a learnable softmax under FP8 attention on gb200 (compu'
    >>> len(fp8_attention_notes("vanilla", "mxfp8", "h100-80gb")), fp8_attention_notes("learnable", None)
    (1, [])
    """
    if dpa_recipe is None:
        return []
    notes = [f"mixed_precision.fp8_dot_product_attention ({dpa_recipe}): the attention's saved "
             "Q, K, V and output are counted in 16 bits (Transformer Engine's FP8 attention "
             "keeps FP8 copies: not modelled)"]
    if kind == "vanilla":
        return notes
    what = f"a {kind} softmax under FP8 attention"
    if dpa_recipe == "nvfp4":   # utils.py:721-723: no fused attention for NVFP4 itself
        what += (" (NVFP4's: Transformer Engine runs it only where NVTE_DPA_FP8_RECIPE switches "
                 "attention to an FP8 recipe, dot_product_attention.py:160-236, an env_vars "
                 "field memsym does not read)")
    if gpu is None:
        return notes + [f"{what}: Transformer Engine runs it only in cuDNN's fused attention on "
                        "compute capability 10.x with cuDNN >= 9.21, and on Hopper (9.0) in no "
                        f"attention ({_WHERE}); give --gpu to check"]
    dev = gpu_named(gpu)
    cc = dev.compute_capability
    if cc is None:
        return notes + [f"{what} on {dev.name}: its compute capability is not known, so "
                        f"Transformer Engine's attention for it is not checked ({_WHERE})"]
    where = f"{what} on {dev.name} (compute capability {'.'.join(map(str, cc))})"
    if tuple(cc) < (10, 0):
        raise InvalidValueError(
            f"{where}: Transformer Engine has no attention for it (FP8 attention turns "
            "FlashAttention and the unfused attention off, a sink cuDNN's fused attention below "
            f"compute capability 10.0, {_WHERE}); set mixed_precision.fp8_dot_product_attention"
            "=false")
    if tuple(cc) == (12, 0):
        raise InvalidValueError(
            f"{where}: Transformer Engine runs no FP8 attention there (dot_product_attention/"
            "utils.py:724-737 at d0067d0da6); set mixed_precision.fp8_dot_product_attention=false")
    return notes + [f"{where}: Transformer Engine runs it in cuDNN's fused attention, the one "
                    f"backend left (with cuDNN >= 9.21, {_WHERE}), which keeps no s x s scores "
                    "(counted so)"]


def recipe_attention_notes(values: dict, model, gpu=None) -> list:
    """:func:`fp8_attention_notes` of a Megatron-Bridge recipe's ``values`` (with its
    overrides) on ``gpu``: its ``model.softmax_type``, else its model's (GPT-OSS's model bridge
    sets learnable, models/gpt_oss/gpt_oss_bridge.py:86 at 067f987df0: the preset's sinks),
    and its FP8 attention (:func:`memsym.readers.bridge_precision.recipe_fp8_attention`).

    >>> recipe_attention_notes({"mixed_precision": "bf16_with_mxfp8_mixed"}, "gpt-oss-120b")
    []
    """
    dpa = recipe_fp8_attention(values)
    if dpa is None:
        return []
    arch = resolve_model(model)
    kind = values.get("model.softmax_type") or (
        "learnable" if arch.attention_sinks else
        "off-by-one" if arch.off_by_one_softmax else "vanilla")
    return fp8_attention_notes(kind, dpa, gpu)
