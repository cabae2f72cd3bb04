"""The GPU detail dashboard's MIG section: a GPU in MIG mode's instances (``exporter.sampling.mig``),
their activity, their share of the GPU and their memory. A GPU not in MIG mode has no MIG series: the
panels say "No data"."""

from __future__ import annotations

from grafana.gpu_sections import G
from grafana.layout import Dashboard
from grafana.model import UTILISATION, Q
from grafana.panels import bargauge, info_table, timeseries
from grafana.promql import per_gpu, rate, sel

INST = G + " {{mig_profile}} GI {{gpu_instance_id}}"  # an instance's legend


def _share(name: str) -> str:
    """Per instance: the share of its sampled time a quantity was on."""
    return per_gpu(f"{rate(f'gpuledger_mig_{name}_seconds_total')} / {rate('gpuledger_mig_sampled_seconds_total')}")


def add_mig(d: Dashboard) -> None:
    d.row("MIG instances")
    d.add(
        info_table(
            "MIG instances now",
            "gpuledger_mig_instance_info: each MIG instance of the GPU, its GPU instance (dcgm-exporter's GPU_I_ID), "
            "profile (GPU_I_PROFILE) and MIG device UUID.",
            per_gpu(sel("gpuledger_mig_instance_info")),
            ["hostname", "gpu", "gpu_instance_id", "compute_instance_id", "mig_profile", "mig_uuid"],
        ),
        12,
    )
    d.add(
        bargauge(
            "Share of the GPU",
            "Each instance's compute slices over the GPU's (what a job on it holds and pays), its SMs over the "
            "GPU's (information), and the slices in no instance. Shares plus unallocated make 1.",
            [
                Q(per_gpu(sel("gpuledger_mig_share_ratio")), INST + " slices"),
                Q(per_gpu(sel("gpuledger_mig_sm_share_ratio")), INST + " SMs"),
                Q(per_gpu(sel("gpuledger_gpu_mig_unallocated_ratio")), G + " unallocated"),
            ],
            "percentunit",
            max_=1,
        ),
        12,
    )
    d.add(
        timeseries(
            "MIG instance activity",
            "Per instance: busy (its SM activity: NVML has no utilisation under MIG), tensor-core and DRAM "
            "activity, and the time a process held it idle, as shares of its sampled time.",
            [
                Q(_share("busy"), INST + " busy"),
                Q(_share("sm_active"), INST + " SM"),
                Q(_share("tensor_active"), INST + " tensor"),
                Q(_share("dram_active"), INST + " DRAM"),
                Q(_share("allocated"), INST + " allocated"),
                Q(_share("allocated_idle"), INST + " allocated idle"),
            ],
            "percentunit",
            max_=1,
            thresholds=UTILISATION,
        ),
        12,
    )
    d.add(
        timeseries(
            "MIG instance memory and processes",
            "Memory in use and in total, SMs and compute processes of each instance.",
            [
                Q(per_gpu(sel("gpuledger_mig_memory_used_bytes")), INST + " used"),
                Q(per_gpu(sel("gpuledger_mig_memory_total_bytes")), INST + " total"),
                Q(per_gpu(sel("gpuledger_mig_processes")), INST + " processes"),
                Q(per_gpu(sel("gpuledger_mig_sm_count")), INST + " SMs"),
            ],
            "short",
        ),
        12,
    )
    d.add(
        timeseries(
            "Time in MIG mode",
            "Share of the GPU's sampled time it spent in MIG mode (gpuledger_gpu_mig_sampled_seconds_total over "
            "gpuledger_gpu_sampled_seconds_total): in that time its busy seconds are its instances' SM activity "
            "times their shares, not NVML's utilisation.",
            [
                Q(
                    per_gpu(
                        f"{rate('gpuledger_gpu_mig_sampled_seconds_total')} / "
                        f"{rate('gpuledger_gpu_sampled_seconds_total')}"
                    ),
                    G + " in MIG mode",
                )
            ],
            "percentunit",
            max_=1,
        ),
        12,
    )
