"""The devcontainer's Dockerfile, rendered from ``images/Dockerfile.pip``.

VS Code's "Reopen in Container" must work with only Docker and the devcontainers CLI on the
host, so the devcontainer cannot run opforge there to assemble the image's build context. Its
Dockerfile instead starts with a stage that installs opforge from the checkout and runs
``opforge images context`` inside the build (pinned wheels fetched and verified there); the rest
is ``Dockerfile.pip`` with ``COPY context/`` reading from that stage. The rendered file is
committed (``.devcontainer/Dockerfile``) and a test fails when it is out of date:
``python -m opforge.images.devcontainer`` rewrites it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from opforge.atomic import require_inside, write_text
from opforge.errors import ConfigError, OpforgeError, unreadable
from opforge.report import report
from opforge.settings import resolve_settings

DOCKERFILE = Path(".devcontainer") / "Dockerfile"
# What `.devcontainer/prepare.sh` (initializeCommand) puts in the build context.
_CONTEXT_STAGE = """\
# The build context (build/devcontainer/, written by .devcontainer/prepare.sh): the checkout's
# src/, images/, checksums.yaml and pyproject.toml, the extra CA (extra-ca.pem, possibly empty)
# and local wheels (wheels/). opforge assembles the image context in this stage, as
# `opforge images context --kind devel` does on a host; nothing of it reaches the image but the
# context it writes.
FROM ${BASE_IMAGE} AS opforge-context
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      python3 python3-venv ca-certificates \\
 && rm -rf /var/lib/apt/lists/*
COPY . /src/
RUN set -eu; \\
    if [ -s /src/extra-ca.pem ]; then \\
      export PIP_CERT=/src/extra-ca.pem REQUESTS_CA_BUNDLE=/src/extra-ca.pem; fi; \\
    python3 -m venv /tmp/opforge; \\
    /tmp/opforge/bin/pip install --no-cache-dir --quiet /src; \\
    cd /src; \\
    PIP_FIND_LINKS=/src/wheels OPFORGE_BUILD_DIR=/out OPFORGE_CACHE=/tmp/opforge-cache \\
      /tmp/opforge/bin/opforge images context --kind devel

"""
_FROM_CONTEXT = "COPY --from=opforge-context /out/images/pip-devel/context/"
# devcontainer.json passes each spelling of a proxy variable as the host has it, so one is
# often empty; apt reads only the lower-case one, and urllib (pip, requests) reads an empty
# lower-case one as "no proxy". Each RUN step first sets both from whichever holds a value, the
# lower-case one first as requests reads them (`opforge images build` passes both already).
PROXY_SPELLINGS = (
    'export http_proxy="${http_proxy:-${HTTP_PROXY:-}}" \\\n'
    '      https_proxy="${https_proxy:-${HTTPS_PROXY:-}}" no_proxy="${no_proxy:-${NO_PROXY:-}}"; \\\n'
    '    export HTTP_PROXY="$http_proxy" HTTPS_PROXY="$https_proxy" NO_PROXY="$no_proxy"; \\\n'
    "    "
)


def render(images_dir: Path) -> str:
    """The devcontainer Dockerfile for ``images_dir/Dockerfile.pip``."""
    source = images_dir / "Dockerfile.pip"
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise unreadable(source, exc, "the pip image recipe of the project") from None
    head, marker, rest = text.partition("\nFROM ")
    if not marker or "COPY context/" not in rest:
        raise ConfigError(
            f"{source}: expected stages that COPY from context/",
            hint="the devcontainer's Dockerfile is rendered from it",
        )
    header = (
        "# Generated from images/Dockerfile.pip by `python -m opforge.images.devcontainer`; "
        "do not edit.\n"
        "# The devcontainer builds with only Docker on the host: see src/opforge/images/"
        "devcontainer.py.\n"
    )
    body = ("FROM " + rest).replace("COPY context/", _FROM_CONTEXT)
    stages = (_CONTEXT_STAGE + body).replace("\nRUN ", "\nRUN " + PROXY_SPELLINGS)
    return header + head.rstrip("\n") + "\n\n" + stages


class _Parser(argparse.ArgumentParser):
    """argparse, its usage errors reported as opforge's are (``opforge.cli`` sits above this
    layer): one line and a hint, exit status 2."""

    def error(self, message: str) -> NoReturn:
        report(ConfigError(message, hint=f"see `{self.prog} --help`"))
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m opforge.images.devcontainer``: a bad argument is one line
    and a hint, exit status 2, before anything is read or written."""
    parser = _Parser(
        prog="python -m opforge.images.devcontainer",
        description=f"Render {DOCKERFILE} from images/Dockerfile.pip (written only when it "
        "changes).",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"write nothing; exit 1 when {DOCKERFILE} is out of date",
    )
    parser.add_argument(
        "--project",
        metavar="DIR",
        help="project root (default: $OPFORGE_PROJECT, else the nearest dir with checksums.yaml), "
        "as for opforge",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or, with --check, check) ``.devcontainer/Dockerfile`` of the project; an
    ``OpforgeError`` is one line and a hint on stderr, exit status 1."""
    args = build_parser().parse_args(argv)
    try:
        # The project as `opforge` finds it, so the command works from any folder of a checkout.
        root = resolve_settings(os.environ, project=args.project).project_root()
        path = root / DOCKERFILE
        # Before reading too: --check must not pass on a file outside the project that a link
        # stands in for.
        require_inside(root, path)
        text = render(root / "images")
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if args.check:
            if current != text:
                print(
                    f"{path} is out of date with images/Dockerfile.pip: "
                    "run `python -m opforge.images.devcontainer`",
                    file=sys.stderr,
                )
                return 1
            return 0
        if current != text:
            write_text(path, text, root=root)
            print(f"wrote {path}")
    except OpforgeError as exc:
        report(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
