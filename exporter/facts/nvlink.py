"""NVLink, per link: traffic, state and error counters, all NVML field values with the link as
scope id. A GPU without NVLink (a single PCIe-attached H200: NVML answers NotSupported) has none
of these series; NVML's link count (``NVML_FI_DEV_NVLINK_LINK_COUNT``) says which links to ask. A link's speed
(its line rate per direction) is what the all-reduce benchmark's bus bandwidth is held against."""

from __future__ import annotations

from exporter.facts.model import Fact, Family
from exporter.readers.probes import Const, Field, Grows

KIB = 1024.0
MB = 1e6

BYTES = Family(
    "gpuledger_gpu_nvlink_bytes_total",
    "counter",
    "bytes",
    "Data bytes sent (tx) and received (rx) per NVLink link since the exporter started, protocol overhead "
    "excluded (NVML field values NVLINK_THROUGHPUT_DATA_TX, _RX per link: nvmlDeviceGetFieldValues); absent "
    "without NVLink.",
    ("direction",),
)
STATE = Family(
    "gpuledger_gpu_nvlink_state",
    "gauge",
    "",
    "NVLink link state as NVML reports it: 0 inactive, 1 active, 2 sleep, 3 active with traffic disabled "
    "(NVML field value NVLINK_GET_STATE per link: nvmlDeviceGetFieldValues); absent without NVLink.",
)
SPEED = Family(
    "gpuledger_gpu_nvlink_speed_bytes_per_second",
    "gauge",
    "bytes_per_second",
    "NVLink line rate per link and direction (NVML field value NVLINK_GET_SPEED per link, MB/s: "
    "nvmlDeviceGetFieldValues); the GPU's is the sum over its active links, what all-reduce bus bandwidth is "
    "held against; absent without NVLink.",
)
ERRORS = Family(
    "gpuledger_gpu_nvlink_errors_total",
    "counter",
    "",
    "NVLink data-link errors per link since the exporter started: CRC errors, replays, recoveries (NVML field "
    "values NVLINK_ERROR_DL_CRC, _REPLAY, _RECOVERY per link: nvmlDeviceGetFieldValues); absent without NVLink "
    "or where NVML no longer reports them (Blackwell).",
    ("error",),
)

# fmt: off
TX = Fact("nvlink_tx_bytes", BYTES, Field("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", KIB), "health", Grows(5e8), ("tx",),
          per_link=True, history="nvlink_tx_bytes")
RX = Fact("nvlink_rx_bytes", BYTES, Field("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", KIB), "health", Grows(5e8), ("rx",),
          per_link=True, history="nvlink_rx_bytes")
LINK_STATE = Fact("nvlink_state", STATE, Field("NVML_FI_DEV_NVLINK_GET_STATE"), "health", Const(1.0), per_link=True)
LINK_SPEED = Fact("nvlink_speed", SPEED, Field("NVML_FI_DEV_NVLINK_GET_SPEED", MB), "health", Const(26_562e6),
                  per_link=True)
FACTS = (
    TX,
    RX,
    LINK_STATE,
    LINK_SPEED,
    Fact("nvlink_crc_errors", ERRORS, Field("NVML_FI_DEV_NVLINK_ERROR_DL_CRC"), "health", Const(0.0), ("crc",),
         per_link=True),
    Fact("nvlink_replay_errors", ERRORS, Field("NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY"), "health", Const(0.0),
         ("replay",), per_link=True),
    Fact("nvlink_recovery_errors", ERRORS, Field("NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY"), "health", Const(0.0),
         ("recovery",), per_link=True),
)
# fmt: on

ROUND = (TX, RX, LINK_STATE, LINK_SPEED)
"""What a benchmark round reads of the links at its begin and end (``exporter.benchmarks.links``)."""
