"""Network tiers: the link each parallel group's collectives cross.

``n_node`` GPUs per node, an intra-node (``beta_intra``, NVLink) and an inter-node link
(``beta_inter``, InfiniBand/RoCE).  Groups are laid out innermost first in the order
[TP, CP, PP, DP] (Llama 3 §3.3.2); a group whose span exceeds ``n_node`` is priced on
``beta_inter`` (its ring crosses the node boundary; the slowest link sets the pace).
:func:`memsym.terms.communication.communication_time` prices each group's bytes on the link
read here; the names are re-exported by :mod:`memsym.terms.communication`.

References
----------
.. [llama3] Llama Team 2024, arXiv:2407.21783, §3.3.2.
"""

from __future__ import annotations

from ..errors import InvalidValueError, choose
from ..symbols import beta_inter, beta_intra
from ..values import exact

__all__ = ["GROUPS", "LAYOUT_ORDER", "LINKS", "placement", "link_for", "tensor_parallel_fits",
           "layout_warnings"]

#: Parallel groups that communicate.
GROUPS = ("tp", "cp", "pp", "dp", "ep")
#: Rank order from innermost (fastest-varying) to outermost. REF: llama3 §3.3.2.
LAYOUT_ORDER = ("tp", "cp", "pp", "dp")
#: link name -> bandwidth symbol
LINKS = {"intra": beta_intra, "inter": beta_inter}


def _sizes(values) -> dict:
    """Group sizes from a values mapping (names or symbols), missing ones = 1."""
    out = {"tp": 1, "cp": 1, "pp": 1, "dp": 1, "ep": 1}
    if not values:
        return out
    names = {"t": "tp", "c": "cp", "p": "pp", "d": "dp", "e": "ep"}
    for key, val in dict(values).items():
        name = getattr(key, "name", key)
        if name in names:
            num = exact(val, name)  # 8.0 is the whole number 8; text and NaN are refused
            if not (num.is_Integer and num >= 1):
                raise InvalidValueError(f"{name} must be a whole number >= 1 to place groups, got {val}")
            out[names[name]] = int(num)
    return out


def link_for(group: str, sizes: dict, gpus_per_node: int, order=LAYOUT_ORDER) -> str:
    """The link (``"intra"`` or ``"inter"``) a group's collectives cross.

    Ranks are numbered innermost first in ``order``; a group spans its size times those of the
    groups inside it, and stays in one node when that span is at most ``gpus_per_node`` (nodes
    hold consecutive ranks).  EP is carved out of DP (its span: the inner groups times ``e``).

    Examples
    --------
    >>> link_for("tp", {"tp": 8}, 8), link_for("tp", {"tp": 16}, 8)
    ('intra', 'inter')
    >>> link_for("dp", {"tp": 2, "dp": 4}, 8), link_for("pp", {"tp": 8, "pp": 4}, 8)
    ('intra', 'inter')
    """
    group = choose("parallel group", group, GROUPS)
    if int(gpus_per_node) < 1:
        raise InvalidValueError(f"GPUs per node must be >= 1, got {gpus_per_node}")
    order = tuple(order)
    span = 1
    target = "dp" if group == "ep" else group
    for name in order:
        if name == target:
            span *= sizes.get("ep", 1) if group == "ep" else sizes.get(name, 1)
            break
        span *= sizes.get(name, 1)
    return "intra" if span <= int(gpus_per_node) else "inter"


def placement(values=None, gpus_per_node: int | None = None, order=LAYOUT_ORDER) -> dict:
    """Link of every group: from sizes and GPUs per node when known, else TP intra-node and
    the other groups inter-node (the usual layout with t = GPUs per node).

    Examples
    --------
    >>> placement({"t": 8, "p": 4, "d": 2}, 8)["tp"], placement()["dp"]
    ('intra', 'inter')
    """
    if gpus_per_node is None:
        return {grp: ("intra" if grp == "tp" else "inter") for grp in GROUPS}
    sizes = _sizes(values)
    return {grp: link_for(grp, sizes, gpus_per_node, order) for grp in GROUPS}


def tensor_parallel_fits(t_size, gpus_per_node) -> bool:
    """Seed 002's rule: the tensor-parallel size must not exceed the GPUs in a node.

    Examples
    --------
    >>> tensor_parallel_fits(8, 8), tensor_parallel_fits(16, 8)
    (True, False)
    """
    return int(t_size) <= int(gpus_per_node)


def layout_warnings(values, gpus_per_node: int, order=LAYOUT_ORDER) -> list:
    """One line per rule of practice the layout breaks (TP crossing nodes, CP crossing nodes).

    Examples
    --------
    >>> layout_warnings({"t": 16}, 8)
    ['tensor parallel size 16 exceeds 8 GPUs per node: TP all-reduces cross the inter-node link (seed 002: keep t <= GPUs per node)']
    """
    sizes = _sizes(values)
    out = []
    if not tensor_parallel_fits(sizes["tp"], gpus_per_node):
        out.append(f"tensor parallel size {sizes['tp']} exceeds {gpus_per_node} GPUs per node: "
                   "TP all-reduces cross the inter-node link (seed 002: keep t <= GPUs per node)")
    if sizes["cp"] > 1 and link_for("cp", sizes, gpus_per_node, order) == "inter" \
            and tensor_parallel_fits(sizes["tp"], gpus_per_node):
        out.append(f"context parallel group (t*c = {sizes['tp'] * sizes['cp']}) spans nodes: "
                   "K/V traffic runs on the inter-node link")
    return out

