"""A small client of the Prometheus HTTP query API (``/api/v1/query``, ``/api/v1/query_range``),
the part that Thanos, VictoriaMetrics and Mimir serve too: auth, TLS, timeouts, retries."""

from __future__ import annotations

import base64
import logging
import math
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

from analytics.config import PrometheusSettings
from analytics.sources.base import SourceUnavailable
from analytics.sources.promanswer import QueryError, Shape, data_of
from daemonkit.settings import ConfigError

if TYPE_CHECKING:
    import httpx

# httpx (and httpcore, and trio where it is installed: 0.1-0.3 s) is imported when a client is made,
# not with this module: the commands that read no Prometheus (an embedded report, a config error)
# start without it.

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRYABLE = {429, 500, 502, 503, 504}
MAX_GET = 4000  # characters of query parameters sent in a URL; longer ones are POSTed
DOWN_HOLD = 60.0  # seconds a server given up on stays so outside report() (inside, until the next)


def redact(url: str) -> str:
    """``url`` without any ``user:password@`` (for logs and errors)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an invalid URL>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def label_value(v: str) -> str:
    """``v`` escaped for a PromQL double-quoted string (backslash, quote, newline, CR, tab)."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def rng(seconds: float) -> str:
    """A PromQL range of at least ``seconds`` (whole seconds)."""
    return f"{max(1, math.ceil(seconds))}s"


class DeadlinePassed(SourceUnavailable):
    """The report's deadline (``prometheus.deadline_seconds``) passed before its queries ended."""


class ReportTooLarge(SourceUnavailable):
    """The process grew past ``prometheus.max_report_memory_bytes`` while reading a report's answers."""


def resident_bytes() -> int | None:
    """This process' resident memory now (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    value: float  # instant queries


@dataclass(frozen=True)
class RangeSeries:
    labels: dict[str, str]
    points: list[tuple[float, float]]


class PromAPI:
    def __init__(
        self,
        s: PrometheusSettings,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``transport``: instead of the network (tests); ``clock``: monotonic seconds, for the deadline."""
        import httpx

        from analytics.sources.deadline_http import DeadlineTransport

        self.s = s
        self._clock = clock
        headers = {**s.headers, "User-Agent": "gpuledger-analytics"}  # a tenant (X-Scope-OrgID), a proxy's
        token = s.bearer_token.get_secret_value() if s.bearer_token else None
        if s.bearer_token_file is not None:
            try:
                token = s.bearer_token_file.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as e:
                why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
                raise ConfigError(f"prometheus.bearer_token_file: cannot read {s.bearer_token_file}: {why}") from None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        auth = None
        secrets = [token or ""]
        if s.username is not None and s.password is not None:
            auth = httpx.BasicAuth(s.username, s.password.get_secret_value())
            basic = f"{s.username}:{s.password.get_secret_value()}".encode()
            secrets += [s.password.get_secret_value(), base64.b64encode(basic).decode()]
        self._secrets = sorted({x for x in secrets if x}, key=len, reverse=True)
        verify: bool | ssl.SSLContext = s.verify_tls
        if s.ca_file:
            try:
                verify = ssl.create_default_context(cafile=str(s.ca_file))
            except (OSError, ssl.SSLError) as e:
                why = f"not a PEM CA bundle ({e.reason or e})" if isinstance(e, ssl.SSLError) else e.strerror or str(e)
                raise ConfigError(f"prometheus.ca_file: cannot load {s.ca_file}: {why}") from None
        self.http = httpx.Client(
            base_url=s.url,
            headers=headers,
            auth=auth,
            timeout=s.timeout,
            transport=transport or DeadlineTransport(verify, self._left),
        )
        self.queries = 0
        self._state = threading.Condition()  # guards the counts, the down mark and the deadline
        self._fails = 0  # consecutive failed attempts, all queries together
        self._round = 0  # one more at each failed attempt logged
        self._down: tuple[float, SourceUnavailable] | None = None  # when, and why, the server was given up on
        self._deadline: float | None = None  # monotonic; inside report()
        self._retry_at = 0.0  # monotonic: the end of the backoff after the last failed attempt
        self._reading = 0  # bytes of the answers being read now, all queries together
        self._readers = 0  # answers being read now
        self._waiting = 0  # of them, waiting for the others to finish (over max_response_bytes together)

    def close(self) -> None:
        self.http.close()

    def query(self, expr: str, at: float) -> list[Series]:
        path = "/api/v1/query"
        data = self._get(path, {"query": expr, "time": f"{at:.3f}"})
        shape = Shape(redact(self.s.url) + path)
        return [Series(shape.metric(r, i), shape.value(r.get("value"), i)) for i, r in shape.result(data, "vector")]

    def query_many(self, queries: Sequence[tuple[str, float]]) -> list[list[Series]]:
        """Instant queries, ``concurrency`` in flight (Prometheus evaluates each on one core);
        results in order. The first failure is raised once those in flight have finished; the
        queries not yet sent are not sent."""
        return self._many(self.query, queries)

    def query_range_many(self, queries: Sequence[tuple[str, float, float, float]]) -> list[list[RangeSeries]]:
        """Range queries (expr, start, end, step), as ``query_many``."""
        return self._many(self.query_range, queries)

    def _many(self, ask: Callable[..., T], queries: Sequence[tuple[Any, ...]]) -> list[T]:
        if self.s.concurrency <= 1 or len(queries) <= 1:
            return [ask(*q) for q in queries]
        with ThreadPoolExecutor(max_workers=self.s.concurrency, thread_name_prefix="gpuledger-promql") as pool:
            futures = [pool.submit(ask, *q) for q in queries]

            def stop_on_failure(done: Future[T]) -> None:
                if not done.cancelled() and done.exception() is not None:
                    pool.shutdown(wait=False, cancel_futures=True)  # the queries queued behind it

            for f in futures:
                f.add_done_callback(stop_on_failure)
            return [f.result() for f in futures]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[RangeSeries]:
        data = self._get(
            "/api/v1/query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        )
        shape = Shape(redact(self.s.url) + "/api/v1/query_range")
        out = []
        for i, r in shape.result(data, "matrix"):
            values = r.get("values")
            if not isinstance(values, list):
                shape.wrong(f"result[{i}].values is not a list")
            out.append(
                RangeSeries(
                    shape.metric(r, i), [shape.point(p, f"result[{i}].values[{j}]") for j, p in enumerate(values)]
                )
            )
        return out

    @contextmanager
    def report(self) -> Iterator[None]:
        """One report's queries: they end by ``deadline_seconds`` from now, and a server found down
        before (an earlier report) is asked again."""
        with self._state:
            self._down = None
            self._fails = 0
            self._deadline = self._clock() + self.s.deadline_seconds
        try:
            yield
        finally:
            with self._state:
                self._deadline = None

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """One query, retried with backoff. The failures of the queries in flight together are one
        attempt (one log line); once the server is given up on, or the report's deadline has
        passed, every query left fails at once, with the same error."""
        import httpx  # loaded by __init__ already

        attempts = self.s.retries + 1
        tries = 0
        while True:
            with self._state:
                self._check()
                wait = self._retry_at - self._clock()  # a query sent during a backoff waits for its end
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
                    req = self.http.build_request("POST", path, data=params, timeout=timeout)
                else:
                    req = self.http.build_request("GET", path, params=params, timeout=timeout)
                status, body, kind = self._send(req)
            except httpx.InvalidURL as e:
                raise QueryError(f"cannot send the query: {redact(str(e))}") from None
            except httpx.HTTPError as e:
                problem = f"{type(e).__name__}: {redact(str(e))}"
                timed_out = capped and isinstance(e, httpx.TimeoutException)
            else:
                if status not in RETRYABLE:
                    with self._state:
                        self._fails = 0
                    data = data_of(redact(self.s.url) + path, status, body, kind, self._hide)
                    del body
                    self._held()
                    return data
                problem, timed_out = f"HTTP {status}", False
            tries += 1
            time.sleep(self._failed(sent_in, tries, attempts, problem, timed_out))

    def _send(self, req: httpx.Request) -> tuple[int, bytes, str]:
        """Send, and read the answer (decoded): status, body, content type. An answer over
        ``max_response_bytes`` fails; one that would take the answers being read at once past it
        waits for the others to finish (while one of them is still reading: never all waiting),
        so together they stay within it, give or take the part-read answers of those waiting."""
        limit = self.s.max_response_bytes
        r = self.http.send(req, stream=True)
        size = 0
        with self._state:
            self._readers += 1
        try:
            if r.status_code in RETRYABLE:
                return r.status_code, b"", ""
            declared = r.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit and "content-encoding" not in r.headers:
                self._too_big(req, f"{int(declared):,} bytes declared")
            chunks = []
            for chunk in r.iter_bytes():  # each read ends by the deadline (_DeadlineTransport); the loop too
                if size + len(chunk) > limit:
                    self._too_big(req, f"more than {limit:,} bytes")
                with self._state:
                    self._check()  # the deadline passed, or another query gave the server up: stop reading
                    while (  # over, with the others' bytes: wait while another still reads
                        self._reading + len(chunk) > limit
                        and self._reading > size
                        and self._readers - self._waiting > 1
                    ):
                        self._waiting += 1
                        self._state.wait(timeout=0.5)
                        self._waiting -= 1
                        self._check()
                    self._reading += len(chunk)
                size += len(chunk)
                chunks.append(chunk)
            return r.status_code, b"".join(chunks), r.headers.get("content-type", "")
        finally:
            with self._state:
                self._reading -= size
                self._readers -= 1
                self._state.notify_all()
            r.close()

    def _hide(self, text: str) -> str:
        """``text`` without the credentials this client sends: a gateway that refuses them may quote
        them back (vmauth: 'cannot find the provided auth token "Basic ..."')."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _too_big(self, req: httpx.Request, size: str) -> NoReturn:
        raise QueryError(
            f"the answer from {redact(self.s.url)}{req.url.path} is too large ({size} read at once; the limit "
            f"is prometheus.max_response_bytes = {self.s.max_response_bytes:,}): narrow the query or raise the limit"
        )

    def _check(self) -> None:
        """Raise if the server was given up on or the deadline passed (``_state`` held)."""
        if self._down is not None and (self._deadline is not None or self._clock() - self._down[0] < DOWN_HOLD):
            raise _again(self._down[1])
        if self._deadline is not None and self._clock() >= self._deadline:
            self._give_up(DeadlinePassed(f"prometheus {self.s.url}: {self._over()}"))

    def _held(self) -> None:
        """Give the report up once this process holds more than ``max_report_memory_bytes``: the
        answers it read so far, parsed, and what the report built of them (each answer alone is
        capped by ``max_response_bytes``; this caps them all together)."""
        limit = self.s.max_report_memory_bytes
        held = resident_bytes()
        if held is None or held <= limit:
            return
        with self._state:
            self._give_up(
                ReportTooLarge(
                    f"prometheus {redact(self.s.url)}: the report holds {held / 2**20:,.0f} MiB after {self.queries} "
                    f"queries, over prometheus.max_report_memory_bytes = {limit:,}: narrow it (--days, "
                    "[analytics] group_by) or raise the limit"
                )
            )

    def _over(self) -> str:
        return f"the report's deadline of {self.s.deadline_seconds:g} s passed (prometheus.deadline_seconds)"

    def _give_up(self, e: SourceUnavailable) -> NoReturn:
        self._down = (self._clock(), e)
        raise e

    def _left(self) -> float | None:
        """Seconds left before the report's deadline (None outside report())."""
        with self._state:
            deadline = self._deadline
        return None if deadline is None else deadline - self._clock()

    def _timeout(self) -> tuple[httpx.Timeout, bool]:
        """This query's timeouts, capped by the time left before the deadline (and whether they are)."""
        import httpx  # loaded by __init__ already

        read, connect = self.s.timeout, min(self.s.connect_timeout, self.s.timeout)
        if self._deadline is None:
            return httpx.Timeout(read, connect=connect), False
        left = max(0.001, self._deadline - self._clock())
        return httpx.Timeout(min(read, left), connect=min(connect, left)), left < read

    def _failed(self, sent_in: int, tries: int, attempts: int, problem: str, timed_out: bool) -> float:
        """Count a failed attempt; the seconds to wait before the next, or raise when it is over."""
        with self._state:
            if self._down is not None:
                raise _again(self._down[1])
            if timed_out or (self._deadline is not None and self._clock() >= self._deadline):
                self._give_up(DeadlinePassed(f"prometheus {self.s.url}: {self._over()} ({problem})"))
            if sent_in == self._round:  # the first of the queries sent together to fail: one line for all
                self._round += 1
                self._fails += 1
                log.warning("prometheus %s (attempt %d/%d): %s", self.s.url, self._fails, attempts, problem)
                pause = min(8.0, 0.5 * 2.0 ** (self._fails - 1))
                if self._deadline is not None:
                    pause = min(pause, self._deadline - self._clock())
                self._retry_at = self._clock() + pause
            if self._fails >= attempts or tries >= attempts:
                n = max(self._fails, tries)
                self._give_up(SourceUnavailable(f"prometheus {self.s.url}: no answer after {n} attempts ({problem})"))
            return max(0.0, self._retry_at - self._clock())


def _again(e: SourceUnavailable) -> SourceUnavailable:
    """The same error, a new instance (each thread raises its own)."""
    return type(e)(str(e))
