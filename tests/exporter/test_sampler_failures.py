"""The sampler's health when reading GPUs fails: a streak of failed rounds turns /healthz to 503
and back, a round that raises outright counts as failed, and a bug is logged with its traceback
once per kind, not once per GPU or per round."""

from __future__ import annotations

import logging

import pytest

from exporter.readers.fake import FakeReader
from exporter.sampling import sampler as sampler_mod
from exporter.sampling import slowlane
from exporter.scrape.cache import RenderCache
from exporter.scrape.site import ExporterSite
from tests.support.sampling import make_sampler, step


def test_a_sampler_that_keeps_failing_turns_healthz_to_503_and_back(caplog: pytest.LogCaptureFixture) -> None:
    r = FakeReader(2)
    s = make_sampler(r)
    site = ExporterSite(lambda: s.snapshot, RenderCache(lambda: s.snapshot), 10.0, s.failure)
    step(s, r, 1.0, ticks=2)
    assert site.health()[0] and s.failure() is None
    real = r.utilization

    def broken(index: int) -> object:
        if index == 1:
            raise RuntimeError("a bug in the reader")
        return real(index)

    r.utilization = broken  # type: ignore[assignment,method-assign]
    caplog.set_level(logging.DEBUG, logger="exporter.sampling.sampler")
    for _ in range(sampler_mod.FAILING_AFTER - 1):
        r.advance(1.0)
        s.tick()
    assert site.health()[0], "one or two failed rounds are not yet a failing sampler"
    step(s, r, 1.0, ticks=5)
    ok, info = site.health()
    assert not ok and info["status"] == "failing"
    assert "gpu 1: RuntimeError: a bug in the reader" in str(info["reason"])
    assert s.snapshot.gpus[0].counters.sampled_seconds > 0  # the healthy GPU kept being sampled
    errors = [x for x in caplog.records if x.levelno >= logging.ERROR]
    assert sum(x.exc_info is not None for x in errors) == 1, "one traceback per streak, not one per round"
    r.utilization = real  # type: ignore[method-assign]
    step(s, r, 1.0, ticks=1)
    ok, info = site.health()
    assert ok and info["status"] == "ok" and "reason" not in info
    assert any("recovered after" in x.getMessage() for x in caplog.records)


def test_a_round_that_raises_outright_counts_as_failed() -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()

    def boom() -> None:
        raise ValueError("roll-up broke")

    s._roll_minute = boom  # type: ignore[method-assign]
    for _ in range(sampler_mod.FAILING_AFTER):
        s.tick()
    assert "ValueError: roll-up broke" in (s.failure() or "")


def test_every_gpu_failing_at_once_is_one_traceback_and_so_is_a_failing_slow_lane(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bug on all 8 GPUs in the first round: one ERROR with its traceback, not 8; a slow
    lane that keeps failing (its rounds do not count as failed fast rounds): one, not one a second."""
    r = FakeReader(8)
    s = make_sampler(r)

    def broken(index: int) -> object:
        raise RuntimeError("a bug in the reader")

    caplog.set_level(logging.DEBUG, logger="exporter.sampling.sampler")
    r.utilization = broken  # type: ignore[assignment,method-assign]
    s.tick()
    fast = [x for x in caplog.records if x.levelno >= logging.ERROR and x.exc_info is not None]
    assert len(fast) == 1 and "gpu 0" in fast[0].getMessage()
    assert sum(x.levelno == logging.DEBUG and x.exc_info is not None for x in caplog.records) == 7  # kept, quietly
    caplog.clear()
    r2 = FakeReader(2)
    s2 = make_sampler(r2)

    def slow_bug(*args: object) -> object:
        raise KeyError("a bug in the slow lane")

    monkeypatch.setattr(slowlane, "read", slow_bug)
    for _ in range(5):
        r2.advance(1.0)
        s2.tick()
        s2.slow_tick()
    assert s2.failure() is None  # the fast rounds are fine
    slow = [x for x in caplog.records if x.levelno >= logging.ERROR and x.exc_info is not None]
    assert len(slow) == 1, [x.getMessage() for x in slow]
