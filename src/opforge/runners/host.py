"""The host runner: build steps as subprocesses of this machine.

Each step runs in a process group of its own, and when opforge is interrupted (SIGINT) or
terminated (SIGTERM) while a step runs, the whole group (cmake, ninja, the compilers they
started) is stopped before opforge exits: nothing keeps building into a tree nobody owns.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from opforge.errors import BuildError
from opforge.runners.base import Step

_TAIL_LINES = 25
_GRACE_S = 5.0


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; handled as an interruption, so the CLI ends with one line, no traceback."""


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
                    start_new_session=True,
                )
            except OSError as exc:
                raise BuildError(
                    f"step {step.name}: cannot start {step.argv[0]}: {exc.strerror}",
                    hint="check that the tool is installed and on PATH",
                ) from None
            assert proc.stdout is not None
            try:
                with _sigterm_interrupts():
                    for line in proc.stdout:
                        log.write(line)
                        tail.append(line.rstrip("\n"))
                        self.echo(line.rstrip("\n"))
                    code = proc.wait()
            except BaseException:
                _stop_group(proc)
                raise
        if code != 0:
            shown = "\n".join(f"    {line}" for line in tail)
            raise BuildError(
                f"step {step.name} failed (exit {code}): {shlex.join(step.argv)}\n"
                f"  last lines of {log_path}:\n{shown}",
                hint=f"the full log is {log_path}",
            )


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While a step runs, SIGTERM raises ``Terminated`` (by default it would end opforge at once,
    leaving the step's processes running). Only the main thread may install handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum: int, _frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's process group, then SIGKILL to whatever is left after a grace
    period (the leader may be gone while what it started is not)."""
    _signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_GRACE_S)
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _print_to(stream: TextIO) -> Callable[[str], None]:
    def echo(line: str) -> None:
        print(line, file=stream, flush=True)

    return echo
