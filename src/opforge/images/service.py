"""Image operations for the CLI and the docker runner: specs from options, ensure, list, lock."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opforge.images.build import BuiltImage, build_image, docker_client
from opforge.images.spec import (
    DEFAULT_FRAMEWORKS,
    NO_FRAMEWORK,
    Combination,
    ImageSpec,
    base_for,
    find_combination,
    load_combinations,
)
from opforge.pins.fetch import Fetcher
from opforge.project import Project


@dataclass(frozen=True)
class ImageOptions:
    """The user's choices (CLI flags, environment) that select and shape an image."""

    flavour: str = "pip"
    cuda: str | None = None
    cudnn: str | None = None
    base_image: str | None = None
    extra_ca: Path | None = None
    keep_ca: bool = False
    frameworks: tuple[str, ...] | None = None
    find_links: tuple[Path, ...] | None = None


def default_extra_ca() -> Path | None:
    """OPFORGE_EXTRA_CA, else the CA bundle pip on this host trusts (PIP_CERT), else none."""
    value = os.environ.get("OPFORGE_EXTRA_CA") or os.environ.get("PIP_CERT")
    return Path(value) if value else None


def default_find_links() -> tuple[Path, ...]:
    """Local wheel folders pip on this host uses (PIP_FIND_LINKS), carried into image builds."""
    return tuple(Path(p) for p in os.environ.get("PIP_FIND_LINKS", "").split() if Path(p).is_dir())


def image_spec(project: Project, kind: str, options: ImageOptions) -> ImageSpec:
    """The spec for ``kind`` under ``options`` (versions from images/versions.yaml)."""
    combos = load_combinations(project.root / "images" / "versions.yaml")
    combination = find_combination(combos, options.cuda, options.cudnn)
    if options.flavour not in combination.flavours():
        raise combination.missing(options.flavour)
    base = options.base_image or os.environ.get("BASE_IMAGE")
    return ImageSpec(
        kind=kind,
        flavour=options.flavour,
        combination=combination,
        base_image=base_for(options.flavour, combination, base),
        frameworks=DEFAULT_FRAMEWORKS
        if options.frameworks is None
        else tuple(f for f in options.frameworks if f != NO_FRAMEWORK),
        keep_ca=options.keep_ca,
        extra_ca=options.extra_ca if options.extra_ca is not None else default_extra_ca(),
        find_links=default_find_links() if options.find_links is None else options.find_links,
    )


def ensure_image(
    project: Project,
    fetcher: Fetcher,
    spec: ImageSpec,
    say: Callable[[str], None] = print,
    client=None,
    **build_options,
) -> BuiltImage:
    """Build ``spec``'s image unless an identical one exists; return its tag."""
    client = client or docker_client()
    staging = project.build_dir / "images" / f"{spec.flavour}-{spec.kind}"
    return build_image(
        client,
        spec,
        project.root / "images",
        staging,
        project.load_pins(),
        fetcher,
        say,
        **build_options,
    )


def lock_report(project: Project) -> list[tuple[str, str, str]]:
    """(combination, image, status) for every ngc base: pinned by digest or unpinned."""
    rows = []
    for combo in load_combinations(project.root / "images" / "versions.yaml"):
        for kind, ngc in (combo.ngc or {}).items():
            label = f"cuda {combo.cuda} cudnn {combo.cudnn} {kind}"
            if ngc.digest:
                rows.append((label, ngc.image, f"pinned {ngc.digest}"))
            else:
                rows.append((label, ngc.image, "UNPINNED (no digest recorded)"))
    return rows


def resolve_digests(project: Project, client) -> list[tuple[str, str, str]]:
    """Ask the registry for each ngc image's digest; (image, digest or '', why not)."""
    from docker.errors import DockerException

    found = []
    for combo in load_combinations(project.root / "images" / "versions.yaml"):
        for ngc in (combo.ngc or {}).values():
            try:
                data = client.images.get_registry_data(ngc.image)
                found.append((ngc.image, data.id, ""))
            except DockerException as exc:
                found.append((ngc.image, "", f"registry did not answer ({type(exc).__name__})"))
    return found


def describe(combo: Combination) -> str:
    """One line for ``images list``: the combination and each flavour's source or reason."""
    parts = []
    if combo.pip is not None:
        parts.append("pip: PyPI wheels")
    if combo.debian is not None:
        parts.append(f"deb: Debian {combo.debian.suite} + cuDNN wheel")
    if combo.ngc is not None:
        parts.append(f"ngc: {combo.ngc['devel'].image}")
    missing = [f"no {f}: {why}" for f, why in combo.reasons.items()]
    return f"cuda {combo.cuda:5} cudnn {combo.cudnn:5} " + "; ".join(parts + missing)
