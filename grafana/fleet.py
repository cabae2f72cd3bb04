"""Fleet overview: how busy the GPUs are (exactly, from the counters), what they draw, which sit
idle or are held by a process doing nothing, and what the fleet costs per hour right now."""

from __future__ import annotations

from grafana.layout import Dashboard, gpu_vars, query_var
from grafana.model import PROBLEM, UTILISATION, WARNING, Q, steps
from grafana.panels import Col, bargauge, stat, table, timeseries
from grafana.promql import (
    IDENTITY,
    KWH_PRICE,
    PUE,
    RANGE,
    cost_per_hour,
    gpu_equivalents,
    idle_cost_per_hour,
    increase,
    per_gpu,
    pooled_share,
    rate,
    sel,
    share,
)

LEGEND = "{{hostname}} GPU {{gpu}}"
WARN_SHARE = steps("green", (0.1, "orange"), (0.3, "red"))  # share of time held while idle
GPU_LINK = {
    "title": "GPU detail",
    "url": "/d/gpuledger-gpu/?var-gpu=${__value.raw}&${__url_time_range}&var-datasource=${datasource}",
}


def build() -> Dashboard:
    currency = query_var(
        "currency",
        "currency",
        "label_values(gpuledger_price_energy_kwh, currency)",
        "The analytics daemon's currency (for titles).",
        multi=False,
        include_all=False,
        hide=2,
    )
    d = Dashboard(
        "gpuledger-fleet",
        "gpuledger / Fleet overview",
        "Utilisation and SM activity from exact counters, power, energy, idle capacity and cost per hour.",
        [*gpu_vars(), currency],
    )
    _now(d)
    _utilisation(d)
    _power(d)
    _idle(d)
    _cost(d)
    return d


def _now(d: Dashboard) -> None:
    d.row("Now and over the time range")
    d.add(
        stat(
            "Utilisation",
            "Share of sampled time with a kernel running, pooled over the selected GPUs, over the "
            "dashboard's time range: rate(busy) / rate(sampled), exact whatever the scrape interval.",
            [Q(pooled_share("busy", window=RANGE), instant=True)],
            "percentunit",
            thresholds=UTILISATION,
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "SM activity",
            "Share of SMs busy (Hopper GPM), pooled over the selected GPUs and the time range. "
            "Lower than utilisation: a kernel that occupies few SMs counts as busy but not as SM-active.",
            [Q(pooled_share("sm_active", window=RANGE), instant=True)],
            "percentunit",
            thresholds=UTILISATION,
            background=True,
        ),
        4,
        4,
    )
    d.add(stat("GPUs", "GPUs selected (gpuledger_gpu_info).", [Q(f"count ({IDENTITY})")], "none"), 2, 4)
    d.add(
        stat(
            "GPUs down",
            "Selected GPUs whose gpuledger_gpu_up is 0: lost or unreadable (see GPU detail).",
            [Q(f"sum ({per_gpu('1 - ' + sel('gpuledger_gpu_up'))})")],
            "none",
            thresholds=PROBLEM,
            background=True,
        ),
        2,
        4,
    )
    d.add(
        stat(
            "Idle GPUs",
            "GPUs with no compute process and under 5 % busy over the last rate interval: capacity nobody uses.",
            [Q(f"sum ((({share('busy')}) < bool 0.05) * on (instance, gpu, uuid) (({share('allocated')}) == bool 0))")],
            "none",
            thresholds=WARNING,
        ),
        2,
        4,
    )
    d.add(
        stat(
            "Allocated but idle",
            "GPUs held by a compute process while idle (under the exporter's "
            "allocated_idle_below) for more than half of the last rate interval: paid for, doing nothing.",
            [Q(f"sum (({share('allocated_idle')}) > bool 0.5)")],
            "none",
            thresholds=WARNING,
        ),
        2,
        4,
    )
    d.add(
        stat(
            "Power",
            "Power drawn now by the selected GPUs.",
            [Q(f"sum ({per_gpu(sel('gpuledger_gpu_power_watts'))})")],
            "watt",
            graph=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Energy",
            "GPU energy over the time range, from NVML's energy counter (PUE not applied).",
            [Q(f"sum ({per_gpu(increase('gpuledger_gpu_energy_joules_total'))}) / 3.6e6", instant=True)],
            "kwatth",
            decimals=1,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Cost per hour now (${currency})",
            "Hardware (or rental) price per GPU-hour of every selected GPU "
            "plus its energy now × PUE × price per kWh, from the analytics daemon's gpuledger_price_* gauges. "
            "GPUs on hosts the analytics has not priced yet are left out.",
            [Q(cost_per_hour(), "{{currency}} per hour")],
            "short",
            decimals=2,
            graph=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Idle cost per hour now (${currency})",
            "Hardware price of the share of each GPU that is not busy, "
            "per hour now: the live counterpart of the weekly report's idle cost.",
            [Q(idle_cost_per_hour(), "{{currency}} per hour")],
            "short",
            decimals=2,
            graph=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Energy price and PUE",
            "Price per kWh now (tariff applied) and the power usage effectiveness the "
            "analytics daemon applies to GPU energy.",
            [Q(KWH_PRICE, "{{currency}} per kWh"), Q(PUE, "PUE")],
            "none",
            decimals=3,
            text_mode="value_and_name",
        ),
        4,
        4,
    )


def _utilisation(d: Dashboard) -> None:
    d.row("Utilisation and activity (exact, from counters)")
    d.add(
        timeseries(
            "Utilisation per GPU",
            "rate(busy_seconds) / rate(sampled_seconds) per GPU. Dashed lines: 30 % and 60 %.",
            [Q(share("busy"), LEGEND)],
            "percentunit",
            max_=1,
            thresholds=UTILISATION,
        ),
        12,
    )
    d.add(
        timeseries(
            "SM activity per GPU",
            "rate(sm_active_seconds) / rate(sampled_seconds) per GPU (Hopper GPM; absent where unsupported).",
            [Q(share("sm_active"), LEGEND)],
            "percentunit",
            max_=1,
            thresholds=UTILISATION,
        ),
        12,
    )
    d.add(
        timeseries(
            "Pooled activity",
            "Busy, SM-active, tensor-active and DRAM-active shares pooled over the "
            "selected GPUs (summed rates over summed sampled time).",
            [
                Q(pooled_share("busy"), "busy"),
                Q(pooled_share("sm_active"), "SM active"),
                Q(pooled_share("tensor_active"), "tensor active"),
                Q(pooled_share("dram_active"), "DRAM active"),
            ],
            "percentunit",
            max_=1,
        ),
        12,
    )
    d.add(
        bargauge(
            "Utilisation by host",
            "Busy share per host over the time range.",
            [Q(pooled_share("busy", "hostname", RANGE), "{{hostname}}", instant=True)],
            "percentunit",
            thresholds=UTILISATION,
            max_=1,
        ),
        6,
    )
    d.add(
        bargauge(
            "SM activity by host",
            "SM-active share per host over the time range.",
            [Q(pooled_share("sm_active", "hostname", RANGE), "{{hostname}}", instant=True)],
            "percentunit",
            thresholds=UTILISATION,
            max_=1,
        ),
        6,
    )


def _power(d: Dashboard) -> None:
    d.row("Power and energy")
    d.add(
        timeseries(
            "Power by host",
            "Mean GPU power per host over each interval, stacked: the rate of NVML's "
            "energy counter (joules per second), exact where a power gauge read at scrape time aliases.",
            [Q(f"sum by (hostname) ({per_gpu(rate('gpuledger_gpu_energy_joules_total'))})", "{{hostname}}")],
            "watt",
            stack=True,
        ),
        12,
    )
    d.add(
        timeseries(
            "Power against the limit",
            "Power draw over the enforced power limit per GPU; near 100 % the "
            "GPU is power-capped (see the clock-event reasons on GPU detail).",
            [Q(per_gpu(f"{sel('gpuledger_gpu_power_watts')} / {sel('gpuledger_gpu_power_limit_watts')}"), LEGEND)],
            "percentunit",
            max_=1,
        ),
        8,
    )
    d.add(
        bargauge(
            "Energy by host",
            "GPU energy per host over the time range (PUE not applied).",
            [
                Q(
                    f"sum by (hostname) ({per_gpu(increase('gpuledger_gpu_energy_joules_total'))}) / 3.6e6",
                    "{{hostname}}",
                    instant=True,
                )
            ],
            "kwatth",
            decimals=1,
        ),
        4,
    )


def _idle(d: Dashboard) -> None:
    d.row("Idle and allocated-but-idle capacity")
    d.add(
        timeseries(
            "Busy, allocated and allocated-but-idle GPUs",
            "Each line sums a share over the selected GPUs: "
            "GPU-equivalents busy, held by a process, and held while idle, against the GPU count.",
            [
                Q(f"count ({IDENTITY})", "GPUs"),
                Q(gpu_equivalents("allocated"), "allocated"),
                Q(gpu_equivalents("busy"), "busy"),
                Q(gpu_equivalents("allocated_idle"), "allocated but idle"),
            ],
            "none",
            decimals=1,
        ),
        12,
        10,
    )
    d.add(
        table(
            "GPUs by allocated-but-idle time",
            "Per GPU over the time range: busy, SM-active, allocated and "
            "allocated-but-idle shares of sampled time, worst first. The UUID links to GPU detail.",
            [
                Col("utilisation", share("busy", RANGE), "percentunit", gauge=True, thresholds=UTILISATION),
                Col("SM activity", share("sm_active", RANGE), "percentunit"),
                Col("allocated", share("allocated", RANGE), "percentunit"),
                Col("allocated but idle", share("allocated_idle", RANGE), "percentunit", thresholds=WARN_SHARE),
            ],
            ["hostname", "gpu", "model", "uuid"],
            sort="allocated but idle",
            links={"uuid": GPU_LINK},
        ),
        12,
        10,
    )


def _cost(d: Dashboard) -> None:
    d.row("Cost now (prices from the analytics daemon)")
    d.add(
        timeseries(
            "Cost per hour by host (${currency})",
            "Hardware price per GPU-hour plus energy × PUE × price per kWh, per host, stacked.",
            [Q(cost_per_hour("hostname, currency"), "{{hostname}}")],
            "short",
            decimals=2,
            stack=True,
        ),
        12,
    )
    d.add(
        timeseries(
            "Idle cost per hour by host (${currency})",
            "Hardware price of the GPU time that is not busy, per host, stacked.",
            [Q(idle_cost_per_hour("hostname, currency"), "{{hostname}}")],
            "short",
            decimals=2,
            stack=True,
        ),
        12,
    )
