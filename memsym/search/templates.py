"""The compiled pieces of the search: the per-stage SymPy totals of each discrete choice, built
once and compiled once (cached per space, choice and stage make-up).
"""

from __future__ import annotations

import functools
import math
import types
from collections import Counter
from dataclasses import replace

import sympy as sp

from ..symbols import M_alloc, N_ll, m
from ..unchecked_job import UncheckedJob
from ..training.model_states import largest_layer
from ..training import (ALLOWANCE_KEYS as _ALLOW, Layout, PHASES, STATE_KEYS as _STATE_KEYS,
                        allowance_terms, outside_allocator, resolved_stage_activations,
                        phase_parts, resolved_stage_total, stage_counts)

from .choices import recompute_layers
from .space import Space
from .grid import with_split
from ..numeric import compile_expr, expression_code, function_namespace
from .. import compile_cache
from ..compile_cache import FUNC_NAME
from ..model import moe_layer_pattern, stage_layers
from ..model.hybrid_layers import layer_kind_pattern


def _unchecked(space: Space, lay: Layout, trn) -> UncheckedJob:
    # not a memsym.job.Job: the layout stands for every t > 1 (t = 2) and every v > 1 (v = 2),
    # which the rule table could refuse for this model; the search checks each row it binds
    # (memsym.search.grid).  m is the symbol each row binds, when the global batch is given;
    # the GPU and cluster only where a term reads them (HybridEP's NVLink domain; FP8's
    # weight caches on a GPU with non-TN FP8 GEMMs, memsym.terms.widths), so that every other
    # template is built as before
    reads_gpu = space.moe_dispatcher == "hybridep" or (
        space.precision == "fp8" and getattr(space.gpu, "non_tn_fp8_gemm", False))
    where = dict(gpu=space.gpu, cluster=space.cluster) if reads_gpu else {}
    return UncheckedJob(space.arch, lay, trn, m if space.global_batch_size is not None else None,
                        **where)


@functools.lru_cache(maxsize=4096)
def _compiled(expr):
    """``(function, argument names)`` of one expression, compiled once per expression.

    Without common-subexpression elimination: a cold search compiles about a hundred
    templates, and CSE costs a third of the compile time without making the evaluation
    over the grid faster."""
    return compile_expr(expr, cse=False)


def call_compiled(expr, kw: dict):
    fn, names = _compiled(expr)
    return fn(*[kw[n] for n in names])[0]


def _template_layout(space: Space, sp_on: bool, inter: bool, pp: int) -> Layout:
    # the layout a template is built at: t = 2 stands for every t > 1 (sequence parallelism
    # on), v = 2 for every v > 1 (interleaved), with the space's stage split
    return Layout(t=2 if sp_on else 1, p=pp, v=2 if inter else None, sequence_parallel=sp_on,
                  first_stage_layers=space.first_stage_layers,
                  last_stage_layers=space.last_stage_layers)


@functools.lru_cache(maxsize=4096)
def check_stages(space: Space, pp: int) -> tuple:
    """The pipeline stages whose memory can be the largest at ``p = pp``, lowest first.

    The first stage (embedding, the most micro-batches in flight) and the last (output layer,
    logits) always.  Between them, stages of the same make-up (the MoE/dense kind of each of
    their layers) hold the same parameters and the same activations per micro-batch, and the
    lower index keeps at least as many micro-batches in flight (1F1B: min(p - i, m);
    interleaved: 2(p - i - 1) + (v - 1) p + 1; GPipe: m), so the lowest index of each
    make-up stands for all of them.  An evenly split uniform model needs only first and last.
    """
    if pp == 1:
        return (0,)
    if space.uniform or pp == 2:
        return (0, pp - 1)

    pattern = moe_layer_pattern(space.arch)
    lowest = {}
    for i in range(1, pp - 1):
        rng = stage_layers(space.arch, pp, i, space.first_stage_layers, space.last_stage_layers)
        lowest.setdefault(tuple(pattern[j] for j in rng), i)
    return (0, *sorted(lowest.values()), pp - 1)


@functools.lru_cache(maxsize=4096)
def template_rep(space: Space, pp: int, stage: int) -> tuple:
    """``(p, stage)`` of the activation template that stands for stage ``stage`` of ``pp``.

    An evenly split uniform model keeps p symbolic (L/p layers, p - i micro-batches), so its
    first and last stages of every p share one template, built at the smallest p > 1; any
    other model's stages depend on their concrete layers: their own (p, stage)."""
    if not space.uniform or pp == 1:
        return pp, stage
    L_ = space.arch.num_layers
    p0 = next(q for q in range(2, L_ + 1) if L_ % q == 0)
    return p0, (0 if stage == 0 else p0 - 1)


#: Shared stage templates: (space, structure) -> (representative space, p, stage, layers).
_REPS: dict = {}


@functools.lru_cache(maxsize=65536)
def stage_template(space: Space, pp: int, f: int, l_: int, stage: int) -> tuple:
    """``((space, p, stage) of the template, factor)`` for stage ``stage`` of ``pp`` at first/
    last stage sizes ``f``, ``l_`` (0: none): the factor multiplies the template's decoder-
    layer activations.

    An evenly split uniform model keeps p symbolic (:func:`template_rep`, factor 1).  Any
    other stage's total depends on its layers only through (a) its role (first: embedding and
    the most micro-batches in flight; last: the output layer; a middle stage: its index,
    p - i in flight, p symbolic), (b) whether it holds dense and/or MoE layers (which
    states, which per-layer activations) and (c) ``layer_activations`` = in-flight x (dense
    layers x per-dense-layer + MoE layers x per-MoE-layer) / v
    (:func:`memsym.training.stage_activations`).  A stage of one layer kind is therefore
    the template of the first stage of the same structure met, its layer term scaled by
    n / n0 (exact); a stage mixing both kinds keeps its own counts in the key (factor 1).
    """
    sub = with_split(space, f, l_)
    if sub.uniform or pp == 1:
        return (sub, *template_rep(sub, pp, stage)), 1.0
    pattern = moe_layer_pattern(space.arch)
    kinds = [pattern[i] for i in stage_layers(space.arch, pp, stage, sub.first_stage_layers,
                                              sub.last_stage_layers)]
    n_moe = sum(kinds)
    n_dense = len(kinds) - n_moe
    mixed = (n_dense, n_moe) if n_dense and n_moe else None
    middle = None if stage in (0, pp - 1) else stage
    methods = {got[0] for got in map(recompute_layers, space.recompute) if got}
    graphs = space.training().memory.cuda_graph_impl != "none"
    if ("block" in methods and len(set(pattern)) > 1) or "every" in methods or graphs:
        # block N recomputes min(N, layers/v) of a chunk, every-N floor(n/N) of a rank's n:
        # not proportional to the stage's layers, so each layer count keeps its own template
        # (a model of one layer kind offers block-N on even splits only, where p stays
        # symbolic: evaluate.py); nor are the CUDA graphs' buffers, which the template keeps
        # with the states (the static inputs per graphed layer in flight, the full
        # iteration's pool over the activations), outside the scaled layer term
        mixed = (n_dense, n_moe)
    key = (space, stage == 0, stage == pp - 1, middle, n_dense > 0, n_moe > 0, mixed)
    if key not in _REPS:
        if len(_REPS) > 65536:
            _REPS.clear()
        _REPS[key] = ((sub, pp, stage), len(kinds))
    rep, n0 = _REPS[key]
    return rep, (1.0 if mixed or not n0 else len(kinds) / n0)


@functools.lru_cache(maxsize=4096)
def choice_template(space: Space, rc: str, sp_on: bool, inter: bool, off: str, scheme: str, pp: int,
              stage: int):
    """The per-GPU total of stage ``stage`` of ``pp`` under one discrete choice: the Total of
    :func:`memsym.training.stage_total` itself (the one composition), symbolic in the knobs
    and in the stage's parameter counts, which the search binds per row.

    t enters the stage's structure only through "t > 1 turns sequence parallelism on"
    (``sp_on``) and v only through "interleaved or not" (``inter``), so one template serves
    every t and v.  Returns (states and activation Terms, their activation sum, the
    allowance Terms over a placeholder for the allocated bytes, the decoder layers'
    activation term ``layer_activations`` alone; the activation sum excludes it)."""
    lay = _template_layout(space, sp_on, inter, pp)
    tot = resolved_stage_total(
        _unchecked(space, lay, space.training(recompute=rc, sharding=scheme, offload=off,
                                              **space.comm_fields(sp_on))), stage)
    allow = set(_ALLOW)
    kept = tuple(term for term in tot if term.key not in allow)
    states = tuple(term for term in kept if term.key in _STATE_KEYS or term.key.startswith("expert_"))
    acts = sp.Add(*(term.expr for term in kept if term not in states
                    and term.key != "layer_activations"))
    layer = sp.Add(*(term.expr for term in kept if term.key == "layer_activations"))
    return tot, states, acts, allowance_terms(_ALLOCATED), layer


@functools.lru_cache(maxsize=4096)
def _act_total(space: Space, rc: str, sp_on: bool, inter: bool, off: str, pp: int,
               stage: int):
    """:func:`memsym.training.resolved_stage_activations` of one stage, the activations
    :func:`choice_template`'s total holds; they do not depend on the sharding scheme, so one
    serves every scheme (the phase transients of :func:`fast_template` read them too)."""
    lay = _template_layout(space, sp_on, inter, pp)
    return resolved_stage_activations(
        _unchecked(space, lay, space.training(recompute=rc, offload=off)), stage)


@functools.lru_cache(maxsize=4096)
def _act_template(space: Space, rc: str, sp_on: bool, inter: bool, off: str, pp: int,
                  stage: int) -> tuple:
    """(activation sum without the decoder layers, the decoder layers' term) of one stage
    (:func:`_act_total`)."""
    act = _act_total(space, rc, sp_on, inter, off, pp, stage)
    rest = sp.Add(*(term.expr for term in act if term.key != "layer_activations"))
    layer = sp.Add(*(term.expr for term in act if term.key == "layer_activations"))
    return rest, layer


@functools.lru_cache(maxsize=4096)
def fast_template(space: Space, rc: str, sp_on: bool, inter: bool, off: str, scheme: str,
                   pp: int, stage: int) -> tuple:
    """:func:`choice_template`'s pieces (None, states, activations without the decoder layers,
    allowances, decoder layers) built from the two halves :func:`memsym.training.resolved_stage_total`
    adds (``phase_parts`` and ``resolved_stage_activations``), the activations shared across
    sharding schemes (tests check the sum against the exact per-layout total); the states
    end with the buffers outside PyTorch's allocator
    (:func:`memsym.training.outside_allocator`, keys of ``OUTSIDE_ALLOCATOR_KEYS``)."""
    lay = _template_layout(space, sp_on, inter, pp)
    trn = space.training(recompute=rc, sharding=scheme, offload=off, **space.comm_fields(sp_on))
    job = _unchecked(space, lay, trn)
    # phase_parts: the model states with the framework's buffers kept in every phase (the
    # CUDA graphs' static inputs, a captured optimizer step's pool), as resolved_stage_total
    steady, _, trans = phase_parts(job, stage, _act_total(space, rc, sp_on, inter, off, pp, stage))
    # the buffers outside PyTorch's allocator (a carried MoE dispatcher's DeepEP / HybridEP
    # buffers) ride with the states under their own keys; the evaluation adds them after the
    # allowances, as memsym.training.resolved_stage_total does (no fragmentation on them)
    states = tuple(steady) + outside_allocator(job, stage)
    rest, layer = _act_template(space, rc, sp_on, inter, off, pp, stage)
    # the phase transients depend on the scheme (FSDP2 / ZeRO buffers): per template; the
    # peak phase max(T_fwd, T_loss, T_bwd, T_opt - A) is taken per row with the row's
    # activations A
    # (memsym.training.totals._phase_term states the same formula)
    phases = tuple(sp.Add(*(term.expr for term in trans[ph])) for ph in PHASES)
    return None, states, rest, allowance_terms(_ALLOCATED), layer, phases


@functools.lru_cache(maxsize=65536)
def _code(expr):
    # one expression's code, printed once however many stage functions hold it
    return expression_code(expr)


class StageTable:
    """The compiled pieces of every stage template of one search space, one file on disk.

    A template (:func:`fast_template`: activations without the decoder layers, the decoder
    layers, the phase transients, the states) is a list of expressions; each distinct
    expression is printed once as :func:`call_compiled` compiles it alone (no common
    subexpressions: its values are the same to the last bit) into a function of its own,
    and each template is a list of indices into them.  The table is kept in the compile
    cache (:mod:`memsym.compile_cache`) under a key of its inputs
    (:func:`memsym.compile_cache.input_key`: the space's ``repr`` with no stage split, and
    the package's files), so that a search in a new process builds no SymPy template it met
    before; a space whose ``repr`` names an object's address or elides part of an array is
    not kept.
    """

    def __init__(self, root: Space):
        text = repr(root)
        # a repr that does not say everything (an object's address, numpy's "..." in a long
        # array) is no key: such a space is compiled in each process
        lossy = " at 0x" in text or "..." in text
        self.digest = None if lossy else compile_cache.input_key("search stages 6", text)
        self.codes, self.names, self.funcs, self.entries, self.counts = [], [], [], {}, {}
        self.index: dict = {}
        self.dirty = False
        # the functions' byte code kept beside the file (compile_cache.store_companion), else
        # the file's source compiled (a tenth of a second or more: then kept beside it)
        table = _companion_table(self.digest)
        compiled = table is None
        if compiled:
            loaded = None if self.digest is None else compile_cache.load(self.digest,
                                                                          function_namespace())
            try:
                table = tuple(loaded()) if loaded is not None else ((),) * 5
                funcs, codes, names, entries, counts = table
            except (TypeError, ValueError):   # another layout of the file: rebuilt
                table = ((),) * 5
        funcs, codes, names, entries, counts = table
        if len(funcs) == len(codes) == len(names) and isinstance(entries, dict) \
                and isinstance(counts, dict):
            self.funcs, self.codes, self.names = list(funcs), list(codes), list(names)
            self.entries, self.counts = dict(entries), dict(counts)
            self.index = {code: i for i, code in enumerate(self.codes)}
            if compiled and self.funcs:
                self._keep_companion()

    def add(self, key: str, exprs: tuple, state_keys: tuple, phases: int) -> tuple:
        """The entry of a template just built: its pieces' function indices."""
        ids = []
        for expr in exprs:
            code = _code(expr)
            if code not in self.index:
                fn, names = _compiled(expr)   # the code above, as call_compiled runs it
                self.funcs.append(fn)
                self.index[code] = len(self.codes)
                self.codes.append(code)
                self.names.append(names)
            ids.append(self.index[code])
        self.entries[key] = (tuple(ids), state_keys, phases)
        self.dirty = True
        return self.entries[key]

    def source(self) -> str:
        """The module kept on disk: one function per expression, the table returned by
        ``_lambdifygenerated()``."""
        lines = []
        for i, (code, names) in enumerate(zip(self.codes, self.names)):
            lines += [f"def _f{i}({', '.join(names)}):", f"    return [{code}]"]
        lines += [f"def {FUNC_NAME}():",
                  f"    return (({''.join(f'_f{i}, ' for i in range(len(self.codes)))}), "
                  f"{tuple(self.codes)!r}, {tuple(self.names)!r}, {self.entries!r}, "
                  f"{self.counts!r})"]
        return "\n".join(lines) + "\n"

    def save(self) -> None:
        if self.dirty and self.digest is not None and compile_cache.cache_dir() is not None:
            try:
                if compile_cache.store(self.digest, self.source()):
                    self._keep_companion()
            except (OSError, TypeError, ValueError):   # nothing kept: the functions still work
                pass
        self.dirty = False

    def _keep_companion(self) -> None:
        # the table as the file's _lambdifygenerated() returns it, its functions as byte code
        # (the functions of the file's source, or compiled from the same code in this process)
        try:
            value = (tuple(fn.__code__ for fn in self.funcs), tuple(self.codes),
                     tuple(self.names), dict(self.entries), dict(self.counts))
        except AttributeError:
            return
        compile_cache.store_companion(self.digest, value)


def _companion_table(digest):
    """The table kept beside the file of key ``digest`` (:meth:`StageTable._keep_companion`)
    with its functions made from their byte code in the generated code's namespace, or None."""
    value = None if digest is None else compile_cache.load_companion(digest)
    try:
        codes, *rest = value
        namespace = function_namespace()
        funcs = tuple(types.FunctionType(code, namespace, f"_f{i}") for i, code in enumerate(codes))
    except (TypeError, ValueError):
        return None
    return (funcs, *rest) if len(rest) == 4 else None


#: Stage tables by root space (the search's space without a stage split).
_TABLES: dict = {}


@functools.lru_cache(maxsize=4096)
def _root(space: Space) -> Space:
    return replace(space, first_stage_layers=None, last_stage_layers=None)


def stage_table(space: Space) -> StageTable:
    """The :class:`StageTable` of ``space`` (with any first/last stage split removed)."""
    root = _root(space)
    if root not in _TABLES:
        if len(_TABLES) > 64:
            _TABLES.clear()
        _TABLES[root] = StageTable(root)
    return _TABLES[root]


def save_stage_tables() -> None:
    """Write the stage tables that gained templates to the compile cache."""
    for table in _TABLES.values():
        table.save()


@functools.lru_cache(maxsize=4096)
def stage_function(space: Space, rc: str, sp_on: bool, inter: bool, off: str, scheme: str,
                   pp: int, stage: int):
    """:func:`fast_template`'s pieces (activations without the decoder layers, the decoder
    layers, the phase transients, the states) as compiled functions, from the space's
    :class:`StageTable` (built and added there the first time): ``call_stage(fn, kw)``
    returns their values as :func:`call_compiled` returns each."""
    table = stage_table(space)
    key = repr((space.first_stage_layers, space.last_stage_layers, rc, sp_on, inter, off,
                scheme, pp, stage))
    entry = table.entries.get(key)
    if entry is None:
        _, states, rest, _, layer, phases = fast_template(space, rc, sp_on, inter, off, scheme,
                                                          pp, stage)
        exprs = (rest, layer, *phases, *(term.expr for term in states))
        keys = tuple(term.key for term in states)
        if any(_code(e) is None for e in exprs):
            # a name lambdify must rename: each piece compiled on its own (compile_expr)
            return _Pieces(tuple(functools.partial(call_compiled, e) for e in exprs), keys,
                           len(phases))
        entry = table.add(key, exprs, keys, len(phases))
    ids, keys, phases = entry
    return _Pieces(tuple(_bound(table.funcs[i], table.names[i]) for i in ids), keys, phases,
                   tuple(i for i in ids), table)


@functools.lru_cache(maxsize=64)
def allowance_function(space: Space):
    """:func:`allowance_template`'s Terms as compiled functions of the keyword values (the
    allocated bytes ``M_alloc`` and the allowances), kept in the space's :class:`StageTable`
    as the stage templates are, so that a search in a new process prints and compiles
    nothing it met before: ``call_stage``-style ``[call(kw) for call in fn.calls]`` returns
    each Term's value as :func:`call_compiled` does."""
    table = stage_table(space)
    terms = allowance_template()
    keys = tuple(term.key for term in terms)
    entry = table.entries.get("allowances")
    if entry is None or entry[1] != keys:
        exprs = tuple(term.expr for term in terms)
        if any(_code(e) is None for e in exprs):
            return _Pieces(tuple(functools.partial(call_compiled, e) for e in exprs), keys, 0)
        entry = table.add("allowances", exprs, keys, 0)
    ids, keys, _ = entry
    return _Pieces(tuple(_bound(table.funcs[i], table.names[i]) for i in ids), keys, 0)


def _bound(fn, names):
    return lambda kw: fn(*[kw[n] for n in names])[0]


class _Pieces:
    """A stage's compiled pieces: functions of the keyword values, the state keys, the
    number of phase transients, and (where they come from a :class:`StageTable`) each
    piece's index in ``table``, the same for the same code in every template."""

    def __init__(self, calls, state_keys, phases, ids=None, table=None):
        self.calls, self.state_keys, self.phases = calls, state_keys, phases
        self.ids, self.table = ids, table


def call_stage(fn: _Pieces, kw: dict, memo: dict | None = None) -> tuple:
    """``(activations without the decoder layers, decoder layers, [phase transients],
    {state key: bytes})`` of a :func:`stage_function` at keyword values ``kw``.

    ``memo``: the values of pieces already computed at these very keyword values, by the
    piece's function (templates of choices that differ in recompute alone share their model
    states and most transients): each piece is computed once, the same value to the bit."""
    if memo is None or fn.ids is None:
        vals = [call(kw) for call in fn.calls]
    else:
        vals = []
        for i, call in zip(fn.ids, fn.calls):
            key = (fn.table, i)
            if key not in memo:
                memo[key] = call(kw)
            vals.append(memo[key])
    k = 2 + fn.phases
    return vals[0], vals[1], vals[2:k], dict(zip(fn.state_keys, vals[k:]))


#: The allocated bytes in the compiled allowance terms (the fragmentation allowance is a
#: fraction of them): the registry's M_alloc.
_ALLOCATED = M_alloc


@functools.lru_cache(maxsize=1)
def allowance_template() -> tuple:
    """The allowance Terms over the allocated bytes (the registry's ``M_alloc``), the same
    for every stage (:func:`memsym.training.allowance_terms`)."""
    return tuple(allowance_terms(_ALLOCATED))


@functools.lru_cache(maxsize=65536)
def stage_count_floats(space: Space, tt: int, pp: int, ee: int, stage: int,
                       te: int | None = None) -> tuple:
    """:func:`stage_count_items` as floats (what the vectorized evaluation binds), kept in
    the space's :class:`StageTable`: a search in a new process computes no parameter count
    it met before."""
    table = stage_table(space)
    te = tt if te is None else te
    # t_e in the key only where it is not t (the keys saved before it was searched stand)
    key = repr((space.first_stage_layers, space.last_stage_layers, tt, pp, ee, stage)
               + ((te,) if te != tt else ()))
    got = table.counts.get(key)
    if got is None:
        got = tuple((name, _as_float(v)) for name, v in stage_count_items(space, tt, pp, ee,
                                                                           stage, te))
        if all(math.isfinite(v) for _, v in got):   # repr(inf) would not read back
            table.counts[key] = got
            table.dirty = True
    return got


#: Floats of exact counts: a search's stages share most of their counts (a SymPy number's
#: float costs ten dict look-ups).
_FLOATS: dict = {}


def _as_float(value) -> float:
    got = _FLOATS.get(value)
    if got is None:
        if len(_FLOATS) > 65536:
            _FLOATS.clear()
        got = _FLOATS[value] = float(value)
    return got


@functools.lru_cache(maxsize=65536)
def _make_up(space: Space, pp: int, stage: int) -> tuple:
    # (layers, their kinds counted, the held BF16 first/last layers) of stage ``stage`` of
    # ``pp``: the same for every t, e and t_e stage_count_items is asked at
    rng = stage_layers(space.arch, pp, stage, space.first_stage_layers, space.last_stage_layers)
    pattern = layer_kind_pattern(space.arch)
    kinds = frozenset(Counter(pattern[i] for i in rng).items())
    # the BF16 first/last layers (a held bf16_layers under fp8/fp4) leave N_lin by their
    # indices: the pair and the stage's layers in the key then
    bf16 = dict(space.held).get("bf16_layers", (0, 0)) \
        if space.precision in ("fp8", "fp4") else (0, 0)
    return rng, kinds, bf16


#: Stage counts by what they depend on (see :func:`stage_count_items`).
_COUNTS: dict = {}


@functools.lru_cache(maxsize=65536)
def stage_count_items(space: Space, tt: int, pp: int, ee: int, stage: int,
                      te: int | None = None) -> tuple:
    """``((symbol name, value), ...)``: the stage's parameter counts
    (:func:`memsym.training.stage_counts`) at one (t, p, e, t_e) (t_e None: t).

    Full training's counts (N_tp, N_rep, N_exp of all the ranks together, N_lin per TP rank)
    depend on the layout only through t (vocabulary padding, N_lin/t), how many of the
    stage's layers are of each kind (:func:`memsym.model.stages.stage_parameters` sums the
    layers' counts by kind), whether it is first / last, and p > 1 (the tied output copy):
    computed once per such key and shared across p, the stage split, e and t_e; of them only
    the largest layer on one GPU, N_ll, reads e and t_e
    (:func:`memsym.training.model_states.largest_layer`), priced per (e, t_e).  LoRA's
    per-GPU counts depend on e and t_e throughout: both in the key."""
    rng, kinds, bf16 = _make_up(space, pp, stage)
    full = space.finetune == "full"
    # the optimizer decides which counts exist (Muon's N_sc beside Adam's): in the key
    # the precision and the framework too: N_lin holds the MTP layers' linears under fp8
    # only, and a Megatron LoRA job (fused adapters) has an N_lin under fp8 and fp4 only
    key = (space.arch, space.optimizer, space.finetune, space.precision, space.framework,
           space.lora_rank, space.lora_targets, tt,
           kinds, stage == 0, stage == pp - 1, pp > 1,
           # LoRA's counts per GPU: the experts' split (e, t_e) in the key
           None if full else (ee, te if space.arch.num_experts and te is not None else None),
           tuple(bf16), tuple(rng) if any(bf16) else None)
    if key not in _COUNTS:
        if len(_COUNTS) > 65536:
            _COUNTS.clear()
        lay = Layout(t=tt, p=pp, e=ee, t_e=te if space.arch.num_experts else None,
                     first_stage_layers=space.first_stage_layers,
                     last_stage_layers=space.last_stage_layers)
        # a symbol's name, not str(): printing each one costs more than the counts
        _COUNTS[key] = tuple((k.name, v) for k, v in
                             stage_counts(_unchecked(space, lay, space.training()), stage).items())
    got = _COUNTS[key]
    if not full or not space.arch.num_experts:   # without experts N_ll reads neither e nor t_e
        return got
    largest = largest_layer(space.arch, rng, tt, ee, tt if te is None else te)
    return tuple((name, largest if name == N_ll.name else v) for name, v in got)
