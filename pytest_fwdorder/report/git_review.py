"""Which golden files differ between two revisions of a git repository, each explained: the
one module that runs git. No torch.

`collect_review` asks git which goldens differ between a base commit and the work tree (or
a `head` commit), reads both versions through git, and explains each with the words a
failing comparison uses. It only reads: plumbing commands (`rev-parse`, `merge-base`,
`diff-index`, `diff-tree`, `ls-files`, `cat-file`) with optional locks off, so neither the
work tree nor the index is written, and a shallow clone that holds the base commit works.
`explain_golden` explains one golden from its two texts, without git: the diff driver's
part. Rendering is `review_format`'s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pytest_fwdorder.diff.changes import ChangeKind
from pytest_fwdorder.diff.classification import TraceDiff
from pytest_fwdorder.diff.diffing import diff_golden
from pytest_fwdorder.golden.parse import declared_and_written_calls
from pytest_fwdorder.golden.upgrades import upgrade_differences

GoldenStatus = Literal["added", "deleted", "changed"]

# Where syrupy keeps our goldens, as a git pathspec; `**/` also matches no folder at all.
GOLDEN_PATHSPEC = ":(glob)**/__snapshots__/**/*.fwdorder.txt"
# The branches the default base is the merge base with, in the order they are tried.
DEFAULT_BRANCHES = ("origin/HEAD", "main", "master")


class ReviewError(Exception):
    """A problem the user can fix (not a repository, an unknown base), said in one line."""


@dataclass(frozen=True, slots=True)
class ReviewedGolden:
    """One golden file that differs, as a review shows it.

    `summary` is one line (for a changed golden, the first line of its explanation);
    `notes` the lines an explanation puts first (another torch release, settings left out);
    `details` the summary's other lines, one per kind of change; `body` the changed calls
    with context (`-` old, `+` new) and the header lines that changed; `changes` counts the
    changes by kind (`"inserted"`, `"settings changed"`, ...; a facet's by its own words,
    `"backward steps changed"`). `problem` says why the two
    versions cannot be diffed, when they cannot.
    """

    path: str
    status: GoldenStatus
    summary: str
    notes: tuple[str, ...] = ()
    details: tuple[str, ...] = ()
    body: tuple[str, ...] = ()
    changes: tuple[tuple[str, int], ...] = ()
    header_changed: bool = False
    problem: str | None = None

    def explanation(self) -> list[str]:
        """The lines a failing comparison prints for this change, as `explain_mismatch` does."""
        if self.status != "changed":
            return [f"{self.status}, {self.summary}"]
        if self.problem is not None:
            return [self.problem]
        if not self.changes and not self.header_changed:
            return [*self.notes, "no differences"]
        return [*self.notes, self.summary, *self.details, "", *self.body]


@dataclass(frozen=True, slots=True)
class Review:
    """The goldens that differ between a base commit and a head (None: the work tree).

    `base` is how the base was chosen (`HEAD~1`, `the merge base of HEAD and main`), `head`
    the head revision as given; the commits are full hexadecimal names.
    """

    base: str
    base_commit: str
    head: str | None
    head_commit: str | None
    goldens: tuple[ReviewedGolden, ...]

    def __bool__(self) -> bool:
        return bool(self.goldens)


def explain_golden(path: str, old_text: str | None, new_text: str | None) -> ReviewedGolden:
    """How one golden changed from `old_text` to `new_text` (None: the file is not there).

    Reads the texts as a failing comparison does: the `# written with:` line is not
    compared, nor settings an upgrade of torch changes alone (`explain_mismatch`).
    Raises ValueError when both texts are None.
    """
    if old_text is None:
        if new_text is None:
            raise ValueError(f"explain_golden({path!r}) needs an old or a new text, got neither")
        return ReviewedGolden(path, "added", _calls(new_text))
    if new_text is None:
        return ReviewedGolden(path, "deleted", f"it held {_calls(old_text)}")
    return _explain_change(path, old_text, new_text)


def _explain_change(path: str, old_text: str, new_text: str) -> ReviewedGolden:
    # The steps of snapshot.explain_mismatch, kept apart so a review can show the summary
    # and the calls separately and count the changes; test_review checks both agree.
    # snapshot imports pytest: only when a golden changed
    from pytest_fwdorder.snapshot.policy import comparable_texts, golden_problem

    upgrades = upgrade_differences(old_text, new_text)
    old_text, new_text = comparable_texts(old_text, new_text, upgrades)
    for side, first, second in (("", old_text, new_text), ("new ", new_text, old_text)):
        problem = golden_problem(first, second)
        if problem is not None:
            sentence = f"the {side}golden file {path!r} {problem}"
            return ReviewedGolden(path, "changed", sentence, problem=sentence)
    difference = diff_golden(old_text, new_text)
    notes = tuple(upgrades.notes())
    if not difference:
        summary = notes[0] if notes else "differs only in its '# written with:' line"
        return ReviewedGolden(path, "changed", summary, notes=notes)
    summary, *details = difference.summary().splitlines()
    counts = _change_counts(difference)
    lines = difference.explanation()
    return ReviewedGolden(
        path,
        "changed",
        summary,
        notes=notes,
        details=tuple(details),
        body=tuple(lines[len(details) + 2 :]),  # after the summary and its blank line
        changes=counts,
        header_changed=bool(difference.header_changes),
    )


def _change_counts(difference: TraceDiff) -> tuple[tuple[str, int], ...]:
    """How many changes of each kind, in `ChangeKind`'s order; a facet's changes counted
    under its own words (`Change.counted_words`), in the order they came."""
    counts: dict[str, int] = {}
    for kind in ChangeKind:
        for change in difference.of_kind(kind):
            counts[change.counted_words] = counts.get(change.counted_words, 0) + 1
    return tuple(counts.items())


def _calls(text: str) -> str:
    declared, written = declared_and_written_calls(text)
    count = written if declared is None else declared
    return f"{count} call" if count == 1 else f"{count} calls"


def collect_review(
    base: str | None = None, head: str | None = None, folder: Path | str | None = None
) -> Review:
    """The goldens that differ between `base` and `head` in the repository around `folder`.

    `base` is any commit-ish; None takes the merge base of the head with the default
    branch (origin/HEAD, else main, else master). `head` None compares with the work tree,
    untracked goldens included. Raises ReviewError, in one line, when `folder` is not in a
    git repository, git is missing, or a revision cannot be found.
    """
    git = _Git(Path(folder) if folder is not None else Path.cwd())
    head_commit = git.commit(head, "--head") if head is not None else None
    if base is None:
        base, base_commit = git.default_base(head)
    else:
        base_commit = git.commit(base, "BASE")
    goldens = []
    for path, status in git.changed_goldens(base_commit, head_commit):
        old_text = git.blob_text(base_commit, path) if status != "A" else None
        new_text = None if status == "D" else git.new_text(head_commit, path)
        if old_text == new_text:  # touched as git sees it (a stat change), the same text
            continue
        goldens.append(explain_golden(path, old_text, new_text))
    return Review(base, base_commit, head, head_commit, tuple(goldens))


class _Git:
    """git commands in one repository, read only; each failure is a ReviewError."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("git") is None:
            raise ReviewError("git is not on PATH: install git, or run where it is found")
        if not folder.is_dir():
            raise ReviewError(f"{str(folder)!r} is not a folder: run inside a git work tree")
        self.folder = folder
        top = self.run(["rev-parse", "--show-toplevel"], check=False)
        if top is None:
            raise ReviewError(
                f"{str(folder)!r} is not in a git repository: run fwdorder review inside a "
                "git work tree (a clone of the project)"
            )
        self.folder = Path(top.decode().rstrip("\n"))

    def run(self, arguments: Sequence[str], *, check: bool = True) -> bytes | None:
        """git's standard output; None when it fails and `check` is false."""
        # No optional locks: `git status`-like commands would otherwise refresh the index.
        environment = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
        result = subprocess.run(
            ["git", "-C", str(self.folder), *arguments],
            capture_output=True,
            env=environment,
            check=False,
        )
        if result.returncode == 0:
            return result.stdout
        if check:
            message = result.stderr.decode(errors="replace").strip().splitlines()
            raise ReviewError(
                f"git {' '.join(arguments)} failed: {message[-1] if message else 'no message'}"
            )
        return None

    def commit(self, revision: str, role: str) -> str:
        """The full name of the commit `revision` names."""
        found = self.run(
            ["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], check=False
        )
        if found is not None:
            return found.decode().strip()
        hint = "give a branch, tag or commit of this repository"
        if self.shallow():
            hint += f"; this is a shallow clone: fetch it first (git fetch origin {revision})"
        raise ReviewError(f"unknown {role} {revision!r}: not a commit here: {hint}")

    def shallow(self) -> bool:
        answer = self.run(["rev-parse", "--is-shallow-repository"], check=False)
        return answer is not None and answer.strip() == b"true"

    def default_base(self, head: str | None) -> tuple[str, str]:
        """How the default base was chosen, and its commit: the merge base with a branch."""
        tip = head if head is not None else "HEAD"
        self.commit(tip, "--head" if head is not None else "HEAD")
        for branch in DEFAULT_BRANCHES:
            if self.run(["rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}"], check=False):
                break
        else:
            raise ReviewError(
                f"no default branch to review against: none of {', '.join(DEFAULT_BRANCHES)} "
                "exists here; give the base: fwdorder review BASE (a branch, tag or commit)"
            )
        merge_base = self.run(["merge-base", tip, branch], check=False)
        if merge_base is None:
            shallow = " (this is a shallow clone: fetch more history, git fetch --deepen=50)"
            raise ReviewError(
                f"{tip} and {branch} have no merge base here"
                f"{shallow if self.shallow() else ''}: give the base: fwdorder review BASE"
            )
        return f"the merge base of {tip} and {branch}", merge_base.decode().strip()

    def changed_goldens(self, base: str, head: str | None) -> list[tuple[str, str]]:
        """(path, git status letter A/D/M) of each golden that differs, sorted by path."""
        if head is None:
            compared = ["diff-index", "--name-status", "-z", "--no-renames", base]
        else:
            compared = ["diff-tree", "-r", "--name-status", "-z", "--no-renames", base, head]
        output = self.run([*compared, "--", GOLDEN_PATHSPEC]) or b""
        fields = output.split(b"\0")
        changed = {
            os.fsdecode(path): letter.decode()[:1]
            for letter, path in zip(fields[::2], fields[1::2], strict=False)  # a last b""
        }
        if head is None:  # goldens a run wrote that are not added yet
            untracked = self.run(
                ["ls-files", "--others", "--exclude-standard", "-z", "--", GOLDEN_PATHSPEC]
            )
            for path in (untracked or b"").split(b"\0"):
                if path:
                    changed.setdefault(os.fsdecode(path), "A")
        return sorted(changed.items())

    def blob_text(self, commit: str, path: str) -> str | None:
        blob = self.run(["cat-file", "blob", f"{commit}:{path}"], check=False)
        return None if blob is None else blob.decode("utf-8", errors="replace")

    def new_text(self, head: str | None, path: str) -> str | None:
        if head is not None:
            return self.blob_text(head, path)
        try:
            return (self.folder / path).read_bytes().decode("utf-8", errors="replace")
        except OSError:  # deleted from the work tree but still in the index
            return None
