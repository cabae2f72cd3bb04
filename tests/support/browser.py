"""A headless Chromium for the HTML tests (the ``browser`` fixture is in tests/analytics/conftest.py):
whether selenium is there, and a page shown in it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver


def require_selenium() -> None:
    if importlib.util.find_spec("selenium") is None:
        reason = "selenium not installed (pip install selenium)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def show(browser: tuple[WebDriver, Path], name: str, source: str) -> WebDriver:
    """Load ``source`` in the browser (unless it shows that page already)."""
    driver, tmp = browser
    path = tmp / name
    if driver.current_url != path.as_uri():
        path.write_text(source, encoding="utf-8")
        driver.get(path.as_uri())
        driver.get_log("browser")  # type: ignore[no-untyped-call]  # each page's own log from here
    return driver
