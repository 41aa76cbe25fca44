"""The failure messages the docs show are the ones a real run prints.

Each test rebuilds the scenario a page describes (gating-refactors, costs, numbers,
compile-and-export, ci-reports, pictures), runs it, and reads the expected text from the page
itself: the page and the code cannot drift apart again. The guard checks that every summary
line in README.md and docs/*.md is asserted by some test under tests/.
"""

from __future__ import annotations

import re
import runpy
import sys
from collections.abc import Callable
from itertools import takewhile
from pathlib import Path

import pytest
import torch
from refactor_corpus import REFACTORS
from refactors import (
    SQUEEZE_EXCITE_SOURCE,
    resnet50,
    with_leaky_relu,
    with_one_input_channel,
    with_se_after_layer2,
    with_split_relu,
)
from torch import nn

from pytest_fwdorder import diff_traces, trace_forward
from pytest_fwdorder.cli.main import EXIT_DIFFERENT, EXIT_SAME, main

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"
# A summary line ends at a quote, a backtick, or the `)` or `<` of the text around it.
SUMMARY = re.compile(r"\d+ calls? before, \d+ after: [^\n`\"<)]*")


def page_block(page: str, summary: str) -> list[str]:
    """The lines a page shows from `summary` on, up to a blank line, `...` or a comment."""
    lines = (DOCS / page).read_text().splitlines()
    if summary not in lines:
        shown = [line for line in lines if SUMMARY.search(line)]
        raise AssertionError(f"{page} does not show the real summary {summary!r}; it shows {shown}")
    block = []
    for line in lines[lines.index(summary) :]:
        if line in ("", "...", "```") or line.startswith("#"):
            break
        block.append(line)
    return block


def real_block(explanation: list[str]) -> list[str]:
    """The summary paragraph of a real explanation: its lines up to the first blank one."""
    return explanation[: explanation.index("")] if "" in explanation else explanation


def assert_page_shows(
    page: str, explanation: list[str], summary: str, *, numbers_within: float = 0.0
) -> None:
    """The real run's summary is `summary`, and the page shows it, the real detail lines
    under it and, after a blank line, the first rows of the real diff if it shows any.

    A page may stop the detail lines early only where it says so with `...` on the next
    line. `summary` is written out in the test so that the guard below finds it here.
    `numbers_within`: the relative difference allowed between the page's numbers and the
    real run's, for values computed from data (their last digits depend on the CPU's kernels).
    """
    real = real_block(explanation)
    assert real[0] == summary
    shown = page_block(page, summary)
    lines = (DOCS / page).read_text().splitlines()
    rest = lines[lines.index(summary) + len(shown) :]
    if rest[:1] == ["..."]:
        real = real[: len(shown)]
    assert len(shown) == len(real), (shown, real)
    for shown_line, real_line in zip(shown, real, strict=True):
        assert same_text(shown_line, real_line, numbers_within), (shown_line, real_line)
    if rest[:1] == [""]:
        rows = list(takewhile(lambda line: line != "```" and not line.startswith("#"), rest[1:]))
        real_rows = explanation[len(real) + 1 : len(real) + 1 + len(rows)]
        for row, real_row in zip(rows, real_rows, strict=True):
            assert same_text(row, shortened(row, real_row), numbers_within), (row, real_row)


_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?")


def same_text(page: str, real: str, numbers_within: float) -> bool:
    """The same text, numbers equal or, with `numbers_within`, that close relatively."""
    if not numbers_within or page == real:
        return page == real
    if _NUMBER.split(page) != _NUMBER.split(real):
        return False
    pairs = zip(_NUMBER.findall(page), _NUMBER.findall(real), strict=True)
    return all(
        abs(float(a) - float(b)) <= numbers_within * max(abs(float(a)), abs(float(b)))
        for a, b in pairs
    )


def test_the_numbers_comparison_allows_last_digits_and_nothing_else() -> None:
    page = "std 0.060021 -> 0.020943, absmax 0.36783"
    assert same_text(page, "std 0.060022 -> 0.020943, absmax 0.36784", 1e-3)
    assert not same_text(page, "std 0.070021 -> 0.020943, absmax 0.36783", 1e-3)
    assert not same_text(page, "mean 0.060021 -> 0.020943, absmax 0.36783", 1e-3)
    assert not same_text(page, "std 0.060022 -> 0.020943, absmax 0.36784", 0.0)


def shortened(page_row: str, real_row: str) -> str:
    """The real row as the page shortens it: a page row ending in `, ...` keeps its start."""
    if page_row.endswith(", ...") and real_row.startswith(page_row.removesuffix("...")):
        return page_row
    return real_row


def python_blocks(page: str) -> list[str]:
    """The ```python code blocks of a page, in order."""
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.DOTALL)


def explain(before: nn.Module, after: nn.Module, *inputs: torch.Tensor) -> list[str]:
    return diff_traces(trace_forward(before, *inputs), trace_forward(after, *inputs)).explanation()


# docs/gating-refactors.md: ResNet-50 (1x3x32x32 keeps the calls and settings of 224x224)

IMAGE = (1, 3, 32, 32)


def resnet50_changed(change: Callable[[nn.Module], nn.Module]) -> Callable[[], list[str]]:
    """The explanation of ResNet-50 before and after `change`, at IMAGE."""
    return lambda: explain(resnet50(), change(resnet50()), torch.randn(IMAGE))


def one_input_channel_on_meta() -> list[str]:
    """The page shows 224x224 inputs, so this one runs at that size, on meta: the same
    message as on the CPU (checked once: 0.6 s against 3.5 s)."""
    before = trace_forward(resnet50(), torch.randn(1, 3, 224, 224), device="meta")
    gray = with_one_input_channel(resnet50())
    after = trace_forward(gray, torch.randn(1, 1, 224, 224), device="meta")
    return diff_traces(before, after).explanation()


def rebuilt_frozen_and_train_mode(model: nn.Module) -> nn.Module:
    """layer1.0.conv2 rebuilt 5x5, bn1 left in train mode, layer4 and fc.bias frozen."""
    model.layer1[0].conv2 = nn.Conv2d(64, 64, 5, padding=2, bias=False)
    model.eval()
    model.bn1.train()
    model.layer4.requires_grad_(False)
    model.fc.bias.requires_grad_(False)
    return model


def corpus_refactor(name: str) -> Callable[[], list[str]]:
    """The explanation of the refactor corpus's refactor `name`."""
    (refactor,) = [refactor for refactor in REFACTORS if refactor.name == name]
    example_after = refactor.example_after or refactor.example

    def explanation() -> list[str]:
        before = trace_forward(refactor.before(), *refactor.example())
        return diff_traces(before, trace_forward(refactor.after(), *example_after())).explanation()

    return explanation


@pytest.mark.parametrize(
    ("explanation", "summary"),
    [
        pytest.param(
            resnet50_changed(with_leaky_relu),
            "183 calls before, 183 after: 49 calls type changed",
            id="relu-replaced-by-leaky-relu",
        ),
        pytest.param(
            resnet50_changed(with_se_after_layer2),
            "183 calls before, 189 after: 6 calls inserted",
            id="an-se-block-added",
        ),
        pytest.param(
            one_input_channel_on_meta,
            "183 calls before, 183 after: 1 call input changed, 1 call settings changed, 1 call parameters changed",
            id="a-one-channel-first-conv",
        ),
        pytest.param(
            resnet50_changed(rebuilt_frozen_and_train_mode),
            "183 calls before, 183 after: 1 call settings changed, 2 calls parameters changed, 1 call mode changed, 20 calls frozen state changed",
            id="a-rebuilt-conv-a-train-mode-norm-and-frozen-layers",
        ),
        pytest.param(
            resnet50_changed(with_split_relu),
            "183 calls before, 183 after: 16 shared modules split",
            id="the-shared-relu-split",
        ),
        pytest.param(
            corpus_refactor("wrap a stage"),
            "76 calls before, 78 after: 1 wrap, 1 call inserted",
            id="wrap-a-stage",
        ),
        pytest.param(
            corpus_refactor("move a norm to another parent"),
            "8 calls before, 8 after: 1 move to another parent, 2 calls renamed",
            id="move-a-norm-to-another-parent",
        ),
        pytest.param(
            corpus_refactor("adapters on all projections but one"),
            "40 calls before, 49 after: 3 wraps, 6 calls inserted",
            id="adapters-on-all-projections-but-one",
        ),
        pytest.param(
            corpus_refactor(
                "PEFT-shaped adapters, their class also named Linear, on q_proj and v_proj"
            ),
            "28 calls before, 44 after: 4 wraps, 12 calls inserted",
            id="peft-shaped-adapters",
        ),
        pytest.param(
            corpus_refactor("run a stage in half precision inside a wrapper"),
            "76 calls before, 77 after: 1 wrap, 7 calls input changed, 10 calls output changed, 10 calls parameters changed",
            id="a-stage-in-half-precision",
        ),
        pytest.param(
            corpus_refactor("feed another input resolution"),
            "76 calls before, 76 after: 25 calls input changed, 6 calls output changed",
            id="another-input-resolution",
        ),
    ],
)
def test_gating_refactors_shows_the_real_summary(
    explanation: Callable[[], list[str]], summary: str
) -> None:
    assert_page_shows("gating-refactors.md", explanation(), summary)


# Pages whose example is their own code: run the page's code blocks.


def test_costs_shows_a_kernel_widened(tmp_path: Path) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text("\n".join(python_blocks("costs.md")[:2]))
    namespace = runpy.run_path(str(model_file))
    summary = "6 calls before, 6 after: 1 call settings changed, 1 call parameters changed, 2 calls FLOPs changed"
    assert_page_shows("costs.md", namespace["difference"].explanation(), summary)


def test_numbers_shows_attention_scaled_differently(tmp_path: Path) -> None:
    model_file = tmp_path / "model.py"
    model_file.write_text(python_blocks("numbers.md")[0])
    namespace = runpy.run_path(str(model_file))
    summary = "3 calls before, 3 after: 1 call values moved beyond the tolerance"
    # Fingerprints are float sums: their last digits may differ on another CPU type.
    assert_page_shows("numbers.md", namespace["message"].splitlines(), summary, numbers_within=1e-3)


def test_compile_and_export_shows_a_graph_break_removed(tmp_path: Path) -> None:
    """The page's code saved as model.py, as the page says, so the source line matches."""
    first, second = python_blocks("compile-and-export.md")[:2]
    model_file = tmp_path / "model.py"
    model_file.write_text(first)
    namespace = runpy.run_path(str(model_file))
    exec(compile(second, str(model_file), "exec"), namespace)
    explanation = diff_traces(namespace["before"], namespace["after"]).explanation()
    summary = "5 calls before, 6 after: 1 call type changed, 1 call inserted, 1 call renamed, graph breaks changed"
    assert_page_shows("compile-and-export.md", explanation, summary)


def test_ci_reports_shows_why_a_golden_was_not_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's project, accepted, then run again with the Dropout and a wider head."""
    page = (DOCS / "ci-reports.md").read_text()
    source = page.split("```text\ntests/test_model.py\n", 1)[1].split("```", 1)[0]
    imports = "import os\n\nimport torch\nfrom torch import nn\n"
    tests = pytester.mkdir("tests")
    (tests / "test_model.py").write_text(imports + source)
    pytester.runpytest("--snapshot-update", "-p", "no:randomly").assert_outcomes(passed=2)
    assert "nn.Linear(4, 5)" in page, "the page no longer says how the head was widened"
    (tests / "test_model.py").write_text(imports + source.replace("Linear(4, 3)", "Linear(4, 5)"))
    monkeypatch.setenv("WITH_DROPOUT", "1")

    result = pytester.runpytest(
        "--snapshot-update",
        "--fwdorder-update-only=tests/__snapshots__/test_model/test_classifier.*",
        "-p",
        "no:randomly",
    )

    (shown,) = [line for line in result.outlines if SUMMARY.search(line) and "E  " in line]
    summary = "1 call before, 1 after: 1 call output changed, 1 call settings changed, 1 call parameters changed"
    assert shown == f"E         {summary}"
    example = page.split("```text\nE       AssertionError", 1)[1].split("```", 1)[0]
    example_lines = f"E       AssertionError{example}".splitlines()
    assert shown in example_lines
    assert [line for line in example_lines if line != "..."] == [
        line for line in example_lines if line in result.outlines
    ]


# The guard: no summary line in the docs that no test asserts.


def unasserted_summaries(pages: list[Path], tests: str) -> list[str]:
    """The summary lines of `pages` that appear nowhere in `tests`, with their page."""
    return [
        f"{page.name}: {match.group().strip()}"
        for page in pages
        for match in SUMMARY.finditer(page.read_text())
        if match.group().strip() not in tests
    ]


def test_every_summary_in_the_docs_is_asserted_by_a_test() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    tests = "\n".join(path.read_text() for path in TESTS.glob("**/*.py"))
    assert unasserted_summaries(pages, tests) == []


def test_the_guard_names_a_summary_no_test_asserts(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```text\n7 calls before, 9 after: 2 calls inserted\n```\n")

    missing = unasserted_summaries([page], "7 calls before, 8 after: 1 call inserted")

    assert missing == ["page.md: 7 calls before, 9 after: 2 calls inserted"]


def test_the_guard_passes_a_summary_a_test_asserts_within_its_surrounding_text(
    tmp_path: Path,
) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "wrote the picture of the diff (7 calls before, 9 after: 2 calls inserted) to diff.svg\n"
        "<summary>7 calls before, 9 after: 2 calls inserted</summary>\n"
    )

    assert unasserted_summaries([page], '"7 calls before, 9 after: 2 calls inserted"') == []


MY_MODELS = f"""
import torchvision
from torch import nn

{SQUEEZE_EXCITE_SOURCE}

def build():
    model = torchvision.models.resnet50(weights=None)
    model.layer2.add_module("se", SqueezeExcite(512))
    return model.eval()
"""


def test_pictures_shows_the_line_a_diff_picture_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's `fwdorder diff ... --svg diff.svg`, with getting-started's refactor (a
    squeeze-and-excite block added to layer2) as `mymodels:build`. Traced on meta, which
    records the same calls as the page's CPU run, in a fraction of the time."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mymodels.py").write_text(MY_MODELS)
    golden = Path("tests/__snapshots__/test_model/test_resnet50.fwdorder.txt")
    golden.parent.mkdir(parents=True)
    model = ["--input", "1x3x224x224", "--device", "meta"]
    assert main(["show", "torchvision.models:resnet50", *model]) == EXIT_SAME
    golden.write_text(capsys.readouterr().out)

    try:
        status = main(["diff", str(golden), "mymodels:build", *model, "--svg", "diff.svg"])
    finally:
        sys.modules.pop("mymodels", None)

    printed = capsys.readouterr().out.removesuffix("\n")
    summary = "183 calls before, 187 after: 4 calls inserted"
    assert status == EXIT_DIFFERENT
    assert Path("diff.svg").read_text().startswith("<svg")
    assert printed == f"fwdorder: wrote the picture of the diff ({summary}) to diff.svg"
    assert printed in (DOCS / "pictures.md").read_text()
