"""The weekly dashboard's budgets section: each [budgets] rule's month-to-date spent against its
monthly limit and its linear month-end forecast (``gpuledger_budget_*``, refreshed with the rolling
figures), per grouping and key. No rows without budgets configured."""

from __future__ import annotations

from grafana.layout import Dashboard
from grafana.model import Q, steps
from grafana.panels import Col, bargauge, table

SPENT, LIMIT, FORECAST = "gpuledger_budget_spent", "gpuledger_budget_limit", "gpuledger_budget_forecast"
SHARE = steps("green", (0.8, "orange"), (1.0, "red"))  # of the budget: under 80 %, under 100 %, over


def add_budgets(d: Dashboard) -> None:
    d.row("Budgets: this month")
    d.add(
        table(
            "Budgets: spent vs limit",
            "Each [budgets] rule this calendar month: spent so far (total cost in its currency, or charged "
            "GPU-hours), the monthly limit, the linear month-end forecast (spent / the share of the month "
            "charged so far) and both as shares of the limit. GPULedgerBudgetExceeded and "
            "GPULedgerBudgetForecastExceeded alert on them.",
            [
                Col("spent", SPENT, "none"),
                Col("limit", LIMIT, "none"),
                Col("forecast", FORECAST, "none"),
                Col("spent / limit", f"{SPENT} / {LIMIT}", "percentunit", gauge=True, thresholds=SHARE),
                Col("forecast / limit", f"{FORECAST} / {LIMIT}", "percentunit", thresholds=SHARE),
            ],
            ["group", "key", "unit"],
            sort="spent / limit",
        ),
        14,
        9,
    )
    d.add(
        bargauge(
            "Budget spent by grouping",
            "Spent so far this month as a share of each budget, per grouping and key (100 % = the limit).",
            [Q(f"{SPENT} / {LIMIT}", "{{group}} {{key}} ({{unit}})")],
            "percentunit",
            max_=1,
            decimals=0,
            thresholds=SHARE,
        ),
        10,
        9,
    )
