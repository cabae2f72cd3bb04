"""Weekly cost and utilisation: the analytics daemon's report figures (``gpuledger_report_*``) for
the last ISO week or the rolling 7 days: cost per useful GPU-hour, idle cost, week over week.

This module holds the dashboard, its variables, the headline and the week-over-week change; the
breakdown by host, user and queue, the live counters and the daemon are in ``grafana.weekly_sections``,
the emissions in ``grafana.weekly_carbon``.
"""

from __future__ import annotations

from grafana.layout import Dashboard, custom_var, gpu_vars, query_var
from grafana.model import UTILISATION, Q, mapping, steps
from grafana.panels import bargauge, stat
from grafana.weekly_budgets import add_budgets
from grafana.weekly_carbon import add_carbon
from grafana.weekly_sections import FLEET, MONEY, W, add_daemon, add_hosts, add_live, add_queue, add_users


def build() -> Dashboard:
    variables = [
        *gpu_vars(),  # job, hostname and GPU: the live counters; hostname also filters the report's hosts
        custom_var(
            "window",
            "report window",
            ["week", "rolling_7d"],
            "week: the last weekly report (an ISO week); rolling_7d: the 7 days up to the last hourly refresh.",
        ),
        query_var(
            "user",
            "user",
            'label_values(gpuledger_report_cost{window="$window", group="user"}, key)',
            "Users in the report.",
        ),
        query_var(
            "currency",
            "currency",
            'label_values(gpuledger_report_info{window="$window"}, currency)',
            "The report's currency (for titles).",
            multi=False,
            include_all=False,
            hide=2,
        ),
    ]
    d = Dashboard(
        "gpuledger-weekly",
        "gpuledger / Weekly cost and utilisation",
        "The analytics daemon's report figures: what a useful GPU-hour cost, what idle hours cost, and "
        "the change against the previous window.",
        variables,
        time_from="now-30d",
        refresh="5m",
    )
    _headline(d)
    _change(d)
    add_hosts(d)
    add_users(d)
    add_carbon(d)
    add_budgets(d)
    add_queue(d)
    add_live(d)
    add_daemon(d)
    return d


def _fleet(metric: str, extra: str = "") -> list[Q]:
    """The fleet row of a report metric in the selected window."""
    return [Q(f"{metric}{{{', '.join(x for x in (FLEET, extra) if x)}}}")]


def _headline(d: Dashboard) -> None:
    d.row("Headline: $window")
    d.add(
        stat(
            "Report",
            "The report behind the figures: its week (or rolling-7d), source, what counts as useful "
            "(busy or sm_active) and currency.",
            [Q(f"gpuledger_report_info{{{W}}}", "{{week}} · {{source}} · useful: {{useful}} · {{currency}}")],
            "none",
            text_mode="name",
        ),
        8,
        4,
    )
    d.add(
        stat(
            "Data",
            "complete: every GPU-hour of the window had data; INCOMPLETE: see the report's reasons.",
            [Q(f"gpuledger_report_complete{{{W}}}")],
            "none",
            mappings=mapping(v1=("complete", "green"), v0=("INCOMPLETE", "red")),
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Coverage",
            "Share of the window's GPU-hours with data; under 99 % the report is incomplete.",
            [Q(f"gpuledger_report_coverage_ratio{{{W}}}")],
            "percentunit",
            decimals=1,
            thresholds=steps("red", (0.95, "orange"), (0.99, "green")),
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Report age",
            "Time since the report was built (rolling_7d refreshes hourly, week on Mondays).",
            [Q(f"time() - gpuledger_report_generated_timestamp_seconds{{{W}}}")],
            "s",
        ),
        4,
        4,
    )
    d.add(
        stat(
            "GPU-hours",
            "Available GPU-hours of the fleet in the window.",
            _fleet("gpuledger_report_gpu_hours", 'kind="available"'),
            "h",
            decimals=0,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Cost per useful GPU-hour (${currency})",
            "Total cost / useful GPU-hours: what an hour of real work cost, idle hours included.",
            _fleet("gpuledger_report_cost_per_useful_gpu_hour"),
            MONEY,
            decimals=2,
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Total cost (${currency})",
            "Hardware (or rental) plus energy cost of the window.",
            _fleet("gpuledger_report_cost", 'kind="total"'),
            MONEY,
            decimals=0,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Idle cost (${currency})",
            "Hourly rate × the GPU-hours that did no useful work.",
            _fleet("gpuledger_report_cost", 'kind="idle"'),
            MONEY,
            decimals=0,
            thresholds=steps("orange"),
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Utilisation",
            "Busy / sampled GPU-hours of the fleet.",
            _fleet("gpuledger_report_utilization_ratio"),
            "percentunit",
            decimals=1,
            thresholds=UTILISATION,
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "SM activity",
            "SM-active / sampled GPU-hours of the fleet.",
            _fleet("gpuledger_report_sm_activity_ratio"),
            "percentunit",
            decimals=1,
            thresholds=UTILISATION,
            background=True,
        ),
        4,
        4,
    )
    d.add(
        stat(
            "Energy",
            "GPU energy of the window (PUE not applied).",
            _fleet("gpuledger_report_energy_kwh"),
            "kwatth",
            decimals=0,
        ),
        4,
        4,
    )


def _change(d: Dashboard) -> None:
    d.row("Against the previous window")
    d.add(
        bargauge(
            "Week-over-week change",
            "gpuledger_report_change_ratio: each headline figure against the previous "
            "window of the same length (+10 % = 0.1). Whether up is good depends on the figure: utilisation "
            "and useful hours up is good, costs, idle hours and waits up is not.",
            [Q(f"gpuledger_report_change_ratio{{{W}}}", "{{figure}}")],
            "percentunit",
            min_=-1,
            max_=1,
            decimals=1,
        ),
        12,
        9,
    )
    d.add(
        bargauge(
            "GPU-hours by kind",
            "Fleet GPU-hours: available, sampled (with data), busy, useful, allocated "
            "(held by a process) and allocated but idle.",
            [Q(f"gpuledger_report_gpu_hours{{{FLEET}}}", "{{kind}}")],
            "h",
            decimals=0,
        ),
        12,
        9,
    )
