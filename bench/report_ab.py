"""Two versions of the code, the same weekly report, in turn: whole ``gpuledger report`` processes
from the kept days of a ``bench/rollup_scale.py`` TSDB, against one Prometheus.

A ratio of two trees measured side by side (A, B, B, A, A, B, ...) on the same data, server and
minute holds where absolute figures do not: this machine's speed moves by a third from one day to
the next (docs/performance.md). ``--work`` is a folder that ``bench/rollup_scale.py --cache``
left (its ``data``, ``prometheus.yml`` and the seven days kept in ``reports-warmup/.days``); each
tree's reports go to a folder of its own holding a copy of those days, and each tree keeps the
week's days there first (none where the copied ones are in its layout; its own where its layout
differs: another key). Each tree runs with its own
folder first on ``PYTHONPATH`` and as the working directory; the first pair is a warm-up and is not
counted. The run fails where a report fails.

    python bench/report_ab.py --work /var/tmp/rs/10000-gpus-7d-7h-rollups-5m-1h-pairs-v4 \\
        --a . --b ../gpuledger-before [--pairs 3]

Prints each report, a table (median, min, max wall seconds, peak RSS, CPU) and the median of the
pairs' A/B ratios, and writes bench/results/report_ab.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import require_prometheus, start_prometheus, table, write_result

PORT_BASE = 19290  # bench/rollup_scale.py's: the kept days are keyed by the server's URL


def report(tree: Path, url: str, out: Path) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of one ``gpuledger report`` from ``tree``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["PYTHONPATH"] = str(tree)
    argv = [sys.executable, "-m", "gpuledger", "report", "--source", "prometheus", "--prometheus-url", url]
    argv += ["--week", "2026-W47", "--out", str(out)]
    t0 = os.times().elapsed
    p = subprocess.Popen(argv, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = os.times().elapsed - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if status:
        raise SystemExit(f"{tree}: gpuledger report failed:\n{err[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def keep(tree: Path, url: str, out: Path) -> None:
    """The week's days and the week before's kept in ``out`` by ``tree``'s code, as
    ``bench/rollup_scale.py`` keeps them: nothing where its files are there already, else its own
    (another layout, another key)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env["PYTHONPATH"] = str(tree)
    code = (
        "import sys, pathlib\n"
        "from analytics.config import FullSettings\n"
        "from analytics.pipeline import make_source\n"
        "from domain.week import iso_week\n"
        "a = {'source': 'prometheus', 'reports_dir': sys.argv[2]}\n"
        "s = FullSettings(analytics=a, prometheus={'url': sys.argv[1]})\n"
        "source = make_source(s)\n"
        "for week in ('2026-W46', '2026-W47'):\n"
        "    source.keep_days(iso_week(week))\n"
        "source.close()\n"
    )
    got = subprocess.run([sys.executable, "-c", code, url, str(out)], env=env, cwd=tree, capture_output=True, text=True)
    if got.returncode:
        raise SystemExit(f"{tree}: keeping the days failed:\n{got.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="a bench/rollup_scale.py cache folder of one size")
    ap.add_argument("--a", type=Path, required=True, help="tree A (e.g. this one)")
    ap.add_argument("--b", type=Path, required=True, help="tree B (e.g. a worktree of the commit before)")
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args()
    require_prometheus()
    kept = a.work / "reports-warmup" / ".days"
    if not kept.is_dir():
        raise SystemExit(f"{kept}: no kept days (run bench/rollup_scale.py --cache first)")
    gpus = int(a.work.name.split("-", 1)[0])
    trees = {"A": a.a.resolve(), "B": a.b.resolve()}
    runs: dict[str, list[tuple[float, float, float]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="gpuledger-ab-") as tmp:
        outs = {name: Path(tmp) / name for name in trees}
        for out in outs.values():
            shutil.copytree(kept, out / ".days")
        prom, url = start_prometheus(a.work, PORT_BASE + gpus % 1000)
        try:
            for name, tree in trees.items():  # each tree's own files, where its layout is not the copied one's
                keep(tree, url, outs[name])
            for i in range(a.pairs + 1):
                for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                    got = report(trees[name], url, outs[name])
                    print(f"  {name} {i}{' (warm-up)' if i == 0 else ''}: {got[0]:.2f} s, {got[1]:.0f} MiB", flush=True)
                    if i:
                        runs[name].append(got)
        finally:
            prom.terminate()
            prom.wait()
    ratios = [x[0] / y[0] for x, y in zip(runs["A"], runs["B"], strict=True)]
    rows: list[dict[str, Any]] = []
    for name, tree in trees.items():
        wall = [r[0] for r in runs[name]]
        rows.append(
            {
                "tree": name,
                "path": str(tree),
                "median_s": statistics.median(wall),
                "min_s": min(wall),
                "max_s": max(wall),
                "peak_rss_mib": [round(r[1]) for r in runs[name]],
                "cpu_s": [round(r[2], 2) for r in runs[name]],
            }
        )
    print(
        table(
            ["tree", "median s", "min s", "max s", "peak RSS MiB", "CPU s"],
            [[r["tree"], r["median_s"], r["min_s"], r["max_s"], r["peak_rss_mib"], r["cpu_s"]] for r in rows],
        )
    )
    print(f"A/B wall, median of the pairs: {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
    result = {"gpus": gpus, "pairs": a.pairs, "rows": rows, "ratios": ratios}
    print(f"wrote {write_result('report_ab', result)}")


if __name__ == "__main__":
    main()
