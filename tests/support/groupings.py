"""The groupings' test week (two clusters and a GPU without one; Slurm jobs and pods with every
attribute a grouping keys on, and jobs without them) and what the groupings' tests share."""

from __future__ import annotations

from analytics.report.build import GROUP_BY
from domain.week import WeekData, iso_week
from tests.support.weeks import gpu_week, job_week

WEEK = iso_week("2026-W48")
AFTER = WEEK.end + 3600  # made after the week: every hour is charged
TEAM = "label:label_team"
ALL = (*GROUP_BY, TEAM)


def team_labels(team: str) -> tuple[tuple[str, str], ...]:
    """A pod's labels with its team (kube_pod_labels' label_team); none without one."""
    return (("label_team", team),) if team else ()


def grouped_week() -> WeekData:
    """Two clusters and a GPU without one; Slurm jobs (two sharing a GPU), pods with namespaces and
    team labels (one on two GPUs), a job with no attribute at all, one idle GPU."""
    gpus = (
        gpu_week("GPU-0", "n1", gpu="0", allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0, cluster="east"),
        gpu_week("GPU-1", "n1", gpu="1", allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0, cluster="east"),
        gpu_week("GPU-2", "n1", gpu="2", allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0, cluster="east"),
        gpu_week("GPU-3", "n2", gpu="3", allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0, cluster="west"),
        gpu_week(
            "GPU-4", "n2", gpu="4", busy_h=0.0, allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0, cluster="west"
        ),  # nobody held it: unallocated
        gpu_week("GPU-5", "n3", gpu="5", allocated_h=168.0, allocated_idle_h=0.0, energy_kwh=80.0, cluster=""),
    )
    jobs = (
        job_week(
            uuid="GPU-0",
            job_id="101",
            user="alice",
            held_h=168,
            busy_h=0.6 * 168,
            energy_kwh=168 * 0.3,
            charged_h=84,
            account="physics",
            partition="gpu",
            qos="normal",
        ),
        job_week(
            uuid="GPU-0",
            job_id="102",
            user="bob",
            held_h=168,
            busy_h=0.6 * 168,
            energy_kwh=168 * 0.3,
            charged_h=84,
            account="chem",
            partition="gpu",
            qos="high",
        ),
        job_week(
            uuid="GPU-1",
            job_id="",
            held_h=120,
            busy_h=0.6 * 120,
            energy_kwh=120 * 0.3,
            namespace="ml",
            pod="train-1",
            labels=team_labels("vision"),
        ),
        job_week(
            uuid="GPU-2",
            job_id="",
            held_h=90,
            busy_h=0.6 * 90,
            energy_kwh=90 * 0.3,
            namespace="ml",
            pod="train-2",
            labels=team_labels("nlp"),
        ),
        job_week(
            uuid="GPU-3",
            job_id="",
            held_h=90,
            busy_h=0.6 * 90,
            energy_kwh=90 * 0.3,
            namespace="ml",
            pod="train-2",
            labels=team_labels("nlp"),
        ),  # a namesake in the other cluster
        job_week(
            uuid="GPU-3", job_id="", held_h=40, busy_h=0.6 * 40, energy_kwh=40 * 0.3, namespace="web", pod="serve-1"
        ),  # no team label
        job_week(
            uuid="GPU-5", job_id="103", user="carol", held_h=60, busy_h=0.6 * 60, energy_kwh=60 * 0.3
        ),  # no account, partition, QOS, namespace or label
        job_week(
            uuid="GPU-5",
            job_id="104",
            user="alice",
            held_h=50,
            busy_h=0.6 * 50,
            energy_kwh=50 * 0.3,
            account="physics",
            partition="debug",
            qos="normal",
        ),
    )
    return WeekData(WEEK, "t", gpus, jobs)
