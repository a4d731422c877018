"""Building images through the Docker SDK: tagged by content digest, proxies as build args."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import BuildError
from opforge.images.context import assemble
from opforge.images.reference import pinned
from opforge.images.spec import ImageSpec
from opforge.logtail import LogTail
from opforge.pins.fetch import Fetcher
from opforge.pins.model import PinSet
from opforge.proxies import uses_loopback

# The classic builder colours a step's stderr; logs and error messages want plain text.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
REPOSITORY = "opforge"


@dataclass(frozen=True)
class BuiltImage:
    """An image tag, whether this call built it (False: an identical one existed), and the IDs
    of the images the build created (every stage's steps that were not served from the cache)."""

    tag: str
    built: bool
    created: tuple[str, ...] = ()


class LayerLog:
    """Reads the classic builder's log and keeps the IDs of the images its steps created, and of
    the containers its steps ran in.

    Each step ends with `` ---> <id>``; a step served from the layer cache says ``Using cache``
    first, and a ``FROM`` step's ID is the base or an earlier stage: neither was created here.
    Cleaning up after a build removes exactly these (never images another build made). Lines may
    carry a ``[timestamp]`` prefix (the devcontainers CLI's log).
    """

    _PREFIX = re.compile(r"^\[[0-9T:.Z-]+\]")
    _STEP = re.compile(r"^\s*Step \d+/\d+ : (\S+)")
    _ID = re.compile(r"^\s*---> ([0-9a-f]{12})\s*$")
    _CONTAINER = re.compile(r"^\s*---> Running in ([0-9a-f]{12})\s*$")

    def __init__(self) -> None:
        self.created: list[str] = []
        self.containers: list[str] = []
        self._owned = False

    def feed(self, line: str) -> None:
        """Take one line of the build's output."""
        line = self._PREFIX.sub("", line)
        if step := self._STEP.match(line):
            self._owned = step.group(1).upper() != "FROM"
        elif line.strip() == "---> Using cache":
            self._owned = False
        elif container := self._CONTAINER.match(line):
            self.containers.append(container.group(1))
        elif (found := self._ID.match(line)) and self._owned:
            self.created.append(found.group(1))
            self._owned = False


def resolve_base(client, spec: ImageSpec) -> tuple[str, str]:
    """(reference to build FROM, identity for the digest) of the spec's base image."""
    if spec.flavour == "ngc":
        ngc = spec.combination.ngc[spec.kind]
        ref = pinned(ngc.image, ngc.digest) if ngc.digest else ngc.image
        return ref, ref
    from docker.errors import ImageNotFound

    try:
        return spec.base_image, client.images.get(spec.base_image).id
    except ImageNotFound:
        # Pulled during the build; its name (ideally name@digest) is its identity.
        return spec.base_image, spec.base_image


def image_tag(spec: ImageSpec, digest: str) -> str:
    """``opforge/<kind>:<flavour>-cuda<X>-cudnn<Y>-<digest12>``."""
    c = spec.combination
    return f"{REPOSITORY}/{spec.kind}:{spec.flavour}-cuda{c.cuda}-cudnn{c.cudnn}-{digest[:12]}"


def build_image(
    client,
    spec: ImageSpec,
    images_dir: Path,
    staging: Path,
    pins: PinSet,
    fetcher: Fetcher,
    proxies: Mapping[str, str],
    say: Callable[[str], None] = print,
    *,
    target: str | None = None,
    nocache: bool = False,
) -> BuiltImage:
    """Build ``spec`` unless an image with the same content digest exists; stream the log.

    ``proxies`` are build arguments, never part of the image. ``target`` builds another stage of
    the Dockerfile (tests use ``system``).
    """
    from docker.errors import APIError, ImageNotFound

    base_ref, base_id = resolve_base(client, spec)
    if spec.flavour == "ngc" and not spec.combination.ngc[spec.kind].digest:
        say(
            f"[image] warning: base {base_ref} is UNPINNED (no digest in images/versions.yaml): "
            "run `opforge images lock` where the registry answers"
        )
    context = assemble(spec, images_dir, staging, pins, fetcher, base_id)
    tag = image_tag(spec, context.digest) + (f"-{target}" if target else "")
    if target is None and not nocache:
        try:
            client.images.get(tag)
            say(f"[image] {spec.name}: up to date ({tag})")
            return BuiltImage(tag, False)
        except ImageNotFound:
            pass
    network = "host" if uses_loopback(proxies) else None
    say(
        f"[image] building {spec.name} from {base_ref}"
        + (" (host network: loopback proxy)" if network else "")
    )
    buildargs = {"BASE_IMAGE": base_ref, "KEEP_CA": "1" if spec.keep_ca else "0", **proxies}
    tail = LogTail()
    layers = LayerLog()
    try:
        stream = client.api.build(
            path=str(context.path),
            dockerfile=context.dockerfile,
            tag=tag,
            target=target or spec.kind,
            buildargs=buildargs,
            network_mode=network,
            rm=True,
            forcerm=True,
            nocache=nocache,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                detail = chunk["error"].strip()
                raise BuildError(
                    f"image {spec.name}: build failed: {detail}",
                    hint=f"the Dockerfile is {images_dir / ('Dockerfile.' + spec.flavour)}",
                    details=tail.details("last lines"),
                )
            for line in _ANSI.sub("", chunk.get("stream", "")).splitlines():
                if line.strip():
                    tail.add(line)
                    layers.feed(line)
                    say(line)
    except APIError as exc:
        raise BuildError(
            f"image {spec.name}: the Docker engine refused the build: {exc}",
            hint="`opforge doctor` shows the engine in use; the build log above says more",
        ) from None
    return BuiltImage(tag, True, tuple(layers.created))


def remove_built(
    client, tags: list[str], created: list[str], containers: list[str] = ()
) -> list[str]:
    """Remove ``tags`` and the images a build created (``LayerLog.created``), newest first, after
    the containers its steps ran in that are still there (a failed step's).

    An image another tag or container still uses is left alone (Docker refuses, and so do we):
    only what this build made goes. Returns what was removed.
    """
    from docker.errors import APIError, ImageNotFound, NotFound

    removed = []
    for container in containers:
        try:
            client.containers.get(container).remove(force=True)
            removed.append(container)
        except NotFound:
            continue
    for ref in [*tags, *reversed(created)]:
        try:
            client.images.remove(ref)
            removed.append(ref)
        except ImageNotFound:
            continue
        except APIError as exc:
            if exc.status_code != 409:  # 409: in use by another image or a container
                raise
    return removed
