"""The HTML report in headless Chromium: it loads cleanly, its trees fold, its search finds
calls, and an SE block inserted into ResNet-50 shows as exactly its four inserted calls.

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them when it runs as
root) and selenium (the `test` extra). Screenshots go to the test's tmp_path.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from refactors import SQUEEZE_EXCITE_SOURCE
from separate_runs import run_pytest

pytestmark = pytest.mark.browser

SE_PATHS = ["layer2.se", "layer2.se.pool", "layer2.se.fc", "layer2.se.gate"]
INSERTED_GREEN = "rgba(218, 251, 225, 1)"
PROJECT_TEST = (
    textwrap.dedent(
        """
        import os

        import torchvision
        from torch import nn

        from pytest_fwdorder import TensorSpec

        """
    )
    + SQUEEZE_EXCITE_SOURCE
    + textwrap.dedent(
        """

        def build_model():
            model = torchvision.models.resnet50(weights=None)
            if os.environ.get("INSERT_SE"):
                model.layer2.add_module("se", SqueezeExcite(512))
            return model.eval()


        def test_resnet50(forward_trace, snapshot):
            trace = forward_trace(build_model, TensorSpec((1, 3, 224, 224)), device="meta")
            assert trace == snapshot
        """
    )
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of a run whose ResNet-50 golden fails after an SE block was inserted."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "test_resnet.py").write_text(PROJECT_TEST, encoding="utf-8")
    run_pytest(folder, "--snapshot-update")
    run_pytest(folder, "--fwdorder-report=report.html", flag="INSERT_SE")
    page = folder / "report.html"
    assert page.is_file(), "the run wrote no report"
    return page


@pytest.fixture
def page(browser: Any, report: Path) -> Any:
    """The report, freshly loaded, with the browser's log emptied first."""
    browser.get_log("browser")
    browser.get(report.as_uri())
    return browser


def node(page: Any, path: str) -> Any:
    from selenium.webdriver.common.by import By

    return page.find_element(By.CSS_SELECTOR, f'.fo-tree li[data-path="{path}"]')


def test_the_page_loads_without_console_errors(page: Any) -> None:
    problems = [
        entry for entry in page.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")
    ]

    assert page.title == "pytest-fwdorder report"
    assert problems == []


def test_a_subtree_expands_and_collapses(page: Any) -> None:
    from selenium.webdriver.common.by import By

    summary = node(page, "layer1.0").find_element(By.CSS_SELECTOR, ":scope > details > summary")
    inner = node(page, "layer1.0.conv1")
    assert not inner.is_displayed()

    summary.click()
    assert inner.is_displayed()

    summary.click()
    assert not inner.is_displayed()


def test_search_finds_a_module_by_path(page: Any) -> None:
    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "fo-search").send_keys("layer3.5.conv2")

    hits = page.find_elements(By.CSS_SELECTOR, "li.fo-hit")
    assert [hit.get_attribute("data-path") for hit in hits] == ["layer3.5.conv2"]
    assert hits[0].is_displayed()
    assert page.find_element(By.ID, "fo-search-status").text == "1 call matches in 1 trace"


def test_search_finds_modules_by_type(page: Any) -> None:
    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "fo-search").send_keys("squeezeexcite")

    hits = page.find_elements(By.CSS_SELECTOR, "li.fo-hit")
    assert [hit.get_attribute("data-path") for hit in hits] == ["layer2.se"]
    assert hits[0].is_displayed()


def test_the_se_block_shows_exactly_its_four_inserted_calls(page: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    highlighted = page.find_elements(
        By.CSS_SELECTOR,
        ".fo-diff tr.fo-inserted, .fo-diff tr.fo-removed, "
        ".fo-diff tr.fo-changed, .fo-diff tr.fo-moved",
    )
    in_tree = page.find_elements(By.CSS_SELECTOR, ".fo-tree li.fo-inserted, .fo-tree li.fo-changed")
    summary = page.find_element(By.CSS_SELECTOR, ".fo-entry .fo-summary")
    entry = page.find_element(By.CSS_SELECTOR, ".fo-entry")
    page.execute_script(  # the entry's title just below the sticky search bar
        "arguments[0].scrollIntoView({block: 'start'}); window.scrollBy(0, -56);", entry
    )
    page.save_screenshot(str(tmp_path / "report.png"))
    print(f"screenshot: {tmp_path / 'report.png'}")

    assert [row.get_attribute("data-new-path") for row in highlighted] == SE_PATHS
    assert [row.get_attribute("class") for row in highlighted] == ["fo-inserted"] * 4
    assert all(row.is_displayed() for row in highlighted)
    new_cell = highlighted[0].find_element(By.CSS_SELECTOR, "td.fo-new")
    assert new_cell.value_of_css_property("background-color") == INSERTED_GREEN
    assert [item.get_attribute("data-path") for item in in_tree] == SE_PATHS
    assert summary.text.splitlines()[:2] == [
        "183 calls before, 187 after: 4 calls inserted",
        "4 calls inserted: layer2.se (SqueezeExcite, with 3 nested calls) after layer2.3 (Bottleneck)",
    ]
