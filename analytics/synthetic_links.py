"""The synthetic fleet's link traffic: the bytes its GPUs send and receive over PCIe and NVLink each
minute, in proportion to their busy time. ``synthetic.write_history`` writes them into the GPUs'
minutes (the history splits them over the jobs by share) and ``synthetic_om`` into the exporter's
series (GPU counters, and each job's share), so both sources read the same bytes."""

from __future__ import annotations

PCIE_PER_BUSY_SECOND = 2e8  # sent + received, every GPU
NVLINK_PER_BUSY_SECOND = 5e9  # sent + received; a GPU in MIG mode has none here (its slices' jobs are one-GPU)


def minute_bytes(busy: float, mig: bool) -> dict[str, float]:
    """Bytes (sent + received) over each link the GPU has in a minute with ``busy`` busy seconds."""
    out = {"pcie": busy * PCIE_PER_BUSY_SECOND}
    if not mig:
        out["nvlink"] = busy * NVLINK_PER_BUSY_SECOND
    return out


def history_values(busy: float, mig: bool) -> dict[str, float | None]:
    """The history's columns for those bytes: each link's half sent, half received."""
    b = minute_bytes(busy, mig)
    nv = b.get("nvlink")
    return {
        "pcie_tx_bytes": b["pcie"] / 2,
        "pcie_rx_bytes": b["pcie"] / 2,
        "nvlink_tx_bytes": None if nv is None else nv / 2,
        "nvlink_rx_bytes": None if nv is None else nv / 2,
    }
