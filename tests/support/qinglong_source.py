"""2.x's own task shells and version file at a release tag, taken at test time from a git directory of
whyour/qinglong (a clone or a bare git dir holding its tags) that ``QL_BRIDGE_QINGLONG_GIT`` names.

The repository carries none of 2.x's code, so the tests that run a release's real shells read them from there:
``git archive <tag>`` of the files below, unpacked once per tag per session under pytest's temporary directory.
Nothing is downloaded. Without the variable, or without the tag, those tests skip with one reason naming the
variable; a variable that names no git directory fails them, as a mistake to fix rather than a gap to accept.
Which tags, and why each patch: tests/releases/README.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE_VARIABLE = "QL_BRIDGE_QINGLONG_GIT"
UNAVAILABLE = (f"2.x's own shells are not available: set {SOURCE_VARIABLE} to a git clone of whyour/qinglong "
               "with its tags")
# The tags the tests run, oldest first (tests/releases/README.md says why each patch).
TAGS = ("v2.17.8", "v2.17.13", "v2.18.1", "v2.18.3", "v2.19.2", "v2.20.2", "v2.21.0")
# The scripts a task run sources, and nothing else of shell/: not preload/, whose sitecustomize files would run
# 2.x's Node client in every script (tests give a release their own shell/preload when they need one).
SHELL_FILES = ("api.sh", "env.sh", "otask.sh", "share.sh", "task.sh", "update.sh")

_factory: pytest.TempPathFactory | None = None
_taken: dict[str, Path] = {}


def cache_under(factory: pytest.TempPathFactory) -> None:
    """Where this session unpacks the tags (tests/conftest.py hands over its ``tmp_path_factory``)."""
    global _factory
    _factory = factory


def release_dir(tag: str) -> Path:
    """A folder holding ``tag``'s ``shell/<SHELL_FILES>`` and ``version.yaml``, unchanged; the same folder for
    the whole session, so it is never to be written to. Skips the calling test when 2.x's source is not given."""
    if tag not in _taken:
        _taken[tag] = _unpack(_source(), tag)
    return _taken[tag]


def install(tag: str, ql_dir: Path) -> Path:
    """``ql_dir`` laid out as 2.x's image lays out QL_DIR at ``tag``, as far as a task run reads it: ``shell/``
    (copies, so a test that adds to its install changes no other test's) and ``version.yaml``. Returns it."""
    source = release_dir(tag)
    (ql_dir / "shell").mkdir(parents=True)
    for name in SHELL_FILES:
        shutil.copy2(source / "shell" / name, ql_dir / "shell" / name)
    shutil.copy2(source / "version.yaml", ql_dir / "version.yaml")
    return ql_dir


def stand_in(path: Path, body: str) -> Path:
    """An executable ``/bin/sh`` script at ``path``: a double, on a task shell's PATH, of a tool the test must not
    reach (``body`` says what it answers instead)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _source() -> Path:
    named = os.environ.get(SOURCE_VARIABLE, "").strip()
    if not named:
        pytest.skip(UNAVAILABLE)
    git_dir = Path(named)
    if (git_dir / ".git").exists():  # a clone's work tree was named rather than its git dir
        git_dir = git_dir / ".git"
    if _git(git_dir, "rev-parse", "--git-dir").returncode != 0:
        pytest.fail(f"{SOURCE_VARIABLE}={named} is not a git directory: point it at a clone of whyour/qinglong",
                    pytrace=False)
    return git_dir


def _unpack(git_dir: Path, tag: str) -> Path:
    commit = _git(git_dir, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
    if commit.returncode != 0:
        pytest.skip(f"{UNAVAILABLE} ({git_dir} has no tag {tag})")
    assert _factory is not None, "tests/conftest.py hands this module its tmp_path_factory"
    sha = commit.stdout.strip()
    target = _factory.mktemp(f"qinglong-{tag}-{sha[:12]}-")
    paths = [f"shell/{name}" for name in SHELL_FILES] + ["version.yaml"]
    archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", sha, *paths],
                             capture_output=True)
    if archive.returncode != 0:
        pytest.fail(f"git archive {tag} in {git_dir}: {archive.stderr.decode(errors='replace').strip()}",
                    pytrace=False)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True)

