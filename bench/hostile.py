"""Run every hostile-input attack (``bench/attacks/*.py``) against the real daemons on loopback and
print attack, expected, observed. Writes bench/results/hostile.json; exits 1 if any attack got
through.

    python bench/hostile.py [--only AREA,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import pkgutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import attacks
from bench.common import table, write_result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated module names (default: all)")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}
    rows, times = [], {}
    for mod in sorted(m.name for m in pkgutil.iter_modules(attacks.__path__)):
        if only and mod not in only:
            continue
        t0 = time.monotonic()
        rows += importlib.import_module(f"bench.attacks.{mod}").run()
        times[mod] = round(time.monotonic() - t0, 1)
    print(
        table(
            ["area", "attack", "expected", "observed", "ok"],
            [[*dataclasses.astuple(r)[:4], "yes" if r.ok else "NO"] for r in rows],
        )
    )
    print(f"\n{sum(r.ok for r in rows)} of {len(rows)} held; seconds per area: {times}")
    write_result("hostile", {"rows": [dataclasses.asdict(r) for r in rows], "seconds": times})
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
