"""The cost rows as FOCUS 1.0 (FinOps Open Cost and Usage Specification) CSV, one row per group x
local day, for finance tools. Each grouping is its own file (``<grouping>.csv``), so a tool that
sums ``BilledCost`` over a file gets the fleet's cost once: the GPU groupings (host, model, gpu,
cluster) sum to the fleet, each job grouping (user, job, namespace, account, partition, qos,
label:<name>) with its ``unallocated`` rows does (:mod:`analytics.report.groupings`: which is which,
and which groupings FOCUS writes).

Every day is its own report (:func:`day_reports`: the source read for that day, then
:func:`analytics.report.build.build`), since jobs have no per-day split in a week's data. Costs are
the report's: BilledCost = EffectiveCost = ListCost = ContractedCost = total cost (owned GPUs have
no discounts or commitments). The FinOps Foundation's validator (``focus-validator`` 1.0.0, rule
set "1.0") checks the columns Provider, Publisher, InvoiceIssuer and ResourceID; the spec's final
names ProviderName, PublisherName and InvoiceIssuerName are written too, and ChargeType (FOCUS
0.5's name of ChargeCategory), which its SkuPriceId rule still reads. Text cells are neutralised
as in :mod:`analytics.report.csvio` (no formula reaches a spreadsheet).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Callable, Sequence

from analytics.cost import CostModel
from analytics.report.build import build
from analytics.report.csvio import neutralise
from analytics.report.groupings import GROUP_BY, adds_up_alone, file_stem, in_focus
from analytics.report.model import UNALLOCATED, CostRow, Report
from domain.week import WeekData, Window, days

UNIT = "GPU-Hours"
SERVICE = "GPU compute"
SKU = "gpuledger-gpu-hour"  # one unit sold: a GPU-hour (its price per model is in the report's prices)
COLUMNS = (
    "BillingAccountId",
    "BillingAccountName",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BillingCurrency",
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "ListUnitPrice",
    "ContractedUnitPrice",
    "ChargeCategory",
    "ChargeType",
    "ChargeClass",
    "ChargeFrequency",
    "ChargeDescription",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "ConsumedQuantity",
    "ConsumedUnit",
    "ServiceName",
    "ServiceCategory",
    "Provider",
    "ProviderName",
    "Publisher",
    "PublisherName",
    "InvoiceIssuer",
    "InvoiceIssuerName",
    "ResourceID",
    "ResourceName",
    "ResourceType",
    "RegionId",
    "RegionName",
    "AvailabilityZone",
    "SkuId",
    "SkuPriceId",
    "SubAccountId",
    "SubAccountName",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "Tags",
    "x_HardwareCost",
    "x_EnergyCost",
    "x_IdleCost",
    "x_EnergyKWh",
)


def day_reports(
    week: Callable[[Window], WeekData],
    window: Window,
    cost: CostModel,
    *,
    group_by: Sequence[str] = GROUP_BY,
    min_coverage: float = 0.99,
    now: float | None = None,
) -> list[Report]:
    """One report per local day of ``window`` (``week`` reads a day's data); days without GPU
    data (not yet happened, before the history) are left out: only what happened."""
    out = []
    for d in days(window):
        data = week(Window(d.start, d.end, d.date, window.timezone))
        if data.gpus:
            r = build(data, cost, min_coverage=min_coverage, now=now, group_by=group_by)
            if r.fleet.gpus:
                out.append(r)
    return out


def file_name(grouping: str) -> str:
    """``label:label_team`` -> ``label-label_team.csv``: the name analytics.report.served allows."""
    return file_stem(grouping) + ".csv"


def _utc(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _row(r: Report, row: CostRow, grouping: str, window: Window, provider: str) -> dict[str, object]:
    gpu = row.group == "gpu"
    hours = row.available_gpu_hours
    what = "what no job was charged" if row.group == UNALLOCATED else f"{grouping} {row.key}"
    return {
        "BillingAccountId": provider,
        "BillingAccountName": provider,
        "BillingPeriodStart": _utc(window.start),
        "BillingPeriodEnd": _utc(window.end),
        "ChargePeriodStart": _utc(r.charged_start if r.charged_start is not None else r.start),
        "ChargePeriodEnd": _utc(r.charged_end if r.charged_end is not None else r.end),
        "BillingCurrency": r.currency,
        "BilledCost": row.total_cost,
        "EffectiveCost": row.total_cost,
        "ListCost": row.total_cost,
        "ContractedCost": row.total_cost,
        "ChargeCategory": "Usage",
        "ChargeType": "Usage",  # FOCUS 0.5's name, still read by the validator's SkuPriceId rule
        "ChargeFrequency": "Usage-Based",
        "ChargeDescription": f"{SERVICE}, {what}, {r.week}",
        "PricingCategory": "Standard",
        "PricingQuantity": hours,
        "PricingUnit": UNIT,
        "ConsumedQuantity": hours,
        "ConsumedUnit": UNIT,
        "ServiceName": SERVICE,
        "ServiceCategory": "Compute",
        **{c: provider for c in ("Provider", "ProviderName", "Publisher", "PublisherName")},
        **{c: provider for c in ("InvoiceIssuer", "InvoiceIssuerName")},
        "ResourceID": row.key.rsplit(" ", 1)[-1] if gpu else None,
        "ResourceName": row.key if gpu else None,
        "ResourceType": "GPU" if gpu else None,
        "SkuId": SKU,
        "SkuPriceId": SKU,
        "Tags": json.dumps({"gpuledger/group": row.group, "gpuledger/key": row.key}, ensure_ascii=False),
        "x_HardwareCost": row.hardware_cost,
        "x_EnergyCost": row.energy_cost,
        "x_IdleCost": row.idle_cost,
        "x_EnergyKWh": row.energy_kwh,
    }


def _cell(v: object) -> object:
    if v is None:
        return ""
    return neutralise(v) if isinstance(v, str) else v


def to_focus(
    reports: Sequence[Report], window: Window, provider: str = "gpuledger", *, billing: Window | None = None
) -> dict[str, str]:
    """File name -> FOCUS CSV text, one file per grouping of the day ``reports`` (of ``window``);
    job groupings carry each day's unallocated row, so every file sums to the fleet. The billing
    period is ``billing`` (the daemon's daily files: the calendar month), else ``window``."""
    groupings = [g for g in dict.fromkeys(row.group for r in reports for row in r.rows) if in_focus(g)]
    out: dict[str, str] = {}
    for grouping in groupings:
        buf = io.StringIO()
        w = csv.writer(buf)  # RFC 4180: quotes cells with commas, quotes and newlines
        w.writerow(COLUMNS)
        for r in reports:
            rows = r.group(grouping) + ([] if adds_up_alone(grouping) else r.group(UNALLOCATED))
            for row in rows:
                cells = _row(r, row, grouping, billing or window, provider)
                w.writerow([_cell(cells.get(c)) for c in COLUMNS])
        out[file_name(grouping)] = buf.getvalue()
    return out
