"""Build steps and their execution as subprocesses of this machine.

A build is a sequence of steps (configure, build, install), each a command line; the engine hands
them to a step runner. Each step runs in a process group of its own, and when opforge is interrupted (SIGINT) or
terminated (SIGTERM, SIGHUP, SIGQUIT) while a step runs, the whole group (cmake, ninja, the compilers they
started) is stopped before opforge exits: nothing keeps building into a tree nobody owns. Killed
outright (SIGKILL), opforge cannot; a watcher process (``opforge.build.orphan_guard``) then does.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from opforge.build.orphan_guard import DONE
from opforge.build.sessions import stop_session
from opforge.errors import BuildError
from opforge.logtail import LogTail

_GRACE_S = 5.0


@dataclass(frozen=True)
class Step:
    """One command of a build: a short name for progress output, argv, cwd and extra env."""

    name: str
    argv: tuple[str, ...]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)


class Runner(Protocol):
    """Something that can execute build steps and say where it runs them."""

    name: str

    def run(self, step: Step, log_path: Path) -> None:
        """Run ``step``, teeing its output to ``log_path``; raise ``BuildError`` on failure."""
        ...


class Terminated(KeyboardInterrupt):
    """SIGTERM, SIGHUP (the terminal closed) or SIGQUIT arrived; handled as an interruption, so
    the CLI ends with one line, no traceback, and the shell's status for the signal."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum


class HostRunner:
    """Runs steps directly on this machine, streaming their output."""

    name = "host"

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.echo = echo if echo is not None else _print_to(sys.stdout)

    def run(self, step: Step, log_path: Path) -> None:
        """Run ``step``; on failure raise ``BuildError`` with the command and the log's tail."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **step.env}
        tail = LogTail()
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {shlex.join(step.argv)}\n")
            log.flush()
            with _Interrupts() as interrupts:
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
                with _orphan_guard(proc.pid):
                    try:
                        interrupts.arm()
                        for line in proc.stdout:
                            log.write(line)
                            tail.add(line)
                            self.echo(line.rstrip("\n"))
                        code = proc.wait()
                    except BaseException:
                        # A second Ctrl-C must not cut the stop short, before its SIGKILL.
                        interrupts.hold()
                        _stop_group(proc)
                        raise
        if code != 0:
            raise BuildError(
                f"step {step.name} failed (exit {code}): {shlex.join(step.argv)}",
                hint=f"the full log is {log_path}",
                details=tail.details(f"last lines of {log_path}"),
            )


class _Interrupts:
    """SIGINT, SIGTERM, SIGHUP and SIGQUIT while a step starts and runs: until ``arm`` (the
    step's process exists) they are held, then raised; after it, raised at once
    (``KeyboardInterrupt``, ``Terminated``). By default the others would end opforge at once,
    leaving the step's processes running (the step is in a session of its own, so a closed
    terminal's SIGHUP reaches only opforge). Only the main thread may install handlers; elsewhere
    the defaults stay."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def __init__(self) -> None:
        self.armed = False
        self.pending: int | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self._handle) for sig in self._SIGNALS}
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if self.pending is not None and not self.armed:
            self._raise(self.pending)  # the step never started; the interruption still stands

    def _handle(self, signum: int, _frame: object) -> None:
        if self.armed:
            self._raise(signum)
        self.pending = signum

    def hold(self) -> None:
        """From now on an interruption is held until the block ends, as before ``arm``."""
        self.armed = False

    def arm(self) -> None:
        """From now on an interruption is raised; one that came meanwhile is raised now."""
        self.armed = True
        if self.pending is not None:
            self._raise(self.pending)

    @staticmethod
    def _raise(signum: int) -> None:
        raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop everything the step started (``stop_session``), then reap the step's process. The
    leader is reaped last: as a zombie it keeps its pid, the session's id, from being reused."""
    stop_session(proc.pid, _GRACE_S)
    proc.wait()


# The watcher's program. sys.path's first entry, the working directory, goes first: its own
# opforge/, should it hold one, is not this one (python -P does that from 3.11 on only).
_GUARD = (
    "import sys; del sys.path[0]; from opforge.build.orphan_guard import main; "
    "sys.exit(main(sys.argv[1:]))"
)


@contextlib.contextmanager
def _orphan_guard(session: int) -> Iterator[None]:
    """A watcher (``opforge.build.orphan_guard``) that stops the step's session should opforge
    die without doing so; told when the step is over. In a session of its own, so the
    terminal's signals do not end it first. Where no process can be started for it, the step
    runs without one, as it did before watchers."""
    try:
        guard = subprocess.Popen(
            [sys.executable, "-c", _GUARD, str(session)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        yield
        return
    assert guard.stdin is not None
    try:
        yield
    finally:
        # The step is over, and a stop of it ran to its end (interrupts are held through it):
        # what is left of its session, a compiler-cache server say, is not the watcher's.
        with contextlib.suppress(OSError):
            guard.stdin.write(DONE)
            guard.stdin.close()
        guard.wait()


def _print_to(stream: TextIO) -> Callable[[str], None]:
    def echo(line: str) -> None:
        print(line, file=stream, flush=True)

    return echo
