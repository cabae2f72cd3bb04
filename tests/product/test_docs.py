"""Generated docs stay in step with the code that defines them."""

from __future__ import annotations

import tomllib

from gpuledger import configdoc, metricsdoc
from tests.support.paths import REPO


def test_metrics_doc_is_generated_from_the_table() -> None:
    doc = (REPO / "docs" / "metrics.md").read_text()
    assert doc == metricsdoc.render(), "docs/metrics.md is stale: python -m gpuledger.metricsdoc > docs/metrics.md"


def test_configuration_doc_is_generated_from_the_settings() -> None:
    doc = (REPO / "docs" / "configuration.md").read_text()
    assert doc == configdoc.render(), (
        "docs/configuration.md is stale: python -m gpuledger.configdoc > docs/configuration.md"
    )


def test_the_cost_model_worked_example_is_what_the_code_computes() -> None:
    from analytics.cost import CostModel
    from analytics.report.build import build
    from domain.week import BenchWeek, GpuWeek, WeekData, iso_week

    doc = (REPO / "docs" / "cost-model.md").read_text()
    toml = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    (REPO / "test-artifacts").mkdir(exist_ok=True)
    path = REPO / "test-artifacts" / "worked-example.toml"
    path.write_text(toml)
    cost = tomllib.loads(path.read_text())["cost"]
    gpu = GpuWeek("GPU-x", "node-a", "NVIDIA H200", "0", 168 * 3600, 100.8 * 3600, 67.2 * 3600, None, None, 70 * 3.6e6)
    bench = BenchWeek(speedup={1: 1.0, 8: 6.55}, efficiency={8: 6.55 / 8}, throughput_1=150.0)
    week = WeekData(iso_week("2026-W48", "Europe/Berlin"), "embedded", (gpu,), bench=bench)
    busy = build(week, CostModel(**cost))
    sm = build(week, CostModel(**cost, useful="sm_active"))
    f, rent = busy.fleet, busy.rent_vs_buy[0]
    shown = {
        "hourly rate": f"{rent.owned_per_gpu_hour:.4f} EUR",
        "hardware cost": f"{f.hardware_cost:.2f} EUR",
        "energy cost": f"{f.energy_cost:.2f} EUR",
        "total cost": f"{f.total_cost:.2f} EUR",
        "cost per useful GPU-hour (busy)": f"{f.cost_per_useful_gpu_hour:.2f} EUR",
        "idle cost (busy)": f"{f.idle_cost:.2f} EUR",
        'cost per useful GPU-hour (`useful = "sm_active"`)': f"{sm.fleet.cost_per_useful_gpu_hour:.2f} EUR",
        'idle cost (`useful = "sm_active"`)': f"{sm.fleet.idle_cost:.2f} EUR",
        "energy per busy hour": f"{rent.energy_per_busy_hour:.4f} EUR",
        "break-even utilisation": f"{100 * (rent.breakeven_utilization or 0):.1f} %",
        "multi-GPU extra cost at 8 GPUs": f"{100 * busy.multi_gpu[0].extra_cost:.1f} %",
    }
    rows = {
        line.split("|")[1].strip(): line.split("|")[3].strip()
        for line in doc.splitlines()
        if line.startswith("| ") and line.count("|") == 4
    }
    for step, value in shown.items():
        assert rows.get(step) == value, (step, rows.get(step), value)


def test_values_in_the_prose_docs_are_generated_from_the_code() -> None:
    from gpuledger import docvalues

    seen: set[str] = set()
    for page in docvalues.pages(REPO):
        text = page.read_text()
        seen |= set(docvalues.marked(text))
        assert text == docvalues.render(text), f"{page.name} is stale: python -m gpuledger.docvalues"
    assert seen == set(docvalues.VALUES), f"values no page shows: {set(docvalues.VALUES) - seen}"


def test_the_history_values_are_the_schemas() -> None:
    from exporter.history import schema
    from gpuledger import docvalues

    assert docvalues.VALUES["history_user_version"]() == str(schema.SCHEMA_VERSION)
    tables = docvalues.VALUES["history_tables"]()
    assert "`gpu_minutes(uuid, minute, " in tables and "stalled_seconds" in tables and "sqlite_" not in tables
    for v in range(1, schema.SCHEMA_VERSION + 1):  # every version's file is committed, as the page says
        assert (REPO / "tests" / "data" / f"history-v{v}.sqlite").is_file()


def test_a_stale_value_is_rewritten_and_an_unknown_one_refused() -> None:
    import pytest

    from gpuledger import docvalues

    assert docvalues.render("v<!-- value: history_user_version -->1<!-- /value -->.") != (
        "v<!-- value: history_user_version -->1<!-- /value -->."
    )
    with pytest.raises(KeyError, match="unknown doc value"):
        docvalues.render("<!-- value: nope -->x<!-- /value -->")
