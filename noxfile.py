"""nox sessions: each one installs opforge and calls it; the logic lives in the package."""

from __future__ import annotations

import nox

nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests"]


@nox.session(name="build-cpu")
def build_cpu(session: nox.Session) -> None:
    """Build every target's CPU profile into dist/cpu (host runner)."""
    session.install(".[build]")
    session.run("opforge", "build", "--profile", "cpu", *session.posargs)


@nox.session(name="build-gpu")
def build_gpu(session: nox.Session) -> None:
    """Build every target's GPU profile (the nvcc found here, the pinned cuDNN) into dist/gpu."""
    session.install(".[build]")
    session.run("opforge", "pins", "install", "nvidia-cudnn-cu13")
    session.run("opforge", "build", "--profile", "gpu", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite against the installed package; gpu/docker/mindspore tests skip with a reason.

    The pinned cuDNN wheel goes into the session so the GPU profile compiles and links here too.
    """
    session.install(".[dev]")
    session.run("opforge", "pins", "install", "nvidia-cudnn-cu13")
    session.run("pytest", *session.posargs)


# GPU hosts bring CUDA, cuDNN and a CUDA build of torch; the venv sees them through the system
# site-packages instead of downloading another torch.
@nox.session(name="test-gpu", venv_params=["--system-site-packages"])
def test_gpu(session: nox.Session) -> None:
    """Build the gpu profile and run the GPU tests (conformance through the C ABI on the device)."""
    session.install(".[dev]")
    session.run("opforge", "build", "--profile", "gpu")
    session.run("pytest", "-m", "gpu", "tests/kernels", *session.posargs)


@nox.session(name="bench-gpu", venv_params=["--system-site-packages"])
def bench_gpu(session: nox.Session) -> None:
    """Time every op against torch on the GPU; writes bench/results/<device>-<date>.json."""
    session.install(".[build]")
    session.run("opforge", "build", "--profile", "gpu")
    session.run("python", "bench/gpu.py", *session.posargs)


@nox.session
def pins(session: nox.Session) -> None:
    """`nox -s pins` lists the pins; `nox -s pins -- verify|fetch|update NAME` runs that action."""
    session.install(".")
    session.run("opforge", "pins", *(session.posargs or ["list"]))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting check."""
    session.install("ruff")
    session.run("ruff", "check", "src", "tests", "bench", "noxfile.py")
    session.run("ruff", "format", "--check", "src", "tests", "bench", "noxfile.py")


@nox.session(name="bench-core")
def bench_core(session: nox.Session) -> None:
    """Hashing throughput of `pins verify` and full / no-op build times; saved to bench/results/."""
    session.install(".[build]")
    session.run("python", "bench/core.py", *session.posargs)
