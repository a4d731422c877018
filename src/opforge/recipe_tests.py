"""Running recipes' test commands on the host, with the interpreter running opforge."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

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


def run_host_tests(project: Project, targets: list[str], profile: str | None = None) -> int:
    """Run the test command of ``targets`` (all when empty) in the project root, in dependency
    order; stop at the first failure and return its exit status.

    ``profile``: the tests use what that profile's build left in dist/ (``OPFORGE_TEST_DIST``, as
    in the runtime image); None: they build what they test themselves."""
    # The test processes inherit this environment, as build steps do (build.steps).
    env = None if profile is None else {**os.environ, "OPFORGE_TEST_DIST": profile}
    book = project.load_recipes(project.load_pins())
    recipes = [book.get(t) for t in targets] if targets else book.order([])
    commands = [
        (recipe, runnable_test_command(recipe)) for recipe in recipes if recipe.test is not None
    ]
    for recipe, argv in commands:
        print(f"[{recipe.name}] test: {' '.join(recipe.test.command)}", flush=True)
        code = subprocess.run(argv, cwd=project.root, env=env, check=False).returncode
        if code != 0:
            return code
    return 0
