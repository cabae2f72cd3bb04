"""analytics.pipeline.fewer_collections: raised while any report is being made, restored by the
last one out, whatever order reports in two threads end in."""

from __future__ import annotations

import gc
import threading

from analytics.pipeline import fewer_collections


def test_overlapping_reports_restore_the_threshold_once_the_last_ends() -> None:
    before = gc.get_threshold()
    a, b = fewer_collections(), fewer_collections()
    a.__enter__()
    raised = gc.get_threshold()
    assert raised[0] > before[0]
    b.__enter__()
    a.__exit__(None, None, None)  # the first to start ends first: the second is still running
    assert gc.get_threshold() == raised
    b.__exit__(None, None, None)
    assert gc.get_threshold() == before


def test_reports_in_threads_leave_the_threshold_as_it_was() -> None:
    before = gc.get_threshold()
    inside = threading.Barrier(2)
    leave = threading.Event()

    def report(wait_to_leave: bool) -> None:
        with fewer_collections():
            inside.wait(5)
            if wait_to_leave:
                leave.wait(5)

    first, second = threading.Thread(target=report, args=(True,)), threading.Thread(target=report, args=(False,))
    first.start()
    second.start()
    second.join(5)  # the second ends while the first still runs
    assert gc.get_threshold()[0] > before[0]
    leave.set()
    first.join(5)
    assert gc.get_threshold() == before
