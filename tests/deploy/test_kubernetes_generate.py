"""deploy/kubernetes/generate.py: the committed PrometheusRules and dashboard ConfigMaps are what it
writes now, `--check` notices stale output without writing, and broken sources (rule files, dashboard
JSON) are refused with a message naming the file, leaving the generated files untouched."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kube_objects import (
    DASHBOARDS_DIR,
    GENERATE,
    KUBE,
    RULES_DIR,
)


def run_generate(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, cwd=script.parent
    )


def test_generated_manifests_are_current() -> None:
    r = run_generate(GENERATE, "--check")
    assert r.returncode == 0, f"generate.py --check: exit {r.returncode}\n{r.stdout}{r.stderr}"


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    """generate.py and its sources, laid out as in the repository under tmp_path."""
    shutil.copytree(KUBE, tmp_path / "deploy" / "kubernetes")
    shutil.copytree(RULES_DIR, tmp_path / "deploy" / "prometheus" / "rules")
    shutil.copytree(DASHBOARDS_DIR, tmp_path / "grafana" / "dashboards")
    return tmp_path


def test_generate_check_detects_stale_output(tree_copy: Path) -> None:
    script = tree_copy / "deploy" / "kubernetes" / "generate.py"
    assert run_generate(script, "--check").returncode == 0
    out = tree_copy / "deploy" / "kubernetes" / "dashboards" / "dashboards.yaml"
    stale = out.read_text(encoding="utf-8").replace('"gpuledger"', '"gpuledger-old"', 1)
    out.write_text(stale, encoding="utf-8")
    r = run_generate(script, "--check")
    assert r.returncode == 1 and "dashboards.yaml is stale" in r.stderr, r.stderr
    assert out.read_text(encoding="utf-8") == stale, "--check wrote the file"
    r = run_generate(script)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == (KUBE / "dashboards" / "dashboards.yaml").read_bytes()


BAD_SOURCES = {
    # the parser's message gives the line, not the file: test_generate_names_the_broken_yaml_file
    "yaml-syntax": ("deploy/prometheus/rules/zz-bad.yml", "groups:\n  - name: x\n    rules: [\n", "line 4"),
    "no-groups": ("deploy/prometheus/rules/zz-bad.yml", "rules:\n  - record: x\n    expr: up\n", "no groups"),
    "empty-groups": ("deploy/prometheus/rules/zz-bad.yml", "groups: []\n", "no groups"),
    "extra-keys": (
        "deploy/prometheus/rules/zz-bad.yml",
        "groups:\n  - name: g\n    rules:\n      - record: x\n        expr: up\nalerting: {}\n",
        "keys other than groups",
    ),
    "dashboard-json": ("grafana/dashboards/zz-bad.json", '{"title": "x",\n', "not JSON"),
}


@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_generate_refuses_bad_sources(tree_copy: Path, case: str, check: bool) -> None:
    rel, text, message = BAD_SOURCES[case]
    (tree_copy / rel).write_text(text, encoding="utf-8")
    script = tree_copy / "deploy" / "kubernetes" / "generate.py"
    outputs = [
        tree_copy / "deploy" / "kubernetes" / "operator" / "prometheusrules.yaml",
        tree_copy / "deploy" / "kubernetes" / "dashboards" / "dashboards.yaml",
    ]
    before = [p.read_bytes() for p in outputs]
    r = run_generate(script, *(["--check"] if check else []))
    assert r.returncode not in (0, 1), f"exit {r.returncode} on a broken {rel}: {r.stdout}{r.stderr}"
    assert r.stderr.startswith("generate.py: ") and message in r.stderr, r.stderr
    if case != "yaml-syntax":
        assert "zz-bad" in r.stderr, f"the message does not name the broken file: {r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    assert [p.read_bytes() for p in outputs] == before, "a generated file was written from a broken source"


def test_generate_refuses_no_rules(tree_copy: Path) -> None:
    for f in (tree_copy / "deploy" / "prometheus" / "rules").iterdir():
        f.unlink()
    r = run_generate(tree_copy / "deploy" / "kubernetes" / "generate.py")
    assert r.returncode not in (0, 1) and "no rule files" in r.stderr, r.stderr


def test_generate_names_the_broken_yaml_file(tree_copy: Path) -> None:
    (tree_copy / "deploy" / "prometheus" / "rules" / "zz-bad.yml").write_text("groups: [\n", encoding="utf-8")
    r = run_generate(tree_copy / "deploy" / "kubernetes" / "generate.py", "--check")
    assert r.returncode == 2, r.stderr
    assert "zz-bad.yml" in r.stderr, r.stderr
