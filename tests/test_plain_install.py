"""`pip install .` alone (no extras) gives an opforge whose every command starts: --help of each,
the commands that do not build, and one-line errors where a build extra is missing."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from opforge.cli import build_parser
from tests.fresh_clone import fresh_clone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plain():
    """(opforge executable, clone): a fresh clone installed with `pip install .` in a fresh venv."""
    where = Path(tempfile.mkdtemp(prefix="opforge-plain-install-"))
    clone = fresh_clone(where / "clone")
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    python = where / "venv" / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(clone)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    yield where / "venv" / "bin" / "opforge", clone
    shutil.rmtree(where, ignore_errors=True)


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple]:
    """Every command and subcommand of the CLI, e.g. ("pins", "fetch")."""
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += command_paths(sub, (*prefix, name))
    return paths


def run(opforge: Path, clone: Path, *args: str) -> subprocess.CompletedProcess:
    """``opforge ARGS`` from the venv, in the clone, with no other venv on PATH."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not Path(p, "activate").is_file()
    )
    return subprocess.run(
        [str(opforge), *args], cwd=clone, capture_output=True, text=True, env=env, check=False
    )


def test_every_command_has_help(plain):
    opforge, clone = plain
    paths = command_paths(build_parser())
    assert ("build",) in paths and ("pins", "fetch") in paths and ("dist", "install") in paths
    for path in paths:
        result = run(opforge, clone, *path, "--help")
        assert result.returncode == 0, (path, result.stderr)
        assert result.stdout.startswith("usage: opforge"), path


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("recipes", "list"),
        ("recipes", "validate"),
        ("pins", "list"),
        ("ci", "list"),
        ("ci", "render", "--check"),
        ("images", "list"),
        ("doctor",),
    ],
)
def test_commands_that_do_not_build_work(plain, args):
    opforge, clone = plain
    result = run(opforge, clone, *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_building_without_the_build_extra_is_one_clear_error(plain):
    opforge, clone = plain
    result = run(opforge, clone, "build", "--profile", "cpu")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("opforge: error: "), result.stderr
    assert "python package wheel is not installed" in lines[0] or "not found" in lines[0]
    assert all(line.startswith("  hint: ") for line in lines[1:]), result.stderr
    assert not (clone / "dist" / "build-record.json").exists(), "nothing was built"


def test_running_tests_without_pytest_is_one_clear_error(plain):
    opforge, clone = plain
    result = run(opforge, clone, "test", "kernels")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(
        "opforge: error: target kernels: its tests need the python module pytest"
    ), result.stderr
    assert "pip install pytest" in lines[1]
