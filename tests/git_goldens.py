"""A real git repository of goldens for the review and diff-driver tests: two commits of
small models' goldens, with a layer inserted, a setting changed, a golden added and one
deleted between them.

`main` holds the base commit; `feature`, checked out, the head commit. The goldens are what
`trace_forward(...).render()` writes for tiny models built here, traced once per session.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections import OrderedDict
from pathlib import Path

from torch import nn

from pytest_fwdorder import TensorSpec, trace_forward

SNAPSHOTS = "tests/__snapshots__/test_model"
INSERTED = f"{SNAPSHOTS}/test_inserted.fwdorder.txt"
SETTINGS = f"{SNAPSHOTS}/test_settings.fwdorder.txt"
ADDED = f"{SNAPSHOTS}/test_added.fwdorder.txt"
DELETED = f"{SNAPSHOTS}/test_deleted.fwdorder.txt"
UNCHANGED = f"{SNAPSHOTS}/test_unchanged.fwdorder.txt"


def _mlp(*, dropout: bool = False, slope: float | None = None) -> nn.Module:
    layers: OrderedDict[str, nn.Module] = OrderedDict(fc1=nn.Linear(4, 8))
    layers["act"] = nn.ReLU() if slope is None else nn.LeakyReLU(slope)
    if dropout:
        layers["drop"] = nn.Dropout(0.1)
    layers["fc2"] = nn.Linear(8, 2)
    return nn.Sequential(layers)


@functools.cache
def golden(name: str) -> str:
    """The golden text of one of the models: `plain`, `dropout`, `slope_2`, `slope_1`, `wide`,
    `narrow`."""
    models = {
        "plain": lambda: _mlp(),
        "dropout": lambda: _mlp(dropout=True),
        "slope_2": lambda: _mlp(slope=0.2),
        "slope_1": lambda: _mlp(slope=0.1),
        "wide": lambda: nn.Sequential(nn.Linear(4, 16), nn.Tanh()),
        "narrow": lambda: nn.Sequential(nn.Linear(4, 2)),
    }
    return trace_forward(models[name]().eval(), TensorSpec((2, 4))).render()


def git(folder: Path, *arguments: str) -> str:
    """Run git in `folder` with no user or system configuration; its output."""
    environment = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    return subprocess.run(
        ["git", "-C", str(folder), *arguments],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
    ).stdout


def write(folder: Path, path: str, text: str) -> None:
    file = folder / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")


def make_repository(folder: Path) -> Path:
    """`folder` as a repository: `main` at the base commit, `feature` (checked out) after it."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "--quiet", "--initial-branch=main")
    git(folder, "config", "user.name", "Review Test")
    git(folder, "config", "user.email", "review@example.com")
    git(folder, "config", "commit.gpgsign", "false")
    write(folder, "README.md", "a project\n")
    write(folder, INSERTED, golden("plain"))
    write(folder, SETTINGS, golden("slope_2"))
    write(folder, DELETED, golden("narrow"))
    write(folder, UNCHANGED, golden("plain"))
    git(folder, "add", "--all")
    git(folder, "commit", "--quiet", "-m", "base goldens")
    git(folder, "checkout", "--quiet", "-b", "feature")
    write(folder, "README.md", "a project, changed: not a golden\n")
    write(folder, INSERTED, golden("dropout"))
    write(folder, SETTINGS, golden("slope_1"))
    write(folder, ADDED, golden("wide"))
    (folder / DELETED).unlink()
    git(folder, "add", "--all")
    git(folder, "commit", "--quiet", "-m", "a layer inserted, a setting changed")
    return folder
