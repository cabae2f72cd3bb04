"""A multi-GPU job's traffic over its GPUs' links, per GPU-hour it was charged, in the weekly report
(issue 22): the GPUs' NVLink and PCIe bytes (sent + received) in the history's minutes, apportioned
to the jobs on each GPU by their share of the minute, as energy is. A GPU without NVLink leaves the
job's NVLink figure unmeasured (a dash), never 0; a one-GPU job is not in the table; a user reading
their own report sees only their own jobs there."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.cost import CostModel
from analytics.report.access import for_user
from analytics.report.build import build
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import to_markdown
from analytics.report.model import LinkRow, Report
from analytics.sources.embedded import EmbeddedSource
from domain.jobs import JobKey
from domain.week import iso_week
from exporter import history
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, JobMinuteRow, MinuteRow

WEEK = iso_week("2026-W47")
AFTER = WEEK.end + 3600
NV = tuple(
    DeviceInfo(i, f"GPU-cccccccc-0000-4000-8000-00000000000{i}", "NVIDIA H200", f"0000:1{i}:00.0") for i in (0, 1)
)
PCI = DeviceInfo(2, "GPU-cccccccc-0000-4000-8000-000000000002", "NVIDIA L40S", "0000:2a:00.0")  # no NVLink
ANN, BOB, CY = JobKey("11", "ann"), JobKey("12", "bob"), JobKey("13", "cy")
MINUTES = 60
NVLINK_TX, NVLINK_RX = 30e9, 30e9  # bytes a minute on each NVLink GPU: 60 GB both ways
PCIE_TX, PCIE_RX = 1e9, 2e9


def _history(path: Path) -> Path:
    """An hour: ann's job holds both NVLink H200s, alone except for the second half hour on H200 1,
    which bob's job shares (half each); bob's job also holds 3/4 of each minute of the L40S (PCIe
    only), cy's the other 1/4 (cy's job is one GPU: not in the table)."""
    rows: list[MinuteRow | JobMinuteRow] = []
    base = dict.fromkeys(ROLLUP_FIELDS, None) | {"sampled_seconds": 60.0, "busy_seconds": 45.0, "energy_joules": 2.4e4}
    for k in range(MINUTES):
        m = int(WEEK.start) + 60 * k
        for dev in NV:
            links = {"nvlink_tx_bytes": NVLINK_TX, "nvlink_rx_bytes": NVLINK_RX}
            rows.append(MinuteRow(m, dev, base | links | {"pcie_tx_bytes": PCIE_TX, "pcie_rx_bytes": PCIE_RX}))
        rows.append(MinuteRow(m, PCI, base | {"pcie_tx_bytes": PCIE_TX, "pcie_rx_bytes": PCIE_RX}))
        rows.append(JobMinuteRow(m, NV[0].uuid, ANN, 60.0, 45.0, 2.4e4, 60.0, None))
        late = k >= MINUTES // 2
        rows.append(JobMinuteRow(m, NV[1].uuid, ANN, 60.0, 45.0, 2.4e4, 30.0 if late else 60.0, None))
        if late:
            rows.append(JobMinuteRow(m, NV[1].uuid, BOB, 60.0, 45.0, 1.2e4, 30.0, None))
        rows.append(JobMinuteRow(m, PCI.uuid, BOB, 60.0, 30.0, 1.8e4, 45.0, None))
        rows.append(JobMinuteRow(m, PCI.uuid, CY, 60.0, 15.0, 0.6e4, 15.0, None))
    w = history.HistoryWriter(path, hostname="node-l")
    w.submit(rows)
    w.stop()
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    week = EmbeddedSource(_history(tmp_path_factory.mktemp("links") / "h.db")).week(WEEK)
    return build(week, CostModel(), now=AFTER)


def _by_job(r: Report) -> dict[str, LinkRow]:
    return {x.job: x for x in r.link_jobs}


def test_each_multi_gpu_job_gets_its_share_of_its_gpus_traffic(report: Report) -> None:
    rows = _by_job(report)
    assert rows.keys() == {"11", "12"}  # cy's job held one GPU
    ann, bob = rows["11"], rows["12"]
    # ann: H200 0 all hour, H200 1 all of the first half hour and half of each later minute
    ann_h = (MINUTES + MINUTES / 2 + MINUTES / 4) / 60
    ann_nvlink = (NVLINK_TX + NVLINK_RX) * (MINUTES + MINUTES / 2 + MINUTES / 4)
    assert ann.gpus == 2 and ann.gpu_hours == pytest.approx(ann_h)
    assert ann.nvlink_gb_per_gpu_hour == pytest.approx(ann_nvlink / 1e9 / ann_h)
    assert ann.nvlink_gb_per_gpu_hour == pytest.approx(60.0 * 60)  # 60 GB a GPU-minute, whatever the share
    assert ann.pcie_gb_per_gpu_hour == pytest.approx(3.0 * 60)
    # bob: 3/4 of the L40S (no NVLink: its minutes have none) and half of H200 1 for half an hour
    bob_h = (MINUTES * 0.75 + MINUTES / 2 * 0.5) / 60
    assert bob.gpus == 2 and bob.gpu_hours == pytest.approx(bob_h)
    assert bob.nvlink_gb_per_gpu_hour == pytest.approx(60.0 * (MINUTES / 2 * 0.5) / (bob_h * 60) * 60)
    assert bob.pcie_gb_per_gpu_hour == pytest.approx(3.0 * 60)
    assert report.link_jobs == sorted(report.link_jobs, key=lambda x: -x.gpu_hours)


def test_the_table_renders_and_round_trips(report: Report) -> None:
    md = to_markdown(report)
    assert "Multi-GPU jobs: traffic over the links" in md and "NVLink GB per GPU-h" in md
    assert from_json(to_json(report)).link_jobs == report.link_jobs


def test_a_user_sees_only_their_own_jobs_traffic(report: Report) -> None:
    mine = for_user(report, "bob", {"11": "ann", "12": "bob", "13": "cy"}, fleet_totals=False)
    assert [x.job for x in mine.link_jobs] == ["12"]
    assert "11" not in to_markdown(mine).split("Multi-GPU jobs")[1].split("\n## ")[0]


def _md_table(md: str, heading: str) -> list[dict[str, str]]:
    """The rows of the Markdown table under the heading that starts with ``heading``, by header."""
    section = md.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    lines = [x for x in section.splitlines() if x.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in x.strip("|").split("|")), strict=True)) for x in lines[2:]]


def test_the_jobs_and_users_tables_show_charged_beside_held(report: Report) -> None:
    """Charged hours (a shared GPU's minute split between its jobs) add up to the fleet with the
    unallocated row; held hours count a shared minute once per job that held it."""
    md = to_markdown(report)
    jobs = {r["Job"]: r for r in _md_table(md, "Jobs")}
    assert (jobs["12"]["Charged GPU-h"], jobs["12"]["Held GPU-h"]) == ("1.0 h", "1.5 h")  # 3/4 + 1/2 x 1/2; 1 + 1/2
    assert (jobs["11"]["Charged GPU-h"], jobs["11"]["Held GPU-h"]) == ("1.8 h", "2.0 h")
    users = _md_table(md, "Users")
    charged = [float(r["Charged GPU-h"].removesuffix(" h")) for r in users]
    fleet = report.fleet.sampled_gpu_hours
    assert sum(charged) == pytest.approx(fleet, abs=0.05 * len(charged))  # users + unallocated: the fleet
