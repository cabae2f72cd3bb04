"""The sampler with the fake reader: integration, failures, lost GPUs, NVML down, XIDs."""

from __future__ import annotations

import pytest

from exporter.readers import (
    GpmActivity,
    GpuLost,
    NotSupported,
    Process,
    ReaderError,
    ReaderUnavailable,
)
from exporter.readers.fake import FakeReader
from exporter.snapshot import MinuteRow
from tests.support.clock import FakeMonotonic
from tests.support.sampling import make_sampler, step
from tests.support.wait import wait_until


def test_counters_integrate_busy_allocated_and_idle() -> None:
    r = FakeReader(2)
    s = make_sampler(r)
    s.tick()
    r.gpus[0].util = 0.5
    r.gpus[0].processes = [Process(pid=7, used_memory_bytes=1 << 30)]
    step(s, r, 1.0, ticks=10)
    r.gpus[0].util = 0.0  # a process still holds the GPU, doing nothing
    step(s, r, 1.0, ticks=4)
    g0, g1 = s.snapshot.gpus
    assert g0.counters.sampled_seconds == pytest.approx(14.0)
    assert g0.counters.busy_seconds == pytest.approx(5.0)
    assert g0.counters.allocated_seconds == pytest.approx(14.0)
    assert g0.counters.allocated_idle_seconds == pytest.approx(4.0)
    assert g1.counters.busy_seconds == 0.0 and g1.counters.allocated_seconds == 0.0
    assert g0.gauges.processes == 1 and g0.up and g1.up


def test_busy_comes_from_the_samples_buffer_not_the_instant_gauge() -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    g = r.gpus[0]
    # 60 % of each second busy in the buffer (5 samples/s); the gauge reads 0 at every tick
    for _ in range(10):
        g.util = 1.0
        r.advance(0.6)
        g.util = 0.0
        r.advance(0.4)
        s.tick()
    c = s.snapshot.gpus[0].counters
    assert c.busy_seconds / c.sampled_seconds == pytest.approx(0.6, abs=1e-9)
    assert s.snapshot.gpus[0].gauges.utilization == 0.0


def test_falls_back_to_utilization_rates_without_a_samples_buffer() -> None:
    r = FakeReader(1)
    r.gpus[0].unsupported.add("utilization_samples")
    r.gpus[0].util = 0.25
    s = make_sampler(r)
    s.tick()
    step(s, r, 2.0, ticks=5)
    c = s.snapshot.gpus[0].counters
    assert c.busy_seconds == pytest.approx(2.5)
    assert "utilization_samples" not in s.snapshot.reader_errors  # unsupported is not an error


def test_gpm_activity_integrates_and_is_absent_when_unsupported() -> None:
    r = FakeReader(2)
    r.gpus[0].gpm = GpmActivity(sm=0.6, tensor=0.3, dram=0.2, sm_occupancy=0.1)
    s = make_sampler(r)
    s.tick()
    step(s, r, 1.0, ticks=10)
    g0, g1 = s.snapshot.gpus
    assert g0.counters.sm_active_seconds == pytest.approx(6.0)
    assert g0.counters.tensor_active_seconds == pytest.approx(3.0)
    assert g0.counters.dram_active_seconds == pytest.approx(2.0)
    assert g1.counters.sm_active_seconds is None  # not zero: not measured


def test_energy_from_counter_with_reset_and_from_power_when_unsupported() -> None:
    r = FakeReader(2)
    r.gpus[0].power_watts = 300.0
    r.gpus[1].power_watts = 200.0
    r.gpus[1].unsupported.add("energy_joules")
    s = make_sampler(r)
    s.tick()
    s.slow_tick()
    step(s, r, 1.0, ticks=10)
    g0, g1 = s.snapshot.gpus
    assert g0.counters.energy_joules == pytest.approx(3000.0)
    assert g1.counters.energy_joules == pytest.approx(2000.0, rel=0.11)  # power integral (first tick is baseline)
    r.gpus[0].energy_joules = 5.0  # driver reload: the counter restarts
    step(s, r, 1.0, ticks=2)
    assert s.snapshot.gpus[0].counters.energy_joules == pytest.approx(3300.0)


def test_injected_failures_are_counted_and_never_stop_sampling() -> None:
    r = FakeReader(2)
    s = make_sampler(r)
    s.tick()
    r.fail("power_watts", gpu=0, times=3)
    r.fail("utilization", gpu=1, times=2)
    r.fail("energy_joules", times=1)
    step(s, r, 1.0, ticks=5)
    snap = s.snapshot
    assert snap.reader_errors == {"power_watts": 3, "utilization": 2, "energy_joules": 1}
    g0, g1 = snap.gpus
    assert g0.counters.sampled_seconds == pytest.approx(5.0)
    assert g1.counters.sampled_seconds == pytest.approx(3.0)  # two ticks without utilisation: not covered
    assert g0.gauges.power_watts == 100.0 and g0.up and g1.up


def test_unexpected_exception_in_a_tick_is_logged_and_sampling_continues(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    r.fail("memory", error=RuntimeError("bug"))  # type: ignore[arg-type]
    r.advance(1.0)
    s.tick()
    step(s, r, 1.0, ticks=2)
    assert "sampler tick failed" in caplog.text
    # the failed round's second is folded into the next round (within the gap limit)
    assert s.snapshot.gpus[0].counters.sampled_seconds == pytest.approx(3.0)


def test_a_lost_gpu_goes_down_while_the_others_keep_exporting() -> None:
    r = FakeReader(3)
    s = make_sampler(r, lost_retry=0.0)
    s.tick()
    step(s, r, 1.0, ticks=2)
    r.lose(1)
    step(s, r, 1.0, ticks=3)
    g0, g1, g2 = s.snapshot.gpus
    assert (g0.up, g1.up, g2.up) == (True, False, True)
    assert g1.counters.sampled_seconds == pytest.approx(2.0)  # frozen, still exported
    assert g2.counters.sampled_seconds == pytest.approx(5.0)
    r.lose(1, lost=False)
    step(s, r, 1.0, ticks=3)
    g1 = s.snapshot.gpus[1]
    assert g1.up
    assert g1.counters.sampled_seconds == pytest.approx(4.0)  # no guess across the lost period


def test_lost_gpu_from_the_slow_lane() -> None:
    r = FakeReader(2)
    s = make_sampler(r, lost_retry=60.0)
    s.tick()
    r.fail("energy_joules", gpu=0, error=GpuLost("fell off the bus", call="energy_joules", gpu=0))
    step(s, r, 1.0, ticks=2)
    assert [g.up for g in s.snapshot.gpus] == [False, True]


def test_no_driver_serves_nvml_down_then_recovers_with_backoff(frozen_monotonic: FakeMonotonic) -> None:
    r = FakeReader(1, open_error=ReaderUnavailable("Driver Not Loaded", call="open"))
    s = make_sampler(r, nvml_retry_max=0.2)
    s.tick()
    snap = s.snapshot
    assert not snap.nvml_up and snap.gpus == () and snap.seq == 1
    for _ in range(3):
        s.tick()  # inside the backoff window: no new open attempt
    assert r.opened == 1
    r.open_error = None
    frozen_monotonic.advance(0.25)
    s.tick()
    assert s.snapshot.nvml_up and len(s.snapshot.gpus) == 1


def test_reader_going_away_marks_everything_down_and_reinitialises(frozen_monotonic: FakeMonotonic) -> None:
    r = FakeReader(2)
    s = make_sampler(r, nvml_retry_max=0.1)
    s.tick()
    step(s, r, 1.0, ticks=2)
    r.fail("utilization", error=ReaderUnavailable("Uninitialized", call="utilization"))
    r.advance(1.0)
    s.tick()
    assert not s.snapshot.nvml_up and not any(g.up for g in s.snapshot.gpus)
    frozen_monotonic.advance(1.1)
    step(s, r, 1.0, ticks=2)
    snap = s.snapshot
    assert snap.nvml_up and all(g.up for g in snap.gpus)
    assert snap.gpus[0].counters.sampled_seconds == pytest.approx(3.0)  # kept across the re-init


def test_clock_event_seconds_per_reason() -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    r.gpus[0].clock_event_reasons = 0x4 | 0x40  # sw power cap + hw thermal slowdown
    step(s, r, 1.0, ticks=3)
    c = s.snapshot.gpus[0].counters.clock_event_seconds
    assert c["sw_power_cap"] == pytest.approx(3.0) and c["hw_thermal_slowdown"] == pytest.approx(3.0)
    assert c["gpu_idle"] == 0.0 and len(c) == 9


def test_a_stall_longer_than_the_gap_limit_is_not_integrated() -> None:
    r = FakeReader(1)
    r.gpus[0].util = 1.0
    s = make_sampler(r)
    s.tick()
    step(s, r, 1.0, ticks=2)
    step(s, r, 30.0)  # the sampler was stuck for 30 s: no guessing
    step(s, r, 1.0, ticks=2)
    assert s.snapshot.gpus[0].counters.sampled_seconds == pytest.approx(4.0)


def test_xid_events_are_counted_by_the_watcher_thread() -> None:
    r = FakeReader(2)
    s = make_sampler(r)
    s.start()
    try:
        r.emit_xid(1, 79)
        r.emit_xid(1, 79)
        r.emit_xid(0, 48)

        def counted() -> bool:
            s.tick()
            g0, g1 = s.snapshot.gpus
            return g1.counters.xid_errors.get(79) == 2 and g0.counters.xid_errors.get(48) == 1

        wait_until(counted)
        g0, g1 = s.snapshot.gpus
        assert g1.counters.xid_errors == {79: 2} and g0.counters.xid_errors == {48: 1}
    finally:
        s.stop()


def test_xid_watcher_stops_quietly_when_unsupported() -> None:
    r = FakeReader(1)
    r.fail("wait_xid", error=NotSupported("no events"))
    s = make_sampler(r)
    s.start()
    xid_threads = [t for t in s._threads if t.name == "gpuledger-xid"]
    assert xid_threads and wait_until(lambda: not xid_threads[0].is_alive())
    s.stop()


def test_minute_rollups_hold_the_counter_increments() -> None:
    r = FakeReader(2)
    r.gpus[0].util = 0.5
    rows: list[MinuteRow] = []
    wall = [600.0]
    s = make_sampler(r)
    s._minute_sink = rows.extend  # type: ignore[assignment]
    s._wall = lambda: wall[0]
    s.tick()
    for _ in range(150):  # 2.5 minutes at 1 s
        wall[0] += 1.0
        r.advance(1.0)
        s.tick()
        s.slow_tick()
    s.stop()  # flushes the partial third minute
    by_minute: dict[int, dict[str, MinuteRow]] = {}
    for row in rows:
        by_minute.setdefault(row.minute, {})[row.info.uuid] = row
    assert sorted(by_minute) == [600, 660, 720]
    uuid0 = r.gpus[0].uuid
    assert by_minute[660][uuid0].values["sampled_seconds"] == pytest.approx(60.0)
    assert by_minute[660][uuid0].values["busy_seconds"] == pytest.approx(30.0)
    assert by_minute[660][uuid0].values["sm_active_seconds"] is None
    total = sum(m[uuid0].values["sampled_seconds"] or 0.0 for m in by_minute.values())
    assert total == pytest.approx(s.snapshot.gpus[0].counters.sampled_seconds)


def test_reader_error_without_call_name_gets_one() -> None:
    r = FakeReader(1)
    s = make_sampler(r)
    s.tick()
    r.fail("temperature_celsius", error=ReaderError("Unknown Error"))
    step(s, r)
    assert s.snapshot.reader_errors == {"temperature_celsius": 1}
