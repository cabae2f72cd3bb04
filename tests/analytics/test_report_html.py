"""The HTML pages: the report and both landing pages escape hostile text (one template engine, with
autoescape) and share one look. In a real headless Chromium: no script runs or exists, no console
error, the charts are drawn at a visible size, the INCOMPLETE banner shows, the landing pages show
their figures in the report's style; screenshots are kept as artefacts.

Needs the Debian packages chromium and chromium-driver and the pip package selenium; without them
the tests skip (and fail in CI, where they are installed)."""

from __future__ import annotations

import base64
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from analytics.report.html import landing_page, to_html
from exporter.readers.fake import FakeGpu, FakeReader
from exporter.scrape.cache import RenderCache
from exporter.scrape.site import ExporterSite
from tests.support.browser import show
from tests.support.paths import REPO
from tests.support.reports import HOSTILE_NOTE, HOSTILE_USER, sample_report
from tests.support.sampling import make_sampler, step

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture
def page(browser: tuple[WebDriver, Path]) -> tuple[WebDriver, str]:
    """Chromium showing the hostile sample report; (driver, HTML source)."""
    source = to_html(sample_report(hostile=True))
    return show(browser, "report.html", source), source


@pytest.mark.integration
def test_no_script_no_errors_hostile_text_shown(page: tuple[WebDriver, str]) -> None:
    driver, _ = page
    logs: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    severe = [e for e in logs if e.get("level") == "SEVERE"]
    assert severe == []
    assert driver.execute_script("return document.scripts.length") == 0
    assert driver.execute_script("return document.images.length") == 0  # the hostile <img> note is text
    assert HOSTILE_USER in driver.execute_script("return document.body.innerText")


@pytest.mark.integration
def test_charts_are_drawn_at_a_visible_size(page: tuple[WebDriver, str]) -> None:
    driver, _ = page
    charts: list[dict[str, Any]] = driver.execute_script(
        "return [...document.querySelectorAll('svg')].map(s => {const b = s.getBoundingClientRect();"
        " return {w: b.width, h: b.height, marks: s.querySelectorAll('rect, path, line, polyline').length,"
        " label: s.getAttribute('aria-label')};});"
    )
    assert len(charts) >= 5
    for chart in charts:
        assert chart["w"] > 50 and chart["h"] > 50 and chart["marks"] > 0, chart


@pytest.mark.integration
def test_incomplete_banner_visible(page: tuple[WebDriver, str]) -> None:
    from selenium.webdriver.common.by import By

    banner = page[0].find_element(By.ID, "incomplete")
    assert banner.is_displayed() and "INCOMPLETE" in banner.text


@pytest.mark.integration
def test_full_page_screenshot(page: tuple[WebDriver, str]) -> None:
    driver = page[0]
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    png = base64.b64decode(shot["data"])
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report.png").write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_no_network_no_script_in_source() -> None:
    source = to_html(sample_report(hostile=True))  # needs no browser
    assert "http://" not in source and "https://" not in source
    assert "<script" not in source.lower() and "&lt;script&gt;" in source


# ---------------------------------------------------------------- the landing pages

HOSTILE_HOSTNAME = """<script>alert('host')</script>&"x\""""
HOSTILE_MODEL = """NVIDIA <b onmouseover="alert(1)">H200</b> & 'co'"""
HOSTILE_SOURCE = """prometheus' onclick='alert(2)"""
HOSTILE_FILE = "gpuledger-x' onmouseover='alert(3).html"
SAMPLE_WEEK = "2026-W48"


class _Parts(HTMLParser):
    """The elements, attributes and text a browser would build from a page."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.hrefs: list[str] = []
        self.chunks: list[str] = []
        self.feed(page)
        self.close()
        self.text = "".join(self.chunks)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(name for name, _ in attrs)
        self.hrefs += [v or "" for name, v in attrs if name == "href"]

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


def exporter_landing() -> str:
    """The exporter's page for two GPUs named, and a host called, so as to break HTML."""
    r = FakeReader(
        [
            FakeGpu(
                uuid="GPU-hostile-0",
                model=HOSTILE_MODEL,
                util=0.5,
                power_watts=350.0,
                memory_used_bytes=40 * 2**30,
                temperature_celsius=61.0,
            ),
            FakeGpu(uuid="GPU-plain-1", util=1.0, power_watts=650.0),
        ]
    )
    s = make_sampler(r, hostname=HOSTILE_HOSTNAME)
    s.tick()
    step(s, r, 1.0, ticks=2)
    return ExporterSite(lambda: s.snapshot, RenderCache(lambda: s.snapshot)).landing()


def analytics_landing() -> str:
    files = [f"gpuledger-{SAMPLE_WEEK}.html", f"gpuledger-{SAMPLE_WEEK}.json", HOSTILE_FILE, "history.db"]
    reports = {"rolling_7d": sample_report(hostile=False), "week": sample_report(hostile=True)}
    return landing_page(reports, files, HOSTILE_SOURCE, "Europe/Berlin", "0.1.0")


@pytest.mark.integration
def test_exporter_landing_escapes_hostile_names_and_shows_the_latest_figures() -> None:
    page = exporter_landing()
    parts = _Parts(page)
    assert "script" not in parts.tags and "b" in parts.tags  # the page's own <b>, not the model's
    assert not parts.attrs & {"onmouseover", "onclick"}
    assert HOSTILE_HOSTNAME in parts.text and HOSTILE_MODEL in parts.text  # shown as text, whole
    assert "<script" not in page and "&lt;script&gt;" in page
    assert {"/metrics", "/healthz"} <= set(parts.hrefs)
    for figure in ("50 %", "350 W of 700", "40.0 GiB", "61 °C", "GPUs up", "2 / 2", "1,000 W", "Sampler", "ok"):
        assert figure in parts.text, figure
    assert "<style>" in page and "--accent: #2f6db5" in page  # the report's stylesheet, inline


@pytest.mark.integration
def test_analytics_landing_escapes_hostile_text_and_shows_each_window() -> None:
    page = analytics_landing()
    parts = _Parts(page)
    assert "script" not in parts.tags and "img" not in parts.tags
    assert not parts.attrs & {"onmouseover", "onclick", "onerror"}
    assert HOSTILE_SOURCE in parts.text
    assert f"/reports/{HOSTILE_FILE}" in parts.hrefs  # one attribute, quotes and all
    assert parts.text.index("Last full week") < parts.text.index("Rolling 7 days")
    r = sample_report(hostile=True)
    for figure in ("Per useful GPU-hour", "Idle cost", "Utilisation", "INCOMPLETE"):
        assert figure in parts.text, figure
    for value in (f"{r.fleet.total_cost:,.2f} USD", f"{100 * (r.fleet.utilization or 0):.1f} %"):
        assert value in parts.text, value
    assert {f"/reports/gpuledger-{SAMPLE_WEEK}.html", f"/reports/gpuledger-{SAMPLE_WEEK}.json"} <= set(parts.hrefs)
    assert not any("history.db" in h for h in parts.hrefs)
    assert "--accent: #2f6db5" in page


def test_report_escapes_notes_into_text() -> None:
    parts = _Parts(to_html(sample_report(hostile=True)))
    assert HOSTILE_NOTE in parts.text and HOSTILE_USER in parts.text
    assert "img" not in parts.tags and "script" not in parts.tags and "onerror" not in parts.attrs


@pytest.mark.integration
@pytest.mark.parametrize("name", ["exporter", "analytics"])
def test_landing_pages_render_in_the_report_style(browser: tuple[WebDriver, Path], name: str) -> None:
    source = exporter_landing() if name == "exporter" else analytics_landing()
    driver = show(browser, f"landing-{name}.html", source)
    logs: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    assert [e for e in logs if e.get("level") == "SEVERE"] == []
    assert driver.execute_script("return document.scripts.length") == 0
    assert driver.execute_script("return document.images.length") == 0
    text = driver.execute_script("return document.body.innerText")
    assert (HOSTILE_HOSTNAME if name == "exporter" else HOSTILE_SOURCE) in text
    cards: list[dict[str, float]] = driver.execute_script(
        "return [...document.querySelectorAll('.card')].map(c => {const b = c.getBoundingClientRect();"
        " return {w: b.width, h: b.height};});"
    )
    assert len(cards) >= 5 and all(c["w"] > 100 and c["h"] > 30 for c in cards), cards
    assert driver.execute_script("return getComputedStyle(document.body).maxWidth") == "1200px"
    png = base64.b64decode(driver.get_screenshot_as_base64())
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / f"landing-{name}.png").write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
