"""What every plot of memsym shares: user text drawn literally, the figure, the legend beside
the axes, and saving by extension (PNG, PDF or SVG).

:mod:`memsym.plotting` draws the charts (:mod:`memsym.plot_breakdown` the breakdowns) on these;
matplotlib is imported only when a figure is made.
"""

from __future__ import annotations

import os

from .errors import InvalidValueError

__all__ = ["GB", "FORMATS", "MAX_TEXT", "plot_text", "figure", "legend_outside", "save"]

#: The memory axes' unit [bytes]: GB = 1e9 bytes.
GB = 1e9
#: File extensions :func:`save` writes.
FORMATS = ("png", "pdf", "svg")


#: The longest user text drawn (a title, a job or model name) [characters]; longer is cut
#: (a command line allows 128 KiB in one argument; a title wider than the figure says nothing).
MAX_TEXT = 300


def plot_text(text, limit: int = MAX_TEXT) -> str:
    r"""``text`` as matplotlib draws it literally: the one helper every user string (a title,
    a job, model or term name) passes through before it reaches a plot.

    Matplotlib reads text between two unescaped ``$`` as mathtext and raises on what it cannot
    parse (``$\frac{$``): every ``$`` is escaped as ``\$``, so no text is ever math and each
    ``$`` is drawn as a dollar sign (a backslash before it stays a backslash).  Control
    characters other than the newline become ``\xNN``; text beyond ``limit`` characters is cut.
    The plots are drawn with ``text.usetex`` off (:func:`figure`, :func:`save`), so LaTeX
    never sees the text either.

    Examples
    --------
    >>> print(plot_text(r"$\frac{$"), plot_text("a$^{$b"))
    \$\frac{\$ a\$^{\$b
    >>> from matplotlib.text import Text
    >>> Text()._preprocess_math(plot_text(r"$\frac{$"))   # drawn as typed, not as math
    ('$\\frac{$', False)
    """
    text = str(text)
    if len(text) > limit:
        text = text[:limit] + "..."
    out = []
    for ch in text:
        if ch == "$":
            out.append("\\$")
        elif ch != "\n" and not ch.isprintable():
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def figure(ax=None, size=(7.5, 4.2)):
    """``(fig, ax)``: ``ax``'s figure, or a new constrained-layout figure with LaTeX off."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    with rc_context({"text.usetex": False}):   # a user's matplotlibrc may turn LaTeX on
        fig = Figure(figsize=size, layout="constrained")
        return fig, fig.add_subplot()


def legend_outside(ax, **kw):
    """A legend to the right of the axes, never over the data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                     fontsize="small", **kw)


def save(fig, path) -> str:
    """Write ``fig`` to ``path``; the format follows the extension (png, pdf or svg).

    Raises
    ------
    InvalidValueError
        For any other extension.

    Examples
    --------
    >>> import tempfile, os
    >>> from memsym.plot_breakdown import breakdown
    >>> fig = breakdown({"zero1": {"weights": 14e9}}, capacity=80e9)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     out = save(fig, os.path.join(tmp, "m.svg"))
    ...     os.path.getsize(out) > 0
    True
    """
    ext = os.path.splitext(str(path))[1].lower().lstrip(".")
    if ext not in FORMATS:
        raise InvalidValueError(f"plot file must end in .png, .pdf or .svg, got {str(path)[-40:]!r}")
    from matplotlib import rc_context

    # tick labels are made while drawing: with LaTeX off as the rest (see plot_text)
    with rc_context({"text.usetex": False}):
        fig.savefig(path, format=ext, dpi=150 if ext == "png" else None)
    return str(path)
