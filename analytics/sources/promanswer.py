"""What an answer of the Prometheus HTTP API must be, checked part by part as the queries read
it (``analytics.sources.promapi`` sends them): each failure is one ``QueryError`` naming the URL and
what was wrong, the server's own words in it without the credentials it was sent."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, NoReturn

from analytics.sources.base import PartFailed


class QueryError(PartFailed):
    """The server answered, and refused this query (bad PromQL, too much data, ...)."""


def data_of(url: str, status: int, body: bytes, kind: str, hide: Callable[[str], str]) -> dict[str, Any]:
    """The ``data`` of an API answer, or one ``QueryError`` saying what was wrong with it; the
    server's own words pass through ``hide`` (they may quote the credentials they were sent)."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        what = kind.split(";")[0] or "no content type"
        raise QueryError(f"HTTP {status} from {url}: not JSON ({what}: {_excerpt(body, hide)})") from None
    if not isinstance(answer, dict):
        raise QueryError(f"HTTP {status} from {url}: not an API answer (a JSON {type(answer).__name__}, not an object)")
    if status != 200 or answer.get("status") != "success":
        error = answer.get("error")
        if not isinstance(error, str):
            got = _excerpt(json.dumps(answer.get("status")).encode(), hide)
            raise QueryError(f"HTTP {status} from {url}: status {got}, and no error message")
        etype = answer.get("errorType")
        etype = hide(etype) if isinstance(etype, str) else f"HTTP {status}"
        raise QueryError(f"{etype[:100]}: {hide(error)[:500]}")
    data = answer.get("data")
    if not isinstance(data, dict):
        raise QueryError(f"unexpected answer from {url}: 'data' is {_what(data)}, not an object")
    return data


EXCERPT_WINDOW = 1 << 16  # bytes of a body searched for secrets before its start is quoted


def _excerpt(body: bytes, hide: Callable[[str], str], n: int = 80) -> str:
    """The start of a body, printable and short, hidden before it is cut (a secret cut in two
    would not be found)."""
    text = hide(body[:EXCERPT_WINDOW].decode("utf-8", "replace"))
    more = len(text) > n or len(body) > EXCERPT_WINDOW
    text = "".join(c if c.isprintable() else " " for c in text[:n]).strip()
    return repr(text + ("..." if more else ""))


def _what(v: object) -> str:
    return "missing" if v is None else f"a {type(v).__name__}"


class Shape:
    """Checks the parts of ``data`` a query reads; each failure is one ``QueryError`` naming the URL."""

    def __init__(self, url: str) -> None:
        self.url = url  # without its credentials (``promapi.redact``)

    def wrong(self, what: str) -> NoReturn:
        raise QueryError(f"unexpected answer from {self.url}: {what}")

    def result(self, data: dict[str, Any], kind: str) -> list[tuple[int, dict[str, Any]]]:
        got = data.get("resultType")
        if got != kind:
            self.wrong(f"resultType is {got!r:.40}, expected {kind!r}")
        result = data.get("result")
        if not isinstance(result, list):
            self.wrong(f"result is {_what(result)}, not a list")
        for i, r in enumerate(result):
            if not isinstance(r, dict):
                self.wrong(f"result[{i}] is {_what(r)}, not an object")
        return list(enumerate(result))

    def metric(self, r: dict[str, Any], i: int) -> dict[str, str]:
        m = r.get("metric")
        try:  # a JSON object's names are strings; its values: joined, they must be too
            if type(m) is dict:
                "".join(m.values())
                return m
        except TypeError:
            pass
        self.wrong(f"result[{i}].metric is {_what(m)}, not an object of label names and values")

    def value(self, p: object, i: int) -> float:
        """An instant vector's value; the common case (a number as a string) without a detour."""
        if type(p) is list and len(p) == 2 and type(p[1]) is str:
            try:
                t, v = p[0], float(p[1])
            except ValueError:
                pass
            else:
                if type(t) in (int, float) and math.isfinite(t) and (v == v or p[1].strip().lower() == "nan"):
                    return v
        return self.point(p, f"result[{i}].value")[1]

    def point(self, p: object, where: str) -> tuple[float, float]:
        if not isinstance(p, list) or len(p) != 2:
            self.wrong(f"{where} is {_what(p)}, not [time, value]")
        t, v = p
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            self.wrong(f"{where}: time {t!r:.40} is not a number")
        number = isinstance(v, int | float) and not isinstance(v, bool)
        try:
            value = float(v) if isinstance(v, str) or number else math.nan  # the API sends strings
        except ValueError:
            value = math.nan
        if math.isnan(value) and not number and not (isinstance(v, str) and v.strip().lower() == "nan"):
            self.wrong(f"{where}: value {v!r:.40} is not a number")
        return float(t), value
