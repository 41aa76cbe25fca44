"""The five refactors of the corpus whose diff pictures the docs show and the browser test
renders (wrap, unwrap, a move to another parent, a deleted block, a call inserted in one of
three blocks), drawn with the public API, with the module trees of their models."""

from __future__ import annotations

from functools import cache

from refactor_corpus import REFACTORS, Refactor
from torch import nn

from pytest_fwdorder import diff_picture, trace_forward

# Each picture's name (docs/images/refactors/<name>.png) and its refactor in the corpus.
PICTURED = {
    "wrap": "wrap a stage",
    "unwrap": "unwrap a stage",
    "move": "move a norm to another parent",
    "delete": "delete a MobileNetV3 block",
    "insert": "insert inside one of three blocks",
}
# Checked as the five are, not pictured in the docs.
CHECKED = {**PICTURED, "group": "group two layers into a block"}
_BY_NAME = {refactor.name: refactor for refactor in REFACTORS}


def module_parents(model: nn.Module) -> dict[str, str]:
    """Each module's path and its parent's, as the golden writes them (`<root>`)."""
    paths = [path for path, _ in model.named_modules()]
    parents: dict[str, str] = {}
    for path in paths[1:]:
        prefix = path.rpartition(".")[0]
        while prefix and prefix not in paths:
            prefix = prefix.rpartition(".")[0]
        parents[path] = prefix or "<root>"
    return parents


@cache
def pictured(name: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """The diff picture's SVG of one refactor, and the module trees before and after."""
    refactor: Refactor = _BY_NAME[CHECKED[name]]
    before_model, after_model = refactor.before(), refactor.after()
    before = trace_forward(before_model, *refactor.example())
    after = trace_forward(after_model, *(refactor.example_after or refactor.example)())
    svg = diff_picture(before.diff(after)).svg
    return svg, module_parents(before_model), module_parents(after_model)
