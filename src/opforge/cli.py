"""The ``opforge`` command line: argument parsing and turning errors into one readable line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from opforge import __version__
from opforge.build.dist import install_dist_wheels
from opforge.build.engine import BuildEngine
from opforge.ci.workflow import WORKFLOW_PATH
from opforge.doctor import render_table, run_checks
from opforge.errors import OpforgeError, PinError
from opforge.images.service import ImageOptions
from opforge.images.spec import FLAVOURS, KINDS
from opforge.paths import default_cache_dir, find_project_root
from opforge.pins.cache import CacheState, ContentCache
from opforge.pins.fetch import Fetcher, FetchSettings, progress_enabled
from opforge.pins.install import install_wheels
from opforge.pins.model import load_pins
from opforge.pins.update import update_pin
from opforge.project import Project
from opforge.recipes.schema import PROFILES
from opforge.redact import mask_credentials
from opforge.runners import RUNNER_CHOICES, resolve_runner, select_runner


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _human_size(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _project(args: argparse.Namespace) -> Project:
    root = Path(args.project).resolve() if args.project else find_project_root()
    pins = Path(getattr(args, "pins", None) or root / "checksums.yaml")
    return Project(root, pins)


def _pins_path(args: argparse.Namespace) -> Path:
    if args.pins:
        return Path(args.pins)
    return _project(args).pins_path


def _fetcher(args: argparse.Namespace) -> Fetcher:
    cache = ContentCache(Path(args.cache) if args.cache else default_cache_dir())
    settings = FetchSettings(
        retries=args.retries,
        deadline=args.deadline,
        max_bytes=args.max_bytes,
        progress=progress_enabled(),
    )
    return Fetcher(cache, offline=args.offline, settings=settings, log=_err)


# --- recipes -------------------------------------------------------------------------------


def cmd_recipes_list(args: argparse.Namespace) -> int:
    """Print one line per recipe."""
    project = _project(args)
    book = project.load_recipes(project.load_pins())
    for recipe in book.order():
        deps = ", ".join(recipe.depends_on) or "-"
        print(
            f"{recipe.name:<20} {recipe.kind:<6} profiles={','.join(recipe.profiles):<8} "
            f"depends_on={deps:<16} {recipe.description}"
        )
    return 0


def cmd_recipes_show(args: argparse.Namespace) -> int:
    """Print a recipe as loaded, with the file it came from."""
    project = _project(args)
    recipe = project.load_recipes(project.load_pins()).get(args.name)
    print(f"# {recipe.path}")
    print(yaml.safe_dump(recipe.raw, sort_keys=False).rstrip())
    return 0


def cmd_recipes_validate(args: argparse.Namespace) -> int:
    """Validate the project's recipes, plus any recipe files given."""
    project = _project(args)
    book = project.load_recipes(project.load_pins(), extra=[Path(p) for p in args.paths])
    print(f"{len(book.recipes)} recipe(s) valid: {', '.join(sorted(book.recipes))}")
    return 0


# --- pins ----------------------------------------------------------------------------------


def cmd_pins_list(args: argparse.Namespace) -> int:
    """Print each pin with its size, digest and whether it is cached."""
    pins = load_pins(_pins_path(args))
    cache = _fetcher(args).cache
    for pin in pins.pins.values():
        state = "cached" if cache.has(pin) else "-"
        print(
            f"{pin.name:<22} {_human_size(pin.size):>9}  {pin.sha256[:16]}  {state:<6}  {pin.filename}"
        )
    return 0


def cmd_pins_fetch(args: argparse.Namespace) -> int:
    """Download (or find in the cache) the named pins, verified."""
    pins = load_pins(_pins_path(args)).select(args.names)
    fetcher = _fetcher(args)
    already = {pin.name for pin in pins if fetcher.cache.has(pin)}
    paths = fetcher.fetch_many(pins, jobs=args.jobs)
    for pin in pins:
        how = "cached" if pin.name in already else "fetched"
        path = fetcher.cache.export(pin, Path(args.dest)) if args.dest else paths[pin.name]
        print(f"{pin.name:<22} {how:<8} {path}")
    return 0


def cmd_pins_verify(args: argparse.Namespace) -> int:
    """Re-hash the cached files of the named pins; report missing and corrupt ones."""
    pins = load_pins(_pins_path(args)).select(args.names)
    cache = _fetcher(args).cache
    bad = []
    for pin in pins:
        result = cache.verify(pin)
        if result.state is CacheState.OK:
            print(f"{pin.name:<22} ok")
        elif result.state is CacheState.MISSING:
            bad.append(pin.name)
            print(f"{pin.name:<22} missing")
        else:
            bad.append(pin.name)
            print(f"{pin.name:<22} corrupt: {result.problem} (removed from cache)")
    if bad:
        raise PinError(
            f"{len(bad)} of {len(pins)} pin(s) missing or corrupt in {cache.root}",
            hint=f"run `opforge pins fetch {' '.join(bad)}`",
        )
    return 0


def cmd_pins_install(args: argparse.Namespace) -> int:
    """pip-install wheel pins, verified, into this interpreter (or --target DIR)."""
    pins = load_pins(_pins_path(args)).select(args.names)
    target = Path(args.target) if args.target else None
    for name in install_wheels(pins, _fetcher(args), target):
        print(f"installed {name}")
    return 0


def cmd_pins_update(args: argparse.Namespace) -> int:
    """Re-download one pin and record its digest in the pins file."""
    if args.offline:
        raise PinError(
            "pins update needs the network, but --offline was given", hint="drop --offline"
        )
    path = _pins_path(args)
    result = update_pin(path, args.name, _fetcher(args))
    confirmed = f" (matches {result.confirmed_by})" if result.confirmed_by else ""
    if result.changed:
        print(
            f"{args.name}: sha256 {result.old.sha256 or '(unset)'} -> {result.new.sha256}{confirmed}"
        )
        print(f"updated {path}")
    else:
        print(f"{args.name}: unchanged, sha256 {result.new.sha256}{confirmed}")
    return 0


# --- build and doctor ----------------------------------------------------------------------


def _image_options(args: argparse.Namespace) -> ImageOptions:
    return ImageOptions(
        flavour=args.flavour,
        cuda=args.cuda,
        cudnn=args.cudnn,
        base_image=args.base_image,
        extra_ca=Path(args.extra_ca) if args.extra_ca else None,
        keep_ca=getattr(args, "keep_ca", False),
        frameworks=tuple(args.framework) if args.framework is not None else None,
        find_links=tuple(Path(p) for p in args.find_links) if args.find_links else None,
    )


def cmd_test(args: argparse.Namespace) -> int:
    """Run recipe test commands, on the host or in the runtime image."""
    project = _project(args)
    if args.runner == "host":
        from opforge.recipe_tests import run_host_tests

        return run_host_tests(project, args.targets)
    from opforge.runners.docker import test_in_container

    runner, why = resolve_runner(args.runner)
    if runner != "docker":
        _err(f"opforge: error: cannot run tests in the runtime image: {why}")
        return 1
    test_in_container(
        project,
        _fetcher(args),
        _image_options(args),
        args.targets,
        args.profile,
        junit_dir=Path(args.junit_dir).resolve() if args.junit_dir else None,
    )
    return 0


def _matrix(args: argparse.Namespace):
    from opforge.ci.matrix import load_matrix

    root = _project(args).root
    return load_matrix(root / "ci" / "matrix.yaml", root / "images" / "versions.yaml")


def cmd_ci_list(args: argparse.Namespace) -> int:
    """Every cell with its flavour, or the reason it is excluded."""
    for cell in _matrix(args).cells:
        status = (
            f"excluded: {cell.excluded}" if cell.excluded else f"included ({cell.flavour} images)"
        )
        print(f"{cell.id:40} {status}")
    return 0


def cmd_ci_render(args: argparse.Namespace) -> int:
    """Write (or check) the nightly workflow."""
    from opforge.ci.workflow import WORKFLOW_PATH, render

    path = _project(args).root / WORKFLOW_PATH
    matrix = _matrix(args)
    text = render(matrix)
    current = path.read_text() if path.is_file() else None
    if args.check:
        if current != text:
            _err(f"opforge: error: {WORKFLOW_PATH} is out of date with ci/matrix.yaml")
            _err("  hint: run `opforge ci render` and commit the result")
            return 1
        print(f"{WORKFLOW_PATH} is up to date")
        return 0
    if current != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(".tmp")
        temp.write_text(text)
        temp.replace(path)
    print(f"wrote {WORKFLOW_PATH} ({len(matrix.included)} cells)")
    return 0


def cmd_ci_run_cell(args: argparse.Namespace) -> int:
    """Run one cell as the workflow does."""
    from opforge.ci.cell import run_cell

    cell = _matrix(args).cell(args.cell)
    cache = Path(args.image_cache).resolve() if args.image_cache else None
    run_cell(cell, Path(args.junit_dir).resolve(), cache, args.dry_run, _project(args).root)
    return 0


def cmd_ci_report(args: argparse.Namespace) -> int:
    """The cells' JUnit reports as one table."""
    from opforge.ci.report import collect, table

    print(table(collect(Path(args.reports)), args.format), end="")
    return 0


def cmd_images_build(args: argparse.Namespace) -> int:
    """Build one image (or find it up to date) and print its tag."""
    from opforge.images.service import ensure_image, image_spec

    project = _project(args)
    spec = image_spec(project, args.kind, _image_options(args))
    image = ensure_image(project, _fetcher(args), spec)
    print(image.tag)
    return 0


def cmd_images_context(args: argparse.Namespace) -> int:
    """Write an image's build context (Dockerfile + context/) and print where."""
    from opforge.images.context import assemble
    from opforge.images.service import image_spec

    project = _project(args)
    spec = image_spec(project, args.kind, _image_options(args))
    staging = project.build_dir / "images" / f"{spec.flavour}-{spec.kind}"
    assemble(spec, project.root / "images", staging, project.load_pins(), _fetcher(args), "context")
    print(staging)
    return 0


def cmd_images_list(args: argparse.Namespace) -> int:
    """The combinations of images/versions.yaml and what each flavour offers."""
    from opforge.images.service import describe
    from opforge.images.spec import load_combinations

    for combo in load_combinations(_project(args).root / "images" / "versions.yaml"):
        print(describe(combo))
    return 0


def cmd_images_lock_debs(args: argparse.Namespace) -> int:
    """Resolve the deb flavour's Debian packages in the suite's base and write their locks."""
    from opforge.images.build import docker_client
    from opforge.images.debian import lock_debs

    project = _project(args)
    base = args.base_image or os.environ.get("BASE_IMAGE")
    for path in lock_debs(docker_client(), project.root / "images", args.cuda, base):
        print(f"wrote {path.relative_to(project.root)}")
    return 0


def cmd_images_lock(args: argparse.Namespace) -> int:
    """Record ngc digests a registry gives; report every base still unpinned (exit 1 if any)."""
    from opforge.images.build import docker_client
    from opforge.images.service import lock_report, resolve_digests

    project = _project(args)
    versions = project.root / "images" / "versions.yaml"
    text = versions.read_text()
    for image, digest, why in resolve_digests(project, docker_client()):
        if digest:
            text = text.replace(
                f'{{image: "{image}", digest: null}}', f'{{image: "{image}", digest: "{digest}"}}'
            )
        else:
            print(f"{image}: {why}")
    versions.write_text(text)
    unpinned = 0
    for label, image, status in lock_report(project):
        print(f"{label:28} {image:48} {status}")
        unpinned += status.startswith("UNPINNED")
    if unpinned:
        _err(f"opforge: error: {unpinned} ngc base image(s) are not pinned by digest")
        _err("  hint: run `opforge images lock` where the registry answers, or use --flavour pip")
        return 1
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """Build targets for a profile and report what was built or up to date."""
    project = _project(args)
    runner_name, why = resolve_runner(args.runner)
    print(f"runner: {runner_name} ({why})", flush=True)
    if runner_name == "docker":
        from opforge.runners.docker import build_in_container

        say = (lambda _line: None) if args.quiet else print
        build_in_container(
            project,
            _fetcher(args),
            _image_options(args),
            args.targets,
            args.profile,
            args.jobs,
            args.quiet,
            say=lambda line: say(line) if not line.startswith(("[", "runner:")) else print(line),
        )
        return 0
    echo = (lambda _line: None) if args.quiet else None
    runner = select_runner(runner_name, echo=echo)
    engine = BuildEngine(project, _fetcher(args), runner, jobs=args.jobs)
    results = engine.build(args.targets, args.profile)
    built = sum(r.status == "built" for r in results)
    fresh = sum(r.status == "up-to-date" for r in results)
    print(f"{built} built, {fresh} up to date -> {project.dist_dir / 'manifest.json'}")
    return 0


def cmd_dist_install(args: argparse.Namespace) -> int:
    """pip-install the wheels the last build of a profile wrote to dist/."""
    dest = Path(args.target) if args.target else None
    for wheel in install_dist_wheels(_project(args), args.profile, args.targets, dest):
        print(f"installed {wheel.name}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Print what this machine offers."""
    print(render_table(run_checks()))
    return 0


# --- parser --------------------------------------------------------------------------------


def _fetch_options(parser: argparse.ArgumentParser, pins_file: bool = True) -> None:
    if pins_file:
        parser.add_argument(
            "--pins", metavar="FILE", help="pins file (default: checksums.yaml at the project root)"
        )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help=f"download cache (default: $OPFORGE_CACHE or {default_cache_dir()})",
    )
    parser.add_argument(
        "--offline", action="store_true", help="use the cache only; fail if a file is missing"
    )
    parser.add_argument(
        "--retries",
        type=_count,
        default=4,
        metavar="N",
        help="retries per URL on transient errors (default: 4)",
    )
    parser.add_argument(
        "--deadline",
        type=_positive(float),
        default=1800.0,
        metavar="SECONDS",
        help="time budget per downloaded file, retries included (default: 1800)",
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive(int),
        default=4 << 30,
        metavar="N",
        help="largest download accepted for a pin with no recorded size (default: 4 GiB)",
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive(kind: type) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="opforge",
        description="Build, pin and test a kernel library shared by PyTorch and MindSpore.",
    )
    parser.add_argument("--version", action="version", version=f"opforge {__version__}")
    parser.add_argument(
        "--project", metavar="DIR", help="project root (default: nearest dir with checksums.yaml)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    recipes = sub.add_parser("recipes", help="list, show and validate build recipes")
    rsub = recipes.add_subparsers(dest="action", required=True, metavar="ACTION")
    rsub.add_parser("list", help="one line per recipe, dependencies first").set_defaults(
        func=cmd_recipes_list
    )
    show = rsub.add_parser("show", help="print one recipe")
    show.add_argument("name", metavar="NAME")
    show.set_defaults(func=cmd_recipes_show)
    validate = rsub.add_parser("validate", help="check recipes against the schema, pins and graph")
    validate.add_argument("paths", nargs="*", metavar="PATH", help="extra recipe files to check")
    validate.set_defaults(func=cmd_recipes_validate)

    pins = sub.add_parser("pins", help="list, fetch, verify and update pinned external inputs")
    psub = pins.add_subparsers(dest="action", required=True, metavar="ACTION")
    plist = psub.add_parser("list", help="each pin with size, digest and cache state")
    _fetch_options(plist)
    plist.set_defaults(func=cmd_pins_list)
    fetch = psub.add_parser("fetch", help="download pins into the cache, verified by sha256")
    fetch.add_argument("names", nargs="*", metavar="NAME", help="pins to fetch (default: all)")
    fetch.add_argument(
        "--jobs", type=int, default=4, metavar="N", help="parallel downloads (default: 4)"
    )
    fetch.add_argument(
        "--dest",
        metavar="DIR",
        help="also place the verified files in DIR under their own names (e.g. to pip install)",
    )
    _fetch_options(fetch)
    fetch.set_defaults(func=cmd_pins_fetch)
    verify = psub.add_parser("verify", help="re-hash cached files; report missing or corrupt ones")
    verify.add_argument("names", nargs="*", metavar="NAME", help="pins to verify (default: all)")
    _fetch_options(verify)
    verify.set_defaults(func=cmd_pins_verify)
    install = psub.add_parser(
        "install", help="pip-install wheel pins, sha256-verified and without dependencies"
    )
    install.add_argument("names", nargs="+", metavar="NAME", help="wheel pins to install")
    install.add_argument("--target", metavar="DIR", help="install into DIR instead of this env")
    _fetch_options(install)
    install.set_defaults(func=cmd_pins_install)
    update = psub.add_parser(
        "update", help="re-download one pin and rewrite its digest (nothing else in the file)"
    )
    update.add_argument("name", metavar="NAME")
    _fetch_options(update)
    update.set_defaults(func=cmd_pins_update)

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
    _image_flags(build)
    build.add_argument(
        "--jobs",
        type=int,
        default=None,
        metavar="N",
        help="parallel compile jobs (default: all cores)",
    )
    build.add_argument("--quiet", action="store_true", help="hide the build tools' own output")
    _fetch_options(build, pins_file=False)
    build.set_defaults(func=cmd_build)

    test = sub.add_parser(
        "test", help="run targets' recipe test commands (in the runtime image with --runner docker)"
    )
    test.add_argument("targets", nargs="*", metavar="TARGET", help="targets (default: all)")
    test.add_argument(
        "--profile", choices=PROFILES, default="cpu", help="whose dist wheels (default: cpu)"
    )
    test.add_argument(
        "--runner", choices=RUNNER_CHOICES, default="host", help="where tests run (default: host)"
    )
    _image_flags(test)
    test.add_argument("--junit-dir", help="write each target's JUnit XML report here")
    _fetch_options(test, pins_file=False)
    test.set_defaults(func=cmd_test)

    ci = sub.add_parser("ci", help="the nightly CUDA x cuDNN x framework matrix")
    csub = ci.add_subparsers(dest="action", required=True, metavar="ACTION")
    clist = csub.add_parser("list", help="every cell, included or excluded with the reason")
    clist.set_defaults(func=cmd_ci_list)
    crender = csub.add_parser("render", help=f"write {WORKFLOW_PATH} from ci/matrix.yaml")
    crender.add_argument(
        "--check", action="store_true", help="only check that the committed file is up to date"
    )
    crender.set_defaults(func=cmd_ci_render)
    crun = csub.add_parser("run-cell", help="run one cell with the workflow's own commands")
    crun.add_argument("cell", metavar="CELL", help="a cell id from `opforge ci list`")
    crun.add_argument("--junit-dir", default="reports", help="JUnit XML reports (default: reports)")
    crun.add_argument("--image-cache", help="load/save opforge's images here (the CI cache)")
    crun.add_argument("--dry-run", action="store_true", help="print the commands only")
    crun.set_defaults(func=cmd_ci_run_cell)
    creport = csub.add_parser("report", help="one table from the cells' JUnit XML reports")
    creport.add_argument("reports", help="folder holding the reports (one sub-folder per cell)")
    creport.add_argument("--format", choices=["terminal", "markdown"], default="terminal")
    creport.set_defaults(func=cmd_ci_report)

    images = sub.add_parser("images", help="the devel and runtime container images")
    isub = images.add_subparsers(dest="action", required=True, metavar="ACTION")
    ibuild = isub.add_parser("build", help="build an image (skipped when an identical one exists)")
    ibuild.add_argument("--kind", choices=KINDS, default="devel", help="default: devel")
    _image_flags(ibuild)
    ibuild.add_argument(
        "--keep-ca",
        action="store_true",
        help="leave the extra CA bundle in the final image (default: used while building only)",
    )
    _fetch_options(ibuild, pins_file=False)
    ibuild.set_defaults(func=cmd_images_build)
    icontext = isub.add_parser(
        "context",
        help="assemble an image's build context in build/images/<flavour>-<kind> (the devcontainer builds from it)",
    )
    icontext.add_argument("--kind", choices=KINDS, default="devel", help="default: devel")
    _image_flags(icontext)
    icontext.add_argument("--keep-ca", action="store_true", help="as for `images build`")
    _fetch_options(icontext, pins_file=False)
    icontext.set_defaults(func=cmd_images_context)
    ilist = isub.add_parser("list", help="the CUDA x cuDNN combinations and their flavours")
    ilist.set_defaults(func=cmd_images_list)
    ilock = isub.add_parser(
        "lock", help="record the ngc base images' digests where a registry answers"
    )
    ilock.set_defaults(func=cmd_images_lock)
    ldebs = isub.add_parser(
        "lock-debs", help="resolve the deb flavour's Debian packages and write images/debian/*.lock"
    )
    ldebs.add_argument("--cuda", help="one toolkit's CUDA version (default: every one)")
    ldebs.add_argument(
        "--base-image", help="base to resolve on (default: $BASE_IMAGE or debian:{suite}-slim)"
    )
    ldebs.set_defaults(func=cmd_images_lock_debs)

    dist = sub.add_parser("dist", help="the wheels a build wrote to dist/")
    dsub = dist.add_subparsers(dest="action", required=True, metavar="ACTION")
    dinstall = dsub.add_parser(
        "install", help="pip-install a profile's wheels (recorded in the manifest)"
    )
    dinstall.add_argument(
        "targets", nargs="*", metavar="TARGET", help="whose wheels (default: every target's)"
    )
    dinstall.add_argument(
        "--profile", choices=PROFILES, default="cpu", help="build profile (default: cpu)"
    )
    dinstall.add_argument("--target", metavar="DIR", help="install into DIR instead of this env")
    dinstall.set_defaults(func=cmd_dist_install)

    doctor = sub.add_parser(
        "doctor", help="what this machine offers: docker, nvcc, cuDNN, GPU, ..."
    )
    doctor.set_defaults(func=cmd_doctor)
    return parser


def _image_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flavour", choices=FLAVOURS, default="pip", help="default: pip")
    parser.add_argument("--cuda", help="CUDA version (default: the first in images/versions.yaml)")
    parser.add_argument("--cudnn", help="cuDNN version (default: the one paired with --cuda)")
    parser.add_argument(
        "--base-image",
        help="pip/deb flavour base, {suite} filled in (default: $BASE_IMAGE or debian:{suite}-slim)",
    )
    parser.add_argument(
        "--extra-ca",
        metavar="PEM",
        help="CA bundle pip trusts while building (default: $OPFORGE_EXTRA_CA, else $PIP_CERT)",
    )
    parser.add_argument(
        "--framework",
        action="append",
        metavar="REQ",
        help="framework requirement for the image, repeatable; `none`: no framework "
        "(default: torch==2.13.0)",
    )
    parser.add_argument(
        "--find-links",
        action="append",
        metavar="DIR",
        help="local wheel folder for the image's pip, repeatable (default: $PIP_FIND_LINKS)",
    )


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line (plus a hint) and a non-zero exit."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except OpforgeError as exc:
        _err(f"opforge: error: {mask_credentials(exc.message)}")
        if exc.hint:
            _err(f"  hint: {mask_credentials(exc.hint)}")
        return exc.exit_code
    except KeyboardInterrupt:
        _err("opforge: interrupted")
        return 130
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
