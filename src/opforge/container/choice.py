"""Where a build or a recipe's tests run: ``host``, ``docker``, or ``auto`` (docker when an
engine answers here)."""

from __future__ import annotations

from opforge.dockerengine import engine_missing

RUNNER_CHOICES = ("auto", "host", "docker")


def resolve_runner(name: str) -> tuple[str, str]:
    """(runner, why) for ``name``: ``auto`` is docker when an engine answers here, else host."""
    if name != "auto":
        return name, "as asked"
    missing = engine_missing()
    if missing is None:
        return "docker", "auto: a Docker engine answers"
    return "host", f"auto: {missing}"
