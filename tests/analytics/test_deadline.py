"""``prometheus.deadline_seconds`` bounds the whole report, answers' bodies included: a server that
sends a byte now and then never trips httpx's timeouts (they are per read), and kept a report for
54 s past a 15 s deadline. Each test's server trickles forever, so a read that ignored the deadline
would never end: a test's guard is then what stops it, and nothing here times the machine."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from analytics.config import PrometheusSettings
from analytics.daemon import Analytics
from analytics.sources.promapi import DeadlinePassed, PromAPI
from tests.support.processes import run_cli
from tests.support.settings import H200_COST, analytics_settings

GUARD = 60.0  # seconds a call may take before the test calls it a hang (the deadlines here are 0.5-1 s)
HEAD = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"x":"'


@dataclass
class Trickle:
    """A Prometheus on loopback that answers every query a byte every ``gap`` seconds, endlessly
    (a chunked body, or with ``in_headers`` a header line, that never ends). ``gone``
    is set once a client closed a connection it was being sent on."""

    in_headers: bool = False
    gap: float = 0.05
    requests: int = 0
    gone: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        trickle = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                trickle.requests += 1
                if trickle.in_headers:
                    first, filler = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: ", b"a"
                else:
                    first = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    first, filler = first + b"%x\r\n%s\r\n" % (len(HEAD), HEAD), b"1\r\na\r\n"
                try:
                    self.wfile.write(first)
                    while not trickle.stop.wait(trickle.gap):
                        self.wfile.write(filler)
                except OSError:  # the client closed the connection: it stopped reading
                    trickle.gone.set()
                self.close_connection = True

            do_POST = do_GET

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def trickle() -> Iterator[Trickle]:
    t = Trickle()
    yield t
    t.close()


@pytest.fixture
def trickle_headers() -> Iterator[Trickle]:
    t = Trickle(in_headers=True)
    yield t
    t.close()


def _within_guard(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """``call``'s result or exception; the test fails if it has not returned after ``GUARD`` s."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(GUARD)
    assert not t.is_alive(), "still reading after the guard: the deadline did not bound the answer's reads"
    return box.get("value"), box.get("error")


def _api(url: str, deadline: float, **kw: Any) -> PromAPI:
    # a per-read timeout far beyond the deadline: only the deadline can end these reads
    return PromAPI(PrometheusSettings(url=url, timeout=300, deadline_seconds=deadline, retries=3), **kw)


def test_the_body_loop_stops_at_the_deadline_by_the_clock_it_is_given() -> None:
    """Deterministic: each byte of the answer takes 2 s of the API's (fake) clock; the deadline is 15 s."""
    now = [0.0]
    produced: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        def body() -> Iterator[bytes]:
            yield HEAD
            for i in range(10_000):
                now[0] += 2.0
                produced.append(i)
                yield b"a"

        return httpx.Response(200, headers={"Content-Type": "application/json"}, content=body())

    api = _api("http://prometheus.invalid", 15, transport=httpx.MockTransport(answer), clock=lambda: now[0])
    with api.report(), pytest.raises(DeadlinePassed) as e:
        api.query("up", 0)
    assert str(e.value) == (
        "prometheus http://prometheus.invalid: the report's deadline of 15 s passed (prometheus.deadline_seconds)"
    )
    assert len(produced) == 8  # the 8th byte came at 16 s: the loop stopped there, not at the 10,000th
    assert api._reading == 0  # what it had read is let go
    with api.report(), pytest.raises(DeadlinePassed):  # a new report has its own deadline
        api.query("up", 0)
    assert len(produced) == 16


def test_a_body_sent_a_byte_at_a_time_ends_at_the_deadline(trickle: Trickle) -> None:
    api = _api(trickle.url, 0.5)
    with api.report():
        _, error = _within_guard(lambda: api.query("up", 0))
    assert isinstance(error, DeadlinePassed), error
    assert f"prometheus {trickle.url}: the report's deadline of 0.5 s passed (prometheus.deadline_seconds)" in str(
        error
    )
    assert trickle.requests == 1  # a deadline is no retry
    assert trickle.gone.wait(GUARD), "the client kept the connection: the body loop did not stop"


def test_headers_sent_a_byte_at_a_time_end_at_the_deadline(trickle_headers: Trickle) -> None:
    api = _api(trickle_headers.url, 0.5)
    with api.report():
        _, error = _within_guard(lambda: api.query_many([(f"q{i}", 0.0) for i in range(8)]))
    assert isinstance(error, DeadlinePassed), error
    assert "the report's deadline of 0.5 s passed" in str(error)
    assert trickle_headers.requests <= 4  # the queries in flight; those queued behind them were not sent
    assert trickle_headers.gone.wait(GUARD)


def test_the_daemons_refresh_counts_the_deadline_as_an_error(
    trickle: Trickle, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = analytics_settings(
        analytics={"source": "prometheus", "reports_dir": tmp_path / "reports"},
        prometheus={"url": trickle.url, "timeout": 300, "deadline_seconds": 0.5},
        cost=H200_COST,
    )
    a = Analytics(s)
    caplog.set_level(logging.ERROR, logger="gpuledger.analytics")
    try:
        report, error = _within_guard(a.refresh)
    finally:
        a.server.server_close()
        a.source.close()
    assert error is None and report is None
    runs, last_ok = a.run_state()
    assert runs.get(("refresh", "error")) == 1 and "refresh" not in last_ok
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("rolling 7-day refresh: source unavailable: ") and "deadline of 0.5 s passed" in line


@pytest.mark.integration
def test_the_report_fails_in_one_line_naming_the_deadline(trickle: Trickle, tmp_path: Path) -> None:
    r = run_cli(
        "report",
        "--source",
        "prometheus",
        "--prometheus-url",
        trickle.url,
        "--out",
        str(tmp_path),
        env={"GPULEDGER_PROMETHEUS__DEADLINE_SECONDS": "1", "GPULEDGER_PROMETHEUS__TIMEOUT": "300"},
        timeout=GUARD,
    )
    out = r.stdout + r.stderr
    print(out)
    assert r.returncode == 1
    assert "Traceback" not in out
    [line] = [line for line in r.stderr.splitlines() if "source unavailable" in line]
    assert f"prometheus {trickle.url}: the report's deadline of 1 s passed (prometheus.deadline_seconds)" in line
    assert not [line for line in r.stderr.splitlines() if "WARNING" in line]  # no retries
    assert not list(tmp_path.iterdir())  # no report
