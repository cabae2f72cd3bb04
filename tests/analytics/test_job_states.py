"""Slurm job states are defined once (``domain.states``): the dashboards' failed share,
the Prometheus source's failed GPU-hours and the report's failed columns count the same states."""

from __future__ import annotations

import re

from analytics.cost import CostModel
from analytics.report.build import build
from analytics.sources import promql
from domain import states
from domain.week import FailureWeek, GpuWeek, WeekData, iso_week
from grafana import queue

WEEK = iso_week("2026-W48")


def _dashboard_failed_states() -> set[str]:
    """The states the queue dashboard's "Failed share" panel counts, read from its query."""
    panel = next(p for p in queue.build().panels if p.get("title") == "Failed share")
    found = re.search(r'state=~"([^"]+)"', panel["targets"][0]["expr"])
    assert found is not None
    return set(found.group(1).split("|"))


def _report_failed_states() -> set[str]:
    """The states the report counts as failed (its failed and timeout columns), one job each."""
    gpu = GpuWeek("GPU-a", "n1", "NVIDIA H200", "0", WEEK.seconds, 0.0, None, None, None, None)
    out = set()
    for state in (*states.FINISHED, "SPECIAL_EXIT"):
        data = WeekData(WEEK, "t", (gpu,), failures=(FailureWeek("gpu", {state: 1}, 0, None),))
        row = build(data, CostModel()).failures[0]
        assert row.completed + row.failed + row.cancelled + row.timeout + row.other == 1, state  # none is lost
        if row.failed + row.timeout:
            out.add(state)
    return out


def test_the_dashboard_and_the_report_count_the_same_states_as_failed() -> None:
    dashboard = _dashboard_failed_states()
    assert dashboard == _report_failed_states() == set(promql.FAILED.split("|")) == set(states.FAILED)
    assert {"BOOT_FAIL", "DEADLINE", "TIMEOUT", "OUT_OF_MEMORY"} <= dashboard
    assert not dashboard & {states.COMPLETED, states.CANCELLED, "PREEMPTED"}


def test_every_failed_state_ends_a_job_and_none_of_them_is_running() -> None:
    assert set(states.FAILED) <= set(states.FINISHED)
    assert len(set(states.FINISHED)) == len(states.FINISHED) == 9  # Slurm's base states that end a job
    assert not set(states.REQUEUE) & set(states.FINISHED)
    assert states.RAN & set(states.FAILED) == set(states.FAILED) - set(states.NEVER_RAN)
