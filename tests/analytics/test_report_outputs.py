"""The text renderers and the writer: JSON round trip, CSV that survives hostile keys, Markdown
tables that a user name cannot break, files written where and how they should be."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from analytics.report.csvio import to_csv
from analytics.report.html import to_html
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import to_markdown
from analytics.report.model import SCHEMA, CostRow
from analytics.report.output import write
from analytics.report.rows import summed, top
from analytics.report.text import duration, hours, money, pct, tables
from tests.support.reports import HOSTILE_HOST, HOSTILE_JOB, HOSTILE_PARTITION, HOSTILE_USER, REASONS, sample_report


def test_json_round_trip_is_exact_and_versioned() -> None:
    report = sample_report()
    text = to_json(report)
    assert json.loads(text)["schema"] == SCHEMA == "gpuledger.report/v1"
    assert "queue-ü" in text  # ensure_ascii=False
    assert from_json(text) == report
    with pytest.raises(ValueError, match="schema"):
        from_json(text.replace(SCHEMA, "gpuledger.report/v0"))


@pytest.mark.parametrize(
    ("path", "bad", "named"),
    [
        (("fleet", "total_cost"), "1,234.50", r"fleet\.total_cost: Input should be a valid number \(got '1,234\.50'\)"),
        (("rows", 0, "busy_gpu_hours"), "12.5", r"rows\.0\.busy_gpu_hours: Input should be a valid number"),
        (("rows", 0, "gpus"), 4.5, r"rows\.0\.gpus: Input should be a valid integer"),
        (("benchmarks", 0, "value"), None, r"benchmarks\.0\.value: Input should be a valid number"),
        (("complete",), "false", r"complete: Input should be a valid boolean"),
        (("daily", 0, "bogus"), 1, r"daily\.0\.bogus: Unexpected"),
    ],
)
def test_json_with_a_wrong_type_is_refused_naming_the_field(
    path: tuple[str | int, ...], bad: object, named: str
) -> None:
    data = json.loads(to_json(sample_report()))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(ValueError, match=rf"not a {re.escape(SCHEMA)} report: {named}"):
        from_json(json.dumps(data))


def test_json_writes_a_non_finite_figure_as_not_measured() -> None:
    fleet = dataclasses.replace(sample_report().fleet, utilization=float("nan"), cost_per_useful_gpu_hour=float("inf"))
    data = json.loads(to_json(dataclasses.replace(sample_report(), fleet=fleet)))
    assert data["fleet"]["utilization"] is None and data["fleet"]["cost_per_useful_gpu_hour"] is None


def test_csv_parses_back_with_hostile_keys() -> None:
    report = sample_report()
    files = to_csv(report)
    assert set(files) == {
        f"{n}.csv"
        for n in (
            "costs",
            "daily",
            "queue",
            "failures",
            "benchmarks",
            "multi_gpu",
            "rent_vs_buy",
            "deltas",
            "prices",
            "idle_holders",
            "stalled_jobs",
            "link_jobs",
            "scaling",
        )
    }
    costs = list(csv.DictReader(io.StringIO(files["costs.csv"])))
    assert len(costs) == len(report.rows) + 1
    assert list(costs[0]) == [f.name for f in dataclasses.fields(CostRow)]
    assert [c["key"] for c in costs] == [report.fleet.key, *(r.key for r in report.rows)]
    assert {HOSTILE_USER, HOSTILE_HOST, HOSTILE_JOB} <= {c["key"] for c in costs}
    alice = next(c for c in costs if c["key"] == "alice")
    assert alice["allocated_gpu_hours"] == ""  # None: empty, not 0
    assert float(costs[0]["total_cost"]) == report.fleet.total_cost
    queue = list(csv.DictReader(io.StringIO(files["queue.csv"])))
    assert [q["partition"] for q in queue] == ["gpu", HOSTILE_PARTITION]
    assert queue[1]["wait_max_is_bound"] == "true"


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line))


def test_markdown_banner_notes_and_unbreakable_tables() -> None:
    report = sample_report()
    md = to_markdown(report)
    assert "INCOMPLETE" in md and all(reason in md for reason in REASONS)
    assert "example prices" in md.lower()
    tables = re.findall(r"(?:^\|.*\n)+", md, flags=re.MULTILINE)
    assert len(tables) >= 10
    for table in tables:
        lines = table.splitlines()
        assert len({_unescaped_pipes(line) for line in lines}) == 1, table
    users = next(t for t in tables if t.startswith("| User |"))
    assert len(users.splitlines()) == 2 + len(report.group("user"))
    assert "alert" in users and "<script>" not in md
    queue = next(t for t in tables if t.startswith("| Partition | Source |"))
    assert len(queue.splitlines()) == 2 + len(report.queue)  # the newline in a partition stays in its row

    plain = dataclasses.replace(report, complete=True, incomplete_reasons=[], example_prices=False)
    assert "INCOMPLETE" not in to_markdown(plain) and "example prices" not in to_markdown(plain).lower()


def test_formatting() -> None:
    assert duration(252) == "4 m 12 s" and duration(7380) == "2 h 3 m" and duration(None) == "—"
    assert money(1234.5, "USD") == "1,234.50 USD" and money(None, "USD") == "—"
    assert hours(12.34) == "12.3 h" and pct(0.4567) == "45.7 %" and pct(-0.1, signed=True) == "-10.0 %"


def test_write_all_formats(tmp_path: Path) -> None:
    out = tmp_path / "reports" / "weekly"
    paths = write(sample_report(), ["json", "csv", "md", "html"], out)
    assert all(p.is_file() for p in paths)
    names = {p.relative_to(out).as_posix() for p in paths}
    assert {"gpuledger-2026-W48.json", "gpuledger-2026-W48.md", "gpuledger-2026-W48.html"} <= names
    assert "gpuledger-2026-W48-csv/costs.csv" in names and len(names) == 3 + 13
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # no temporary left behind
    assert from_json((out / "gpuledger-2026-W48.json").read_text(encoding="utf-8")) == sample_report()


def test_write_rejects_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pdf"):
        write(sample_report(), ["md", "pdf"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_idle_table_renders_everywhere_and_older_json_loads_without_it() -> None:
    report = sample_report(hostile=False)
    md = to_markdown(report)
    assert "## Held but idle (top 20 by idle cost)" in md
    assert "| carol | slurm:4711 | long | 2 | 6.4 h | 7.30 |" in md
    assert "| bob | slurm:4301 | — | 1 | 1.5 h | 1.71 |" in md
    page = to_html(report)
    assert "Held but idle (top 20 by idle cost)" in page and page.index("carol") < page.index("slurm:4301")
    rows = list(csv.DictReader(io.StringIO(to_csv(report)["idle_holders.csv"])))
    assert [(r["user"], r["job"], r["partition"], r["gpus"]) for r in rows] == [
        ("carol", "slurm:4711", "long", "2"),
        ("bob", "slurm:4301", "", "1"),
    ]
    data = json.loads(to_json(report))
    del data["idle_holders"]
    assert from_json(json.dumps(data)).idle_holders == []
    assert from_json(to_json(report)) == report


def test_big_tables_show_the_top_rows_and_add_the_rest_up() -> None:
    """120 users and 300 jobs: the page shows the 50 dearest users and 20 dearest jobs, one
    "(N more)" row each whose figures are the rest's sums (then the unallocated row, where the
    report has one); each column of the shown table adds up to what all the rows do. The JSON keeps
    every row."""
    r = sample_report(hostile=False)
    users = [dataclasses.replace(x, key=f"u{i:03d}", total_cost=float(i), hardware_cost=float(i)) for i, x in
             enumerate(r.group("user") * 40)][:120]  # fmt: skip
    jobs = [dataclasses.replace(x, key=f"j{i:03d}", total_cost=float(i), hardware_cost=float(i)) for i, x in
            enumerate(r.group("job") * 100)][:300]  # fmt: skip
    other = [x for x in r.rows if x.group not in ("user", "job")]
    big = dataclasses.replace(r, rows=[*other, *users, *jobs])
    shown = {t.slug: t for t in tables(big)}
    rows = shown["users"].rows
    total = shown["users"].headers.index("Total (USD)")
    assert len(rows) == 50 + 1 and rows[50][0] == "(70 more)"  # (this sample has no unallocated row)
    assert rows[0][0] == "u119"  # the dearest first
    assert float(rows[50][total].replace(",", "")) == pytest.approx(sum(range(70)), abs=0.5)
    job_rows = shown["jobs"].rows
    assert len(job_rows) == 21 and job_rows[20][0] == "(280 more)"
    hours = shown["jobs"].headers.index("Charged GPU-h")
    more = summed(sorted(jobs, key=lambda x: -x.total_cost)[20:], "x")
    assert job_rows[20][hours] == f"{more.sampled_gpu_hours:,.1f} h"
    assert more.utilization == pytest.approx(more.busy_gpu_hours / more.sampled_gpu_hours)
    assert len(from_json(to_json(big)).group("job")) == 300
    rest = dataclasses.replace(jobs[0], group="unallocated", key="unallocated")
    cut = top([*jobs, rest], 20)
    assert [x.key for x in cut[-2:]] == ["(280 more)", "unallocated"]
    assert sum(x.total_cost for x in cut) == pytest.approx(sum(x.total_cost for x in [*jobs, rest]))


# --- the CSV folder of a large report, written by a forked child -------------------------------


def _logged_writes(monkeypatch: pytest.MonkeyPatch, log: Path, fail_in_child: bool = False, fail: bool = False) -> int:
    """``write_atomic`` recording which process wrote each CSV file (a line each in ``log``); it
    fails for CSV files in the child (``fail_in_child``) or everywhere (``fail``). This process's pid."""
    from analytics.report import output

    parent, real = os.getpid(), output.write_atomic

    def logged(path: Path, text: str | Iterable[str]) -> None:
        if path.suffix == ".csv":
            if fail or (fail_in_child and os.getpid() != parent):
                raise OSError(28, "No space left on device")
            with log.open("a") as f:
                f.write(f"{os.getpid()} {path.name}\n")
        real(path, text)

    monkeypatch.setattr(output, "write_atomic", logged)
    monkeypatch.setattr(output, "BESIDE_ROWS", 1)  # the sample report counts as large
    monkeypatch.setattr(output, "_single_threaded", lambda: True)  # whatever threads the test run has
    return parent


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_large_report_has_its_csv_folder_written_by_a_child_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, formats = sample_report(), ["json", "csv", "md", "html"]
    serial = write(report, formats, tmp_path / "serial")  # before the patch: one process
    parent = _logged_writes(monkeypatch, tmp_path / "log")
    forked = write(report, formats, tmp_path / "forked")
    writers = {line.split()[0] for line in (tmp_path / "log").read_text().splitlines()}
    assert writers and str(parent) not in writers  # every CSV file from the child
    assert [p.relative_to(tmp_path / "forked") for p in forked] == [p.relative_to(tmp_path / "serial") for p in serial]
    assert _files(tmp_path / "forked") == _files(tmp_path / "serial")
    (child,) = writers
    with pytest.raises(ChildProcessError):  # reaped by write: no longer this process's child
        os.waitpid(int(child), os.WNOHANG)


def test_a_child_that_fails_leaves_the_csv_folder_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, formats = sample_report(), ["csv", "json"]
    serial = write(report, formats, tmp_path / "serial")
    parent = _logged_writes(monkeypatch, tmp_path / "log", fail_in_child=True)
    again = write(report, formats, tmp_path / "again")
    writers = [line.split()[0] for line in (tmp_path / "log").read_text().splitlines()]
    assert set(writers) == {str(parent)} and len(writers) == 13  # all written here, once
    assert _files(tmp_path / "again") == _files(tmp_path / "serial") and len(again) == len(serial)
    assert not [p for p in (tmp_path / "again").rglob("*") if p.name.endswith(".tmp")]


def test_a_csv_folder_that_cannot_be_written_is_this_process_s_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _logged_writes(monkeypatch, tmp_path / "log", fail=True)
    with pytest.raises(OSError, match="No space left on device"):
        write(sample_report(), ["json", "csv"], tmp_path / "out")
    assert (tmp_path / "out" / "gpuledger-2026-W48.json").is_file()  # the other files are kept


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_csv_written_in_pieces_is_the_same_text(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table is made ``CHUNK`` rows a piece (never one string at 100,000 jobs): the same text
    whatever the piece's size, the header once, an empty table its header alone."""
    from analytics.report import csvio

    report = sample_report()
    whole = to_csv(report)
    monkeypatch.setattr(csvio, "CHUNK", chunk)
    assert to_csv(report) == whole
    files = dict(csvio.csv_pieces(report))
    costs = list(files["costs.csv"])
    assert len(costs) == -(-(1 + len(report.rows)) // chunk) > 1  # a piece per CHUNK rows
    assert "".join(costs).count("group,key,") == 1
    empty = dataclasses.replace(report, failures=[])
    assert to_csv(empty)["failures.csv"].count("\r\n") == 1


def test_json_written_in_pieces_is_the_same_text() -> None:
    from analytics.report.jsonio import json_pieces

    report = sample_report()
    pieces = list(json_pieces(report))
    assert len(pieces) > len(report.rows) and "".join(pieces) == to_json(report)
    assert from_json("".join(pieces)) == report


def test_a_child_reaped_elsewhere_has_its_work_done_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGCHLD ignored (the kernel reaps the child): the files are written here, no error."""
    import signal

    parent = _logged_writes(monkeypatch, tmp_path / "log")
    before = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        paths = write(sample_report(), ["json", "csv"], tmp_path / "out")
    finally:
        signal.signal(signal.SIGCHLD, before)
    writers = [line.split()[0] for line in (tmp_path / "log").read_text().splitlines()]
    assert writers.count(str(parent)) == 13 and all(p.is_file() for p in paths)
