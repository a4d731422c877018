"""``opforge build``, ``opforge test`` and ``opforge dist``: build targets, run their recipes'
tests, install the wheels a build wrote; on the host or, through the container layer, in the
images."""

from __future__ import annotations

import argparse
from pathlib import Path

from opforge.build.dist import install_dist_wheels
from opforge.build.engine import BuildEngine
from opforge.build.record import BuildRecord
from opforge.build.steps import HostRunner
from opforge.cli.common import (
    MAX_JOBS,
    add_fetch_options,
    add_image_flags,
    fetcher,
    image_flags_given,
    images,
    job_count,
    path_text,
    project,
    refuse_a_file_as_folder,
    resolved,
    usage_error,
)
from opforge.container.choice import RUNNER_CHOICES, resolve_runner
from opforge.errors import BuildError, ToolMissing
from opforge.recipes.schema import PROFILES
from opforge.settings import Settings


def _refuse_image_flags(args: argparse.Namespace, command: str) -> int | None:
    """Exit status 2, reported, when image flags are given with ``--runner host``, where no image
    is used: silently ignored, ``--flavour ngc --cuda 99`` would seem to have been honoured."""
    given = image_flags_given(args) if args.runner == "host" else []
    if not given:
        return None
    return usage_error(
        f"{' '.join(given)}: image flags have no effect with --runner host (opforge {command} "
        "runs on this machine, in no image)",
        hint=f"drop {' '.join(given)}, or pass --runner docker to {command} in the image",
    )


def cmd_build(args: argparse.Namespace, settings: Settings) -> int:
    """Build targets for a profile and report what was built or up to date."""
    refused = _refuse_image_flags(args, "build")
    if refused is not None:
        return refused
    found = project(settings)
    runner, why = resolve_runner(args.runner)
    print(f"runner: {runner} ({why})", flush=True)
    if runner == "docker":
        from opforge.container.jobs import Workspace, build_in_container

        def say(line: str) -> None:
            # --quiet hides the build tools' output, never opforge's own progress lines.
            if not args.quiet or line.startswith(("[", "runner:")):
                print(line)

        work = Workspace(found, fetcher(args, settings), settings, images(args, settings), say)
        build_in_container(work, args.targets, args.profile, args.jobs, args.quiet)
        return 0
    engine = BuildEngine(
        found,
        fetcher(args, settings),
        HostRunner(echo=(lambda _line: None) if args.quiet else None),
        jobs=args.jobs,
        image=settings.image,
        tool_overrides=settings.tool_overrides,
    )
    results = engine.build(args.targets, args.profile)
    built = sum(r.status == "built" for r in results)
    fresh = sum(r.status == "up-to-date" for r in results)
    print(f"{built} built, {fresh} up to date -> {found.build_record}")
    return 0


def cmd_test(args: argparse.Namespace, settings: Settings) -> int:
    """Run recipe test commands, on the host or in the runtime image."""
    refused = _refuse_image_flags(args, "test")
    if refused is not None:
        return refused
    found = project(settings)
    if args.runner == "host":
        from opforge.recipe_tests import run_host_tests

        if args.profile is not None:
            record = BuildRecord(found.build_record)
            if not any(args.profile in profiles for profiles in record.targets.values()):
                raise BuildError(
                    f"--profile {args.profile} tests the {args.profile} build in dist/, and "
                    f"{record.path} records none",
                    hint=f"run `opforge build --profile {args.profile}` first, or drop --profile "
                    "to let the tests build their own",
                )
        return run_host_tests(found, args.targets, args.profile, resolved(args.junit_dir))
    runner, why = resolve_runner(args.runner)
    if runner != "docker":
        raise ToolMissing(
            f"cannot run tests in the runtime image: {why}",
            hint="start a Docker engine, or use --runner host",
        )
    from opforge.container.jobs import Workspace, test_in_container

    work = Workspace(found, fetcher(args, settings), settings, images(args, settings))
    test_in_container(work, args.targets, args.profile or "cpu", resolved(args.junit_dir))
    return 0


def cmd_dist_install(args: argparse.Namespace, settings: Settings) -> int:
    """pip-install the wheels the last build of a profile wrote to dist/."""
    dest = Path(args.target) if args.target else None
    if dest is not None:
        refuse_a_file_as_folder("--target", dest)
    for wheel in install_dist_wheels(project(settings), args.profile, args.targets, dest):
        print(f"installed {wheel.name}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``build``, ``test`` and ``dist``."""
    build = sub.add_parser("build", help="build targets from their recipes into dist/")
    build.add_argument("targets", nargs="*", metavar="TARGET", help="targets (default: all)")
    build.add_argument(
        "--profile", choices=PROFILES, default="cpu", help="build profile (default: cpu)"
    )
    build.add_argument(
        "--runner",
        choices=RUNNER_CHOICES,
        default="host",
        help="host (default), docker (inside the devel image), or auto (docker when an engine answers)",
    )
    add_image_flags(build)
    build.add_argument(
        "--jobs",
        type=job_count,
        default=None,
        metavar="N",
        help=f"parallel compile jobs, 1 to {MAX_JOBS} (default: all cores)",
    )
    build.add_argument("--quiet", action="store_true", help="hide the build tools' own output")
    add_fetch_options(build, pins_file=False)
    build.set_defaults(func=cmd_build)

    test = sub.add_parser(
        "test", help="run targets' recipe test commands (in the runtime image with --runner docker)"
    )
    test.add_argument("targets", nargs="*", metavar="TARGET", help="targets (default: all)")
    test.add_argument(
        "--profile",
        choices=PROFILES,
        default=None,
        help="test that profile's build in dist/ (default: cpu with --runner docker; "
        "with --runner host, the tests build their own)",
    )
    test.add_argument(
        "--runner", choices=RUNNER_CHOICES, default="host", help="where tests run (default: host)"
    )
    add_image_flags(test)
    test.add_argument(
        "--junit-dir",
        type=path_text,
        metavar="DIR",
        help="write each target's JUnit XML report to DIR/TARGET.xml (pytest's --junitxml)",
    )
    add_fetch_options(test, pins_file=False)
    test.set_defaults(func=cmd_test)

    dist = sub.add_parser("dist", help="the wheels a build wrote to dist/")
    actions = dist.add_subparsers(dest="action", required=True, metavar="ACTION")
    install = actions.add_parser(
        "install", help="pip-install a profile's wheels (named in the build record)"
    )
    install.add_argument(
        "targets", nargs="*", metavar="TARGET", help="whose wheels (default: every target's)"
    )
    install.add_argument(
        "--profile", choices=PROFILES, default="cpu", help="build profile (default: cpu)"
    )
    install.add_argument(
        "--target", type=path_text, metavar="DIR", help="install into DIR instead of this env"
    )
    install.set_defaults(func=cmd_dist_install)
