"""A Slurm cluster's dcgm-exporter series: bare-metal exporters run with ``--hpc-job-mapping-dir``
(the job prolog writes each job's id into the mapping file of each device it gets: ``0``..``3``
for whole GPUs, ``<gpu>.<GPU_I_ID>`` for GPU instances), scraped as ``instance="NODE:9400"``,
``job="dcgm-exporter"``; the host label is the node's hostname.

- ``gpu-s1``: four H100s, SM_ACTIVE enabled, ``hostname`` spelling. GPU 1 is shared by two jobs
  at times (both listed: two copies of every series); GPUs 2 and 3 take one- and two-GPU jobs;
  GPU 2 is reset once (an XID, ``nvidia-smi -r``: its energy counter restarts from 0).
- ``gpu-s2``: one H100 in MIG mode ``3g.40gb,2g.20gb,2g.20gb`` (GI 1, 3, 4), a job per instance
  at a time, scraped 7 s off the grid, ``Hostname`` spelling (4.5.3-4.8.2, the first release to
  read MIG mapping files).

Users alice, bob and carol (accounts physics, bio, physics); partitions ``gpu`` and ``debug``
(jobs under an hour). Optionally the scheduler's records as ``gpuledger_slurm_job_info``.
"""

from __future__ import annotations

import dataclasses
import math
import random

from analytics.synthetic_dcgm.fleet import DcgmFleet
from analytics.synthetic_dcgm.kubernetes import H100, on_grid, pci, uuid
from analytics.synthetic_dcgm.model import Activity, Exporter, Gpu, Layout, Node, SlurmJob, Span
from analytics.synthetic_dcgm.plan import split, timeline
from analytics.synthetic_dcgm.simulate import simulate

USERS = {"alice": "physics", "bob": "bio", "carol": "physics"}
MIG_S2: Layout = ((1, "3g.40gb"), (3, "2g.20gb"), (4, "2g.20gb"))
FIRST = -math.inf
FIRST_JOB = 48210


class _Jobs:
    """Jobs with provisional ids (renumbered in order of start afterwards)."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd, self.n = rnd, 0

    def __call__(self, kind: Activity, length: float) -> SlurmJob:
        self.n += 1
        user = self.rnd.choice(sorted(USERS))
        qos = "high" if self.rnd.random() < 0.15 else "normal"
        return SlurmJob(str(self.n), user, USERS[user], "debug" if length < 3600 else "gpu", qos)


def _renumber(nodes: list[Node]) -> list[Node]:
    """Job ids in order of their first start, as Slurm numbers them on submission."""
    first: dict[str, float] = {}
    for n in nodes:
        for spans in n.holders.values():
            for s in spans:
                j = s.holder.job_id if isinstance(s.holder, SlurmJob) else ""
                first[j] = min(first.get(j, math.inf), s.start)
    ids = {j: str(FIRST_JOB + i) for i, j in enumerate(sorted(first, key=lambda j: (first[j], int(j))))}

    def renamed(s: Span) -> Span:
        if not isinstance(s.holder, SlurmJob):
            return s
        return dataclasses.replace(s, holder=dataclasses.replace(s.holder, job_id=ids[s.holder.job_id]))

    return [dataclasses.replace(n, holders={k: tuple(map(renamed, v)) for k, v in n.holders.items()}) for n in nodes]


def slurm_fleet(
    start: float,
    days: float,
    interval: float = 30.0,
    seed: int = 7,
    cluster: str = "",
    job_info: bool = False,
) -> DcgmFleet:
    """Two bare-metal nodes from ``start`` for ``days``. ``job_info``: also the scheduler's record
    of each job (``gpuledger_slurm_job_info{job_id,user,account,partition,qos} 1`` from
    ``slurmctl:10044``, while it runs and 10 minutes after)."""
    rnd = random.Random(seed)
    end = start + days * 86400
    span = end - start
    jobs = _Jobs(rnd)
    whole = [(start, end)]

    s1 = tuple(Gpu(uuid(cluster, 0x51, i), "gpu-s1", i, H100, pci(i)) for i in range(4))
    reset = on_grid(start + 0.6 * span, 0.0, interval)
    g1 = [*timeline(rnd, whole, jobs), *timeline(rnd, whole, jobs, idle=(3 * 3600, 10 * 3600), length=(1800, 4 * 3600))]
    pair = timeline(rnd, split(start, end, (reset - 900, reset + 900)), jobs)
    on2: list[Span] = []
    on3: list[Span] = []
    for s in pair:
        r = rnd.random()
        if r < 0.35:
            on2.append(s)
            on3.append(s)
        else:
            (on2 if r < 0.675 else on3).append(s)
    node1 = Node(
        "gpu-s1",
        "slurm",
        "dcp",
        0.0,
        s1,
        (Exporter(FIRST, "", "gpu-s1", "hostname", "570.133.20"),),
        resets=((s1[2].uuid, reset),),
        holders={
            (s1[0].uuid, None): tuple(timeline(rnd, whole, jobs)),
            (s1[1].uuid, None): tuple(sorted(g1, key=lambda s: s.start)),
            (s1[2].uuid, None): tuple(on2),
            (s1[3].uuid, None): tuple(on3),
        },
    )

    s2 = (Gpu(uuid(cluster, 0x52, 0), "gpu-s2", 0, H100, pci(0), mig=((FIRST, MIG_S2),)),)
    node2 = Node(
        "gpu-s2",
        "slurm",
        "dcp",
        7.0,
        s2,
        (Exporter(FIRST, "", "gpu-s2", "Hostname", "560.35.03"),),
        holders={(s2[0].uuid, gi): tuple(timeline(rnd, whole, jobs)) for gi, _ in MIG_S2 or ()},
    )

    nodes = _renumber([node1, node2])
    fleet = DcgmFleet(start, end, interval, tuple(nodes), cluster, job_info=job_info)
    for n in nodes:
        fleet.scrapes |= simulate(n, start, end, interval, random.Random(f"{seed}/{n.name}"))
    return fleet
