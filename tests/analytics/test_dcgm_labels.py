"""The dcgm source's reading of dcgm-exporter's labels (who holds a device, which host it is on,
what share of its GPU a MIG instance is) and its stall rule, without a server."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.sources.dcgm.labels import Device, device_of, holder, host_of, share
from analytics.sources.dcgm.stalls import MAX_STEPS, chunks, counted
from domain.jobs import JobKey
from domain.week import Window

H100 = "NVIDIA H100 80GB HBM3"
CONTAINERS = ("nvidia-dcgm-exporter", "exporter", "dcgm-exporter")
TARGET = {"instance": "10.42.1.17:9400", "job": "dcgm-exporter"}
EXPORTER = {"namespace": "dcgm-exporter", "pod": "dcgm-exporter-x7k2p", "container": "exporter"}
UP = {("", "10.42.1.17:9400", "dcgm-exporter"): frozenset({("dcgm-exporter", "dcgm-exporter-x7k2p")})}


def test_holders_in_every_spelling() -> None:
    base = {"UUID": "GPU-1", "gpu": "0", "hostname": "node-a", **TARGET}
    # honorLabels false: the workload under exported_*, the plain labels the exporter's own
    renamed = base | EXPORTER | {"exported_pod": "train-1", "exported_namespace": "ml", "exported_container": "t"}
    assert holder(renamed, UP, "", CONTAINERS) == JobKey(pod="train-1", namespace="ml", container="t")
    assert holder(base | EXPORTER, UP, "", CONTAINERS) is None  # no workload: the exporter's pod is no holder
    # honorLabels true: the workload's labels plain; told from the exporter's by up's target pod
    plain = base | {"namespace": "ml", "pod": "train-2", "container": "t"}
    assert holder(plain, UP, "", CONTAINERS) == JobKey(pod="train-2", namespace="ml", container="t")
    # --use-old-namespace and Slurm's hpc_job
    old = base | {"pod_name": "p", "pod_namespace": "ns", "container_name": "c"}
    assert holder(old, UP, "", CONTAINERS) == JobKey(pod="p", namespace="ns", container="c")
    assert holder(base | {"hpc_job": "4711"}, {}, "", CONTAINERS) == JobKey(job_id="4711")
    assert holder({"UUID": "GPU-1", "instance": "n1:9400", "job": "dcgm"}, {}, "", CONTAINERS) is None


def test_without_up_the_exporter_is_told_by_its_container_or_host_label() -> None:
    base = {"UUID": "GPU-1", **TARGET}
    # the GPU Operator's container, the Helm chart's: the exporter's own
    for c in CONTAINERS:
        assert (
            holder(base | {"namespace": "x", "pod": "p-1", "container": c, "hostname": "n"}, {}, "", CONTAINERS) is None
        )
    # an exporter without NODE_NAME: its host label is its pod's name
    legacy = base | {"namespace": "gpu", "pod": "dcgm-abc", "container": "main", "Hostname": "dcgm-abc"}
    assert holder(legacy, {}, "", CONTAINERS) is None
    workload = base | {"namespace": "ml", "pod": "train-3", "container": "trainer", "hostname": "node-a"}
    assert holder(workload, {}, "", CONTAINERS) == JobKey(pod="train-3", namespace="ml", container="trainer")


def test_a_target_is_matched_within_its_cluster() -> None:
    up = {("east", "10.0.0.1:9400", "dcgm"): frozenset({("ops", "dcgm-1")})}
    series = {"UUID": "GPU-9", "instance": "10.0.0.1:9400", "job": "dcgm", "namespace": "ops", "pod": "dcgm-1"}
    assert holder(series | {"cluster": "east"}, up, "cluster", ()) is None
    # the same address in another cluster is another target, whose pod is a workload as far as up says
    assert holder(series | {"cluster": "west"}, up, "cluster", ()) == JobKey(pod="dcgm-1", namespace="ops")


def test_the_host_is_the_node() -> None:
    labels = ["node", "kubernetes_node", "hostname", "Hostname", "instance"]
    helm = {"hostname": "gpu-node-a", "instance": "10.42.1.17:9400", "pod": "dcgm-exporter-x7k2p"}
    assert host_of(helm, labels, {"dcgm-exporter-x7k2p"}) == "gpu-node-a"
    before_rename = {"Hostname": "gpu-node-a", "instance": "10.42.1.17:9400"}
    assert host_of(before_rename, labels, set()) == "gpu-node-a"
    # no NODE_NAME: the host label is the exporter pod's; a relabelled node label, else the target, wins
    legacy = {"Hostname": "nvidia-dcgm-exporter-q9m4t", "instance": "10.0.0.5:9400"}
    assert host_of(legacy | {"kubernetes_node": "gpu-node-b"}, labels, {"nvidia-dcgm-exporter-q9m4t"}) == "gpu-node-b"
    assert host_of(legacy, labels, {"nvidia-dcgm-exporter-q9m4t"}) == "10.0.0.5:9400"
    assert host_of(legacy, ["Hostname"], {"nvidia-dcgm-exporter-q9m4t"}) == "nvidia-dcgm-exporter-q9m4t"  # all there is
    assert host_of({}, labels, set()) == ""


def test_a_mig_instance_is_its_slices_share() -> None:
    dev = device_of({"UUID": "GPU-1", "GPU_I_ID": "9", "GPU_I_PROFILE": "1g.10gb"})
    assert dev == Device("GPU-1", "9", "1g.10gb") and dev.mig
    assert share(dev, H100) == pytest.approx(1 / 7)
    assert share(Device("GPU-1", "1", "3g.40gb"), H100) == pytest.approx(3 / 7)
    assert share(Device("GPU-1", "1", "1c.3g.40gb"), H100) == pytest.approx(3 / 7)  # a compute instance's GPU instance
    assert share(Device("GPU-1", "0", "7g.80gb"), H100) == 1.0
    assert share(Device("GPU-2", "5", "1g.6gb"), "NVIDIA A30") == pytest.approx(1 / 4)
    assert share(Device("GPU-1"), H100) == 1.0  # a whole GPU
    assert share(Device("GPU-1", "3", "weird"), H100) is None
    assert device_of({"UUID": "GPU-1", "GPU_I_PROFILE": "1g.10gb"}) == Device("GPU-1")  # no instance id: whole


PROFILES = {"1g.10gb": 1, "1g.20gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(sorted(PROFILES)), min_size=1, max_size=7))
def test_the_instances_of_a_valid_layout_share_at_most_the_gpu(profiles: list[str]) -> None:
    layout: list[str] = []
    for p in profiles:  # a layout NVIDIA allows: at most 7 compute slices in all
        if sum(PROFILES[x] for x in layout) + PROFILES[p] <= 7:
            layout.append(p)
    shares = [share(Device("GPU-1", str(i + 1), p), H100) for i, p in enumerate(layout)]
    assert all(s is not None and 0 < s <= 1 for s in shares)
    assert sum(s or 0.0 for s in shares) <= 1 + 1e-12


def reference(points: list[tuple[float, float]], interval: float, min_seconds: float) -> set[float]:
    """The stall rule said plainly: runs of scrapes one interval apart, kept when they last long enough."""
    kept: set[float] = set()
    run: list[float] = []
    for t, _ in [*sorted(points), (math.inf, 0.0)]:
        if run and t - run[-1] > 1.5 * interval:
            if len(run) * interval >= min_seconds:
                kept |= set(run)
            run = []
        run.append(t)
    return kept


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 400), unique=True, max_size=120),
    st.sampled_from([15.0, 30.0]),
    st.sampled_from([0.0, 30.0, 300.0, 600.0]),
)
def test_stalled_runs_count_whole_once_long_enough(steps: list[int], interval: float, min_seconds: float) -> None:
    points = [(1_000_000.0 + k * interval, 0.5 + (k % 5) / 10) for k in steps]
    got = counted(points, interval, min_seconds)
    assert {t for t, _ in got} == reference(points, interval, min_seconds)
    assert len(got) == len({t for t, _ in got})  # each scrape once
    values = dict(points)
    assert all(values[t] == v for t, v in got)


def test_the_range_queries_cover_the_window_on_its_grid() -> None:
    w = Window(1_795_219_200.0, 1_795_219_200.0 + 7 * 86400, "w")
    spans = chunks(w, 15.0, 300.0, now=w.end + 86400)
    assert spans[0][0] == w.start - 300 and spans[-1][1] == w.end + 300
    assert all((b - a) / 15 + 1 <= MAX_STEPS for a, b in spans)
    assert all(b2 == pytest.approx(a1 - 15) for (_, b2), (a1, _) in itertools.pairwise(spans))
    assert all((a - w.start) % 15 == 0 for a, _ in spans)
    # a window still in progress: not past now
    assert chunks(w, 15.0, 300.0, now=w.start + 3600)[-1][1] == w.end
