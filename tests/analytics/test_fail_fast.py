"""A Prometheus that is down or slow fails the report fast, and says so once: one line per
attempt (all queries in flight together are one attempt), one error naming the URL without its
password, and an overall deadline whatever the server does."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from analytics.config import PrometheusSettings
from analytics.sources import SourceUnavailable
from analytics.sources.promapi import PromAPI
from tests.support.http import free_port
from tests.support.processes import run_cli

EMPTY = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


def _report(url: str, tmp: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    t0 = time.monotonic()
    r = run_cli("report", "--source", "prometheus", "--prometheus-url", url, "--out", tmp, env=env, timeout=120)
    print(f"report: exit {r.returncode} after {time.monotonic() - t0:.1f} s")
    lines = r.stderr.splitlines()
    print("\n".join(lines))
    return r.returncode, lines, r.stdout + r.stderr


@pytest.mark.integration
def test_an_unreachable_server_fails_once_naming_the_url_without_its_password(tmp_path: Path) -> None:
    port = free_port()
    code, lines, out = _report(f"http://reports:s3cret@127.0.0.1:{port}", str(tmp_path))
    assert code == 1
    warnings = [line for line in lines if "WARNING" in line]
    assert len(warnings) == 4  # the default 3 retries: one line per attempt, not one per query (252 before)
    assert [f"attempt {n}/4" in w for n, w in enumerate(warnings, 1)] == [True] * 4
    errors = [line for line in lines if "source unavailable" in line]
    assert len(errors) == 1 and f"http://127.0.0.1:{port}:" in errors[0] and "no answer after 4 attempts" in errors[0]
    assert "s3cret" not in out and "reports:" not in out


class _Slow(BaseHTTPRequestHandler):
    """Answers every query with an empty result, a second late."""

    served: list[str] = []  # noqa: RUF012 - one test uses the class at a time

    def do_GET(self) -> None:
        type(self).served.append(self.path)
        time.sleep(1.0)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(EMPTY)))
            self.end_headers()
            self.wfile.write(EMPTY)
        except OSError:  # the client gave up (its deadline)
            pass

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def slow_server() -> Iterator[tuple[str, list[str]]]:
    _Slow.served = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Slow.served
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_a_slow_server_is_stopped_by_the_reports_deadline(slow_server: tuple[str, list[str]], tmp_path: Path) -> None:
    url, served = slow_server
    code, lines, _ = _report(url, str(tmp_path), env={"GPULEDGER_PROMETHEUS__DEADLINE_SECONDS": "2"})
    assert code == 1
    [error] = [line for line in lines if "source unavailable" in line]
    assert f"prometheus {url}: the report's deadline of 2 s passed" in error
    assert not [line for line in lines if "WARNING" in line]  # a deadline is no retry
    # a whole report is over a hundred queries (well over a minute at a second each, 4 at once);
    # the deadline stopped it after a few rounds
    print(f"{len(served)} queries served")
    assert 1 <= len(served) <= 16


def test_queries_in_flight_together_fail_as_one_attempt(caplog: pytest.LogCaptureFixture) -> None:
    sent: list[str] = []

    def down(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        raise httpx.ConnectError("refused", request=request)

    s = PrometheusSettings(url="http://reports:s3cret@prometheus.invalid", retries=2, concurrency=4)
    api = PromAPI(s, transport=httpx.MockTransport(down))
    caplog.set_level(logging.WARNING, logger="analytics.sources.promapi")
    with api.report(), pytest.raises(SourceUnavailable, match="no answer after 3 attempts") as e:
        api.query_many([(f"q{i}", 0.0) for i in range(40)])
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3, warnings  # one per attempt (not 3 per query: 120)
    assert len(sent) <= 3 * 4  # once given up on, the queries left are not sent
    assert "s3cret" not in str(e.value) + "".join(warnings) and "http://prometheus.invalid" in str(e.value)
    before = len(sent)
    with pytest.raises(SourceUnavailable):  # still given up on: not asked
        api.query("up", 0)
    assert len(sent) == before
    with api.report(), pytest.raises(SourceUnavailable):  # the next report asks the server again
        api.query("up", 0)
    assert len(sent) == before + 3


def test_credentials_in_the_url_become_username_and_password() -> None:
    s = PrometheusSettings(url="https://reports:s%40cret@prom.example:9090/prefix/")
    assert (s.url, s.username) == ("https://prom.example:9090/prefix", "reports")
    assert s.password is not None and s.password.get_secret_value() == "s@cret"
    assert "s@cret" not in repr(s)
    with pytest.raises(ValueError, match="credentials both in url and in username/password"):
        PrometheusSettings(url="http://a:b@prom:9090", username="c", password="d")
