"""The deb flavour's lock files: which Debian packages, versions and sha256 make up a toolkit.

``images/scripts/debs.sh lock`` runs in a container of the suite's base image: apt resolves the
toolkit's packages against the archive's signed index, and each package's sha256 is read from
that index. The image build (``debs.sh install``) then installs exactly the locked set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from opforge.atomic import write_text
from opforge.errors import BuildError, ConfigError
from opforge.images.spec import DebianToolkit, fill_base, load_combinations, refuse_empty
from opforge.logtail import LogTail
from opforge.proxies import uses_loopback

_LINE = re.compile(r"^(\S+) (\S+) ([0-9a-f]{64}) (\d+) (pool/\S+\.deb)$")


def toolkits(versions: Path, cuda: str | None = None) -> list[DebianToolkit]:
    """The Debian toolkits of ``images/versions.yaml`` (only ``cuda``'s when given)."""
    refuse_empty("--cuda", cuda)
    found: dict[str, DebianToolkit] = {}
    for combo in load_combinations(versions):
        if combo.debian is not None:
            found[combo.debian.cuda] = combo.debian
    if cuda is not None and cuda not in found:
        raise ConfigError(
            f"no Debian toolkit for cuda {cuda} in {versions}",
            hint=f"toolkits: {', '.join(sorted(found)) or 'none'}",
        )
    return [found[cuda]] if cuda is not None else [found[c] for c in sorted(found)]


def parse_lock(text: str, source: str) -> list[tuple[str, str, str, int, str]]:
    """(name, version, sha256, size, pool path) per package; a malformed line is an error."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise ConfigError(
                f"{source}:{number}: not a lock line (name version sha256 size pool-path): {line!r}",
                hint="regenerate the lock with `opforge images lock-debs`",
            )
        name, version, sha256, size, path = match.groups()
        entries.append((name, version, sha256, int(size), path))
    return entries


def lock_text(toolkit: DebianToolkit, kind: str, base: str, resolved: str) -> str:
    """The lock file for ``resolved`` (debs.sh lock's output), with its header."""
    entries = parse_lock(resolved, f"debs.sh lock on {base}")
    if not entries:
        raise BuildError(
            f"debs.sh lock on {base} resolved no packages for {toolkit.suite}",
            hint=f"check that the base image is Debian {toolkit.suite} and reaches its archive",
        )
    header = (
        f"# {toolkit.suite}, CUDA {toolkit.cuda}, {kind} image, on {base}: "
        f"written by `opforge images lock-debs` from the archive's signed index; do not edit.\n"
        f"# asked for: {' '.join(toolkit.packages[kind])}\n"
        "# name version sha256 size pool-path\n"
    )
    return header + "".join(" ".join(map(str, e)) + "\n" for e in entries)


def lock_debs(
    client,
    images_dir: Path,
    cuda: str | None,
    base_image: str | None,
    proxies: Mapping[str, str],
    say: Callable[[str], None] = print,
    *,
    root: Path,
) -> list[Path]:
    """Write the lock files of each Debian toolkit (or ``cuda``'s), resolved in its base image
    (``proxies`` in the resolving container's environment), none through a link out of the
    project at ``root``."""
    from docker.errors import ContainerError, DockerException

    written = []
    script = images_dir / "scripts" / "debs.sh"
    for toolkit in toolkits(images_dir / "versions.yaml", cuda):
        base = fill_base(base_image, toolkit.suite)
        for kind in ("devel", "runtime"):
            say(f"[lock-debs] cuda {toolkit.cuda} {kind}: resolving on {base}")
            try:
                out = client.containers.run(
                    base,
                    ["sh", "/debs.sh", "lock", *toolkit.packages[kind]],
                    volumes={str(script): {"bind": "/debs.sh", "mode": "ro"}},
                    environment=dict(proxies),
                    network_mode="host" if uses_loopback(proxies) else None,
                    remove=True,
                    stderr=False,
                )
            except ContainerError as exc:
                tail = LogTail()
                for line in (exc.stderr or b"").decode(errors="replace").strip().splitlines():
                    tail.add(line)
                raise BuildError(
                    f"resolving {' '.join(toolkit.packages[kind])} on {base} failed",
                    hint="check the package versions in images/versions.yaml against the archive",
                    details=tail.details("last lines of its error output"),
                ) from None
            except DockerException as exc:
                raise BuildError(
                    f"cannot run {base} to resolve the cuda {toolkit.cuda} packages: {exc}",
                    hint="build or pull the base image (BASE_IMAGE, e.g. opforge-base:{suite})",
                ) from None
            path = toolkit.lock_path(images_dir, kind)
            write_text(path, lock_text(toolkit, kind, base, out.decode()), root=root)
            written.append(path)
    return written
