"""A source for tests that hand the report their own window data: the ``Source`` protocol's
primitives that a report built from ``week`` never asks for, answered empty."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from analytics.sources.base import GpuFigures, JobFigures, JobRecords, Labels, PodKey, QueuePart, Span
from analytics.sources.enrich import Enriched
from domain.week import BenchWeek, FailureWeek, WeekData, Window


class StubSource(Enriched):
    """Subclass and give it ``week`` (it keeps no days: ``Enriched``'s)."""

    name = "fake"
    parallel = False
    pod_label_names: tuple[str, ...] = ()

    def week(self, window: Window, *, jobs: bool = True) -> WeekData:
        raise NotImplementedError

    def gpus(self, w: Window) -> GpuFigures:
        raise NotImplementedError

    def jobs(self, w: Window, gpus: GpuFigures) -> JobFigures:
        raise NotImplementedError

    def history_start(self, w: Window) -> float | None:
        return None

    def queue(self, w: Window) -> QueuePart:
        return QueuePart()

    def failures(self, w: Window) -> list[FailureWeek]:
        return []

    def bench(self, w: Window) -> BenchWeek | None:
        return None

    def job_records(self, w: Window, gpus: GpuFigures) -> JobRecords:
        return JobRecords()

    def pod_labels(self, w: Window, names: tuple[str, ...]) -> dict[PodKey, Labels] | None:
        return None

    def job_span(self, job: str, now: float) -> Span | None:
        return None

    def job_states(self, start: float, end: float) -> dict[str, str] | None:
        return None

    def session(self) -> AbstractContextManager[None]:
        return nullcontext()

    def describe(self) -> str:
        return "a test's source"

    def close(self) -> None:
        pass
