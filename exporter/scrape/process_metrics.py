"""The process itself: prometheus_client's ``ProcessCollector`` figures (the conventional
``process_*`` families, from /proc/self), read once per sampling round, never on a scrape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.process_collector import ProcessCollector

from exporter.registry import Feature, Kind, MetricDef, part_row

_COLLECTOR = ProcessCollector(registry=None)


@dataclass(frozen=True, slots=True)
class ProcessStats:
    """What ProcessCollector read; None where /proc did not answer."""

    cpu_seconds: float | None
    resident_bytes: float | None
    virtual_bytes: float | None
    start_time_seconds: float | None
    open_fds: float | None
    max_fds: float | None


def read() -> ProcessStats | None:
    """This process's figures from ProcessCollector, or None where /proc is missing."""
    v = {s.name: s.value for family in _COLLECTOR.collect() for s in family.samples}
    if not v:
        return None
    return ProcessStats(
        cpu_seconds=v.get("process_cpu_seconds_total"),
        resident_bytes=v.get("process_resident_memory_bytes"),
        virtual_bytes=v.get("process_virtual_memory_bytes"),
        start_time_seconds=v.get("process_start_time_seconds"),
        open_fds=v.get("process_open_fds"),
        max_fds=v.get("process_max_fds"),
    )


def _row(name: str, kind: Kind, help: str, proc_file: str, fn: Callable[[ProcessStats], float | None]) -> MetricDef:
    """A row as ProcessCollector declares it: its name, type and help, and no unit
    (tests/exporter/test_metric_registry.py holds them equal)."""
    source = f"prometheus_client ProcessCollector (/proc/self/{proc_file})"
    return part_row(ProcessStats, name, kind, "", help, source, fn)


# fmt: off
FEATURE: Feature[ProcessStats] = Feature("process", ProcessStats, (
    _row("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", "stat",
         lambda p: p.cpu_seconds),
    _row("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", "stat",
         lambda p: p.resident_bytes),
    _row("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", "stat",
         lambda p: p.virtual_bytes),
    _row("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", "stat",
         lambda p: p.start_time_seconds),
    _row("process_open_fds", "gauge", "Number of open file descriptors.", "fd", lambda p: p.open_fds),
    _row("process_max_fds", "gauge", "Maximum number of open file descriptors.", "limits", lambda p: p.max_fds),
))
# fmt: on
