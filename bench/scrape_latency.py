"""Scrape latency: gpuledger's cached /metrics vs a naive exporter that reads NVML in the scrape.

Both serve 8 GPUs from the same FakeReader, set to the per-call latencies measured on an H200
(exporter/readers/fake.py: H200_LATENCIES). The naive handler makes, per scrape and per GPU, the
calls of one gpuledger fast round plus the energy counter, ECC and row-remap reads (no PCIe), then
renders. The client sends Prometheus' headers (OpenMetrics, gzip) over a kept-alive connection.

    python bench/scrape_latency.py [--scrapes 3000] [--naive-scrapes 200]
"""

from __future__ import annotations

import argparse
import http.client
import random
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import percentile, table, write_result
from daemonkit.http import MetricsServer, WebOptions, serve
from exporter.readers.fake import H200_LATENCIES, FakeReader
from exporter.sampling.sampler import Sampler, SamplerOptions
from exporter.scrape.cache import RenderCache
from exporter.scrape.site import ExporterSite

GPUS = 8
HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def naive_body(reader: FakeReader) -> bytes:
    lines = []
    for i in range(GPUS):
        u = reader.utilization(i)
        reader.utilization_samples(i, 0)
        m = reader.memory(i)
        c = reader.clocks(i)
        values: dict[str, Any] = {
            "utilization_ratio": u.gpu,
            "power_watts": reader.power_watts(i),
            "memory_used_bytes": m.used_bytes,
            "temperature_celsius": reader.temperature_celsius(i),
            "sm_clock_hertz": c.sm_hertz,
            "clock_event_reasons": reader.clock_event_reasons(i),
            "processes": len(reader.processes(i)),
            "energy_joules_total": reader.energy_joules(i),
            "ecc_uncorrected_total": reader.ecc_errors(i).uncorrected,
            "remapped_rows": reader.remapped_rows(i).correctable,
            "power_limit_watts": reader.power_limit_watts(i),
        }
        lines += [f'naive_gpu_{k}{{gpu="{i}"}} {v}' for k, v in values.items()]
    return ("\n".join(lines) + "\n").encode()


class StaticHandler(BaseHTTPRequestHandler):
    """The floor: the same HTTP stack answering with fixed bytes, no work at all."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


class NaiveHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    reader: FakeReader

    def do_GET(self) -> None:
        body = naive_body(self.reader)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def scrape(port: int, n: int, between: Callable[[], object] | None = None) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out = []
    for _ in range(n):
        if between is not None:
            between()
        t0 = time.perf_counter()
        conn.request("GET", "/metrics", headers=HEADERS)
        resp = conn.getresponse()
        resp.read()
        out.append(time.perf_counter() - t0)
        assert resp.status == 200
    conn.close()
    return out


def stats(xs: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(xs, 50) * 1e3,
        "p99_ms": percentile(xs, 99) * 1e3,
        "max_ms": max(xs) * 1e3,
        "n": len(xs),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=3000)
    ap.add_argument("--spaced-scrapes", type=int, default=120)
    ap.add_argument("--naive-scrapes", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(1)

    reader = FakeReader(GPUS, latencies=H200_LATENCIES)
    for i, g in enumerate(reader.gpus):
        g.util = 0.1 * i
    expo = RenderCache(lambda: sampler.snapshot)
    sampler = Sampler(reader, SamplerOptions(interval=1.0, hostname="bench"), on_snapshot=expo.prepare)
    sampler.start()
    srv = MetricsServer(WebOptions(host="127.0.0.1", port=0), ExporterSite(lambda: sampler.snapshot, expo))
    serve(srv)
    time.sleep(2.5)  # a few rounds so every metric has a value
    port = srv.server_address[1]
    scrape(port, 50)  # warm-up; also marks OpenMetrics+gzip as a variant to render ahead

    results: dict[str, dict[str, float]] = {}
    results["back_to_back"] = stats(scrape(port, args.scrapes))
    # Prometheus-like: scrapes at random moments, each after at least one new sampling round
    results["spaced"] = stats(scrape(port, args.spaced_scrapes, between=lambda: time.sleep(rng.uniform(0.1, 0.4))))
    sampler.stop()
    # no render-ahead: a sampling round by hand (untimed) before each scrape, so each renders
    sampler._on_snapshot = None
    results["render_per_scrape"] = stats(scrape(port, min(args.scrapes, 300), between=sampler.tick))
    srv.shutdown()

    def spaced() -> None:
        time.sleep(rng.uniform(0.1, 0.4))

    StaticHandler.body = expo.render(HEADERS["Accept"], True)[0]
    NaiveHandler.reader = reader
    for name, handler, n in (("floor", StaticHandler, args.scrapes), ("naive", NaiveHandler, args.naive_scrapes)):
        other = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        oport = other.server_address[1]
        scrape(oport, 5)
        results[f"{name}_back_to_back"] = stats(scrape(oport, n))
        results[f"{name}_spaced"] = stats(scrape(oport, args.spaced_scrapes, between=spaced))
        other.shutdown()

    ratios = {
        f"{mode}_{q}": results[f"naive_{mode}"][f"{q}_ms"] / results[mode][f"{q}_ms"]
        for mode in ("back_to_back", "spaced")
        for q in ("p50", "p99")
    }
    labels = {
        "back_to_back": "gpuledger, back-to-back",
        "spaced": "gpuledger, spaced 0.1-0.4 s (as deployed)",
        "render_per_scrape": "gpuledger, render inside the scrape",
        "floor_back_to_back": "floor (fixed bytes, no work), back-to-back",
        "floor_spaced": "floor (fixed bytes, no work), spaced",
        "naive_back_to_back": "naive (NVML in the scrape), back-to-back",
        "naive_spaced": "naive (NVML in the scrape), spaced",
    }
    rows = [[labels[k], int(v["n"]), v["p50_ms"], v["p99_ms"], v["max_ms"]] for k, v in results.items()]
    print(f"/metrics latency, {GPUS} GPUs, H200 per-call latencies, OpenMetrics + gzip, keep-alive\n")
    print(table(["server", "scrapes", "p50 ms", "p99 ms", "max ms"], rows))
    print("\nnaive / gpuledger: " + ", ".join(f"{k} {v:.0f}x" for k, v in ratios.items()))
    out = {"gpus": GPUS, "results": results, "naive_over_gpuledger": ratios, "targets": {"p99_ms": 2, "ratio": 100}}
    print(f"wrote {write_result('scrape_latency', out)}")


if __name__ == "__main__":
    main()
