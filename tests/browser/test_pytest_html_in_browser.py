"""A failed golden in a pytest-html report, in headless Chromium: the failing row, expanded,
shows the explanation and the changed calls side by side, without `--fwdorder-report`.

Needs Debian's `chromium` and `chromium-driver`, selenium and pytest-html (the `test`
extra). Screenshots go to the test's tmp_path.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from separate_runs import run_pytest

pytestmark = pytest.mark.browser

INSERTED_GREEN = "rgba(218, 251, 225, 1)"
PROJECT_TEST = textwrap.dedent(
    """
    import os

    import torch
    from torch import nn


    def build():
        layers = [nn.Linear(4, 8), nn.ReLU()]
        if os.environ.get("WITH_DROPOUT"):
            layers.append(nn.Dropout(0.1))
        layers.append(nn.Linear(8, 2))
        return nn.Sequential(*layers)


    def test_classifier(forward_trace, snapshot):
        assert forward_trace(build(), torch.randn(2, 4)) == snapshot


    def test_head(forward_trace, snapshot):
        assert forward_trace(nn.Linear(4, 3), torch.randn(2, 4)) == snapshot
    """
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pytest-html report of a run whose classifier golden fails after a Dropout was
    inserted; every row starts collapsed."""
    pytest.importorskip("pytest_html")
    folder = tmp_path_factory.mktemp("project")
    (folder / "test_classifier.py").write_text(PROJECT_TEST, encoding="utf-8")
    run_pytest(folder, "--snapshot-update")
    run_pytest(
        folder,
        "--html=report.html",
        "--self-contained-html",
        "-o",
        "render_collapsed=all",
        flag="WITH_DROPOUT",
    )
    page = folder / "report.html"
    assert page.is_file(), "the run wrote no pytest-html report"
    return page


@pytest.fixture
def failing_row(browser: Any, report: Path) -> Any:
    """The failing test's row of the freshly loaded report, expanded by a click."""
    from selenium.webdriver.common.by import By

    browser.get(report.as_uri())
    browser.execute_script("sessionStorage.clear()")  # pytest-html keeps toggles there
    browser.get(report.as_uri())
    row = browser.find_element(By.CSS_SELECTOR, "tbody.results-table-row.failed")
    row.find_element(By.CSS_SELECTOR, ".collapsible > .col-result").click()
    return browser.find_element(By.CSS_SELECTOR, "tbody.results-table-row.failed")


def test_the_failing_row_starts_collapsed(browser: Any, report: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(report.as_uri())
    browser.execute_script("sessionStorage.clear()")
    browser.get(report.as_uri())
    row = browser.find_element(By.CSS_SELECTOR, "tbody.results-table-row.failed")

    assert not row.find_element(By.CSS_SELECTOR, ".fwdorder-explanation").is_displayed()


def test_the_expanded_failing_row_shows_the_explanation(failing_row: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    explanation = failing_row.find_element(By.CSS_SELECTOR, ".fwdorder-explanation")
    failing_row.parent.execute_script("arguments[0].scrollIntoView({block: 'start'});", failing_row)
    failing_row.parent.save_screenshot(str(tmp_path / "pytest-html.png"))
    print(f"screenshot: {tmp_path / 'pytest-html.png'}")

    assert explanation.is_displayed()
    assert explanation.text.splitlines()[:3] == [
        "4 calls before, 5 after: 1 call inserted, 1 call renamed",
        "1 call inserted: 2 (Dropout) after 1 (ReLU)",
        "1 call renamed: 2 (Linear) -> 3",
    ]


def test_the_expanded_failing_row_shows_the_inserted_call_in_green(failing_row: Any) -> None:
    from selenium.webdriver.common.by import By

    inserted = failing_row.find_elements(By.CSS_SELECTOR, '.fwdorder-rows tr[data-kind="inserted"]')

    assert [row.text.strip() for row in inserted] == ["2: Dropout (f32[2,8]) -> f32[2,8]"]
    cell = inserted[0].find_elements(By.CSS_SELECTOR, "td")[1]
    assert cell.value_of_css_property("background-color") == INSERTED_GREEN
