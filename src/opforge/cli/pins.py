"""``opforge pins``: list, fetch, verify, install and update the pinned external inputs."""

from __future__ import annotations

import argparse
from pathlib import Path

from opforge.cli.common import (
    add_fetch_options,
    fetcher,
    path_text,
    pins_fetch_command,
    positive,
    project,
    refuse_a_file_as_folder,
)
from opforge.errors import PinError
from opforge.pins.cache import CacheState, ContentCache
from opforge.pins.install import install_wheels
from opforge.pins.model import PinSet, load_pins, refuse_shared_file_names
from opforge.pins.update import update_pin
from opforge.settings import Settings

#: The most parallel downloads ``pins fetch --jobs`` takes: each is a thread with its own
#: connection; 64 fill any link, and far more only exhaust threads and trip mirrors' rate limits.
MAX_DOWNLOADS = 64

#: The argument type of ``pins fetch --jobs``: 1 to ``MAX_DOWNLOADS``.
download_count = positive(int, MAX_DOWNLOADS)


def _human_size(size: int | None) -> str:
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _pins_path(settings: Settings) -> Path:
    # --pins alone needs no project around it.
    return settings.pins_file or project(settings).pins_path


def _pins(settings: Settings) -> PinSet:
    return load_pins(_pins_path(settings))


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """Print each pin with its size, digest and whether it is cached ("damaged": an entry of
    another size or kind, which ``pins verify`` removes and ``pins fetch`` replaces)."""
    cache = ContentCache(settings.cache_dir)
    pins = _pins(settings)
    if not pins.pins:
        print(f"no pins in {pins.path}")
    for pin in pins.pins.values():
        state = "cached" if cache.has(pin) else "damaged" if cache.holds_entry(pin) else "-"
        print(
            f"{pin.name:<22} {_human_size(pin.size):>9}  {pin.sha256[:16]}  {state:<7}  {pin.filename}"
        )
    return 0


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    """Download (or find in the cache) the named pins, verified."""
    pins = _pins(settings).select(args.names)
    if args.dest:
        refuse_shared_file_names(
            pins, f"placed in {args.dest}", "fetch them into separate --dest folders, one at a time"
        )
        refuse_a_file_as_folder("--dest", Path(args.dest))
    getter = fetcher(args, settings)
    paths = getter.fetch_many(pins, jobs=args.jobs)
    for pin in pins:
        how = "fetched" if pin.name in getter.downloaded else "cached"
        path = getter.cache.export(pin, Path(args.dest)) if args.dest else paths[pin.name]
        print(f"{pin.name:<22} {how:<8} {path}")
    return 0


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    """Re-hash the cached files of the named pins; report missing and corrupt ones."""
    pins = _pins(settings).select(args.names)
    cache = ContentCache(settings.cache_dir)
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
            hint=f"run `{pins_fetch_command(args, bad)}`",
        )
    return 0


def cmd_install(args: argparse.Namespace, settings: Settings) -> int:
    """pip-install wheel pins, verified, into this interpreter (or --target DIR)."""
    pins = _pins(settings).select(args.names)
    target = Path(args.target) if args.target else None
    if target is not None:
        refuse_a_file_as_folder("--target", target)
    for name in install_wheels(pins, fetcher(args, settings), target):
        print(f"installed {name}")
    return 0


def cmd_update(args: argparse.Namespace, settings: Settings) -> int:
    """Re-download one pin and record its digest in the pins file."""
    if args.offline:
        raise PinError(
            "pins update needs the network, but --offline was given", hint="drop --offline"
        )
    path = _pins_path(settings)
    result = update_pin(path, args.name, fetcher(args, settings))
    confirmed = f" (matches {result.confirmed_by})" if result.confirmed_by else ""
    if result.changed:
        print(
            f"{args.name}: sha256 {result.old.sha256 or '(none)'} -> {result.new.sha256}{confirmed}"
        )
        print(f"updated {path}")
    else:
        print(f"{args.name}: unchanged, sha256 {result.new.sha256}{confirmed}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``pins`` and its actions."""
    pins = sub.add_parser("pins", help="list, fetch, verify and update pinned external inputs")
    actions = pins.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="each pin with size, digest and cache state")
    add_fetch_options(listing, downloads=False)
    listing.set_defaults(func=cmd_list)
    fetch = actions.add_parser("fetch", help="download pins into the cache, verified by sha256")
    fetch.add_argument("names", nargs="*", metavar="NAME", help="pins to fetch (default: all)")
    fetch.add_argument(
        "--jobs",
        type=download_count,
        default=4,
        metavar="N",
        help=f"parallel downloads, 1 to {MAX_DOWNLOADS} (default: 4)",
    )
    fetch.add_argument(
        "--dest",
        type=path_text,
        metavar="DIR",
        help="also place the verified files in DIR under their own names (e.g. to pip install)",
    )
    add_fetch_options(fetch)
    fetch.set_defaults(func=cmd_fetch)
    verify = actions.add_parser(
        "verify", help="re-hash cached files; report missing or corrupt ones"
    )
    verify.add_argument("names", nargs="*", metavar="NAME", help="pins to verify (default: all)")
    add_fetch_options(verify, downloads=False)
    verify.set_defaults(func=cmd_verify)
    install = actions.add_parser(
        "install", help="pip-install wheel pins, sha256-verified and without dependencies"
    )
    install.add_argument("names", nargs="+", metavar="NAME", help="wheel pins to install")
    install.add_argument(
        "--target", type=path_text, metavar="DIR", help="install into DIR instead of this env"
    )
    add_fetch_options(install)
    install.set_defaults(func=cmd_install)
    update = actions.add_parser(
        "update", help="re-download one pin and rewrite its digest (nothing else in the file)"
    )
    update.add_argument(
        "name", metavar="NAME", help="the pin to re-download (see `opforge pins list`)"
    )
    add_fetch_options(update)
    update.set_defaults(func=cmd_update)
