"""The order in which the README's command hands the suite's files to its workers (issue 29).

``tests/conftest.py`` sorts each pytest-xdist worker's items with :func:`longest_first`; under
``--dist loadfile`` the controller then hands the files out in that order, each whole to the
next worker that is free.
"""

from __future__ import annotations

import collections

#: The files and notebooks that take longest, longest first (issue 29: per-file totals,
#: ``--durations=0`` summed by file, of two runs of the README's command on the shared 2-core
#: machine, averaged).  Under ``--dist loadfile`` each runs whole on one worker; started
#: first, the short files fill in around them and the run ends with the shortest, both
#: workers busy to the end (longest processing time first).  pytest-xdist's own order (most
#: tests first) started the few-test files last: ``docs/howto-search.md``, one doctest of
#: 20 s, ran alone at the end while the other worker had nothing left.  Only the order
#: depends on this list; a file missing from it runs after these, in pytest-xdist's order.
#: Reordered 2026-12-07 by one idle run's per-file totals on that session's machine (the files
#: of 6 s or more by their time, test_chunked_loss 123 s first; the earlier list's other files
#: after them in their order).  Reordered again the same day after issue 29's cuts, by each
#: heavy file's own run on that machine (``python -m pytest FILE``, its imports included):
#: test_search 61 s, test_one_reading 60, test_chunked_loss 53 (from 147 in the same
#: conditions), test_peft_activations 48, test_autocast_16bit 45, test_fake_tracker_dense 44,
#: test_engine_fsdp2 38, test_emit 33, test_search_job 32, test_production_runs_fit 24,
#: test_peft_output_layer 23, test_chunked_loss_deepspeed 20; the rest in the earlier order.
LONGEST_FIRST = (
    "tests/test_search.py", "tests/test_one_reading.py", "tests/test_chunked_loss.py",
    "tests/test_peft_activations.py", "tests/test_autocast_16bit.py",
    "tests/test_fake_tracker_dense.py", "tests/test_engine_fsdp2.py", "tests/test_emit.py",
    "tests/test_search_job.py", "tests/test_production_runs_fit.py",
    "tests/test_peft_output_layer.py", "tests/test_chunked_loss_deepspeed.py",
    "tests/test_engine_accelerate_fsdp.py",
    "tests/test_hf_type_tables.py", "tests/test_bounds.py", "tests/test_bench.py",
    "tests/test_fake_tracker_moe.py", "tests/test_engine_ddp.py", "tests/test_hf_trainer_fsdp.py",
    "tests/test_timing.py",
    "notebooks/07_measure_activations.ipynb", "tests/test_emit_roundtrip.py",
    "tests/test_engine_compile.py", "tests/test_muon_search.py", "tests/test_plotting.py",
    "tests/test_properties.py", "tests/test_gemma4_moe.py", "tests/test_min_gpus_brute.py",
    "tests/test_fake_tracker_gaps.py", "tests/test_document.py", "docs/howto-search.md",
    "notebooks/03_sizing_seed004.ipynb", "tests/test_wheel.py", "tests/test_training.py",
    "tests/test_autocast_gpt2.py", "tests/test_time_validation.py", "tests/test_autocast.py",
    "tests/test_context_parallel.py", "tests/test_fuzz.py", "tests/test_rational.py",
    "notebooks/04_memory_tuning_seed001.ipynb", "tests/test_bridge_recipes.py",
    "tests/test_shell_reader.py", "tests/test_emit_held.py", "tests/test_clamped_glu.py",
    "tests/test_reliability.py", "tools/measured.py",
)


def longest_first(nodeids: list[str]) -> list[int]:
    """The positions of ``nodeids`` in the order they run: the files of :data:`LONGEST_FIRST`
    first, in its order, then the other files by their number of tests, most first (as
    pytest-xdist's ``loadscope-reorder`` orders them), ties in collection order; each file's
    tests in their own order.

    >>> longest_first(["a.py::x", "README.md::README.md", "a.py::y",
    ...                "docs/howto-search.md::howto-search.md"])
    [3, 0, 2, 1]
    """
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    files = [nodeid.split("::", 1)[0] for nodeid in nodeids]
    count, first = collections.Counter(files), {}
    for i, name in enumerate(files):
        first.setdefault(name, i)
    return sorted(range(len(nodeids)), key=lambda i: (rank.get(files[i], len(rank)),
                                                      -count[files[i]], first[files[i]], i))
