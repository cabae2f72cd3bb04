"""The weekly dashboard's budgets sections: each [budgets] rule's month-to-date spent against its
monthly limit and its linear month-end forecast (``gpuledger_budget_*``, refreshed with the rolling
figures). One row per grouping with a budget (user, account, a pod label...): the row repeats by the
``group`` variable, the groupings the daemon exports limits for, so a grouping added to [budgets]
gets its own table and bar gauge without a change here. No rows without budgets configured."""

from __future__ import annotations

from grafana.layout import Dashboard, query_var
from grafana.model import Json, Q, steps
from grafana.panels import Col, bargauge, table

SPENT, LIMIT, FORECAST = "gpuledger_budget_spent", "gpuledger_budget_limit", "gpuledger_budget_forecast"
SHARE = steps("green", (0.8, "orange"), (1.0, "red"))  # of the budget: under 80 %, under 100 %, over
GROUP = "group"  # the variable the row repeats by
IN_GROUP = '{group=~"$group"}'  # in a repeated row, $group is that row's grouping


def group_var() -> Json:
    return query_var(
        GROUP,
        "budget grouping",
        f"label_values({LIMIT}, group)",
        "The groupings with a [budgets] rule (every limit is exported, spent or not): the Budgets row "
        "repeats for each, one row per grouping.",
    )


def add_budgets(d: Dashboard) -> None:
    d.variables.append(group_var())
    d.row("Budgets this month: $group")
    d.panels[-1]["repeat"] = GROUP  # Grafana repeats the row and the panels under it per value
    d.add(
        table(
            "Budgets of $group: spent vs limit",
            "Each [budgets] rule of this grouping this calendar month (one such row per grouping with a "
            "budget): spent so far (total cost in its currency, or charged GPU-hours), the monthly limit, "
            "the linear month-end forecast (spent / the share of the month charged so far) and both as "
            "shares of the limit. GPULedgerBudgetExceeded and GPULedgerBudgetForecastExceeded alert on them.",
            [
                Col("spent", f"{SPENT}{IN_GROUP}", "none"),
                Col("limit", f"{LIMIT}{IN_GROUP}", "none"),
                Col("forecast", f"{FORECAST}{IN_GROUP}", "none"),
                Col("spent / limit", f"{SPENT}{IN_GROUP} / {LIMIT}", "percentunit", gauge=True, thresholds=SHARE),
                Col("forecast / limit", f"{FORECAST}{IN_GROUP} / {LIMIT}", "percentunit", thresholds=SHARE),
            ],
            ["group", "key", "unit"],
            sort="spent / limit",
        ),
        14,
        9,
    )
    d.add(
        bargauge(
            "Budget spent: $group",
            "Spent so far this month as a share of each budget of this grouping, per key (100 % = the limit).",
            [Q(f"{SPENT}{IN_GROUP} / {LIMIT}", "{{key}} ({{unit}})")],
            "percentunit",
            max_=1,
            decimals=0,
            thresholds=SHARE,
        ),
        10,
        9,
    )
