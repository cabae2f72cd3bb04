"""A small client of the Prometheus HTTP query API (``/api/v1/query``, ``/api/v1/query_range``),
the part that Thanos, VictoriaMetrics and Mimir serve too: auth, TLS, timeouts, retries."""

from __future__ import annotations

import logging
import math
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import httpx

from analytics.config import PrometheusSettings
from analytics.sources.base import SourceUnavailable

log = logging.getLogger(__name__)

RETRYABLE = {429, 500, 502, 503, 504}
MAX_GET = 4000  # characters of query parameters sent in a URL; longer ones are POSTed
DOWN_HOLD = 60.0  # seconds a server given up on stays so outside report() (inside, until the next)


def rng(seconds: float) -> str:
    """A PromQL range of at least ``seconds`` (whole seconds)."""
    return f"{max(1, math.ceil(seconds))}s"


class QueryError(RuntimeError):
    """The server answered, and refused this query (bad PromQL, too much data, ...)."""


class DeadlinePassed(SourceUnavailable):
    """The report's deadline (``prometheus.deadline_seconds``) passed before its queries ended."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    value: float  # instant queries


@dataclass(frozen=True)
class RangeSeries:
    labels: dict[str, str]
    points: list[tuple[float, float]]


class PromAPI:
    def __init__(self, s: PrometheusSettings, transport: httpx.BaseTransport | None = None) -> None:
        self.s = s
        headers = {"User-Agent": "gpuledger-analytics"}
        token = s.bearer_token.get_secret_value() if s.bearer_token else None
        if s.bearer_token_file is not None:
            token = s.bearer_token_file.read_text().strip()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        auth = None
        if s.username is not None and s.password is not None:
            auth = httpx.BasicAuth(s.username, s.password.get_secret_value())
        verify: bool | ssl.SSLContext = ssl.create_default_context(cafile=str(s.ca_file)) if s.ca_file else s.verify_tls
        self.http = httpx.Client(
            base_url=s.url, headers=headers, auth=auth, verify=verify, timeout=s.timeout, transport=transport
        )
        self.queries = 0
        self._state = threading.Lock()  # guards the counts, the down mark and the deadline
        self._fails = 0  # consecutive failed attempts, all queries together
        self._round = 0  # one more at each failed attempt logged
        self._down: tuple[float, SourceUnavailable] | None = None  # when, and why, the server was given up on
        self._deadline: float | None = None  # monotonic; inside report()
        self._retry_at = 0.0  # monotonic: the end of the backoff after the last failed attempt

    def close(self) -> None:
        self.http.close()

    def query(self, expr: str, at: float) -> list[Series]:
        data = self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        out = []
        for r in data.get("result", []):
            if data.get("resultType") == "vector":
                out.append(Series(r["metric"], float(r["value"][1])))
        return out

    def query_many(self, queries: Sequence[tuple[str, float]]) -> list[list[Series]]:
        """Instant queries, ``concurrency`` in flight (Prometheus evaluates each on one core);
        results in order. The first failure is raised once the others have finished."""
        if self.s.concurrency <= 1 or len(queries) <= 1:
            return [self.query(expr, at) for expr, at in queries]
        with ThreadPoolExecutor(max_workers=self.s.concurrency, thread_name_prefix="gpuledger-promql") as pool:
            futures = [pool.submit(self.query, expr, at) for expr, at in queries]
            return [f.result() for f in futures]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[RangeSeries]:
        data = self._get(
            "/api/v1/query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        )
        out = []
        for r in data.get("result", []):
            out.append(RangeSeries(r["metric"], [(float(t), float(v)) for t, v in r["values"]]))
        return out

    @contextmanager
    def report(self) -> Iterator[None]:
        """One report's queries: they end by ``deadline_seconds`` from now, and a server found down
        before (an earlier report) is asked again."""
        with self._state:
            self._down = None
            self._fails = 0
            self._deadline = time.monotonic() + self.s.deadline_seconds
        try:
            yield
        finally:
            with self._state:
                self._deadline = None

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """One query, retried with backoff. The failures of the queries in flight together are one
        attempt (one log line); once the server is given up on, or the report's deadline has
        passed, every query left fails at once, with the same error."""
        attempts = self.s.retries + 1
        tries = 0
        while True:
            with self._state:
                self._check()
                wait = self._retry_at - time.monotonic()  # a query sent during a backoff waits for its end
                if wait <= 0:
                    self.queries += 1
                    sent_in = self._round
                    timeout, capped = self._timeout()
            if wait > 0:
                time.sleep(wait)
                continue
            try:
                # long queries (a regex over many GPUs) go as a form POST, which every
                # Prometheus-compatible server takes; short ones as GET, which caches can keep
                long = sum(len(v) for v in params.values()) > MAX_GET
                if long:
                    r = self.http.post(path, data=params, timeout=timeout)
                else:
                    r = self.http.get(path, params=params, timeout=timeout)
            except httpx.InvalidURL as e:
                raise QueryError(f"cannot send the query: {e}") from None
            except httpx.HTTPError as e:
                problem = f"{type(e).__name__}: {e}"
                timed_out = capped and isinstance(e, httpx.TimeoutException)
            else:
                if r.status_code not in RETRYABLE:
                    with self._state:
                        self._fails = 0
                    return _data(r)
                problem, timed_out = f"HTTP {r.status_code}", False
            tries += 1
            time.sleep(self._failed(sent_in, tries, attempts, problem, timed_out))

    def _check(self) -> None:
        """Raise if the server was given up on or the deadline passed (``_state`` held)."""
        if self._down is not None and (self._deadline is not None or time.monotonic() - self._down[0] < DOWN_HOLD):
            raise _again(self._down[1])
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._give_up(DeadlinePassed(f"prometheus {self.s.url}: {self._over()}"))

    def _over(self) -> str:
        return f"the report's deadline of {self.s.deadline_seconds:g} s passed (prometheus.deadline_seconds)"

    def _give_up(self, e: SourceUnavailable) -> NoReturn:
        self._down = (time.monotonic(), e)
        raise e

    def _timeout(self) -> tuple[httpx.Timeout, bool]:
        """This query's timeouts, capped by the time left before the deadline (and whether they are)."""
        read, connect = self.s.timeout, min(self.s.connect_timeout, self.s.timeout)
        if self._deadline is None:
            return httpx.Timeout(read, connect=connect), False
        left = max(0.001, self._deadline - time.monotonic())
        return httpx.Timeout(min(read, left), connect=min(connect, left)), left < read

    def _failed(self, sent_in: int, tries: int, attempts: int, problem: str, timed_out: bool) -> float:
        """Count a failed attempt; the seconds to wait before the next, or raise when it is over."""
        with self._state:
            if self._down is not None:
                raise _again(self._down[1])
            if timed_out or (self._deadline is not None and time.monotonic() >= self._deadline):
                self._give_up(DeadlinePassed(f"prometheus {self.s.url}: {self._over()} ({problem})"))
            if sent_in == self._round:  # the first of the queries sent together to fail: one line for all
                self._round += 1
                self._fails += 1
                log.warning("prometheus %s (attempt %d/%d): %s", self.s.url, self._fails, attempts, problem)
                pause = min(8.0, 0.5 * 2.0 ** (self._fails - 1))
                if self._deadline is not None:
                    pause = min(pause, self._deadline - time.monotonic())
                self._retry_at = time.monotonic() + pause
            if self._fails >= attempts or tries >= attempts:
                n = max(self._fails, tries)
                self._give_up(SourceUnavailable(f"prometheus {self.s.url}: no answer after {n} attempts ({problem})"))
            return max(0.0, self._retry_at - time.monotonic())


def _again(e: SourceUnavailable) -> SourceUnavailable:
    """The same error, a new instance (each thread raises its own)."""
    return type(e)(str(e))


def _data(r: httpx.Response) -> dict[str, Any]:
    try:
        body = r.json()
    except ValueError:
        raise QueryError(f"HTTP {r.status_code}: not JSON: {r.text[:200]}") from None
    if r.status_code != 200 or body.get("status") != "success":
        raise QueryError(f"{body.get('errorType', r.status_code)}: {body.get('error', r.text[:200])}")
    result: dict[str, Any] = body["data"]
    return result
