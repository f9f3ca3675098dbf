"""How the dashboard's tables read: figures rounded and formatted, "–" for what is absent."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from tuner.report import dashboard_data as dd
from tuner.report.units import UNITS, column_in_unit, frame_in_unit, say


def fmt(v: Any, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"
    return str(v)


# The figures read to the unit (tok/s), whatever unit their column is named in.
FIGURES = frozenset(say(f, unit) for unit in UNITS for f in (
    dd.TOK_GPU, f"best {dd.TOK_GPU}", dd.CONFIRMED_TOK_GPU, dd.USER_P90, dd.USER_P50,
    "tok/s total", "best so far"))


def money(v: Any) -> str:
    """A USD figure with 4 significant digits: a CPU core's cost per million tokens is cents."""
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:,.4g}"


def rounded(frame: pd.DataFrame) -> pd.DataFrame:
    """Figures rounded for reading (tok/s to units, milliseconds and seconds to tenths), and
    "–" for an absent value in a text column, as the cards write it (never `None`)."""
    frame = frame.copy()
    for c in frame.columns:
        if c in FIGURES:
            frame[c] = pd.to_numeric(frame[c], errors="coerce").round(0)
        elif c.endswith(" ms") or c.endswith("req/s") or c == "duration s":
            frame[c] = pd.to_numeric(frame[c], errors="coerce").round(1)
        elif _is_text(frame[c]):
            frame[c] = frame[c].map(lambda v: "–" if v is None or (isinstance(v, float)
                                                            and v != v) else v)
    return frame


def number_columns(frame: pd.DataFrame) -> dict[str, Any]:
    """Column formats: figures with thousands separators, times as dates."""
    config: dict[str, Any] = {}
    for c in frame.columns:
        if c in FIGURES or c.endswith(" ms") or c.endswith("req/s"):
            config[c] = st.column_config.NumberColumn(c, format="localized")
        elif c == "duration s":
            config[c] = st.column_config.NumberColumn(c, format="%.1f")
        elif c.startswith("USD"):
            config[c] = st.column_config.NumberColumn(c, format="%.4g")
        elif c in ("started", "finished"):
            config[c] = st.column_config.DatetimeColumn(c + " (UTC)", format="YYYY-MM-DD HH:mm")
    return config


def plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def in_unit(frame: pd.DataFrame, unit: str) -> pd.DataFrame:
    """The table in `unit`: its columns named so, and its text cells (a reason that quotes a
    figure per GPU, a hardware name) said so."""
    if unit == "GPU":
        return frame
    frame = frame_in_unit(frame, unit).copy()
    for c in frame.columns:
        if _is_text(frame[c]):
            frame[c] = frame[c].map(lambda v: say(v, unit) if isinstance(v, str) else v)
    return frame


def _is_text(column: pd.Series) -> bool:
    """A column of text: pandas' own string type, or objects (text mixed with None)."""
    return column.dtype == object or pd.api.types.is_string_dtype(column)


def table(frame: pd.DataFrame, unit: str, *, config: dict[str, Any] | None = None,
          where: Any = st, **options: Any) -> None:
    """A table as every page shows it (in `where`, a column or the page): in the page's unit,
    figures rounded and formatted, "–" for what is absent, text and numbers alike (a missing
    number would otherwise read "None"). `config` is keyed by the frame's own column names."""
    shown = rounded(in_unit(frame, unit))
    columns = number_columns(shown)
    columns.update({column_in_unit(c, unit): v for c, v in (config or {}).items()})
    where.dataframe(shown, hide_index=True, column_config=columns, placeholder="–", **options)
