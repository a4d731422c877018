"""The images and the docker runner against a real Docker engine (CI starts one).

The pip-flavour CUDA 13 devel and runtime images are built from a local base image (CI makes it
with debootstrap: no registry is reachable), then: the GPU profile compiles and links in devel,
the CPU profile builds in devel and its tests pass in runtime, a failing step inside a container
is reported with its command and log, proxies are used while building and absent from images.
The images, containers and volumes the tests create, and their temporary projects, are removed
when they end; nothing they did not create is touched (other users share the engine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opforge.images.build import BuiltImage, LayerLog, remove_built
from opforge.images.service import ensure_image, image_options, image_spec
from opforge.pins.cache import ContentCache
from opforge.pins.fetch import Fetcher
from opforge.project import Project
from opforge.settings import Settings, resolve_settings

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
from tests.conftest import BASE, run_opforge  # noqa: E402


def copy_project(dest: Path) -> Path:
    """A private copy of everything a containerised build and its tests read."""
    for name in ("kernels", "recipes", "adapters", "images", "src", "tests"):
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("checksums.yaml", "pyproject.toml"):
        shutil.copy(REPO / name, dest / name)
    return dest


def opforge(project: Path, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return run_opforge(*args, cwd=project, env={"BASE_IMAGE": BASE}, timeout=timeout)


class Created:
    """What the docker tests made on the shared engine, removed when they end: images a build
    created (never one that existed before, nor a layer another build now uses), and volumes."""

    def __init__(self, client) -> None:
        self.client = client
        self.tags: list[str] = []
        self.layers: list[str] = []
        self.containers: list[str] = []
        self.volumes: list[str] = []

    def image(self, built: BuiltImage) -> BuiltImage:
        """Keep a build's image for removal, if this build made it."""
        if built.built:
            self.tags.append(built.tag)
            self.layers += built.created
        return built

    def from_log(self, tag: str | None, output: str) -> None:
        """Keep what a build whose log (one command's output) is ``output`` made: its image
        ``tag`` (None: it failed), the other images its steps created, a failed step's container.
        """
        log = LayerLog()
        for line in output.splitlines():
            log.feed(line)
        if log.created and tag:  # an image found up to date was made by someone else
            self.tags.append(tag)
        self.layers += log.created
        self.containers += log.containers

    def from_record(self, images: dict) -> None:
        """Keep the images a cell's cell record says its run built."""
        for image in images.values():
            if image["created"]:
                self.tags.append(image["tag"])
                self.layers += image["created"]

    def remove(self) -> None:
        """Remove everything kept, newest first."""
        from docker.errors import NotFound

        remove_built(self.client, list(reversed(self.tags)), self.layers, self.containers)
        for name in self.volumes:
            with contextlib.suppress(NotFound):
                self.client.volumes.get(name).remove(force=True)


@contextlib.contextmanager
def created_on(client) -> Iterator[Created]:
    """A ``Created`` for a test module; with a pip-cache volume of its own, removed at the end."""
    created = Created(client)
    volume = f"opforge-test-pip-{uuid.uuid4().hex[:8]}"
    created.volumes.append(volume)
    previous = os.environ.get("OPFORGE_PIP_CACHE_VOLUME")
    os.environ["OPFORGE_PIP_CACHE_VOLUME"] = volume
    try:
        yield created
    finally:
        if previous is None:
            os.environ.pop("OPFORGE_PIP_CACHE_VOLUME", None)
        else:
            os.environ["OPFORGE_PIP_CACHE_VOLUME"] = previous
        created.remove()


@pytest.fixture(scope="module")
def created(client) -> Iterator[Created]:
    with created_on(client) as made:
        yield made


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Iterator[Project]:
    root = copy_project(tmp_path_factory.mktemp("docker-project"))
    yield Project(root, root / "checksums.yaml")
    shutil.rmtree(root, ignore_errors=True)


def settings() -> Settings:
    """The settings the CLI would resolve here now, on the tests' local base image."""
    return resolve_settings(os.environ, base_image=BASE)


@pytest.fixture(scope="module")
def fetcher() -> Fetcher:
    return Fetcher(ContentCache(settings().cache_dir))


def ensure(workspace: Project, fetcher: Fetcher, client, kind: str, **build_options):
    """``kind``'s image of the workspace, as ``opforge images build`` makes it."""
    spec = image_spec(workspace, kind, image_options(settings()))
    return ensure_image(
        workspace, fetcher, spec, proxies=settings().proxies, client=client, **build_options
    )


@pytest.fixture(scope="module")
def devel(client, workspace, fetcher, created) -> str:
    return created.image(ensure(workspace, fetcher, client, "devel")).tag


@pytest.fixture(scope="module")
def runtime(client, workspace, fetcher, created) -> str:
    return created.image(ensure(workspace, fetcher, client, "runtime")).tag


def sh(client, image: str, script: str) -> str:
    return client.containers.run(image, ["sh", "-c", script], remove=True).decode()


def test_devel_image_has_nvcc_and_findable_cudnn(client, devel):
    out = sh(
        client,
        devel,
        "nvcc --version && readlink -f /usr/local/cuda/lib64/libcudnn.so"
        " && test -e /usr/local/cuda/include/cudnn.h && echo cudnn-header-ok",
    )
    assert "release 13.0" in out
    assert "libcudnn.so.9" in out and "cudnn-header-ok" in out


def test_runtime_image_has_no_toolchain_and_no_build_context(client, runtime):
    out = sh(
        client,
        runtime,
        "command -v nvcc g++ cmake || echo no-toolchain; test -e /ctx || echo no-context;"
        " test -e /opt/opforge/etc/extra-ca.pem || echo no-extra-ca;"
        " readlink -f /usr/local/cuda/lib64/libcudnn.so; python -c 'import torch; print(torch.__version__)';"
        # MindSpore's libraries link OpenMP's runtime, which only g++ brought before.
        " ldconfig -p | grep -q 'libgomp.so.1 ' && echo has-libgomp",
    )
    assert "no-toolchain" in out and "no-context" in out and "no-extra-ca" in out
    assert "has-libgomp" in out
    assert "libcudnn.so.9" in out and "2.13.0" in out


def test_unchanged_image_is_not_rebuilt(client, workspace, fetcher, devel):
    started = time.monotonic()
    again = ensure(workspace, fetcher, client, "devel")
    assert again.tag == devel and not again.built
    print(f"warm devel check: {time.monotonic() - started:.1f}s")


def test_proxy_is_used_while_building_and_absent_from_the_image(
    client, workspace, fetcher, proxy, monkeypatch, created
):
    seen, url = proxy
    for name in ("HTTP_PROXY", "https_proxy"):
        monkeypatch.setenv(name, url)
    # The `system` stage without the layer cache: apt runs, through the loopback proxy (so the
    # build runs on the host network).
    built = created.image(
        ensure(workspace, fetcher, client, "devel", target="system", nocache=True)
    )
    assert any("deb.debian.org" in u for u in seen), seen[:5]
    image = client.images.get(built.tag)
    assert not any(url in e or "PROXY" in e.upper() for e in image.attrs["Config"].get("Env") or [])
    history = client.api.history(built.tag)
    assert not any(url in (h.get("CreatedBy") or "") for h in history)
    assert url not in sh(client, built.tag, "env; cat /etc/apt/apt.conf.d/* 2>/dev/null || true")


def test_outputs_are_owned_by_the_invoking_user(client, devel, tmp_path):
    from opforge.container.run import ContainerRun

    project = tmp_path / "owned"
    project.mkdir()
    project.chmod(0o777)  # the user's own checkout: writable by them
    run = ContainerRun(
        client,
        devel,
        project,
        tmp_path / "cache",
        settings().pip_cache_volume,
        user="1234:1234",
        say=lambda _: None,
    )
    run.run(["sh", "-c", "mkdir -p dist && touch dist/out"], {}, "touch")
    stat = (project / "dist" / "out").stat()
    assert (stat.st_uid, stat.st_gid) == (1234, 1234)
    # The container's pip cache is the tests' own volume, removed when they end.
    assert client.volumes.get(os.environ["OPFORGE_PIP_CACHE_VOLUME"]).name.startswith(
        "opforge-test-pip-"
    )


def test_gpu_profile_compiles_and_links_in_devel(workspace, devel):
    result = opforge(
        workspace.root,
        "build",
        "kernels",
        "mindspore-adapter",
        "torch-adapter",
        "--profile",
        "gpu",
        "--runner",
        "docker",
        "--quiet",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "runner: docker (as asked)" in result.stdout
    lib = workspace.root / "dist" / "gpu" / "lib" / "libopforge_kernels.so.0"
    aot = workspace.root / "dist" / "gpu" / "python" / "opforge" / "mindspore" / "_aot_cuda.so"
    assert lib.is_file() and aot.is_file()
    assert lib.stat().st_uid == os.getuid()
    # The stable-ABI torch adapter's GPU build needs no CUDA torch: the image's is a CPU build.
    wheels = sorted((workspace.root / "dist").glob("opforge_torch-*+gpu-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
    assert "opforge/torch/_C.so" in names and "opforge/torch/libopforge_kernels.so.0" in names


def test_cpu_build_in_devel_then_tests_in_runtime(workspace, devel, runtime, tmp_path):
    built = opforge(
        workspace.root,
        "build",
        "kernels",
        "torch-adapter",
        "--profile",
        "cpu",
        "--runner",
        "docker",
        "--quiet",
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    # A JUnit folder outside the project is mounted too (its reports were lost in the container).
    junit = tmp_path / "junit"
    tested = opforge(
        workspace.root,
        "test",
        "kernels",
        "torch-adapter",
        "--runner",
        "docker",
        "--junit-dir",
        str(junit),
    )
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert f"[kernels] test in {runtime}" in tested.stdout
    assert tested.stdout.count(" passed") >= 2
    assert sorted(p.name for p in junit.glob("*.xml")) == ["kernels.xml", "torch-adapter.xml"]


def test_a_failing_step_in_a_container_shows_its_command_and_log(tmp_path, devel):
    project = copy_project(tmp_path / "broken")
    source = project / "kernels" / "src" / "cpu" / "add.cpp"
    source.write_text(source.read_text() + "\nthis is not C++;\n")
    result = opforge(project, "build", "kernels", "--runner", "docker", "--quiet")
    shutil.rmtree(project)
    assert result.returncode == 1
    assert "step build failed" in result.stdout + result.stderr
    assert "add.cpp" in result.stdout + result.stderr and "error" in result.stdout + result.stderr
    assert "failed in container" in result.stderr
    assert "Traceback" not in result.stderr


def test_lock_reports_unpinned_ngc_bases_when_no_registry_answers(workspace):
    versions = workspace.root / "images" / "versions.yaml"
    before = versions.read_text()
    result = opforge(workspace.root, "images", "lock", timeout=300)
    if result.returncode == 0:  # a registry answered: every base is now pinned by digest
        assert "UNPINNED" not in result.stdout and "digest: null" not in versions.read_text()
        return
    assert "UNPINNED (no digest recorded)" in result.stdout
    assert "ngc base image(s) are not pinned by digest" in result.stderr
    assert versions.read_text() == before
