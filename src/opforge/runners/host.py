"""The host runner: build steps as subprocesses of this machine."""

from __future__ import annotations

import collections
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from opforge.errors import BuildError
from opforge.runners.base import Step

_TAIL_LINES = 25


class HostRunner:
    """Runs steps directly on this machine, streaming their output."""

    name = "host"

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.echo = echo if echo is not None else _print_to(sys.stdout)

    def run(self, step: Step, log_path: Path) -> None:
        """Run ``step``; on failure raise ``BuildError`` with the command and the log's tail."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **step.env}
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(step.argv)}\n")
            log.flush()
            try:
                proc = subprocess.Popen(
                    step.argv,
                    cwd=step.cwd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                )
            except OSError as exc:
                raise BuildError(
                    f"step {step.name}: cannot start {step.argv[0]}: {exc.strerror}",
                    hint="check that the tool is installed and on PATH",
                ) from None
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                self.echo(line.rstrip("\n"))
            code = proc.wait()
        if code != 0:
            shown = "\n".join(f"    {line}" for line in tail)
            raise BuildError(
                f"step {step.name} failed (exit {code}): {shlex.join(step.argv)}\n"
                f"  last lines of {log_path}:\n{shown}",
                hint=f"the full log is {log_path}",
            )


def _print_to(stream: TextIO) -> Callable[[str], None]:
    def echo(line: str) -> None:
        print(line, file=stream, flush=True)

    return echo
