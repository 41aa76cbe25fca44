"""Scratch copies of this work tree as git repositories, for the packaging and install tests:
the real repository and its tags are never touched."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from git_goldens import git

ROOT = Path(__file__).resolve().parent.parent
# The tag the scratch copies get: the next release's.
TAG = "v0.7.0"


def copy_work_tree(destination: Path) -> Path:
    """This work tree's files (tracked, or untracked and not ignored) in a new repository with
    one commit, as a fresh clone holds them."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if (
            source.is_file()
        ):  # a tracked file deleted in the work tree is left out, as a commit would
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git(destination, "init", "--quiet", "--initial-branch=main")
    git(destination, "config", "user.name", "Packaging Test")
    git(destination, "config", "user.email", "packaging@example.com")
    git(destination, "config", "commit.gpgsign", "false")
    git(destination, "add", "--all")
    git(destination, "commit", "--quiet", "-m", "the work tree")
    return destination
