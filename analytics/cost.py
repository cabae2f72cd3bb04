"""The cost model: what a GPU-hour costs, owned or rented, and what its energy costs.

Owned: (purchase − residual) / (depreciation years × 8,760 h) + (yearly operations + yearly
infrastructure share) / 8,760 h, per GPU and hour of the window, used or not. Cloud: the price per
GPU-hour (or per node-hour / GPUs per node) for every hour of the window. Energy: kWh × PUE × price,
the price by time of day where a tariff is set; zero where the cloud price includes it.

Every figure is in ``currency``. See docs/cost-model.md for a worked example.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HOURS_PER_YEAR = 8760.0
JOULES_PER_KWH = 3.6e6


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TariffWindow(_Model):
    start_hour: int = Field(ge=0, le=23, description="first hour (local time of the report) at this price")
    end_hour: int = Field(ge=1, le=24, description="hour at which this price stops")
    price_per_kwh: float = Field(ge=0, description="energy price in this window")
    weekdays: list[int] = Field(default_factory=lambda: list(range(7)), description="0 = Monday")

    @model_validator(mode="after")
    def _order(self) -> TariffWindow:
        if self.end_hour <= self.start_hour:
            raise ValueError("end_hour must be after start_hour (split windows that cross midnight)")
        if any(not 0 <= d <= 6 for d in self.weekdays):
            raise ValueError("weekdays are 0 (Monday) to 6 (Sunday)")
        return self


class PriceRule(_Model):
    match_model: str | None = Field(None, description="applies to GPU models containing this text")
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
    currency: str = Field("USD", min_length=1, max_length=8, description="code or symbol printed with money")
    energy_price_per_kwh: float = Field(0.15, ge=0, description="flat price where no tariff window applies")
    pue: float = Field(1.3, ge=1.0, le=3.0, description="facility energy / IT energy")
    tariff: list[TariffWindow] = Field(default_factory=list, description="time-of-day prices (below)")
    useful: Literal["busy", "sm_active"] = Field("busy", description="what counts as a useful GPU-hour")
    rules: list[PriceRule] = Field(default_factory=list, description="first match wins")
    default: PriceRule | None = Field(None, description="for GPUs no rule matches")
    min_useful_gpu_hours: float = Field(
        1.0, ge=0, description="below this many useful GPU-hours, cost per useful GPU-hour is n/a"
    )

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


def energy_cost(
    model: CostModel,
    rule: PriceRule | None,
    joules: float | None,
    by_hour: Sequence[float] | None,
    start: float,
    timezone: str,
) -> float:
    """Energy cost of a GPU over a window starting at ``start``: hour by hour when a tariff is set
    and hourly energy is known, else at the flat price. Zero where the cloud price includes it."""
    if joules is None or (rule is not None and rule.kind == "cloud" and rule.energy_included):
        return 0.0
    if model.tariff and by_hour is not None:
        return sum(
            j / JOULES_PER_KWH * model.pue * model.price_at(start + 3600 * h + 1, timezone)
            for h, j in enumerate(by_hour)
        )
    return joules / JOULES_PER_KWH * model.pue * model.energy_price_per_kwh


def gpu_cost(
    model: CostModel,
    rule: PriceRule | None,
    hours: float,
    joules: float | None,
    by_hour: Sequence[float] | None,
    start: float,
    timezone: str,
) -> Cost:
    hardware = rule.hourly() * hours if rule is not None else 0.0
    return Cost(hardware, energy_cost(model, rule, joules, by_hour, start, timezone))


def breakeven_utilisation(rule: PriceRule, cloud_price: float, energy_per_busy_hour: float) -> float | None:
    """The utilisation above which owning beats renting: owning costs the fixed hourly rate every
    hour plus energy for busy hours; renting costs the cloud price for busy hours only.
    None when renting is never dearer (the cloud price is at or under the energy cost)."""
    margin = cloud_price - energy_per_busy_hour
    if margin <= 0:
        return None
    return rule.hourly() / margin
