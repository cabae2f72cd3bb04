"""The exporter's site, served by :class:`daemonkit.http.MetricsServer`: /metrics (the cached
exposition), /healthz and /readyz (readiness: ``exporter.scrape.health``) and a landing page with
the latest snapshot's figures, all read from the snapshot, never from the reader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from daemonkit.pages import render
from exporter import __version__
from exporter.scrape.cache import RenderCache
from exporter.scrape.health import readiness
from exporter.snapshot import GpuSnapshot, Snapshot

TEMPLATES = Path(__file__).parent / "templates"
DASH = "—"  # not read: never shown as 0
GIB = 2**30


class ExporterSite:
    """The exporter's pages, all read from the latest snapshot."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        exposition: RenderCache,
        stale_after: float = 10.0,
        failure: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.snapshot = snapshot
        self.exposition = exposition
        self.stale_after = stale_after
        self.failure = failure  # why the sampler keeps failing, or None

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        return self.exposition.render(accept, gzip_ok)

    def health(self) -> tuple[bool, dict[str, object]]:
        return readiness(self.snapshot(), self.stale_after, self.failure())

    def page(self, path: str) -> tuple[bytes, str] | None:
        return None

    def landing(self) -> str:
        s = self.snapshot()
        ok, health = readiness(s, self.stale_after, self.failure())
        age = health["last_sample_age_seconds"]
        errors = sum(s.reader_errors.values())
        return render(
            TEMPLATES,
            "landing.html",
            generator=f"gpuledger {__version__}",
            page_title=f"gpuledger exporter {__version__}",
            s=s,
            gpu_cards=_gpu_cards(s),
            sampler_cards=[
                ("Sampler", str(health["status"])),
                ("Last sample", DASH if age is None else f"{age:.1f} s ago"),
                ("Sample took", f"{1000 * s.sample_duration_seconds:.1f} ms" if s.seq else DASH),
                *([("NVML", "up" if s.nvml_state else "down")] if s.nvml_state is not None else []),
                ("Reader errors", f"{errors:,}"),
                ("Stale after", f"{self.stale_after:g} s"),
            ],
            sampler_ok=ok,
            status=health["status"],
            reason=health.get("reason"),
            headers=["GPU", "Model", "UUID", "State", "Utilisation", "Power", "Memory", "Temperature", "Processes"],
            rows=[_gpu_row(g) for g in s.gpus],
            numeric=[False, False, False, False, True, True, True, True, True],
            dash=DASH,
        )


def _num(v: float | None, fmt: str, unit: str) -> str:
    return DASH if v is None else f"{v:{fmt}} {unit}"


def _gpu_cards(s: Snapshot) -> list[tuple[str, str]]:
    up = [g for g in s.gpus if g.up]
    util = [g.gauges.utilization for g in up if g.gauges.utilization is not None]
    power = [g.gauges.power_watts for g in up if g.gauges.power_watts is not None]
    used = [g.gauges.memory_used_bytes for g in up if g.gauges.memory_used_bytes is not None]
    total = [g.gauges.memory_total_bytes for g in up if g.gauges.memory_total_bytes is not None]
    temps = [g.gauges.temperature_celsius for g in up if g.gauges.temperature_celsius is not None]
    memory = f"{sum(used) / GIB:,.0f} / {sum(total) / GIB:,.0f} GiB" if used and total else DASH
    return [
        ("GPUs up", f"{len(up)} / {len(s.gpus)}"),
        ("Mean utilisation", _num(100 * sum(util) / len(util) if util else None, ".1f", "%")),
        ("Power", _num(sum(power) if power else None, ",.0f", "W")),
        ("Memory used", memory),
        ("Hottest", _num(max(temps) if temps else None, ".0f", "°C")),
    ]


def _gpu_row(g: GpuSnapshot) -> list[str]:
    gauges, limit = g.gauges, g.health.power_limit_watts
    power = _num(gauges.power_watts, ".0f", "W")
    if gauges.power_watts is not None and limit:
        power += f" of {limit:.0f}"
    used, total = gauges.memory_used_bytes, gauges.memory_total_bytes
    memory = DASH if used is None else f"{used / GIB:,.1f} GiB" + (f" of {total / GIB:,.0f}" if total else "")
    return [
        str(g.info.index),
        g.info.model,
        g.info.uuid,
        "up" if g.up else "⚠ down",
        _num(None if gauges.utilization is None else 100 * gauges.utilization, ".0f", "%"),
        power,
        memory,
        _num(gauges.temperature_celsius, ".0f", "°C"),
        DASH if gauges.processes is None else str(gauges.processes),
    ]
