"""A :class:`Report` as CSV tables, one file per row list (RFC 4180; an empty cell is None).
``costs.csv`` holds every cost row, each grouping's (host, model, gpu, user, namespace, account,
partition, qos, cluster, label:<name>, job, unallocated) told by its ``group`` column, so one file
keeps the fixed table names that /reports/ serves and a spreadsheet filters by group.

A text cell that a spreadsheet would run as a formula (it starts with ``=``, ``+``, ``-``, ``@``,
TAB or CR, or their full-width forms) gets a leading ``'``, as OWASP recommends: a user named
``=HYPERLINK(...)`` reads ``'=HYPERLINK(...)``, shown as text. Numbers stay numbers (-3.5 is data).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import typing
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import Any

from analytics.report.jsonio import LISTS
from analytics.report.model import CostRow, Report

FORMULA_START = tuple("=+-@\t\r") + tuple("\uff1d\uff0b\uff0d\uff20")  # and full-width = + - @
TABLES = ("costs", *(attr for attr in LISTS if attr != "rows"))  # one <table>.csv each; costs holds "rows"
FILES = tuple(f"{t}.csv" for t in TABLES)  # the names to_csv gives, in its order


def neutralise(text: str) -> str:
    """``text`` as a spreadsheet shows it, never a formula: a leading ``'`` where it could start one."""
    return "'" + text if text.startswith(FORMULA_START) else text


def _csv_cell(v: object) -> object:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return neutralise(v) if isinstance(v, str) else v


CHUNK = 4096  # rows a piece


def _pieces(cls: type[Any], rows: Iterable[Any]) -> Iterator[str]:
    """The table's CSV text, CHUNK rows a piece (a 100,000-job table is never one string)."""
    buf = io.StringIO()
    w = csv.writer(buf)  # RFC 4180: quotes cells with commas, quotes and newlines; \r\n rows
    names = [f.name for f in dataclasses.fields(cls)]
    w.writerow(names)
    rows = rows if isinstance(rows, list | tuple) else list(rows)
    cells = _cells(cls)
    for at in range(0, max(1, len(rows)), CHUNK):
        part = rows[at : at + CHUNK]
        # column by column (each column one pass in C, a cell made only where its field needs
        # it), then written row by row
        cols = [list(map(attrgetter(name), part)) for name in names]
        for i, cell in enumerate(cells):
            if cell is not None:
                cols[i] = list(map(cell, cols[i]))
        w.writerows(zip(*cols, strict=True))
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()


def _cells(cls: type[Any]) -> list[Callable[[Any], object] | None]:
    """Per field, what makes its cell: None where the value is written as it is (a number, or None:
    the empty cell), ``neutralise`` for text, ``_csv_cell`` for the rest (booleans...). A
    100,000-job table's cells, column by column."""
    hints = typing.get_type_hints(cls)
    return [
        None if hints[f.name] in _NUMBERS else neutralise if hints[f.name] is str else _csv_cell
        for f in dataclasses.fields(cls)
    ]


_NUMBERS = (int, float, int | None, float | None)


def to_csv(report: Report) -> dict[str, str]:
    """File name -> CSV text, one per table; ``costs.csv`` holds the fleet row first. Empty cell = None."""
    return {name: "".join(pieces) for name, pieces in csv_pieces(report)}


def csv_pieces(report: Report) -> Iterator[tuple[str, Iterator[str]]]:
    """``to_csv``'s files, each as pieces made as they are written (``_pieces``)."""
    yield FILES[0], _pieces(CostRow, [report.fleet, *report.rows])
    for attr, name in zip(TABLES[1:], FILES[1:], strict=True):  # daily.csv, queue.csv, ..., deltas.csv
        yield name, _pieces(LISTS[attr], getattr(report, attr))
