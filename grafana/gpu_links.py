"""The GPU detail dashboard's links and throttle section: PCIe and NVLink traffic from NVML's byte
counters, link states and errors, and the exact time each performance policy held the clocks down
(the fact table's series, ``exporter.facts``). A GPU without NVLink has no NVLink series: its
panels say "No data", never zero."""

from __future__ import annotations

from grafana.gpu_sections import G
from grafana.layout import Dashboard
from grafana.model import PROBLEM, Q, mapping, steps
from grafana.panels import bargauge, state_timeline, timeseries
from grafana.promql import RANGE, RATE, increase, per_gpu, rate, sel

NVLINK_BYTES = "gpuledger_gpu_nvlink_bytes_total"
ACTIVE_SPEED = (
    f"{sel('gpuledger_gpu_nvlink_speed_bytes_per_second')} and on (instance, gpu, uuid, link) "
    f"{sel('gpuledger_gpu_nvlink_state')} == 1"
)
"""Each active link's speed (per direction)."""


def add_links(d: Dashboard) -> None:
    d.row("Links (PCIe, NVLink) and throttle time")
    d.add(
        timeseries(
            "PCIe traffic",
            "Bytes per second over PCIe by direction, from NVML's byte counters "
            "(gpuledger_gpu_pcie_bytes_total), and link replays (packets resent after a link error).",
            [
                Q(f"sum by (gpu, direction) ({per_gpu(rate('gpuledger_gpu_pcie_bytes_total'))})", G + " {{direction}}"),
                Q(
                    f"sum by (gpu) ({per_gpu(increase('gpuledger_gpu_pcie_replays_total', RATE))})",
                    G + " replays",
                ),
            ],
            "Bps",
        ),
        8,
    )
    d.add(
        timeseries(
            "NVLink traffic",
            "Data bytes per second over all NVLink links by direction "
            "(gpuledger_gpu_nvlink_bytes_total, protocol overhead excluded), and the line rate per direction: "
            "the sum of the active links' speeds (gpuledger_gpu_nvlink_speed_bytes_per_second). No data: the GPU "
            "has no NVLink.",
            [
                Q(f"sum by (gpu, direction) ({per_gpu(rate(NVLINK_BYTES))})", G + " {{direction}}"),
                Q(f"sum by (gpu) ({per_gpu(ACTIVE_SPEED)})", G + " line rate"),
            ],
            "Bps",
        ),
        8,
    )
    d.add(
        state_timeline(
            "NVLink link state",
            "Each link's state as NVML reports it: active is normal on an NVLink system; "
            "inactive or sleep on a link that carried traffic is not.",
            [Q(per_gpu(sel("gpuledger_gpu_nvlink_state")), G + " link {{link}}")],
            mappings=mapping(
                v0=("inactive", "red"), v1=("active", "green"), v2=("sleep", "blue"), v3=("no traffic", "orange")
            ),
            thresholds=steps("red", (1, "green")),
        ),
        8,
    )
    d.add(
        timeseries(
            "NVLink errors",
            "NVLink data-link errors per interval by kind (CRC, replay, recovery), summed over links. "
            "A steady rise is a link to look at.",
            [
                Q(
                    f"sum by (gpu, error) ({per_gpu(increase('gpuledger_gpu_nvlink_errors_total', RATE))})",
                    G + " {{error}}",
                )
            ],
            "none",
            bars=True,
            thresholds=PROBLEM,
        ),
        12,
    )
    d.add(
        bargauge(
            "Throttle time share",
            "Share of the time range each NVML performance policy held the clocks below their target "
            "(gpuledger_gpu_violation_seconds_total: NVML's exact counters, not samples).",
            [
                Q(
                    per_gpu(
                        f"{rate('gpuledger_gpu_violation_seconds_total', RANGE)}"
                        " / on (instance, job, gpu, uuid) group_left "
                        f"{rate('gpuledger_gpu_sampled_seconds_total', RANGE)}"
                    ),
                    "{{policy}} (GPU {{gpu}})",
                    instant=True,
                )
            ],
            "percentunit",
            max_=1,
        ),
        12,
    )
