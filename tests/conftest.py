"""Shared helpers: ports, HTTP, waiting, running the exporter as a real process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter import slowlane
from exporter.readers.fake import FakeReader
from exporter.sampler import Sampler, SamplerOptions

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "exporter" / "captures" / "h200-phases.jsonl"


# Synthetic data is built at this fixed epoch (Sunday 2026-11-22 00:00 UTC) and shifted to where a
# test needs it, so what falls in any window is the same whatever the hour the suite runs at.
ANCHOR = 1_795_219_200.0


def clock_now() -> float:
    """The "now" that tests anchor windows and shifted data to: ``GPULEDGER_TEST_NOW`` (epoch
    seconds) when set, so scripts/test-any-hour can run the time-dependent tests at many hours of a
    week, else the wall clock. Only for what runs in-process or takes a clock: a real Prometheus
    or a daemon in a child process reads the wall clock whatever this says."""
    fake = os.environ.get("GPULEDGER_TEST_NOW")
    return float(fake) if fake else time.time()


class FakeMonotonic:
    """``time`` for modules under test whose ``time.monotonic()`` must move only when the test
    says (backoffs, grace periods, staleness): no dependency on how fast the machine runs."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


@pytest.fixture
def frozen_monotonic(monkeypatch: pytest.MonkeyPatch) -> FakeMonotonic:
    """The sampler's and the web site's monotonic clock, moved by hand."""
    import exporter.sampler
    import exporter.web

    fake = FakeMonotonic()
    for module in (exporter.sampler, exporter.web):
        monkeypatch.setattr(module, "time", fake)
    return fake


def require_binary(name: str) -> str:
    """Path of a binary the test needs. Outside CI a missing one skips with the reason; in CI
    (where .ci/run installs it) a missing one fails."""
    path = shutil.which(name)
    if path:
        return path
    reason = f"{name} not installed (Debian package; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def require_torch() -> None:
    """Skip (fail in CI, where .ci/run installs it) when torch is missing. Never imports it."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        reason = "torch not installed (pip install torch==2.13.0; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def process_group_gone(pgid: int) -> bool:
    from exporter.benchmarks.runner import group_alive

    return not group_alive(pgid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(
    url: str, headers: dict[str, str] | None = None, timeout: float = 5.0, context: object = None
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:  # type: ignore[call-overload]
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_until(pred: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except (OSError, ValueError):
            pass
        time.sleep(interval)
    return False


def make_sampler(reader: FakeReader, **kw: object) -> Sampler:
    """A sampler whose slow lane reads everything on every slow_tick()."""
    opts = dict(interval=1.0, hostname="testhost", cadence=slowlane.Cadence(energy=0, health=0, pcie=1e-6))
    opts.update(kw)
    return Sampler(reader, SamplerOptions(**opts))  # type: ignore[arg-type]


def step(sampler: Sampler, reader: FakeReader, seconds: float = 1.0, ticks: int = 1) -> None:
    for _ in range(ticks):
        reader.advance(seconds)
        sampler.tick()
        sampler.slow_tick()
    sampler.tick()  # publish what the slow lane folded in (zero-length interval: no accrual)


class ExporterProcess:
    """``python -m exporter`` as a child process on a free loopback port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{self.port}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
            cwd=REPO,
        )

    def wait_ready(self, timeout: float = 20.0) -> None:
        ok = wait_until(lambda: http_get(self.url + "/healthz", timeout=1)[0] == 200, timeout)
        if not ok:
            self.stop()
            raise AssertionError(f"exporter did not become healthy:\n{self.output}")

    def metrics(self) -> str:
        return http_get(self.url + "/metrics")[2].decode()

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.output = self.proc.stdout.read() if self.proc.stdout else ""
        return self.output

    output = ""


@pytest.fixture
def exporter_process() -> Iterator[Callable[..., ExporterProcess]]:
    started: list[ExporterProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, ready: bool = True) -> ExporterProcess:
        p = ExporterProcess(*args, env=env)
        started.append(p)
        if ready:
            p.wait_ready()
        return p

    yield start
    for p in started:
        p.stop()


def parse_metrics(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Parse a text exposition into {name: {sorted label items: value}}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def one(metrics: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str) -> float:
    """The single value of ``name`` whose labels include ``labels``."""
    hits = [v for k, v in metrics.get(name, {}).items() if all((a, b) in k for a, b in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} matches in {json.dumps(list(metrics.get(name, {})))}"
    return hits[0]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpuledger", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=REPO,
        timeout=timeout,
    )


def _hypothesis_profiles() -> None:
    """CI runs the property tests derandomized (the same examples every run: a red build is
    reproducible); locally they explore, and remember failures in .hypothesis/."""
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        settings.load_profile("ci")


_hypothesis_profiles()


def make_cert(tmp: Path) -> tuple[Path, Path]:
    openssl = require_binary("openssl")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="session")
def subcommand_help() -> Callable[[str], str]:
    """`gpuledger SUB --help` text, run once per subcommand (deployment tests check options exist)."""
    cache: dict[str, str] = {}

    def get(sub: str) -> str:
        if sub not in cache:
            r = subprocess.run(
                [sys.executable, "-m", "gpuledger", sub, "--help"],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            cache[sub] = r.stdout
        return cache[sub]

    return get
