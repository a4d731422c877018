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
    """Build every target's GPU profile (CUDA via the nvcc found on this machine) into dist/gpu."""
    session.install(".[build]")
    session.run("opforge", "build", "--profile", "gpu", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite against the installed package; gpu/docker/mindspore tests skip with a reason."""
    session.install(".[dev]")
    session.run("pytest", *session.posargs)


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
