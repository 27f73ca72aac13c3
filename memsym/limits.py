"""The documented limits on every size a job can carry, and the bounds of every search.

Each limit is generous for any real model and cluster and far beyond (the largest published
models have ~10^2 layers, hidden sizes ~3·10^4, vocabularies ~2.6·10^5, clusters ~10^5 GPUs),
yet small enough that no loop over layers, stages, divisors or batch sizes can run away in time
or memory.  A value above its limit is refused where it enters, with :class:`~memsym.errors.LimitError`
naming the limit; :func:`check_limit` is the one place this is done.
"""

from __future__ import annotations

import re
from fractions import Fraction
from dataclasses import dataclass
from types import MappingProxyType

from .errors import InvalidValueError, LimitError, choose
from .text import short

__all__ = ["Limit", "LIMITS", "SEARCH_BOUND", "MAX_CANDIDATES", "MAX_DIGITS", "SHELL_MAX_DEPTH",
           "SHELL_MAX_WORD_CHARS", "SHELL_MAX_EXPANDED_CHARS", "SHELL_MAX_NUMBER_DIGITS",
           "SHELL_MAX_COMMANDS", "BRIDGE_MAX_VALUE_CHARS", "check_limit",
           "limit_of", "describe", "FIELD_LIMITS", "MAX_INPUT_BYTES",
           "MAX_CONFIG_JSON_BYTES", "MAX_HUB_NAME_CHARS", "MAX_HUB_REVISION_CHARS", "MAX_NESTING", "MAX_CONFIG_CALL_DEPTH", "MAX_KEY_PARTS", "MAX_ELEMENTS", "MAX_NUMBER_CHARS",
           "MAX_TOP", "MAX_MARGIN_FRACTION", "EFFICIENCY_RANGE", "BANDWIDTH_RANGE", "TFLOPS_RANGE", "PRICE_RANGE",
           "check_text", "MAX_LOG_BYTES", "MAX_LOG_LINES", "MAX_LOG_LINE_CHARS", "CALIBRATION_RANGE"]


@dataclass(frozen=True)
class Limit:
    """One documented limit: the largest accepted value, its unit and why it is enough.

    Attributes
    ----------
    name : str
        The key, e.g. ``"layers"``.
    maximum : int
        The largest accepted value (inclusive).
    unit : str
        The unit in brackets in the docs, e.g. ``"GPUs"``, ``"bytes"``.
    shown : str
        The maximum as people write it (``"10^6"``, ``"2^40"``).
    reason : str
        One line: why this bound is generous and why it exists.
    """

    name: str
    maximum: int
    unit: str
    shown: str
    reason: str


def _limits(*rows: Limit):
    return MappingProxyType({row.name: row for row in rows})


#: Every limit by name.  Real values for comparison: Llama-3-405B has 126 layers, h = 16384,
#: 128 heads, V = 128256, 405e9 parameters; DeepSeek-V3 256 routed experts; the largest
#: clusters ~10^5 GPUs; an H200 holds 141e9 bytes.
LIMITS = _limits(
    Limit("layers", 10**6, "layers", "10^6",
          "~8000x the deepest published LLM (126 layers); per-layer and per-stage loops stay short"),
    Limit("hidden", 2**24, "1", "2^24",
          "1000x the widest published hidden size (16384); h^2 stays exact and far below 2^64"),
    Limit("ffn", 2**26, "1", "2^26",
          "the MLP width, ~1000x real ones (53248); 4h at the hidden limit fits"),
    Limit("heads", 2**20, "heads", "2^20",
          "8000x the most attention heads published (128); bounds the divisors of the head count"),
    Limit("head_dim", 2**20, "1", "2^20", "head dimensions are 64-256 in practice"),
    Limit("vocab", 2**31, "tokens", "2^31",
          "8000x the largest vocabulary (262144); token ids fit a signed 32-bit integer"),
    Limit("sequence", 2**31, "tokens", "2^31",
          "2000x the longest trained context (10^6); positions fit a signed 32-bit integer"),
    Limit("micro_batch", 2**40, "sequences", "2^40",
          "a trillion sequences per micro-batch; real ones are 1-64"),
    Limit("global_batch", 2**40, "sequences", "2^40",
          "a trillion sequences per step; real ones are ~10^3-10^4"),
    Limit("microbatches", 2**40, "1", "2^40", "microbatches per step, at most the global batch"),
    Limit("gpus", 2**40, "GPUs", "2^40",
          "10^7 times the largest cluster (~10^5 GPUs); every parallel degree is at most this"),
    Limit("parameters", 10**16, "parameters", "10^16",
          "~10^4 times the largest published model (~1.8e12); exact in float64 up to 2^53"),
    Limit("experts", 2**20, "experts", "2^20",
          "4000x the most routed experts published (256); bounds expert loops and divisors"),
    Limit("tokens", 10**18, "tokens", "10^18",
          "~10^4 times the largest training corpus (~1.5e13 tokens)"),
    Limit("rank", 2**24, "1", "2^24", "LoRA / MLA low ranks, at most the hidden size"),
    Limit("norms", 8, "norms", "2^3", "norms per decoder layer: 1 (GPT-J), 2, 4 (Gemma 2/3)"),
    Limit("layout", 2**22, "characters", "2^22",
          "a pipeline layout as given and unrolled: 10^6 layers with their stage marks fit; "
          "real ones are ~10^2"),
    Limit("bytes", 2**64, "bytes", "2^64",
          "16 EiB: the whole 64-bit address space; GPU memories are ~10^11 bytes"),
    Limit("config_layers", 2**8, "layers", "2^8",
          "a config.json's layers, 2x the deepest published LLM (126); search prices every "
          "distinct stage of a per-layer MoE pattern (256 layers: ~10 s on 4096 GPUs)"),
    Limit("stages", 2**12, "stages", "2^12",
          "pipeline stages p, 64x the most published (p = 64, Narayanan et al. 2021 Table 1); "
          "the step time prices every stage"),
    Limit("recompute_modules", 64, "names", "2^6",
          "names given to --recompute-modules: Megatron-Core accepts 11 distinct ones and a "
          "repeated name changes nothing"),
    Limit("iterations", 1000, "iterations", "10^3",
          "Newton-Schulz iterations of a Muon step: Megatron-LM's default is 5 "
          "(arguments.py --muon-num-ns-steps); each one costs three matrix products per matrix"),
    Limit("top", 1000, "layouts", "10^3",
          "layouts memsym search prints, each with its exact breakdown; a screen shows ~10"),
)

#: The largest integer the exact solvers of :mod:`memsym.analysis` search for an unknown:
#: 2^256, about 1.2e77.  Galloping and bisection take at most 2 x 256 exact evaluations, so the
#: bound costs microseconds; an answer above it is reported as "beyond the search bound".
SEARCH_BOUND = 2**256

#: The most candidates a divisibility rule (``valid=``) is asked about past the memory
#: boundary before a search stops "beyond the search bound" (a fraction of a second of Python
#: calls; every real rule is met within the head, layer or GPU count).
MAX_CANDIDATES = 2**20

#: The most decimal digits a number typed by a user may have (10^60 is far above every limit;
#: Python refuses int() of more than 4300 digits with a traceback-worthy ValueError).
MAX_DIGITS = 60

# ---------------------------------------------------------------------------------------------
# Config files (DeepSpeed JSON, torchtitan TOML, Hugging Face config.json): checked on the text
# BEFORE it is parsed (check_text, below), since json and tomllib recurse per
# nesting level, convert every digit of an integer (quadratic beyond 4300 digits, refused by
# Python with a ValueError) and build a tuple per dotted-key prefix (quadratic in its parts).
# ---------------------------------------------------------------------------------------------

#: The largest DeepSpeed config, torchtitan TOML, launch script or argument file read [bytes]
#: (2^20 = 1 MiB; real ones are a few KB).
MAX_INPUT_BYTES = 2**20
#: The largest Hugging Face config.json read [bytes] (2^22 = 4 MiB; real ones are 1-10 KB, the
#: largest with id2label tables ~10^5 bytes).
MAX_CONFIG_JSON_BYTES = 2**22
#: The longest part of a Hugging Face Hub model id ``org/name`` [characters], each of the two
#: parts (huggingface_hub's ``validate_repo_id`` / ``REPO_ID_REGEX``: ``[\w\-.]{1,96}`` each
#: side of the ``/``); checked before any network use (:mod:`memsym.model.hub`).
MAX_HUB_NAME_CHARS = 96
#: The longest revision after ``@`` in a Hub model id [characters]: a branch, a tag or a 40-hex
#: commit; huggingface_hub stores each as a file ``refs/<revision>`` in its cache, and 255 bytes
#: is the longest file name of common file systems (ext4, APFS, NTFS).
MAX_HUB_REVISION_CHARS = 255
#: The deepest nesting of arrays, objects, inline tables a config file may have (real ones
#: nest 2-4 deep: a DeepSpeed zero_optimization.offload_param section, a config.json's
#: rope_scaling); far below the ~1000 levels at which the parsers' recursion fails.  A
#: torchtitan Python config's parentheses count too, and so does the depth of its syntax tree
#: (real ones 12-16 levels; ast.unparse recurses per level).
MAX_NESTING = 64
#: The most parts of one dotted TOML key or table name (``[quantize.linear.float8]`` has 3);
#: tomllib's work grows with the square of the parts (5000 parts: 0.6 s, 10^5: memory exhausted).
MAX_KEY_PARTS = 64
#: The most config functions a torchtitan Python config may pass through (``config =
#: llama3_8b()`` inside another config function); real ones chain 1-2.
MAX_CONFIG_CALL_DEPTH = 8
#: The most values (separators ``,`` ``:`` ``=``) one config file may hold; real ones hold
#: ~10^2, a config.json with a per-layer list ~10^3.
MAX_ELEMENTS = 2**16
#: The longest number in a config file [characters]: a float's 17 significant digits with sign,
#: point and exponent take ~25; 10^60 is far above every limit.
MAX_NUMBER_CHARS = MAX_DIGITS

# ---------------------------------------------------------------------------------------------
# Training logs (``memsym check LOG``): checked before the text is read line by line.
# ---------------------------------------------------------------------------------------------

#: The largest training log read [bytes] (2^26 = 64 MiB): a Megatron-LM iteration line is
#: ~400-1000 bytes, so 10^5 logged iterations with their timers fit; larger logs are cut with
#: ``grep`` first (the iteration and memory lines are all ``check`` reads).
MAX_LOG_BYTES = 2**26
#: The most lines a training log may have (2^20 ~ 10^6: a week of training logged every step
#: with a few lines of timers each).
MAX_LOG_LINES = 2**20
#: The longest log line looked at [characters] (2^14): a Megatron-LM line with a dozen MoE
#: losses is ~1500; a longer line (a dumped tensor, a progress bar without newlines) is skipped.
MAX_LOG_LINE_CHARS = 2**14
#: The factors a calibration may put on the compute part of the step time (``memsym check
#: --calibrate``): 1/100 .. 100.  A real run is within a few x of memsym's GEMM-efficiency
#: model; a factor outside means the job given is not the job that ran.
CALIBRATION_RANGE = (Fraction(1, 100), Fraction(100))

# ---------------------------------------------------------------------------------------------
# Command-line numbers: a physical range each, so that no time, rate or price can be 0, inf
# or NaN (1/1e-310 overflows a float to inf and inf - inf is NaN).
# ---------------------------------------------------------------------------------------------

#: The most layouts ``memsym search --top`` shows (:data:`LIMITS` ``"top"``).
MAX_TOP = LIMITS["top"].maximum
#: An achieved fraction of peak FLOP/s, (lowest, highest): 1% is below any real training run
#: (Narayanan et al. 2021 Table 1: 44-52% of A100 peak; MFU reports 20-60%), and no GPU exceeds
#: its peak.
EFFICIENCY_RANGE = (0.01, 1.0)
#: A link bandwidth per GPU [GB/s = 1e9 bytes/s], (lowest, highest): 0.1 GB/s is 1 Gb/s
#: Ethernet; 10^5 GB/s is ~50x NVLink 5 (1800 GB/s per GPU, NVIDIA Blackwell datasheet).
BANDWIDTH_RANGE = (0.1, 1e5)
#: An achieved FLOP/s per GPU [TFLOP/s], (lowest, highest): 10^-3 TFLOP/s is below any CPU core;
#: 10^5 TFLOP/s is ~10x the B200's sparse FP4 peak (~2*10^4 TFLOP/s, NVIDIA datasheet).
TFLOPS_RANGE = (1e-3, 1e5)
#: A price per GPU-hour (any currency), (lowest, highest): from a tenth of a cent to 10^6.
PRICE_RANGE = (1e-3, 1e6)
#: The largest ``--margin`` given as a fraction of the capacity (exact 1/2): a margin above half
#: the GPU is a typo for bytes, and the fragmentation allowance already covers the allocator
#: (memsym.training.ALLOWANCES).  A margin in bytes must be below the capacity.
MAX_MARGIN_FRACTION = Fraction(1, 2)

#: Bounds of memsym's reading of a bash launch script without running it
#: (:mod:`memsym.readers.launch_script`).  Each is checked while the script is read and
#: expanded, not afterwards, so a small hostile script is refused in bounded time and memory.
#:
#: SHELL_MAX_DEPTH: the deepest nesting of ``if``/``{ }`` blocks, of ``${X:-${Y:-...}}``
#: defaults, of parentheses and variable references inside ``$((...))``, all counted as one
#: depth (real launch scripts nest 2-4 levels; Python's own stack stays far from its limit).
SHELL_MAX_DEPTH = 32
#: SHELL_MAX_WORD_CHARS: the most characters one word or variable value may expand to (4 Mi;
#: a launch script is at most 1 MiB and its longest real value is a few kilobytes).  Checked as
#: a running total while the word is built.
SHELL_MAX_WORD_CHARS = 4 << 20
#: SHELL_MAX_EXPANDED_CHARS: the most characters all the script's expansions and assignments
#: may produce together (64 Mi, ~64x the largest script read), so memory and time stay linear
#: in the script even when each word stays under SHELL_MAX_WORD_CHARS.
SHELL_MAX_EXPANDED_CHARS = 1 << 26
#: SHELL_MAX_NUMBER_DIGITS: the most digits of a number in ``$((...))``, a test's ``-eq`` or an
#: array index ``${A[i]}``; bash's integers are 64-bit (19 digits), so 20 characters cover
#: every value bash accepts and keep int() of a 5000-digit string from ever running.
SHELL_MAX_NUMBER_DIGITS = 20
#: SHELL_MAX_COMMANDS: the most commands a launch script's reading records (10^5; a 1 MiB
#: script holds at most ~2.5·10^5 one-word commands, real ones a few dozen).
SHELL_MAX_COMMANDS = 100_000

#: BRIDGE_MAX_VALUE_CHARS: the most characters of one Megatron-Bridge override's value
#: (``section.field=value``, :mod:`memsym.readers.bridge`); a recipe's longest value, a
#: pipeline layout string of DeepSeek-V3's 61 layers, is under 100 characters.
BRIDGE_MAX_VALUE_CHARS = 1000


def limit_of(name: str) -> Limit:
    """The :class:`Limit` called ``name`` (a :class:`~memsym.errors.UnknownNameError` otherwise).

    Examples
    --------
    >>> limit_of("gpus").maximum == 2**40
    True
    """
    return LIMITS[choose("limit", name, tuple(LIMITS))]


def describe(name: str) -> str:
    """One line for the docs: ``"layers <= 10^6 [layers]: <reason>"``.

    Examples
    --------
    >>> describe("gpus").split(":")[0]
    'gpus <= 2^40 [GPUs]'
    """
    lim = limit_of(name)
    return f"{lim.name} <= {lim.shown} [{lim.unit}]: {lim.reason}"


def check_limit(name: str, value, what: str | None = None):
    """``value`` unchanged if it is at most the limit ``name``; :class:`LimitError` otherwise.

    Parameters
    ----------
    name : str
        A key of :data:`LIMITS` (``"layers"``, ``"hidden"``, ``"heads"``, ``"vocab"``,
        ``"sequence"``, ``"micro_batch"``, ``"global_batch"``, ``"gpus"``, ``"parameters"``,
        ``"experts"``, ``"bytes"``, ...).
    value : int, fractions.Fraction or sympy.Rational
        The number to check (exact; a float is compared as it is).
    what : str, optional
        How the value is called where it entered (``"--num-layers"``, ``"num_hidden_layers"``);
        defaults to the limit's name.

    Raises
    ------
    LimitError
        When ``value`` is above the limit; the message names the limit, its value and why.

    Examples
    --------
    >>> check_limit("layers", 126)
    126
    >>> check_limit("layers", 10**8, "num_hidden_layers")
    Traceback (most recent call last):
    ...
    memsym.errors.LimitError: num_hidden_layers = 100000000 is above memsym's limit of 10^6 layers (layers: ~8000x the deepest published LLM (126 layers); per-layer and per-stage loops stay short)
    """
    lim = limit_of(name)
    label = what or name
    if isinstance(value, bool):
        raise InvalidValueError(f"{label} must be a number, got {value!r}")
    try:
        above = value > lim.maximum
    except TypeError:
        raise InvalidValueError(f"{label} must be a number, got {type(value).__name__}") from None
    if above is not False and bool(above):
        unit = "" if lim.unit == "1" else f" {lim.unit}"
        raise LimitError(f"{label} = {short(value)} is above memsym's limit of {lim.shown}{unit} "
                         f"({lim.name}: {lim.reason})", lim.name, lim.maximum)
    return value


#: The limit of every size field of :class:`memsym.model.Architecture`,
#: :class:`memsym.training.Layout` and :class:`memsym.training.Training` (one table, so a new
#: field without a limit is visible in review; ``tests/test_limits.py`` checks the names exist).
FIELD_LIMITS = MappingProxyType({
    # Architecture (Megatron-LM argument names)
    "num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
    "num_query_groups": "heads", "kv_channels": "head_dim", "ffn_hidden_size": "ffn",
    "vocab_size": "vocab", "make_vocab_size_divisible_by": "vocab",
    "max_position_embeddings": "sequence", "num_experts": "experts", "moe_router_topk": "experts",
    "moe_ffn_hidden_size": "ffn", "moe_shared_expert_intermediate_size": "ffn",
    "moe_latent_size": "hidden",
    "q_lora_rank": "rank", "kv_lora_rank": "rank", "qk_head_dim": "head_dim",
    "qk_pos_emb_head_dim": "head_dim", "v_head_dim": "head_dim", "mtp_num_layers": "layers",
    "norms_per_layer": "norms", "moe_layer_freq": "layers",
    "mamba_inner_size": "ffn", "mamba_state_dim": "head_dim", "mamba_num_heads": "heads",
    "mamba_num_groups": "heads", "mamba_conv_kernel": "head_dim", "mamba_dt_rank": "rank",
    "dsa_index_heads": "heads", "dsa_index_head_dim": "head_dim",
    "gdn_key_heads": "heads", "gdn_value_heads": "heads", "gdn_key_head_dim": "head_dim",
    "gdn_value_head_dim": "head_dim", "gdn_conv_kernel": "head_dim",
    "short_conv_kernel": "head_dim", "lightning_block_size": "sequence",
    "global_kv_channels": "head_dim", "global_num_query_groups": "heads",
    "per_layer_input_size": "hidden", "per_layer_input_vocab": "vocab",
    "shared_blocks": "layers", "shared_adapter_rank": "rank", "shared_adapter_sets": "layers",
    # Layout: every parallel degree is a number of GPUs
    "t": "gpus", "p": "stages", "d": "gpus", "c": "gpus", "e": "gpus", "t_e": "gpus", "v": "layers",
    "first_stage_layers": "layers", "last_stage_layers": "layers",
    # Training
    "seq_length": "sequence", "micro_batch_size": "micro_batch",
    "num_microbatches": "microbatches", "global_batch_size": "global_batch",
    "microbatch_group_size": "microbatches", "lora_rank": "rank", "recompute_num_layers": "layers",
    "wgrad_deferral_limit": "microbatches", "cpu_offloading_num_layers": "layers",
    "muon_num_ns_steps": "iterations",
})

# What the pre-scan of :func:`check_text` stops at: a quote (a string starts), a comment, a
# bracket, a separator, a newline, a dot (TOML: a key part) or a run that starts with a digit
# (a number, a date, a hex/octal/binary integer).
_SCAN = {
    "json": re.compile(r'"|[\[\]{},:]|[0-9][0-9A-Za-z_.+-]*'),
    "toml": re.compile(r'"""|\'\'\'|["\'#\n.=,\[\]{}]|[0-9][0-9A-Za-z_.+-]*'),
    # a torchtitan Python config (read with ast, never run): parentheses nest as brackets do
    "python": re.compile(r'"""|\'\'\'|["\'#\n.=,\[\]{}()]|[0-9][0-9A-Za-z_.+-]*'),
}
# The rest of a string once its opening quote is seen (linear: each step consumes; TOML's
# multi-line strings may end with up to two extra quotes, which belong to the content).
_STRING_END = {
    '"': re.compile(r'(?:[^"\\\n]|\\.)*"'),
    "'": re.compile(r"[^'\n]*'"),
    '"""': re.compile(r'(?:[^\\]|\\.)*?""""{0,2}', re.S),
    "'''": re.compile(r"(?s:.)*?''''{0,2}"),
}
# Python's single-quoted strings take backslash escapes (TOML's literal strings do not)
_PY_STRING_END = {**_STRING_END, "'": re.compile(r"(?:[^'\\\n]|\\.)*'"),
                  "'''": re.compile(r"(?:[^\\]|\\.)*?''''{0,2}", re.S)}


def check_text(text: str, what: str, syntax: str) -> None:
    """Refuse config text whose structure is beyond the limits, before any parser sees it.

    One linear pass over ``text`` that skips strings and comments and checks the limits of
    :mod:`memsym.limits`: nesting of arrays / objects / inline tables at most
    :data:`~memsym.limits.MAX_NESTING`, every number (a run starting with a digit) at most
    :data:`~memsym.limits.MAX_NUMBER_CHARS` characters, at most
    :data:`~memsym.limits.MAX_ELEMENTS` values, and (TOML) at most
    :data:`~memsym.limits.MAX_KEY_PARTS` dots in a line's keys.  ``json`` and ``tomllib``
    recurse once per level (a RecursionError at ~1000), convert integers in time quadratic in
    their digits (refused with a ValueError beyond 4300) and build dotted keys in time and
    memory quadratic in their parts: the text is refused before, in one line.

    Parameters
    ----------
    text : str
        The whole file.
    what : str
        How the file is called in the message (``"DeepSpeed config"``).
    syntax : {"json", "toml", "python"}
        Which strings and comments to skip.

    Raises
    ------
    InvalidValueError
        Naming the limit that was passed and where (line number).

    Examples
    --------
    >>> check_text('{"zero_optimization": {"stage": 3}}', "DeepSpeed config", "json")
    >>> check_text("[" * 100 + "]" * 100, "DeepSpeed config", "json")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: DeepSpeed config nests deeper than 64 levels (line 1); real configs nest 2-4 deep
    >>> check_text("seq_len = " + "9" * 5000, "torchtitan TOML", "toml")
    Traceback (most recent call last):
    ...
    memsym.errors.InvalidValueError: torchtitan TOML has a number of 5000 characters (line 1); at most 60 are read
    """
    scan = _SCAN[syntax]
    depth = elements = dots = 0
    pos, n = 0, len(text)

    def line() -> int:
        return text.count("\n", 0, pos) + 1

    while pos < n:
        m = scan.search(text, pos)
        if m is None:
            break
        tok, pos = m.group(), m.end()
        c = tok[0]
        if c in "[{(":
            depth += 1
            if depth > MAX_NESTING:
                raise InvalidValueError(f"{what} nests deeper than {MAX_NESTING} levels (line "
                                        f"{line()}); real configs nest 2-4 deep")
        elif c in "]})":
            depth -= 1
        elif c in ",:=":
            elements += 1
            if elements > MAX_ELEMENTS:
                raise InvalidValueError(f"{what} holds more than {MAX_ELEMENTS} values (line "
                                        f"{line()}); real configs hold ~10^2")
        elif c == "\n":
            dots = 0
        elif c == ".":
            dots += 1
            if dots > MAX_KEY_PARTS:
                raise InvalidValueError(f"{what} has a key of more than {MAX_KEY_PARTS} dotted "
                                        f"parts (line {line()})")
        elif c == "#":
            end = text.find("\n", pos)
            pos = n if end < 0 else end
        elif c in "\"'":
            end = (_PY_STRING_END if syntax == "python" else _STRING_END)[tok].match(text, pos)
            if end is None:     # unterminated: the parser reports it (nothing follows to scan)
                break
            pos = end.end()
        elif len(tok) > MAX_NUMBER_CHARS:
            raise InvalidValueError(f"{what} has a number of {len(tok)} characters (line "
                                    f"{line()}); at most {MAX_NUMBER_CHARS} are read")
