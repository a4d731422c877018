"""The VS Code devcontainer through the reference CLI (@devcontainers/cli from npm) against a
real Docker engine: `devcontainer build`, then `up` + `exec opforge doctor` inside, with a
loopback proxy set on the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import BASE
from tests.test_docker import copy_project

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def devcontainer_cli(tmp_path_factory) -> Path:
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
    return prefix / "node_modules" / ".bin" / "devcontainer"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, client) -> Path:
    root = copy_project(tmp_path_factory.mktemp("devcontainer-project"))
    shutil.copytree(REPO / ".devcontainer", root / ".devcontainer")
    return root


def devcontainer(cli: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(cli), *args], capture_output=True, text=True, timeout=1800, env={**os.environ, **env}
    )


def test_build_up_and_doctor_behind_a_loopback_proxy(devcontainer_cli, workspace, client, proxy):
    _, proxy_url = proxy
    env = {
        "BASE_IMAGE": BASE,
        "HTTP_PROXY": proxy_url,
        "OPFORGE_DEVCONTAINER_NETWORK": "host",
        # initializeCommand runs `python3 -m opforge` on the host: this environment's.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    image = f"opforge-devcontainer-test:{uuid.uuid4().hex[:8]}"
    # `devcontainer up` (and VS Code) run initializeCommand; `devcontainer build` does not.
    context = subprocess.run(
        [sys.executable, "-m", "opforge", "images", "context", "--kind", "devel"],
        cwd=workspace,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    assert context.returncode == 0, context.stderr
    built = devcontainer(
        devcontainer_cli,
        "build",
        "--workspace-folder",
        str(workspace),
        "--image-name",
        image,
        env=env,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    config_env = client.images.get(image).attrs["Config"].get("Env") or []
    assert not any(proxy_url in e for e in config_env), config_env
    label = f"opforge-test={uuid.uuid4().hex[:8]}"
    try:
        up = devcontainer(
            devcontainer_cli,
            "up",
            "--workspace-folder",
            str(workspace),
            "--id-label",
            label,
            env=env,
        )
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert json.loads(up.stdout.strip().splitlines()[-1])["outcome"] == "success"
        doctor = devcontainer(
            devcontainer_cli,
            "exec",
            "--workspace-folder",
            str(workspace),
            "--id-label",
            label,
            "opforge",
            "doctor",
            env=env,
        )
        assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-3000:]
        rows = {line.split()[0]: line for line in doctor.stdout.splitlines() if line.strip()}
        assert "release 13.0" in rows["nvcc"] and " ok " in rows["nvcc"]
        assert "9.13" in rows["cuDNN"]
        assert f"HTTP_PROXY={proxy_url}" in rows["proxies"]
        editable = devcontainer(
            devcontainer_cli,
            "exec",
            "--workspace-folder",
            str(workspace),
            "--id-label",
            label,
            "python",
            "-c",
            "import opforge; print(opforge.__file__)",
            env=env,
        )
        assert editable.stdout.strip().startswith("/workspaces/"), editable.stdout
    finally:
        # `up` tags its own vsc-<folder>-<hash> image: remove it with the container.
        tags = {image}
        for container in client.containers.list(all=True, filters={"label": label}):
            tags.update(container.image.tags)
            container.remove(force=True)
        for tag in tags:
            if client.images.list(name=tag):
                client.images.remove(tag, force=True)
