"""The exposed all-reduce time in ``gpuledger scaling`` (issue 23): the step timer runs a window of
steps inside the script's ``no_sync`` (DDP's ``model.no_sync``), and the synced steps' time less
these is the all-reduce time the steps did not hide. Checked on its parts and, with gloo on two
CPU ranks, against the example's known all-reduce delay."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from gpuledger import scaling_math as sm
from gpuledger import steptimer
from tests.support.scaling import rows_of, run_scaling


def test_the_window_splits_synced_from_unsynced_steps() -> None:
    times = [9.0] * 5 + [5.0, 1.0, 1.0, 1.0, 1.0] + [4.0] + [2.0] * 6
    synced, unsynced = sm.split_no_sync(times, [5, 5]) or ([], [])
    assert synced == [2.0] * 6  # after the window and the step that all-reduces what it accumulated
    assert unsynced == [1.0] * 4  # the window but its first step (behind a synced step's queue)
    assert sm.steady_start([5, 5], 5) == 11 and sm.steady_start(None, 5) == 5
    assert sm.split_no_sync(times, None) is None
    assert sm.split_no_sync(times, [5, "x"]) is None  # a file the command cannot read is not guessed
    assert sm.split_no_sync(times[:12], [5, 5]) is None  # one synced step after it: too few


def _no_sync() -> tuple[list[bool], Callable[[], AbstractContextManager[None]]]:
    syncing = [True]

    @contextmanager
    def no_sync() -> Iterator[None]:
        syncing[0] = False
        try:
            yield
        finally:
            syncing[0] = True

    return syncing, no_sync


@pytest.mark.parametrize(("world", "window"), [("2", "3,4"), ("1", "3,4"), ("2", ""), ("2", "bad")])
def test_the_helper_runs_only_the_asked_steps_without_the_all_reduce(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, world: str, window: str
) -> None:
    monkeypatch.setenv(steptimer.STEP_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv(steptimer.NO_SYNC_ENV, window)
    log: list[bool] = []
    syncing, no_sync = _no_sync()
    for _ in steptimer.steps(range(10), no_sync=no_sync):
        log.append(syncing[0])
    asked = world == "2" and window == "3,4"  # one rank has nothing to all-reduce; no window asked
    assert log == ([True] * 3 + [False] * 4 + [True] * 3 if asked else [True] * 10)
    doc = json.loads((tmp_path / "rank-0.json").read_text())
    assert doc["no_sync"] == ([3, 4] if asked else None) and len(doc["step_seconds"]) == 10


@pytest.mark.integration
def test_the_exposed_all_reduce_is_the_examples_known_delay(tmp_path: Path) -> None:
    """Each step computes 40 ms and all-reduces for 40 ms more (the example's --comm-seconds, plus
    gloo's own milliseconds): the two-rank step is about 80 ms, its exposed all-reduce about 40 ms,
    half the step; one rank has none to measure."""
    r, doc = run_scaling(
        tmp_path, ["--gpus", "1,2"], ["--helper", "--steps", "30", "--step-seconds", "0.04", "--comm-seconds", "0.04"]
    )
    assert r.returncode == 0, r.stderr
    rows = rows_of(doc)
    assert rows[1]["exposed_comm_seconds"] is None and rows[1]["exposed_comm_share"] is None
    two = rows[2]
    assert 0.075 < two["step_seconds"] < 0.12, two  # the window's steps are not in the step time
    assert 0.035 < two["exposed_comm_seconds"] < 0.06, two
    assert 0.35 < two["exposed_comm_share"] < 0.65, two
    assert "# exposed all-reduce (steps run without it" in r.stdout and "2 ranks" in r.stdout
    # the communication model: at 4 ranks the ring sends 1.5x the bytes per rank at the bandwidth seen
    [p] = doc["comm_predictions"]
    assert p["n"] == 4 and p["source"] == "your exposed all-reduce at 2 ranks"
    compute, exposed = two["step_seconds"] - two["exposed_comm_seconds"], two["exposed_comm_seconds"]
    assert p["predicted_speedup"] == pytest.approx(4 * rows[1]["step_seconds"] / (compute + 1.5 * exposed))
    assert "# prediction (communication model: " in r.stdout and "Gustafson" not in r.stdout
