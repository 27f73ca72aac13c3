"""Megatron-LM's ``--tp-comm-overlap-cfg FILE``: the userbuffers config Transformer Engine runs
the TP GEMM overlaps with, read as the job option ``tp_comm_overlap_cfg``.

Megatron opens the file only under ``--tp-comm-overlap`` (``megatron/training/initialize.py``
``_initialize_tp_communicators``: ``yaml.safe_load``) and hands the mapping to Transformer
Engine's ``initialize_ub``, which merges each GEMM's entry over its default.  memsym reads the
files those configs are written as (``tests/functional_tests/.../tp_comm_overlap_cfg.yaml`` of
Megatron-LM): a block mapping of GEMM names, each a block mapping of scalar keys, with
comments.  It parses that subset itself (PyYAML is not a dependency; nothing is evaluated):
anything else, flow style, anchors, tags or multi-line values, is refused in one line.  The
entries are priced as :func:`memsym.timing.userbuffers.user_ub_config` says; the keys and
GEMMs memsym does not read are listed as ignored.
"""

from __future__ import annotations

import re

from ..errors import InvalidValueError
from ..timing.userbuffers import UB_KEYS, ub_config, user_ub_config
from ._values import read_bounded

__all__ = ["parse_ub_yaml", "read_tp_comm_overlap_cfg", "megatron_ub_option", "UB_DEST",
           "ub_yaml"]

#: A key line of the subset: indentation, a plain key, a colon, an optional plain scalar.
_LINE = re.compile(r"( *)([A-Za-z_][A-Za-z0-9_]{0,63}) *:(?: +(.*?))? *")
#: YAML 1.1 booleans as ``yaml.safe_load`` reads them (PyYAML's resolver): the file's own
#: spellings, kept apart from HfArgumentParser's words (hf_trainer_args.BOOL_WORDS) and Hydra's
#: true / false (bridge_command): each reader takes its framework's words.
_BOOLS = {**dict.fromkeys(("true", "yes", "on"), True), **dict.fromkeys(("false", "no", "off"), False)}
_INT = re.compile(r"[-+]?[0-9]{1,9}")
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def _scalar(text: str, where: str):
    """A plain scalar as ``yaml.safe_load`` types it: bool, int, else the word; refused if not
    one of those (quotes, flow collections, anchors and tags are not read)."""
    low = text.lower()
    if low in _BOOLS and text in (low, low.capitalize(), low.upper()):
        return _BOOLS[low]
    if _INT.fullmatch(text):
        return int(text)
    if _PLAIN.fullmatch(text):
        return text
    raise InvalidValueError(f"{where}: value {text[:40]!r} is not read (a word, a whole number "
                            "or true/false)")


def parse_ub_yaml(text: str, what: str = "--tp-comm-overlap-cfg") -> dict:
    """The two-level mapping of a userbuffers config file: GEMM name -> {key: scalar}.

    Examples
    --------
    >>> parse_ub_yaml("# TE\\nproj_fprop:\\n  method: pipeline\\n  num_sm: 4\\n"
    ...               "  set_sm_margin: 0\\nfc1_dgrad:\\n  method: bulk\\n")
    {'proj_fprop': {'method': 'pipeline', 'num_sm': 4, 'set_sm_margin': 0}, 'fc1_dgrad': {'method': 'bulk'}}
    """
    out, gemm, indent = {}, None, None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        where = f"{what} line {n}"
        m = _LINE.fullmatch(line)
        if not m or "\t" in raw:
            raise InvalidValueError(f"{where}: not a 'name:' or 'key: value' line of a "
                                    "userbuffers config")
        pad, key, value = len(m.group(1)), m.group(2), m.group(3)
        if pad == 0:
            if value:
                raise InvalidValueError(f"{where}: {key} must hold its entry's key: value lines")
            if key in out:
                raise InvalidValueError(f"{where}: {key} is given twice")
            gemm, indent, out[key] = key, None, {}
            continue
        if gemm is None or value is None:
            raise InvalidValueError(f"{where}: a key: value line belongs under a GEMM's name")
        if indent is None:
            indent = pad
        if pad != indent:
            raise InvalidValueError(f"{where}: the entry's lines must be indented alike")
        if key in out[gemm]:
            raise InvalidValueError(f"{where}: {gemm}.{key} is given twice")
        out[gemm][key] = _scalar(value, where)
    return out


def ub_yaml(cfg) -> str:
    """A userbuffers config (a Megatron-Bridge config's name or a user's config tuple, as the
    job field ``tp_comm_overlap_cfg`` holds it) as the file Megatron-LM's
    ``--tp-comm-overlap-cfg`` reads: every GEMM memsym prices with each key memsym reads
    (:data:`memsym.timing.userbuffers.UB_KEYS`), in the subset :func:`parse_ub_yaml` reads
    back to the same entries.

    Examples
    --------
    >>> text = ub_yaml("userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192")
    >>> text.splitlines()[:2]
    ['qkv_fprop:', '  method: ring_exchange']
    >>> cfg, _ = user_ub_config(parse_ub_yaml(text))
    >>> ub_config(cfg) == ub_config("userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192")
    True
    """
    lines = []
    for gemm, entry in ub_config(cfg).items():
        lines.append(f"{gemm}:")
        for key in UB_KEYS:
            value = getattr(entry, key)
            lines.append(f"  {key}: {str(value).lower() if isinstance(value, bool) else value}")
    return "\n".join(lines) + "\n"


def read_tp_comm_overlap_cfg(path, notes: list) -> tuple:
    """The job option ``tp_comm_overlap_cfg`` of ``--tp-comm-overlap-cfg path``: the file read
    (bounded, :func:`memsym.readers._values.read_bounded`), parsed (:func:`parse_ub_yaml`) and
    merged over Transformer Engine's defaults
    (:func:`memsym.timing.userbuffers.user_ub_config`); what memsym does not read is said in
    ``notes``.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "ub.yaml")
    >>> _ = open(path, "w").write("fc2_fprop:\\n  method: ring_exchange\\n  aggregate: 0\\n")
    >>> notes = []
    >>> dict((g, m) for g, m, *_ in read_tp_comm_overlap_cfg(path, notes))["fc2_fprop"]
    'ring_exchange'
    >>> notes
    ['--tp-comm-overlap-cfg: fc2_fprop.aggregate not read (no effect memsym prices)']
    """
    cfg, ignored = user_ub_config(parse_ub_yaml(read_bounded(path, "--tp-comm-overlap-cfg")))
    if ignored:
        notes.append(f"--tp-comm-overlap-cfg: {', '.join(ignored[:12])}"
                     f"{' ...' if len(ignored) > 12 else ''} not read (no effect memsym prices)")
    return cfg


#: The argument's dest in Megatron-LM's table (:data:`memsym.readers._megatron_flags.FLAGS`).
UB_DEST = "tp_comm_overlap_cfg"


def megatron_ub_option(r, on: bool):
    """The ``tp_comm_overlap_cfg`` of a command's ``--tp-comm-overlap-cfg FILE`` when TP
    overlap is ``on`` (:func:`read_tp_comm_overlap_cfg`, notes in ``r``), else None: Megatron
    opens the file only under ``--tp-comm-overlap``, so without it the argument is ignored
    (the caller lists it so).  ``r``: the :class:`memsym.readers.megatron_arguments.
    MegatronArguments` read.

    Examples
    --------
    >>> from memsym.readers.megatron_arguments import MegatronArguments, parse_megatron_argv
    >>> r = MegatronArguments(*parse_megatron_argv(["--tp-comm-overlap-cfg", "x.yaml"])[::2])
    >>> megatron_ub_option(r, on=False) is None
    True
    """
    path = r.raw.get(UB_DEST)
    if path is None or not on:
        return None
    notes = []
    cfg = read_tp_comm_overlap_cfg(path, notes)
    for note in notes:
        r.note(note)
    return cfg
