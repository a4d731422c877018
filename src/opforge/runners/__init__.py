"""Runners execute build steps: on the host now; in containers with the images issue."""

from __future__ import annotations

from collections.abc import Callable

from opforge.runners.base import Runner, Step
from opforge.runners.host import HostRunner

_RUNNERS: dict[str, Callable[..., Runner]] = {"host": HostRunner}
RUNNER_CHOICES = ("auto", *_RUNNERS)


def select_runner(name: str, echo: Callable[[str], None] | None = None) -> Runner:
    """The runner called ``name``; ``auto`` picks the best one available here.

    The host runner is the only one so far, so ``auto`` means host.
    """
    return _RUNNERS["host" if name == "auto" else name](echo=echo)


__all__ = ["RUNNER_CHOICES", "HostRunner", "Runner", "Step", "select_runner"]
