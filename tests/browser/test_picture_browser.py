"""The SVG pictures in headless Chromium: ResNet-50, a 2-layer transformer with its layers
rolled, and the diff of an inserted SE block, on their own and inside the HTML report.

Screenshots go to each test's tmp_path (the test prints where). Needs Debian's `chromium`
and `chromium-driver` and selenium (the `test` extra), as the report's browser test does.
"""

from __future__ import annotations

import base64
import io
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_fwdorder import diff_golden, diff_picture
from pytest_fwdorder.picture.svg import STATUS_COLOURS, Picture
from pytest_fwdorder.report.html import render_report
from pytest_fwdorder.snapshot.kept_comparisons import Comparison

# The pictures the docs show are the ones drawn here: their models come from the script
# that makes the docs' PNGs.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
from make_pictures import resnet50_golden, transformer_picture

pytestmark = pytest.mark.browser
SE_PATHS = ["layer2.se", "layer2.se.pool", "layer2.se.fc", "layer2.se.gate"]


@pytest.fixture(scope="module")
def goldens() -> tuple[str, str]:
    """ResNet-50's golden text without and with an SE block after layer2."""
    return resnet50_golden(), resnet50_golden(squeeze_excite=True)


def show(browser: Any, picture: Picture, folder: Path, name: str) -> Any:
    """Open the picture as its own SVG file; returns its root element."""
    path = picture.save(folder / f"{name}.svg")
    browser.get(path.as_uri())
    return browser.execute_script("return document.documentElement;")


def screenshot(browser: Any, element: Any, path: Path) -> Any:
    """A screenshot of the whole element, beyond the window, as a PIL image (also saved)."""
    from PIL import Image

    box = browser.execute_script(
        "var r = arguments[0].getBoundingClientRect();"
        "return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height];",
        element,
    )
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": box[0], "y": box[1], "width": box[2], "height": box[3], "scale": 1},
        },
    )
    data = base64.b64decode(shot["data"])
    path.write_bytes(data)
    print(f"screenshot: {path}")
    return Image.open(io.BytesIO(data)).convert("RGB")


def drawn_size(browser: Any, element: Any) -> tuple[float, float]:
    width, height = browser.execute_script(
        "var r = arguments[0].getBoundingClientRect(); return [r.width, r.height];", element
    )
    return width, height


def frame_centre(browser: Any, svg: Any, path: str) -> tuple[int, int]:
    """Where, inside the SVG's screenshot, the middle of a box's left margin is drawn."""
    x, y = browser.execute_script(
        "var svg = arguments[0], path = arguments[1];"
        "var box = Array.from(svg.querySelectorAll('g.fo-box'))"
        "  .find(function (g) { return g.getAttribute('data-path') === path; });"
        "var frame = box.querySelector(':scope > rect.fo-frame').getBoundingClientRect();"
        "var origin = svg.getBoundingClientRect();"
        "return [frame.left - origin.left + 4, frame.top - origin.top + frame.height / 2];",
        svg,
        path,
    )
    return int(x), int(y)


def colour(hex_colour: str) -> tuple[int, int, int]:
    return (int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16))


def test_resnet50_draws_with_its_stages_rolled(
    browser: Any, goldens: tuple[str, str], tmp_path: Path
) -> None:
    from pytest_fwdorder.picture.svg import golden_picture

    svg = show(browser, golden_picture(goldens[0]), tmp_path, "resnet50")
    image = screenshot(browser, svg, tmp_path / "resnet50.png")
    rolled = browser.execute_script(
        "return Array.from(arguments[0].querySelectorAll('g.fo-rolled'))"
        ".map(function (g) { return g.getAttribute('data-path') + ' x' +"
        " g.getAttribute('data-repeat'); });",
        svg,
    )

    width, height = drawn_size(browser, svg)
    assert width > 300
    assert height > 3000
    assert rolled == ["layer1.1 x2", "layer2.1 x3", "layer3.1 x5", "layer4.1 x2"]
    assert len(image.getcolors(2**16) or []) > 10  # drawn, not a blank page


def test_a_two_layer_transformer_draws_its_layers_once_marked_x2(
    browser: Any, tmp_path: Path
) -> None:
    picture = transformer_picture()

    svg = show(browser, picture, tmp_path, "transformer")
    screenshot(browser, svg, tmp_path / "transformer.png")
    badge = browser.execute_script(
        "var badge = arguments[0].querySelector('g.fo-rolled .fo-badge-repeat');"
        "var r = badge.getBoundingClientRect();"
        "return [badge.textContent, r.width, r.height];",
        svg,
    )

    width, height = drawn_size(browser, svg)
    assert width > 300
    assert height > 400
    assert badge[0] == "x2"
    assert badge[1] > 10
    assert badge[2] > 10


def test_the_diff_of_an_inserted_se_block_shows_it_green(
    browser: Any, goldens: tuple[str, str], tmp_path: Path
) -> None:
    picture = diff_picture(diff_golden(*goldens))

    svg = show(browser, picture, tmp_path, "diff-se")
    image = screenshot(browser, svg, tmp_path / "diff-se.png")
    inserted = browser.execute_script(
        "return Array.from(arguments[0].querySelectorAll('g.fo-inserted'))"
        ".map(function (g) { return g.getAttribute('data-path'); });",
        svg,
    )
    pixel = image.getpixel(frame_centre(browser, svg, "layer2.se"))
    unchanged = image.getpixel(frame_centre(browser, svg, "layer3"))

    assert inserted == SE_PATHS
    assert pixel == colour(STATUS_COLOURS["inserted"][0])
    assert unchanged == (255, 255, 255)


def test_the_report_shows_the_diff_picture_when_its_details_open(
    browser: Any, goldens: tuple[str, str], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    comparison = Comparison(
        test_id="tests/test_model.py::test_resnet50",
        snapshot_name="test_resnet50",
        golden_path="tests/__snapshots__/test_model/test_resnet50.fwdorder.txt",
        status="failed",
        old_text=goldens[0],
        new_text=goldens[1],
    )
    page = tmp_path / "report.html"
    page.write_text(render_report([comparison]), encoding="utf-8")
    browser.get_log("browser")
    browser.get(page.as_uri())
    details = browser.find_element(By.CSS_SELECTOR, "details.fo-picture")
    svg = details.find_element(By.CSS_SELECTOR, "svg")
    assert not svg.is_displayed()

    details.find_element(By.CSS_SELECTOR, "summary").click()
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", details)
    browser.save_screenshot(str(tmp_path / "report-picture.png"))
    print(f"screenshot: {tmp_path / 'report-picture.png'}")

    assert svg.is_displayed()
    assert svg.size["width"] > 300
    assert svg.size["height"] > 500
    inserted = svg.find_elements(By.CSS_SELECTOR, "g.fo-inserted")
    assert [group.get_attribute("data-path") for group in inserted] == SE_PATHS
    assert [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"] == []
