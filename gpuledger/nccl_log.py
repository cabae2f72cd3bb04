"""Which way NCCL moved a run's data, from its own log (``NCCL_DEBUG=INFO``, subsystems INIT and GRAPH).

NCCL says, per channel and peer, the transport it connected over (src/transport/p2p.cc, shm.cc,
net.cc in NCCL 2.28; each line after a ``host:pid:tid [dev] NCCL INFO`` prefix):

    Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
    Channel 00 : 0[0] -> 1[1] via SHM/direct
    Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA

and, per search of the topology (src/graph/search.cc), the slowest path type inside a node and
between nodes (``type NVL/PIX``; the names of src/graph/topo.cc's ``topoPathTypeStr``). P2P goes
over NVLink where that path type is NVL or NVB (through an NVSwitch or a GPU), over PCIe where it is
PIX, PXB, PHB, P2C or PXN. Nothing here is guessed: without those lines (gloo, NCCL_DEBUG set to
WARN by the user) the transport is not known.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CHANNEL = re.compile(
    r"NCCL INFO Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\] (?:\[(?:send|receive)\] )?via (?P<via>\S+)"
)
GRAPH = re.compile(r"NCCL INFO Pattern \d+, crossNic \d+, nChannels \d+, bw \S+, type (?P<intra>\w+)/(?P<inter>\w+)")

NVLINK_PATHS = {"NVL", "NVB"}
PCIE_PATHS = {"PIX", "PXB", "PHB", "P2C", "PXN"}
ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH"}
"""What a run's environment gets where the user set no NCCL_DEBUG of their own."""


def env_for(env: dict[str, str]) -> dict[str, str]:
    """``env`` with NCCL's INIT and GRAPH info lines asked for, unless the user chose a level."""
    return env if "NCCL_DEBUG" in env else {**env, **ENV}


def _p2p(intra: set[str]) -> str:
    if intra & NVLINK_PATHS:
        return "P2P over NVLink"
    if "C2C" in intra:
        return "P2P over C2C"
    if intra & PCIE_PATHS:
        return "P2P over PCIe"
    return "P2P"


def transport(lines: Iterable[str]) -> str | None:
    """The transports NCCL connected over, in words (``P2P over NVLink``, ``shared memory``,
    ``network (IB, GPUDirect RDMA)``, joined by " + " when several); None when the log has none."""
    via: set[str] = set()
    intra: set[str] = set()
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        if (m := CHANNEL.search(line)) is not None:
            via.add(m["via"])
        elif (m := GRAPH.search(line)) is not None:
            intra.add(m["intra"])
    kinds: list[str] = []
    if any(v.startswith("P2P/") for v in via):
        kinds.append(_p2p(intra))
    if any(v.startswith("SHM/") for v in via):
        kinds.append("shared memory")
    nets = sorted({v.split("/")[1] for v in via if v.startswith("NET/") and v.count("/") >= 1})
    if nets:
        rdma = any("/GDRDMA" in v for v in via if v.startswith("NET/"))
        kinds.append(f"network ({', '.join(nets)}{', GPUDirect RDMA' if rdma else ''})")
    return " + ".join(kinds) or None
