"""A :class:`Report` as CSV tables, one file per row list (RFC 4180; an empty cell is None)."""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Iterable
from typing import Any

from analytics.report.jsonio import LISTS
from analytics.report.model import CostRow, Report


def _csv_cell(v: object) -> object:
    return "" if v is None else ("true" if v else "false") if isinstance(v, bool) else v


def _csv(cls: type[Any], rows: Iterable[Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)  # RFC 4180: quotes cells with commas, quotes and newlines; \r\n rows
    names = [f.name for f in dataclasses.fields(cls)]
    w.writerow(names)
    for row in rows:
        w.writerow([_csv_cell(getattr(row, n)) for n in names])
    return buf.getvalue()


def to_csv(report: Report) -> dict[str, str]:
    """File name -> CSV text, one per table; ``costs.csv`` holds the fleet row first. Empty cell = None."""
    out = {"costs.csv": _csv(CostRow, [report.fleet, *report.rows])}
    for attr, cls in LISTS.items():
        if attr != "rows":  # daily.csv, queue.csv, ..., rent_vs_buy.csv, deltas.csv
            out[f"{attr}.csv"] = _csv(cls, getattr(report, attr))
    return out
