"""Real builds: the kernel library through ``opforge build``, and the up-to-date logic."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from opforge.build.engine import BuildEngine
from opforge.paths import default_cache_dir
from opforge.pins.cache import ContentCache
from opforge.pins.digest import hash_file
from opforge.pins.fetch import Fetcher
from opforge.project import Project
from opforge.runners import HostRunner
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def opforge(project: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the real CLI against ``project``."""
    return subprocess.run(
        [sys.executable, "-m", "opforge", "--project", str(project), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def copy_project(dest: Path) -> Path:
    """A private copy of the parts of this checkout a build reads."""
    for name in ("kernels", "recipes", "adapters"):
        shutil.copytree(REPO / name, dest / name)
    shutil.copy(REPO / "checksums.yaml", dest / "checksums.yaml")
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A project copy after one successful ``opforge build --profile cpu``."""
    project = copy_project(tmp_path_factory.mktemp("kernels-project"))
    result = opforge(project, "build", "kernels", "--profile", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    return project


def test_cpu_build_installs_outputs_and_writes_manifest(built):
    manifest = json.loads((built / "dist" / "manifest.json").read_text())
    record = manifest["targets"]["kernels"]["cpu"]
    prefix = built / record["prefix"]
    assert record["recipe"] == "recipes/kernels.yaml"
    library = prefix / "lib" / "libopforge_kernels.so.0.1.0"
    assert record["outputs"]["lib/libopforge_kernels.so.0.1.0"] == hash_file(library)["sha256"]
    assert record["outputs"]["lib/libopforge_kernels.so"] == "symlink:libopforge_kernels.so.0"
    assert (prefix / "include" / "dlpack" / "dlpack.h").is_file()
    inputs = record["inputs"]
    assert (
        inputs["pins"]["dlpack-source"]
        == hash_file(
            ContentCache(default_cache_dir()).blobs
            / inputs["pins"]["dlpack-source"][:2]
            / inputs["pins"]["dlpack-source"]
        )["sha256"]
    )
    assert "kernels/src/cpu/add.cpp" in inputs["sources"]
    assert set(inputs["toolchain"]) == {"opforge", "cmake", "ninja", "c++"}
    assert inputs["options"]["OPFORGE_WITH_CUDA"] == "OFF"


def test_library_exports_only_the_c_abi_and_carries_its_cxx_runtime(built):
    """Loaded into framework processes, it must not interpose on their C++ runtime, nor they on it."""
    library = built / "dist" / "cpu" / "lib" / "libopforge_kernels.so"
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    names = [word for word in exported[2::3]]
    assert names and all(name.startswith("opforge_") for name in names), names
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
    assert "libstdc++" not in needed and "libgcc_s" not in needed


def test_second_build_is_up_to_date_and_runs_nothing(built):
    log = built / "build" / "cpu" / "kernels" / "opforge-build.log"
    before = log.stat().st_mtime_ns
    result = opforge(built, "build", "kernels", "--profile", "cpu")
    assert result.returncode == 0, result.stderr
    assert "[kernels] up to date (cpu)" in result.stdout
    assert "0 built, 1 up to date" in result.stdout
    assert log.stat().st_mtime_ns == before, "no step ran"


def test_changing_one_source_recompiles_only_that_file(built):
    source = built / "kernels" / "src" / "cpu" / "add.cpp"
    source.write_text(source.read_text() + "\n// touched by a test\n")
    result = opforge(built, "build", "kernels", "--profile", "cpu")
    assert result.returncode == 0, result.stderr
    assert "1 built, 0 up to date" in result.stdout
    compiled = [line for line in result.stdout.splitlines() if "Building CXX object" in line]
    assert len(compiled) == 1 and "add.cpp.o" in compiled[0], compiled


def test_a_deleted_output_is_rebuilt(built):
    (built / "dist" / "cpu" / "lib" / "libopforge_kernels.so.0.1.0").unlink()
    result = opforge(built, "build", "kernels", "--profile", "cpu")
    assert result.returncode == 0, result.stderr
    assert "1 built" in result.stdout
    assert (built / "dist" / "cpu" / "lib" / "libopforge_kernels.so.0.1.0").is_file()


def test_a_failing_step_shows_command_and_log_tail(tmp_path):
    project = copy_project(tmp_path)
    bad = project / "kernels" / "src" / "cpu" / "add.cpp"
    bad.write_text(bad.read_text() + "\nthis is not C++;\n")
    result = opforge(project, "build", "kernels", "--profile", "cpu", "--quiet")
    assert result.returncode == 1
    assert "opforge: error: step build failed (exit 1): " in result.stderr
    assert "this is not C++" in result.stderr or "add.cpp" in result.stderr
    assert "hint: the full log is" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / "dist" / "manifest.json").exists(), "a failed build records nothing"


@pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="nvcc not found: cannot compile the CUDA sources",
)
def test_gpu_profile_compiles_cuda_for_sm80_and_sm90(tmp_path):
    project = copy_project(tmp_path)
    result = opforge(project, "build", "kernels", "--profile", "gpu", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((project / "dist" / "manifest.json").read_text())
    record = manifest["targets"]["kernels"]["gpu"]
    assert record["inputs"]["options"]["OPFORGE_WITH_CUDA"] == "ON"
    assert "nvcc" in record["inputs"]["toolchain"]
    commands = subprocess.run(
        ["ninja", "-C", str(project / "build" / "gpu" / "kernels"), "-t", "commands"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    add_cu = [line for line in commands.splitlines() if "add.cu" in line and "nvcc" in line]
    assert add_cu, "add.cu was compiled by nvcc"
    assert "sm_80" in add_cu[0] and "sm_90" in add_cu[0], add_cu[0]
    library = project / "dist" / "gpu" / "lib" / "libopforge_kernels.so.0.1.0"
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
    assert "libcudart.so" not in dynamic, "cudart is linked statically"
    assert "libcudnn.so" in dynamic


# --- selective rebuilds across targets, on a small project of three libraries ----------------

LIB_CMAKE = """\
cmake_minimum_required(VERSION 3.24)
project({name} CXX)
add_library({name} SHARED {name}.cpp)
install(TARGETS {name} LIBRARY DESTINATION lib)
"""

LIB_RECIPE = """\
name: {name}
kind: cmake
sources: ["{name}/*"]
image: devel
cmake: {{source_dir: {name}}}
profiles: {{cpu: {{}}}}
outputs: [lib/lib{name}.so]
depends_on: {deps}
"""


@pytest.fixture
def three_targets(tmp_path) -> Project:
    """liba; libb depends on liba; libc stands alone."""
    (tmp_path / "checksums.yaml").write_text("pins: {}\n")
    (tmp_path / "recipes").mkdir()
    for name, deps in (("liba", []), ("libb", ["liba"]), ("libc", [])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "CMakeLists.txt").write_text(LIB_CMAKE.format(name=name))
        (tmp_path / name / f"{name}.cpp").write_text(f"int {name}_value() {{ return 1; }}\n")
        (tmp_path / "recipes" / f"{name}.yaml").write_text(
            textwrap.dedent(LIB_RECIPE.format(name=name, deps=json.dumps(deps)))
        )
    return Project(tmp_path, tmp_path / "checksums.yaml")


def _engine(project: Project, lines: list[str]) -> BuildEngine:
    runner = HostRunner(echo=lambda _line: None)
    fetcher = Fetcher(ContentCache(project.root / "cache"), offline=True)
    return BuildEngine(project, fetcher, runner, jobs=2, say=lines.append)


def _statuses(project: Project, targets: list[str] | None = None) -> dict[str, str]:
    results = _engine(project, []).build(targets or [], "cpu")
    return {r.name: r.status for r in results}


def test_only_changed_targets_and_their_dependents_rebuild(three_targets):
    project = three_targets
    assert _statuses(project) == {"liba": "built", "libb": "built", "libc": "built"}
    assert _statuses(project) == {"liba": "up-to-date", "libb": "up-to-date", "libc": "up-to-date"}

    (project.root / "libc" / "libc.cpp").write_text("int libc_value() { return 2; }\n")
    assert _statuses(project) == {"liba": "up-to-date", "libb": "up-to-date", "libc": "built"}

    (project.root / "liba" / "liba.cpp").write_text("int liba_value() { return 3; }\n")
    assert _statuses(project) == {"liba": "built", "libb": "built", "libc": "up-to-date"}


def test_building_one_target_builds_its_dependencies_only(three_targets):
    assert _statuses(three_targets, ["libb"]) == {"liba": "built", "libb": "built"}


def test_toolchain_change_invalidates(three_targets, monkeypatch, tmp_path):
    project = three_targets
    _statuses(project, ["liba"])
    # A wrapper compiler with a different --version is a different toolchain.
    wrapper = tmp_path / "bin" / "c++"
    wrapper.parent.mkdir()
    real = shutil.which("c++")
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "wrapped c++ 99"; exit 0; }}\nexec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    from opforge.build import toolchain

    toolchain.find_tool.cache_clear()
    try:
        assert _statuses(project, ["liba"]) == {"liba": "built"}
    finally:
        toolchain.find_tool.cache_clear()


def test_a_missing_tool_is_one_clear_error(three_targets, monkeypatch, tmp_path):
    # A PATH holding only what runs the build: cmake and ninja are gone.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "c++").symlink_to(shutil.which("c++"))
    monkeypatch.setenv("PATH", str(bin_dir))
    result = opforge(three_targets.root, "build", "liba")
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        "opforge: error: cmake not found on PATH (needed by target liba, profile cpu)"
    )
    assert "hint: pip install cmake" in result.stderr
    assert "Traceback" not in result.stderr


PY_CMAKE = """\
cmake_minimum_required(VERSION 3.24)
project(pyprobe NONE)
install(FILES probe/__init__.py DESTINATION python/opforge_probe)
"""

PY_RECIPE = """\
name: probe
kind: cmake
sources: ["probe/**/*"]
image: devel
cmake: {source_dir: probe}
profiles: {cpu: {}}
outputs: [python/opforge_probe/__init__.py]
python_packages: [pytest]
wheel: {name: opforge-probe, root: python, requires: [pytest]}
"""


@pytest.fixture
def wheel_project(tmp_path) -> Project:
    """One recipe that installs a Python package and packages it as a wheel."""
    (tmp_path / "checksums.yaml").write_text("pins: {}\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "probe.yaml").write_text(PY_RECIPE)
    (tmp_path / "probe" / "probe").mkdir(parents=True)
    (tmp_path / "probe" / "CMakeLists.txt").write_text(PY_CMAKE)
    (tmp_path / "probe" / "probe" / "__init__.py").write_text("VALUE = 1\n")
    return Project(tmp_path, tmp_path / "checksums.yaml")


def test_wheel_recipe_builds_records_and_installs_a_wheel(wheel_project, tmp_path):
    import zipfile
    from importlib.metadata import version

    assert _statuses(wheel_project) == {"probe": "built"}
    manifest = json.loads((wheel_project.dist_dir / "manifest.json").read_text())
    outputs = manifest["targets"]["probe"]["cpu"]["outputs"]
    wheels = [k for k in outputs if k.startswith("wheel:")]
    assert wheels == ["wheel:opforge_probe-0.1.0+cpu-py3-none-linux_x86_64.whl"]
    wheel = wheel_project.dist_dir / wheels[0].split(":", 1)[1]
    assert outputs[wheels[0]] == hash_file(wheel)["sha256"]
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("opforge_probe-0.1.0+cpu.dist-info/METADATA").decode()
        assert "opforge_probe/__init__.py" in archive.namelist()
    assert f"Requires-Dist: pytest=={version('pytest').split('+')[0]}" in metadata
    assert manifest["targets"]["probe"]["cpu"]["inputs"]["toolchain"]["python:pytest"] == version(
        "pytest"
    )

    assert _statuses(wheel_project) == {"probe": "up-to-date"}
    wheel.unlink()
    assert _statuses(wheel_project) == {"probe": "built"}, "a missing wheel is rebuilt"

    result = opforge(
        wheel_project.root,
        "dist",
        "install",
        "--target",
        str(tmp_path / "site"),
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "opforge_probe" / "__init__.py").read_text() == "VALUE = 1\n"


def test_dist_install_before_any_build_is_a_clear_error(wheel_project):
    result = opforge(wheel_project.root, "dist", "install")
    assert result.returncode == 1
    assert "opforge: error: no wheels recorded for profile cpu" in result.stderr
    assert "hint: run `opforge build --profile cpu` first" in result.stderr


def test_a_missing_python_package_is_one_clear_error(wheel_project):
    recipe = wheel_project.recipes_dir / "probe.yaml"
    recipe.write_text(recipe.read_text().replace("[pytest]", "[no-such-package-xyz]"))
    result = opforge(wheel_project.root, "build")
    assert result.returncode == 1
    assert "python package no-such-package-xyz is not installed" in result.stderr
    assert "Traceback" not in result.stderr


def test_wheel_requirement_without_version_must_be_a_built_against_package(wheel_project):
    recipe = wheel_project.recipes_dir / "probe.yaml"
    text = recipe.read_text()
    recipe.write_text(text.replace("python_packages: [pytest]", "python_packages: []"))
    result = opforge(wheel_project.root, "build")
    assert result.returncode == 1
    assert (
        "wheel.requires[0]: 'pytest' has no version and is not in python_packages" in result.stderr
    )
    recipe.write_text(text.replace("requires: [pytest]", 'requires: [pytest, "numpy<3"]'))
    assert opforge(wheel_project.root, "build").returncode == 0
    wheel = next(wheel_project.dist_dir.glob("opforge_probe-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("opforge_probe-0.1.0+cpu.dist-info/METADATA").decode()
    assert "Requires-Dist: numpy<3" in metadata and "Requires-Dist: pytest==" in metadata


def _cpu_only_torch() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda:
        return "this torch is a CUDA build"
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        return "nvcc not found"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_cpu_only_torch() is not None, reason=str(_cpu_only_torch()))
def test_gpu_torch_adapter_builds_without_a_cuda_torch(tmp_path):
    # The stable-ABI adapter needs torch's headers only: its CUDA build comes from a CPU torch.
    project = copy_project(tmp_path)
    result = opforge(project, "build", "--profile", "gpu", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    extension = project / "dist" / "gpu" / "python" / "opforge" / "torch" / "_C.so"
    needed = subprocess.run(
        ["readelf", "-d", str(extension)], capture_output=True, text=True
    ).stdout
    assert "[libtorch_cpu.so]" in needed and "[libtorch_cuda.so]" in needed
    assert "libc10" not in needed, "nothing but the stable C shim is taken from torch"
    assert list(project.glob("dist/opforge_torch-*+gpu-*.whl"))
    # In a CPU torch the GPU build cannot load: the error says why.
    probe = subprocess.run(
        [sys.executable, "-c", f"import torch; torch.ops.load_library({str(extension)!r})"],
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "libtorch_cuda.so" in probe.stderr
