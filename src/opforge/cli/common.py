"""What the command groups share: settings from the parsed flags, the project, the fetcher, and
the flags several groups take."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from opforge.dirs import not_a_directory
from opforge.errors import ConfigError, OpforgeError
from opforge.handoff import Handoff
from opforge.images.service import ImageOptions, image_options
from opforge.images.spec import (
    BASE_IMAGE_HINT,
    DEFAULT_FRAMEWORKS,
    FLAVOURS,
    base_image_problem,
)
from opforge.links import loops
from opforge.pins.cache import ContentCache
from opforge.pins.fetch import Fetcher, FetchSettings, progress_enabled
from opforge.project import Project, open_project
from opforge.report import error_line, report
from opforge.settings import Settings, default_cache_dir, resolve_settings

Command = Callable[[argparse.Namespace, Settings], int]


def err(text: str) -> None:
    """One line to stderr, at once, written as ``report`` writes an error's lines (unprinted
    characters escaped, a very long word cut short)."""
    print(error_line(text), file=sys.stderr, flush=True)


def settings_from(args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """The settings of this invocation: its flags (those its command has), then ``environ``."""
    handoff = Handoff.from_json(args.handoff) if args.handoff else None
    return resolve_settings(
        environ,
        project=args.project,
        pins=getattr(args, "pins", None),
        cache=getattr(args, "cache", None),
        base_image=getattr(args, "base_image", None),
        extra_ca=getattr(args, "extra_ca", None),
        find_links=getattr(args, "find_links", None),
        handoff=handoff,
    )


def project(settings: Settings) -> Project:
    """The project the settings name."""
    return open_project(settings)


def fetcher(args: argparse.Namespace, settings: Settings) -> Fetcher:
    """A fetcher over the settings' cache, with the command's download flags."""
    options = FetchSettings(
        retries=args.retries,
        deadline=args.deadline,
        max_bytes=args.max_bytes,
        progress=progress_enabled(settings.progress),
        ca_bundle=settings.ca_bundle,
        proxy_spellings=settings.proxy_spellings,
    )
    return Fetcher(
        ContentCache(settings.cache_dir),
        offline=args.offline,
        settings=options,
        log=err,
        fetch_command=lambda name: pins_fetch_command(args, [name]),
    )


def pins_fetch_command(args: argparse.Namespace, names: list[str]) -> str:
    """``opforge pins fetch NAMES`` with the --project, --pins and --cache this command was given
    (as ``--flag=VALUE``: a value starting with ``-`` is not read as a flag), for a hint."""
    project = [f"--project={args.project}"] if args.project else []
    given = [("--pins", getattr(args, "pins", None)), ("--cache", getattr(args, "cache", None))]
    files = [f"{flag}={value}" for flag, value in given if value]
    return shlex.join(["opforge", *project, "pins", "fetch", *names, *files])


def images(args: argparse.Namespace, settings: Settings) -> ImageOptions:
    """The image options of a command with the image flags."""
    return image_options(
        settings,
        # None when the flag was not given, so that image_flags_given can tell (the help's default).
        flavour=args.flavour or "pip",
        cuda=args.cuda,
        cudnn=args.cudnn,
        keep_ca=getattr(args, "keep_ca", False),
        frameworks=tuple(args.framework) if args.framework is not None else None,
    )


def count(text: str) -> int:
    """An argument type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def path_text(text: str) -> str:
    """An argument type: a path, not blank (further on, an empty one would read as "not
    given", and the default used in its place)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a path")
    return text


def base_image_text(text: str) -> str:
    """An argument type: a base image reference (``{suite}`` allowed), not blank: it goes into
    a Dockerfile's ``FROM``."""
    problem = base_image_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r} {problem}; {BASE_IMAGE_HINT}")
    return text


def refuse_a_file_as_folder(flag: str, folder: Path) -> None:
    """``ConfigError`` before any work when ``folder``, given with ``flag`` (created when
    missing), or a folder above it exists and is no folder."""
    place = not_a_directory(folder)
    if place is None:
        return
    if loops(place):
        raise ConfigError(
            f"{flag} {folder}: {place} is a loop of symbolic links",
            hint=f"remove or repoint {place}, or give {flag} another folder",
        )
    shown = "" if place == folder else f" ({place} is not)"
    raise ConfigError(
        f"{flag} {folder} is not a directory{shown}",
        hint=f"give a folder to {flag} (created when missing)",
    )


def positive(kind: type, most: float | None = None) -> Callable[[str], float | int]:
    """An argument type: a number of ``kind`` above 0 (and at most ``most``, when given)."""

    def parse(text: str) -> float | int:
        try:
            if not text.isascii():  # int() reads other scripts' digits ('٣' is 3)
                raise ValueError(text)
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
        if most is not None and value > most:
            raise argparse.ArgumentTypeError(f"must be at most {most}, got {text}")
        return value

    return parse


#: The argument type of every count that must be 1 or more (``--jobs``, ``--max-bytes``).
positive_int = positive(int)

#: The most parallel compile jobs ``--jobs`` takes: more than any machine has cores, and far below
#: what would overflow the job count cmake and ninja read (a huge one got 65 lines of cmake usage).
MAX_JOBS = 4096

#: The argument type of ``build --jobs``: 1 to ``MAX_JOBS``.
job_count = positive(int, MAX_JOBS)


def add_fetch_options(
    parser: argparse.ArgumentParser, pins_file: bool = True, downloads: bool = True
) -> None:
    """The download flags: pins file, cache, and (``downloads``: for commands that download)
    offline, retries, deadline, size cap."""
    if pins_file:
        parser.add_argument(
            "--pins",
            type=path_text,
            metavar="FILE",
            help="pins file (default: checksums.yaml at the project root)",
        )
    parser.add_argument(
        "--cache",
        type=path_text,
        metavar="DIR",
        help=f"download cache (default: $OPFORGE_CACHE or {default_cache_dir()})",
    )
    if not downloads:
        return
    parser.add_argument(
        "--offline", action="store_true", help="use the cache only; fail if a file is missing"
    )
    parser.add_argument(
        "--retries",
        type=count,
        default=4,
        metavar="N",
        help="retries per URL on transient errors (default: 4)",
    )
    parser.add_argument(
        "--deadline",
        # The deadline is a timer thread's wait, which cannot exceed threading.TIMEOUT_MAX
        # (about 9.2e9 s): inf would end the timer and so the deadline.
        type=positive(float, most=1e9),
        default=1800.0,
        metavar="SECONDS",
        help="time budget per downloaded file, retries included (default: 1800)",
    )
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        default=4 << 30,
        metavar="N",
        help="largest download accepted for a pin with no recorded size (default: 4 GiB)",
    )


#: The flags ``add_image_flags`` adds, by their ``args`` attribute (each None unless given).
IMAGE_FLAGS = {
    "flavour": "--flavour",
    "cuda": "--cuda",
    "cudnn": "--cudnn",
    "base_image": "--base-image",
    "extra_ca": "--extra-ca",
    "framework": "--framework",
    "find_links": "--find-links",
}


def add_image_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that select and shape an image."""
    parser.add_argument("--flavour", choices=FLAVOURS, default=None, help="default: pip")
    parser.add_argument("--cuda", help="CUDA version (default: the first in images/versions.yaml)")
    parser.add_argument("--cudnn", help="cuDNN version (default: the one paired with --cuda)")
    parser.add_argument(
        "--base-image",
        type=base_image_text,
        help="pip/deb flavour base, {suite} filled in (default: $BASE_IMAGE or debian:{suite}-slim)",
    )
    parser.add_argument(
        "--extra-ca",
        type=path_text,
        metavar="PEM",
        help="CA bundle pip trusts while building, a PEM file of at most 2 MiB "
        "(default: $OPFORGE_EXTRA_CA, else $PIP_CERT)",
    )
    parser.add_argument(
        "--framework",
        action="append",
        metavar="REQ",
        help="framework requirement for the image, repeatable; `none`: no framework "
        f"(default: {' '.join(DEFAULT_FRAMEWORKS)})",
    )
    parser.add_argument(
        "--find-links",
        action="append",
        type=path_text,
        metavar="DIR",
        help="local wheel folder for the image's pip, repeatable (default: $PIP_FIND_LINKS)",
    )


def image_flags_given(args: argparse.Namespace) -> list[str]:
    """The image flags given on the command line (``--flavour``, ``--cuda``...), as spelled."""
    return [flag for attr, flag in IMAGE_FLAGS.items() if getattr(args, attr) is not None]


def usage_error(message: str, hint: str) -> int:
    """Report flags that cannot go together as the parser reports a bad argument (one line, a
    hint) and return its exit status, 2: they are a mistake in the command line, not in the
    project."""
    report(OpforgeError(message, hint=hint))
    return 2


def resolved(path: str | None) -> Path | None:
    """An optional path flag, made absolute."""
    return Path(path).resolve() if path else None
