"""The weekly dashboard's carbon section: the report's emissions (``gpuledger_report_co2e_kg``:
energy × PUE × grid intensity) for the window, per host, per user and per any other grouping the
daemon exports, and the rolling 7 days over time. No series without a configured intensity."""

from __future__ import annotations

from grafana.layout import Dashboard
from grafana.model import Q, steps
from grafana.panels import bargauge, stat, timeseries
from grafana.weekly_sections import FLEET, HOSTS, USERS, W

CO2E = "gpuledger_report_co2e_kg"
KG = "masskg"
# every grouping but the GPU ones shown beside it (fleet, host) and the users: accounts,
# namespaces, clusters, labels, ... and what no job was charged
OTHER_GROUPS = f'{W}, group!~"fleet|host|model|gpu|user|job"'


def add_carbon(d: Dashboard) -> None:
    d.row("Carbon: $window")
    d.add(
        stat(
            "Emissions (kg CO2e)",
            "GPU energy × PUE × the grid's carbon intensity ([cost] grid_intensity_g_per_kwh, carbon_windows "
            "or carbon_rules) over the window. No value: no intensity is configured.",
            [Q(f"{CO2E}{{{FLEET}}}")],
            KG,
            decimals=1,
        ),
        6,
        8,
    )
    d.add(
        bargauge(
            "Emissions by host (kg CO2e)",
            "kg CO2e per host over the window: its GPUs' energy × PUE × its grid's intensity.",
            [Q(f"{CO2E}{{{HOSTS}}}", "{{key}}")],
            KG,
            decimals=1,
            thresholds=steps("green"),
        ),
        6,
        8,
    )
    d.add(
        bargauge(
            "Top users by emissions (kg CO2e)",
            "The ten users whose jobs emitted most: each job has its GPUs' emissions in proportion to its "
            "share of their energy.",
            [Q(f"topk(10, {CO2E}{{{USERS}}})", "{{key}}")],
            KG,
            decimals=1,
            thresholds=steps("green"),
        ),
        6,
        8,
    )
    d.add(
        bargauge(
            "Emissions by grouping (kg CO2e)",
            "kg CO2e per group of the other groupings the report makes (accounts, namespaces, clusters, labels) "
            "and the unallocated row (what no job was charged): each grouping + unallocated = the fleet.",
            [Q(f"{CO2E}{{{OTHER_GROUPS}}}", "{{group}} {{key}}")],
            KG,
            decimals=1,
            thresholds=steps("green"),
        ),
        6,
        8,
    )
    d.add(
        timeseries(
            "Rolling 7-day emissions (kg CO2e)",
            "The hourly rolling_7d refresh over time, fleet and hosts: emissions of the 7 days up to each refresh.",
            [
                Q(f'{CO2E}{{window="rolling_7d", group="fleet"}}', "fleet"),
                Q(f'{CO2E}{{window="rolling_7d", group="host", key=~"$hostname"}}', "{{key}}"),
            ],
            KG,
            decimals=1,
        ),
        24,
        7,
    )
