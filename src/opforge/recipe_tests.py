"""Running recipes' test commands on the host, with the interpreter running opforge."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from opforge.dirs import make_dirs
from opforge.errors import OpforgeError
from opforge.project import Project
from opforge.recipes.model import Recipe


class RecipeTestUnavailable(OpforgeError):
    """A recipe's test command cannot start here (its program or Python module is missing)."""


def runnable_test_command(recipe: Recipe) -> list[str]:
    """The recipe's test command, ready to run: ``python`` means the interpreter running opforge
    (the one the adapters were installed into), and a ``python -m MODULE`` whose module is not
    installed there is refused with the fix, rather than left to fail with Python's own message.
    """
    assert recipe.test is not None
    argv = list(recipe.test.command)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    if argv[0] == sys.executable and len(argv) > 2 and argv[1] == "-m":
        module = argv[2]
        if importlib.util.find_spec(module) is None:
            raise RecipeTestUnavailable(
                f"target {recipe.name}: its tests need the python module {module}, which is not "
                f"installed in {sys.executable}",
                hint=f"{sys.executable} -m pip install {module} (or pip install 'opforge[dev]')",
            )
    elif shutil.which(argv[0]) is None:
        raise RecipeTestUnavailable(
            f"target {recipe.name}: test command {argv[0]!r} not found on PATH",
            hint=f"install it, or fix test.command in {recipe.path}",
        )
    return argv


def junit_dir_ready(junit_dir: Path) -> Path:
    """``--junit-dir``, created if missing and made absolute: the reports are written there
    whatever the test command's working directory (the project root, or a container's)."""
    return make_dirs(junit_dir, hint="give --junit-dir a directory").resolve()


def junit_args(junit_dir: Path, recipe: Recipe) -> list[str]:
    """What the recipe's pytest command is given to write its JUnit report,
    ``<junit_dir>/<target>.xml``: the same file whichever runner ran the tests."""
    return ["--junitxml", str(junit_dir / f"{recipe.name}.xml")]


def run_host_tests(
    project: Project,
    targets: list[str],
    profile: str | None = None,
    junit_dir: Path | None = None,
) -> int:
    """Run the test command of ``targets`` (all when empty) in the project root, in dependency
    order; stop at the first failure and return its exit status.

    ``profile``: the tests use what that profile's build left in dist/ (``OPFORGE_TEST_DIST``, as
    in the runtime image); None: they build what they test themselves. ``junit_dir``: each
    target's pytest writes its JUnit report there (``junit_args``), as with the docker runner."""
    # The test processes inherit this environment, as build steps do (build.steps).
    env = None if profile is None else {**os.environ, "OPFORGE_TEST_DIST": profile}
    book = project.load_recipes(project.load_pins())
    recipes = [book.get(t) for t in targets] if targets else book.order([])
    commands = [
        (recipe, runnable_test_command(recipe)) for recipe in recipes if recipe.test is not None
    ]
    if junit_dir is not None:
        junit_dir = junit_dir_ready(junit_dir)
        commands = [(recipe, argv + junit_args(junit_dir, recipe)) for recipe, argv in commands]
    for recipe, argv in commands:
        print(f"[{recipe.name}] test: {' '.join(recipe.test.command)}", flush=True)
        code = subprocess.run(argv, cwd=project.root, env=env, check=False).returncode
        if code != 0:
            return code
    return 0
