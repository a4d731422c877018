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

import sys
from pathlib import Path

from opforge.atomic import require_inside, write_text
from opforge.errors import ConfigError, OpforgeError, unreadable
from opforge.report import report

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
    return header + head.rstrip("\n") + "\n\n" + _CONTEXT_STAGE + body


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or, with --check, check) ``.devcontainer/Dockerfile`` of the current project;
    an ``OpforgeError`` is one line and a hint on stderr, exit status 1."""
    args = sys.argv[1:] if argv is None else argv
    root = Path.cwd()
    path = root / DOCKERFILE
    try:
        # Before reading too: --check must not pass on a file outside the project that a link
        # stands in for.
        require_inside(root, path)
        text = render(root / "images")
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if "--check" in args:
            if current != text:
                print(
                    f"{DOCKERFILE} is out of date with images/Dockerfile.pip: "
                    "run `python -m opforge.images.devcontainer`",
                    file=sys.stderr,
                )
                return 1
            return 0
        if current != text:
            write_text(path, text, root=root)
            print(f"wrote {DOCKERFILE}")
    except OpforgeError as exc:
        report(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
