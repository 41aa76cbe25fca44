"""Draw the diff pictures of five refactors of the corpus (tests/refactor_corpus.py) into
docs/images/refactors/: wrap, unwrap, a move to another parent, a deleted block and a call
inserted in one of three blocks, rendered to PNG in headless Chromium.

Run from the repository root: `python docs/make_refactor_pictures.py`. Needs what
docs/make_pictures.py needs (torchvision, selenium, Debian's chromium and chromium-driver).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from make_pictures import render_png, start_browser

from pytest_fwdorder.picture.svg import Picture

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs" / "images" / "refactors"


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from refactor_pictures import PICTURED, pictured

    browser = start_browser()
    try:
        with tempfile.TemporaryDirectory() as folder:
            for name in PICTURED:
                data = render_png(browser, Picture(pictured(name)[0]), Path(folder), name)
                (FOLDER / f"{name}.png").write_bytes(data)
                print(f"{FOLDER / name}.png: {len(data):,} bytes")
    finally:
        browser.quit()


if __name__ == "__main__":
    main()
