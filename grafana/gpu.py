"""GPU detail: every per-GPU series of one (or a few) GPUs, its health, and the jobs on it."""

from __future__ import annotations

from grafana.layout import Dashboard, datasource_var, query_var
from grafana.panels import (
    NEUTRAL,
    PROBLEM,
    UP_DOWN,
    UTILISATION,
    WARNING,
    YES_NO_BAD,
    Col,
    Q,
    bargauge,
    gauge,
    info_table,
    mapping,
    stat,
    state_timeline,
    steps,
    table,
    timeseries,
)
from grafana.promql import INFO, JOB, RANGE, RATE, increase, per_gpu, per_node, rate, sel, share

G = "GPU {{gpu}}"


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
    _physical(d)
    _jobs(d)
    _exporter(d)
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
            "answering (all GPUs of the host are then down).",
            [Q(per_node(sel("gpuledger_nvml_up", JOB)), "{{hostname}}")],
            "none",
            mappings=UP_DOWN,
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "XID errors",
            "XID events over the time range, by code (gpuledger_gpu_xid_errors_total). 0 when none "
            "was ever seen. 48, 63, 64, 74, 79, 92, 94, 95 usually need a reset or service.",
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
            "running), SMs active, tensor cores active, DRAM bandwidth in use (GPM, Hopper).",
            [
                Q(share("busy"), G + " busy"),
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


def _physical(d: Dashboard) -> None:
    d.row("Power, temperature, clocks, memory, PCIe")
    d.add(
        timeseries(
            "Power and limit",
            "Power draw at the last sample, the mean power over each interval from "
            "the energy counter (exact; the sample can alias), and the enforced power limit.",
            [
                Q(per_gpu(sel("gpuledger_gpu_power_watts")), G + " power"),
                Q(per_gpu(rate("gpuledger_gpu_energy_joules_total")), G + " mean (energy counter)"),
                Q(per_gpu(sel("gpuledger_gpu_power_limit_watts")), G + " limit"),
            ],
            "watt",
        ),
        8,
    )
    d.add(
        stat(
            "Energy over the range",
            "From NVML's energy counter (PUE not applied).",
            [Q(f"sum by (gpu) ({per_gpu(increase('gpuledger_gpu_energy_joules_total'))}) / 3.6e6", G, instant=True)],
            "kwatth",
            decimals=2,
        ),
        4,
    )
    d.add(
        timeseries(
            "Temperature",
            "GPU core temperature. Dashed: 83 °C and 90 °C, where datacentre GPUs start to slow down.",
            [Q(per_gpu(sel("gpuledger_gpu_temperature_celsius")), G)],
            "celsius",
            min_=None,
            thresholds=steps("green", (83, "orange"), (90, "red")),
        ),
        12,
    )
    d.add(
        timeseries(
            "Clocks",
            "SM and memory clocks.",
            [
                Q(per_gpu(sel("gpuledger_gpu_sm_clock_hertz")), G + " SM"),
                Q(per_gpu(sel("gpuledger_gpu_memory_clock_hertz")), G + " memory"),
            ],
            "hertz",
        ),
        8,
    )
    d.add(
        timeseries(
            "Memory",
            "Device memory in use against the total.",
            [
                Q(per_gpu(sel("gpuledger_gpu_memory_used_bytes")), G + " used"),
                Q(per_gpu(sel("gpuledger_gpu_memory_total_bytes")), G + " total"),
            ],
            "bytes",
        ),
        8,
    )
    d.add(
        timeseries(
            "PCIe throughput",
            "PCIe throughput by direction (slow lane; off where pcie interval is 0).",
            [Q(per_gpu(sel("gpuledger_gpu_pcie_throughput_bytes_per_second")), G + " {{direction}}")],
            "Bps",
        ),
        8,
    )


def _jobs(d: Dashboard) -> None:
    d.row("Processes and jobs")
    d.add(
        timeseries(
            "Compute processes",
            "Compute processes on the GPU (NVML).",
            [Q(per_gpu(sel("gpuledger_gpu_processes")), G)],
            "none",
            decimals=0,
        ),
        6,
    )
    d.add(
        info_table(
            "Jobs on the GPU now",
            "gpuledger_gpu_job_info: the Slurm job, pod and user holding the GPU "
            "(empty = not known, e.g. a process outside any job).",
            per_gpu(sel("gpuledger_gpu_job_info")),
            ["hostname", "gpu", "job_id", "user", "pod", "namespace", "container"],
        ),
        18,
    )
    d.add(
        timeseries(
            "Per-job utilisation of the GPU",
            "rate(job busy) / rate(job held) per job: how much of the time a job held the GPU it kept it busy.",
            [
                Q(
                    per_gpu(
                        f"{rate('gpuledger_job_gpu_busy_seconds_total')} / "
                        f"{rate('gpuledger_job_gpu_sampled_seconds_total')}"
                    ),
                    "{{job_id}} {{user}} {{pod}}",
                )
            ],
            "percentunit",
            max_=1,
            thresholds=UTILISATION,
        ),
        12,
    )
    by = "sum by (hostname, gpu, job_id, user, pod, namespace)"
    d.add(
        table(
            "Per-job held, busy and energy",
            "Over the time range, per job on the GPU: hours held, hours busy, "
            "their ratio and the job's share of the GPU's energy.",
            [
                Col("held", f"{by} ({per_gpu(increase('gpuledger_job_gpu_sampled_seconds_total'))}) / 3600", "h"),
                Col("busy", f"{by} ({per_gpu(increase('gpuledger_job_gpu_busy_seconds_total'))}) / 3600", "h"),
                Col(
                    "utilisation",
                    f"{by} ({per_gpu(increase('gpuledger_job_gpu_busy_seconds_total'))}) / "
                    f"{by} ({per_gpu(increase('gpuledger_job_gpu_sampled_seconds_total'))})",
                    "percentunit",
                    gauge=True,
                    thresholds=UTILISATION,
                ),
                Col("energy", f"{by} ({per_gpu(increase('gpuledger_job_gpu_energy_joules_total'))}) / 3.6e6", "kwatth"),
            ],
            ["hostname", "gpu", "job_id", "user", "pod", "namespace"],
            sort="held",
        ),
        12,
    )


def _exporter(d: Dashboard) -> None:
    d.row("The exporter on this host")
    d.add(
        info_table(
            "Exporter",
            "gpuledger_exporter_info: version and reader (nvml; replay means no real GPU).",
            per_node(sel("gpuledger_exporter_info", JOB)),
            ["hostname", "version", "reader"],
        ),
        6,
        6,
    )
    d.add(
        stat(
            "Last sample age",
            "Seconds since the sampler's last round; /healthz turns 503 after stale_after.",
            [Q(per_node(f"time() - {sel('gpuledger_last_sample_timestamp_seconds', JOB)}"), "{{hostname}}")],
            "s",
            thresholds=steps("green", (5, "orange"), (30, "red")),
            decimals=1,
        ),
        3,
        6,
    )
    d.add(
        timeseries(
            "Sample round duration",
            "Duration of the last fast round over all GPUs of the host.",
            [Q(per_node(sel("gpuledger_sample_duration_seconds", JOB)), "{{hostname}}")],
            "s",
        ),
        5,
        6,
    )
    d.add(
        timeseries(
            "Reader errors",
            "Failed reader (NVML) calls per second, by call; unsupported calls are not errors.",
            [
                Q(
                    f"sum by (hostname, call) ({per_node(rate('gpuledger_reader_errors_total', labels=JOB))})",
                    "{{hostname}} {{call}}",
                )
            ],
            "cps",
            thresholds=NEUTRAL,
        ),
        5,
        6,
    )
    d.add(
        timeseries(
            "History writes",
            "Per-minute rows written to the embedded history, and failed transactions (rows are kept and retried).",
            [
                Q(per_node(f"60 * {rate('gpuledger_history_rows_written_total', labels=JOB)}"), "{{hostname}} rows"),
                Q(per_node(f"60 * {rate('gpuledger_history_write_errors_total', labels=JOB)}"), "{{hostname}} errors"),
            ],
            "cpm",
        ),
        5,
        6,
    )
