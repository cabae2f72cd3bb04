"""NCCL's transport, from its own INFO lines (gpuledger.nccl_log). The lines are those NCCL 2.28's
format strings print (src/debug.cc's ``host:pid:tid [dev] NCCL INFO`` prefix; src/transport/p2p.cc,
shm.cc and net.cc's channel lines; src/graph/search.cc's graph line): no GPU here to record real
ones."""

from __future__ import annotations

import pytest

from gpuledger import nccl_log
from gpuledger.scaling_report import Result, Row, table

PREFIX = "gpu-node-01:81234:81290 [0] NCCL INFO "


def _log(*bodies: str) -> list[str]:
    noise = ["gpu-node-01:81234:81234 [0] NCCL INFO NCCL version 2.28.3+cuda12.9", "step 10 loss 2.31"]
    return [*noise, *(PREFIX + b for b in bodies)]


GRAPH_NVL = "Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1"
GRAPH_PCI = "Pattern 4, crossNic 0, nChannels 2, bw 12.000000/12.000000, type PHB/PIX, sameChannels 1"


@pytest.mark.parametrize(
    ("bodies", "said"),
    [
        ((GRAPH_NVL, "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"), "P2P over NVLink"),
        ((GRAPH_NVL, "Channel 03/1 : 1[1] -> 0[0] via P2P/direct pointer/read"), "P2P over NVLink"),
        ((GRAPH_PCI, "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/CE"), "P2P over PCIe"),
        (("Channel 00/0 : 0[2] -> 1[5] via P2P/indirect/2[3]",), "P2P"),  # no graph line: the path not said
        (("Channel 00 : 0[0] -> 1[1] via SHM/direct",), "shared memory"),
        (
            (
                GRAPH_NVL,
                "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
                "Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
                "Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA",
            ),
            "P2P over NVLink + network (IB, GPUDirect RDMA)",
        ),
        (("Channel 01/0 : 1[0] -> 0[0] [send] via NET/Socket/1(3)",), "network (Socket)"),
        ((), None),
    ],
)
def test_the_transport_nccl_chose(bodies: tuple[str, ...], said: str | None) -> None:
    assert nccl_log.transport(_log(*bodies)) == said


def test_a_script_printing_like_nccl_is_not_read_as_nccl() -> None:
    assert nccl_log.transport(["my log: Channel 00/0 : 0[0] -> 1[1] via NET/IB/0"]) is None


def test_the_users_nccl_debug_is_kept() -> None:
    assert nccl_log.env_for({"PATH": "/bin"}) == {
        "PATH": "/bin",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,GRAPH",
    }
    assert nccl_log.env_for({"NCCL_DEBUG": "WARN"}) == {"NCCL_DEBUG": "WARN"}


def test_the_table_names_the_transport_per_n() -> None:
    res = Result("m", ["train.py"], "weak", "step timer", "GPUs", 2.0, "EUR", False, "not measured yet")
    res.rows = [Row(1, step_seconds=0.1), Row(2, step_seconds=0.06, transport="P2P over NVLink")]
    assert "# communication (NCCL's own log): 2 GPUs P2P over NVLink" in table(res)
    res.rows[1].transport = None
    assert "# communication: not named (no NCCL INFO lines" in table(res)
    res.unit = "ranks"
    assert "# communication: not named on CPU (gloo" in table(res)
