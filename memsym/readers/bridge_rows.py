"""The compact form of the generated Megatron-Bridge recipe tables, expanded.

``tools/bridge_recipes.py`` writes each recipe row of :mod:`memsym.readers._bridge_recipes` and
:mod:`memsym.readers._bridge_finetune` as the difference from an earlier row of its table (most
recipes of a family, and every performance recipe of one base recipe, share most values), and
each statement it did not read (``computed``) once, by index: the rows of about 560 recipes
then take a few hundred lines and kilobytes instead of thousands.  :func:`expand_rows` gives
back the full rows.
"""

from __future__ import annotations

import copy

__all__ = ["expand_rows"]


def expand_rows(rows: dict, computed: tuple) -> dict:
    """The full rows of a compact table, in its order.

    Parameters
    ----------
    rows : dict
        name -> ``(like, set, unset, source, hf_model, computed indices)``: ``like`` the name
        of an earlier row whose values this row starts from (None: from none), ``set`` the
        values it adds or changes, ``unset`` the keys of ``like``'s values it does not have.
    computed : tuple of str
        The statements the rows index.

    Returns
    -------
    dict
        name -> ``{"source", "hf_model", "computed", "values"}``, the values sorted by key.

    Examples
    --------
    >>> rows = {"a": (None, {"x": 1, "y": [2]}, (), "f.py:1 a", "org/a", (0,)),
    ...         "b": ("a", {"z": 3}, ("x",), "f.py:9 b", "org/b", ())}
    >>> expand_rows(rows, ("9: cfg.x = f()",))["b"]["values"]
    {'y': [2], 'z': 3}
    """
    out = {}
    for name, (like, changed, unset, source, hf_model, indices) in rows.items():
        values = dict(out[like]["values"]) if like is not None else {}
        for key in unset:
            del values[key]
        values.update(changed)
        out[name] = {"source": source, "hf_model": hf_model,
                     "computed": tuple(computed[i] for i in indices),
                     "values": copy.deepcopy(dict(sorted(values.items())))}
    return out
