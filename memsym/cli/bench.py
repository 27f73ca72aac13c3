"""``memsym bench``: the performance figures as ratios measured in the same run."""

from __future__ import annotations


def add_parser(sub) -> None:
    parser = sub.add_parser("bench", help="benchmark (ratios measured side by side)",
                            description="Benchmark memsym: compiled sweeps vs hand-written numpy, "
                            "per-configuration Python and subs().evalf(); search; start-up; solve. "
                            "Each figure is printed with its target.")
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds): proves it runs")
    parser.add_argument("--suite", action="store_true", help="also time the full test suite (P5)")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the results as JSON to FILE")
    parser.set_defaults(run=run)


def run(args) -> int:
    from .. import bench

    results = bench.run(quick=args.quick, suite=args.suite)
    text = bench.to_json(results)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    print(bench.report(results))
    return 0
