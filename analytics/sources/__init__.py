"""Where the analytics read history from: Prometheus (or anything speaking its query API), the
exporter's embedded SQLite, or existing dcgm-exporter series. One interface: ``Source``."""

from analytics.sources.base import Source, SourceUnavailable

__all__ = ["Source", "SourceUnavailable"]
