"""dcgm-exporter's series as a Kubernetes cluster stores them, with the exact truth they hold.

Shapes taken from GPU Operator's dcgm-exporter scraped by kube-prometheus-stack:
- every series carries the device (``gpu``, ``UUID``, ``device``, ``modelName``, ``pci_bus_id``,
  ``DCGM_FI_DRIVER_VERSION``), ``Hostname`` (the exporter *pod's* name) and the target's labels
  (``instance``, ``job``, ``namespace``, ``pod``, ``service``, ``endpoint``, ``container``,
  ``kubernetes_node`` from relabelling);
- the pod holding the GPU adds ``namespace``/``pod``/``container``: on node ``gpu-node-a``
  (a ServiceMonitor, honor_labels off) they collide with the target's and are renamed
  ``exported_*``; on ``gpu-node-b`` (honor_labels on) they replace the target's, and series of a
  GPU no pod holds keep the target's (the exporter pod itself, ``pod`` = ``Hostname``);
- so a GPU's series changes with each pod, the no-pod series recurs between pods, and an exporter
  restart (node a, midway, two scrapes lost) changes ``Hostname``, ``pod`` and ``instance``;
- ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ, integer) is the device's counter and grows
  across all of them; ``DCGM_FI_DEV_GPU_UTIL`` 0-100; ``DCGM_FI_PROF_*`` 0-1 ratios (one GPU,
  an A10 without profiling metrics, has none); ``DCGM_FI_DEV_POWER_USAGE`` W;
- node b is scraped 7 s after node a (its scrapes are not aligned to midnight) and has a
  25-minute scrape gap.

``truth`` computes every figure from the generated scrapes themselves. Output: OpenMetrics (for
``promtool tsdb create-blocks-from openmetrics``, seconds) and VictoriaMetrics import lines
(``/api/v1/import/prometheus``, milliseconds). Deterministic for a seed.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import zlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exporter.attribution.shares import JobKey

FIELDS = {
    "util": "DCGM_FI_DEV_GPU_UTIL",
    "sm": "DCGM_FI_PROF_SM_ACTIVE",
    "tensor": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "dram": "DCGM_FI_PROF_DRAM_ACTIVE",
    "power": "DCGM_FI_DEV_POWER_USAGE",
    "energy": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
}
NAMESPACES = ("ml-research", "inference", "team-vision")
KINDS = ("train", "train", "train", "train", "stalled", "held-idle", "serve", "serve")


@dataclass(frozen=True, slots=True)
class Gpu:
    uuid: str
    node: str
    index: int
    model: str
    prof: bool  # has DCGM_FI_PROF_* fields


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape of one GPU: the series' labels and every field's value."""

    t: float  # epoch seconds
    labels: tuple[tuple[str, str], ...]
    pod: JobKey | None  # the pod holding the GPU
    util: int
    sm: float | None
    tensor: float | None
    dram: float | None
    power: float
    energy_mj: int

    @property
    def stalled(self) -> bool:
        """Busy but not working: the rule the dcgm source applies."""
        return (
            self.sm is not None
            and self.tensor is not None
            and self.dram is not None
            and self.util >= 90
            and self.sm < 0.25
            and self.tensor < 0.05
            and self.dram < 0.05
        )


@dataclass(frozen=True, slots=True)
class Figures:
    """Exact figures of a set of scrapes."""

    sampled_s: float
    busy_s: float
    sm_active_s: float | None
    stalled_s: float | None
    energy_j: float

    @property
    def util(self) -> float:
        return self.busy_s / self.sampled_s if self.sampled_s else 0.0


@dataclass(frozen=True)
class Truth:
    gpu: dict[str, Figures]  # uuid -> figures
    pods: dict[tuple[str, JobKey], Figures]  # (uuid, pod) -> figures
    host: dict[str, str]  # uuid -> node
    history_start: float  # the fleet's first scrape


@dataclass
class DcgmFleet:
    start: float  # first scrape (node a)
    end: float  # last scrape time bound
    interval: float
    gpus: list[Gpu]
    scrapes: dict[str, list[Scrape]] = field(default_factory=dict)  # uuid -> its scrapes, in time order

    # --- truth -------------------------------------------------------------------------

    def truth(self, start: float, end: float) -> Truth:
        """The exact figures of the scrapes in (start, end] (a scrape stands for the interval
        before it)."""
        gpu: dict[str, Figures] = {}
        pods: dict[tuple[str, JobKey], Figures] = {}
        first = min(s.t for ss in self.scrapes.values() for s in ss if start < s.t <= end)
        for g in self.gpus:
            all_ = self.scrapes[g.uuid]
            before = [s for s in all_ if s.t <= start]
            inside = [s for s in all_ if start < s.t <= end]
            if not inside:
                continue
            gpu[g.uuid] = self._figures(g, inside, before[-1] if before else None)
            by_pod: dict[JobKey, list[Scrape]] = defaultdict(list)
            for s in inside:
                if s.pod is not None:
                    by_pod[s.pod].append(s)
            for pod, ss in by_pod.items():
                prior = [s for s in before if s.pod == pod]
                pods[g.uuid, pod] = self._figures(g, ss, prior[-1] if prior else None)
        return Truth(gpu, pods, {g.uuid: g.node for g in self.gpus}, first)

    def _figures(self, g: Gpu, ss: list[Scrape], prior: Scrape | None) -> Figures:
        i = self.interval
        base = prior.energy_mj if prior is not None else ss[0].energy_mj
        return Figures(
            sampled_s=len(ss) * i,
            busy_s=sum(s.util for s in ss) / 100 * i,
            sm_active_s=sum(s.sm or 0.0 for s in ss) * i if g.prof else None,
            stalled_s=sum(s.util for s in ss if s.stalled) / 100 * i if g.prof else None,
            energy_j=(ss[-1].energy_mj - base) / 1000,
        )

    def old_method(self, day_bounds: list[float]) -> dict[str, tuple[float, float]]:
        """uuid -> (busy seconds, joules) as the source once read them: per day, the mean of each
        series' mean utilisation times the time covered, and each series' growth (last - first
        sample of the day, a lower bound of ``increase()``, which extrapolates) summed."""
        out: dict[str, tuple[float, float]] = {}
        for uuid, all_ in self.scrapes.items():
            busy = energy = 0.0
            for a, b in itertools.pairwise(day_bounds):
                series: dict[tuple[tuple[str, str], ...], list[Scrape]] = defaultdict(list)
                for s in all_:
                    if a < s.t <= b:
                        series[s.labels].append(s)
                if not series:
                    continue
                n = sum(len(ss) for ss in series.values())
                means = [sum(s.util for s in ss) / len(ss) for ss in series.values()]
                busy += sum(means) / len(means) / 100 * n * self.interval
                energy += sum(ss[-1].energy_mj - ss[0].energy_mj for ss in series.values()) / 1000
            out[uuid] = (busy, energy)
        return out

    # --- output ------------------------------------------------------------------------

    def _series(self) -> Iterator[tuple[str, str, list[tuple[float, float]]]]:
        """(metric, labels text, samples) per series, samples ascending."""
        for g in self.gpus:
            groups: dict[tuple[tuple[str, str], ...], list[Scrape]] = defaultdict(list)
            for s in self.scrapes[g.uuid]:
                groups[s.labels].append(s)
            for labels, ss in groups.items():
                text = "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}"
                for key, metric in FIELDS.items():
                    points = [
                        (s.t, v) for s in ss if (v := getattr(s, "energy_mj" if key == "energy" else key)) is not None
                    ]
                    if points:
                        yield metric, text, points

    def write_openmetrics(self, path: Path) -> int:
        """For ``promtool tsdb create-blocks-from openmetrics``; returns the number of samples."""
        n = 0
        with path.open("w") as out:
            for metric, labels, points in self._series():
                for t, v in points:
                    out.write(f"{metric}{labels} {v:.12g} {t:.3f}\n")
                n += len(points)
            out.write("# EOF\n")
        return n

    def write_import(self, path: Path) -> int:
        """For VictoriaMetrics' ``/api/v1/import/prometheus`` (millisecond timestamps)."""
        n = 0
        with path.open("w") as out:
            for metric, labels, points in self._series():
                for t, v in points:
                    out.write(f"{metric}{labels} {v:.12g} {round(t * 1000)}\n")
                n += len(points)
        return n


def escape(v: str) -> str:
    """A label value as the text formats (OpenMetrics, Prometheus' import) write it."""
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# --- generation --------------------------------------------------------------------------

NODES = {  # node -> (scrape offset s, honor_labels, exporter pods in order, their instances)
    "gpu-node-a": (
        0.0,
        False,
        ("nvidia-dcgm-exporter-7xk2p", "nvidia-dcgm-exporter-q9m4t"),
        ("10.244.1.17", "10.244.1.42"),
    ),
    "gpu-node-b": (7.0, True, ("nvidia-dcgm-exporter-b5vzc",), ("10.244.2.9",)),
}


def _values(kind: str | None, rnd: random.Random) -> tuple[int, float, float, float, float]:
    """(util, sm, tensor, dram, power W) for one scrape of a GPU doing ``kind``."""
    if kind is None or kind == "held-idle":
        return 0, 0.0, 0.0, 0.0, rnd.uniform(58, 64) if kind is None else rnd.uniform(85, 95)
    if kind == "train":
        u = rnd.randint(86, 100)
        return (
            u,
            rnd.uniform(0.45, 0.8),
            rnd.uniform(0.2, 0.6),
            rnd.uniform(0.2, 0.5),
            380 + 3 * u + rnd.uniform(-20, 20),
        )
    if kind == "stalled":
        u = rnd.randint(95, 100)
        return u, rnd.uniform(0.02, 0.15), rnd.uniform(0.0, 0.02), rnd.uniform(0.0, 0.03), rnd.uniform(170, 190)
    u = rnd.randint(8, 70)  # serving
    sm = u / 100 * rnd.uniform(0.3, 0.6)
    return u, sm, sm * 0.5, rnd.uniform(0.05, 0.2), 120 + 3 * u


def generate(start: float, days: float, interval: float = 30.0, seed: int = 7, cluster: str = "") -> DcgmFleet:
    """GPUs on two nodes from ``start`` for ``days``: pods come and go on each GPU with idle gaps
    between; node a's exporter restarts at 40 % of the span; node b misses 25 minutes of scrapes.
    ``cluster``: every series carries ``cluster`` (as external labels set it) and the GPUs get
    UUIDs of their own (a UUID is unique across clusters)."""
    rnd = random.Random(seed)
    end = start + days * 86400
    gpus = [
        Gpu("GPU-a0c1e7d2-0000-4000-8000-00000000a000", "gpu-node-a", 0, "NVIDIA H100 80GB HBM3", True),
        Gpu("GPU-a0c1e7d2-0000-4000-8000-00000000a001", "gpu-node-a", 1, "NVIDIA H100 80GB HBM3", True),
        Gpu("GPU-a0c1e7d2-0000-4000-8000-00000000a002", "gpu-node-a", 2, "NVIDIA H100 80GB HBM3", True),
        Gpu("GPU-b0c1e7d2-0000-4000-8000-00000000b000", "gpu-node-b", 0, "NVIDIA H100 80GB HBM3", True),
        Gpu("GPU-b0c1e7d2-0000-4000-8000-00000000b001", "gpu-node-b", 1, "NVIDIA A10", False),
    ]
    if cluster:
        tag = f"{zlib.crc32(cluster.encode()):08x}"
        gpus = [dataclasses.replace(g, uuid=g.uuid.replace("a0c1e7d2", tag).replace("b0c1e7d2", tag)) for g in gpus]
    restart = start + round(0.4 * days * 86400 / interval) * interval  # node a, two scrapes lost
    gap = (start + 1.3 * 86400, start + 1.3 * 86400 + 1500)  # node b
    fleet = DcgmFleet(start, end, interval, gpus)
    pod_no = 0
    for g in gpus:
        offset, honor, exporters, ips = NODES[g.node]
        # the GPU's timeline: (from, to, pod, kind), idle gaps between pods
        spans: list[tuple[float, float, JobKey | None, str | None]] = []
        pod: JobKey | None
        kind: str | None
        t = start
        while t < end:
            idle = rnd.uniform(600, 3 * 3600)
            spans.append((t, t + idle, None, None))
            t += idle
            length = rnd.uniform(1800, 9 * 3600)
            pod_no += 1
            kind = rnd.choice(KINDS)
            ns = rnd.choice(NAMESPACES)
            pod = JobKey(pod=f"{kind}-{pod_no:03d}-{rnd.randrange(16**5):05x}", namespace=ns, container=kind)
            spans.append((t, t + length, pod, kind))
            t += length
        energy = rnd.randrange(10**9, 5 * 10**10)  # mJ since the driver loaded
        out: list[Scrape] = []
        k, si = 0, 0
        while (ts := start + offset + k * interval) < end:
            k += 1
            while spans[si][1] <= ts:
                si += 1
            _, _, pod, kind = spans[si]
            util, sm, tensor, dram, power = _values(kind, rnd)
            energy += round(power * interval * 1000)  # the interval before this scrape
            if g.node == "gpu-node-a" and restart <= ts < restart + 2 * interval:
                continue
            if g.node == "gpu-node-b" and gap[0] <= ts < gap[1]:
                continue
            which = 1 if len(exporters) > 1 and ts >= restart else 0
            exporter = exporters[which]
            labels = {
                "gpu": str(g.index),
                "UUID": g.uuid,
                "device": f"nvidia{g.index}",
                "modelName": g.model,
                "Hostname": exporter,
                "DCGM_FI_DRIVER_VERSION": "550.90.07",
                "pci_bus_id": f"00000000:{0x18 + 0x20 * g.index:02X}:00.0",
                "container": "nvidia-dcgm-exporter",
                "endpoint": "gpu-metrics",
                "instance": f"{ips[which]}:9400",
                "job": "nvidia-dcgm-exporter",
                "kubernetes_node": g.node,
                "namespace": "gpu-operator",
                "pod": exporter,
                "service": "nvidia-dcgm-exporter",
            } | ({"cluster": cluster} if cluster else {})
            if pod is not None:
                prefix = "" if honor else "exported_"
                labels |= {
                    f"{prefix}namespace": pod.namespace,
                    f"{prefix}pod": pod.pod,
                    f"{prefix}container": pod.container,
                }
            out.append(
                Scrape(
                    ts,
                    tuple(sorted(labels.items())),
                    pod,
                    util,
                    sm if g.prof else None,
                    tensor if g.prof else None,
                    dram if g.prof else None,
                    round(power, 3),
                    energy,
                )
            )
        fleet.scrapes[g.uuid] = out
    return fleet
