"""Run the real exporter daemon on a FakeReader with H200 per-call latencies (for footprint.py).

python bench/fake_exporter.py PORT [GPUS]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemonkit.logs import setup_logging
from exporter import app
from exporter.config import load
from exporter.readers.fake import H200_LATENCIES, FakeReader


def main() -> int:
    port, gpus = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 8
    reader = FakeReader(gpus, latencies=H200_LATENCIES)
    for i, g in enumerate(reader.gpus):
        g.util = 0.1 * i
    settings = load(None, {"web": {"listen": f"127.0.0.1:{port}"}, "history": {"enabled": False}})
    setup_logging("warning")
    return app.run(settings, reader=reader)


if __name__ == "__main__":
    sys.exit(main())
