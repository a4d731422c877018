"""Assembling an image's build context: Dockerfile, pinned wheels, requirement lists, extra CA.

The context is a fresh directory under ``build/images/``; its digest (over everything the image
is made from) names the image, so an unchanged image is found instead of rebuilt.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from opforge.dirs import BUILD_DIR_HINT, make_dirs
from opforge.errors import ConfigError
from opforge.images.ca import read_ca_bundle
from opforge.images.spec import ImageSpec
from opforge.locks import hold_locks
from opforge.pins.digest import hash_file
from opforge.pins.fetch import Fetcher
from opforge.pins.model import PinSet

# What the devel image's Python needs beyond opforge's own requirements: the test runner and
# numpy (the C ABI tests); the runtime image also installs opforge from the mounted source.
_DEVEL_EXTRA = ("pytest", "numpy")
_RUNTIME_EXTRA = ("pytest", "numpy", "setuptools>=69", "wheel")


@dataclass(frozen=True)
class BuildContext:
    """A ready context directory, its Dockerfile and the digest of everything in it."""

    path: Path
    dockerfile: str
    digest: str


def opforge_requirements(extras: tuple[str, ...] = ()) -> list[str]:
    """opforge's installed requirements without markers, plus those of ``extras``."""
    found = []
    for req in importlib.metadata.requires("opforge") or []:
        spec, _, marker = req.partition(";")
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if not marker.strip() or (extra and extra.group(1) in extras):
            found.append(spec.strip())
    return found


def _link_or_copy(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)


def _debian_lock(spec: ImageSpec, images_dir: Path, kind: str) -> Path:
    toolkit = spec.combination.debian
    if toolkit is None:
        raise spec.combination.missing("deb")
    lock = toolkit.lock_path(images_dir, kind)
    if not lock.is_file():
        raise ConfigError(
            f"{lock} is missing: the deb flavour installs only locked Debian packages",
            hint=f"run `opforge images lock-debs --cuda {toolkit.cuda}`",
        )
    return lock


def assemble(
    spec: ImageSpec,
    images_dir: Path,
    staging: Path,
    pins: PinSet,
    fetcher: Fetcher,
    base_id: str,
) -> BuildContext:
    """Write the context for ``spec`` into ``staging`` and return it with its digest.

    The context is written next to ``staging`` and moved into its place only when complete, so
    a failure (a pin missing from the lock, a download refused) leaves the previous context as
    it was. The context is locked meanwhile (``staging_lock``): another run writing it fails
    at once.
    """
    dockerfile = images_dir / f"Dockerfile.{spec.flavour}"
    if not dockerfile.is_file():
        raise ConfigError(f"{dockerfile} is missing", hint="restore it from the repository")
    # Read first: a bad bundle fails before anything is downloaded.
    ca = b"" if spec.extra_ca is None else read_ca_bundle(spec.extra_ca, spec.extra_ca_from)
    with staging_lock(staging):
        partial = staging.with_name(staging.name + ".partial")
        _remove(partial)
        try:
            digest = _write_context(
                spec, images_dir, dockerfile, ca, partial, pins, fetcher, base_id
            )
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        _remove(staging)
        partial.rename(staging)
    return BuildContext(staging, "Dockerfile", digest)


def staging_lock(staging: Path) -> AbstractContextManager[None]:
    """The lock on one image's context folder ``staging`` (a file beside it, as the folder is
    replaced whole): held while the context is written, and by an image build until its
    context is read."""
    folder = make_dirs(staging.parent, hint=BUILD_DIR_HINT)
    return hold_locks(folder, writer="image build", name=f".{staging.name}.lock", what=str(staging))


def _remove(path: Path) -> None:
    """Remove what stands at ``path`` in opforge's own build folder: a directory tree, or a
    file or symbolic link as itself (never what a link points to)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _write_context(
    spec: ImageSpec,
    images_dir: Path,
    dockerfile: Path,
    ca: bytes,
    staging: Path,
    pins: PinSet,
    fetcher: Fetcher,
    base_id: str,
) -> str:
    """Write the context for ``spec`` into the new directory ``staging``; return its digest."""
    ctx = staging / "context"
    make_dirs(ctx / "pinned", hint=BUILD_DIR_HINT)
    make_dirs(ctx / "wheels", hint=BUILD_DIR_HINT)
    digest = hashlib.sha256()

    def record(label: str, data: bytes) -> None:
        digest.update(f"{label}:{len(data)}:".encode())
        digest.update(data)

    shutil.copyfile(dockerfile, staging / "Dockerfile")
    record("dockerfile", dockerfile.read_bytes())
    scripts = ["expose-cuda.sh", "check-pinned.py"] + (["debs.sh"] if spec.flavour == "deb" else [])
    for name in scripts:
        script = images_dir / "scripts" / name
        shutil.copyfile(script, ctx / name)
        record(name, script.read_bytes())
    record("spec", f"{spec.kind} {spec.flavour} {base_id} keep_ca={spec.keep_ca}".encode())

    for kind in ("devel", "runtime"):
        if spec.flavour == "deb":
            lock = _debian_lock(spec, images_dir, kind)
            shutil.copyfile(lock, ctx / f"debs-{kind}.lock")
            record(f"debs-{kind}", lock.read_bytes())
        lines = []
        for name in spec.combination.wheel_pins(spec.flavour, kind):
            if name not in pins.pins:
                raise ConfigError(
                    f"images/versions.yaml names pin {name!r}, which is not in {pins.path.name}",
                    hint=f"add {name} to {pins.path.name} (sha256 from the index) or fix the name",
                )
            pin = pins.pins[name]
            target = ctx / "pinned" / pin.filename
            if not target.exists():
                _link_or_copy(fetcher.fetch(pin), target)
            lines.append(f"/ctx/pinned/{pin.filename} --hash=sha256:{pin.sha256}")
        text = "\n".join(lines) + "\n"
        (ctx / f"pinned-{kind}.txt").write_text(text)
        record(f"pinned-{kind}", text.encode())
        extras = ("build",) if kind == "devel" else ()
        packages = [
            *opforge_requirements(extras),
            *(_DEVEL_EXTRA if kind == "devel" else _RUNTIME_EXTRA),
            *spec.frameworks,
        ]
        text = "\n".join(packages) + "\n"
        (ctx / f"packages-{kind}.txt").write_text(text)
        record(f"packages-{kind}", text.encode())

    for wheel in find_links_wheels(spec.find_links):
        _link_or_copy(wheel, ctx / "wheels" / wheel.name)
        record(f"wheel:{wheel.name}", hash_file(wheel)["sha256"].encode())
    (ctx / "extra-ca.pem").write_bytes(ca)
    record("extra-ca", ca)
    return digest.hexdigest()


def find_links_wheels(folders: tuple[Path, ...]) -> list[Path]:
    """The wheels of the ``--find-links`` folders, each a regular file (a pipe named like a
    wheel would hold the hashing up for ever); raises for a folder that is not one."""
    wheels = []
    for folder in folders:
        if not Path(folder).is_dir():
            raise ConfigError(
                f"--find-links {folder}: not a folder",
                hint="give a folder of wheels, or leave the flag out",
            )
        for wheel in sorted(Path(folder).glob("*.whl")):
            if not wheel.is_file():
                raise ConfigError(
                    f"--find-links {folder}: {wheel.name} is not a regular file",
                    hint="remove it from the folder, or give another folder",
                )
            wheels.append(wheel)
    return wheels
