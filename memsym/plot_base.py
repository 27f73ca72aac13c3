"""What every plot of memsym shares: user text drawn literally, the figure, the legend beside
the axes, and saving by extension (PNG, PDF or SVG).

:mod:`memsym.plotting` draws the charts (:mod:`memsym.plot_breakdown` the breakdowns) on these;
matplotlib is imported only when a figure is made.
"""

from __future__ import annotations

import os

from .errors import InvalidValueError

__all__ = ["GB", "FORMATS", "MAX_TEXT", "OKABE_ITO", "PALETTE", "CAPACITY_COLOR", "FITS_COLOR",
           "NOFIT_COLOR", "SEQUENTIAL_CMAP", "DIVERGING_CMAP", "color", "text_color", "plot_text", "figure",
           "legend_outside", "save"]

#: The memory axes' unit [bytes]: GB = 1e9 bytes.
GB = 1e9
#: File extensions :func:`save` writes.
FORMATS = ("png", "pdf", "svg")

#: The Okabe-Ito colour-blind-safe palette, name -> sRGB hex: M. Okabe and K. Ito, "Color
#: Universal Design (CUD): how to make figures and presentations that are friendly to
#: colorblind people" (2008), https://jfly.uni-koeln.de/color/ ("A set of colors that is
#: unambiguous both to colorblinds and non-colorblinds", RGB 0-255: orange 230,159,0; sky
#: blue 86,180,233; bluish green 0,158,115; yellow 240,228,66; blue 0,114,178; vermillion
#: 213,94,0; reddish purple 204,121,167; black 0,0,0).  Every plot of memsym takes its
#: colours from here (:data:`PALETTE`, :func:`color`), so that no two series differ by hue
#: alone in a way a deuteranope, protanope or tritanope cannot tell apart.
OKABE_ITO = {"orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00",
             "reddish purple": "#CC79A7", "black": "#000000"}
#: The order series take the palette's colours in (black is kept for reference lines).
PALETTE = tuple(OKABE_ITO[k] for k in ("blue", "orange", "bluish green", "vermillion",
                                       "sky blue", "reddish purple", "yellow"))
#: The capacity (and other reference) lines.
CAPACITY_COLOR = OKABE_ITO["black"]
#: Feasibility: "a layout fits" and "valid, none fits".
FITS_COLOR, NOFIT_COLOR = OKABE_ITO["bluish green"], OKABE_ITO["vermillion"]
#: Colour maps for values: viridis (sequential) and PuOr (diverging), both readable with
#: colour-vision deficiency (viridis: Smith and van der Walt, matplotlib's perceptually uniform
#: maps, https://bids.github.io/colormap/; PuOr: Brewer, colorbrewer2.org, "colorblind safe").
SEQUENTIAL_CMAP, DIVERGING_CMAP = "viridis_r", "PuOr"


def color(i: int) -> str:
    """The ``i``-th series colour (:data:`PALETTE`, cycled).

    Examples
    --------
    >>> color(0), color(len(PALETTE))
    ('#0072B2', '#0072B2')
    """
    return PALETTE[int(i) % len(PALETTE)]


def text_color(background: str) -> str:
    """Black or white, whichever reads on ``background`` (a ``#RRGGBB`` colour): white on the
    dark palette colours (relative luminance below 0.35, WCAG 2.1's sRGB formula).

    Examples
    --------
    >>> text_color(OKABE_ITO["blue"]), text_color(OKABE_ITO["yellow"])
    ('white', 'black')
    """
    rgb = [int(background.lstrip("#")[k:k + 2], 16) / 255 for k in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "white" if lum < 0.35 else "black"


#: The longest user text drawn (a title, a job or model name) [characters]; longer is cut
#: (a command line allows 128 KiB in one argument; a title wider than the figure says nothing).
MAX_TEXT = 300


def plot_text(text) -> str:
    r"""``text`` as matplotlib draws it literally: the one helper every user string (a title,
    a job, model or term name) passes through before it reaches a plot.

    Matplotlib reads text between two unescaped ``$`` as mathtext and raises on what it cannot
    parse (``$\frac{$``): every ``$`` is escaped as ``\$``, so no text is ever math and each
    ``$`` is drawn as a dollar sign (a backslash before it stays a backslash).  Control
    characters other than the newline become ``\xNN``; text beyond :data:`MAX_TEXT` characters
    is cut.  The plots are drawn with ``text.usetex`` off (:func:`figure`, :func:`save`), so
    LaTeX never sees the text either.

    Examples
    --------
    >>> print(plot_text(r"$\frac{$"), plot_text("a$^{$b"))
    \$\frac{\$ a\$^{\$b
    >>> from matplotlib.text import Text
    >>> Text()._preprocess_math(plot_text(r"$\frac{$"))   # drawn as typed, not as math
    ('$\\frac{$', False)
    """
    text = str(text)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "..."
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
