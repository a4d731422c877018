"""Builds and recipe tests in containers: the devel image builds, the runtime image tests."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opforge.build.dist import dist_wheels
from opforge.container.run import ContainerRun, require_volume_name
from opforge.dockerengine import docker_client
from opforge.handoff import Handoff
from opforge.images.build import BuiltImage
from opforge.images.service import ImageOptions, ensure_image, image_spec
from opforge.pins.fetch import Fetcher
from opforge.project import Project
from opforge.recipe_tests import junit_args, junit_dir_ready
from opforge.settings import Settings

_SITE = "/tmp/opforge-site"


@dataclass
class Workspace:
    """What a containerised job works with: the project, the fetcher (and its cache), the
    settings (proxies, pip's cache volume) and the image options; ``say`` takes progress lines."""

    project: Project
    fetcher: Fetcher
    settings: Settings
    options: ImageOptions
    say: Callable[[str], None] = print

    def __post_init__(self) -> None:
        require_volume_name(self.settings.pip_cache_volume)  # before any image is built
        self.client = docker_client(instead="use --runner host")

    def image(self, kind: str) -> BuiltImage:
        """``kind``'s image for the options, built first if there is none."""
        spec = image_spec(self.project, kind, self.options)
        return ensure_image(
            self.project,
            self.fetcher,
            spec,
            proxies=self.settings.proxies,
            say=self.say,
            client=self.client,
        )

    def container(self, image: str, mounts: tuple[Path, ...] = ()) -> ContainerRun:
        """Commands in containers of ``image`` with the project, cache and ``mounts`` mounted."""
        return ContainerRun(
            self.client,
            image,
            self.project.root,
            self.fetcher.cache.root,
            self.settings.pip_cache_volume,
            self.settings.proxies,
            say=self.say,
            mounts=mounts,
        )


def build_command(
    handoff: Handoff, targets: list[str], profile: str, jobs: int | None, quiet: bool
) -> list[str]:
    """The ``opforge build`` the container runs (host runner inside), handed ``handoff``."""
    argv = ["python", "-m", "opforge", "--handoff", handoff.to_json(), "build", *targets]
    argv += ["--profile", profile, "--runner", "host"]
    if jobs:
        argv += ["--jobs", str(jobs)]
    if quiet:
        argv.append("--quiet")
    return argv


def test_command(project_root: Path, wheels: list[Path], command: list[str]) -> list[str]:
    """Install the dist wheels into a scratch site, then run a recipe's test command."""
    install = ["python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", _SITE]
    script = (
        (shlex.join([*install, *map(str, wheels)]) + " && " if wheels else "")
        + f"export PYTHONPATH={shlex.quote(str(project_root / 'src'))}:{_SITE} && "
        + shlex.join([*command, "-p", "no:cacheprovider"])
    )
    return ["sh", "-c", script]


def build_in_container(
    work: Workspace, targets: list[str], profile: str, jobs: int | None, quiet: bool
) -> str:
    """``opforge build`` inside the devel image (built first if needed); returns the image tag."""
    image = work.image("devel").tag
    work.say(f"[docker] building in {image}")
    project = work.project
    handoff = Handoff(
        project=project.root,
        cache_dir=work.fetcher.cache.root,
        # The container's build trees (CMake caches with its compiler paths) stay apart from
        # the host's.
        build_dir=project.build_dir / "container" / image.rsplit("-", 1)[-1],
        image=image,
    )
    work.container(image).run(
        build_command(handoff, targets, profile, jobs, quiet),
        {"PYTHONPATH": str(project.root / "src")},
        f"opforge build --profile {profile}",
    )
    return image


def test_in_container(
    work: Workspace, targets: list[str], profile: str, junit_dir: Path | None = None
) -> str:
    """Each target's recipe test command in the runtime image, against its dist wheels."""
    project = work.project
    book = project.load_recipes(project.load_pins())
    recipes = [book.get(t) for t in targets] if targets else book.order([])
    image = work.image("runtime").tag
    # Targets without wheels (the kernel library) test through opforge.kernels.abi; a recorded
    # wheel that is missing or changed is an error, not a wheel left out.
    wheels = dist_wheels(project, profile, none_ok=True)
    mounts: tuple[Path, ...] = ()
    if junit_dir is not None:
        junit_dir = junit_dir_ready(junit_dir)
        mounts = (junit_dir,)
    run = work.container(image, mounts)
    for recipe in recipes:
        if recipe.test is None:
            continue
        work.say(f"[{recipe.name}] test in {image}: {shlex.join(recipe.test.command)}")
        command = list(recipe.test.command)
        if junit_dir is not None:
            command += junit_args(junit_dir, recipe)
        run.run(
            test_command(project.root, wheels, command),
            # The tests use the profile's artefacts in dist/: the runtime image has no compiler.
            {"OPFORGE_TEST_DIST": profile},
            f"tests of {recipe.name}",
        )
    return image
