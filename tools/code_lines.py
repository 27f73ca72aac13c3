"""Count the code lines of the package: lines that hold code, not blank lines, comments or
docstrings (issue 29 measures the package's size this way; its target is under 25,000).

Run from a checkout's root: ``python tools/code_lines.py`` prints one row a module, largest
first, and the total; ``--total`` prints the total only.
"""

from __future__ import annotations

import argparse
import ast
import io
import pathlib
import sys
import tokenize

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers that docstrings (module, class and function) cover."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """How many lines of ``source`` hold a token other than a comment, a newline or a docstring."""
    skip = _docstring_lines(ast.parse(source))
    ignored = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
               tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in ignored:
            lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in skip)
    return len(lines)


def sizes(package: pathlib.Path) -> dict[str, int]:
    """The code lines of each module under ``package``, by path relative to its parent."""
    return {p.relative_to(package.parent).as_posix(): code_lines(p.read_text(encoding="utf-8"))
            for p in sorted(package.rglob("*.py"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="the checkout")
    parser.add_argument("--total", action="store_true", help="print the total only")
    args = parser.parse_args(argv)
    counts = sizes(args.root / "memsym")
    if not args.total:
        for module, count in sorted(counts.items(), key=lambda item: -item[1]):
            print(f"{count:6d}  {module}")
    print(f"{sum(counts.values()):6d}  total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
