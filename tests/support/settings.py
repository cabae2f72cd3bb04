"""The analytics' settings (analytics.config.FullSettings) as the tests build them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analytics.config import FullSettings

# [cost] of the tests that price an H200 fleet: bought for 30 000, written off over 5 years
H200_COST: dict[str, Any] = {
    "currency": "EUR",
    "energy_price_per_kwh": 0.2,
    "pue": 1.4,
    "rules": [{"match_model": "H200", "purchase_price": 30000, "depreciation_years": 5}],
}


def analytics_settings(tmp: Path | None = None, **sections: Any) -> FullSettings:
    """Settings that listen on a free port; with ``tmp``, the embedded source on tmp/history.db and
    the reports in tmp/reports. Each keyword is a section (analytics=, cost=, statements=, ...):
    ``analytics`` keys go over these, any other section is given as it is."""
    analytics: dict[str, Any] = {}
    if tmp is not None:
        analytics = {"source": "embedded", "history": tmp / "history.db", "reports_dir": tmp / "reports"}
    analytics = {**analytics, "listen": "127.0.0.1:0", **sections.pop("analytics", {})}
    return FullSettings(analytics=analytics, **sections)
