"""The exporter's own process figures (the conventional ``process_*`` metrics), from /proc."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = resource.getpagesize()


@dataclass(frozen=True, slots=True)
class ProcessStats:
    cpu_seconds: float
    resident_bytes: int
    virtual_bytes: int
    start_time_seconds: float
    open_fds: int
    max_fds: int


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


_BOOT = _boot_time() if os.path.exists("/proc/stat") else 0.0


def read() -> ProcessStats | None:
    """Figures for this process, or None where /proc is missing."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    # fields after the command name: [11] utime, [12] stime, [19] starttime, [20] vsize, [21] rss
    return ProcessStats(
        cpu_seconds=(int(fields[11]) + int(fields[12])) / _TICKS,
        resident_bytes=int(fields[21]) * _PAGE,
        virtual_bytes=int(fields[20]),
        start_time_seconds=_BOOT + int(fields[19]) / _TICKS,
        open_fds=fds,
        max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    )
