"""The review's Markdown as a pull-request comment shows it: rendered to HTML with the
`markdown` package and opened in headless Chromium, each golden's `<details>` opens and
closes, and its changed calls are a diff code block.

Needs Debian's `chromium` and `chromium-driver`, selenium and markdown (the `test` extra).
The screenshot goes to the test's tmp_path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from git_goldens import INSERTED, SETTINGS, make_repository

from pytest_fwdorder.report.git_review import collect_review
from pytest_fwdorder.report.review_format import format_markdown

pytestmark = pytest.mark.browser


def markdown_page(text: str) -> str:
    """The Markdown as HTML, as GitHub renders a comment: Markdown inside `<details>` too."""
    markdown = pytest.importorskip("markdown", reason="needs the markdown package (test extra)")
    # GitHub renders Markdown inside an HTML block after a blank line; Python-Markdown does
    # so only inside blocks marked markdown="1" (its md_in_html extension).
    marked = text.replace("<details>", '<details markdown="1">')
    body = markdown.markdown(marked, extensions=["fenced_code", "md_in_html"])
    return f'<!doctype html><html><head><meta charset="utf-8"><title>review</title></head><body>{body}</body></html>'


@pytest.fixture
def page(browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    repository = make_repository(tmp_path / "project")
    monkeypatch.chdir(repository)
    html_file = tmp_path / "review.html"
    html_file.write_text(markdown_page(format_markdown(collect_review("main"))), encoding="utf-8")
    browser.get(html_file.as_uri())
    return browser


def golden_block(page: Any, path: str) -> Any:
    from selenium.webdriver.common.by import By

    for details in page.find_elements(By.TAG_NAME, "details"):
        if details.find_element(By.TAG_NAME, "summary").text.startswith(path):
            return details
    raise AssertionError(f"no <details> for {path!r}")


def test_the_heading_carries_the_total(page: Any) -> None:
    from selenium.webdriver.common.by import By

    assert page.find_element(By.TAG_NAME, "h3").text == (
        "fwdorder review: 2 goldens changed: 1 with calls inserted, 1 with settings changed; "
        "1 golden added; 1 golden deleted"
    )
    assert len(page.find_elements(By.TAG_NAME, "details")) == 4


def test_a_golden_s_details_open_on_a_click_and_show_its_diff_block(
    page: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    details = golden_block(page, INSERTED)
    code = details.find_element(By.CSS_SELECTOR, "pre > code")
    assert not code.is_displayed()

    details.find_element(By.TAG_NAME, "summary").click()
    page.save_screenshot(str(tmp_path / "review.png"))
    print(f"screenshot: {tmp_path / 'review.png'}")

    assert code.is_displayed()
    assert "diff" in (code.get_attribute("class") or "")
    assert code.text.splitlines()[:2] == [
        "+   drop: Dropout (f32[2,8]) -> f32[2,8]",
        "+     | settings: p=0.1, inplace=False",
    ]
    assert details.find_element(By.TAG_NAME, "li").text == (
        "1 call inserted: drop (Dropout) after act (ReLU)"
    )

    details.find_element(By.TAG_NAME, "summary").click()
    assert not code.is_displayed()


def test_names_with_markdown_characters_read_as_written(page: Any) -> None:
    from selenium.webdriver.common.by import By

    details = golden_block(page, SETTINGS)
    details.find_element(By.TAG_NAME, "summary").click()

    assert details.find_element(By.TAG_NAME, "li").text == (
        "settings changed at 1 call: act (LeakyReLU): negative_slope 0.2 -> 0.1"
    )
