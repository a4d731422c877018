"""The VS Code devcontainer through the reference CLI (@devcontainers/cli from npm) against a
real Docker engine, as a VS Code user meets it: `devcontainer up` on a clean copy of the checkout
from a shell where opforge is not importable (only Docker, the CLI and a POSIX shell on the
host), with a loopback proxy set; then `exec opforge doctor` inside. Everything the test creates
(container, images, the CLI's folder, the checkout copy) is removed at the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BASE
from tests.test_docker import created_on

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def devcontainer_cli(tmp_path_factory) -> Iterator[Path]:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm not found: the devcontainer CLI comes from npm (@devcontainers/cli)")
    prefix = tmp_path_factory.mktemp("devcontainer-cli")
    result = subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "@devcontainers/cli"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    yield prefix / "node_modules" / ".bin" / "devcontainer"
    shutil.rmtree(prefix, ignore_errors=True)


def clean_checkout(dest: Path) -> Path:
    """What a clone of this checkout holds: the files git tracks or would (no build/, dist/,
    .venv), as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Iterator[Path]:
    root = clean_checkout(tmp_path_factory.mktemp("devcontainer-checkout"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def host_shell(cli: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a shell with Docker, node and the system's tools only: no virtualenv,
    no PYTHONPATH, so no opforge (checked by the test)."""
    tools = {Path(shutil.which(t) or "/usr/bin/true").parent for t in ("docker", "node")}
    path = [str(cli.parent), *map(str, sorted(tools)), "/usr/local/bin", "/usr/bin", "/bin"]
    keep = ("HOME", "PIP_CERT", "PIP_FIND_LINKS", "DOCKER_HOST", "NODE_EXTRA_CA_CERTS", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return {**env, "PATH": os.pathsep.join(path), **extra}


def test_up_from_a_clean_checkout_without_opforge_on_the_host(
    devcontainer_cli, workspace, client, proxy
):
    seen, proxy_url = proxy
    # Upper case only, as many hosts set them: devcontainer.json's lower-case ones are empty.
    env = host_shell(
        devcontainer_cli,
        {
            "BASE_IMAGE": BASE,
            "HTTP_PROXY": proxy_url,
            "HTTPS_PROXY": proxy_url,
            "OPFORGE_DEVCONTAINER_NETWORK": "host",
        },
    )
    for name in ("python3", "python"):
        python = shutil.which(name, path=env["PATH"])
        if python is None:
            continue  # no such interpreter in that shell: nothing to import opforge with
        probe = subprocess.run(
            [python, "-c", "import opforge"], env=env, capture_output=True, text=True
        )
        assert probe.returncode != 0 or "No module named" in probe.stderr, (
            f"{python} imports opforge in the stripped shell: the test would not show the "
            "devcontainer works without it"
        )

    def devcontainer(command: str, *args: str) -> subprocess.CompletedProcess:
        where = ["--workspace-folder", str(workspace), *label]
        return subprocess.run(
            [str(devcontainer_cli), command, *where, *args],
            capture_output=True,
            text=True,
            timeout=2400,
            env=env,
        )

    label = ["--id-label", f"opforge-test={uuid.uuid4().hex[:8]}"]
    with created_on(client) as created:
        up = None
        try:
            up = devcontainer("up", "--build-no-cache")
            assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
            # pip in the build went through the proxy (a cached layer would not have asked).
            assert any(s.startswith("CONNECT ") for s in seen), seen
            outcome = json.loads(up.stdout.strip().splitlines()[-1])
            assert outcome["outcome"] == "success"
            image = client.containers.get(outcome["containerId"]).image
            config_env = image.attrs["Config"].get("Env") or []
            assert not any(proxy_url in e for e in config_env), config_env
            doctor = devcontainer("exec", "opforge", "doctor")
            assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-3000:]
            rows = {line.split()[0]: line for line in doctor.stdout.splitlines() if line.strip()}
            assert "release 13.0" in rows["nvcc"] and " ok " in rows["nvcc"]
            assert "9.13" in rows["cuDNN"]
            assert f"HTTP_PROXY={proxy_url}" in rows["proxies"]
            # pip and requests inside see the proxy too: no empty lower-case spelling hides it.
            getproxies = devcontainer(
                "exec",
                "python",
                "-c",
                "import json, urllib.request as u; print(json.dumps(u.getproxies()))",
            )
            assert json.loads(getproxies.stdout) == {"http": proxy_url, "https": proxy_url}
            editable = devcontainer(
                "exec", "python", "-c", "import opforge; print(opforge.__file__)"
            )
            assert editable.stdout.strip().startswith("/workspaces/"), editable.stdout
        finally:
            # `up` tags its own vsc-<folder>-<hash> image; a failed build leaves its step's
            # container and the images of the steps before it: all removed (created_on).
            image_tag = None
            for container in client.containers.list(all=True, filters={"label": label[1]}):
                image_tag = (container.image.tags or [container.image.id])[0]
                container.remove(force=True)
            if up is not None:
                created.from_log(image_tag, up.stdout + up.stderr)
