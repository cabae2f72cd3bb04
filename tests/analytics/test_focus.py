"""FOCUS export: one row per group x day, each grouping's file summing to the fleet every day and
over the week (= the week's report), hostile keys neutralised and quoted, and the FinOps
Foundation's validator (focus-validator, FOCUS 1.0 rules) passing on a generated file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from analytics.cost import CostModel
from analytics.report.build import build
from analytics.report.focus import COLUMNS, day_reports, file_name, to_focus
from analytics.report.served import content_type
from domain.jobs import JobKey
from domain.week import GpuWeek, JobWeek, WeekData, Window, iso_week
from tests.support.focus_validator import validate

WEEK = iso_week("2026-W48")
AFTER = WEEK.end + 3600  # every hour charged
HOSTILE = '=HYPERLINK("http://x","y"),\n"quoted"'
GROUPS = ("user", "namespace", "account", "partition", "qos", "cluster")


def _week(w: Window) -> WeekData:
    """Figures proportional to the window's length: days add up to the week exactly."""
    s = w.seconds
    gpus = tuple(
        GpuWeek(f"GPU-{i}", f"n{i // 2}", "NVIDIA H200", str(i % 2), s, 0.5 * s, None, s, 0.0, 0.7 * s * 300, cluster=c)
        for i, c in enumerate(("a", "a", "b", HOSTILE))
    )
    jobs = (
        JobWeek("GPU-0", "n0", JobKey("1", HOSTILE), 0.8 * s, 0.4 * s, 0.8 * s * 250, account="@cmd", qos="+x"),
        JobWeek("GPU-1", "n0", JobKey("2", "bob"), 0.5 * s, 0.3 * s, 0.5 * s * 250, account="phys", partition="-p"),
        JobWeek("GPU-2", "n1", JobKey("", "", "pod-1", "ml\nteam"), 0.9 * s, 0.6 * s, 0.9 * s * 250),
    )
    return WeekData(w, "prometheus", gpus, jobs)


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture
def files() -> dict[str, str]:
    reports = day_reports(_week, WEEK, CostModel(), group_by=GROUPS, now=AFTER)
    assert len(reports) == 7
    return to_focus(reports, WEEK)


def test_one_file_per_grouping_one_row_per_key_and_day(files: dict[str, str]) -> None:
    assert set(files) == {file_name(g) for g in ("host", "model", "gpu", "job", *GROUPS)}
    gpu = _rows(files["gpu.csv"])
    assert len(gpu) == 4 * 7 and list(gpu[0]) == list(COLUMNS)
    assert {r["ResourceID"] for r in gpu} == {"GPU-0", "GPU-1", "GPU-2", "GPU-3"}
    assert {r["ChargePeriodStart"] for r in gpu} == {f"2026-11-{d}T00:00:00Z" for d in range(23, 30)}
    assert gpu[-1]["ChargePeriodEnd"] == gpu[0]["BillingPeriodEnd"] == "2026-11-30T00:00:00Z"
    users = _rows(files["user.csv"])  # 3 users (one unknown) + unallocated, each day
    assert len(users) == 4 * 7 and sum(json.loads(r["Tags"])["gpuledger/group"] == "unallocated" for r in users) == 7
    assert all(r["ChargeCategory"] == "Usage" and r["ConsumedUnit"] == "GPU-Hours" for r in users)


def test_each_file_sums_to_the_fleet_each_day_and_over_the_week(files: dict[str, str]) -> None:
    week = build(_week(WEEK), CostModel(), group_by=GROUPS, now=AFTER)
    reports = day_reports(_week, WEEK, CostModel(), group_by=GROUPS, now=AFTER)
    fleet_by_day = {r.fleet.total_cost for r in reports}
    assert week.fleet.total_cost > 0 and len(fleet_by_day) == 1  # same figures each day
    for name, text in files.items():
        rows = _rows(text)
        for column in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost"):
            assert sum(float(r[column]) for r in rows) == pytest.approx(week.fleet.total_cost, rel=1e-9), name
        assert sum(float(r["ConsumedQuantity"]) for r in rows) == pytest.approx(week.fleet.available_gpu_hours), name
        for r_day in reports:
            day = [r for r in rows if r["ChargePeriodStart"].startswith(r_day.week)]
            assert sum(float(r["BilledCost"]) for r in day) == pytest.approx(r_day.fleet.total_cost), (name, r_day.week)


def test_hostile_keys_are_neutralised_and_quoted(files: dict[str, str]) -> None:
    users = _rows(files["user.csv"])
    keys = {json.loads(r["Tags"])["gpuledger/key"] for r in users}
    assert HOSTILE in keys  # JSON keeps the key exactly (it starts with "{", never a formula)
    clusters = _rows(files["cluster.csv"])
    assert {json.loads(r["Tags"])["gpuledger/key"] for r in clusters} == {"a", "b", HOSTILE}
    for name, text in files.items():
        for row in csv.reader(io.StringIO(text)):
            assert not any(c.startswith(("=", "+", "-", "@")) for c in row), (name, row)
    accounts = _rows(files["account.csv"])
    assert any(json.loads(r["Tags"])["gpuledger/key"] == "@cmd" for r in accounts)
    assert any(r["ChargeDescription"].startswith("GPU compute, account @cmd") for r in accounts)
    assert any("\n" in r["ChargeDescription"] for r in _rows(files["namespace.csv"]))  # quoted, one record


def test_days_without_data_are_left_out() -> None:
    now = WEEK.start + 2.5 * 86400  # the third day: two and a half days happened

    def week(w: Window) -> WeekData:
        return _week(w) if w.start < now else WeekData(w, "prometheus", ())

    reports = day_reports(week, WEEK, CostModel(), group_by=GROUPS, now=now)
    assert [r.week for r in reports] == ["2026-11-23", "2026-11-24", "2026-11-25"]
    rows = _rows(to_focus(reports, WEEK)["host.csv"])
    assert rows[-1]["ChargePeriodEnd"] == "2026-11-25T12:00:00Z"  # only the hours that elapsed


def test_the_finops_validator_passes(files: dict[str, str], tmp_path: Path) -> None:
    paths = []
    for name in ("gpu.csv", "user.csv", "cluster.csv", "account.csv"):
        (tmp_path / name).write_text(files[name], encoding="utf-8")
        paths.append(str(tmp_path / name))
    broken = tmp_path / "broken.csv"  # the validator does fail a bad file: a currency that is no ISO code
    broken.write_text(files["gpu.csv"].replace(",USD,", ",US$,"), encoding="utf-8")
    results = validate([*map(Path, paths), broken])
    for path in paths:
        failed = {k: v for k, v in results[path].items() if v != "passed"}
        assert len(results[path]) > 100 and not failed, (path, failed)
    assert results[str(broken)]["BillingCurrency_IsCurrencyCode"] == "failed"


def test_reports_serve_the_focus_files(files: dict[str, str]) -> None:
    for name in [*files, file_name("label:label_team")]:
        assert content_type(f"gpuledger-2026-W48-focus/{name}") == "text/csv; charset=utf-8", name
    assert content_type("gpuledger-2026-W48-focus/secret.csv") is None
    assert content_type("gpuledger-..-focus/user.csv") is None
