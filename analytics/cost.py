"""The cost model: what a GPU-hour costs, owned or rented, and what its energy costs.

Owned: (purchase − residual) / (depreciation years × 8,760 h) + (yearly operations + yearly
infrastructure share) / 8,760 h, per GPU and hour of the window, used or not. Cloud: the price per
GPU-hour (or per node-hour / GPUs per node) for every hour of the window. Energy: kWh × PUE × price,
the price by time of day where a tariff is set; zero where the cloud price includes it. Emissions:
kWh × PUE × the grid's carbon intensity (g CO2e per kWh; static per site or host glob, or by time
of day), whoever pays for the energy.

Every figure is in ``currency``. See docs/cost-model.md for a worked example.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

HOURS_PER_YEAR = 8760.0
JOULES_PER_KWH = 3.6e6


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TariffWindow(_Model):
    start_hour: int = Field(ge=0, le=23, description="first hour (local time of the report) at this price")
    end_hour: int = Field(ge=1, le=24, description="hour at which this price stops")
    price_per_kwh: float = Field(ge=0, description="energy price in this window")
    weekdays: list[int] = Field(
        default_factory=lambda: list(range(7)), description="the days it applies, 0 = Monday to 6 = Sunday"
    )

    @model_validator(mode="after")
    def _order(self) -> TariffWindow:
        if self.end_hour <= self.start_hour:
            raise ValueError("end_hour must be after start_hour (split windows that cross midnight)")
        if any(not 0 <= d <= 6 for d in self.weekdays):
            raise ValueError("weekdays are 0 (Monday) to 6 (Sunday)")
        return self


class PriceRule(_Model):
    match_model: str | None = Field(None, description="applies to GPU models containing this text (any case)")
    match_host: str | None = Field(None, description="applies to hosts matching this glob")
    kind: Literal["owned", "cloud"] = Field("owned", description="owned hardware or a cloud rental")
    purchase_price: float = Field(0.0, ge=0, description="owned: price per GPU, its share of the server included")
    residual_value: float = Field(0.0, ge=0, description="owned: what it sells for at the end")
    depreciation_years: float = Field(4.0, gt=0, le=50, description="owned: straight-line over this many years")
    yearly_operations: float = Field(0.0, ge=0, description="owned: maintenance, support, staff, per GPU and year")
    yearly_infrastructure: float = Field(0.0, ge=0, description="owned: power delivery, cooling, interconnect share")
    price_per_gpu_hour: float | None = Field(None, ge=0, description="cloud: per GPU-hour")
    price_per_node_hour: float | None = Field(None, ge=0, description="cloud: per node-hour")
    gpus_per_node: int = Field(8, ge=1, description="cloud: divides price_per_node_hour")
    energy_included: bool = Field(False, description="cloud: the price includes energy")
    cloud_reference_per_gpu_hour: float | None = Field(
        None, ge=0, description="owned: what renting this GPU would cost, for rent vs buy"
    )

    @model_validator(mode="after")
    def _consistent(self) -> PriceRule:
        if self.kind == "owned" and self.residual_value > self.purchase_price:
            raise ValueError("residual_value cannot exceed purchase_price")
        if self.kind == "cloud" and self.price_per_gpu_hour is None and self.price_per_node_hour is None:
            raise ValueError("a cloud rule needs price_per_gpu_hour or price_per_node_hour")
        return self

    def matches(self, model: str, host: str) -> bool:
        if self.match_model and self.match_model.lower() not in model.lower():
            return False
        return not (self.match_host and not fnmatch.fnmatch(host, self.match_host))

    def hourly(self) -> float:
        """Hardware or rental cost of one GPU for one hour."""
        if self.kind == "cloud":
            if self.price_per_gpu_hour is not None:
                return self.price_per_gpu_hour
            assert self.price_per_node_hour is not None
            return self.price_per_node_hour / self.gpus_per_node
        depreciation = (self.purchase_price - self.residual_value) / (self.depreciation_years * HOURS_PER_YEAR)
        return depreciation + (self.yearly_operations + self.yearly_infrastructure) / HOURS_PER_YEAR


class CarbonWindow(_Model):
    start_hour: int = Field(ge=0, le=23, description="first hour (local time of the report) at this intensity")
    end_hour: int = Field(ge=1, le=24, description="hour at which this intensity stops")
    grid_intensity_g_per_kwh: float = Field(ge=0, description="grid carbon intensity in this window, g CO2e per kWh")
    weekdays: list[int] = Field(
        default_factory=lambda: list(range(7)), description="the days it applies, 0 = Monday to 6 = Sunday"
    )

    @model_validator(mode="after")
    def _order(self) -> CarbonWindow:
        if self.end_hour <= self.start_hour:
            raise ValueError("end_hour must be after start_hour (split windows that cross midnight)")
        if any(not 0 <= d <= 6 for d in self.weekdays):
            raise ValueError("weekdays are 0 (Monday) to 6 (Sunday)")
        return self

    def covers(self, weekday: int, hour: int) -> bool:
        return weekday in self.weekdays and self.start_hour <= hour < self.end_hour


class CarbonRule(_Model):
    """A grid's carbon intensity: one static value, or an hourly table over a static fallback."""

    match_host: str = Field("*", description="applies to hosts matching this glob")
    grid_intensity_g_per_kwh: float | None = Field(
        None, ge=0, description="g CO2e per kWh (the hours no carbon window covers, where windows are set)"
    )
    carbon_windows: list[CarbonWindow] = Field(default_factory=list, description="time-of-day intensities")
    _hours: dict[tuple[float, int, str], tuple[float, ...]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _complete(self) -> CarbonRule:
        if self.grid_intensity_g_per_kwh is None and not self.carbon_windows:
            raise ValueError("a carbon rule needs grid_intensity_g_per_kwh or carbon_windows")
        _check_covered(self.grid_intensity_g_per_kwh, self.carbon_windows)
        return self

    def matches(self, host: str) -> bool:
        return fnmatch.fnmatch(host, self.match_host)

    def intensity_at(self, t: float, timezone: str) -> float:
        """g CO2e per kWh at epoch second ``t`` (windows in the report's time zone)."""
        if self.carbon_windows:
            local = dt.datetime.fromtimestamp(t, zoneinfo.ZoneInfo(timezone))
            for w in self.carbon_windows:
                if w.covers(local.weekday(), local.hour):
                    return w.grid_intensity_g_per_kwh
        assert self.grid_intensity_g_per_kwh is not None  # _check_covered: windows cover every hour
        return self.grid_intensity_g_per_kwh

    def hourly(self, start: float, hours: int, timezone: str) -> tuple[float, ...]:
        """The intensity of each of ``hours`` hours from ``start`` (kept for a few windows: every
        GPU of a report asks for the same hours)."""
        key = (start, hours, timezone)
        if key not in self._hours:
            if len(self._hours) >= 8:  # the daemon's hourly refreshes: a new window each hour
                self._hours.clear()
            self._hours[key] = tuple(self.intensity_at(start + 3600 * h + 1, timezone) for h in range(hours))
        return self._hours[key]

    def mean_intensity(self, start: float, hours: int, timezone: str) -> float:
        """The mean g CO2e per kWh over ``hours`` hours from ``start`` (hour by hour)."""
        if not self.carbon_windows or hours <= 0:
            return self.intensity_at(start, timezone)
        return sum(self.hourly(start, hours, timezone)) / hours


def _check_covered(fallback: float | None, windows: Sequence[CarbonWindow]) -> None:
    """Carbon windows without a static fallback must cover every hour of the week."""
    if fallback is not None or not windows:
        return
    gaps = [(d, h) for d in range(7) for h in range(24) if not any(w.covers(d, h) for w in windows)]
    if gaps:
        d, h = gaps[0]
        raise ValueError(
            f"carbon_windows leave {len(gaps)} hours of the week uncovered (first: weekday {d}, hour {h}): "
            "set grid_intensity_g_per_kwh for them"
        )


EXAMPLE_RULE = PriceRule(
    purchase_price=35_000,
    residual_value=5_000,
    depreciation_years=4,
    yearly_operations=1_500,
    yearly_infrastructure=1_000,
    cloud_reference_per_gpu_hour=3.5,
)
"""Placeholder prices used when no [cost] is configured; reports then say 'example prices'."""


class CostModel(_Model):
    currency: str = Field(
        "USD", min_length=1, max_length=8, description="code or symbol printed with money (printable characters)"
    )
    energy_price_per_kwh: float = Field(0.15, ge=0, description="flat price where no tariff window applies")
    pue: float = Field(1.3, ge=1.0, le=3.0, description="facility energy / IT energy")
    tariff: list[TariffWindow] = Field(default_factory=list, description="time-of-day prices (below)")
    useful: Literal["busy", "sm_active"] = Field(
        "busy",
        description="what counts as a useful GPU-hour: busy (busy time less stalled time) or sm_active (SM-active "
        "time, where measured; see useful_fallback)",
    )
    useful_fallback: Literal["per_gpu", "busy"] = Field(
        "per_gpu",
        description='with useful = "sm_active", a GPU (or job) without SM activity: per_gpu counts its busy '
        "time and rows that mix the two say so; busy counts busy time for every GPU of such a window",
    )
    rules: list[PriceRule] = Field(default_factory=list, description="first match wins")

    @field_validator("currency")
    @classmethod
    def _printable(cls, v: str) -> str:  # a label value of the analytics' gauges, and in every file
        if not v.isprintable():
            raise ValueError("must be printable: no control characters, tabs or newlines")
        return v

    default: PriceRule | None = Field(
        None,
        description="for GPUs no rule matches (with no rules and no default: example prices, and the reports say so)",
    )
    min_useful_gpu_hours: float = Field(
        1.0, ge=0, description="below this many useful GPU-hours, cost per useful GPU-hour is n/a"
    )
    grid_intensity_g_per_kwh: float | None = Field(
        None,
        ge=0,
        description="the site's grid carbon intensity, g CO2e per kWh (the hours no carbon window covers); "
        "unset, with no carbon_windows or carbon_rules: no emissions figures",
    )
    carbon_windows: list[CarbonWindow] = Field(
        default_factory=list, description="the site's time-of-day carbon intensities (below)"
    )
    carbon_rules: list[CarbonRule] = Field(
        default_factory=list, description="per-host carbon intensities, first match wins (below)"
    )

    _site_carbon: CarbonRule | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _carbon_covered(self) -> CostModel:
        _check_covered(self.grid_intensity_g_per_kwh, self.carbon_windows)
        return self

    @property
    def example_prices(self) -> bool:
        return not self.rules and self.default is None

    def rule_for(self, model: str, host: str) -> PriceRule | None:
        for r in self.rules:
            if r.matches(model, host):
                return r
        if self.default is not None:
            return self.default
        return EXAMPLE_RULE if not self.rules else None

    @property
    def hourly_energy(self) -> bool:
        """A source should read energy hour by hour: a tariff or an intensity varies by the hour."""
        return bool(self.tariff or self.carbon_windows or any(r.carbon_windows for r in self.carbon_rules))

    def carbon_for(self, host: str) -> CarbonRule | None:
        """The grid intensity of ``host``'s GPUs: the first matching carbon rule, else the site's
        (``grid_intensity_g_per_kwh``, ``carbon_windows``); None where no intensity is configured."""
        for r in self.carbon_rules:
            if r.matches(host):
                return r
        if self.grid_intensity_g_per_kwh is None and not self.carbon_windows:
            return None
        if self._site_carbon is None:
            self._site_carbon = CarbonRule(
                grid_intensity_g_per_kwh=self.grid_intensity_g_per_kwh, carbon_windows=self.carbon_windows
            )
        return self._site_carbon

    def price_at(self, t: float, timezone: str) -> float:
        """Energy price per kWh at epoch second ``t`` (tariff in the report's time zone)."""
        if not self.tariff:
            return self.energy_price_per_kwh
        local = dt.datetime.fromtimestamp(t, zoneinfo.ZoneInfo(timezone))
        for w in self.tariff:
            if local.weekday() in w.weekdays and w.start_hour <= local.hour < w.end_hour:
                return w.price_per_kwh
        return self.energy_price_per_kwh


@dataclass(frozen=True, slots=True)
class Cost:
    """One GPU's cost over a window."""

    hardware: float
    energy: float
    tariff_mean: bool = False  # a tariff priced the energy at its mean: the source had no hourly energy


def energy_cost(
    model: CostModel,
    rule: PriceRule | None,
    joules: float | None,
    by_hour: Sequence[float] | None,
    start: float,
    timezone: str,
    charged: tuple[float, int] | None = None,
) -> tuple[float, bool]:
    """Energy cost of a GPU over a window starting at ``start``, and whether a tariff had to be
    applied at its mean: hour by hour when a tariff is set and hourly energy is known; with a
    tariff but no hourly energy, at the tariff's mean price over the ``charged`` hours (their
    start and count; default the first hour), never at the flat price the tariff replaces;
    without a tariff, at the flat price. Zero where the cloud price includes it."""
    if joules is None or (rule is not None and rule.kind == "cloud" and rule.energy_included):
        return 0.0, False
    kwh = model.pue / JOULES_PER_KWH
    if not model.tariff:
        return joules * kwh * model.energy_price_per_kwh, False
    if by_hour is not None:
        return sum(j * kwh * model.price_at(start + 3600 * h + 1, timezone) for h, j in enumerate(by_hour)), False
    first, hours = charged or (start, 1)
    prices = [model.price_at(first + 3600 * h + 1, timezone) for h in range(max(1, hours))]
    return joules * kwh * sum(prices) / len(prices), True


@dataclass(frozen=True, slots=True)
class Emissions:
    """One GPU's emissions over a window; ``mean_applied``: an hourly intensity was applied at the
    window's mean because the source had no hourly energy."""

    co2e_kg: float | None
    mean_applied: bool = False


def gpu_co2e(
    model: CostModel,
    host: str,
    joules: float | None,
    by_hour: Sequence[float] | None,
    start: float,
    timezone: str,
    charged: tuple[float, int] | None = None,
) -> Emissions:
    """kg CO2e of a GPU over a window starting at ``start``: energy × PUE × the grid intensity,
    hour by hour from ``by_hour`` (hour h from ``start``) where the intensity varies by the hour,
    else at the mean intensity of the ``charged`` hours (their start and count; default the
    first hour). None where no intensity is configured for the host or the energy is not measured."""
    rule = model.carbon_for(host)
    if rule is None or joules is None:
        return Emissions(None)
    per_kg = model.pue / JOULES_PER_KWH / 1000.0  # joules -> kWh at the facility, g -> kg
    if not rule.carbon_windows:
        assert rule.grid_intensity_g_per_kwh is not None
        return Emissions(joules * per_kg * rule.grid_intensity_g_per_kwh)
    if by_hour is not None:
        hourly = rule.hourly(start, len(by_hour), timezone)
        return Emissions(sum(j * per_kg * g for j, g in zip(by_hour, hourly, strict=True)))
    first, hours = charged or (start, 1)
    return Emissions(joules * per_kg * rule.mean_intensity(first, hours, timezone), mean_applied=True)


def gpu_cost(
    model: CostModel,
    rule: PriceRule | None,
    hours: float,
    joules: float | None,
    by_hour: Sequence[float] | None,
    start: float,
    timezone: str,
    charged: tuple[float, int] | None = None,
) -> Cost:
    hardware = rule.hourly() * hours if rule is not None else 0.0
    energy, mean = energy_cost(model, rule, joules, by_hour, start, timezone, charged)
    return Cost(hardware, energy, mean)


def breakeven_utilisation(rule: PriceRule, cloud_price: float, energy_per_busy_hour: float) -> float | None:
    """The utilisation above which owning beats renting: owning costs the fixed hourly rate every
    hour plus energy for busy hours; renting costs the cloud price for busy hours only.
    None when renting is never dearer (the cloud price is at or under the energy cost)."""
    margin = cloud_price - energy_per_busy_hour
    if margin <= 0:
        return None
    return rule.hourly() / margin
