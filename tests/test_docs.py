"""Generated docs stay in step with the code that defines them."""

from __future__ import annotations

from conftest import REPO

from exporter import configdoc, metricsdoc


def test_metrics_doc_is_generated_from_the_table() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text()
    assert doc == metricsdoc.render(), "docs/metrics.md is stale: python -m exporter.metricsdoc > docs/metrics.md"


def test_configuration_doc_is_generated_from_the_settings() -> None:
    doc = (REPO / "docs" / "configuration.md").read_text()
    assert doc == configdoc.render(), (
        "docs/configuration.md is stale: python -m exporter.configdoc > docs/configuration.md"
    )
