"""Where the repository and its bundled capture are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CAPTURE = REPO / "exporter" / "captures" / "h200-phases.jsonl"
