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
    notes = [_saved_note(dpa_recipe)]
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


def _saved_note(dpa_recipe: str) -> str:
    """What the fused attention's saved tensors are counted as under FP8 attention
    (:mod:`memsym.terms.fp8_attention`)."""
    head = f"mixed_precision.fp8_dot_product_attention ({dpa_recipe}): the fused attention's saved "
    if dpa_recipe == "nvfp4":
        return head + ("Q, K, V and output are counted in 16 bits (under NVFP4 Transformer Engine "
                       "runs FP8 attention only where NVTE_DPA_FP8_RECIPE picks an FP8 recipe, "
                       "dot_product_attention.py:615-680 at 366798ef8a, an env_vars field memsym "
                       "does not read)")
    if dpa_recipe == "mxfp8":
        return head + ("Q, K and V are counted as Transformer Engine main (d0067d0da6) keeps them, "
                       "rowwise and columnwise MXFP8 copies (2 + 1/16 bytes an element), the "
                       "output in 16 bits, one fp32 statistic per query row and head; TE 2.14.1 "
                       "(366798ef8a) and 2.9 refuse MXFP8 attention (dot_product_attention.py:"
                       "676-680)")
    kept = "Q, K, V and output in FP8" if dpa_recipe == "delayed" else \
        "Q, K and V in FP8, the output in 16 bits (NVTE_DPA_FP8CS_O_in_F16=1)"
    return head + (f"{kept}, 1 byte an element, and fp32 M and ZInv per query row and head, as "
                   "Transformer Engine 2.14.1 saves them (backends.py:1314-1322, csrc/extensions/"
                   "attention.cpp:263-276 at 366798ef8a)")


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
