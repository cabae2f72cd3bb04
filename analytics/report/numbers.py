"""Numbers as the report prints them: money, hours, kWh, kg CO2e, percentages, durations,
bandwidths, local times; a dash for what was not measured (never 0)."""

from __future__ import annotations

import datetime as dt
import math
import zoneinfo

DASH = "—"  # not measured: never rendered as 0


def _missing(v: float | None) -> bool:
    return v is None or not math.isfinite(v)


def num(v: float | None, decimals: int = 2, unit: str = "") -> str:
    """``1,234.57``, with ``unit`` after a space; None (or NaN) is a dash."""
    if v is None or not math.isfinite(v):
        return DASH
    return f"{v:,.{decimals}f} {unit}" if unit else f"{v:,.{decimals}f}"


def money(v: float | None, currency: str = "") -> str:
    """``1,234.50 USD``; without a currency (it is in the column header) just ``1,234.50``."""
    return num(v, 2, currency)


def hours(v: float | None) -> str:
    return num(v, 1, "h")


def kwh(v: float | None) -> str:
    return num(v, 1, "kWh")


def co2e(kg: float | None) -> str:
    """``1,234.5 kg CO2e``; a dash where no grid intensity is set or energy is not measured."""
    return num(kg, 1, "kg CO2e")


def pct(ratio: float | None, signed: bool = False) -> str:
    """A 0..1 ratio as ``45.6 %``; ``signed`` for changes (``+12.0 %``)."""
    if ratio is None or _missing(ratio):
        return DASH
    return f"{ratio * 100:+.1f} %" if signed else f"{ratio * 100:.1f} %"


def duration(seconds: float | None) -> str:
    """Human duration: ``12 s``, ``4 m 12 s``, ``3 h 5 m``, ``2 d 4 h``."""
    if seconds is None or _missing(seconds):
        return DASH
    if seconds < 0:
        return "-" + duration(-seconds)
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    m, s = divmod(round(seconds), 60)
    if m < 60:
        return f"{m} m {s} s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} m"
    d, h = divmod(h, 24)
    return f"{d} d {h} h"


def bandwidth(bytes_per_s: float | None) -> str:
    return num(None if bytes_per_s is None else bytes_per_s / 1e9, 1, "GB/s")


def times(v: float | None) -> str:
    text = num(v, 2)
    return text if text == DASH else text + "×"


def local_time(t: float, timezone: str) -> str:
    try:
        tz: dt.tzinfo = zoneinfo.ZoneInfo(timezone)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        tz = dt.UTC
    return dt.datetime.fromtimestamp(t, tz).strftime("%Y-%m-%d %H:%M")
