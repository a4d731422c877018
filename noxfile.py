"""nox sessions: each one installs opforge and calls it; the logic lives in the package."""

from __future__ import annotations

import runpy
from pathlib import Path

import nox

nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests"]

# The framework versions live in one file of the package; it imports nothing, so it is read by
# path here, where opforge is not installed. TORCH: a CPU build (the GPU sessions use the
# host's torch); MINDSPORE: with the NumPy 1.x it is built against.
_FRAMEWORKS = runpy.run_path(str(Path(__file__).parent / "src" / "opforge" / "frameworks.py"))
TORCH: str = _FRAMEWORKS["TORCH"]
MINDSPORE: tuple[str, ...] = _FRAMEWORKS["MINDSPORE"]
# The quick lane: every test but those needing images (docker, devcontainer) and the slow ones.
QUICK_LANE = "not docker and not slow"


@nox.session(name="build-cpu")
def build_cpu(session: nox.Session) -> None:
    """Build every target's CPU profile into dist/cpu (host runner), adapter wheels into dist/."""
    session.install(".[build]", TORCH)
    session.run("opforge", "build", "--profile", "cpu", *session.posargs)


# GPU hosts bring CUDA, cuDNN and a CUDA build of torch; the GPU sessions see them through the
# system site-packages instead of downloading another torch.
@nox.session(name="build-gpu", venv_params=["--system-site-packages"])
def build_gpu(session: nox.Session) -> None:
    """Build every target's GPU profile into dist/gpu: inside the devel image when a Docker engine
    answers (`--runner auto`), else with the nvcc found here and the pinned cuDNN."""
    session.install(".[build]")
    session.run("opforge", "pins", "install", "nvidia-cudnn-cu13")
    session.run("opforge", "build", "--profile", "gpu", "--runner", "auto", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite against the installed packages; gpu/docker/mindspore tests skip with a reason.

    The pinned cuDNN wheel goes into the session so the GPU profile compiles and links here too;
    the CPU build's adapter wheels are installed, so their tests exercise what users install.
    torch and MindSpore share the session, so the parity tests run here too.
    `nox -s tests -- --runner docker` instead builds the CPU profile in the devel image and runs
    the recipes' tests in the runtime image.
    """
    if session.posargs[:2] == ["--runner", "docker"]:
        session.install(".")
        session.run("opforge", "build", "--profile", "cpu", "--runner", "docker", "--quiet")
        session.run("opforge", "test", "--profile", "cpu", "--runner", "docker")
        return
    _with_cpu_wheels(session)
    session.run("opforge", "pins", "install", "nvidia-cudnn-cu13")
    session.run("pytest", *session.posargs)


@nox.session
def quick(session: nox.Session) -> None:
    """The quick lane: the test suite without the docker, devcontainer and slow tests (and without
    the cuDNN download they need)."""
    _with_cpu_wheels(session)
    session.run("pytest", "-m", QUICK_LANE, *session.posargs)


@nox.session
def parity(session: nox.Session) -> None:
    """The conformance cases through opforge.torch and opforge.mindspore agree element for element."""
    _with_cpu_wheels(session)
    session.run("pytest", "tests/parity", *session.posargs)


def _with_cpu_wheels(session: nox.Session) -> None:
    """opforge with its test tools, torch and MindSpore, and the CPU build's adapter wheels
    installed as users install them."""
    session.install(".[dev]", TORCH, *MINDSPORE)
    session.run("opforge", "build", "--profile", "cpu", "--quiet")
    session.run("opforge", "dist", "install", "--profile", "cpu")


@nox.session(name="test-gpu", venv_params=["--system-site-packages"])
def test_gpu(session: nox.Session) -> None:
    """Build the gpu profile and run the GPU tests (conformance through the C ABI on the device)."""
    session.install(".[dev]")
    session.run("opforge", "build", "--profile", "gpu")
    session.run("opforge", "dist", "install", "--profile", "gpu")
    session.run(
        "pytest",
        "-m",
        "gpu",
        "tests/kernels",
        "tests/torch_adapter",
        "tests/mindspore_aot",
        *session.posargs,
    )


@nox.session(name="bench-gpu", venv_params=["--system-site-packages"])
def bench_gpu(session: nox.Session) -> None:
    """Time every op against torch on the GPU; writes bench/results/<device>-<date>.json."""
    session.install(".[build]")
    session.run("opforge", "build", "--profile", "gpu")
    session.run("opforge", "dist", "install", "--profile", "gpu")
    session.run("python", "bench/gpu.py", *session.posargs)
    session.run("python", "bench/torch_overhead.py", "--device", "cuda")


@nox.session
def images(session: nox.Session) -> None:
    """Build the devel and runtime images (`nox -s images -- --flavour ngc --cuda 12.4` etc.)."""
    session.install(".")
    for kind in ("devel", "runtime"):
        session.run("opforge", "images", "build", "--kind", kind, *session.posargs)


@nox.session(name="ci-matrix")
def ci_matrix(session: nox.Session) -> None:
    """Render .github/workflows/nightly.yml from ci/matrix.yaml (`-- --check` only checks)."""
    session.install(".")
    session.run("opforge", "ci", "render", *session.posargs)


@nox.session
def pins(session: nox.Session) -> None:
    """`nox -s pins` lists the pins; `nox -s pins -- verify|fetch|update NAME` runs that action."""
    session.install(".")
    session.run("opforge", "pins", *(session.posargs or ["list"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting check."""
    session.install("ruff")
    session.run("ruff", "check", "src", "tests", "bench", "adapters", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "bench", "adapters", "noxfile.py")


@nox.session(name="bench-torch")
def bench_torch(session: nox.Session) -> None:
    """Per-call overhead of opforge.torch ops against torch's on the CPU; saved to bench/results/."""
    session.install(".[build]", TORCH)
    session.run("opforge", "build", "torch-adapter", "--profile", "cpu", "--quiet")
    session.run("opforge", "dist", "install", "torch-adapter", "--profile", "cpu")
    session.run("python", "bench/torch_overhead.py", "--device", "cpu", *session.posargs)


@nox.session(name="bench-mindspore")
def bench_mindspore(session: nox.Session) -> None:
    """Per-call time of opforge.mindspore.add against MindSpore's ops.add, PYNATIVE and GRAPH."""
    session.install(".[build]", *MINDSPORE)
    session.run("opforge", "build", "mindspore-adapter", "--profile", "cpu", "--quiet")
    session.run("opforge", "dist", "install", "mindspore-adapter", "--profile", "cpu")
    session.run("python", "bench/mindspore_overhead.py", *session.posargs)


@nox.session(name="bench-core")
def bench_core(session: nox.Session) -> None:
    """Hashing throughput of `pins verify` and full / no-op build times; saved to bench/results/."""
    session.install(".[build]")
    session.run("python", "bench/core.py", *session.posargs)
