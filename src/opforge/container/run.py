"""One command in a container of an opforge image, with the project and the caches mounted.

The source tree and the download cache are bind-mounted at their host paths, pip's cache is a
named volume, the container runs as the invoking user (outputs are not root-owned), proxies are
passed as environment (never baked into the image), and GPUs are passed through when the engine
has the NVIDIA runtime.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from opforge.errors import BuildError, ConfigError
from opforge.logtail import LogTail
from opforge.proxies import uses_loopback
from opforge.settings import PIP_CACHE_VOLUME

_TAIL_LINES = 30
PIP_CACHE = "/var/cache/opforge-pip"
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]+")


def require_volume_name(pip_cache_volume: str) -> None:
    """Refuse a pip cache volume (OPFORGE_PIP_CACHE_VOLUME) that is no Docker volume name.
    Docker takes a "name" with a '/' in it as a host path to bind: "/" would put pip's cache,
    and the chmod that opens a new volume up, on the host's root."""
    if not _VOLUME_NAME.fullmatch(pip_cache_volume):
        raise ConfigError(
            f"OPFORGE_PIP_CACHE_VOLUME={pip_cache_volume!r} is not a Docker volume "
            "name (letters, digits, '_', '.' and '-', starting with a letter or digit)",
            hint=f"set it to a volume name, e.g. {PIP_CACHE_VOLUME}, or unset it",
        )


@dataclass
class ContainerRun:
    """Commands in containers of ``image``: the project and cache mounted, pip's cache in the
    volume ``pip_cache_volume`` (a name require_volume_name takes), ``proxies`` in the
    environment."""

    client: object
    image: str
    project_root: Path
    cache_dir: Path
    pip_cache_volume: str
    proxies: Mapping[str, str] = field(default_factory=dict)
    user: str = field(default_factory=lambda: f"{os.getuid()}:{os.getgid()}")
    say: Callable[[str], None] = print
    # More folders the command writes to, mounted at their own paths (e.g. a JUnit folder
    # outside the project: written only inside the container, its reports would be lost).
    mounts: tuple[Path, ...] = ()

    def gpu_requests(self) -> list:
        """A request for every GPU when the engine has the NVIDIA runtime, else none."""
        import docker

        runtimes = self.client.info().get("Runtimes", {})
        if "nvidia" not in runtimes:
            return []
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]

    def run(self, argv: list[str], env: dict[str, str], what: str) -> None:
        """Run ``argv``, streaming its output; raise BuildError with the tail on failure."""
        root = str(self.project_root)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        environment = {
            "HOME": "/tmp",
            "PIP_CACHE_DIR": PIP_CACHE,
            "PYTHONDONTWRITEBYTECODE": "1",
            **self.proxies,
            **env,
        }
        volumes = {
            root: {"bind": root, "mode": "rw"},
            str(self.cache_dir): {"bind": str(self.cache_dir), "mode": "rw"},
            self.pip_cache_volume: {"bind": PIP_CACHE, "mode": "rw"},
            **{str(m): {"bind": str(m), "mode": "rw"} for m in self.mounts},
        }
        self._ensure_pip_cache()
        container = self.client.containers.run(
            self.image,
            argv,
            detach=True,
            user=self.user,
            working_dir=root,
            environment=environment,
            volumes=volumes,
            network_mode="host" if uses_loopback(self.proxies) else None,
            device_requests=self.gpu_requests() or None,
        )
        tail = LogTail(_TAIL_LINES)
        try:
            for chunk in container.logs(stream=True, follow=True):
                for line in chunk.decode("utf-8", "replace").splitlines():
                    tail.add(line)
                    self.say(line)
            code = container.wait().get("StatusCode", 1)
        finally:
            container.remove(force=True)
        if code != 0:
            raise BuildError(
                f"{what} failed in container {self.image} (exit {code}): {shlex.join(argv)}",
                details=tail.details("last lines"),
                hint="the lines above come from inside the container; "
                "`--runner host` runs the same steps here",
            )

    def _ensure_pip_cache(self) -> None:
        # A named volume is created root-owned: open it up once so any build user can write.
        from docker.errors import NotFound

        try:
            self.client.volumes.get(self.pip_cache_volume)
            return
        except NotFound:
            pass
        self.client.volumes.create(self.pip_cache_volume)
        self.client.containers.run(
            self.image,
            ["chmod", "1777", PIP_CACHE],
            user="0:0",
            volumes={self.pip_cache_volume: {"bind": PIP_CACHE, "mode": "rw"}},
            remove=True,
        )
