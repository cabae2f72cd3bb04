"""The one enrichment step every source goes through (``analytics.sources.enrich``), the choice
of source by ``analytics.source``, and the rule that nothing outside the sources asks a source's
type."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

from analytics.config import FullSettings
from analytics.daycache import DayCached
from analytics.pipeline import make_source
from analytics.sources.base import (
    GpuFigures,
    JobFigures,
    JobRecords,
    Labels,
    PartFailed,
    PodKey,
    QueuePart,
    SchedulerJob,
    Source,
)
from analytics.sources.dcgm import DcgmSource
from analytics.sources.embedded import EmbeddedSource
from analytics.sources.enrich import Enriched, join_slurm
from analytics.sources.prometheus import PrometheusSource
from domain.jobs import JobKey
from domain.week import JobWeek, QueueWeek, Window
from tests.support.paths import REPO
from tests.support.sources import StubSource
from tests.support.weeks import KWH, gpu_week, job_week

W = Window(0.0, 86400.0, "day")


def test_the_scheduler_s_record_wins_and_the_claims_fill_the_rest() -> None:
    records = JobRecords(
        scheduler={("east", "7"): SchedulerJob("ada", "pi-a", "gpu", ""), ("west", "7"): SchedulerJob("eve", "x")},
        claims_by_target={("east", "node-1:10044", "7"): ("claimed", "debug", "high")},
        claims_by_cluster={("east", "8", "bo"): ("pi-b", "cpu", "normal")},
    )
    gpus = [
        gpu_week("GPU-1", "node-1", model="NVIDIA H100", sampled_h=1, busy_h=0.5, energy_kwh=1e6 / KWH, cluster="east"),
        gpu_week("GPU-2", "node-1", model="NVIDIA H100", sampled_h=1, busy_h=0.5, energy_kwh=1e6 / KWH, cluster="east"),
    ]
    rows = join_slurm(
        [
            job_week("7", uuid="GPU-1", host="node-1", held_h=1, busy_h=0.5, energy_kwh=5e5 / KWH),
            job_week("8", "bo", uuid="GPU-2", host="node-1", held_h=1, busy_h=0.5, energy_kwh=5e5 / KWH),
            job_week("9", "cy", uuid="GPU-2", host="node-1", held_h=1, busy_h=0.5, energy_kwh=5e5 / KWH),
            job_week("", uuid="GPU-1", host="node-1", held_h=1, busy_h=0.5, energy_kwh=5e5 / KWH),
        ],
        gpus,
        {"GPU-1": "node-1:10044", "GPU-2": "node-2:10044"},
        records,
    )
    by_id = {r.job.job_id: r for r in rows}
    # 7: the scheduler's account and partition (its own cluster's, not west's), the claim's QOS where it says none
    assert (by_id["7"].job.user, by_id["7"].account, by_id["7"].partition, by_id["7"].qos) == (
        "ada",
        "pi-a",
        "gpu",
        "high",
    )
    assert (by_id["8"].account, by_id["8"].partition, by_id["8"].qos) == ("pi-b", "cpu", "normal")  # claims only
    assert (by_id["9"].account, by_id["9"].partition) == ("", "")  # nothing known
    assert by_id[""].account == ""  # not a Slurm job


class _Store(Enriched):
    """A source of two GPUs and one job whose parts can be told to fail; counts the threads it is read in."""

    name = "stub"
    pod_label_names: tuple[str, ...] = ("label_team",)

    def __init__(self, parallel: bool, failing: set[str]) -> None:
        self.parallel, self.failing = parallel, failing
        self.threads: set[str] = set()

    def _read(self, part: str) -> None:
        self.threads.add(threading.current_thread().name)
        if part in self.failing:
            raise PartFailed(f"{part} refused")

    def gpus(self, w: Window) -> GpuFigures:
        self._read("gpus")
        return GpuFigures(
            (
                gpu_week("GPU-1", "node-1", model="NVIDIA H100", sampled_h=1, busy_h=0.5, energy_kwh=1e6 / KWH),
                gpu_week("GPU-2", "node-1", model="NVIDIA H100", sampled_h=1, busy_h=0.5, energy_kwh=1e6 / KWH),
            ),
            ("a store's note",),
            targets={"GPU-1": "t1"},
        )

    def jobs(self, w: Window, gpus: GpuFigures) -> JobFigures:
        self._read("jobs")
        pod = JobWeek("GPU-2", "node-1", JobKey(pod="p", namespace="ml"), 60.0, 30.0, 1.0)
        return JobFigures((job_week("7", uuid="GPU-1", host="node-1", held_h=1, busy_h=0.5, energy_kwh=5e5 / KWH), pod))

    def history_start(self, w: Window) -> float | None:
        self._read("history")
        return 42.0

    def queue(self, w: Window) -> QueuePart:
        self._read("queue")
        row = QueueWeek("gpu", "exact", 1, 5.0, 5.0, 5.0, 5.0, False, 0.0)
        return QueuePart([row], ("a queue note",), ("Kubernetes queue wait: refused",))

    def failures(self, w: Window) -> list:  # type: ignore[type-arg]
        self._read("failures")
        return []

    def bench(self, w: Window) -> None:
        self._read("bench")

    def job_records(self, w: Window, gpus: GpuFigures) -> JobRecords:
        self._read("records")
        return JobRecords(scheduler={("", "7"): SchedulerJob("ada", "pi-a")})

    def pod_labels(self, w: Window, names: tuple[str, ...]) -> dict[PodKey, Labels] | None:
        self._read("labels")
        return {("", "ml", "p"): (("label_team", "vision"),)}

    job_span = StubSource.job_span
    job_states = StubSource.job_states
    session = StubSource.session
    describe = StubSource.describe
    close = StubSource.close


@pytest.mark.parametrize("parallel", [True, False])
def test_the_step_joins_labels_and_keeps_going_past_a_failed_part(parallel: bool) -> None:
    store = _Store(parallel, failing={"bench"})
    data = store.week(W)
    assert [g.uuid for g in data.gpus] == ["GPU-1", "GPU-2"] and data.history_start == 42.0
    by_gpu = {j.uuid: j for j in data.jobs}
    assert (by_gpu["GPU-1"].job.user, by_gpu["GPU-1"].account) == ("ada", "pi-a")  # the scheduler's record
    assert by_gpu["GPU-2"].labels == (("label_team", "vision"),)  # the pod's labels
    assert data.approximations == ("a store's note", "a queue note")
    assert data.problems == ("Kubernetes queue wait: refused", "benchmarks: bench refused")
    assert data.bench is None and len(data.queue) == 1
    # a store that allows it is read in a thread beside the jobs; an SQLite history is not
    assert (len(store.threads) > 1) == parallel
    without = _Store(parallel, failing=set()).week(W, jobs=False)
    assert without.jobs == () and without.problems == ("Kubernetes queue wait: refused",)


def test_a_job_s_records_that_fail_leave_it_unjoined_and_say_so() -> None:
    data = _Store(True, failing={"records"}).week(W)
    assert {j.job.job_id: j.account for j in data.jobs} == {"7": "", "": ""}
    assert "Slurm jobs' records: records refused" in data.problems
    assert any("without a user" in a for a in data.approximations)


def _store_source(s: FullSettings) -> Source:
    """What ``make_source`` reads the store with: inside the day cache (on by default), or bare."""
    source = make_source(s)
    assert isinstance(source, DayCached) and source.folder == s.analytics.reports_dir / ".days"
    bare = make_source(s.model_copy(update={"analytics": s.analytics.model_copy(update={"day_cache": False})}))
    assert type(bare) is type(source.inner)
    return source.inner


def test_analytics_source_chooses_the_source(tmp_path: Path) -> None:
    url = {"url": "http://127.0.0.1:1"}
    assert isinstance(_store_source(FullSettings(analytics={"source": "dcgm"}, prometheus=url)), DcgmSource)
    naming = FullSettings(analytics={"source": "prometheus"}, prometheus=url | {"naming": "dcgm"})
    assert isinstance(_store_source(naming), DcgmSource)  # --naming dcgm keeps working
    plain = FullSettings(analytics={"source": "prometheus"}, prometheus=url)
    assert isinstance(_store_source(plain), PrometheusSource)
    hist = tmp_path / "h.db"
    from exporter import history

    history.connect(hist).close()
    source = make_source(FullSettings(analytics={"source": "embedded", "history": str(hist)}))
    assert isinstance(source, EmbeddedSource) and source.describe() == f"the embedded history {hist}"
    source.close()


SOURCE_CLASSES = {"PrometheusSource", "DcgmSource", "EmbeddedSource", "PromQLSource", "PromAPI", "DayCached"}


def test_nothing_outside_the_sources_asks_a_source_s_type() -> None:
    """Outside analytics/sources/ only the composition root (pipeline.make_source) names a source
    class; no isinstance() against one and no getattr() of a source's attributes anywhere."""
    offenders = []
    for path in sorted((REPO / "analytics").rglob("*.py")) + sorted((REPO / "gpuledger").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("analytics/sources/"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("isinstance", "getattr")
            ):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
                    n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                }
                if names & SOURCE_CLASSES or (node.func.id == "getattr" and "source" in names):
                    offenders.append(f"{rel}:{node.lineno}")
            if not isinstance(node, ast.ImportFrom):
                continue
            imported = {a.name for a in node.names}
            if rel != "analytics/pipeline.py" and imported & (SOURCE_CLASSES - {"PromAPI"}):
                offenders.append(f"{rel}:{node.lineno} imports a source class")
    assert offenders == []
