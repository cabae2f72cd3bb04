"""A Kubernetes cluster's dcgm-exporter series: four nodes, each a shape real clusters store.

- ``k8s-a``: dcgm-exporter's Helm chart (NODE_NAME set: the host label is the node), a
  ServiceMonitor without honorLabels (pod labels renamed ``exported_*``), SM_ACTIVE enabled, two
  H100s; at ~45 % of the span the exporter is upgraded with the driver (node drained): a new pod
  and IP, ``Hostname`` becomes ``hostname``, a new DCGM_FI_DRIVER_VERSION, both GPUs' energy
  counters restart (driver reload), two scrapes lost.
- ``k8s-b``: the GPU Operator's exporter with honorLabels (pod labels plain; the series of a GPU
  no pod holds carry the exporter pod's), default fields (no SM), scraped 7 s off the grid, an
  H100 shared by time-slicing (``--kubernetes-virtual-gpus``: one copy of each series per pod)
  for some hours, and an A10 (no profiling fields). Its exporter predates dcgm-exporter's fb5e3dc
  (2026-03-24, in 4.5.3-4.8.2): since then, with virtual GPUs, ``DCGM_FI_DEV_GPU_UTIL`` is the
  device's own series plus one per pod with that pod's processes' SM utilisation, not copies.
- ``SM_ACTIVE`` is commented out in both etc/default-counters.csv and etc/dcp-metrics-included.csv:
  the ``dcp`` field set is a counters file of one's own with it enabled.
- ``k8s-mig``: the Helm chart, two H100s in MIG mode: GPU 0 ``3g.40gb,2g.20gb,1g.10gb,1g.10gb``,
  GPU 1 ``all-1g.10gb`` reconfigured midway to ``4g.40gb,3g.40gb`` (the MIG manager drains the
  node and restarts the exporter); a pod per instance, some instances never held.
- ``k8s-legacy``: an old manifest without NODE_NAME (the host label is the exporter pod's name; a
  relabelled ``kubernetes_node`` names the node), honorLabels, one H100, a 25-minute scrape gap.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Collection
from typing import Any

from analytics.synthetic_dcgm.fleet import DcgmFleet
from analytics.synthetic_dcgm.model import Activity, Exporter, Gpu, Layout, Node, Pod, Span
from analytics.synthetic_dcgm.plan import split, timeline
from analytics.synthetic_dcgm.simulate import simulate

H100 = "NVIDIA H100 80GB HBM3"
A10 = "NVIDIA A10"
NAMESPACES = ("ml-research", "inference", "team-vision")
NODES = ("k8s-a", "k8s-b", "k8s-mig", "k8s-legacy")
SERVING: tuple[Activity, ...] = ("serve", "serve", "serve", "held-idle", "train")
MIG_A: Layout = ((2, "3g.40gb"), (3, "2g.20gb"), (9, "1g.10gb"), (10, "1g.10gb"))
ALL_1G: Layout = tuple((gi, "1g.10gb") for gi in range(7, 14))
MIG_B: Layout = ((1, "4g.40gb"), (2, "3g.40gb"))
FIRST = -math.inf


def uuid(cluster: str, node: int, index: int) -> str:
    """A GPU's UUID; unique across clusters (a cluster's own prefix)."""
    tag = f"{zlib.crc32(cluster.encode()):08x}" if cluster else "a0c1e7d2"
    return f"GPU-{tag}-{node:04x}-4000-8000-{index:012x}"


def pci(index: int) -> str:
    return f"00000000:{0x18 + 0x20 * index:02X}:00.0"


def on_grid(t: float, offset: float, interval: float) -> float:
    """The node's first scrape time at or after ``t``."""
    return round(offset + math.ceil((t - offset) / interval) * interval, 3)


class _Pods:
    """Pods named as workloads name them; numbered across the cluster."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd, self.n = rnd, 0

    def __call__(self, kind: Activity, length: float) -> Pod:
        self.n += 1
        serve = kind == "serve"
        ns = "inference" if serve else self.rnd.choice(NAMESPACES)
        name = f"{'serve' if serve else 'train'}-{self.n:03d}-{self.rnd.randrange(16**5):05x}"
        return Pod(ns, name, "server" if serve else "trainer")


def kubernetes_fleet(
    start: float,
    days: float,
    interval: float = 30.0,
    seed: int = 7,
    cluster: str = "",
    nodes: Collection[str] | None = None,
) -> DcgmFleet:
    """The four nodes (or those named in ``nodes``) from ``start`` for ``days``. ``cluster``: every
    series carries ``cluster`` (as external labels set it) and the GPUs' UUIDs are the cluster's."""
    rnd = random.Random(seed)
    end = start + days * 86400
    span = end - start
    pods = _Pods(rnd)
    built: list[Node] = []

    def gpu(node: str, n: int, index: int, model: str = H100, **kw: Any) -> Gpu:
        return Gpu(uuid(cluster, n, index), node, index, model, pci(index), **kw)

    # k8s-a: the upgrade
    up = on_grid(start + 0.45 * span, 0.0, interval)
    a = (gpu("k8s-a", 1, 0), gpu("k8s-a", 1, 1))
    periods = split(start, end, (up - 1800, up + 1200))
    built.append(
        Node(
            "k8s-a",
            "helm",
            "dcp",
            0.0,
            a,
            (
                Exporter(FIRST, "dcgm-exporter-7xk2p", "10.244.1.17", "Hostname", "550.90.07"),
                Exporter(up, "dcgm-exporter-q9m4t", "10.244.1.42", "hostname", "570.133.20"),
            ),
            honor_labels=False,
            resets=tuple((g.uuid, up) for g in a),
            holders={(g.uuid, None): tuple(timeline(rnd, periods, pods)) for g in a},
        )
    )

    # k8s-b: time-slicing and an A10
    b = (gpu("k8s-b", 2, 0), gpu("k8s-b", 2, 1, A10, profiling=False))
    w0 = start + 0.3 * span
    w1 = w0 + min(6 * 3600, 0.25 * span)
    shared = timeline(rnd, [(w0, w1)], pods, idle=(300, 1200), length=(1800, 3 * 3600), first_idle=False)
    built.append(
        Node(
            "k8s-b",
            "operator",
            "default",
            7.0,
            b,
            (Exporter(FIRST, "nvidia-dcgm-exporter-b5vzc", "10.244.2.9", "Hostname", "550.90.07"),),
            honor_labels=True,
            virtual_gpus=True,
            holders={
                (b[0].uuid, None): tuple(sorted([*timeline(rnd, [(start, end)], pods), *shared], key=_start)),
                (b[1].uuid, None): tuple(timeline(rnd, [(start, end)], pods, kinds=SERVING)),
            },
        )
    )

    # k8s-mig: MIG instances, one GPU reconfigured midway
    c = on_grid(start + 0.5 * span, 3.25, interval)
    m = (gpu("k8s-mig", 3, 0, mig=((FIRST, MIG_A),)), gpu("k8s-mig", 3, 1, mig=((FIRST, ALL_1G), (c, MIG_B))))
    before, after = split(start, c - 1800), split(c + 600, end)
    sparse = (3 * 3600.0, 12 * 3600.0)  # long idle gaps
    holders: dict[tuple[str, int | None], tuple[Span, ...]] = {
        (m[0].uuid, 2): tuple(timeline(rnd, [*before, *after], pods)),
        (m[0].uuid, 3): tuple(timeline(rnd, [*before, *after], pods)),
        (m[0].uuid, 9): tuple(timeline(rnd, [*before, *after], pods, idle=sparse)),  # GI 10: never held
    }
    for gi in (7, 8, 9, 10, 11):  # GIs 12 and 13: never held
        holders[m[1].uuid, gi] = tuple(timeline(rnd, before, pods, idle=sparse if gi > 9 else (600, 3 * 3600)))
    for gi in (1, 2):
        holders[m[1].uuid, gi] = tuple(timeline(rnd, after, pods))
    built.append(
        Node(
            "k8s-mig",
            "helm",
            "dcp",
            3.25,
            m,
            (
                Exporter(FIRST, "dcgm-exporter-m2x8d", "10.244.3.5", "hostname", "570.133.20"),
                Exporter(c, "dcgm-exporter-w7n4k", "10.244.3.23", "hostname", "570.133.20"),
            ),
            honor_labels=False,
            holders=holders,
        )
    )

    # k8s-legacy: the host label is the exporter pod's name; a gap
    gap = on_grid(start + 0.55 * span, 11.0, interval)
    lg = (gpu("k8s-legacy", 4, 0),)
    built.append(
        Node(
            "k8s-legacy",
            "legacy",
            "default",
            11.0,
            lg,
            (Exporter(FIRST, "dcgm-exporter-4hx7z", "10.244.4.11", "Hostname", "535.183.01"),),
            honor_labels=True,
            gaps=((gap, gap + 1500),),
            holders={(lg[0].uuid, None): tuple(timeline(rnd, [(start, end)], pods))},
        )
    )

    chosen = tuple(n for n in built if nodes is None or n.name in nodes)
    fleet = DcgmFleet(start, end, interval, chosen, cluster)
    for n in chosen:
        fleet.scrapes |= simulate(n, start, end, interval, random.Random(f"{seed}/{n.name}"))
    return fleet


def _start(s: Span) -> float:
    return s.start
