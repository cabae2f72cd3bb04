"""The GPU detail dashboard's lower sections: power, temperature, clocks, memory and PCIe; the
processes and jobs on the GPU; the exporter of its host. Also ``G``, the legend prefix that
``grafana.gpu`` (the dashboard, its health and activity) shares with them.
"""

from __future__ import annotations

from grafana.layout import Dashboard
from grafana.model import NEUTRAL, UTILISATION, Q, steps
from grafana.panels import Col, info_table, stat, table, timeseries
from grafana.promql import JOB, increase, per_gpu, per_node, rate, sel

G = "GPU {{gpu}}"


def add_physical(d: Dashboard) -> None:
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
        stat(
            "Energy from power samples",
            "Share of the sampled time whose energy was integrated from power samples "
            "(gpuledger_gpu_energy_integrated_seconds_total): GPUs without an energy counter, before Volta. "
            "No value: the energy counter answered.",
            [
                Q(
                    f"sum by (gpu) ({per_gpu(increase('gpuledger_gpu_energy_integrated_seconds_total'))}) / "
                    f"sum by (gpu) ({per_gpu(increase('gpuledger_gpu_sampled_seconds_total'))})",
                    G,
                    instant=True,
                )
            ],
            "percentunit",
            thresholds=steps("green", (0.01, "orange")),  # any of it: an estimate between samples
            decimals=0,
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
        8,
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


def add_jobs(d: Dashboard) -> None:
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
            "Per-job held, charged, busy, stalled and energy",
            "Over the time range, per job on the GPU: hours held, hours charged (its share of the "
            "GPU's time when jobs share it: what chargeback prices), hours busy, hours stalled, "
            "busy / held, the job's share of the GPU's energy and of its NVLink and PCIe traffic (sent + "
            "received, both links together).",
            [
                Col("held", f"{by} ({per_gpu(increase('gpuledger_job_gpu_sampled_seconds_total'))}) / 3600", "h"),
                Col("charged", f"{by} ({per_gpu(increase('gpuledger_job_gpu_charged_seconds_total'))}) / 3600", "h"),
                Col("busy", f"{by} ({per_gpu(increase('gpuledger_job_gpu_busy_seconds_total'))}) / 3600", "h"),
                Col("stalled", f"{by} ({per_gpu(increase('gpuledger_job_gpu_stalled_seconds_total'))}) / 3600", "h"),
                Col(
                    "utilisation",
                    f"{by} ({per_gpu(increase('gpuledger_job_gpu_busy_seconds_total'))}) / "
                    f"{by} ({per_gpu(increase('gpuledger_job_gpu_sampled_seconds_total'))})",
                    "percentunit",
                    gauge=True,
                    thresholds=UTILISATION,
                ),
                Col("energy", f"{by} ({per_gpu(increase('gpuledger_job_gpu_energy_joules_total'))}) / 3.6e6", "kwatth"),
                Col(
                    "NVLink + PCIe",
                    f"{by} ({per_gpu(increase('gpuledger_job_gpu_link_bytes_total'))})",
                    "decbytes",
                ),
            ],
            ["hostname", "gpu", "job_id", "user", "pod", "namespace"],
            sort="held",
        ),
        12,
    )


def add_exporter(d: Dashboard) -> None:
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
