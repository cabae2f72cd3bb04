"""What Grafana does to a query before it reaches Prometheus, for tests/deploy/test_dashboards.py: the
built-in interval and range variables of a panel viewed over the last day, and the substitution of
template variables (multi-value ones as a regex alternation)."""

from __future__ import annotations

import re
from typing import Any

Json = dict[str, Any]

SCRAPE_S = 15.0  # the datasource's timeInterval: what Grafana assumes for $__rate_interval
RANGE_S = 86400.0  # the dashboards are viewed over the last 24 hours
PX_PER_COLUMN = 75  # maxDataPoints: Grafana uses the panel's width in pixels
# Grafana's kbn.roundInterval, in seconds: (below, rounded to)
ROUND = (
    (1.5, 1),
    (3.5, 2),
    (7.5, 5),
    (12.5, 10),
    (17.5, 15),
    (25, 20),
    (45, 30),
    (90, 60),
    (210, 120),
    (450, 300),
    (900, 600),
    (1200, 900),
    (2700, 1200),
    (5400, 1800),
    (9000, 3600),
    (16200, 7200),
    (32400, 10800),
    (86400, 21600),
)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def round_interval(seconds: float) -> float:
    return next((float(to) for below, to in ROUND if seconds < below), 86400.0)


def seconds(text: str) -> float:
    return float(text[:-1]) * UNITS[text[-1]]


def builtins(panel: Json) -> dict[str, str]:
    """Grafana's built-in variables for a panel viewed over the last RANGE_S seconds."""
    minimum = seconds(panel["interval"]) if panel.get("interval") else SCRAPE_S
    interval = max(round_interval(RANGE_S / (panel["gridPos"]["w"] * PX_PER_COLUMN)), minimum)
    rate = max(interval + SCRAPE_S, 4 * SCRAPE_S)
    return {
        "__interval": f"{interval:.0f}s",
        "__interval_ms": f"{interval * 1000:.0f}",
        "__rate_interval": f"{rate:.0f}s",
        "__range": f"{RANGE_S:.0f}s",
        "__range_s": f"{RANGE_S:.0f}",
        "__range_ms": f"{RANGE_S * 1000:.0f}",
    }


VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)|\[\[([A-Za-z_]\w*)\]\]")  # not $1


def substitute(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise AssertionError(f"unknown variable ${name} in {text}")
        return values[name]

    return VAR.sub(one, text)


def regex_value(chosen: list[str], all_value: str | None, everything: bool) -> str:
    """How Grafana's Prometheus datasource writes a multi-value variable into a query."""
    if everything and all_value is not None:
        return all_value
    escaped = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v) for v in chosen]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
