"""The vocabulary the frames and the pages share: column names, parameter labels, cells, links."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

import pandas as pd

from tuner.report.tables import LOAD_AT_SLA, TOK_GPU, USD_MTOK, USER_P90
from tuner.spec.space import SHORT_NAMES

__all__ = ["CONFIRMED_TOK_GPU", "LOAD_AT_SLA", "STATES", "TOK_GPU", "USD_MTOK", "USER_P50",
           "USER_P90", "local_time", "page_url", "param_label", "param_value"]

# Column names shared by the frames and the pages that draw them (TOK_GPU, USER_P90 and USD_MTOK
# are the CLI's too).
CONFIRMED_TOK_GPU = "confirmed tok/s/GPU"
USER_P50 = "tok/s/user p50"
STATES = ("complete", "pruned", "failed", "infeasible", "running")


def page_url(page: str, **params: Any) -> str:
    """A relative link to one of the dashboard's pages: `study?study=NAME`."""
    return page + ("?" + urlencode({k: str(v) for k, v in params.items()}) if params else "")


def param_label(name: str) -> str:
    return SHORT_NAMES.get(name, name)


def param_value(v: Any) -> Any:
    """A parameter value as the tables show it: booleans as on/off."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return v


def local_time(t: dt.datetime | None) -> pd.Timestamp | None:
    """A time cell: shown as UTC without a zone suffix; the pages say the times are UTC."""
    return None if t is None else pd.Timestamp(t.astimezone(dt.timezone.utc).replace(tzinfo=None))
