"""A fleet that mixes GPUs with SM activity (Hopper GPM) and GPUs without, under
``[cost] useful = "sm_active"``: every row says which measure its useful hours count (sm_active,
busy, or mixed with the share of each), the fleet's mixed figure says so in every output and in the
analytics gauges, useful hours still add up GPU by GPU, and ``useful_fallback = "busy"`` puts every
row on busy time."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from analytics.cost import CostModel
from analytics.metrics import OTHER, ReportCollector, bounded
from analytics.report.build import build
from analytics.report.csvio import to_csv
from analytics.report.html import to_html
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import md_escape, to_markdown
from analytics.report.model import UNALLOCATED, CostRow, Report
from analytics.report.text import summary
from analytics.report.useful import label
from analytics.sources.embedded import EmbeddedSource
from domain.jobs import JobKey
from domain.week import GpuWeek, JobWeek, WeekData, iso_week
from exporter import history
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, JobMinuteRow, MinuteRow
from gpuledger import cli
from tests.support.conservation import assert_conserves
from tests.support.metrics import one, parse_metrics

WEEK = iso_week("2026-W47")
AFTER = WEEK.end + 3600  # the report is made after the week
SM_ACTIVE = CostModel(useful="sm_active")
ONE_MEASURE = CostModel(useful="sm_active", useful_fallback="busy")
H200 = tuple(
    DeviceInfo(i, f"GPU-aaaaaaaa-0000-4000-8000-00000000000{i}", "NVIDIA H200", f"0000:1{i}:00.0") for i in (0, 1)
)
A100 = tuple(
    DeviceInfo(i, f"GPU-bbbbbbbb-0000-4000-8000-00000000000{i}", "NVIDIA A100-SXM4-80GB", f"0000:C{i}:00.0")
    for i in (2, 3)
)
ANN, BOB, CY = JobKey("1", "ann"), JobKey("2", "bob"), JobKey("3", "cy")
# per minute: the H200s sample 60 minutes, 48 s busy and 30 s SM-active; the A100s (no GPM) 40
# minutes, 48 s busy. ann's job holds H200 0; bob's A100 2; cy's H200 1 for 30 minutes and A100 3.
H200_MIN, A100_MIN, BUSY, SM = 60, 40, 48.0, 30.0


def _history(path: Path) -> Path:
    rows: list[MinuteRow | JobMinuteRow] = []
    for k in range(H200_MIN):
        m = int(WEEK.start) + 60 * k
        base = dict.fromkeys(ROLLUP_FIELDS, 0.0) | {"sampled_seconds": 60.0, "busy_seconds": BUSY}
        base["energy_joules"] = 60 * 300.0
        for dev in H200:
            rows.append(MinuteRow(m, dev, base | {"sm_active_seconds": SM}))
        rows.append(JobMinuteRow(m, H200[0].uuid, ANN, 60.0, BUSY, 18000.0, 60.0, 0.0))
        if k < 30:
            rows.append(JobMinuteRow(m, H200[1].uuid, CY, 60.0, BUSY, 18000.0, 60.0, 0.0))
        if k < A100_MIN:
            for dev in A100:
                rows.append(MinuteRow(m, dev, base | {"sm_active_seconds": None, "stalled_seconds": None}))
            rows.append(JobMinuteRow(m, A100[0].uuid, BOB, 60.0, BUSY, 18000.0, 60.0))
            rows.append(JobMinuteRow(m, A100[1].uuid, CY, 60.0, BUSY, 18000.0, 60.0))
    w = history.HistoryWriter(path, hostname="node-a")
    w.submit(rows)
    w.stop()
    return path


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> WeekData:
    return EmbeddedSource(_history(tmp_path_factory.mktemp("mixed") / "h.db")).week(WEEK)


def _row(r: Report, group: str, key: str) -> CostRow:
    (row,) = [x for x in r.rows if x.group == group and (x.key == key or x.key.endswith(" " + key))]
    return row


def _measures(r: Report) -> dict[tuple[str, str], tuple[str, float | None]]:
    return {(x.group, x.key): (x.useful_measure, x.useful_sm_share) for x in (r.fleet, *r.rows)}


def test_each_row_says_which_measure_it_counts(week: WeekData) -> None:
    r = build(week, SM_ACTIVE, now=AFTER)
    h200_s, a100_s = 60.0 * H200_MIN, 60.0 * A100_MIN
    share = 2 * h200_s / (2 * h200_s + 2 * a100_s)  # 0.6 of the sampled GPU-hours
    assert r.fleet.useful_measure == "mixed" and r.fleet.useful_sm_share == pytest.approx(share)
    assert r.useful_measure == "mixed"
    assert label(r.fleet.useful_measure, r.fleet.useful_sm_share) == "mixed: 60 % sm_active, 40 % busy"
    for dev in H200:
        assert (_row(r, "gpu", dev.uuid).useful_measure, _row(r, "gpu", dev.uuid).useful_sm_share) == ("sm_active", 1.0)
    for dev in A100:
        assert (_row(r, "gpu", dev.uuid).useful_measure, _row(r, "gpu", dev.uuid).useful_sm_share) == ("busy", 0.0)
    assert _row(r, "model", "NVIDIA H200").useful_measure == "sm_active"
    assert _row(r, "model", "NVIDIA A100-SXM4-80GB").useful_measure == "busy"
    assert _row(r, "host", "node-a").useful_sm_share == pytest.approx(share)
    assert (_row(r, "user", "ann").useful_measure, _row(r, "job", "1").useful_measure) == ("sm_active", "sm_active")
    assert (_row(r, "user", "bob").useful_measure, _row(r, "job", "2").useful_measure) == ("busy", "busy")
    cy = _row(r, "job", "3")  # 30 minutes on an H200, 40 on an A100: a job spanning both kinds
    assert cy.useful_measure == "mixed" and cy.useful_sm_share == pytest.approx(30 / 70)
    assert label(cy.useful_measure, cy.useful_sm_share) == "mixed: 43 % sm_active, 57 % busy"
    assert _row(r, "user", "cy").useful_sm_share == pytest.approx(30 / 70)
    (rest,) = r.group(UNALLOCATED)  # H200 1's 30 minutes no job held
    assert (rest.useful_measure, rest.useful_sm_share) == ("sm_active", 1.0)
    assert any("2 of 4 GPUs have no SM-activity figure" in n for n in r.notes), r.notes


def test_useful_hours_are_the_sum_of_each_gpus_own_measure(week: WeekData) -> None:
    r = build(week, SM_ACTIVE, now=AFTER)
    per_gpu = {dev.uuid: SM * H200_MIN / 3600 for dev in H200} | {dev.uuid: BUSY * A100_MIN / 3600 for dev in A100}
    for uuid, want in per_gpu.items():
        assert _row(r, "gpu", uuid).useful_gpu_hours == pytest.approx(want)
    assert r.fleet.useful_gpu_hours == pytest.approx(sum(per_gpu.values()))
    users = {u: _row(r, "user", u).useful_gpu_hours for u in ("ann", "bob", "cy")}
    assert users == pytest.approx({"ann": 0.5, "bob": BUSY * 40 / 3600, "cy": (SM * 30 + BUSY * 40) / 3600})
    assert r.group(UNALLOCATED)[0].useful_gpu_hours == pytest.approx(SM * 30 / 3600)
    assert_conserves(r)


def test_one_measure_asked_every_row_counts_busy_and_says_why(week: WeekData) -> None:
    r = build(week, ONE_MEASURE, now=AFTER)
    assert {m for m, _ in _measures(r).values()} == {"busy"}
    assert {s for _, s in _measures(r).values()} == {0.0}
    assert r.useful_measure == "busy"
    busy_h = (2 * BUSY * H200_MIN + 2 * BUSY * A100_MIN) / 3600
    assert r.fleet.useful_gpu_hours == pytest.approx(busy_h) == r.fleet.busy_gpu_hours
    assert any('useful_fallback = "busy"' in n and "2 of 4 GPUs" in n for n in r.notes), r.notes
    assert_conserves(r)


def test_where_every_gpu_has_sm_activity_the_option_changes_nothing(week: WeekData) -> None:
    hopper = WeekData(week.window, week.source, tuple(g for g in week.gpus if g.model == "NVIDIA H200"), week.jobs)
    per_gpu, one_measure = build(hopper, SM_ACTIVE, now=AFTER), build(hopper, ONE_MEASURE, now=AFTER)
    assert per_gpu == one_measure
    assert per_gpu.useful_measure == "sm_active" and not any("SM-activity figure" in n for n in per_gpu.notes)
    asked_busy = build(week, CostModel(), now=AFTER)  # useful = "busy": nothing to fall back from
    assert {m for m, _ in _measures(asked_busy).values()} == {"busy"}


def test_every_output_says_the_fleet_is_mixed(week: WeekData) -> None:
    r = build(week, SM_ACTIVE, now=AFTER)
    mixed = "mixed: 60 % sm_active, 40 % busy"
    assert mixed in summary(r)
    md = to_markdown(r)
    assert md_escape(mixed) in md and md_escape("mixed: 43 % sm_active, 57 % busy") in md  # cy's row
    assert mixed in to_html(r)
    costs = to_csv(r)["costs.csv"].splitlines()
    header = costs[0].split(",")
    fleet = dict(zip(header, costs[1].split(","), strict=True))
    assert (fleet["group"], fleet["useful_measure"], float(fleet["useful_sm_share"])) == ("fleet", "mixed", 0.6)
    back = from_json(to_json(r))
    assert _measures(back) == _measures(r)


def test_the_gauges_say_mixed_and_how_much(week: WeekData) -> None:
    r = build(week, SM_ACTIVE, now=AFTER)
    registry = CollectorRegistry()
    registry.register(ReportCollector(lambda: {"week": r}, SM_ACTIVE, "UTC", clock=lambda: AFTER))
    m = parse_metrics(generate_latest(registry).decode())
    assert one(m, "gpuledger_report_info", window="week", useful="mixed") == 1
    ratio = "gpuledger_report_useful_sm_active_ratio"
    assert one(m, ratio, window="week", group="fleet", key="fleet") == pytest.approx(0.6)
    assert one(m, ratio, window="week", group="user", key="bob") == 0.0
    assert one(m, ratio, window="week", group="unallocated", key=UNALLOCATED) == 1.0
    cut = bounded(r, top_n=1)  # the users beyond the top one in one (other) row: its share of theirs
    kept = [x for x in r.group("user") if x.key in {y.key for y in cut.group("user") if y.key != OTHER}]
    others = [x for x in r.group("user") if x not in kept]
    (other,) = [x for x in cut.group("user") if x.key == OTHER]
    sm_h = sum((x.useful_sm_share or 0.0) * x.sampled_gpu_hours for x in others)
    assert other.useful_sm_share == pytest.approx(sm_h / sum(x.sampled_gpu_hours for x in others))


def test_a_job_without_its_own_sm_figure_counts_busy_on_an_sm_gpu() -> None:
    """A source with per-GPU SM activity but none per job (Prometheus): the job counts busy time."""
    h = 3600.0
    gpu = GpuWeek("GPU-h", "n1", "NVIDIA H200", "0", 10 * h, 8 * h, 5 * h, 10 * h, 0.0, 3.6e7)
    job = JobWeek("GPU-h", "n1", JobKey("7", "dee"), 4 * h, 3 * h, 1.0e7, charged_s=4 * h)
    data = WeekData(WEEK, "prometheus", (gpu,), (job,))
    r = build(data, SM_ACTIVE, now=AFTER)
    assert (r.fleet.useful_measure, _row(r, "job", "7").useful_measure) == ("sm_active", "busy")
    assert r.group(UNALLOCATED)[0].useful_gpu_hours == pytest.approx(5 - 3)  # the GPU's SM-active less the job's
    assert any("1 job rows on GPUs measured by SM activity" in n for n in r.notes), r.notes
    one_measure = build(data, ONE_MEASURE, now=AFTER)
    assert {m for m, _ in _measures(one_measure).values()} == {"busy"}
    assert_conserves(r)


# --- properties -------------------------------------------------------------------------------

fraction = st.floats(0, 1)
holder = st.tuples(st.sampled_from(["1", "2", "3"]), fraction, st.booleans())  # job, share of the GPU, own SM
gpu_case = st.tuples(
    st.booleans(),  # has SM activity
    fraction,  # sampled share of the week
    fraction,  # busy share of sampled
    st.one_of(st.none(), fraction),  # stalled share of busy
    fraction,  # SM-active share of the busy time that did not stall
    st.lists(holder, max_size=4),
)


def _fleet(cases: list[tuple]) -> WeekData:  # type: ignore[type-arg]
    """GPUs and jobs whose figures are physically consistent: a job is its share of its GPU's
    time, busy, stalled and SM-active seconds (SM-active: where the GPU has it and the source has
    the job's); SM-active time fits in the busy time that did not stall."""
    gpus, jobs = [], []
    for n, (has_sm, sampled, busy, stalled, sm, holders) in enumerate(cases):
        s = sampled * WEEK.seconds
        b = busy * s
        st_s = None if stalled is None else stalled * b
        sm_s = sm * (b - (st_s or 0.0)) if has_sm else None
        uuid = f"GPU-{n}"
        model = "H200" if has_sm else "A100"
        gpus.append(GpuWeek(uuid, f"n{n % 2}", model, str(n), s, b, sm_s, s, 0.0, 1e7, stalled_s=st_s))
        total = sum(share for _, share, _ in holders)
        for k, (job, share, own_sm) in enumerate(holders):
            part = share / max(1.0, total)
            jobs.append(
                JobWeek(
                    uuid,
                    f"n{n % 2}",
                    JobKey(job, f"u{job}", pod=str(k)),
                    part * s,
                    part * b,
                    part * 1e7,
                    sm_active_s=None if sm_s is None or not own_sm else part * sm_s,
                    charged_s=part * s,
                    stalled_s=None if st_s is None else part * st_s,
                )
            )
    return WeekData(WEEK, "synthetic", tuple(gpus), tuple(jobs))


def _weights(rows: list[CostRow]) -> float:
    return sum((x.useful_sm_share or 0.0) * x.sampled_gpu_hours for x in rows)


@settings(max_examples=int(os.environ.get("GPULEDGER_HYPOTHESIS_EXAMPLES", "150")), deadline=None)
@given(st.lists(gpu_case, min_size=1, max_size=5), st.sampled_from(["per_gpu", "busy"]))
def test_useful_never_exceeds_busy_and_the_shares_add_up(cases: list[tuple], fallback: str) -> None:  # type: ignore[type-arg]
    data = _fleet(cases)
    r = build(data, CostModel(useful="sm_active", useful_fallback=fallback), now=AFTER)
    assert_conserves(r)
    for row in (r.fleet, *r.rows):
        assert row.useful_gpu_hours <= row.busy_gpu_hours * (1 + 1e-9) + 1e-9, row
        share = row.useful_sm_share
        assert share is not None and 0.0 <= share <= 1.0
        want = "sm_active" if share == 1.0 else "busy" if share == 0.0 else "mixed"
        assert row.useful_measure == want, row
        text = label(row.useful_measure, share)
        if want == "mixed":
            sm, busy = re.fullmatch(r"mixed: ([<> \d]+) % sm_active, ([<> \d]+) % busy", text).groups()  # type: ignore[union-attr]
            if sm.isdigit() and busy.isdigit():
                assert int(sm) + int(busy) == 100, text
    jobs_lacking = any(j.sm_active_s is None for j in data.jobs if _has_sm(data, j.uuid))
    lacking = jobs_lacking or any(g.sm_active_s is None for g in data.gpus)
    if fallback == "busy" and lacking:
        assert {x.useful_measure for x in (r.fleet, *r.rows)} == {"busy"}
        assert r.fleet.useful_gpu_hours == pytest.approx(
            sum(max(0.0, g.busy_s - (g.stalled_s or 0.0)) for g in data.gpus) / 3600, abs=1e-9
        )
    # SM-counted GPU-hours add up like any other figure: the GPU groupings always, the job
    # groupings where every job on an SM-measured GPU has its own SM figure
    fleet_sm = (r.fleet.useful_sm_share or 0.0) * r.fleet.sampled_gpu_hours
    for group in ("host", "model", "gpu"):
        assert _weights(r.group(group)) == pytest.approx(fleet_sm, rel=1e-9, abs=1e-6)
    if not jobs_lacking:
        for group in ("user", "job"):
            got = _weights(r.group(group)) + _weights(r.group(UNALLOCATED))
            assert got == pytest.approx(fleet_sm, rel=1e-9, abs=1e-6), group


def _has_sm(data: WeekData, uuid: str) -> bool:
    return next(g for g in data.gpus if g.uuid == uuid).sm_active_s is not None


# --- a real Prometheus ------------------------------------------------------------------------

STEP = 300


def _om(path: Path) -> None:
    """A week of the same four GPUs scraped every 5 minutes: the H200s export SM-active seconds,
    the A100s do not; one job (Prometheus has no per-job SM activity) holds H200 0 all week."""
    times = [WEEK.start + k * STEP for k in range(-1, round(WEEK.seconds) // STEP + 2)]
    lines: list[str] = []

    def series(name: str, labels: dict[str, str], per_step: float, start: float = 0.0) -> None:
        lab = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
        lines.extend(f"{name}{lab} {start + k * per_step:.12g} {t:.0f}" for k, t in enumerate(times))

    for dev in (*H200, *A100):
        base = {"instance": "node-a:10044", "job": "gpuledger", "gpu": str(dev.index), "uuid": dev.uuid}
        info = base | {"model": dev.model, "pci_bus_id": dev.pci_bus_id, "driver_version": "580", "hostname": "node-a"}
        series("gpuledger_gpu_info", info, 0.0, start=1.0)
        series("gpuledger_gpu_sampled_seconds_total", base, STEP)
        series("gpuledger_gpu_busy_seconds_total", base, 0.8 * STEP)
        if dev in H200:
            series("gpuledger_gpu_sm_active_seconds_total", base, 0.5 * STEP)
    held = {"instance": "node-a:10044", "job": "gpuledger", "gpu": "0", "uuid": H200[0].uuid}
    held |= dict(zip(("job_id", "user", "pod", "namespace", "container"), ANN.labels(), strict=True))
    for metric, per_step in (("sampled", STEP), ("busy", 0.8 * STEP), ("charged", STEP)):
        series(f"gpuledger_job_gpu_{metric}_seconds_total", held, per_step)
    series("gpuledger_job_gpu_energy_joules_total", held, 1000.0)
    path.write_text("\n".join(lines) + "\n# EOF\n")


@pytest.mark.integration
def test_prometheus_a_mixed_fleet_says_so(tmp_path: Path) -> None:
    from analytics.config import PrometheusSettings
    from analytics.sources.prometheus import PrometheusSource
    from tests.support.prometheus import PrometheusServer

    om = tmp_path / "week.om"
    _om(om)
    server = PrometheusServer.backfilled(tmp_path, om)
    try:
        source = PrometheusSource(PrometheusSettings(url=server.url))
        try:
            data = source.week(WEEK)
        finally:
            source.api.close()
    finally:
        server.stop()
    r = build(data, SM_ACTIVE, now=AFTER)
    assert r.useful_measure == "mixed" and r.fleet.useful_sm_share == pytest.approx(0.5)
    week_h = WEEK.seconds / 3600
    for dev in H200:
        gpu = _row(r, "gpu", dev.uuid)
        assert gpu.useful_measure == "sm_active" and gpu.useful_gpu_hours == pytest.approx(0.5 * week_h)
    for dev in A100:
        gpu = _row(r, "gpu", dev.uuid)
        assert gpu.useful_measure == "busy" and gpu.useful_gpu_hours == pytest.approx(0.8 * week_h)
    assert r.fleet.useful_gpu_hours == pytest.approx(2 * 0.5 * week_h + 2 * 0.8 * week_h)
    ann = _row(r, "user", "ann")  # no SM figure of its own: busy time, capped at its GPU's SM-active hours
    assert ann.useful_measure == "busy" and ann.useful_gpu_hours == pytest.approx(0.5 * week_h, rel=0.01)
    assert any("2 of 4 GPUs have no SM-activity figure" in n for n in r.notes), r.notes
    assert any("1 job rows on GPUs measured by SM activity" in n for n in r.notes), r.notes
    assert_conserves(r)
    one_measure = build(data, ONE_MEASURE, now=AFTER)
    assert {m for m, _ in _measures(one_measure).values()} == {"busy"}
    assert one_measure.fleet.useful_gpu_hours == pytest.approx(4 * 0.8 * week_h)


def test_the_report_command_s_line_gives_the_mixed_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpuledger report``'s one-line summary: "mixed" with how much of each, as the report says."""
    monkeypatch.delenv("GPULEDGER_CONFIG", raising=False)
    config = tmp_path / "gpuledger.toml"
    config.write_text('[cost]\nuseful = "sm_active"\n')
    hist = _history(tmp_path / "h.db")
    args = ["report", "--week", WEEK.label, "--source", "embedded", "--history", str(hist), "--config", str(config)]
    assert cli.main([*args, "--format", "json", "--out", str(tmp_path / "out")]) in (0, 3)
    line = capsys.readouterr().out.splitlines()[0]
    assert "per useful GPU-hour (mixed: 60 % sm_active, 40 % busy)" in line, line
