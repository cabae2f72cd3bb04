"""The weekly dashboard's breakdown sections: the report's figures per host, GPU model and user,
the queue, failures and multi-GPU scaling of the window, the live counters of the selected GPUs,
and the analytics daemon's own health. Also the report selectors that ``grafana.weekly`` (the
dashboard and its headline) shares with them.
"""

from __future__ import annotations

from grafana.layout import Dashboard
from grafana.model import EFFICIENCY, NEUTRAL, PROBLEM, UTILISATION, Q, steps
from grafana.panels import Col, bargauge, stat, table, timeseries
from grafana.promql import per_gpu, rolled, rolled_share

PER_USEFUL = "gpuledger_report_cost_per_useful_gpu_hour"

W = 'window="$window"'
FLEET = f'{W}, group="fleet"'
HOSTS = f'{W}, group="host", key=~"$hostname"'  # a report's host key is the exporter's hostname
USERS = f'{W}, group="user", key=~"$user"'
MONEY = "short"  # amounts are in the report's currency, named in the titles


def add_hosts(d: Dashboard) -> None:
    d.row("Hosts and GPU models")
    d.add(
        table(
            "Hosts",
            "Per host over the window. Sorted by cost per useful GPU-hour, dearest first.",
            [
                Col(
                    "utilisation",
                    f"gpuledger_report_utilization_ratio{{{HOSTS}}}",
                    "percentunit",
                    gauge=True,
                    thresholds=UTILISATION,
                ),
                Col("SM activity", f"gpuledger_report_sm_activity_ratio{{{HOSTS}}}", "percentunit"),
                Col("energy", f"gpuledger_report_energy_kwh{{{HOSTS}}}", "kwatth"),
                Col("total cost", f'gpuledger_report_cost{{{HOSTS}, kind="total"}}', MONEY),
                Col("idle cost", f'gpuledger_report_cost{{{HOSTS}, kind="idle"}}', MONEY),
                Col("per useful GPU-hour", f"gpuledger_report_cost_per_useful_gpu_hour{{{HOSTS}}}", MONEY),
                Col("useful by SM activity", f"gpuledger_report_useful_sm_active_ratio{{{HOSTS}}}", "percentunit"),
            ],
            ["key"],
            rename={"key": "host"},
            sort="per useful GPU-hour",
        ),
        24,
        7,
    )
    d.add(
        bargauge(
            "Cost per useful GPU-hour by host (${currency})",
            "Total cost / useful GPU-hours per host.",
            [Q(f"gpuledger_report_cost_per_useful_gpu_hour{{{HOSTS}}}", "{{key}}")],
            MONEY,
            decimals=2,
        ),
        8,
    )
    d.add(
        bargauge(
            "Idle cost by host (${currency})",
            "Hourly rate × hours without useful work, per host.",
            [Q(f'gpuledger_report_cost{{{HOSTS}, kind="idle"}}', "{{key}}")],
            MONEY,
            decimals=0,
            thresholds=steps("orange"),
        ),
        8,
    )
    d.add(
        bargauge(
            "Break-even utilisation by GPU model",
            "Utilisation above which owning beats renting (needs a "
            "cloud reference price); compare with the utilisation by model beside it.",
            [
                Q(f"gpuledger_report_breakeven_utilization_ratio{{{W}}}", "break-even {{model}}"),
                Q(f'gpuledger_report_utilization_ratio{{{W}, group="model"}}', "utilisation {{key}}"),
            ],
            "percentunit",
            max_=1,
        ),
        8,
    )
    d.add(
        timeseries(
            "Rolling 7-day cost per useful GPU-hour (${currency})",
            "The hourly rolling_7d refresh over time, fleet and hosts: a trend without waiting for Monday.",
            [
                Q(f'{PER_USEFUL}{{window="rolling_7d", group="fleet"}}', "fleet"),
                Q(f'{PER_USEFUL}{{window="rolling_7d", group="host", key=~"$hostname"}}', "{{key}}"),
            ],
            MONEY,
            decimals=2,
        ),
        12,
    )
    d.add(
        timeseries(
            "Rolling 7-day utilisation",
            "The hourly rolling_7d refresh over time, fleet and hosts.",
            [
                Q('gpuledger_report_utilization_ratio{window="rolling_7d", group="fleet"}', "fleet"),
                Q('gpuledger_report_utilization_ratio{window="rolling_7d", group="host", key=~"$hostname"}', "{{key}}"),
            ],
            "percentunit",
            max_=1,
            thresholds=UTILISATION,
        ),
        12,
    )


def add_users(d: Dashboard) -> None:
    d.row("Users")
    d.add(
        table(
            "Users",
            "Per user over the window: GPU-hours held and busy, cost (the hourly rate of the GPUs held "
            "plus their energy share) and idle cost (rate × held but not busy hours), most idle cost first.",
            [
                Col("held", f'gpuledger_report_gpu_hours{{{USERS}, kind="available"}}', "h"),
                Col("busy", f'gpuledger_report_gpu_hours{{{USERS}, kind="busy"}}', "h"),
                Col(
                    "utilisation",
                    f"gpuledger_report_utilization_ratio{{{USERS}}}",
                    "percentunit",
                    gauge=True,
                    thresholds=UTILISATION,
                ),
                Col("total cost", f'gpuledger_report_cost{{{USERS}, kind="total"}}', MONEY),
                Col("idle cost", f'gpuledger_report_cost{{{USERS}, kind="idle"}}', MONEY),
                Col("per useful GPU-hour", f"gpuledger_report_cost_per_useful_gpu_hour{{{USERS}}}", MONEY),
                Col("useful by SM activity", f"gpuledger_report_useful_sm_active_ratio{{{USERS}}}", "percentunit"),
            ],
            ["key"],
            rename={"key": "user"},
            sort="idle cost",
        ),
        16,
        8,
    )
    d.add(
        bargauge(
            "Top users by idle cost (${currency})",
            "The ten users whose held GPUs cost most while idle.",
            [Q(f'topk(10, gpuledger_report_cost{{{USERS}, kind="idle"}})', "{{key}}")],
            MONEY,
            decimals=0,
            thresholds=steps("orange"),
        ),
        8,
        8,
    )


def add_queue(d: Dashboard) -> None:
    d.row("Queue, failures and multi-GPU in the window")
    d.add(
        bargauge(
            "Queue wait",
            "Wait from submit to start per partition: mean, p50, p95, max (exact from the "
            "embedded history; histogram estimates from Prometheus).",
            [Q(f"gpuledger_report_queue_wait_seconds{{{W}}}", "{{partition}} {{stat}}")],
            "s",
        ),
        8,
        8,
    )
    d.add(
        bargauge(
            "Jobs started",
            "Jobs started in the window per partition.",
            [Q(f"gpuledger_report_queue_jobs_started{{{W}}}", "{{partition}}")],
            "none",
        ),
        4,
        8,
    )
    d.add(
        bargauge(
            "Jobs ended by state",
            "Jobs that ended in the window, by partition and state (and requeues).",
            [Q(f"gpuledger_report_jobs{{{W}}} > 0", "{{partition}} {{state}}")],
            "none",
        ),
        6,
        8,
    )
    d.add(
        bargauge(
            "GPU-hours of failed jobs",
            "GPU-hours of jobs that failed or timed out: work lost.",
            [Q(f"gpuledger_report_failed_gpu_hours{{{W}}}", "{{partition}}")],
            "h",
            decimals=1,
            thresholds=steps("green", (1, "orange")),
        ),
        6,
        8,
    )
    d.add(
        bargauge(
            "Multi-GPU scaling efficiency",
            "Measured training speedup / N at N GPUs. ≥ 80 %: more GPUs are "
            "bought cheaply; 60–80 %: the usual price; under 60 %: dearly.",
            [Q(f"gpuledger_report_multi_gpu_efficiency_ratio{{{W}}}", "{{world_size}} GPUs")],
            "percentunit",
            max_=1,
            thresholds=EFFICIENCY,
        ),
        12,
        6,
    )
    d.add(
        bargauge(
            "Extra cost per sample against one GPU",
            "N / speedup − 1: how much more each sample costs when a job is spread over N GPUs.",
            [Q(f"gpuledger_report_multi_gpu_extra_cost_ratio{{{W}}}", "{{world_size}} GPUs")],
            "percentunit",
            thresholds=steps("green", (0.25, "orange"), (0.67, "red")),
        ),
        12,
        6,
    )


def add_live(d: Dashboard) -> None:
    d.row("Live counters of the selected GPUs, last 7 days")
    d.add(
        table(
            "GPUs over the last 7 days (live)",
            "The exporters' counters over the last 7 days, per GPU, from their 5-minute rollups "
            "(gpuledger-rollups.yml: a week of buckets, not of raw samples; up to 5 minutes behind): the "
            "figures the report aggregates, without waiting for it. Shares of sampled time; "
            "energy from NVML's counter (PUE not applied).",
            [
                Col("utilisation", rolled_share("busy"), "percentunit", gauge=True, thresholds=UTILISATION),
                Col("SM activity", rolled_share("sm_active"), "percentunit", thresholds=UTILISATION),
                Col(
                    "allocated but idle",
                    rolled_share("allocated_idle"),
                    "percentunit",
                    thresholds=steps("green", (0.1, "orange"), (0.3, "red")),
                ),
                Col(
                    "energy",
                    f"sum by (hostname, gpu, model, uuid) ({per_gpu(rolled('energy_joules'))}) / 3.6e6",
                    "kwatth",
                ),
            ],
            ["hostname", "gpu", "model", "uuid"],
            sort="utilisation",
            desc=False,
        ),
        24,
        8,
    )


def add_daemon(d: Dashboard) -> None:
    d.row("The analytics daemon")
    last = stat(
        "Last success",
        "Time since each task (refresh, weekly; budgets, statements, focus where configured) last "
        "succeeded, amber once it is overdue for its schedule: refresh and budgets after 3 h (the "
        "rolling figures are stale), focus after 2 days, weekly after 8, statements after 32.",
        [Q("time() - gpuledger_analytics_last_success_timestamp_seconds", "{{task}}")],
        "s",
        thresholds=steps("green", (3 * 3600, "orange")),
        text_mode="value_and_name",
    )
    last["fieldConfig"]["overrides"] = [  # each task against its own schedule, not the refresh's
        {
            "matcher": {"id": "byName", "options": task},
            "properties": [{"id": "thresholds", "value": steps("green", (due, "orange"))}],
        }
        for task, due in (("focus", 2 * 86400), ("weekly", 8 * 86400), ("statements", 32 * 86400))
    ]
    d.add(last, 8, 5)
    d.add(
        bargauge(
            "Runs by result",
            "Report runs over the time range by task and result; errors mean the source "
            "could not be read, or statement or FOCUS files not written (the last good figures stay served).",
            [
                Q(
                    "sum by (task, result) (increase(gpuledger_analytics_runs_total[$__range]))",
                    "{{task}} {{result}}",
                    instant=True,
                )
            ],
            "none",
            decimals=0,
            thresholds=NEUTRAL,
        ),
        8,
        5,
    )
    d.add(
        stat(
            "Failed runs",
            "Report runs that failed over the time range (a run that found no data yet, on a "
            "fresh install, is not a failure). Every run counts as 0 unless it failed, so 0 is a "
            "real zero and no data means the daemon is not scraped.",
            [
                Q(
                    'sum (increase(gpuledger_analytics_runs_total{result="error"}[$__range])'
                    " or 0 * increase(gpuledger_analytics_runs_total[$__range]))",
                    instant=True,
                )
            ],
            "none",
            decimals=0,
            thresholds=PROBLEM,
            background=True,
        ),
        8,
        5,
    )
