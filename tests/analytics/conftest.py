"""The analytics tests' shared fixtures: the small synthetic fleet and its embedded history (once
per module that asks), and a headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from analytics.synthetic import Fleet
from tests.support.browser import require_selenium
from tests.support.fleet import history, small_fleet
from tests.support.tools import require_binary

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return small_fleet()


@pytest.fixture(scope="module")
def hist(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's ``fleet`` in an embedded history (a module may define its own ``fleet``)."""
    return history(fleet, tmp_path_factory.mktemp("hist"))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebDriver, Path]]:
    """A headless Chromium and a folder for the pages it is shown (file:// URLs)."""
    chromium, chromedriver = require_binary("chromium"), require_binary("chromedriver")
    require_selenium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    tmp = tmp_path_factory.mktemp("report-html")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--window-size=1280,900",
        f"--user-data-dir={tmp / 'profile'}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    try:
        yield driver, tmp
    finally:
        driver.quit()
