"""A statement's files are written as they are made (issue 25: statements stream): the page of a
group with tens of thousands of jobs is never held whole. The pieces join to exactly the page made
at once, in every format and at every chunk boundary; rows are formatted only as they are written;
a failure half-way leaves the old file and no temporary one."""

from __future__ import annotations

import csv
import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.config import FullSettings
from analytics.report.build import build
from analytics.report.csvio import neutralise
from analytics.statements import render
from analytics.statements.statement import JobLine, Statement, statement_of
from domain.jobs import JobKey
from domain.week import JobWeek, WeekData, Window
from tests.support.settings import H200_COST
from tests.support.weeks import KWH, H, gpu_week

HOSTILE_USERS = ["ann", "=cmd|' /C calc'!A0", "<script>x</script>", "a|b", "ü\nnewline"]


def _statement(jobs: int, user_of: int = 1) -> Statement:
    """``jobs`` one-GPU jobs on 4 GPUs of one account, by ``user_of`` users (hostile names among them)."""
    w = Window(0, 7200, "t")
    gpus = tuple(
        gpu_week(f"GPU-{i}", "h1", gpu=str(i), sampled_h=2, busy_h=3000 / H, allocated_h=2, energy_kwh=5e5 / KWH)
        for i in range(4)
    )
    rows = tuple(
        JobWeek(
            f"GPU-{n % 4}",
            "h1",
            JobKey(f"job-{n:05d}", HOSTILE_USERS[n % user_of % len(HOSTILE_USERS)]),
            7200 / max(1, jobs // 4),
            3000 / max(1, jobs // 4),
            1e5,
            account="grant",
        )
        for n in range(jobs)
    )
    data = WeekData(w, "t", gpus, rows)
    report = build(data, FullSettings(cost=H200_COST).cost, now=7200)
    return statement_of(data.jobs, report, "account", "grant" if jobs else "nobody", None)


WHOLE = {"html": render.to_html, "md": render.to_markdown, "csv": render.to_csv}


@settings(max_examples=25, deadline=None)
@given(jobs=st.integers(0, 40), batch=st.integers(1, 9), users=st.integers(1, 5))
def test_the_streamed_files_are_the_pages_made_at_once(
    jobs: int, batch: int, users: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every chunk boundary of the CSV (the batch size against the row count), the empty statement,
    hostile names: the files written piece by piece hold exactly the text made whole."""
    s = _statement(jobs, users)
    assert len(s.jobs) == jobs
    old = render.CSV_BATCH
    render.CSV_BATCH = batch
    try:
        out = tmp_path_factory.mktemp("st")
        files = render.write(s, list(render.FORMATS), out)
        for path in files:
            fmt = path.suffix[1:]
            assert path.read_bytes() == WHOLE[fmt](s).encode("utf-8"), fmt
        with (out / f"{render.stem(s)}.csv").open(newline="") as f:
            table = list(csv.reader(f))
        assert len(table) == jobs + 2 and table[-1][0] == render.TOTAL  # header, jobs, total
        assert [r[1] for r in table[1:-1]] == [neutralise(x.user) for x in s.jobs]
        html = (out / f"{render.stem(s)}.html").read_text()
        assert html.count("<tr>") == (jobs + 1 if jobs else 0)  # the header row and one per job
        assert ("No jobs in this period." in html) == (jobs == 0)
        assert "<script>x" not in html
    finally:
        render.CSV_BATCH = old


class _Counted(list[JobLine]):
    """A statement's job lines that count how many have been taken."""

    taken = 0

    def __iter__(self) -> Iterator[JobLine]:
        for x in super().__iter__():
            self.taken += 1
            yield x


@pytest.mark.parametrize("fmt", ["html", "md", "csv"])
def test_rows_are_formatted_only_as_they_are_written(fmt: str) -> None:
    """When the first job's row is written, at most one batch of rows has been formatted (one row
    for HTML and Markdown, CSV_BATCH for CSV), not the 3,000 a whole page needs."""
    lines = _Counted(_statement(3000).jobs)
    s = dataclasses.replace(_statement(0), jobs=lines)
    chunks = {"html": render.html_chunks, "md": render.markdown_chunks, "csv": render.csv_chunks}[fmt](s)
    at_first_row = next(lines.taken for piece in chunks if "job-00000" in piece)
    assert 1 <= at_first_row <= (render.CSV_BATCH if fmt == "csv" else 1) < 3000
    assert sum(1 for _ in chunks) > 0 and lines.taken == 3000  # the rest follows


def test_a_failure_half_way_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _statement(50)
    render.write(s, ["html", "md", "csv"], tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    calls = itertools.count()
    cells = render._cells

    def fails_at_row_20(x: JobLine, currency: str) -> list[str]:
        if next(calls) == 20:
            raise RuntimeError("disk on fire")
        return cells(x, currency)

    monkeypatch.setattr(render, "_cells", fails_at_row_20)
    with pytest.raises(RuntimeError, match="disk on fire"):
        render.write(s, ["html"], tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no .tmp, old page intact
