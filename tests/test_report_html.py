"""The HTML report in a real headless Chromium: no script runs or exists, no console error, the
charts are drawn at a visible size, the INCOMPLETE banner shows; a screenshot is kept as an artefact.

Needs the Debian packages chromium and chromium-driver and the pip package selenium; without them
the tests skip (and fail in CI, where they are installed)."""

from __future__ import annotations

import base64
import importlib.util
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from conftest import REPO, require_binary
from report_fixtures import HOSTILE_USER, sample_report

from analytics.report.html import to_html

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

ARTIFACTS = REPO / "test-artifacts"


def require_selenium() -> None:
    if importlib.util.find_spec("selenium") is None:
        reason = "selenium not installed (pip install selenium)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebDriver, str]]:
    """Chromium showing the hostile sample report from a file:// URL; yields (driver, HTML source)."""
    chromium, chromedriver = require_binary("chromium"), require_binary("chromedriver")
    require_selenium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    tmp = tmp_path_factory.mktemp("report-html")
    source = to_html(sample_report(hostile=True))
    (tmp / "report.html").write_text(source, encoding="utf-8")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-default-apps", "--window-size=1280,900", f"--user-data-dir={tmp / 'profile'}"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    try:
        driver.get((tmp / "report.html").as_uri())
        yield driver, source
    finally:
        driver.quit()


def test_no_script_no_errors_hostile_text_shown(page: tuple[WebDriver, str]) -> None:
    driver, _ = page
    logs: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    severe = [e for e in logs if e.get("level") == "SEVERE"]
    assert severe == []
    assert driver.execute_script("return document.scripts.length") == 0
    assert driver.execute_script("return document.images.length") == 0  # the hostile <img> note is text
    assert HOSTILE_USER in driver.execute_script("return document.body.innerText")


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


def test_incomplete_banner_visible(page: tuple[WebDriver, str]) -> None:
    from selenium.webdriver.common.by import By

    banner = page[0].find_element(By.ID, "incomplete")
    assert banner.is_displayed() and "INCOMPLETE" in banner.text


def test_full_page_screenshot(page: tuple[WebDriver, str]) -> None:
    driver = page[0]
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                             "clip": clip})  # fmt: skip
    png = base64.b64decode(shot["data"])
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "report.png").write_bytes(png)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_no_network_no_script_in_source() -> None:
    source = to_html(sample_report(hostile=True))  # needs no browser
    assert "http://" not in source and "https://" not in source
    assert "<script" not in source.lower() and "&lt;script&gt;" in source
