"""THE GPU fact table: the facts the lanes read by their rows, a module per group of facts.

A new fact is a row in its group's module (a new group: a module, listed here). The readers, the
lanes, the snapshot, the metric table (``exporter.sampling.fact_metrics``) and the history's
columns (``exporter.snapshot.ROLLUP_FIELDS``) all read ``FACTS``; see docs/facts.md.

The facts read by code of their own stay there, because the sampler integrates them into exact
counters or attributes them to jobs: utilisation and its samples buffer, GPM, processes and their
utilisation, power and the energy counter, clock-event reasons (``exporter.sampling.fastlane``,
``slowlane``), and the XID events (``gpu_state.watch_xids``).
"""

from __future__ import annotations

from exporter.facts import nvlink, pcie, throttle
from exporter.facts.model import Fact, check

FACTS: tuple[Fact, ...] = check((*pcie.FACTS, *nvlink.FACTS, *throttle.FACTS))
"""Every fact of the table, in the order of their metric rows."""

HISTORY: tuple[Fact, ...] = tuple(f for f in FACTS if f.history is not None)
"""The counters the history keeps per GPU and minute, in the order of their columns."""
