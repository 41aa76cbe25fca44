"""The headless Chromium every browser test drives: Debian's chromium and chromium-driver
(`.ci/run` installs both when it runs as root) through selenium (the `test` extra)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip(
            "needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    # The console log, for the tests that check a page loads without errors.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Explicit paths: selenium would otherwise try to download a driver.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()
