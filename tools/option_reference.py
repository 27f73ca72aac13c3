"""Write ``docs/options.md`` from memsym's table of options (:mod:`memsym.cli.option_table`).

``python -m tools.option_reference`` rewrites the page; ``--check`` exits 1 when it is stale
(tests/test_option_table.py checks the same).
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: describe this checkout's memsym
    sys.path.insert(0, str(ROOT))

from memsym.cli.option_table import (GROUPS, JOB_COMMANDS, OPTIONS, SEARCH,  # noqa: E402
                                     SEARCH_COMMANDS, shown)

PAGE = ROOT / "docs" / "options.md"


def reference_markdown() -> str:
    """``docs/options.md``: every option of every subcommand, generated from :data:`OPTIONS`."""
    lines = ["# Options reference", "",
             "Generated from `memsym/cli/option_rows.py` (`python -m tools.option_reference`);",
             "`tests/test_option_table.py` fails when this page is stale. Every option is one row",
             "of that table: its names, the job option it sets, its default and where the",
             "default comes from, what it changes, and the subcommands that take it. A pasted",
             "Megatron-LM launch command may also carry any argument of Megatron-LM's own table",
             "(`memsym/readers/_megatron_flags.py`), read with Megatron's meaning",
             "(docs/howto-paste-launch-command.md).", ""]
    for key, title in GROUPS.items():
        members = [o for o in OPTIONS if o.group == key]
        if not members:
            continue
        lines += [f"## {title[0].upper() + title[1:]}", "",
                  "| option | sets | default | changes | commands | meaning |",
                  "|---|---|---|---|---|---|"]
        for o in members:
            names = ", ".join(f"`{n}`" for n in o.names) if not o.positional \
                else f"`{o.metavar or o.dest.upper()}`"
            dflt = "" if o.default is None else f"{shown(o.default)}"
            if o.source:
                dflt = f"{dflt} ({o.source})" if dflt else o.source
            cmds = " ".join(c + ("[list]" if c in SEARCH and o.search == "list" else "")
                            for c in _ordered(o.commands))
            cells = [names, f"`{o.field}`" if o.field else "", dflt, o.effect, cmds, o.help]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _ordered(commands) -> list:
    order = list(JOB_COMMANDS) + list(SEARCH_COMMANDS) + ["time", "bench", "models", "gpus"]
    return sorted(commands, key=lambda c: order.index(c) if c in order else len(order))


def main(argv=None) -> int:
    text = reference_markdown() + "\n"
    if "--check" in (argv if argv is not None else sys.argv[1:]):
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print(f"{PAGE} is stale: run python -m tools.option_reference", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
