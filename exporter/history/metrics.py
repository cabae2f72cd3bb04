"""The history's part of each snapshot (what the writer has done) and its metric rows."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.registry import Feature, part_row


@dataclass(frozen=True, slots=True)
class HistoryStats:
    rows_written: int = 0
    write_errors: int = 0
    up: bool = True  # open, passed its last quick_check, and its last write committed
    damaged_files: int = 0  # <name>.damaged-* files beside the history, left for a person to look at


# fmt: off
FEATURE: Feature[HistoryStats] = Feature("history", HistoryStats, (
    part_row(HistoryStats, "gpuledger_history_rows_written_total", "counter", "",
             "Per-minute GPU rows committed to the history.", "history", lambda h: float(h.rows_written)),
    part_row(HistoryStats, "gpuledger_history_write_errors_total", "counter", "",
             "Failed history transactions (rows kept, retried).", "history", lambda h: float(h.write_errors)),
    part_row(HistoryStats, "gpuledger_history_up", "gauge", "",
             "1 while the history file is open, passed its last quick_check and its last write committed; "
             "0 while it cannot be used (not SQLite, newer schema, not writable) or writes fail (disk full).",
             "history", lambda h: float(h.up)),
    part_row(HistoryStats, "gpuledger_history_damaged_files", "gauge", "",
             "Damaged history files moved aside (history.db.damaged-*) still beside the history; "
             "a new history was started in place of each.", "history", lambda h: float(h.damaged_files)),
))
# fmt: on
