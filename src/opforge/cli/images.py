"""``opforge images``: build, assemble, list and lock the devel and runtime images."""

from __future__ import annotations

import argparse

from opforge.cli.common import (
    add_fetch_options,
    add_image_flags,
    base_image_text,
    fetcher,
    images,
    project,
)
from opforge.errors import ConfigError
from opforge.images.spec import KINDS
from opforge.settings import Settings


def cmd_build(args: argparse.Namespace, settings: Settings) -> int:
    """Build one image (or find it up to date) and print its tag."""
    from opforge.images.service import ensure_image, image_spec

    found = project(settings)
    spec = image_spec(found, args.kind, images(args, settings))
    print(ensure_image(found, fetcher(args, settings), spec, proxies=settings.proxies).tag)
    return 0


def cmd_context(args: argparse.Namespace, settings: Settings) -> int:
    """Write an image's build context (Dockerfile + context/) and print where."""
    from opforge.images.context import assemble
    from opforge.images.service import image_spec

    found = project(settings)
    spec = image_spec(found, args.kind, images(args, settings))
    staging = found.image_staging(spec.flavour, spec.kind)
    assemble(spec, found.images_dir, staging, found.load_pins(), fetcher(args, settings), "context")
    print(staging)
    return 0


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """The combinations of images/versions.yaml and what each flavour offers."""
    from opforge.images.service import describe
    from opforge.images.spec import load_combinations

    for combo in load_combinations(project(settings).versions_file):
        print(describe(combo))
    return 0


def cmd_lock_debs(args: argparse.Namespace, settings: Settings) -> int:
    """Resolve the deb flavour's Debian packages in the suite's base and write their locks."""
    from opforge.dockerengine import docker_client
    from opforge.images.debian import lock_debs, toolkits

    found = project(settings)
    # A wrong --cuda is the user's to fix whether or not Docker runs here: refused before the
    # engine is looked for.
    toolkits(found.images_dir / "versions.yaml", args.cuda)
    client = docker_client()
    for path in lock_debs(
        client, found.images_dir, args.cuda, settings.base_image, settings.proxies, root=found.root
    ):
        print(f"wrote {path.relative_to(found.root)}")
    return 0


def cmd_lock(args: argparse.Namespace, settings: Settings) -> int:
    """Record ngc digests a registry gives; report every base still unpinned (an error if any)."""
    from opforge.dockerengine import docker_client
    from opforge.images.service import lock_digests, lock_report

    found = project(settings)
    for image, why in lock_digests(found, docker_client()):
        print(f"{image}: {why}")
    unpinned = 0
    for label, image, status in lock_report(found):
        print(f"{label:28} {image:48} {status}")
        unpinned += status.startswith("UNPINNED")
    if unpinned:
        raise ConfigError(
            f"{unpinned} ngc base image(s) are not pinned by digest",
            hint="run `opforge images lock` where the registry answers, or use --flavour pip",
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``images`` and its actions."""
    parser = sub.add_parser("images", help="the devel and runtime container images")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = actions.add_parser(
        "build", help="build an image (skipped when an identical one exists)"
    )
    build.add_argument("--kind", choices=KINDS, default="devel", help="default: devel")
    add_image_flags(build)
    build.add_argument(
        "--keep-ca",
        action="store_true",
        help="leave the extra CA bundle in the final image (default: used while building only)",
    )
    add_fetch_options(build, pins_file=False)
    build.set_defaults(func=cmd_build)
    context = actions.add_parser(
        "context",
        help="assemble an image's build context in build/images/<flavour>-<kind> (the devcontainer builds from it)",
    )
    context.add_argument("--kind", choices=KINDS, default="devel", help="default: devel")
    add_image_flags(context)
    context.add_argument("--keep-ca", action="store_true", help="as for `images build`")
    add_fetch_options(context, pins_file=False)
    context.set_defaults(func=cmd_context)
    actions.add_parser(
        "list", help="the CUDA x cuDNN combinations and their flavours"
    ).set_defaults(func=cmd_list)
    actions.add_parser(
        "lock",
        help="record the ngc base images' digests where a registry answers",
        description="Ask a container registry, through the Docker engine, for the digest of "
        "each ngc base image not yet pinned, and record those it gives in "
        "images/versions.yaml (nothing else in the file changes); then list every base image "
        "and whether it is pinned. Fails while any is not.",
    ).set_defaults(func=cmd_lock)
    debs = actions.add_parser(
        "lock-debs", help="resolve the deb flavour's Debian packages and write images/debian/*.lock"
    )
    debs.add_argument("--cuda", help="one toolkit's CUDA version (default: every one)")
    debs.add_argument(
        "--base-image",
        type=base_image_text,
        help="base to resolve on (default: $BASE_IMAGE or debian:{suite}-slim)",
    )
    debs.set_defaults(func=cmd_lock_debs)
