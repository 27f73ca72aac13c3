r"""The width of typeset math, estimated from its LaTeX (10 pt Computer Modern, display
style), and sums broken over lines to fit a width.

The printer (:mod:`memsym.printing`) and the whole-job document (:mod:`memsym.document`) break
long sums with :func:`break_sum`; the tests compile the result with pdflatex and check that
nothing is overfull.
"""

from __future__ import annotations

import re

__all__ = ["BUDGET", "FILL", "tex_width", "break_sum"]

#: Width [pt] the right-hand side of one align line may take (the narrower paper, less the
#: left-hand column and a safety margin for the width estimate).
BUDGET = 330.0


#: The fraction of the text width a line's right-hand side may take (the left-hand column,
#: ``M_{GPU}^{(i)} &=``, and the estimate's error take the rest).
FILL = 0.72


_SPACES = {r"\,": 1.7, r"\;": 2.8, r"\:": 2.2, r"\!": -1.7, r"\quad": 10.0, r"\qquad": 20.0,
           "\\ ": 3.3}


_OPS = {"+": 12.2, "-": 12.2, "=": 13.3, "<": 13.3, ">": 13.3, ",": 4.5, "(": 3.9, ")": 3.9,
        "[": 2.8, "]": 2.8, "|": 2.8, ".": 2.8, ";": 2.8, ":": 2.8, "/": 5.0, "!": 2.8}


_CMDS = {r"\geq": 13.3, r"\leq": 13.3, r"\cdot": 7.8, r"\times": 12.2, r"\Rightarrow": 15.5,
         r"\approx": 13.3, r"\min": 15.0, r"\max": 17.0, r"\log": 13.0, r"\left": 0.0,
         r"\right": 0.0, r"\varphi": 6.0, r"\lceil": 4.5, r"\rceil": 4.5, r"\lfloor": 4.5,
         r"\rfloor": 4.5, r"\ldots": 13.0, r"\dots": 13.0, r"\%": 8.3, r"\&": 7.8}


def _group(s: str, i: int) -> tuple[str, int]:
    """The brace group (or single token) starting at s[i]; returns (content, next index)."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return "", i
    if s[i] == "{":
        depth, j = 0, i
        for j in range(i, len(s)):
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
                if depth == 0:
                    break
        return s[i + 1:j], j + 1
    if s[i] == "\\":
        m_ = re.match(r"\\[A-Za-z]+|\\.", s[i:])
        return m_.group(0), i + len(m_.group(0))
    return s[i], i + 1


def tex_width(tex: str, scale: float = 1.0) -> float:
    r"""Estimated typeset width [pt] of a line of display math (10 pt Computer Modern).

    An estimate (glyph widths averaged, fractions as their wider part, sub- and superscripts
    at 70 %) used to break sums over lines; the tests compile the result with pdflatex and
    check that nothing is overfull.

    Examples
    --------
    >>> round(tex_width(r"\frac{N}{p t}"))
    13
    >>> tex_width("a + b") > tex_width("ab")
    True
    """
    s, i, w = tex, 0, 0.0
    while i < len(s):
        ch = s[i]
        if ch == "\\":
            m_ = re.match(r"\\[A-Za-z]+|\\.", s[i:])
            cmd = m_.group(0)
            i += len(cmd)
            if cmd in ("\\frac", "\\dfrac", "\\tfrac"):
                num, i = _group(s, i)
                den, i = _group(s, i)
                w += max(tex_width(num, scale), tex_width(den, scale)) + 2 * scale
            elif cmd in ("\\mathrm", "\\text", "\\operatorname", "\\mathit", "\\mathbf",
                         "\\textrm", "\\mathsf", "\\hat", "\\bar", "\\tilde"):
                arg, i = _group(s, i)
                w += tex_width(arg, scale) * (0.95 if cmd in ("\\text", "\\textrm") else 1.0)
            elif cmd == "\\underbrace":
                body, i = _group(s, i)
                j = i
                while j < len(s) and s[j] == " ":
                    j += 1
                under = ""
                if j < len(s) and s[j] == "_":
                    under, i = _group(s, j + 1)
                w += max(tex_width(body, scale), tex_width(under, 0.7 * scale))
            elif cmd in ("\\left", "\\right", "\\bigl", "\\bigr", "\\Bigl", "\\Bigr"):
                delim, i = _group(s, i)
                w += 0.0 if delim == "." else 4.5 * scale
            elif cmd in _SPACES:
                w += _SPACES[cmd] * scale
            elif cmd == "\\\\":
                pass
            else:
                w += _CMDS.get(cmd, 6.0) * scale
        elif ch in "_^":
            arg, i = _group(s, i + 1)
            w += tex_width(arg, 0.7 * scale)
        elif ch == "{":
            arg, i = _group(s, i)
            w += tex_width(arg, scale)
        elif ch in " &}":
            i += 1
        else:
            i += 1
            if ch in _OPS:
                w += _OPS[ch] * scale
            elif ch.isdigit():
                w += 5.0 * scale
            elif ch.isupper():
                w += 7.5 * scale
            else:
                w += 5.3 * scale
    return w


def break_sum(parts: list[str], budget: float = BUDGET) -> list[str]:
    r"""Pack signed addends (``["a", "+ b", ...]``) greedily into lines no wider than
    ``budget`` [pt]; continuation lines start with ``\quad``.

    Examples
    --------
    >>> break_sum(["a", "+ b"], budget=1000)
    ['a + b']
    >>> break_sum(["a", "+ b"], budget=10)
    ['a', '\\quad + b']
    """
    lines, cur = [], ""
    for part in parts:
        trial = part if not cur else f"{cur} {part}"
        if cur and tex_width(trial) > budget:
            lines.append(cur)
            cur = r"\quad " + part
        else:
            cur = trial
    if cur:
        lines.append(cur)
    return lines

