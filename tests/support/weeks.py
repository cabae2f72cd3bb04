"""Builders of what a source hands the report builder (domain.week): a GPU's week and a job's week
in hours and kWh, and hypothesis' GPUs given hour by hour with the week they make."""

from __future__ import annotations

from hypothesis import strategies as st

from domain.jobs import JobKey
from domain.week import GpuWeek, JobWeek, WeekData, Window, iso_week

H = 3600.0  # seconds per hour
KWH = 3.6e6  # joules per kWh


def _seconds(hours: float | None) -> float | None:
    return None if hours is None else hours * H


def gpu_week(
    uuid: str = "GPU-a",
    host: str = "n1",
    *,
    model: str = "NVIDIA H200",
    gpu: str = "0",
    sampled_h: float = 168.0,
    busy_h: float = 100.0,
    sm_active_h: float | None = None,
    allocated_h: float | None = None,
    allocated_idle_h: float | None = None,
    energy_kwh: float | None = None,
    by_hour: tuple[float, ...] | None = None,
    stalled_h: float | None = None,
    cluster: str = "",
) -> GpuWeek:
    """A GPU's week: by default sampled all week (168 h), busy 100 h, nothing else measured (no
    SM activity, allocation, energy or stalls); ``by_hour`` is joules per hour of the window."""
    return GpuWeek(
        uuid,
        host,
        model,
        gpu,
        sampled_h * H,
        busy_h * H,
        _seconds(sm_active_h),
        _seconds(allocated_h),
        _seconds(allocated_idle_h),
        None if energy_kwh is None else energy_kwh * KWH,
        by_hour,
        stalled_s=_seconds(stalled_h),
        cluster=cluster,
    )


def job_week(
    job_id: str,
    user: str = "",
    *,
    held_h: float,
    busy_h: float,
    uuid: str = "GPU-a",
    host: str = "n1",
    pod: str = "",
    namespace: str = "",
    energy_kwh: float = 0.0,
    charged_h: float | None = None,
    stalled_h: float | None = None,
    partition: str = "",
    account: str = "",
    qos: str = "",
    labels: tuple[tuple[str, str], ...] = (),
) -> JobWeek:
    """A job's week on one GPU: held ``held_h`` hours (its sampled time), busy ``busy_h``; its
    charged and stalled hours None (not counted by the source) unless given."""
    return JobWeek(
        uuid,
        host,
        JobKey(job_id, user, pod, namespace),
        held_h * H,
        busy_h * H,
        energy_kwh * KWH,
        charged_s=_seconds(charged_h),
        stalled_s=_seconds(stalled_h),
        partition=partition,
        account=account,
        qos=qos,
        labels=labels,
    )


# --- GPUs hour by hour (hypothesis) --------------------------------------------------------------------
HOURS = 168
HOURLY_WEEK = iso_week("2026-W10", "Europe/Berlin")
HourlyGpu = tuple[str, str, list[tuple[float, ...]]]  # host, model, per hour (sampled s, busy s, SM-active s, J)

# one GPU: per hour (sampled s, busy s, SM-active s, joules), plus its host and model
hour = st.tuples(st.floats(0, 3600), st.floats(0, 1), st.floats(0, 1), st.floats(0, 700 * 3600)).map(
    lambda t: (t[0], t[0] * t[1], t[0] * t[1] * t[2], t[3])
)
# a pattern of 1 to 13 hours, repeated over the week (13 is prime to 24: days differ)
week_of_hours = st.lists(hour, min_size=1, max_size=13).map(lambda p: [p[i % len(p)] for i in range(HOURS)])
hourly_gpu = st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["NVIDIA H200", "NVIDIA A100"]), week_of_hours)


def hourly_week(gpus: list[HourlyGpu], first: int = 0, last: int = HOURS) -> WeekData:
    """The hours [first, last) of HOURLY_WEEK, each GPU's figures summed over them (GPU-0, GPU-1, ...)."""
    w = Window(HOURLY_WEEK.start + 3600 * first, HOURLY_WEEK.start + 3600 * last, "part", HOURLY_WEEK.timezone)
    out = []
    for i, (host, model, hours) in enumerate(gpus):
        part = hours[first:last]
        out.append(
            GpuWeek(
                uuid=f"GPU-{i}",
                host=host,
                model=model,
                gpu=str(i),
                sampled_s=sum(h[0] for h in part),
                busy_s=sum(h[1] for h in part),
                sm_active_s=sum(h[2] for h in part),
                allocated_s=None,
                allocated_idle_s=None,
                energy_j=sum(h[3] for h in part),
                energy_by_hour=tuple(h[3] for h in part),
            )
        )
    return WeekData(w, "test", tuple(out))
