"""Make the pictures of docs/pictures.md: SVGs drawn by pytest-fwdorder, rendered to PNG by
headless Chromium, as the browser tests render them.

    python docs/make_pictures.py

Needs torchvision, selenium and Debian's chromium and chromium-driver (the browser tests'
set-up). Writes docs/picture-resnet50.png, docs/picture-transformer.png and
docs/picture-diff-se.png; models are traced on the meta device or on small random inputs,
no weights are downloaded.
"""

from __future__ import annotations

import base64
import io
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

from pytest_fwdorder import TensorSpec, diff_golden, trace_forward
from pytest_fwdorder.picture.svg import Picture

DOCS = Path(__file__).resolve().parent


class SqueezeExcite(nn.Module):
    """The block the diff picture shows inserted after ResNet-50's second stage."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Conv2d(channels, channels, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc(self.pool(x)))


def resnet50(squeeze_excite: bool = False) -> nn.Module:
    model = torchvision.models.resnet50(weights=None)
    if squeeze_excite:
        model.layer2.add_module("se", SqueezeExcite(512))
    return model.eval()


def resnet50_golden(squeeze_excite: bool = False) -> str:
    trace = trace_forward(
        lambda: resnet50(squeeze_excite), TensorSpec((1, 3, 224, 224)), device="meta"
    )
    return trace.render()


def transformer_picture() -> Picture:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    return trace_forward(model, torch.randn(1, 10, 64)).picture()


def pictures() -> dict[str, Picture]:
    """Each picture by the name of its PNG."""
    from pytest_fwdorder import diff_picture, golden_picture

    before, after = resnet50_golden(), resnet50_golden(squeeze_excite=True)
    return {
        "picture-resnet50.png": golden_picture(before),
        "picture-transformer.png": transformer_picture(),
        "picture-diff-se.png": diff_picture(diff_golden(before, after)),
    }


def start_browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        sys.exit(
            "needs Debian's chromium and chromium-driver: apt-get install chromium chromium-driver"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(executable_path=driver_path))


def render_png(browser: Any, picture: Picture, folder: Path, name: str) -> bytes:
    """The picture as Chromium draws it, at its own size, as PNG bytes."""
    page = folder / f"{name}.svg"
    picture.save(page)
    browser.get(page.as_uri())
    size = browser.execute_script(
        "var svg = document.documentElement;"
        "return [svg.width.baseVal.value, svg.height.baseVal.value];"
    )
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
        },
    )
    return small_png(base64.b64decode(shot["data"]))


def small_png(data: bytes) -> bytes:
    """The PNG with at most 128 colours: a third of the bytes, and text still crisp."""
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    buffer = io.BytesIO()
    image.quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        buffer, format="PNG", optimize=True
    )
    return buffer.getvalue()


def main() -> None:
    browser = start_browser()
    try:
        with tempfile.TemporaryDirectory() as folder:
            for name, picture in pictures().items():
                data = render_png(browser, picture, Path(folder), name)
                (DOCS / name).write_bytes(data)
                print(f"{DOCS / name}: {len(data):,} bytes")
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
