"""What every page shares: the Jinja2 environment over ``templates/`` and the cells and tables it renders.

The pages' structure lives in the templates (base.html.j2 holds the style and the layout, macros.html.j2
the tables, provenance lists, banners and images); Python computes the data: tables as :class:`Table`
(texts already formatted, alignment decided), PNG bytes, verdict texts. HTML templates escape every
value (autoescape), so a name with ``<``, ``&`` or quotes stays text; StrictUndefined makes a variable
the code forgot to pass an error instead of an empty spot on the page.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape


def is_missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    try:
        return bool(isinstance(value, float | np.floating) and math.isnan(value))
    except TypeError:
        return False


def fmt(value, digits: int = 3) -> str:
    """A cell: ``n/a`` for missing, integers as integers, floats with ``digits`` significant digits."""
    if is_missing(value):
        return "n/a"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        value = float(value)
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        decimals = max(0, digits - int(math.floor(math.log10(abs(value)))) - 1)
        return f"{value:.{decimals}f}"
    return str(value)


@dataclass(frozen=True)
class Link:
    """A cell that links to ``href`` (a run's report); without ``href`` it is plain text."""

    text: str
    href: str | None = None


@dataclass(frozen=True)
class Badge:
    """A verdict cell, coloured by the style's class ``css`` (good, warn, bad, muted)."""

    text: str
    css: str = ""


@dataclass
class Table:
    """What the ``table`` macro draws: one header and one alignment per column, rows of cells (text,
    :class:`Link` or :class:`Badge`), and optionally the object behind each row for a page's own cell
    macro (the claims)."""

    columns: list[str]
    headers: list[str]
    right: list[bool]
    rows: list[list]
    items: list = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.columns or not self.rows


def _right_aligned(column: pd.Series) -> bool:
    """Numbers, and text columns that hold only numbers (e.g. "6.29 ±0.12") or n/a, align right."""
    if any(isinstance(v, Link | Badge) for v in column) or pd.api.types.is_bool_dtype(column):
        return False
    if pd.api.types.is_numeric_dtype(column):
        return True
    texts = [v for v in column if isinstance(v, str) and v != "n/a"]
    return bool(texts) and all(t[:1].isdigit() or t[:1] in "-+." for t in texts)


def table(
    frame: pd.DataFrame,
    headers: dict[str, str] | None = None,
    formats: dict[str, Callable] | None = None,
    digits: int = 4,
    plain: bool = False,
) -> Table:
    """``frame`` as a :class:`Table`: ``headers`` renames columns, ``formats`` maps a column to a function
    value -> str, :class:`Link` and :class:`Badge` cells pass as they are, other values get :func:`fmt`
    with ``digits`` significant digits (``plain``: ``str``, as the Markdown summary has always had them)."""
    headers, formats = headers or {}, formats or {}

    def cell(column, value):
        if isinstance(value, Link | Badge):
            return value
        if column in formats:
            return formats[column](value)
        return str(value) if plain else fmt(value, digits)

    columns = [str(c) for c in frame.columns]
    rows = [
        [cell(c, v) for c, v in zip(frame.columns, values, strict=True)] for values in frame.itertuples(index=False)
    ]
    right = [_right_aligned(frame[c]) for c in frame.columns]
    return Table(columns, [str(headers.get(c, c)) for c in frame.columns], right, rows)


def _markdown_cell(value) -> str:
    return str(value).replace("|", "\\|")


ENV = Environment(
    loader=PackageLoader("testbed.report.pages", "templates"),
    autoescape=select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
ENV.filters["b64"] = lambda data: base64.b64encode(data).decode()
ENV.filters["md"] = _markdown_cell
ENV.filters["fmt"] = fmt


def render(template: str, **context) -> str:
    return ENV.get_template(template).render(**context)
