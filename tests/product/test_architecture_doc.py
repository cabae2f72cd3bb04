"""docs/architecture.md stays checked against the code: every ``file.py: Name`` it names is a file
of the project that defines that name (and ``Class.member`` a member of it)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO

DOC = REPO / "docs" / "architecture.md"
REF = re.compile(r"([\w/]+\.py): ([A-Za-z_][\w.]*)")
PACKAGES = ("exporter", "analytics", "domain", "daemonkit", "gpuledger", "grafana")


def _files(rel: str) -> list[Path]:
    """The project's files that ``rel`` names (a path from the root, or the end of one)."""
    out = []
    for pkg in PACKAGES:
        out += [p for p in (REPO / pkg).rglob("*.py") if p.relative_to(REPO).as_posix().endswith(rel)]
    return [
        p for p in out if p.relative_to(REPO).as_posix() == rel or ("/" + rel) in "/" + p.relative_to(REPO).as_posix()
    ]


def _defines(text: str, name: str) -> bool:
    n = re.escape(name)
    return bool(
        re.search(
            rf"^\s*(?:async\s+)?(?:def|class)\s+{n}\b|^\s*{n}\s*[:=]|^\s*self\.{n}\s*[:=]|import .*\b{n}\b", text, re.M
        )
    )


def problems(doc: str) -> list[str]:
    out = []
    for rel, dotted in sorted(set(REF.findall(doc))):
        files = _files(rel)
        if not files:
            out.append(f"{rel}: no such file")
            continue
        parts = dotted.rstrip(".").split(".")
        if not any(all(_defines(f.read_text(), p) for p in parts) for f in files):
            out.append(f"{rel}: {dotted} is not defined there")
    return out


def test_every_file_and_name_the_architecture_names_exists() -> None:
    refs = REF.findall(DOC.read_text())
    assert len(refs) > 100  # the page is read at all
    assert problems(DOC.read_text()) == []


def test_a_stale_reference_is_seen() -> None:
    assert problems("`exporter/app.py: Exporter` `analytics/sources/base.py: Source`") == []
    assert problems("`analytics/sources/prometheus_slurm.py: join`") == [
        "analytics/sources/prometheus_slurm.py: no such file"
    ]
    assert problems("`exporter/app.py: build_nothing()`") == ["exporter/app.py: build_nothing is not defined there"]
