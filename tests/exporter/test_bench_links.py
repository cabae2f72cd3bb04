"""The benchmarks and the links (issue 22): each NVLink link's speed as a row of the fact table, the
NVLink bytes an all-reduce sweep moved (the links' counters read at its begin and at its result,
summed over GPUs and links) and its bus bandwidth over the links' line rate, through the fake reader
(NVLink links, counters that grow with its clock), the scheduler, the state, the history's records
and the benchmark's metrics. Absent, not zero, without NVLink."""

from __future__ import annotations

import dataclasses
import json

import pynvml
import pytest

from exporter.benchmarks import report
from exporter.benchmarks.links import RoundLinks, figures, line_rate, moved
from exporter.benchmarks.metrics import FEATURE
from exporter.benchmarks.plan import Plan, default_plan
from exporter.benchmarks.results import PARSERS, AllreduceLinks, AllreduceResult, RoundResult, allreduce_row, plain
from exporter.benchmarks.runner import BenchRunner, Event, Outcome, Rendezvous
from exporter.benchmarks.scheduler import BenchScheduler
from exporter.benchmarks.state import BenchSnapshot, BenchState
from exporter.config import BenchSettings
from exporter.facts import FACTS, nvlink
from exporter.readers import Const, FactValue, Grows
from exporter.readers.fake import FakeReader
from exporter.readers.nvml import NvmlReader
from exporter.registry import samples
from exporter.sampling.sampler import Sampler
from exporter.scrape import render
from exporter.scrape.table import BY_NAME
from exporter.snapshot import EMPTY
from tests.support.fake_pynvml import FakeNvml
from tests.support.metrics import parse_metrics
from tests.support.sampling import make_sampler, step
from tests.support.tools import require_torch

LINKS, SPEED = 4, 26_562e6  # an H100's NVLink4 link: 26,562 MB/s per direction
PER_LINK = 5e8  # the fake's NVLink counters grow 0.5 GB/s per link and direction (nvlink.TX.fake)
ROWS = (allreduce_row(1 << 20, 1 << 18, 1e-4, 100, 2, 0), allreduce_row(1 << 24, 1 << 22, 1e-3, 50, 2, 0))


def sampled(gpus: int = 2, nvlinks: int = LINKS) -> tuple[FakeReader, Sampler]:
    r = FakeReader(gpus)
    for g in r.gpus:
        g.nvlinks = nvlinks
    s = make_sampler(r)
    s.tick()
    step(s, r, 1.0, ticks=2)
    return r, s


def sweep(links: AllreduceLinks | None = None) -> AllreduceResult:
    return AllreduceResult("gloo", 2, "float32", ROWS, links)


def bench_metrics(b: BenchSnapshot) -> dict[str, dict[tuple[str, ...], float]]:
    snap = dataclasses.replace(EMPTY, parts={BenchSnapshot: b})
    out: dict[str, dict[tuple[str, ...], float]] = {}
    for m in FEATURE.metrics:
        got = {k: float(v) for k, v in samples(m, snap)}  # type: ignore[arg-type]
        if got:
            out[m.name] = got
    return out


# --- the fact row ----------------------------------------------------------------------------------------


def test_a_links_speed_is_one_row_read_in_the_health_lane_and_served_per_link() -> None:
    assert nvlink.LINK_SPEED in FACTS and nvlink.LINK_SPEED.per_link and not nvlink.LINK_SPEED.counter
    assert nvlink.LINK_SPEED.lane == "health" and nvlink.LINK_SPEED.fake == Const(SPEED)
    _, s = sampled(nvlinks=2)
    g = s.snapshot.gpus[0]
    assert g.facts["nvlink_speed"] == {0: SPEED, 1: SPEED}
    got = {labels[2:]: v for labels, v in samples(BY_NAME["gpuledger_gpu_nvlink_speed_bytes_per_second"], s.snapshot)}
    assert got == {("0",): SPEED, ("1",): SPEED}
    text = render.render(s.snapshot).decode()
    assert "# TYPE gpuledger_gpu_nvlink_speed_bytes_per_second gauge" in text
    m = parse_metrics(text)["gpuledger_gpu_nvlink_speed_bytes_per_second"]
    assert m[(("gpu", "1"), ("link", "1"), ("uuid", s.snapshot.gpus[1].info.uuid))] == SPEED


def test_a_gpu_without_nvlink_has_no_speed_series() -> None:
    _, s = sampled(nvlinks=0)
    assert all("nvlink_speed" not in g.facts for g in s.snapshot.gpus)
    assert "gpuledger_gpu_nvlink_speed_bytes_per_second" not in render.render(s.snapshot).decode()


def test_nvml_answers_the_speed_per_link_in_mb_per_second() -> None:
    fake = FakeNvml(1, nvlinks=2)
    r = NvmlReader(fake)
    r.open()
    assert r.read_facts(0, [nvlink.LINK_SPEED])["nvlink_speed"] == {0: 26_562e6, 1: 26_562e6}
    assert (pynvml.NVML_FI_DEV_NVLINK_GET_SPEED, 1) in fake.asked  # the link as the field's scope id


# --- counting a round -------------------------------------------------------------------------------------


def test_the_sampler_reads_the_links_now_without_touching_the_lanes_counters() -> None:
    r, s = sampled()
    counted = dict(s.snapshot.gpus[0].counters.facts)
    before = s.read_facts(nvlink.ROUND)
    r.advance(10.0)
    after = s.read_facts(nvlink.ROUND)
    assert set(before) == set(after) == {0, 1}
    assert after[0]["nvlink_speed"] == dict.fromkeys(range(LINKS), SPEED)
    tx = moved(before, after, "nvlink_tx_bytes")
    assert tx is not None and tx[1] == 2
    assert tx[0] == pytest.approx(2 * LINKS * PER_LINK * 10)
    s.tick()
    assert s.snapshot.gpus[0].counters.facts == counted  # the lanes fold their own readings only
    assert s.read_facts(()) == {}


def test_bytes_are_the_counters_increase_summed_over_gpus_and_links() -> None:
    before = {0: {"nvlink_tx_bytes": {0: 100.0, 1: 200.0}}, 1: {"nvlink_tx_bytes": {0: 50.0}}, 2: {}}
    after = {
        0: {"nvlink_tx_bytes": {0: 1100.0, 1: 150.0, 2: 9.0}},  # link 1 went backwards; link 2 new: nothing
        1: {"nvlink_tx_bytes": {0: 550.0}},
        2: {"nvlink_tx_bytes": {0: 7.0}},  # no reading before: not counted
        3: {},
    }
    assert moved(before, after, "nvlink_tx_bytes") == (1000.0 + 500.0, 2)
    assert moved(before, after, "nvlink_rx_bytes") is None
    assert figures(before, after) is None  # absent, not zero


def test_the_line_rate_is_the_slowest_gpus_active_links() -> None:
    fast = {"nvlink_speed": {0: 25e9, 1: 25e9, 2: 25e9}, "nvlink_state": {0: 1.0, 1: 1.0, 2: 1.0}}
    slow = {"nvlink_speed": {0: 25e9, 1: 25e9, 2: 25e9}, "nvlink_state": {0: 1.0, 1: 0.0, 2: 1.0}}  # link 1 down
    no_state: dict[str, FactValue] = {"nvlink_speed": {0: 25e9, 1: 25e9, 2: 25e9, 3: 25e9}}
    assert line_rate({0: fast, 1: slow}) == 50e9
    assert line_rate({0: no_state}) == 100e9
    assert line_rate({0: {"nvlink_state": {0: 1.0}}}) is None


def test_the_links_are_read_at_the_all_reduces_begin_and_result_only() -> None:
    reads: list[int] = []
    links = RoundLinks(lambda: reads.append(len(reads)) or {})  # type: ignore[func-returns-value]
    seen: list[Event] = []
    on_event = links.watching(seen.append)
    for ev in (
        {"event": "start", "device": "cpu"},
        {"event": "result", "bench": "allreduce"},  # no begin yet: not the end of anything
        {"event": "begin", "bench": "allreduce"},
        {"event": "begin", "bench": "train"},
        {"event": "result", "bench": "allreduce"},
        {"event": "error", "bench": "allreduce"},
    ):
        on_event(ev)
    assert reads == [0, 1] and len(seen) == 6

    def broken() -> dict[int, dict[str, FactValue]]:
        raise RuntimeError("reader gone")

    failing = RoundLinks(broken)
    failing.watching(seen.append)({"event": "begin", "bench": "allreduce"})  # logged, handed on, never raised
    assert len(seen) == 7 and failing.before is None


# --- through the scheduler, the state, the history's records and the metrics -----------------------------


class SweepRunner(BenchRunner):
    """A round without a child: the all-reduce begins, the fake's clock moves, its result arrives."""

    def __init__(self, reader: FakeReader, seconds: float, result: AllreduceResult | None) -> None:
        super().__init__()
        self.reader, self.seconds, self.result = reader, seconds, result

    def run(
        self,
        plan: Plan,
        timeout: float,
        on_event: object = None,
        rdzv: Rendezvous | None = None,
    ) -> Outcome:
        assert callable(on_event)
        out = Outcome(plan=plan, result=RoundResult(plan.backend, plan.world_size))
        on_event({"event": "begin", "bench": "allreduce"})
        self.reader.advance(self.seconds)
        out.result.allreduce = self.result
        on_event({"event": "result" if self.result else "error", "bench": "allreduce"})
        out.status = {"allreduce": "ok" if self.result else "failed"}
        return out


def round_on(reader: FakeReader, sampler: Sampler, result: AllreduceResult | None) -> tuple[BenchState, list[str]]:
    state = BenchState(["allreduce"])
    kept: list[str] = []
    settings = BenchSettings(idle_window=0, benches=["allreduce"])
    runner = SweepRunner(reader, 10.0, result)
    sched = BenchScheduler(settings, sampler, state, lambda rs: kept.extend(r.data or "" for r in rs), runner)
    assert sched.run_round() is not None
    return state, kept


def test_a_round_records_the_nvlink_bytes_of_its_sweep_and_its_busbw_over_the_line_rate() -> None:
    r, s = sampled()
    state, kept = round_on(r, s, sweep())
    ar = state.snapshot().allreduce
    assert ar is not None and ar.links is not None
    moved_tx = 2 * LINKS * PER_LINK * 10  # 2 GPUs x 4 links x 0.5 GB/s x 10 s
    assert ar.links.tx_bytes == pytest.approx(moved_tx) and ar.links.rx_bytes == pytest.approx(moved_tx)
    assert ar.links.gpus == 2
    assert ar.links.line_rate == pytest.approx(LINKS * SPEED)
    assert ar.line_rate_ratio == pytest.approx(ar.busbw_largest / (LINKS * SPEED))
    m = bench_metrics(state.snapshot())
    assert m["gpuledger_bench_allreduce_nvlink_bytes"] == {
        ("gloo", "2", "tx"): pytest.approx(moved_tx),
        ("gloo", "2", "rx"): pytest.approx(moved_tx),
    }
    assert m["gpuledger_bench_allreduce_nvlink_line_rate_bytes_per_second"] == {("gloo", "2"): LINKS * SPEED}
    assert m["gpuledger_bench_allreduce_busbw_line_rate_ratio"] == {("gloo", "2"): pytest.approx(ar.line_rate_ratio)}
    # the history keeps the figures with the result, and a restart serves them again
    (record,) = kept
    assert json.loads(record)["links"]["tx_bytes"] == pytest.approx(moved_tx)
    restored = BenchState(["allreduce"])
    restored.restore(state.record(_outcome(ar)))
    assert restored.snapshot().allreduce == ar
    assert "NVLink during the sweep: 40.000 GB sent" in report.allreduce_table(ar)
    assert "busbw at the largest size / line rate" in report.allreduce_table(ar)


def _outcome(ar: AllreduceResult) -> Outcome:
    plan = default_plan(("allreduce",), "gloo", 2, quick=True)
    out = Outcome(plan=plan, result=RoundResult("gloo", 2, allreduce=ar), started=1_795_000_000.0, duration=1.0)
    out.status = {"allreduce": "ok"}
    return out


def test_without_nvlink_the_link_figures_are_absent_not_zero() -> None:
    r, s = sampled(nvlinks=0)
    state, _ = round_on(r, s, sweep())
    ar = state.snapshot().allreduce
    assert ar is not None and ar.links is None and ar.line_rate_ratio is None
    m = bench_metrics(state.snapshot())
    assert "gpuledger_bench_allreduce_busbw_bytes_per_second" in m
    assert not {n for n in m if "nvlink" in n or "line_rate" in n}
    assert "NVLink" not in report.allreduce_table(ar)


def test_without_a_link_speed_the_bytes_are_kept_and_the_ratio_is_absent() -> None:
    r = FakeReader(2)
    for g in r.gpus:
        g.nvlinks = 2
        g.unsupported.add("nvlink_speed")
        g.facts["nvlink_tx_bytes"] = Grows(1e9)
    s = make_sampler(r)
    s.tick()
    step(s, r, 1.0)
    state, _ = round_on(r, s, sweep())
    ar = state.snapshot().allreduce
    assert ar is not None and ar.links is not None and ar.links.line_rate is None
    assert ar.links.tx_bytes == pytest.approx(2 * 2 * 1e9 * 10) and ar.links.rx_bytes == pytest.approx(2 * 2 * 5e8 * 10)
    m = bench_metrics(state.snapshot())
    assert "gpuledger_bench_allreduce_nvlink_bytes" in m
    assert "gpuledger_bench_allreduce_busbw_line_rate_ratio" not in m
    assert "gpuledger_bench_allreduce_nvlink_line_rate_bytes_per_second" not in m


def test_a_failed_sweep_gets_no_link_figures() -> None:
    r, s = sampled()
    state, _ = round_on(r, s, None)
    assert state.snapshot().allreduce is None


def test_a_result_recorded_before_the_links_still_reads() -> None:
    old = plain(sweep())
    del old["links"]
    assert PARSERS["allreduce"](json.dumps(old)).links is None
    with_links = sweep(AllreduceLinks(1.0, 2.0, 2, 3.0))
    assert PARSERS["allreduce"](json.dumps(plain(with_links))) == with_links
    with pytest.raises(ValueError, match="tx_bytes"):
        PARSERS["allreduce"](json.dumps({**plain(with_links), "links": {"tx_bytes": "1", "rx_bytes": 2.0, "gpus": 2}}))


@pytest.mark.integration
def test_a_real_round_carries_the_link_figures() -> None:
    """The real runner and a gloo child: the events reach the links' reads (the fake's clock does not
    move while the child runs, so no bytes; the line rate is the fake's)."""
    require_torch()
    _r, s = sampled()
    state = BenchState(["allreduce"])
    settings = BenchSettings(idle_window=0, benches=["allreduce"], quick=True, timeout=120)
    sched = BenchScheduler(settings, s, state, None)
    out = sched.run_round()
    assert out is not None and out.status == {"allreduce": "ok"}, out and out.stderr_tail
    ar = state.snapshot().allreduce
    assert ar is not None and ar.links == AllreduceLinks(0.0, 0.0, 2, LINKS * SPEED)
