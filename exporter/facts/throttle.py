"""Throttle time: NVML's violation counters, the time each performance policy held the clocks below
their target (the counters of ``nvmlDeviceGetViolationStatus``, in nanoseconds; read in the field-value
batch as ``NVML_FI_DEV_PERF_POLICY_*``, which the binding names as their replacement). Exact, unlike
``gpuledger_gpu_clock_event_seconds_total``, which integrates the clock-event reasons sampled each
fast round; that one stays: it covers reasons these do not (idle, applications clocks, HW slowdown)."""

from __future__ import annotations

from exporter.facts.model import Fact, Family
from exporter.readers.probes import Field, Grows

NS = 1e-9

SECONDS = Family(
    "gpuledger_gpu_violation_seconds_total",
    "counter",
    "seconds",
    "Time each NVML performance policy held the clocks below their target since the exporter started: power, "
    "thermal, sync_boost, board_limit, low_utilization, reliability (violation counters, nanoseconds in NVML: "
    "nvmlDeviceGetViolationStatus, read as field values PERF_POLICY_*: nvmlDeviceGetFieldValues).",
    ("policy",),
)


# fmt: off
FACTS = (
    Fact("power_violation_seconds", SECONDS, Field("NVML_FI_DEV_PERF_POLICY_POWER", NS), "health", Grows(0.0),
         ("power",), history="power_violation_seconds"),
    Fact("thermal_violation_seconds", SECONDS, Field("NVML_FI_DEV_PERF_POLICY_THERMAL", NS), "health", Grows(0.0),
         ("thermal",), history="thermal_violation_seconds"),
    Fact("sync_boost_violation_seconds", SECONDS, Field("NVML_FI_DEV_PERF_POLICY_SYNC_BOOST", NS), "health",
         Grows(0.0), ("sync_boost",), history="sync_boost_violation_seconds"),
    Fact("board_limit_violation_seconds", SECONDS, Field("NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT", NS), "health",
         Grows(0.0), ("board_limit",), history="board_limit_violation_seconds"),
    Fact("low_utilization_violation_seconds", SECONDS, Field("NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION", NS),
         "health", Grows(0.0), ("low_utilization",), history="low_utilization_violation_seconds"),
    Fact("reliability_violation_seconds", SECONDS, Field("NVML_FI_DEV_PERF_POLICY_RELIABILITY", NS), "health",
         Grows(0.0), ("reliability",), history="reliability_violation_seconds"),
)
# fmt: on
