"""Runners execute build steps: on the host, or (docker) a whole build inside an image."""

from __future__ import annotations

from collections.abc import Callable

from opforge.runners.base import Runner, Step
from opforge.runners.docker import docker_available
from opforge.runners.host import HostRunner

RUNNER_CHOICES = ("auto", "host", "docker")


def resolve_runner(name: str) -> tuple[str, str]:
    """(runner, why) for ``name``: ``auto`` is docker when an engine answers here, else host."""
    if name != "auto":
        return name, "as asked"
    missing = docker_available()
    if missing is None:
        return "docker", "auto: a Docker engine answers"
    return "host", f"auto: {missing}"


def select_runner(name: str, echo: Callable[[str], None] | None = None) -> Runner:
    """The step runner for host builds (docker builds run a host build inside a container)."""
    if name != "host":
        raise ValueError(f"select_runner: {name!r} is not a step runner")
    return HostRunner(echo=echo)


__all__ = ["RUNNER_CHOICES", "HostRunner", "Runner", "Step", "resolve_runner", "select_runner"]
