"""PCIe traffic and link replays, from NVML's field-value counters (a fraction of a millisecond
for the batch, where ``nvmlDeviceGetPcieThroughput`` blocks ~21 ms per direction). The sampler
derives ``gpuledger_gpu_pcie_throughput_bytes_per_second`` from TX and RX: their mean rate between
two reads; it asks the blocking call only of a GPU that lacks these counters."""

from __future__ import annotations

from exporter.facts.model import Fact, Family
from exporter.readers.probes import Const, Field, Grows

BYTES = Family(
    "gpuledger_gpu_pcie_bytes_total",
    "counter",
    "bytes",
    "Bytes sent (tx) and received (rx) over PCIe since the exporter started (NVML field values "
    "PCIE_COUNT_TX_BYTES, PCIE_COUNT_RX_BYTES: nvmlDeviceGetFieldValues); absent where NVML has no such counter.",
    ("direction",),
)
REPLAYS = Family(
    "gpuledger_gpu_pcie_replays_total",
    "counter",
    "",
    "PCIe link replays (packets resent after a link error) since the exporter started (NVML field value "
    "PCIE_REPLAY_COUNTER: nvmlDeviceGetFieldValues).",
)

# fmt: off
TX = Fact("pcie_tx_bytes", BYTES, Field("NVML_FI_DEV_PCIE_COUNT_TX_BYTES"), "pcie", Grows(1e6), ("tx",),
          history="pcie_tx_bytes")
RX = Fact("pcie_rx_bytes", BYTES, Field("NVML_FI_DEV_PCIE_COUNT_RX_BYTES"), "pcie", Grows(2e6), ("rx",),
          history="pcie_rx_bytes")
REPLAY = Fact("pcie_replays", REPLAYS, Field("NVML_FI_DEV_PCIE_REPLAY_COUNTER"), "pcie", Const(0.0))
# fmt: on

FACTS = (TX, RX, REPLAY)
