"""Raw ESC, NUL, DEL and C1 bytes from label values never reach the Markdown or HTML report, a
statement, or a served page (issue 24): they are written as visible ``\\xNN`` text. The JSON keeps
the exact names (it is data, escaped by JSON itself). And ``stale_after = .inf`` (a readiness that
could never go stale) and other infinite or NaN settings are refused naming the field."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.cli import full_settings
from analytics.report.html import to_html
from analytics.report.jsonio import from_json, to_json
from analytics.report.markdown import md_escape, to_markdown
from analytics.report.model import Report
from analytics.sources.embedded import EmbeddedSource
from analytics.statements.job import job_figures
from analytics.statements.render import job_text
from daemonkit.pages import visible
from daemonkit.settings import ConfigError
from domain.jobs import JobKey
from domain.week import iso_week
from exporter import history
from exporter.config import load as load_exporter
from exporter.readers import DeviceInfo
from exporter.snapshot import ROLLUP_FIELDS, JobMinuteRow, MinuteRow
from tests.support.reports import sample_report
from tests.support.settings import analytics_settings

RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
USER = "eve\x1b]0;owned\x07\x1b[2J"  # a terminal title and a screen clear
JOB = "slurm:66\x00\x7f\x85\x9b"
WEEK = iso_week("2026-W47")


def _report() -> Report:
    r = sample_report()
    rows = [
        dataclasses.replace(x, key=USER) if x.group == "user" and x.key == "bob" else
        dataclasses.replace(x, key=JOB) if x.group == "job" and x.key == "slurm:4301" else x
        for x in r.rows
    ]  # fmt: skip
    return dataclasses.replace(r, rows=rows, notes=[*r.notes, f"note from {USER}"])


def test_markdown_and_html_show_control_characters_as_text() -> None:
    r = _report()
    for text in (to_markdown(r), to_html(r)):
        assert not RAW.search(text)
        assert "\\x1b]0;owned\\x07\\x1b[2J" in text.replace("\\\\", "\\").replace("\\[", "[").replace("\\]", "]")
        shown = text.replace("\\\\", "\\")
        assert "slurm:66\\x00\\x7f" in shown and "\\x9b" in shown  # \x85 (NEL) is a line break: a space in a cell
    assert from_json(to_json(r)) == r  # the data keeps the bytes


def test_gpuledger_job_prints_a_hostile_user_as_text(tmp_path: Path) -> None:
    """The job's figures as the CLI prints them, for a job whose user name holds terminal escapes."""
    hist = tmp_path / "history.db"
    key = JobKey("77", USER)
    dev = DeviceInfo(0, "GPU-77", "NVIDIA H200", "0000:01:00.0")
    t0 = int(WEEK.start) + 3600
    rows: list[MinuteRow | JobMinuteRow] = []
    for k in range(5):
        base = dict.fromkeys(ROLLUP_FIELDS, None) | {
            "sampled_seconds": 60.0,
            "busy_seconds": 30.0,
            "energy_joules": 1e4,
        }
        rows += [MinuteRow(t0 + 60 * k, dev, base), JobMinuteRow(t0 + 60 * k, dev.uuid, key, 60.0, 30.0, 1e4, 60.0)]
    w = history.HistoryWriter(hist, hostname="node")
    w.submit(rows)
    w.stop()
    text = job_text(job_figures(EmbeddedSource(hist), "77", analytics_settings(hist), WEEK.end))
    assert not RAW.search(text) and "User: eve\\x1b]0;owned\\x07\\x1b[2J" in text


@given(st.text())
def test_visible_leaves_no_control_character_and_changes_nothing_else(text: str) -> None:
    out = visible(text)
    assert not RAW.search(out)
    if not RAW.search(text):
        assert out == text
    assert not RAW.search(md_escape(text))


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_infinite_or_nan_settings_are_refused_naming_the_field(value: str, tmp_path: Path) -> None:
    cfg = tmp_path / "exporter.yaml"
    cfg.write_text(f"exporter:\n  stale_after: {value}\n")
    with pytest.raises(ConfigError, match="stale_after"):
        load_exporter(cfg)
    analytics = tmp_path / "gpuledger.toml"
    analytics.write_text("[cost]\nenergy_price_per_kwh = inf\n")
    with pytest.raises(ConfigError, match="energy_price_per_kwh"):
        full_settings(str(analytics))
