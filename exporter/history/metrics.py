"""The history's part of each snapshot (what the writer has done) and its metric rows."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.registry import Feature, part_row


@dataclass(frozen=True, slots=True)
class HistoryStats:
    rows_written: int = 0
    write_errors: int = 0


# fmt: off
FEATURE: Feature[HistoryStats] = Feature("history", HistoryStats, (
    part_row(HistoryStats, "gpuledger_history_rows_written_total", "counter", "",
             "Per-minute GPU rows committed to the history.", "history", lambda h: float(h.rows_written)),
    part_row(HistoryStats, "gpuledger_history_write_errors_total", "counter", "",
             "Failed history transactions (rows kept, retried).", "history", lambda h: float(h.write_errors)),
))
# fmt: on
