"""Health that tells the truth: a node whose NVML is down is not ready (/healthz and /readyz 503,
the reason in the JSON) but alive (/livez 200: a restart fixes no driver), its benchmark rounds
are skipped as skipped_no_gpu, and a replay claims nothing about NVML."""

from __future__ import annotations

import ctypes.util
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemonkit.http import MetricsServer, WebOptions, serve
from exporter.app import Exporter
from exporter.config import load
from exporter.readers import ReaderError, ReaderUnavailable
from exporter.readers.fake import FakeReader
from exporter.scrape.cache import RenderCache
from exporter.scrape.health import readiness
from exporter.scrape.site import ExporterSite
from tests.support.clock import FakeMonotonic
from tests.support.deploy_files import DOCKERFILE
from tests.support.dockerfile import healthcheck_argv, parse_dockerfile, run_healthcheck
from tests.support.http import http_get
from tests.support.metrics import one, parse_metrics
from tests.support.processes import ExporterProcess
from tests.support.sampling import make_sampler

NO_NVML_HERE = ctypes.util.find_library("nvidia-ml") is None
DOWN = ReaderUnavailable("NVML Shared Library Not Found", call="open", library_missing=True)


def body(code_headers_body: tuple[int, dict[str, str], bytes]) -> tuple[int, dict[str, Any]]:
    code, _, raw = code_headers_body
    return code, json.loads(raw)


# --- the real exporter on this node: no NVIDIA library, so `--reader nvml` finds NVML down -------


@pytest.mark.integration
@pytest.mark.skipif(not NO_NVML_HERE, reason="this host has an NVIDIA library: NVML may well be up")
def test_nvml_reader_without_nvml_is_alive_but_not_ready(
    exporter_process: Callable[..., ExporterProcess],
) -> None:
    p = exporter_process("--reader", "nvml", "--no-history", ready=False)
    p.wait_ready(probe="/livez")
    for path in ("/healthz", "/readyz"):
        code, info = body(http_get(p.url + path))
        assert code == 503, (path, info)
        assert info["status"] == "nvml_down" and info["reader"] == "nvml" and info["nvml_up"] is False
        assert info["reason"].startswith("NVML is down (open: NVML Shared Library Not Found)"), info
        assert info["gpus"] == 0
    code, info = body(http_get(p.url + "/livez"))
    assert code == 200 and info == {"status": "alive"}
    m = parse_metrics(p.metrics())
    assert one(m, "gpuledger_nvml_up") == 0.0
    assert one(m, "gpuledger_exporter_info", reader="nvml") == 1.0
    page = http_get(p.url + "/")[2].decode()
    assert "NOT READY" in page and "NVML is down" in page
    # the image's HEALTHCHECK (readiness) fails on this node; pointed at /livez it passes
    _, argv = healthcheck_argv(parse_dockerfile(DOCKERFILE.read_text()))
    assert run_healthcheck(argv, f"{p.url}/healthz").returncode != 0
    assert run_healthcheck(argv, f"{p.url}/livez").returncode == 0
    out = p.stop()
    lines = [x for x in out.splitlines() if "NVML unavailable" in x]
    assert len(lines) == 1 and "not ready (/readyz 503)" in lines[0], out  # one plain line, no traceback
    assert "Traceback" not in out


@pytest.mark.integration
def test_a_replay_claims_nothing_about_nvml(exporter_process: Callable[..., ExporterProcess]) -> None:
    p = exporter_process("--reader", "replay", "--replay-gpus", "2", "--no-history")
    code, info = body(http_get(p.url + "/readyz"))
    assert code == 200 and info["status"] == "ok" and info["reader"] == "replay", info
    assert "nvml_up" not in info and info["gpus_up"] == 2
    code, again = body(http_get(p.url + "/healthz"))
    assert code == 200 and {**again, "last_sample_age_seconds": 0} == {**info, "last_sample_age_seconds": 0}
    assert http_get(p.url + "/livez")[0] == 200
    text = p.metrics()
    assert "gpuledger_nvml_up" not in text  # no sample, no HELP: the series is absent, not 0 or 1
    assert one(parse_metrics(text), "gpuledger_exporter_info", reader="replay") == 1.0
    page = http_get(p.url + "/")[2].decode()
    assert "NVML" not in page and "captured on driver" in page
    out = p.stop()
    assert "NVML" not in out and "nvml" not in out, out


# --- readiness, by the rules, with a fake reader standing in for NVML -----------------------------


def site_for(reader: FakeReader) -> tuple[ExporterSite, Callable[[], None]]:
    s = make_sampler(reader)
    return ExporterSite(lambda: s.snapshot, RenderCache(lambda: s.snapshot), 10.0, s.failure), s.tick


def test_nvml_down_is_not_ready_and_coming_back_is(frozen_monotonic: FakeMonotonic) -> None:
    r = FakeReader(2, open_error=DOWN)
    site, tick = site_for(r)
    tick()
    ok, info = site.health()
    assert not ok and info["status"] == "nvml_down" and info["nvml_up"] is False
    assert info["reason"] == "NVML is down (open: NVML Shared Library Not Found): no GPU is sampled"
    r.open_error = None
    frozen_monotonic.advance(1.5)  # past the first backoff
    tick()
    ok, info = site.health()
    assert ok and info["status"] == "ok" and info["nvml_up"] is True and info["gpus_up"] == 2
    assert "reason" not in info
    r.fail("utilization", error=ReaderUnavailable("driver unloaded", call="utilization"))
    r.advance(1.0)
    tick()  # NVML went away while running
    ok, info = site.health()
    assert not ok and info["status"] == "nvml_down" and "(utilization: driver unloaded)" in str(info["reason"])
    assert info["gpus"] == 2 and info["gpus_up"] == 0


def test_a_replay_whose_reader_is_down_says_so_without_naming_nvml(frozen_monotonic: FakeMonotonic) -> None:
    s = make_sampler(FakeReader(1, open_error=ReaderError("capture unreadable", call="open")))
    s.tick()
    replay = dataclasses.replace(s.snapshot, reader="replay")
    assert replay.nvml_state is None and s.snapshot.nvml_state is False
    ok, info = readiness(replay, 10.0)
    assert not ok and info["status"] == "reader_down" and "nvml_up" not in info
    assert info["reason"] == "the replay reader is down (open: capture unreadable): no GPU is sampled"
    frozen_monotonic.advance(10.5)  # staleness comes first: nothing the snapshot says is current
    ok, info = readiness(replay, 10.0)
    assert not ok and info["status"] == "stale"
    assert info["reason"] == "the last sampling round ended 10.5 s ago, more than stale_after (10 s)"
    ok, info = readiness(dataclasses.replace(replay, seq=0), 10.0)
    assert (ok, info["reason"]) == (False, "no sampling round has finished yet")


# --- /livez and /readyz for any site: the analytics daemon's too -----------------------------------


class _Site:
    ready = False

    def render(self, accept: str | None, gzip_ok: bool) -> tuple[bytes, str]:
        return b"", "text/plain"

    def health(self) -> tuple[bool, dict[str, object]]:
        return self.ready, {"status": "ok" if self.ready else "not_ready"}

    def landing(self) -> str:
        return ""

    def page(self, path: str) -> tuple[bytes, str] | None:
        return None


@pytest.fixture
def server() -> Iterator[tuple[_Site, MetricsServer]]:
    site = _Site()
    srv = MetricsServer(WebOptions(host="127.0.0.1", port=0, basic_auth_users={"u": "$2b$12$" + "x" * 53}), site)
    serve(srv)
    yield site, srv
    srv.shutdown()
    srv.server_close()


def test_livez_stays_200_while_readiness_fails_and_probes_need_no_credentials(
    server: tuple[_Site, MetricsServer],
) -> None:
    site, srv = server
    assert http_get(srv.url + "/metrics")[0] == 401  # behind auth
    assert body(http_get(srv.url + "/healthz")) == (503, {"status": "not_ready"})
    assert body(http_get(srv.url + "/readyz")) == (503, {"status": "not_ready"})
    assert body(http_get(srv.url + "/livez")) == (200, {"status": "alive"})
    site.ready = True
    assert http_get(srv.url + "/readyz")[0] == 200 and http_get(srv.url + "/healthz")[0] == 200


# --- benchmarks on a node without GPUs --------------------------------------------------------------


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Callable[[FakeReader], Exporter]]:
    running: list[Exporter] = []

    def make(reader: FakeReader) -> Exporter:
        settings = load(
            None,
            {
                "web": {"listen": "127.0.0.1:0"},
                "history": {"enabled": False},
                "bench": {"enabled": True, "idle_window": 0.5, "benches": ["allreduce", "matmul"], "quick": True},
            },
        )
        exp = Exporter(settings, reader=reader)
        exp.start()
        running.append(exp)
        return exp

    yield make
    for exp in running:
        exp.stop()


def runs(exp: Exporter) -> dict[str, float]:
    m = parse_metrics(http_get(exp.url + "/metrics")[2].decode())
    return {dict(k)["result"]: v for k, v in m["gpuledger_bench_runs_total"].items() if ("bench", "matmul") in k}


def test_a_round_on_a_node_whose_nvml_is_down_is_skipped_no_gpu(
    exporter: Callable[[FakeReader], Exporter], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.benchmarks.scheduler")
    exp = exporter(FakeReader(2, open_error=DOWN))
    assert exp.bench is not None
    assert exp.bench.run_round() is None
    assert exp.bench.runner.children_started == 0
    exp.sampler.tick()
    assert runs(exp) == {"ok": 0, "failed": 0, "timeout": 0, "skipped_busy": 0, "skipped_no_gpu": 1}
    skipped = [x.getMessage() for x in caplog.records if "skipped_no_gpu" in x.getMessage()]
    assert skipped[0].startswith("NVML is down (open: NVML Shared Library Not Found): each round is skipped")
    assert skipped[1] == "benchmark round skipped (skipped_no_gpu): NVML is down (open: NVML Shared Library Not Found)"
    assert not any("round starting" in x.getMessage() for x in caplog.records)  # no round planned


def test_an_nvml_node_without_gpus_skips_and_a_busy_one_is_still_skipped_busy(
    exporter: Callable[[FakeReader], Exporter],
) -> None:
    exp = exporter(FakeReader(0))
    assert exp.bench is not None
    assert exp.bench.no_gpu() is None  # the fake reader runs gloo on the CPU: GPUs are not needed
    exp.sampler.reader.kind = "nvml"
    assert exp.bench.no_gpu() == "NVML finds no GPU on this node"
    assert exp.bench.run_round() is None and exp.bench.runner.children_started == 0
    assert exp.bench.state.snapshot().runs[("matmul", "skipped_no_gpu")] == 1
    busy = FakeReader(1)
    busy.gpus[0].util = 0.9
    exp2 = exporter(busy)
    assert exp2.bench is not None and exp2.bench.no_gpu() is None
    assert exp2.bench.run_round() is None
    snap = exp2.bench.state.snapshot().runs
    assert (snap[("matmul", "skipped_busy")], snap[("matmul", "skipped_no_gpu")]) == (1, 0)
