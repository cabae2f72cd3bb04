"""GPU detail: every per-GPU series of one (or a few) GPUs, its health, and the jobs on it.

This module holds the dashboard, its variables, identity and health, and activity; power, clocks,
memory, the jobs and the exporter are in ``grafana.gpu_sections``.
"""

from __future__ import annotations

from grafana.gpu_links import add_links
from grafana.gpu_mig import add_mig
from grafana.gpu_sections import G, add_exporter, add_jobs, add_physical
from grafana.layout import Dashboard, datasource_var, query_var
from grafana.model import PROBLEM, UP_DOWN, UTILISATION, WARNING, YES_NO_BAD, Q, mapping, steps
from grafana.panels import bargauge, gauge, info_table, stat, state_timeline, timeseries
from grafana.promql import INFO, JOB, RANGE, RATE, increase, per_gpu, per_node, rate, sel, share

NOT_NVML = sel("gpuledger_exporter_info", JOB, 'reader!="nvml"')
NVML_STATE = mapping(v1=("UP", "green"), v0=("DOWN", "red"), **{"v-1": ("NO NVML", "blue")})


def build() -> Dashboard:
    variables = [
        datasource_var(),
        query_var(
            "job",
            "cluster/job",
            "label_values(gpuledger_gpu_info, job)",
            "Prometheus job label of the exporters: one per cluster or scrape job.",
        ),
        query_var(
            "hostname",
            "hostname",
            'label_values(gpuledger_gpu_info{job=~"$job"}, hostname)',
            "Hosts of the selected jobs.",
        ),
        query_var(
            "gpu",
            "GPU",
            'label_values(gpuledger_gpu_info{job=~"$job", hostname=~"$hostname"}, uuid)',
            "The GPU (by UUID); pick several to compare.",
            include_all=False,
        ),
    ]
    d = Dashboard(
        "gpuledger-gpu",
        "gpuledger / GPU detail",
        "Every per-GPU series of the selected GPU: health, activity, power, clocks, memory, jobs.",
        variables,
        time_from="now-6h",
        refresh="30s",
    )
    _health(d)
    _activity(d)
    add_physical(d)
    add_links(d)
    add_mig(d)
    add_jobs(d)
    add_exporter(d)
    return d


def _health(d: Dashboard) -> None:
    d.row("Identity and health")
    d.add(
        info_table(
            "Identity",
            "gpuledger_gpu_info: where the GPU is and what it is.",
            INFO,
            ["hostname", "gpu", "model", "uuid", "pci_bus_id", "driver_version"],
        ),
        24,
        4,
    )
    d.add(
        stat(
            "GPU up",
            "gpuledger_gpu_up: 0 while the GPU is lost or unreadable (its counters freeze).",
            [Q(per_gpu(sel("gpuledger_gpu_up")), G)],
            "none",
            mappings=UP_DOWN,
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "NVML up",
            "gpuledger_nvml_up of the GPU's exporter: 0 when NVML is not initialised or not "
            "answering (all GPUs of the host are then down; its /readyz answers 503). NO NVML: a replay "
            "exporter, which exports no gpuledger_nvml_up (gpuledger_exporter_info{reader} names its reader).",
            [Q(per_node(f"{sel('gpuledger_nvml_up', JOB)} or on (instance) (0 * {NOT_NVML} - 1)"), "{{hostname}}")],
            "none",
            mappings=NVML_STATE,
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "XID errors",
            "XID events over the time range, by code (gpuledger_gpu_xid_errors_total). 0 when none "
            "was ever seen. The codes GPUXidError alerts on (48, 61-64, 74, 79, 92, 94, 95, 119, 120) usually "
            "need a reset or service.",
            [
                Q(
                    f"sum by (gpu, xid) ({per_gpu(increase('gpuledger_gpu_xid_errors_total'))})",
                    "XID {{xid}}",
                    instant=True,
                )
            ],
            "none",
            thresholds=PROBLEM,
            no_value="0",
        ),
        4,
        4,
    )
    d.add(
        stat(
            "ECC errors",
            "Volatile ECC errors since the driver loaded, by type: corrected ones are absorbed, "
            "uncorrected ones kill the job that hit them.",
            [Q(f"sum by (gpu, error_type) ({per_gpu(sel('gpuledger_gpu_ecc_errors_total'))})", "{{error_type}}")],
            "none",
            thresholds=WARNING,
            no_value="0",
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Remapped rows",
            "Memory rows remapped, by cause (gpuledger_gpu_remapped_rows).",
            [Q(f"sum by (gpu, cause) ({per_gpu(sel('gpuledger_gpu_remapped_rows'))})", "{{cause}}")],
            "none",
            thresholds=WARNING,
            no_value="0",
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Row remap pending / failed",
            "pending: a remap waits for a GPU reset; failed: the GPU needs service.",
            [
                Q(per_gpu(sel("gpuledger_gpu_row_remap_pending")), "pending"),
                Q(per_gpu(sel("gpuledger_gpu_row_remap_failed")), "failed"),
            ],
            "none",
            mappings=YES_NO_BAD,
            text_mode="value_and_name",
            no_value="—",
        ),
        4,
        4,
    )
    d.add(
        state_timeline(
            "Clock-event (throttle) reasons",
            "While a reason is active the GPU runs below its maximum "
            "clocks; gpu_idle is normal, power or thermal slowdowns under load are not.",
            [
                Q(
                    f"max by (gpu, reason) ({per_gpu(sel('gpuledger_gpu_clock_event_active'))})",
                    "{{reason}} (GPU {{gpu}})",
                )
            ],
            mappings=mapping(v0=("off", "transparent"), v1=("active", "orange")),
            thresholds=steps("transparent", (1, "orange")),
        ),
        12,
        9,
    )
    d.add(
        bargauge(
            "Clock-event time share",
            "Share of sampled time each clock-event reason was active over the time "
            "range (gpuledger_gpu_clock_event_seconds_total).",
            [
                Q(
                    per_gpu(
                        f"{rate('gpuledger_gpu_clock_event_seconds_total', RANGE)}"
                        " / on (instance, job, gpu, uuid) group_left "
                        f"{rate('gpuledger_gpu_sampled_seconds_total', RANGE)}"
                    ),
                    "{{reason}} (GPU {{gpu}})",
                    instant=True,
                )
            ],
            "percentunit",
            max_=1,
        ),
        6,
        9,
    )
    d.add(
        timeseries(
            "XID events",
            "XID errors per interval, by GPU and code.",
            [
                Q(
                    f"sum by (gpu, xid) ({per_gpu(increase('gpuledger_gpu_xid_errors_total', RATE))})",
                    "GPU {{gpu}} XID {{xid}}",
                )
            ],
            "none",
            bars=True,
            thresholds=PROBLEM,
        ),
        6,
        9,
    )


def _activity(d: Dashboard) -> None:
    d.row("Activity (exact, from counters)")
    d.add(
        timeseries(
            "Busy, SM, tensor and DRAM activity",
            "Shares of sampled time from the counters: busy (a kernel "
            "running), SMs active, tensor cores active, DRAM bandwidth in use (GPM, Hopper), and "
            "stalled: busy while SMs, tensor cores and DRAM stayed quiet for 5 minutes or more "
            "(a hang or a spin-wait; not useful work).",
            [
                Q(share("busy"), G + " busy"),
                Q(share("stalled"), G + " stalled"),
                Q(share("sm_active"), G + " SM"),
                Q(share("tensor_active"), G + " tensor"),
                Q(share("dram_active"), G + " DRAM"),
            ],
            "percentunit",
            max_=1,
            thresholds=UTILISATION,
        ),
        12,
        9,
    )
    d.add(
        timeseries(
            "Allocated and allocated-but-idle",
            "Share of sampled time a compute process held the GPU, and "
            "held it while the GPU stayed under the idle threshold.",
            [Q(share("allocated"), G + " allocated"), Q(share("allocated_idle"), G + " allocated, idle")],
            "percentunit",
            max_=1,
        ),
        6,
        9,
    )
    d.add(
        gauge(
            "Utilisation over the range",
            "rate(busy) / rate(sampled) over the dashboard's time range.",
            [Q(share("busy", RANGE), G, instant=True)],
            "percentunit",
            thresholds=UTILISATION,
        ),
        3,
        9,
    )
    d.add(
        gauge(
            "SM activity over the range",
            "rate(sm_active) / rate(sampled) over the dashboard's time range.",
            [Q(share("sm_active", RANGE), G, instant=True)],
            "percentunit",
            thresholds=UTILISATION,
        ),
        3,
        9,
    )
    d.add(
        timeseries(
            "NVML utilisation gauges (aliased)",
            "What nvidia-smi shows: the last sample period's "
            "utilisation.gpu and memory utilisation. Sampled by a scrape they alias; use the counters above "
            "for means. Shown to compare.",
            [
                Q(per_gpu(sel("gpuledger_gpu_utilization_ratio")), G + " utilization.gpu"),
                Q(per_gpu(sel("gpuledger_gpu_memory_utilization_ratio")), G + " memory"),
            ],
            "percentunit",
            max_=1,
        ),
        24,
        7,
    )
