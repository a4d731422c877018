"""The ``opforge`` command line: one module per command group, each a thin layer over the
package; here the parser is assembled and errors become one readable line."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, TextIO

from opforge import __version__
from opforge.build.steps import Terminated
from opforge.cli import build, ci, doctor, images, pins, recipes
from opforge.cli.common import Command, err, path_text, settings_from
from opforge.errors import OpforgeError
from opforge.report import report

# In the order `--help` lists them.
GROUPS = (recipes, pins, build, ci, images, doctor)


class _Commands(argparse._SubParsersAction):
    """Sub-commands whose own ``--help`` opens with the line their parent's list gives them,
    where they have no description of their own (``opforge ci list --help`` said nothing of
    what it does)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """argparse's, with ``description`` defaulting to the ``help`` line."""
        summary = kwargs.get("help")
        if summary and "description" not in kwargs:
            kwargs["description"] = summary[:1].upper() + summary[1:] + "."
        return super().add_parser(name, **kwargs)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors read like opforge's own: one line, then a hint.

    Sub-parsers inherit the class, so every command reports a bad argument this way; the exit
    status stays argparse's 2.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)
        self._required_commands: list[argparse._SubParsersAction] = []
        # The innermost command parsed sets it last: its help is the one an unknown option
        # after it is hinted at.
        self.set_defaults(help_of=self.prog)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """Parse as argparse does; an argument no parser took is reported with the help of
        the command it followed (argparse reports it from the top-level parser)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            given = list(sys.argv[1:] if args is None else args)
            command = getattr(parsed, "command", None)
            before = (
                command in given
                and extras[0] in given
                and given.index(extras[0]) < given.index(command)
            )
            shown = self.prog if before else getattr(parsed, "help_of", self.prog)
            err(f"opforge: error: unrecognized arguments: {' '.join(extras)}")
            own = [e.split("=", 1)[0] for e in extras if e.split("=", 1)[0] in self._own_options()]
            if own and not before:
                err(f"  hint: {own[0]} is an option of opforge itself: give it before the command")
            else:
                err(f"  hint: see `{shown} --help`")
            sys.exit(2)
        return parsed

    def _own_options(self) -> set[str]:
        """The long options of this parser itself (``--project``), not of its commands."""
        return {o for o in self._option_string_actions if o.startswith("--") and o != "--help"}

    def add_subparsers(self, **kwargs: Any) -> argparse._SubParsersAction:
        """Sub-commands, whose absence ``parse_known_args`` reports, not argparse: argparse
        would report it before an unknown option in front of it (``opforge --bogus`` would say
        COMMAND is required instead of naming --bogus)."""
        required = kwargs.pop("required", False)
        action = super().add_subparsers(required=False, **kwargs)
        if required:
            self._required_commands.append(action)
        return action

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse as argparse does; then, when every argument was understood, a required
        sub-command that was not given is an error."""
        parsed, extras = super().parse_known_args(args, namespace)
        if not extras:
            for action in self._required_commands:
                if getattr(parsed, action.dest, None) is None:
                    self.error(f"the following arguments are required: {action.metavar}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        err(f"opforge: error: {message}")
        err(f"  hint: see `{self.prog} --help`")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and docs)."""
    parser = Parser(
        prog="opforge",
        description="Build, pin and test a kernel library shared by PyTorch and MindSpore.",
    )
    parser.add_argument("--version", action="version", version=f"opforge {__version__}")
    parser.add_argument(
        "--project",
        type=path_text,
        metavar="DIR",
        help="project root (default: nearest dir with checksums.yaml)",
    )
    # Written by the container layer for the opforge it starts in a container (opforge.handoff).
    parser.add_argument("--handoff", metavar="JSON", help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return parser


# What the system says of a path or a disk, whatever opforge was doing with it: said in one line.
_NO_ROOM = "free space there, or point OPFORGE_BUILD_DIR or OPFORGE_CACHE elsewhere"
_PLACE_ERRORS = {
    errno.ENAMETOOLONG: "shorten it: a name in a path is at most 255 bytes, a path 4096",
    errno.ENOSPC: _NO_ROOM,
    errno.EDQUOT: _NO_ROOM,
}


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line (plus a hint) and a non-zero exit."""
    _open_standard_streams()
    output = sys.stdout
    sys.stdout = _Output(output)
    try:
        args = build_parser().parse_args(argv)
        func: Command = args.func
        code = func(args, settings_from(args, os.environ))
        sys.stdout.flush()  # a write that fails fails here, not in a traceback at exit
        return code
    except _OutputFailed as exc:
        # The output's own failure (a full disk, `> /dev/full`): said in one line.
        _drop_output()
        report(exc)
        return 1
    except SystemExit:
        # --help and --version print, then exit: flushed here, where a failure can still be
        # said in one line.
        try:
            sys.stdout.flush()
        except _OutputFailed as exc:
            _drop_output()
            report(exc)
            return 1
        raise
    except OpforgeError as exc:
        report(exc)
        return exc.exit_code
    except Terminated as exc:
        err("opforge: interrupted")
        return 128 + exc.signum
    except KeyboardInterrupt:
        err("opforge: interrupted")
        return 130
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error worth a traceback.
        _drop_output()
        return 0
    except OSError as exc:  # after BrokenPipeError, one of them
        if exc.errno not in _PLACE_ERRORS:
            raise
        # Two paths (a link, a rename): the second is the one being made.
        paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
        where = f": {' -> '.join(paths)}" if paths else ""
        report(OpforgeError(f"{exc.strerror}{where}", hint=_PLACE_ERRORS[exc.errno]))
        return 1
    finally:
        sys.stdout = output


class _OutputFailed(OpforgeError):
    """Writing to stdout failed (not a closed pipe)."""


class _Output:
    """stdout, its write failures raised as ``_OutputFailed``; the rest passed through."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        with self._failures():
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:
                # An output that cannot hold a character (PYTHONIOENCODING=ascii): its code
                # instead, as Python writes stderr.
                encoding = getattr(self._stream, "encoding", None) or "ascii"
                return self._stream.write(
                    text.encode(encoding, "backslashreplace").decode(encoding)
                )

    def flush(self) -> None:
        with self._failures():
            self._stream.flush()

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _OutputFailed(
                f"cannot write the output: {exc.strerror}",
                hint="write it where there is room, or pipe it elsewhere",
            ) from None

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _open_standard_streams() -> None:
    """/dev/null on a closed stdout or stderr (``opforge ... >&-``): what would go there is
    dropped, and no file opforge opens later takes descriptor 1 or 2, which child processes
    (cmake, pip) would then write into."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            _null_onto(fd)
            # Not closed: the stream lives as long as the process.
            stream = open(fd, "w", errors="backslashreplace", closefd=False)  # noqa: SIM115
            setattr(sys, name, stream)


def _drop_output() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what could not be
    written does not fail again at exit."""
    _null_onto(sys.stdout.fileno())


def _null_onto(fd: int) -> None:
    """/dev/null on descriptor ``fd`` (which need not be open)."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
