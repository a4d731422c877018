"""Image operations for the CLI and the container layer: specs from options, ensure, list, lock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from opforge.dockerengine import docker_client
from opforge.errors import ConfigError
from opforge.images.build import BuiltImage, build_image
from opforge.images.context import staging_lock
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
from opforge.requirements import requirement_problem
from opforge.settings import Settings
from opforge.yamledit import find, render, rewrite_file
from opforge.yamlfile import read_text_file


@dataclass(frozen=True)
class ImageOptions:
    """The user's choices that select and shape an image, resolved (flags over environment)."""

    flavour: str = "pip"
    cuda: str | None = None
    cudnn: str | None = None
    base_image: str | None = None
    extra_ca: Path | None = None
    extra_ca_from: str = "--extra-ca"
    keep_ca: bool = False
    frameworks: tuple[str, ...] | None = None
    find_links: tuple[Path, ...] = ()


def image_options(
    settings: Settings,
    *,
    flavour: str = "pip",
    cuda: str | None = None,
    cudnn: str | None = None,
    keep_ca: bool = False,
    frameworks: tuple[str, ...] | None = None,
) -> ImageOptions:
    """The image flags of one command, with the base image, CA bundle and wheel folders the
    settings resolved (``--base-image`` or ``BASE_IMAGE``, and so on)."""
    return ImageOptions(
        flavour=flavour,
        cuda=cuda,
        cudnn=cudnn,
        base_image=settings.base_image,
        extra_ca=settings.extra_ca,
        extra_ca_from=settings.extra_ca_from,
        keep_ca=keep_ca,
        frameworks=frameworks,
        find_links=settings.find_links,
    )


def frameworks_to_install(requested: tuple[str, ...] | None) -> tuple[str, ...]:
    """What ``--framework`` asks an image to install: the default for ``None``, nothing for
    ``none``. Each must be one PEP 508 requirement on one line, since pip reads the image's
    package list line by line (a line break would add options such as ``--index-url``)."""
    if requested is None:
        return DEFAULT_FRAMEWORKS
    others = [r for r in requested if r != NO_FRAMEWORK]
    if others and len(others) != len(requested):
        raise ConfigError(
            f"--framework {NO_FRAMEWORK} (an image without a framework) contradicts "
            f"--framework {others[0]!r}",
            hint=f"give --framework {NO_FRAMEWORK} alone, or only the frameworks to install",
        )
    for requirement in others:
        problem = requirement_problem(requirement)
        if problem:
            raise ConfigError(
                f"--framework {requirement!r} {problem}",
                hint="give one PEP 508 requirement per --framework, e.g. --framework "
                "torch==2.13.0 --framework 'numpy<2'",
            )
    return tuple(others)


def image_spec(project: Project, kind: str, options: ImageOptions) -> ImageSpec:
    """The spec for ``kind`` under ``options`` (versions from images/versions.yaml)."""
    frameworks = frameworks_to_install(options.frameworks)
    combos = load_combinations(project.versions_file)
    combination = find_combination(combos, options.cuda, options.cudnn)
    if options.flavour not in combination.flavours():
        raise combination.missing(options.flavour)
    return ImageSpec(
        kind=kind,
        flavour=options.flavour,
        combination=combination,
        base_image=base_for(options.flavour, combination, options.base_image),
        frameworks=frameworks,
        keep_ca=options.keep_ca,
        extra_ca=options.extra_ca,
        extra_ca_from=options.extra_ca_from,
        find_links=options.find_links,
    )


def ensure_image(
    project: Project,
    fetcher: Fetcher,
    spec: ImageSpec,
    *,
    proxies: Mapping[str, str],
    say: Callable[[str], None] = print,
    client=None,
    **build_options,
) -> BuiltImage:
    """Build ``spec``'s image (``proxies`` as build arguments) unless an identical one exists;
    return its tag. The image contexts' folder is locked while its context is written and read."""
    client = client or docker_client()
    staging = project.image_staging(spec.flavour, spec.kind)
    with staging_lock(staging):
        return build_image(
            client,
            spec,
            project.images_dir,
            staging,
            project.load_pins(),
            fetcher,
            proxies,
            say,
            **build_options,
        )


def lock_report(project: Project) -> list[tuple[str, str, str]]:
    """(combination, image, status) for every ngc base: pinned by digest or unpinned."""
    rows = []
    for combo in load_combinations(project.versions_file):
        for kind, ngc in (combo.ngc or {}).items():
            label = f"cuda {combo.cuda} cudnn {combo.cudnn} {kind}"
            if ngc.digest:
                rows.append((label, ngc.image, f"pinned {ngc.digest}"))
            else:
                rows.append((label, ngc.image, "UNPINNED (no digest recorded)"))
    return rows


def lock_digests(project: Project, client) -> list[tuple[str, str]]:
    """Ask the registry for each unpinned ngc image's digest and record those it gives in
    images/versions.yaml (nothing else in the file changes); (image, why not) for the others."""
    import yaml
    from docker.errors import DockerException

    path = project.versions_file
    text = read_text_file(path)
    root = yaml.compose(text)
    edits, failed = [], []
    for i, combo in enumerate(load_combinations(path, text)):
        for kind, ngc in (combo.ngc or {}).items():
            if ngc.digest:
                continue
            try:
                digest = client.images.get_registry_data(ngc.image).id
            except DockerException as exc:
                failed.append((ngc.image, f"registry did not answer ({type(exc).__name__})"))
                continue
            node = find(root, "combinations", i, "ngc", kind, "digest")
            edits.append((node, render(digest, node, quote='"')))
    if edits:
        rewrite_file(path, text, edits, root=project.root)
    return failed


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
