"""What a torch upgrade changes alone is not compared: the environment line and torch.nn
settings at this torch's defaults; every other difference still fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.golden.upgrades import (
    comparable_text,
    environment_line,
    installed_versions,
    same_model,
    upgrade_differences,
    with_environment,
    without_environment,
    written_with,
)

GOLDEN = """\
# pytest-fwdorder trace (format 2)
# model: Net
# calls: 3
<root>: Net (f32[2,3,8,8]) -> f32[2,4,8,8]
  norm: BatchNorm2d (f32[2,3,8,8]) -> f32[2,3,8,8]
    | settings: num_features=3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True, bias=True
  custom: Scale (f32[2,3,8,8]) -> f32[2,4,8,8]
    | settings: factor=2, bias=True
"""

# Releases other than the running one, for goldens "written elsewhere".
OTHER_RELEASE = (
    "torch 2.15.0, torchvision 0.29.2"
    if torch.__version__.startswith("2.8.")
    else "torch 2.8.0, torchvision 0.23.0"
)
WRITTEN_WITH_OTHER_TORCH = GOLDEN.replace(", bias=True\n  custom", "\n  custom").replace(
    "(format 2)\n", f"(format 2)\n# written with: {OTHER_RELEASE}\n"
)


def test_a_setting_a_newer_torch_adds_at_its_default_is_not_compared() -> None:
    without_bias = GOLDEN.replace(", bias=True\n  custom", "\n  custom")

    assert without_bias != GOLDEN
    assert same_model(without_bias, GOLDEN)


def test_a_changed_value_of_a_setting_is_still_compared() -> None:
    changed = GOLDEN.replace("eps=1e-05", "eps=0.001")

    assert not same_model(GOLDEN, changed)


def test_a_setting_that_moves_away_from_its_default_is_still_compared() -> None:
    not_affine = GOLDEN.replace("affine=True", "affine=False")

    assert not same_model(GOLDEN, not_affine)


def test_a_changed_default_shows_when_the_golden_holds_the_old_value() -> None:
    # The golden was written where the default was 0.2; this torch's default is 0.1, so
    # the new trace's momentum=0.1 is left out, and the golden's 0.2 is not.
    old_default = GOLDEN.replace("momentum=0.1", "momentum=0.2")

    assert not same_model(old_default, GOLDEN)


def test_a_setting_this_torch_does_not_take_is_not_compared() -> None:
    newer = GOLDEN.replace("bias=True\n  custom", "bias=True, fused_norm=False\n  custom")

    assert same_model(newer, GOLDEN)


def test_a_user_modules_settings_are_compared_as_written() -> None:
    without_user_bias = GOLDEN.replace("factor=2, bias=True", "factor=2")

    assert not same_model(GOLDEN, without_user_bias)


def test_the_settings_of_torch_classes_are_written_without_their_defaults_for_comparing() -> None:
    assert "    | settings: num_features=3\n" in comparable_text(GOLDEN)


def test_the_environment_line_is_not_compared() -> None:
    other_release = with_environment(GOLDEN).replace(
        environment_line(), f"# written with: {OTHER_RELEASE}"
    )

    assert same_model(other_release, GOLDEN)
    assert without_environment(other_release) == GOLDEN


def test_the_environment_line_goes_after_the_format_line() -> None:
    lines = with_environment(GOLDEN).splitlines()

    assert lines[:2] == ["# pytest-fwdorder trace (format 2)", environment_line()]
    assert lines[2:] == GOLDEN.splitlines()[1:]


def test_the_environment_line_names_the_installed_releases_without_their_build() -> None:
    assert re.fullmatch(
        r"# written with: torch [0-9][0-9.a-z]*(, torchvision [0-9.a-z]+)?", environment_line()
    )
    assert installed_versions()["torch"] == torch.__version__.partition("+")[0]


def test_text_that_is_not_a_golden_gets_no_environment_line() -> None:
    assert with_environment("# my own text\n<root>: X () -> None\n") == (
        "# my own text\n<root>: X () -> None\n"
    )


def test_the_versions_a_golden_was_written_with_are_read_back() -> None:
    assert written_with("# x\n# written with: torch 2.8.0, torchvision 0.23.0\n") == {
        "torch": "2.8.0",
        "torchvision": "0.23.0",
    }
    assert written_with(GOLDEN) is None


def test_the_diff_has_no_header_change_for_the_environment_line() -> None:
    assert not diff_golden(WRITTEN_WITH_OTHER_TORCH, with_environment(WRITTEN_WITH_OTHER_TORCH))


def test_a_failure_says_which_release_wrote_the_golden_and_what_was_left_out() -> None:
    changed = with_environment(GOLDEN.replace("f32[2,4,8,8]\n  norm", "f32[2,5,8,8]\n  norm"))

    notes = upgrade_differences(WRITTEN_WITH_OTHER_TORCH, changed).notes()

    running = ", ".join(f"{name} {version}" for name, version in installed_versions().items())
    assert notes == [
        f"golden written with {OTHER_RELEASE}, this run uses {running}",
        "1 settings line differs only in torch.nn constructor arguments at this torch's "
        "defaults or that it does not take (BatchNorm2d bias=True), the kind of change a "
        "torch upgrade makes alone: not compared, and left out of the settings lines below",
    ]


MODEL_TEST = """
from torch import nn
import torch
from torch import nn


def test_net(forward_trace, snapshot):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d({channels}))
    assert forward_trace(model, torch.randn(2, 3, 8, 8)) == snapshot
"""
GOLDEN_PATH = Path("__snapshots__/test_model/test_net.fwdorder.txt")


def as_if_written_with_another_torch(golden: Path) -> str:
    """The golden as another torch writes it: BatchNorm's `bias=True` (torch 2.14 added the
    argument) taken away where this torch writes it, added where it does not; and the other
    release's versions."""
    text = golden.read_text()
    with_bias = r"(BatchNorm2d .*\n +\| settings: .*), bias=True\n"
    if re.search(with_bias, text):
        text = re.sub(with_bias, r"\1\n", text)
    else:
        text = re.sub(r"(BatchNorm2d .*\n +\| settings: .*)\n", r"\1, bias=True\n", text)
    text = re.sub(r"# written with: .*", f"# written with: {OTHER_RELEASE}", text)
    golden.write_text(text)
    return text


def test_a_golden_written_with_another_torch_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_model=MODEL_TEST.format(channels=4))
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    as_if_written_with_another_torch(pytester.path / GOLDEN_PATH)

    pytester.runpytest().assert_outcomes(passed=1)


def test_an_update_leaves_a_golden_an_upgrade_alone_changed_untouched(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_model=MODEL_TEST.format(channels=4))
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    older = as_if_written_with_another_torch(pytester.path / GOLDEN_PATH)

    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)

    assert (pytester.path / GOLDEN_PATH).read_text() == older


def test_a_real_change_to_a_golden_of_another_torch_fails_naming_both_releases(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_model=MODEL_TEST.format(channels=4))
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    text = as_if_written_with_another_torch(pytester.path / GOLDEN_PATH)
    (pytester.path / GOLDEN_PATH).write_text(text.replace("f32[2,4,6,6]", "f32[2,4,7,7]"))

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*golden written with {OTHER_RELEASE}, this run uses torch *",
            "*1 settings line differs only in torch.nn constructor arguments*(BatchNorm2d "
            "bias=True)*",
        ]
    )


class ChannelsLastNorm(nn.LayerNorm):
    """As torchvision's LayerNorm2d: torch.nn's constructor and extra_repr, its own forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class OwnWordsNorm(nn.LayerNorm):
    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, bias=True"


SUBCLASS_GOLDEN = """\
<root>: Net (f32[1,4,2,2]) -> f32[1,4,2,2]
  norm: {type_name} (f32[1,4,2,2]) -> f32[1,4,2,2]
    | settings: (4,), eps=1e-06, elementwise_affine=True, bias=True
"""


def test_a_subclass_with_torch_nn_settings_is_compared_by_its_torch_nn_base() -> None:
    golden = SUBCLASS_GOLDEN.format(type_name=ChannelsLastNorm.__name__)

    assert same_model(golden, golden.replace(", bias=True", ""))
    assert not same_model(golden, golden.replace("(4,)", "(8,)"))


def test_a_subclass_with_its_own_extra_repr_is_compared_as_written() -> None:
    golden = SUBCLASS_GOLDEN.format(type_name=OwnWordsNorm.__name__)

    assert not same_model(golden, golden.replace(", bias=True", ""))
