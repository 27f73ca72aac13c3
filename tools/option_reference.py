"""Write ``docs/options.md`` from memsym's table of options (:mod:`memsym.cli.option_table`).

``python -m tools.option_reference`` rewrites the page; ``--check`` exits 1 when it is stale
(tests/test_option_table.py checks the same).
"""

from __future__ import annotations

import pathlib
import sys

PAGE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "options.md"


def main(argv=None) -> int:
    from memsym.cli.option_table import reference_markdown

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
