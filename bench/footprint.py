"""Daemon footprint: CPU share of one core and RSS of the exporter process over 60 s, sampling
8 GPUs at 1 Hz, scraped every 15 s with Prometheus' headers.

Two daemons are measured, one after the other: the FakeReader with H200 per-call latencies
(short calls spin, so their CPU counts; the 2.8 ms samples-buffer and 4.1 ms energy reads sleep,
as a driver wait would), and the replay of the bundled capture presented as 8 GPUs.

    python bench/footprint.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import table, write_result

HERE = Path(__file__).resolve().parent
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.4",
    "Accept-Encoding": "gzip",
}
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_and_rss(pid: int) -> tuple[float, int]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[21]) * PAGE


def scrape(port: int) -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics", headers=HEADERS)
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def measure(name: str, cmd: list[str], port: int, seconds: float) -> dict[str, float | str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if scrape(port) == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.2)
        time.sleep(5)  # settle: imports done, first rounds sampled
        cpu0, _ = cpu_and_rss(proc.pid)
        t0 = time.monotonic()
        rss_max = 0
        next_scrape = t0
        scrapes = 0
        while (now := time.monotonic()) - t0 < seconds:
            if now >= next_scrape:
                assert scrape(port) == 200
                scrapes += 1
                next_scrape += 15
            rss_max = max(rss_max, cpu_and_rss(proc.pid)[1])
            time.sleep(0.5)
        cpu1, rss = cpu_and_rss(proc.pid)
        wall = time.monotonic() - t0
        return {
            "daemon": name,
            "seconds": round(wall, 1),
            "scrapes": scrapes,
            "cpu_percent_of_one_core": 100 * (cpu1 - cpu0) / wall,
            "rss_mb_end": rss / 2**20,
            "rss_mb_max": max(rss_max, rss) / 2**20,
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    runs = []
    port = free_port()
    runs.append(
        measure(
            "fake reader, H200 latencies, 8 GPUs",
            [sys.executable, str(HERE / "fake_exporter.py"), str(port), "8"],
            port,
            args.seconds,
        )
    )
    port = free_port()
    runs.append(
        measure(
            "replay of the H200 capture, 8 GPUs",
            [
                sys.executable,
                "-m",
                "exporter",
                "--listen",
                f"127.0.0.1:{port}",
                "--reader",
                "replay",
                "--replay-gpus",
                "8",
                "--no-history",
            ],
            port,
            args.seconds,
        )
    )
    print("exporter daemon at 1 Hz x 8 GPUs, scraped every 15 s\n")
    print(
        table(
            ["daemon", "s", "scrapes", "CPU % of a core", "RSS MB (end)", "RSS MB (max)"],
            [
                [
                    r["daemon"],
                    r["seconds"],
                    r["scrapes"],
                    r["cpu_percent_of_one_core"],
                    r["rss_mb_end"],
                    r["rss_mb_max"],
                ]
                for r in runs
            ],
        )
    )
    print(f"wrote {write_result('footprint', {'runs': runs, 'targets': {'cpu_percent': 1.0, 'rss_mb': 80}})}")


if __name__ == "__main__":
    main()
