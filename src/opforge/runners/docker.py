"""The docker runner: a whole `opforge build` (or a recipe's tests) inside an opforge image.

The build runs in the devel image as `opforge build --runner host`, so tool discovery, input
fingerprints and the manifest describe the environment the compilers actually ran in. The
source tree and the download cache are bind-mounted at their host paths, the pip cache is a
named volume, the container runs as the invoking user (outputs are not root-owned), proxies
are passed as environment (never baked into the image), and GPUs are passed through when the
engine has the NVIDIA runtime.
"""

from __future__ import annotations

import collections
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from opforge.errors import BuildError
from opforge.proxies import proxy_environment, uses_loopback

_TAIL_LINES = 30
PIP_CACHE_VOLUME = "opforge-pip-cache"


def pip_cache_volume() -> str:
    """The named volume for pip's cache: OPFORGE_PIP_CACHE_VOLUME (tests use their own), else
    ``opforge-pip-cache``."""
    return os.environ.get("OPFORGE_PIP_CACHE_VOLUME") or PIP_CACHE_VOLUME


@dataclass
class ContainerRun:
    """One command in a container of ``image`` with the project and cache mounted."""

    client: object
    image: str
    project_root: Path
    cache_dir: Path
    user: str = field(default_factory=lambda: f"{os.getuid()}:{os.getgid()}")
    say: Callable[[str], None] = print
    # More folders the command writes to, mounted at their own paths (e.g. a JUnit folder
    # outside the project: written only inside the container, its reports would be lost).
    mounts: tuple[Path, ...] = ()

    def gpu_requests(self) -> list:
        """A request for every GPU when the engine has the NVIDIA runtime, else none."""
        import docker

        runtimes = self.client.info().get("Runtimes", {})
        if "nvidia" not in runtimes:
            return []
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]

    def run(self, argv: list[str], env: dict[str, str], what: str) -> None:
        """Run ``argv``, streaming its output; raise BuildError with the tail on failure."""
        root = str(self.project_root)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        proxies = proxy_environment()
        environment = {
            "HOME": "/tmp",
            "PIP_CACHE_DIR": "/var/cache/opforge-pip",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OPFORGE_CACHE": str(self.cache_dir),
            **proxies,
            **env,
        }
        volumes = {
            root: {"bind": root, "mode": "rw"},
            str(self.cache_dir): {"bind": str(self.cache_dir), "mode": "rw"},
            pip_cache_volume(): {"bind": "/var/cache/opforge-pip", "mode": "rw"},
            **{str(m): {"bind": str(m), "mode": "rw"} for m in self.mounts},
        }
        self._ensure_pip_cache()
        container = self.client.containers.run(
            self.image,
            argv,
            detach=True,
            user=self.user,
            working_dir=root,
            environment=environment,
            volumes=volumes,
            network_mode="host" if uses_loopback(proxies) else None,
            device_requests=self.gpu_requests() or None,
        )
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        try:
            for chunk in container.logs(stream=True, follow=True):
                for line in chunk.decode("utf-8", "replace").splitlines():
                    tail.append(line)
                    self.say(line)
            code = container.wait().get("StatusCode", 1)
        finally:
            container.remove(force=True)
        if code != 0:
            shown = "\n".join(f"    {line}" for line in tail)
            raise BuildError(
                f"{what} failed in container {self.image} (exit {code}): {shlex.join(argv)}\n"
                f"  last lines:\n{shown}",
                hint="the lines above come from inside the container; "
                "`--runner host` runs the same steps here",
            )

    def _ensure_pip_cache(self) -> None:
        # A named volume is created root-owned: open it up once so any build user can write.
        from docker.errors import NotFound

        volume = pip_cache_volume()
        try:
            self.client.volumes.get(volume)
            return
        except NotFound:
            pass
        self.client.volumes.create(volume)
        self.client.containers.run(
            self.image,
            ["chmod", "1777", "/var/cache/opforge-pip"],
            user="0:0",
            volumes={volume: {"bind": "/var/cache/opforge-pip", "mode": "rw"}},
            remove=True,
        )


def build_command(targets: list[str], profile: str, jobs: int | None, quiet: bool) -> list[str]:
    """The `opforge build` the container runs (host runner inside)."""
    argv = ["python", "-m", "opforge", "build", *targets, "--profile", profile, "--runner", "host"]
    if jobs:
        argv += ["--jobs", str(jobs)]
    if quiet:
        argv.append("--quiet")
    return argv


def test_command(project_root: Path, wheels: list[Path], command: list[str]) -> list[str]:
    """Install the dist wheels into a scratch site, then run a recipe's test command."""
    site = "/tmp/opforge-site"
    install = ["python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site]
    script = (
        (shlex.join([*install, *map(str, wheels)]) + " && " if wheels else "")
        + f"export PYTHONPATH={shlex.quote(str(project_root / 'src'))}:{site} && "
        + shlex.join([*command, "-p", "no:cacheprovider"])
    )
    return ["sh", "-c", script]


def docker_available() -> str | None:
    """None when a Docker engine answers here, else why not (for `--runner auto`)."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.close()
    except Exception as exc:  # any failure means: no engine to use
        return f"no Docker engine answers ({type(exc).__name__})"
    return None


def build_in_container(
    project,
    fetcher,
    options,
    targets: list[str],
    profile: str,
    jobs: int | None,
    quiet: bool,
    say: Callable[[str], None] = print,
) -> str:
    """`opforge build` inside the devel image (built first if needed); returns the image tag."""
    from opforge.images.build import docker_client
    from opforge.images.service import ensure_image, image_spec

    client = docker_client()
    spec = image_spec(project, "devel", options)
    image = ensure_image(project, fetcher, spec, say, client=client).tag
    say(f"[docker] building in {image}")
    # The container's build trees (CMake caches with its compiler paths) stay apart from the host's.
    env = {
        "OPFORGE_IMAGE": image,
        "PYTHONPATH": str(project.root / "src"),
        "OPFORGE_BUILD_DIR": str(project.build_dir / "container" / image.rsplit("-", 1)[-1]),
    }
    run = ContainerRun(client, image, project.root, fetcher.cache.root, say=say)
    run.run(build_command(targets, profile, jobs, quiet), env, f"opforge build --profile {profile}")
    return image


def test_in_container(
    project,
    fetcher,
    options,
    targets: list[str],
    profile: str,
    say: Callable[[str], None] = print,
    junit_dir: Path | None = None,
) -> str:
    """Each target's recipe test command in the runtime image, against its dist wheels."""
    from opforge.build.dist import dist_wheels
    from opforge.images.build import docker_client
    from opforge.images.service import ensure_image, image_spec

    client = docker_client()
    book = project.load_recipes(project.load_pins())
    recipes = [book.get(t) for t in targets] if targets else book.order([])
    image = ensure_image(
        project, fetcher, image_spec(project, "runtime", options), say, client=client
    )
    try:
        wheels = dist_wheels(project, profile)
    except BuildError:
        wheels = []  # targets without wheels (the kernel library) test through opforge.kernels.abi
    mounts = ()
    if junit_dir is not None:
        junit_dir.mkdir(parents=True, exist_ok=True)
        mounts = (junit_dir.resolve(),)
    run = ContainerRun(client, image.tag, project.root, fetcher.cache.root, say=say, mounts=mounts)
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
