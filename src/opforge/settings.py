"""opforge's settings: command-line flags, the environment and the container handoff, resolved
once into one ``Settings``.

Every environment variable opforge reads is read here, from a mapping passed in (the CLI passes
``os.environ``), and documented in the README's table (``ENVIRONMENT`` below is that table; a
test keeps the two equal). The rest of the package receives a ``Settings`` or values from it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from opforge.errors import ConfigError
from opforge.handoff import Handoff
from opforge.paths import PROJECT_MARKER, find_project_root, not_a_file, resolved
from opforge.proxies import PROXY_NAMES, proxy_conflicts, proxy_environment, proxy_spellings

# Tools a variable may name instead of the search (``opforge.build.toolchain``).
TOOL_VARIABLES = {"c++": "CXX", "nvcc": "CUDACXX"}
PIP_CACHE_VOLUME = "opforge-pip-cache"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

# Every variable opforge reads, and what it sets (the README's table).
ENVIRONMENT: dict[str, str] = {
    "OPFORGE_PROJECT": "the project root, when `--project` is not given",
    "OPFORGE_CACHE": "the download cache, when `--cache` is not given",
    "OPFORGE_BUILD_DIR": "the build trees' directory instead of `<project>/build` "
    "(the devcontainer keeps its own)",
    "OPFORGE_NO_PROGRESS": "set: no download progress bars",
    "CI": "set: no download progress bars (CI logs)",
    "BASE_IMAGE": "the pip/deb flavours' base image, when `--base-image` is not given (blank: unset)",
    "OPFORGE_EXTRA_CA": "a CA bundle image builds trust, when `--extra-ca` is not given",
    "PIP_CERT": "the same, when `OPFORGE_EXTRA_CA` is not set",
    "PIP_FIND_LINKS": "local wheel folders for image builds, when `--find-links` is not given",
    "OPFORGE_PIP_CACHE_VOLUME": "the Docker volume holding pip's cache in containers "
    f"(default {PIP_CACHE_VOLUME}; a volume name, not a path)",
    **{
        name: "proxy for downloads, image builds and containers (either case)"
        for name in PROXY_NAMES
    },
    "CXX": "the C++ compiler builds use",
    "CUDACXX": "the nvcc builds use",
    "CUDNN_ROOT": "where `opforge doctor` looks for cuDNN first (as FindCUDNN does)",
    "DOCKER_HOST": "the Docker engine (read by the Docker SDK; `opforge doctor` names it)",
    "REQUESTS_CA_BUNDLE": "the CA bundle downloads trust (read by requests; `doctor` shows it)",
    "CURL_CA_BUNDLE": "the same, where REQUESTS_CA_BUNDLE is unset (read by requests)",
}


def default_cache_dir() -> Path:
    """The platform's per-user cache directory for opforge."""
    return Path(platformdirs.user_cache_dir("opforge", appauthor=False))


@dataclass(frozen=True)
class Settings:
    """Everything opforge takes from outside its project files, resolved.

    ``project_dir`` None: the project is found by searching up from ``cwd``. ``build_dir`` None:
    ``<project>/build``. ``image``: the container image a build runs in (``host`` outside one).
    """

    cwd: Path = field(default_factory=Path.cwd)
    project_dir: Path | None = None
    project_from: str = "--project"
    pins_file: Path | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    build_dir: Path | None = None
    image: str = "host"
    progress: bool = True
    base_image: str | None = None
    extra_ca: Path | None = None
    extra_ca_from: str = "--extra-ca"  # the flag or variable that set extra_ca
    find_links: tuple[Path, ...] = ()
    pip_cache_volume: str = PIP_CACHE_VOLUME
    proxies: dict[str, str] = field(default_factory=dict)
    proxy_conflicts: tuple[str, ...] = ()
    proxy_spellings: dict[str, str] = field(default_factory=dict)
    tool_overrides: dict[str, str] = field(default_factory=dict)
    cudnn_root: Path | None = None
    docker_host: str = DEFAULT_DOCKER_HOST
    ca_bundle: str | None = None

    def project_root(self) -> Path:
        """The project root: as named (``--project`` or ``OPFORGE_PROJECT``, which must hold a
        checkout), else the nearest directory at or above ``cwd`` holding checksums.yaml."""
        if self.project_dir is None:
            return find_project_root(self.cwd)
        # --handoff names the project inside the container that opforge itself started.
        if self.project_from == "--handoff":
            return self.project_dir
        checkout = f"the root of an opforge checkout (the directory holding {PROJECT_MARKER})"
        if not self.project_dir.is_dir():
            state = "is not a directory" if self.project_dir.exists() else "does not exist"
            raise ConfigError(
                f"project directory {self.project_dir} ({self.project_from}) {state}",
                hint=f"point {self.project_from} at {checkout}",
            )
        marker = self.project_dir / PROJECT_MARKER
        if os.path.lexists(marker) and not marker.is_file():
            raise ConfigError(
                f"{marker} ({self.project_from}) is {not_a_file(marker)}, where the project's "
                "pins file should be",
                hint=f"replace it with the pins file, or point {self.project_from} at {checkout}",
            )
        if not marker.is_file():
            flag = self.project_from == "--project"
            named = (
                f"--project {self.project_dir}" if flag else f"OPFORGE_PROJECT={self.project_dir}"
            )
            # Pointed at a folder inside a checkout, the likeliest slip: name its root.
            with contextlib.suppress(ConfigError):
                checkout = f"the checkout's root, {find_project_root(self.project_dir)}"
            raise ConfigError(
                f"{named} has no {PROJECT_MARKER}",
                hint=f"point {self.project_from} at {checkout}, or "
                f"{'leave it out' if flag else 'unset it'}",
            )
        return self.project_dir


def _given(value: str | None) -> str | None:
    """``value`` unless it is unset, empty or only whitespace (``OPFORGE_CACHE=" "`` is a slip,
    not a folder named " ")."""
    return value if value and value.strip() else None


def _path(value: str | None) -> Path | None:
    return Path(value) if _given(value) else None


def _absolute(value: str | None, cwd: Path) -> Path | None:
    """``value`` as a path against ``cwd``: a relative folder means the same one to every part
    of a build, which runs its steps from the project root."""
    return cwd / value if _given(value) else None


def resolve_settings(
    environ: Mapping[str, str],
    *,
    project: str | None = None,
    pins: str | None = None,
    cache: str | None = None,
    base_image: str | None = None,
    extra_ca: str | None = None,
    find_links: Sequence[str] | None = None,
    handoff: Handoff | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Settings from flags (keyword arguments; None: not given), then the container ``handoff``,
    then ``environ``, then defaults."""
    here = (cwd or Path.cwd()).absolute()
    if _given(project):
        project_dir, project_from = resolved(here / project, "--project"), "--project"
    elif handoff is not None:
        project_dir, project_from = handoff.project, "--handoff"
    elif _given(environ.get("OPFORGE_PROJECT")):
        project_dir = resolved(here / environ["OPFORGE_PROJECT"], "OPFORGE_PROJECT")
        project_from = "OPFORGE_PROJECT"
    else:
        project_dir, project_from = None, "the current directory"
    if find_links is not None:
        links = tuple(Path(p) for p in find_links)
    else:
        # pip's own setting: only the folders that exist here can go into an image build.
        links = tuple(
            Path(p) for p in environ.get("PIP_FIND_LINKS", "").split() if Path(p).is_dir()
        )
    return Settings(
        cwd=here,
        project_dir=project_dir,
        project_from=project_from,
        pins_file=_path(pins),
        cache_dir=_absolute(cache, here)
        or (handoff.cache_dir if handoff else None)
        or _absolute(environ.get("OPFORGE_CACHE"), here)
        or default_cache_dir(),
        build_dir=(handoff.build_dir if handoff else None)
        or _absolute(environ.get("OPFORGE_BUILD_DIR"), here),
        image=handoff.image if handoff else "host",
        progress=not (environ.get("CI") or environ.get("OPFORGE_NO_PROGRESS")),
        base_image=base_image or _given(environ.get("BASE_IMAGE")),
        extra_ca=_path(
            _given(extra_ca) or _given(environ.get("OPFORGE_EXTRA_CA")) or environ.get("PIP_CERT")
        ),
        extra_ca_from="--extra-ca"
        if _given(extra_ca)
        else "OPFORGE_EXTRA_CA"
        if _given(environ.get("OPFORGE_EXTRA_CA"))
        else "PIP_CERT",
        find_links=links,
        pip_cache_volume=_given(environ.get("OPFORGE_PIP_CACHE_VOLUME")) or PIP_CACHE_VOLUME,
        proxies=proxy_environment(environ),
        proxy_conflicts=proxy_conflicts(environ),
        proxy_spellings=proxy_spellings(environ),
        tool_overrides={
            tool: environ[variable]
            for tool, variable in TOOL_VARIABLES.items()
            if environ.get(variable)
        },
        cudnn_root=_path(environ.get("CUDNN_ROOT")),
        docker_host=environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST,
        # requests' own order.
        ca_bundle=environ.get("REQUESTS_CA_BUNDLE") or environ.get("CURL_CA_BUNDLE") or None,
    )


def ca_bundle_problem(path: str | None) -> str | None:
    """What is wrong with the CA bundle downloads trust (REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE),
    which requests refuses to start a download with; None when it is fine or unset."""
    if path is None:
        return None
    named = f"{path} (REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE)"
    if not os.path.exists(path):
        return f"{named} does not exist"
    if os.path.isdir(path):
        return None
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"{named}: {exc.strerror}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"{named} is neither a file nor a folder"
        # Without one, TLS fails with a message that blames the server's certificate.
        if not _holds_pem_certificate(fd):
            return f"{named} holds no PEM certificate"
    except OSError as exc:
        return f"{named}: {exc.strerror}"
    finally:
        os.close(fd)
    return None


def _holds_pem_certificate(fd: int) -> bool:
    """Whether the file open at ``fd`` holds a PEM certificate in its first 16 MiB (a system
    bundle is about 220 KB)."""
    marker = b"-----BEGIN CERTIFICATE-----"
    seen = b""
    for _ in range(256):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return False
        seen = seen[-len(marker) :] + chunk
        if marker in seen:
            return True
    return False
