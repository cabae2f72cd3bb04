"""Helpers shared by the benchmarks: percentiles, a plain table, the JSON result file."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(c: Any) -> str:
    if isinstance(c, float):
        return f"{c:.4g}" if abs(c) < 1e4 else f"{c:,.0f}"
    return str(c)


def write_result(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": sys.platform},
        **data,
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def require_prometheus() -> None:
    """Exit with a message unless Debian's prometheus and promtool are on the PATH."""
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (Debian: apt install prometheus)")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def start_prometheus(work: Path, port: int, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus on ``work/prometheus.yml`` and the TSDB in ``work/data`` (retention 10 years, so
    backfilled data stays), logging to ``work/prometheus.log``; returns once it is ready."""
    url = f"http://127.0.0.1:{port}"
    argv = [
        "prometheus",
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=10y",
        *flags,
    ]
    with open(work / "prometheus.log", "w") as log:
        prom = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not _ready(url):
        if time.monotonic() > deadline or prom.poll() is not None:
            prom.terminate()
            raise RuntimeError(f"prometheus did not become ready: see {work / 'prometheus.log'}")
        time.sleep(0.2)
    return prom, url
