"""/reports/ serves the report files the daemon wrote and nothing else: a real analytics daemon over
HTTP, with symlinks, a FIFO, stray folders and files planted in its reports folder and hostile paths
sent byte for byte. Each refusal is a 404 and one short, escaped log line; never a traceback."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics import synthetic
from analytics.config import FullSettings
from analytics.daemon import Analytics
from analytics.report import served, write
from analytics.report.csvio import TABLES
from domain.week import Window, iso_week
from tests.support.clock import ANCHOR, clock_now
from tests.support.reports import sample_report
from tests.support.wait import wait_until

TZ = "UTC"


def _get(url: str, target: bytes) -> tuple[int | None, dict[str, str], bytes]:
    """GET ``target`` exactly as given; (None, ...) when the daemon closed without an answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    if not data:
        return None, {}, b""
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status.split(" ")[1]), headers, body


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Analytics, str]]:
    tmp = tmp_path_factory.mktemp("serving")
    now = clock_now() // 60 * 60
    window = Window(now - 15 * 86400, now, "test", TZ)
    fleet = synthetic.generate(window, hosts=1, gpus_per_host=2, seed=3, anchor=ANCHOR)
    synthetic.write_history(fleet, tmp / "history.db")
    settings = FullSettings(
        analytics={
            "source": "embedded",
            "history": tmp / "history.db",
            "reports_dir": tmp / "reports",
            "timezone": TZ,
            "listen": "127.0.0.1:0",
        }
    )
    a = Analytics(settings, clock=clock_now)
    a.start()
    try:
        assert wait_until(lambda: "week" in a.reports(), 60)
        label = a.reports()["week"].week
        _plant(tmp / "reports", label)
        yield a, label
    finally:
        a.stop()


def _plant(r: Path, label: str) -> None:
    csvs = r / f"gpuledger-{label}-csv"
    (r / "gpuledger-passwd.json").symlink_to("/etc/passwd")
    (r / "gpuledger-passwd.html").symlink_to("/etc/passwd")
    (r / "gpuledger-alias.html").symlink_to(f"gpuledger-{label}.html")  # even to a real report
    (r / "gpuledger-linked-csv").symlink_to(csvs, target_is_directory=True)
    (r / "gpuledger-fake-csv").mkdir()
    (r / "gpuledger-fake-csv" / "costs.csv").symlink_to("/etc/passwd")
    (r / "sub").mkdir()
    (r / "sub" / "x.json").write_text("{}")
    (r / f"gpuledger-{label}-extra").mkdir()
    (r / f"gpuledger-{label}-extra" / "costs.csv").write_text("a\n")
    (csvs / "other.csv").write_text("a\n")
    (csvs / ".hidden.csv").write_text("a\n")
    (csvs / f"gpuledger-{label}.json").write_text("{}")
    (r / "gpuledger-dir.json").mkdir()
    (r / "gpuledger-file-csv").write_text("not a folder")
    os.mkfifo(r / "gpuledger-fifo.json")
    os.mkfifo(csvs / "daily.csv.fifo")
    (r / "notes.txt").write_text("x")
    (r / "gpuledger-x.db").write_text("x")
    (r.parent / "secret.json").write_text('{"secret": 1}')


REFUSED = [
    b"/reports/gpuledger-passwd.json",
    b"/reports/gpuledger-passwd.html",
    b"/reports/gpuledger-alias.html",
    b"/reports/gpuledger-linked-csv/costs.csv",
    b"/reports/gpuledger-fake-csv/costs.csv",
    b"/reports/sub/x.json",
    b"/reports/gpuledger-{label}-extra/costs.csv",
    b"/reports/gpuledger-{label}-csv/other.csv",
    b"/reports/gpuledger-{label}-csv/.hidden.csv",
    b"/reports/gpuledger-{label}-csv/gpuledger-{label}.json",
    b"/reports/gpuledger-{label}-csv/daily.csv.fifo",
    b"/reports/gpuledger-{label}-csv/costs.csv/x",
    b"/reports/gpuledger-{label}-csv/",
    b"/reports/gpuledger-{label}-csv",
    b"/reports/gpuledger-dir.json",
    b"/reports/gpuledger-file-csv/costs.csv",
    b"/reports/gpuledger-fifo.json",
    b"/reports/notes.txt",
    b"/reports/gpuledger-x.db",
    b"/reports/gpuledger-nothere.json",
    b"/reports/" + b"a" * 300 + b".json",
    b"/reports/gpuledger-" + b"a" * 300 + b".json",
    b"/reports/gpuledger-" + b"a" * 5000 + b".json",
    b"/reports/gpuledger-{label}-csv/" + b"b" * 300 + b".csv",
    b"/reports/../secret.json",
    b"/reports/%2e%2e/secret.json",
    b"/reports/..%2fsecret.json",
    b"/reports/gpuledger-..json",
    b"/reports/gpuledger-{label}%2ehtml",
    b"/reports/gpuledger-%00.json",
    b"/reports/gpuledger-\x00.json",
    b"/reports/gpuledger-\x1b[31mred.json",
    b"/reports/gpuledger-\xff\xfe.json",
    b"/reports//etc/passwd",
    b"/reports/",
    b"/reports/.",
]


@pytest.mark.parametrize("raw", REFUSED, ids=lambda r: ascii(r[:60]))
def test_anything_but_a_report_file_is_a_404_and_one_short_line(
    daemon: tuple[Analytics, str], raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    a, label = daemon
    target = raw.replace(b"{label}", label.encode())
    caplog.set_level(logging.INFO, logger="gpuledger.analytics")
    caplog.clear()
    status, _, body = _get(a.url, target)
    assert status == 404 and b"root:" not in body and b"secret" not in body
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1
    line = refused[0].getMessage()
    assert len(line) < 200 and line.isascii() and line.isprintable()
    assert not any(r.exc_info for r in caplog.records) and not any(r.levelno >= logging.ERROR for r in caplog.records)


@pytest.mark.parametrize(
    ("name", "ctype"),
    [("{label}.html", "text/html"), ("{label}.json", "application/json"), ("{label}.md", "text/markdown")]
    + [(f"{{label}}-csv/{t}.csv", "text/csv") for t in TABLES],
)
def test_every_file_the_daemon_wrote_is_served(
    daemon: tuple[Analytics, str], name: str, ctype: str, caplog: pytest.LogCaptureFixture
) -> None:
    a, label = daemon
    rel = "gpuledger-" + name.replace("{label}", label)
    caplog.set_level(logging.INFO, logger="gpuledger.analytics")
    status, headers, body = _get(a.url, f"/reports/{rel}".encode())
    assert status == 200 and headers["Content-Type"].startswith(ctype)
    assert body == (a.reports_dir / rel).read_bytes()
    assert not [r for r in caplog.records if "refused" in r.getMessage()]


def test_the_landing_page_lists_only_the_daemons_files(daemon: tuple[Analytics, str]) -> None:
    a, label = daemon
    status, _, body = _get(a.url, b"/")
    assert status == 200 and f"gpuledger-{label}.html".encode() in body
    for planted in (b"gpuledger-passwd", b"gpuledger-alias", b"gpuledger-fifo", b"gpuledger-dir"):
        assert planted not in body


@pytest.mark.parametrize("label", ["2026-W48", "last-7d", "last-0.5d", "last-1e+09d", "rolling-7d", "x/../../y"])
def test_every_name_the_writer_makes_is_a_name_served(tmp_path: Path, label: str) -> None:
    report = sample_report(hostile=False)
    report = dataclasses.replace(report, week=label)
    for path in write(report, ["html", "json", "md", "csv"], tmp_path):
        rel = path.relative_to(tmp_path).as_posix()
        got = served.read(tmp_path, rel)
        assert isinstance(got, tuple) and got[0] == path.read_bytes(), rel
    assert served.listing(tmp_path) == sorted(p.name for p in tmp_path.iterdir() if p.is_file())


def test_read_refuses_without_opening_what_is_not_a_regular_file(tmp_path: Path) -> None:
    week = iso_week("2026-W48").label
    write(sample_report(hostile=False), ["csv"], tmp_path)
    os.mkfifo(tmp_path / f"gpuledger-{week}.md")  # opening it for reading would block
    (tmp_path / f"gpuledger-{week}.json").symlink_to(tmp_path / f"gpuledger-{week}-csv" / "costs.csv")
    assert served.read(tmp_path, f"gpuledger-{week}.md") == "not a regular file"
    assert served.read(tmp_path, f"gpuledger-{week}.json") == "a symlink"
    assert served.read(tmp_path / "missing", f"gpuledger-{week}.html") == "no such file or directory"
    assert served.read(tmp_path, "gpuledger-" + "a" * 300 + ".json") == "not a report file name"
    assert served.listing(tmp_path) == []  # neither the FIFO nor the symlink is listed
    assert served.listing(tmp_path / "missing") == []


def test_a_refused_path_is_logged_escaped_and_short() -> None:
    assert served.shown("gpuledger-\x1b[31m\x00.json") == "'gpuledger-\\x1b[31m\\x00.json'"
    long = served.shown("a" * 5000)
    assert len(long) < 100 and long.endswith("(5000 characters)")
