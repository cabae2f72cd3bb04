"""The suite's fixtures (helpers live in tests/support) and its Hypothesis profiles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.clock import FakeMonotonic
from tests.support.paths import REPO
from tests.support.processes import ExporterProcess
from tests.support.prometheus import CACHE_ENV
from tests.support.slurm import SlurmCluster


@pytest.fixture
def frozen_monotonic(monkeypatch: pytest.MonkeyPatch) -> FakeMonotonic:
    """The sampler's and the web site's monotonic clock, moved by hand."""
    import exporter.sampling.sampler
    import exporter.scrape.health

    fake = FakeMonotonic()
    for module in (exporter.sampling.sampler, exporter.scrape.health):
        monkeypatch.setattr(module, "time", fake)
    return fake


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


def _hypothesis_profiles() -> None:
    """CI runs the property tests derandomized (the same examples every run: a red build is
    reproducible); locally they explore, and remember failures in .hypothesis/."""
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        settings.load_profile("ci")


_hypothesis_profiles()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SlurmCluster]:
    """A single-node Slurm (tests.support.slurm), stopped after the test."""
    (tmp_path / "slurm").mkdir()
    c = SlurmCluster(tmp_path / "slurm")
    try:
        yield c
    finally:
        c.stop()


def pytest_configure(config: pytest.Config) -> None:
    """One folder of TSDB blocks for the whole run (tests.support.prometheus: a synthetic fleet
    backfilled once, copied to each module's Prometheus); the workers inherit it, the controller
    removes it at the end."""
    if hasattr(config, "workerinput") or os.environ.get(CACHE_ENV):
        return
    folder = tempfile.mkdtemp(prefix="gpuledger-test-blocks-")
    os.environ[CACHE_ENV] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


# Modules with few tests that wait (on timeouts, scrapes, a chain of backfills) far longer than they
# compute. xdist's loadfile hands out the modules with the most tests first, which left these for
# the end, where the run then waited on them with the other workers done. They go first (the rest
# keep xdist's order, most tests first) when scripts/test passes --no-loadscope-reorder.
WAIT_FIRST = (
    "tests/analytics/test_rollups.py",  # two promtool backfills in a row, ~200 s
    "tests/product/test_scaling_failures.py",  # a hung run waits out --timeout
    "tests/product/test_scaling_nodes.py",  # a node left alone waits out --timeout
    "tests/exporter/test_prometheus.py",  # 32 scrapes of a live exporter
    "tests/exporter/test_bench_multinode.py",  # a hung rank waits out the round's timeout
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("loadscopereorder", True):
        return
    counts = Counter(item.nodeid.split("::")[0] for item in items)

    def order(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::")[0]
        first = WAIT_FIRST.index(module) if module in WAIT_FIRST else len(WAIT_FIRST)
        return first, -counts[module] if first == len(WAIT_FIRST) else 0

    items.sort(key=order)  # stable: a module's tests stay in their order
