"""The render cache behind /metrics: each snapshot rendered once per format and compression,
ahead of the scrape where that variant was scraped recently."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable

from exporter.scrape.render import OPENMETRICS, TEXT, render
from exporter.snapshot import Snapshot


class RenderCache:
    """Renders the latest snapshot once per (snapshot, format, compression) and serves the
    cached bytes to every scrape after that. ``prepare`` renders ahead, in the sampler's thread,
    the variants scraped in the last ``ahead_seconds``, before the sampler publishes the snapshot,
    so a scrape finds its bytes ready and never waits for a render."""

    def __init__(self, snapshot: Callable[[], Snapshot], ahead_seconds: float = 300.0) -> None:
        self._snapshot = snapshot
        self._ahead = ahead_seconds
        self._lock = threading.Lock()
        self._cache: dict[tuple[bool, bool], tuple[int, bytes]] = {}
        self._asked: dict[tuple[bool, bool], float] = {}

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        """(body, content type) for a scrape with this Accept header."""
        om = wants_openmetrics(accept)
        key = (om, gzip_ok)
        self._asked[key] = time.monotonic()
        snap = self._snapshot()
        hit = self._cache.get(key)
        if hit is None or hit[0] < snap.seq:  # newer bytes may be there already: rendered ahead, not yet published
            with self._lock:
                hit = self._cache.get(key)
                if hit is None or hit[0] < snap.seq:
                    hit = self._cache[key] = (snap.seq, _encode(snap, om, gzip_ok))
        return hit[1], OPENMETRICS if om else TEXT

    def prepare(self, snap: Snapshot) -> None:
        """Render ``snap`` in every variant scraped recently (called after each sampling round)."""
        now = time.monotonic()
        with self._lock:
            for key, asked in list(self._asked.items()):
                if now - asked <= self._ahead:
                    self._cache[key] = (snap.seq, _encode(snap, *key))


def _encode(snap: Snapshot, om: bool, gzip_ok: bool) -> bytes:
    body = render(snap, openmetrics=om)
    return gzip.compress(body, compresslevel=5) if gzip_ok else body


def wants_openmetrics(accept: str | None) -> bool:
    return any(part.strip().startswith("application/openmetrics-text") for part in (accept or "").split(","))
