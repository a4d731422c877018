"""The Docker engine of this environment: the one place that connects to it and says why not."""

from __future__ import annotations

from typing import TYPE_CHECKING

from opforge.errors import ToolMissing

if TYPE_CHECKING:
    from docker import DockerClient

# Long enough for an image build's slowest API call; probes use their own short timeout.
CLIENT_TIMEOUT_S = 600
PROBE_TIMEOUT_S = 3


class BadDockerHost(ToolMissing):
    """DOCKER_HOST is set to something that is no engine address."""


def docker_client(timeout: int = CLIENT_TIMEOUT_S, instead: str | None = None) -> DockerClient:
    """A Docker SDK client for the engine of this environment (DOCKER_HOST or the local
    socket, as the SDK reads them), or ``ToolMissing`` saying why there is none.

    ``instead``: what the calling command can do without an engine (its hint names it only
    where the command has such an option, e.g. ``use --runner host``)."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        raise ToolMissing(
            "the docker SDK is not installed", hint="pip install docker (opforge depends on it)"
        ) from None
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except ValueError as exc:
        # The SDK's parse of DOCKER_HOST (a port that is no number, an unclosed IPv6 bracket).
        raise BadDockerHost(
            f"DOCKER_HOST is no engine address ({exc})",
            hint="set DOCKER_HOST to unix:///PATH, tcp://HOST:PORT or ssh://HOST, or unset it"
            + (f"; or {instead}" if instead else ""),
        ) from None
    except DockerException as exc:
        raise ToolMissing(
            f"no Docker engine answers ({type(exc).__name__})",
            hint="start dockerd (or set DOCKER_HOST)" + (f", or {instead}" if instead else ""),
        ) from None
    return client


def engine_missing() -> str | None:
    """None when a Docker engine answers here, else why not, in a few words."""
    try:
        client = docker_client(PROBE_TIMEOUT_S)
    except ToolMissing as exc:
        return exc.message
    client.close()
    return None


def engine_version() -> str:
    """The engine's server version; ``ToolMissing`` when none answers."""
    client = docker_client(PROBE_TIMEOUT_S)
    try:
        return client.version().get("Version", "?")
    finally:
        client.close()
