"""Random MIG layouts and random holder overlaps, as dcgm-exporter writes them (``analytics.
synthetic_dcgm``'s model), through a real VictoriaMetrics and the dcgm source: for every example,
the slice shares of a GPU add to at most 1, no GPU is above 100 % or charged for more than it had,
every GPU and holder equals the truth, and every grouping + unallocated = the fleet.

Each example is written into its own day of one VictoriaMetrics (a day apart from the others, before
the suite's anchor), so one server holds them all; hypothesis is derandomized: the same examples
every run."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytics.config import PrometheusSettings
from analytics.cost import CostModel
from analytics.report.build import build
from analytics.sources.dcgm import DcgmSource
from analytics.sources.dcgm.labels import Device, share
from analytics.synthetic_dcgm import DcgmFleet, Exporter, Gpu, Node, Pod, SlurmJob, Span
from analytics.synthetic_dcgm.simulate import simulate
from domain.jobs import JobKey
from domain.week import Window
from tests.support.clock import ANCHOR
from tests.support.conservation import assert_conserves
from tests.support.victoria import VictoriaMetricsServer

pytestmark = pytest.mark.integration  # a real VictoriaMetrics

INTERVAL = 30.0
HOURS = 6
H100 = "NVIDIA H100 80GB HBM3"
SLICES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}
GI = {"1g.10gb": 7, "2g.20gb": 3, "3g.40gb": 1, "4g.40gb": 5, "7g.80gb": 0}  # first GI id of each profile


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, str], ...] | None:
    """A whole GPU, or a MIG layout NVIDIA allows (at most 7 compute slices)."""
    if draw(st.booleans()):
        return None
    out: list[tuple[int, str]] = []
    for p in draw(st.lists(st.sampled_from(sorted(SLICES)), min_size=1, max_size=7)):
        if sum(SLICES[x] for _, x in out) + SLICES[p] <= 7:
            out.append((GI[p] + sum(1 for _, x in out if x == p), p))
    return tuple(out)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[str, list[tuple[tuple[tuple[int, str], ...] | None, list[tuple[int, int, int]]]]]:
    """(kind, per GPU its layout and holders (device-instance index, start, length in minutes)):
    holders may overlap on one device (Slurm jobs both listed; time-sliced pods)."""
    kind = draw(st.sampled_from(["slurm", "helm", "operator"]))
    gpus = []
    for _ in range(draw(st.integers(1, 2))):
        layout = draw(layouts())
        n = len(layout) if layout else 1
        spans = draw(
            st.lists(
                st.tuples(st.integers(0, n - 1), st.integers(0, HOURS * 60 - 20), st.integers(10, 180)),
                max_size=6,
            )
        )
        gpus.append((layout, spans))
    return kind, gpus


def build_fleet(example: int, kind: str, gpus: list) -> DcgmFleet:  # type: ignore[type-arg]
    start = ANCHOR - 86400 * (example + 1)  # in the past: VictoriaMetrics refuses the future
    end = start + HOURS * 3600
    node_gpus: list[Gpu] = []
    holders: dict[tuple[str, int | None], list[Span]] = {}
    for g, (layout, spans) in enumerate(gpus):
        uuid = f"GPU-{example:08x}-0000-4000-8000-{g:012x}"
        mig = ((-float("inf"), layout),)
        node_gpus.append(Gpu(uuid, "node-1", g, H100, f"00000000:{0x18 + g:02X}:00.0", mig=mig))
        gis = [gi for gi, _ in layout] if layout else [None]
        for n, (k, at, minutes) in enumerate(spans):
            a = start + at * 60
            who: Pod | SlurmJob = (
                SlurmJob(f"{example * 100 + g * 10 + n}", "alice", "physics", "gpu")
                if kind == "slurm"
                else Pod("ml", f"p{example}-{g}-{n}", "trainer")
            )
            holders.setdefault((uuid, gis[k]), []).append(Span(a, min(end, a + minutes * 60), who, "train"))
    exporter = (
        Exporter(-float("inf"), "", "node-1", "hostname", "570.133.20")
        if kind == "slurm"
        else Exporter(-float("inf"), f"dcgm-exporter-{example}", "10.0.0.1", "hostname", "570.133.20")
    )
    node = Node(
        "node-1",
        kind,  # type: ignore[arg-type]
        "dcp",
        0.0,
        tuple(node_gpus),
        (exporter,),
        honor_labels=kind == "operator",
        virtual_gpus=True,
        holders={k: tuple(sorted(v, key=lambda s: s.start)) for k, v in holders.items()},
    )
    fleet = DcgmFleet(start, end, INTERVAL, (node,))
    fleet.scrapes |= simulate(node, start, end, INTERVAL, random.Random(example))
    return fleet


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VictoriaMetricsServer]:
    folder = tmp_path_factory.mktemp("vm")
    empty = folder / "none.txt"
    empty.write_text("")
    server = VictoriaMetricsServer.imported(folder, empty)
    yield server
    server.stop()


EXAMPLES = iter(range(10_000))


@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fleets())
def test_random_mig_layouts_and_overlaps(victoria: VictoriaMetricsServer, tmp_path: Path, example_fleet: tuple) -> None:  # type: ignore[type-arg]
    kind, gpus = example_fleet
    example = next(EXAMPLES)
    fleet = build_fleet(example, kind, gpus)
    for layout, _ in gpus:
        if layout:
            assert sum(share(Device("GPU-x", str(gi), p), H100) or 0.0 for gi, p in layout) <= 1 + 1e-12
    lines = tmp_path / f"{example}.txt"
    fleet.write_import(lines)
    victoria.import_lines(lines.read_text().splitlines())
    w = Window(fleet.start, fleet.end, f"example-{example}")
    truth = fleet.truth(w.start, w.end)
    source = DcgmSource(PrometheusSettings(url=victoria.url, dcgm_scrape_interval=INTERVAL, kube_state_metrics=False))
    try:
        data = source.week(w)
    finally:
        source.api.close()
    assert {g.uuid for g in data.gpus} == set(truth.gpu)
    for g in data.gpus:
        t = truth.gpu[g.uuid]
        assert g.sampled_s == pytest.approx(t.sampled_s, rel=1e-9)
        assert g.busy_s == pytest.approx(t.busy_s, rel=1e-6, abs=1e-6) and g.busy_s <= g.sampled_s * (1 + 1e-9)
        assert g.energy_j == pytest.approx(t.energy_j, rel=0.01)
    got = {(j.uuid, JobKey(job_id=j.job.job_id) if j.job.job_id else j.job): j for j in data.jobs}
    assert set(got) == set(truth.holders)
    for key, h in truth.holders.items():
        j = got[key]
        assert j.sampled_s == pytest.approx(h.held_s, rel=1e-9)
        assert j.charged_s == pytest.approx(h.charged_s, rel=1e-9)
        assert j.busy_s == pytest.approx(h.busy_s, rel=1e-6, abs=1e-6)
    for g in data.gpus:  # shares of a GPU never above it
        mine = [j for j in data.jobs if j.uuid == g.uuid]
        assert sum(j.charged_s or 0.0 for j in mine) <= g.sampled_s * (1 + 1e-9)
    groups = ("user", "job") + (("namespace",) if kind != "slurm" and data.jobs else ())
    assert_conserves(build(data, CostModel(), now=w.end + 86400), groups=groups)
