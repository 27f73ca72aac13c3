"""``memsym bench``: the performance figures as ratios measured in the same run."""

from __future__ import annotations

from .option_table import add_command


def add_parser(sub) -> None:
    add_command(sub, run, "bench", help="benchmark (ratios measured side by side)",
                description="Benchmark memsym: compiled sweeps vs hand-written numpy, "
                "per-configuration Python and subs().evalf(); search; start-up; solve. "
                "Each figure is printed with its target.")


def run(args) -> int:
    from .. import bench

    results = bench.run(quick=args.quick, suite=args.suite)
    text = bench.to_json(results)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(bench.report(results))
    return 0
