"""Real torch.distributed with gloo, two ranks on loopback: the workloads, their checks, teardown."""

from __future__ import annotations

import dataclasses
import math

import pytest

from exporter.benchmarks.plan import BENCHES, Inject, default_plan
from exporter.benchmarks.runner import BenchRunner, Event
from tests.support.processes import process_group_gone
from tests.support.tools import require_torch

# starts real components (see [tool.pytest.ini_options] markers): not in scripts/test --fast
pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _torch() -> None:
    require_torch()


def test_a_two_rank_gloo_round_is_correct_and_complete() -> None:
    runner = BenchRunner()
    events: list[Event] = []
    plan = default_plan(BENCHES, "gloo", 2, quick=True)
    out = runner.run(plan, timeout=240, on_event=events.append)
    assert out.status == dict.fromkeys(BENCHES, "ok"), out.stderr_tail
    r = out.result
    assert r.device == "cpu" and r.errors == {}
    ar = r.allreduce
    assert ar is not None and ar.wrong == 0 and ar.world_size == 2
    assert [row.size_bytes for row in ar.rows] == plan.allreduce.sizes()
    assert all(row.busbw == pytest.approx(row.algbw) for row in ar.rows)  # 2(n-1)/n = 1 at n = 2
    assert all(row.time_seconds > 0 and row.iters >= plan.allreduce.min_iters for row in ar.rows)
    t = r.train
    assert t is not None and [row.world_size for row in t.rows] == [1, 2]
    one, two = t.rows
    assert one.speedup == 1.0 and one.efficiency == 1.0
    assert math.isfinite(two.speedup) and two.speedup > 0 and two.efficiency == pytest.approx(two.speedup / 2)
    assert two.allreduce_share is not None and 0.0 <= two.allreduce_share <= 1.0
    assert two.predicted_speedup_no_overlap is not None and 0 < two.predicted_speedup_no_overlap <= 2.0
    assert t.params > 0 and t.grad_bytes == 4 * t.params
    assert r.matmul is not None and {m.dtype for m in r.matmul} == {"float32", "bfloat16"}
    assert all(m.flops_per_second > 0 and len(m.per_rank) == 2 for m in r.matmul)
    assert r.memcpy is not None and r.memcpy[0].kind == "host" and r.memcpy[0].bytes_per_second > 0
    assert set(out.durations) == set(BENCHES)
    assert sum(1 for e in events if e["event"] == "progress" and e["bench"] == "allreduce") == len(ar.rows)
    assert runner.last_pgid is not None and process_group_gone(runner.last_pgid)


def test_an_injected_wrong_reduction_is_caught_and_fails_the_run() -> None:
    plan = dataclasses.replace(default_plan(("allreduce",), "gloo", 2, quick=True), inject=Inject(wrong_reduction=True))
    out = BenchRunner().run(plan, timeout=120)
    assert out.status == {"allreduce": "failed"}
    assert out.result.allreduce is not None and out.result.allreduce.wrong == 1
    assert out.result.allreduce.rows[0].wrong == 1 and all(r.wrong == 0 for r in out.result.allreduce.rows[1:])


def test_one_rank_has_no_bus_traffic() -> None:
    out = BenchRunner().run(default_plan(("allreduce",), "gloo", 1, quick=True), timeout=120)
    assert out.status == {"allreduce": "ok"}
    assert out.result.allreduce is not None and all(r.busbw == 0.0 for r in out.result.allreduce.rows)


def test_a_rank_that_crashes_fails_the_round_and_takes_the_others_down() -> None:
    runner = BenchRunner()
    plan = dataclasses.replace(default_plan(("allreduce", "train"), "gloo", 2, quick=True), inject=Inject(crash=True))
    out = runner.run(plan, timeout=120)
    assert out.status == {"allreduce": "failed", "train": "failed"}
    assert out.exit_code not in (0, None) and "a rank exited with 3" in out.stderr_tail
    # the launcher stopped rank 0 and exited with the crashed rank's code instead of letting it wait
    # out the timeout (a round killed at the timeout ends by a signal, as "timeout")
    assert out.exit_code == 3
    assert runner.last_pgid is not None and process_group_gone(runner.last_pgid)


def test_a_rank_that_hangs_is_killed_at_the_timeout_with_its_whole_group() -> None:
    runner = BenchRunner(grace=2.0)
    plan = dataclasses.replace(default_plan(("allreduce", "train"), "gloo", 2, quick=True), inject=Inject(hang=True))
    out = runner.run(plan, timeout=8)
    assert out.status == {"allreduce": "timeout", "train": "timeout"}
    assert out.duration >= 8  # it ran until the timeout, then the kill ended it (the hang never would)
    assert runner.last_pgid is not None and process_group_gone(runner.last_pgid)
