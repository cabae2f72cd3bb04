"""Write grafana/dashboards/*.json and docs/dashboards.md from the dashboard modules:
``python grafana/generate.py``.

Both are checked in; tests/deploy/test_dashboards.py fails when it differs from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grafana import bench, docs, fleet, gpu, queue, weekly
from grafana.layout import Dashboard

OUT = Path(__file__).resolve().parent / "dashboards"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "dashboards.md"
MODULES = (fleet, gpu, weekly, bench, queue)


def dashboards() -> list[Dashboard]:
    return [m.build() for m in MODULES]


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {f"{d.uid}.json": json.dumps(d.to_json(), indent=2, ensure_ascii=False) + "\n" for d in dashboards()}


def main() -> int:
    OUT.mkdir(exist_ok=True)
    files = render()
    for stale in set(p.name for p in OUT.glob("*.json")) - files.keys():
        (OUT / stale).unlink()
    for name, text in files.items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    DOCS.write_text(docs.render(dashboards()))
    print(f"wrote {DOCS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
