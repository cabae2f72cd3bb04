"""Attacks on the real daemons, on loopback, bounded in time: one module per area.

Each module defines ``run() -> list[Row]``: it starts what it needs (exporter, analytics, a fake
Prometheus...) in temporary folders, tries its attacks, stops everything, and returns one row per
attack. ``bench/hostile.py`` runs them all and prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    area: str  # http | reports | config | inputs | history
    attack: str  # what was tried, in a few words
    expected: str  # what a safe daemon does
    observed: str  # what this one did (measured, not assumed)
    ok: bool  # observed is what was expected
