"""The dcgm-exporter generator: its series have the shapes dcgm-exporter and Prometheus give them
(MIG instances, hpc_job and time-slicing copies, the host label's two spellings, ``exported_*``,
target labels, ``up``), and its truth keeps the ledger's invariants. No servers."""

from __future__ import annotations

import itertools
import random
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.synthetic_dcgm import (
    DcgmFleet,
    Exporter,
    Gpu,
    Node,
    Pod,
    Span,
    StallRule,
    Truth,
    generate,
    kubernetes_fleet,
    slurm_fleet,
)
from analytics.synthetic_dcgm.labels import TARGETS
from analytics.synthetic_dcgm.model import ENERGY, GR, POWER, SM, UTIL, slices
from analytics.synthetic_dcgm.simulate import simulate
from tests.support.clock import ANCHOR

INTERVAL = 30.0
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
TARGET = ("namespace", "pod", "container", "service", "endpoint", "instance", "job")
Row = tuple[str, dict[str, str], list[tuple[float, float]]]


def unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], v)


def rows(f: DcgmFleet) -> list[Row]:
    return [(m, {k: unescape(v) for k, v in LABEL.findall(text)}, pts) for m, text, pts in f.series()]


@pytest.fixture(scope="module")
def kube() -> DcgmFleet:
    return kubernetes_fleet(ANCHOR, 1.5, INTERVAL, seed=7)


@pytest.fixture(scope="module")
def slurm() -> DcgmFleet:
    return slurm_fleet(ANCHOR, 3.0, INTERVAL, seed=7, job_info=True)


@pytest.fixture(scope="module")
def kube_rows(kube: DcgmFleet) -> list[Row]:
    return rows(kube)


@pytest.fixture(scope="module")
def slurm_rows(slurm: DcgmFleet) -> list[Row]:
    return rows(slurm)


def node_of(labels: dict[str, str]) -> str:
    return labels.get("kubernetes_node") or labels.get("hostname") or labels["Hostname"]


def dcgm(rs: list[Row], node: str | None = None) -> Iterator[Row]:
    """dcgm-exporter's series (of one node)."""
    return (r for r in rs if r[0].startswith("DCGM_FI_") and node in (None, node_of(r[1])))


def samples(rs: Iterator[Row], metric: str) -> dict[tuple[str, str, float], list[tuple[dict[str, str], float]]]:
    """(UUID, GPU_I_ID, t) -> every (labels, value) of ``metric`` at that scrape."""
    out: dict[tuple[str, str, float], list[tuple[dict[str, str], float]]] = defaultdict(list)
    for m, labels, pts in rs:
        if m == metric:
            for t, v in pts:
                out[labels["UUID"], labels.get("GPU_I_ID", ""), t].append((labels, v))
    return out


# --- shapes ----------------------------------------------------------------------------------


def test_mig_gpus_write_one_series_per_instance_and_no_util(kube: DcgmFleet, kube_rows: list[Row]) -> None:
    node = kube.node("k8s-mig")
    mine = list(dcgm(kube_rows, "k8s-mig"))
    assert mine and all("GPU_I_PROFILE" in x and "GPU_I_ID" in x for _, x, _ in mine)
    assert not any(m == UTIL for m, _, _ in mine)
    assert all("GPU_I_ID" not in x for m, x, _ in dcgm(kube_rows) if x["UUID"] not in {g.uuid for g in node.gpus})
    instances: dict[tuple[str, float], set[str]] = defaultdict(set)
    for uuid, gi, t in samples(iter(mine), POWER):
        instances[uuid, t].add(gi)
    for g in node.gpus:
        scrapes = {t: gis for (u, t), gis in instances.items() if u == g.uuid}
        assert len(scrapes) > 1000
        for t, gis in scrapes.items():  # one series per GPU instance at every scrape
            layout = g.layout(t)
            assert layout is not None and gis == {str(gi) for gi, _ in layout}
            assert sum(slices(p) for _, p in layout) <= g.slices
        profiles = {x["GPU_I_PROFILE"] for _, x, _ in mine if x["UUID"] == g.uuid}
        assert profiles == {p for _, layout in g.mig for _, p in layout or ()}
    reconfigured = node.gpus[1]
    assert [len(layout or ()) for _, layout in reconfigured.mig] == [7, 2]


def test_power_and_energy_equal_across_instances_at_every_scrape(kube_rows: list[Row]) -> None:
    for metric in (POWER, ENERGY):
        by: dict[tuple[str, float], set[float]] = defaultdict(set)
        for (uuid, _, t), xs in samples(dcgm(kube_rows, "k8s-mig"), metric).items():
            by[uuid, t] |= {v for _, v in xs}
        assert by and all(len(v) == 1 for v in by.values())


def test_the_upgrade_changes_the_host_label_spelling_on_one_node(kube: DcgmFleet, kube_rows: list[Row]) -> None:
    up = kube.node("k8s-a").exporters[1].since
    spelling: dict[str, set[str]] = defaultdict(set)
    for n in kube.nodes:
        for _, x, pts in dcgm(kube_rows, n.name):
            assert ("Hostname" in x) != ("hostname" in x)
            key = "Hostname" if "Hostname" in x else "hostname"
            spelling[n.name].add(key)
            if n.name == "k8s-a":
                assert all((t >= up) == (key == "hostname") for t, _ in pts)
                assert x["DCGM_FI_DRIVER_VERSION"] == ("570.133.20" if key == "hostname" else "550.90.07")
                assert x["pod"] == ("dcgm-exporter-q9m4t" if key == "hostname" else "dcgm-exporter-7xk2p")
            host = x[key]
            # NODE_NAME, or where it is not set the OS hostname: the exporter pod's name
            assert host == (n.exporters[0].pod if n.kind == "legacy" else n.name)
    assert spelling == {
        "k8s-a": {"Hostname", "hostname"},
        "k8s-b": {"Hostname"},
        "k8s-mig": {"hostname"},
        "k8s-legacy": {"Hostname"},
    }
    assert all(x["kubernetes_node"] == "k8s-legacy" for _, x, _ in dcgm(kube_rows, "k8s-legacy"))


def test_honor_labels_false_renames_and_true_keeps(kube: DcgmFleet, kube_rows: list[Row], truth: Truth) -> None:
    for n in kube.nodes:
        target = TARGETS[n.kind]
        exporter_pods = {e.pod for e in n.exporters}
        mine = list(dcgm(kube_rows, n.name))
        held = [x for _, x, _ in mine if "exported_pod" in x or x["pod"] not in exporter_pods]
        free = [x for _, x, _ in mine if x not in held]
        assert held and free, n.name
        for x in free:  # no workload: the target's (the exporter pod's) own labels
            assert (x["namespace"], x["pod"], x["container"]) in {
                (target.namespace, p, target.container) for p in exporter_pods
            }
            assert (x["namespace"], x["pod"]) in truth.exporter_pods
        for x in held:
            assert {k: x[k] for k in ("service", "endpoint", "job")} == dict.fromkeys(
                ("service", "job"), target.service
            ) | {"endpoint": target.endpoint}
            if n.honor_labels:
                assert not any(k.startswith("exported_") for k in x) and x["namespace"] != target.namespace
            else:
                assert x["pod"] in exporter_pods and x["namespace"] == target.namespace
                assert x["exported_pod"] and x["exported_namespace"] and x["exported_container"]


def test_time_slicing_writes_one_copy_per_pod(kube: DcgmFleet, kube_rows: list[Row]) -> None:
    shared = kube.node("k8s-b").gpus[0].uuid
    copies = 0
    for metric in (UTIL, POWER, ENERGY, GR):
        for (uuid, _, _), xs in samples(dcgm(kube_rows), metric).items():
            pods = [x.get("exported_pod", x["pod"]) for x, _ in xs]
            if len(xs) > 1:
                assert uuid == shared and len(set(pods)) == len(xs) == 2
                assert len({v for _, v in xs}) == 1  # identical values
                copies += 1
    assert copies > 4 * 60  # some hours of two pods


def test_hpc_job_copies_are_identical_but_for_hpc_job(slurm: DcgmFleet, slurm_rows: list[Row]) -> None:
    two = 0
    for metric in (UTIL, SM, POWER, ENERGY):
        for xs in samples(dcgm(slurm_rows), metric).values():
            if len(xs) > 1:
                two += 1
                assert len({x["hpc_job"] for x, _ in xs}) == len(xs) and len({v for _, v in xs}) == 1
                base = [{k: v for k, v in x.items() if k != "hpc_job"} for x, _ in xs]
                assert all(b == base[0] for b in base)
    assert two > 100
    for _, x, _ in dcgm(slurm_rows):
        assert not set(x) & {"namespace", "pod", "container", "service", "endpoint"}
        assert x["instance"] == f"{x.get('hostname', x.get('Hostname'))}:9400" and x["job"] == "dcgm-exporter"
    mig = {(x["GPU_I_ID"], x["GPU_I_PROFILE"]) for _, x, _ in dcgm(slurm_rows, "gpu-s2")}
    assert mig == {("1", "3g.40gb"), ("3", "2g.20gb"), ("4", "2g.20gb")}
    assert any("hpc_job" in x for _, x, _ in dcgm(slurm_rows, "gpu-s2"))


def test_field_sets(kube_rows: list[Row], slurm_rows: list[Row]) -> None:
    fields: dict[str, set[str]] = defaultdict(set)
    for m, x, _ in [*dcgm(kube_rows), *dcgm(slurm_rows)]:
        fields[x["modelName"] + ("/mig" if "GPU_I_ID" in x else "") + "/" + x["gpu"] + x["instance"]].add(m)
    sets = {frozenset(v) for v in fields.values()}
    assert frozenset({UTIL, POWER, ENERGY}) in sets  # the A10
    assert all(SM not in v for k, v in fields.items() if "10.244.2." in k or "10.244.4." in k)  # default fields
    assert all(SM in v for k, v in fields.items() if "10.244.1." in k or "gpu-s" in k)
    assert all(UTIL not in v for k, v in fields.items() if "/mig" in k)


def test_up_per_target_per_scrape(kube: DcgmFleet, kube_rows: list[Row], slurm_rows: list[Row]) -> None:
    ups = [(x, pts) for m, x, pts in kube_rows if m == "up"]
    for n in kube.nodes:
        addresses = {f"{e.address}:9400" for e in n.exporters}
        mine = [(x, pts) for x, pts in ups if x["instance"] in addresses]
        assert all(set(x) == set(TARGET) | ({"kubernetes_node"} if n.kind == "legacy" else set()) for x, _ in mine)
        times = sorted(t for _, pts in mine for t, _ in pts)
        assert len(times) == len(set(times)) == round((kube.end - kube.start) / INTERVAL)
        failed = sorted(t for _, pts in mine for t, v in pts if v == 0)
        dcgm_times = {t for _, x, pts in dcgm(kube_rows, n.name) for t, _ in pts}
        assert not set(failed) & dcgm_times and set(times) - set(failed) == dcgm_times
        assert len(failed) == {"k8s-a": 2, "k8s-mig": 2, "k8s-legacy": 50, "k8s-b": 0}[n.name]
    slurm_up = {x["instance"]: pts for m, x, pts in slurm_rows if m == "up"}
    assert set(slurm_up) == {"gpu-s1:9400", "gpu-s2:9400", "slurmctl:10044"}


def test_scrape_times_on_each_nodes_grid(kube: DcgmFleet, kube_rows: list[Row]) -> None:
    offsets = set()
    for _, _, pts in kube_rows:
        ts = [t for t, _ in pts]
        assert ts == sorted(ts) and len(set(ts)) == len(ts)
        offsets |= {round(t % INTERVAL, 3) for t in ts}
        assert all(round(t, 3) == t for t in ts)
    assert offsets == {n.offset for n in kube.nodes} and len(offsets) > 1
    legacy = {t for _, _, pts in dcgm(kube_rows, "k8s-legacy") for t, _ in pts}
    longest = max(b - a for a, b in itertools.pairwise(sorted(legacy)))
    assert longest == 1500 + INTERVAL  # the 25-minute gap


def test_energy_counters(kube: DcgmFleet, slurm: DcgmFleet) -> None:
    resets: dict[str, int] = defaultdict(int)
    for f in (kube, slurm):
        for uuid, ss in f.scrapes.items():
            readings = sorted({(s.t, s.energy_mj) for s in ss})
            assert all(isinstance(e, int) for _, e in readings)
            resets[uuid] += sum(b < a for (_, a), (_, b) in itertools.pairwise(readings))
    assert {u for u, n in resets.items() if n} == {g.uuid for g in kube.node("k8s-a").gpus} | {
        slurm.node("gpu-s1").gpus[2].uuid
    }
    assert set(resets.values()) == {0, 1}


def test_scheduler_records(slurm: DcgmFleet, slurm_rows: list[Row]) -> None:
    jobs = slurm.jobs()
    assert len(jobs) >= 40
    assert {r.job.user for r in jobs} == {"alice", "bob", "carol"} and {r.job.partition for r in jobs} == {
        "gpu",
        "debug",
    }
    info = {x["job_id"]: (x, pts) for m, x, pts in slurm_rows if m == "gpuledger_slurm_job_info"}
    assert set(info) == {r.job.job_id for r in jobs}
    for r in jobs:
        x, pts = info[r.job.job_id]
        assert x == {
            "job_id": r.job.job_id,
            "user": r.job.user,
            "account": r.job.account,
            "partition": r.job.partition,
            "qos": r.job.qos,
            "instance": "slurmctl:10044",
            "job": "gpuledger",
        }
        ts = [t for t, _ in pts]
        assert r.start <= ts[0] < r.start + INTERVAL and ts[-1] <= r.end + 600
        assert ts[-1] > min(r.end + 600, slurm.end) - INTERVAL
    assert not any(m == "gpuledger_slurm_job_info" for m, _, _ in rows(slurm_fleet(ANCHOR, 0.2)))


# --- truth -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def truth(kube: DcgmFleet) -> Truth:
    return kube.truth(ANCHOR + 3600, kube.end)


@pytest.mark.parametrize("which", ["kube", "slurm"])
def test_truth_invariants(which: str, request: pytest.FixtureRequest) -> None:
    f: DcgmFleet = request.getfixturevalue(which)
    a, b = f.start + 3600, f.end - 1800
    t = f.truth(a, b)
    instance_of = {(u, sp.holder.key()): (u, gi) for n in f.nodes for (u, gi), sps in n.holders.items() for sp in sps}
    charged: dict[tuple[str, int | None], float] = defaultdict(float)
    for key, h in t.holders.items():
        charged[instance_of[key]] += h.charged_s
        assert h.charged_s <= h.held_s + 1e-9 and h.busy_s <= h.charged_s + 1e-9
    for g in f.gpus:
        fig = t.gpu[g.uuid]
        inside = [s for s in f.scrapes[g.uuid] if a < s.t <= b]
        by_t: dict[float, float] = defaultdict(float)
        unheld = 0.0
        for s in inside:
            by_t[s.t] += s.instance.share
            if not s.holders:
                unheld += INTERVAL * s.instance.share
        assert all(v <= 1 + 1e-9 for v in by_t.values())  # instances' shares of a GPU
        unheld += sum(INTERVAL * (1 - v) for v in by_t.values())  # slices no instance has
        mine = sum(h.charged_s for (u, _), h in t.holders.items() if u == g.uuid)
        assert mine + unheld == pytest.approx(fig.sampled_s)
        for (u, gi), c in charged.items():
            if u == g.uuid:
                n = [s for s in inside if s.instance.gi == gi]
                assert c <= len(n) * INTERVAL * n[0].instance.share + 1e-6
        assert 0 < fig.busy_s <= fig.sampled_s and fig.energy_j > 0
        assert sum(h.energy_j for (u, _), h in t.holders.items() if u == g.uuid) <= fig.energy_j + 1e-6
        assert fig.stalled_s is None or fig.stalled_s <= fig.busy_s
        assert fig.mig == g.ever_mig and fig.host == g.node
    assert any(f.stalled_s for f in t.gpu.values())


def test_truth_windows_add_up(kube: DcgmFleet) -> None:
    """Split anywhere, the parts add up to the whole: a stalled run is judged whole."""
    a, c = kube.start, kube.end
    for b in (a + 0.37 * (c - a), a + 0.61 * (c - a) + 7):
        whole, one, two = kube.truth(a, c), kube.truth(a, b), kube.truth(b, c)
        for u, w in whole.gpu.items():
            for attr in ("sampled_s", "busy_s", "stalled_s", "energy_j", "sm_active_s"):
                got = [getattr(x.gpu[u], attr) for x in (one, two) if u in x.gpu]
                want = getattr(w, attr)
                assert (want is None and set(got) == {None}) or sum(got) == pytest.approx(want, rel=1e-9, abs=1e-6)
        for k, h in whole.holders.items():
            for attr in ("held_s", "charged_s", "busy_s", "energy_j"):
                got_h = sum(getattr(x.holders[k], attr) for x in (one, two) if k in x.holders)
                assert got_h == pytest.approx(getattr(h, attr), rel=1e-9, abs=1e-6)


def _stall_fleet(length: float) -> DcgmFleet:
    g = Gpu("GPU-1", "n", 0, "NVIDIA H100 80GB HBM3", "00000000:18:00.0")
    pod = Pod("ml", "p", "c")
    node = Node(
        "n",
        "helm",
        "dcp",
        0.0,
        (g,),
        (Exporter(0.0, "dcgm-exporter-x", "10.0.0.1", "hostname", "570.133.20"),),
        holders={("GPU-1", None): (Span(3000.0, 3000.0 + length, pod, "stalled"),)},
    )
    f = DcgmFleet(0.0, 7200.0, INTERVAL, (node,))
    f.scrapes = simulate(node, 0.0, 7200.0, INTERVAL, random.Random(1))
    return f


def test_stall_runs_count_from_min_seconds_and_whole() -> None:
    short, long = _stall_fleet(270.0), _stall_fleet(330.0)  # 9 and 11 scrapes
    assert short.truth(0, 7200).gpu["GPU-1"].stalled_s == 0
    got = long.truth(0, 7200).gpu["GPU-1"]
    assert got.stalled_s == pytest.approx(sum(s.busy for s in long.scrapes["GPU-1"] if s.holders) * INTERVAL)
    # a window holding part of the run: its scrapes count (judged whole), the part only
    part = long.truth(3000, 3150).gpu["GPU-1"]
    assert part.stalled_s == pytest.approx(part.busy_s) and part.stalled_s
    assert long.truth(0, 7200, StallRule(min_seconds=400)).gpu["GPU-1"].stalled_s == 0
    assert short.truth(0, 7200, StallRule(min_seconds=0)).gpu["GPU-1"].stalled_s


def test_the_written_series_hold_the_truth(kube: DcgmFleet, kube_rows: list[Row]) -> None:
    """Sampled and busy time of every GPU from the series themselves (a device-instance's copies
    counted once) equal the truth's."""
    t = kube.truth(kube.start - 1, kube.end)
    share: dict[tuple[str, str], float] = {}
    busy: dict[tuple[str, str, float], float] = {}
    times: dict[str, set[float]] = defaultdict(set)
    for m, x, pts in dcgm(kube_rows):
        u, gi = x["UUID"], x.get("GPU_I_ID", "")
        share[u, gi] = slices(x["GPU_I_PROFILE"]) / 7 if gi else 1.0
        if m == POWER:
            times[u] |= {p for p, _ in pts}
        if m == (GR if gi else UTIL):
            busy |= {(u, gi, p): v / (1 if gi else 100) for p, v in pts}
    for u, fig in t.gpu.items():
        assert len(times[u]) * INTERVAL == fig.sampled_s
        assert sum(v * share[uu, gi] for (uu, gi, _), v in busy.items() if uu == u) * INTERVAL == pytest.approx(
            fig.busy_s
        )


# --- output ----------------------------------------------------------------------------------


def test_deterministic_and_written_as_the_stores_read(tmp_path: Path) -> None:
    hostile = 'lab "b"\nsite\\2'
    one, two = generate(ANCHOR, 0.2, seed=3, cluster=hostile), generate(ANCHOR, 0.2, seed=3, cluster=hostile)
    n = one.write_import(tmp_path / "a.txt")
    assert two.write_import(tmp_path / "b.txt") == n
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    generate(ANCHOR, 0.2, seed=4, cluster=hostile).write_import(tmp_path / "c.txt")
    assert (tmp_path / "a.txt").read_bytes() != (tmp_path / "c.txt").read_bytes()
    lines = (tmp_path / "a.txt").read_text().splitlines()
    assert len(lines) == n and all('cluster="lab \\"b\\"\\nsite\\\\2"' in x for x in lines)
    assert all(re.fullmatch(r"\S+\{.*\} \S+ \d{13}", x) for x in lines)
    assert n == one.write_openmetrics(tmp_path / "a.om")
    om = (tmp_path / "a.om").read_text().splitlines()
    assert om[-1] == "# EOF" and len(om) == n + 1
    seen: dict[str, float] = {}
    previous = ""
    for x in om[:-1]:
        key, _, at = x.rsplit(" ", 2)
        assert key == previous or key not in seen  # each series' samples together
        assert float(at) > seen.get(key, -1.0)  # ascending
        seen[key], previous = float(at), key
    assert {g.uuid for g in one.gpus}.isdisjoint({g.uuid for g in generate(ANCHOR, 0.2, cluster="x").gpus})
