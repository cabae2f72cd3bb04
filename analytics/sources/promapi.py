"""A small client of the Prometheus HTTP query API (``/api/v1/query``, ``/api/v1/query_range``),
the part that Thanos, VictoriaMetrics and Mimir serve too: auth, TLS, timeouts, retries."""

from __future__ import annotations

import logging
import math
import ssl
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from analytics.config import PrometheusSettings
from analytics.sources.base import SourceUnavailable

log = logging.getLogger(__name__)

RETRYABLE = {429, 500, 502, 503, 504}
MAX_GET = 4000  # characters of query parameters sent in a URL; longer ones are POSTed


def rng(seconds: float) -> str:
    """A PromQL range of at least ``seconds`` (whole seconds)."""
    return f"{max(1, math.ceil(seconds))}s"


class QueryError(RuntimeError):
    """The server answered, and refused this query (bad PromQL, too much data, ...)."""


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
        self._count = threading.Lock()

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

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        attempts = self.s.retries + 1
        last = ""
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)))
            with self._count:
                self.queries += 1
            try:
                # long queries (a regex over many GPUs) go as a form POST, which every
                # Prometheus-compatible server takes; short ones as GET, which caches can keep
                long = sum(len(v) for v in params.values()) > MAX_GET
                r = self.http.post(path, data=params) if long else self.http.get(path, params=params)
            except httpx.InvalidURL as e:
                raise QueryError(f"cannot send the query: {e}") from None
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
                log.warning("prometheus %s (attempt %d/%d): %s", self.s.url, attempt + 1, attempts, last)
                continue
            if r.status_code in RETRYABLE:
                last = f"HTTP {r.status_code}"
                log.warning("prometheus %s (attempt %d/%d): %s", self.s.url, attempt + 1, attempts, last)
                continue
            try:
                body = r.json()
            except ValueError:
                raise QueryError(f"HTTP {r.status_code}: not JSON: {r.text[:200]}") from None
            if r.status_code != 200 or body.get("status") != "success":
                raise QueryError(f"{body.get('errorType', r.status_code)}: {body.get('error', r.text[:200])}")
            result: dict[str, Any] = body["data"]
            return result
        raise SourceUnavailable(f"prometheus {self.s.url}: no answer after {attempts} attempts ({last})")
