"""Builds and recipe tests in containers: the devel image builds, the runtime image tests."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from opforge.build.dist import dist_wheels
from opforge.container.run import ContainerRun
from opforge.dockerengine import docker_client
from opforge.errors import BuildError
from opforge.handoff import Handoff
from opforge.images.service import ImageOptions, ensure_image, image_spec
from opforge.pins.fetch import Fetcher
from opforge.project import Project
from opforge.settings import Settings

_SITE = "/tmp/opforge-site"


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
    project: Project,
    fetcher: Fetcher,
    settings: Settings,
    options: ImageOptions,
    targets: list[str],
    profile: str,
    jobs: int | None,
    quiet: bool,
    say: Callable[[str], None] = print,
) -> str:
    """``opforge build`` inside the devel image (built first if needed); returns the image tag."""
    client = docker_client()
    spec = image_spec(project, "devel", options)
    image = ensure_image(
        project, fetcher, spec, proxies=settings.proxies, say=say, client=client
    ).tag
    say(f"[docker] building in {image}")
    handoff = Handoff(
        project=project.root,
        cache_dir=fetcher.cache.root,
        # The container's build trees (CMake caches with its compiler paths) stay apart from
        # the host's.
        build_dir=project.build_dir / "container" / image.rsplit("-", 1)[-1],
        image=image,
    )
    run = ContainerRun(
        client,
        image,
        project.root,
        fetcher.cache.root,
        settings.pip_cache_volume,
        settings.proxies,
        say=say,
    )
    run.run(
        build_command(handoff, targets, profile, jobs, quiet),
        {"PYTHONPATH": str(project.root / "src")},
        f"opforge build --profile {profile}",
    )
    return image


def test_in_container(
    project: Project,
    fetcher: Fetcher,
    settings: Settings,
    options: ImageOptions,
    targets: list[str],
    profile: str,
    say: Callable[[str], None] = print,
    junit_dir: Path | None = None,
) -> str:
    """Each target's recipe test command in the runtime image, against its dist wheels."""
    client = docker_client()
    book = project.load_recipes(project.load_pins())
    recipes = [book.get(t) for t in targets] if targets else book.order([])
    spec = image_spec(project, "runtime", options)
    image = ensure_image(project, fetcher, spec, proxies=settings.proxies, say=say, client=client)
    try:
        wheels = dist_wheels(project, profile)
    except BuildError:
        wheels = []  # targets without wheels (the kernel library) test through opforge.kernels.abi
    mounts = ()
    if junit_dir is not None:
        junit_dir.mkdir(parents=True, exist_ok=True)
        mounts = (junit_dir.resolve(),)
    run = ContainerRun(
        client,
        image.tag,
        project.root,
        fetcher.cache.root,
        settings.pip_cache_volume,
        settings.proxies,
        say=say,
        mounts=mounts,
    )
    for recipe in recipes:
        if recipe.test is None:
            continue
        say(f"[{recipe.name}] test in {image.tag}: {shlex.join(recipe.test.command)}")
        command = list(recipe.test.command)
        if junit_dir is not None:
            command += ["--junitxml", str(junit_dir.resolve() / f"{recipe.name}.xml")]
        run.run(
            test_command(project.root, wheels, command),
            # The tests use the profile's artefacts in dist/: the runtime image has no compiler.
            {"OPFORGE_TEST_DIST": profile},
            f"tests of {recipe.name}",
        )
    return image.tag
