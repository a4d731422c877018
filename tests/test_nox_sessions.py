"""Every nox session the README names, run from a fresh clone in a fresh venv, as far as this
machine allows without a GPU: a session that breaks on a fresh machine fails here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fresh_clone import fresh_clone

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Run:
    """How one README row runs here: nox flags, arguments after ``--``, and, for a session whose
    commands need a GPU (or images), an opforge command checked in its venv after its installs."""

    posargs: tuple[str, ...] = ()
    install_only: bool = False
    then: tuple[str, ...] = ()


# Real where that is cheap or is the point (build-cpu is the main job and makes dist/ for the
# rest); else the session's installs and commands up to the --help of its last command; sessions
# whose every command needs a CUDA device or the images: their installs, then opforge in that venv.
RUNS = {
    "build-cpu": Run(),
    "build-gpu": Run(posargs=("--help",)),
    "tests": Run(posargs=("--collect-only", "-q", "tests/test_cli.py")),
    "quick": Run(posargs=("--collect-only", "-q", "tests/test_cli.py")),
    "parity": Run(posargs=("--collect-only", "-q")),
    "test-gpu": Run(install_only=True, then=("build", "--profile", "gpu", "--help")),
    "bench-gpu": Run(install_only=True, then=("build", "--profile", "gpu", "--help")),
    "pins": Run(),
    "lint": Run(),
    "images": Run(posargs=("--help",)),
    "tests -- --runner docker": Run(
        install_only=True, then=("test", "--runner", "docker", "--help")
    ),
    "ci-matrix": Run(posargs=("--check",)),
    "bench-core": Run(posargs=("--help",)),
    "bench-torch": Run(posargs=("--help",)),
    "bench-mindspore": Run(posargs=("--help",)),
}


def readme_rows() -> list[str]:
    """The sessions of the README's table, as written there less optional ``[-- ...]`` parts:
    ``build-cpu``, ``tests -- --runner docker``, ..."""
    text = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| `nox -s ([^`]+)` \|", text, flags=re.MULTILINE)
    return [re.sub(r"\s*\[.*\]$", "", row) for row in rows]


def noxfile_sessions() -> set[str]:
    """The sessions the noxfile defines (`nox --list`)."""
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "--list"], cwd=REPO, capture_output=True, text=True
    ).stdout
    return set(re.findall(r"^[*-] (\S+) ->", listed, flags=re.MULTILINE))


def test_the_readme_table_names_every_session_and_only_those():
    assert {row.split(" -- ")[0] for row in readme_rows()} == noxfile_sessions()
    assert set(readme_rows()) == set(RUNS), "each README row needs a way to run here"


@pytest.fixture(scope="module")
def clone():
    """A fresh clone shared by the sessions (build-cpu's dist/ serves the later ones)."""
    where = Path(tempfile.mkdtemp(prefix="opforge-nox-sessions-"))
    yield fresh_clone(where / "clone")
    shutil.rmtree(where, ignore_errors=True)


def _environment() -> dict[str, str]:
    """This environment less the venv running the tests: nox starts from the plain machine."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not Path(p, "activate").is_file()
    )
    return env


@pytest.mark.parametrize("row", readme_rows())
def test_session_works_from_a_fresh_clone(clone, row):
    session, _, readme_args = row.partition(" -- ")
    how = RUNS[row]
    command = [sys.executable, "-m", "nox", "-s", session, "--envdir", str(clone / ".nox")]
    if how.install_only:
        command.append("--install-only")
    posargs = [*readme_args.split(), *how.posargs]
    if posargs:
        command += ["--", *posargs]
    venv = clone / ".nox" / session
    try:
        result = subprocess.run(
            command, cwd=clone, capture_output=True, text=True, env=_environment(), check=False
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        if how.then:
            used = subprocess.run(
                [str(venv / "bin" / "opforge"), *how.then],
                cwd=clone,
                capture_output=True,
                text=True,
                env=_environment(),
                check=False,
            )
            assert used.returncode == 0, used.stderr
            assert used.stdout.startswith("usage: opforge")
    finally:
        # One session's venv at a time: those with torch and MindSpore take gigabytes each.
        shutil.rmtree(venv, ignore_errors=True)
