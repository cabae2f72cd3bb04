"""The GPU fact table: one row per fact (``model.Fact``), rows grouped by module (``pcie``,
``nvlink``, ``throttle``), assembled in ``table.FACTS``. How to add one: docs/facts.md."""

from exporter.facts.model import LANES, LINK, Fact, Family, Lane, check
from exporter.facts.table import FACTS, HISTORY

__all__ = ["FACTS", "HISTORY", "LANES", "LINK", "Fact", "Family", "Lane", "check"]
