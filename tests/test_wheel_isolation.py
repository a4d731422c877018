"""Each adapter wheel alone in a fresh venv: it installs, imports and uninstalls with the other
one present and absent, and never touches the other's files."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from opforge.build.dist import dist_wheels
from opforge.errors import BuildError
from opforge.project import Project
from tests.conftest import REPO

pytestmark = pytest.mark.slow

TORCH_USE = (
    "import torch, opforge.torch as ot; "
    "assert ot.add(torch.ones(3), torch.ones(3)).tolist() == [2.0, 2.0, 2.0]"
)
MINDSPORE_USE = (
    "import mindspore as ms, numpy as np, opforge.mindspore as ofm; ms.set_device('CPU'); "
    "x = ms.Tensor(np.ones(3, np.float32)); assert ofm.add(x, x).asnumpy().tolist() == [2.0] * 3"
)


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    """The CPU adapter wheels of this checkout's last build."""
    project = Project(REPO, REPO / "checksums.yaml")
    try:
        return {
            "torch": dist_wheels(project, "cpu", ["torch-adapter"])[0],
            "mindspore": dist_wheels(project, "cpu", ["mindspore-adapter"])[0],
        }
    except BuildError as exc:
        pytest.skip(f"no cpu adapter wheels in dist/ ({exc}): run `opforge build --profile cpu`")


@pytest.fixture(scope="module")
def venv():
    """A fresh venv, removed afterwards (it holds torch and MindSpore: gigabytes)."""
    where = Path(tempfile.mkdtemp(prefix="opforge-wheel-isolation-"))
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    yield where / "bin" / "python"
    shutil.rmtree(where, ignore_errors=True)


def run(python: Path, *args: str) -> subprocess.CompletedProcess:
    """``python ARGS``, output captured."""
    return subprocess.run([str(python), *args], capture_output=True, text=True, check=False)


def pip(python: Path, *args: str) -> None:
    """pip in the venv; fails the test with pip's output."""
    result = run(python, "-m", "pip", "--disable-pip-version-check", *args)
    assert result.returncode == 0, result.stdout + result.stderr


def site_packages(python: Path) -> Path:
    """The venv's site-packages."""
    out = run(python, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))")
    return Path(out.stdout.strip())


def packaged_files(wheel: Path) -> dict[str, str]:
    """path -> RECORD hash of every file the wheel installs (its RECORD, less the dist-info)."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = csv.reader(io.StringIO(archive.read(record).decode()))
        return {path: digest for path, digest, _ in rows if digest and ".dist-info/" not in path}


def assert_installed_intact(site: Path, wheel: Path) -> None:
    """Every file of ``wheel`` is in ``site`` with the content the wheel recorded."""
    for path, digest in packaged_files(wheel).items():
        data = (site / path).read_bytes()
        actual = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert f"sha256={actual}" == digest, path


def test_wheels_hold_one_package_each(wheels):
    assert {p.split("/")[1] for p in packaged_files(wheels["torch"])} == {"torch"}
    assert {p.split("/")[1] for p in packaged_files(wheels["mindspore"])} == {"mindspore"}


def test_each_wheel_installs_imports_and_uninstalls_alone_and_beside_the_other(wheels, venv):
    site = site_packages(venv)
    # torch alone: it works, and no opforge.mindspore came with it.
    pip(venv, "install", str(wheels["torch"]))
    used = run(venv, "-c", TORCH_USE)
    assert used.returncode == 0, used.stderr
    assert not (site / "opforge" / "mindspore").exists()
    assert (
        "No module named 'opforge.mindspore'" in run(venv, "-c", "import opforge.mindspore").stderr
    )

    # MindSpore beside it: both work.
    pip(venv, "install", str(wheels["mindspore"]))
    for use in (TORCH_USE, MINDSPORE_USE):
        used = run(venv, "-c", use)
        assert used.returncode == 0, used.stderr

    # Uninstalling torch's leaves MindSpore's files as they were, and it still works.
    pip(venv, "uninstall", "--yes", "opforge-torch")
    assert not (site / "opforge" / "torch").exists()
    assert_installed_intact(site, wheels["mindspore"])
    used = run(venv, "-c", MINDSPORE_USE)
    assert used.returncode == 0, used.stderr

    # And the other way round: MindSpore's uninstalled beside torch's.
    pip(venv, "install", str(wheels["torch"]))
    pip(venv, "uninstall", "--yes", "opforge-mindspore")
    assert not (site / "opforge" / "mindspore").exists()
    assert_installed_intact(site, wheels["torch"])
    used = run(venv, "-c", TORCH_USE)
    assert used.returncode == 0, used.stderr

    # MindSpore's alone, after torch's left.
    pip(venv, "uninstall", "--yes", "opforge-torch")
    pip(venv, "install", str(wheels["mindspore"]))
    assert not (site / "opforge" / "torch").exists()
    used = run(venv, "-c", MINDSPORE_USE)
    assert used.returncode == 0, used.stderr
