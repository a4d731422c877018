"""Real builds: the kernel library through ``opforge build``, and the up-to-date logic."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from opforge.build.engine import BuildEngine
from opforge.build.fingerprint import generator_sources
from opforge.build.steps import HostRunner
from opforge.build.toolchain import require_python_package
from opforge.errors import BuildError, RecipeError
from opforge.handoff import Handoff
from opforge.pins.cache import ContentCache
from opforge.pins.digest import hash_file
from opforge.pins.fetch import Fetcher
from opforge.project import Project
from opforge.settings import resolve_settings
from tests.conftest import REPO, run_opforge

pytestmark = pytest.mark.slow


def opforge(project: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the real CLI against ``project``."""
    return run_opforge("--project", str(project), *args)


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
    manifest = json.loads((built / "dist" / "build-record.json").read_text())
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
            ContentCache(resolve_settings(os.environ).cache_dir).blobs
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
    """The error line, the log's last lines below it, then the hint."""
    project = copy_project(tmp_path)
    bad = project / "kernels" / "src" / "cpu" / "add.cpp"
    bad.write_text(bad.read_text() + "\nthis is not C++;\n")
    result = opforge(project, "build", "kernels", "--profile", "cpu", "--quiet")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("opforge: error: step build failed (exit 1): "), result.stderr
    assert lines[1].startswith("  last lines of ") and lines[-1].startswith(
        "  hint: the full log is"
    )
    assert all(line.startswith("    ") for line in lines[2:-1]), result.stderr
    assert "this is not C++" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / "dist" / "build-record.json").exists(), "a failed build records nothing"


@pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
    reason="nvcc not found: cannot compile the CUDA sources",
)
def test_gpu_profile_compiles_cuda_for_sm80_and_sm90(tmp_path):
    project = copy_project(tmp_path)
    result = opforge(project, "build", "kernels", "--profile", "gpu", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((project / "dist" / "build-record.json").read_text())
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
schema: 1
sources: ["{name}/*"]
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
    # The tools a variable names (CXX) as the CLI resolves them, after the test has set them.
    overrides = resolve_settings(os.environ).tool_overrides
    return BuildEngine(project, fetcher, runner, jobs=2, say=lines.append, tool_overrides=overrides)


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


def bare_python(where: Path) -> Path:
    """A venv with no tools in its bin/ that still imports what this interpreter imports (a .pth
    names this interpreter's sys.path): opforge run by it finds cmake and ninja on PATH only."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    (Path(site_dir) / "opforge-tests.pth").write_text("\n".join(paths) + "\n")
    return python


def test_a_missing_tool_is_one_clear_error(three_targets, monkeypatch, tmp_path):
    # A PATH holding only what runs the build, and an environment without tools of its own:
    # cmake and ninja are gone.
    python = bare_python(tmp_path / "env")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "c++").symlink_to(shutil.which("c++"))
    monkeypatch.setenv("PATH", str(bin_dir))
    result = subprocess.run(
        [str(python), "-m", "opforge", "--project", str(three_targets.root), "build", "liba"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    # Both in one error, so one round of installs is enough.
    assert result.stderr.splitlines()[0] == (
        "opforge: error: 2 tools and packages missing: "
        f"cmake not found in the environment of {python} or on PATH "
        "(needed by target liba, profile cpu); "
        f"ninja not found in the environment of {python} or on PATH "
        "(needed by target liba, profile cpu)"
    )
    assert result.stderr.splitlines()[1] == (
        "  hint: pip install cmake (or apt-get install cmake); "
        "pip install ninja (or apt-get install ninja-build)"
    )
    assert "Traceback" not in result.stderr


def _environment_cmake() -> Path | None:
    found = shutil.which("cmake", path=sysconfig.get_path("scripts"))
    return Path(found) if found else None


@pytest.mark.skipif(
    _environment_cmake() is None,
    reason=f"no cmake in this Python's environment ({sysconfig.get_path('scripts')})",
)
def test_alternating_shells_do_not_flip_the_toolchain(three_targets, tmp_path):
    """Another cmake first on PATH (a shell outside the venv) must not change the build's tools."""
    first = opforge(three_targets.root, "build", "liba")
    assert first.returncode == 0, first.stderr
    other = tmp_path / "other-bin"
    other.mkdir()
    real = shutil.which("cmake", path="/usr/bin:/bin") or str(_environment_cmake())
    (other / "cmake").write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "cmake version 0.0-other"; exit 0; }}\n'
        f'exec {real} "$@"\n'
    )
    (other / "cmake").chmod(0o755)
    env = {**os.environ, "PATH": f"{other}{os.pathsep}{os.environ['PATH']}"}
    again = subprocess.run(
        [sys.executable, "-m", "opforge", "--project", str(three_targets.root), "build", "liba"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "[liba] up to date (cpu)" in again.stdout, again.stdout


def test_rebuild_says_which_input_changed(three_targets, monkeypatch, tmp_path):
    project = three_targets
    lines: list[str] = []
    _engine(project, lines).build([], "cpu")
    assert "[liba] building (cpu, runner host): no cpu build recorded" in lines

    def reasons() -> dict[str, str]:
        lines.clear()
        _engine(project, lines).build([], "cpu")
        return {
            line.split("]")[0][1:]: line.split("): ", 1)[1]
            for line in lines
            if "] building (" in line
        }

    (project.root / "liba" / "liba.cpp").write_text("int liba_value() { return 5; }\n")
    assert reasons() == {
        "liba": "source liba/liba.cpp changed",
        "libb": "dependency liba changed",
    }

    recipe = project.recipes_dir / "libc.yaml"
    recipe.write_text(
        recipe.read_text().replace(
            "cmake: {source_dir: libc}",
            "cmake: {source_dir: libc, options: {CMAKE_BUILD_TYPE: Debug}}",
        )
    )
    assert reasons() == {"libc": "recipe changed; option CMAKE_BUILD_TYPE added"}

    (project.dist_dir / "cpu" / "lib" / "liblibc.so").unlink()
    assert reasons() == {"libc": "output lib/liblibc.so missing"}

    wrapper = tmp_path / "bin" / "c++"
    wrapper.parent.mkdir()
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "wrapped c++ 99"; exit 0; }}\n'
        f'exec {shutil.which("c++")} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    from opforge.build import toolchain

    toolchain.find_tool.cache_clear()
    try:
        changed = reasons()
    finally:
        toolchain.find_tool.cache_clear()
    assert changed["libc"].startswith("tool c++ changed (")
    assert changed["libc"].endswith(" -> wrapped c++ 99); in a fresh build tree")


def test_a_rebuild_within_a_second_of_the_last_still_installs(three_targets):
    """CMake's install skips a file whose time is within a second of the installed copy's. Every
    link of liba here gets one fixed time, as two builds within the same second would."""
    project = three_targets
    (project.root / "liba" / "CMakeLists.txt").write_text(
        LIB_CMAKE.format(name="liba")
        + "add_custom_command(TARGET liba POST_BUILD\n"
        + "  COMMAND touch -d @1000000000 $<TARGET_FILE:liba>)\n"
    )
    installed = project.dist_dir / "cpu" / "lib" / "libliba.so"
    assert _statuses(project, ["liba"]) == {"liba": "built"}
    first = hash_file(installed)["sha256"]
    (project.root / "liba" / "liba.cpp").write_text("int liba_value() { return 5; }\n")
    assert _statuses(project, ["liba"]) == {"liba": "built"}
    built = project.build_dir / "cpu" / "liba" / "libliba.so"
    assert built.stat().st_mtime == 1000000000, "the fixed time stands for one second"
    assert hash_file(installed)["sha256"] == hash_file(built)["sha256"] != first


PY_CMAKE = """\
cmake_minimum_required(VERSION 3.24)
project(pyprobe NONE)
install(FILES probe/__init__.py DESTINATION python/opforge_probe)
"""

PY_RECIPE = """\
name: probe
schema: 1
sources: ["probe/**/*"]
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
    manifest = json.loads((wheel_project.build_record).read_text())
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


@pytest.mark.parametrize(("target", "refused"), [("/etc/passwd", True), ("__init__.py", False)])
def test_an_output_linked_out_of_dist_is_refused(wheel_project, tmp_path, target, refused):
    # The wheel carried /etc/passwd's content, the record only "symlink:/etc/passwd".
    cmake = wheel_project.root / "probe" / "CMakeLists.txt"
    cmake.write_text(
        PY_CMAKE
        + f'install(CODE "file(CREATE_LINK {target} '
        + '\\${CMAKE_INSTALL_PREFIX}/python/opforge_probe/linked SYMBOLIC)")\n'
    )
    recipe = wheel_project.recipes_dir / "probe.yaml"
    recipe.write_text(recipe.read_text().replace("__init__.py]", "*]"))
    result = opforge(wheel_project.root, "build")
    if not refused:  # a link inside dist/ (libfoo.so -> libfoo.so.1) is an output as any
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 1 and "Traceback" not in result.stderr
    prefix = wheel_project.dist_dir / "cpu"
    assert result.stderr.splitlines() == [
        f"opforge: error: target probe: output python/opforge_probe/linked is a link out of {prefix}",
        f"  hint: install the file itself, or a link to one under {prefix}",
    ]
    assert not list(wheel_project.dist_dir.glob("*.whl"))


@pytest.mark.parametrize(
    ("outputs", "said"),
    [
        ("[python/opforge_probe]", "is a folder under {prefix}, not files"),
        ("[python/opforge_probe/nope.py]", "was not installed under {prefix}"),
    ],
)
def test_a_declared_output_that_is_a_folder_or_missing_is_named(wheel_project, outputs, said):
    recipe = wheel_project.recipes_dir / "probe.yaml"
    recipe.write_text(recipe.read_text().replace("[python/opforge_probe/__init__.py]", outputs))
    result = opforge(wheel_project.root, "build")
    prefix = wheel_project.dist_dir / "cpu"
    first = result.stderr.splitlines()[0]
    assert result.returncode == 1 and first.startswith("opforge: error: target probe: declared")
    assert first.endswith(said.format(prefix=prefix))


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
    # Imported, the adapter says which build it is and what to install instead. Its own
    # __init__ is run, so an opforge.torch installed in this environment cannot answer instead.
    init = extension.with_name("__init__.py")
    imported = subprocess.run(
        [sys.executable, "-c", f"import runpy; runpy.run_path({str(init)!r})"],
        capture_output=True,
        text=True,
    )
    assert imported.returncode != 0
    assert (
        "this is the GPU build of opforge-torch, which needs a CUDA build of torch"
        in (imported.stderr.strip().splitlines()[-1])
    )


# --- inputs the build tool cannot see, profile outputs, wheels, dist install, the lock -------

GEN_CMAKE = """\
cmake_minimum_required(VERSION 3.24)
project(gen NONE)
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(_out "${CMAKE_CURRENT_BINARY_DIR}/value.txt")
add_custom_command(OUTPUT "${_out}"
  COMMAND "${Python3_EXECUTABLE}" -m probe_generator "${CMAKE_CURRENT_SOURCE_DIR}/input.txt" "${_out}"
  DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/input.txt")
add_custom_target(generated ALL DEPENDS "${_out}")
install(FILES "${_out}" DESTINATION share/gen)
"""

GENERATOR = """\
import sys
text = open(sys.argv[1]).read().strip()
open(sys.argv[2], "w").write(text + " {version}\\n")
"""


@pytest.fixture
def generated_project(tmp_path, monkeypatch) -> Project:
    """One recipe whose build runs a Python generator module that the recipe names."""
    root = tmp_path / "project"
    (root / "recipes").mkdir(parents=True)
    (root / "checksums.yaml").write_text("pins: {}\n")
    (root / "gen").mkdir()
    (root / "gen" / "CMakeLists.txt").write_text(GEN_CMAKE)
    (root / "gen" / "input.txt").write_text("input\n")
    (root / "recipes" / "gen.yaml").write_text(
        "name: gen\nschema: 1\nsources: [gen/*]\ncmake: {source_dir: gen}\n"
        "profiles: {cpu: {}}\noutputs: [share/gen/value.txt]\ngenerators: [probe_generator]\n"
    )
    # A generator is the project's own code (or opforge's): it lives in the checkout.
    modules = root / "modules"
    modules.mkdir()
    (modules / "probe_generator.py").write_text(GENERATOR.format(version="v1"))
    # The build's interpreter (this one) runs the generator: both must find it.
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.setenv("PYTHONPATH", str(modules))
    return Project(root, root / "checksums.yaml")


def test_a_changed_generator_rebuilds_and_regenerates(generated_project):
    project = generated_project
    value = project.dist_dir / "cpu" / "share" / "gen" / "value.txt"
    assert _statuses(project) == {"gen": "built"}
    assert value.read_text() == "input v1\n"
    assert _statuses(project) == {"gen": "up-to-date"}

    generator = project.root / "modules" / "probe_generator.py"
    # (A longer text: a same-size rewrite within one second would let Python reuse the .pyc.)
    generator.write_text(GENERATOR.format(version="version 2"))
    lines: list[str] = []
    results = _engine(project, lines).build([], "cpu")
    assert [r.status for r in results] == ["built"]
    assert (
        "[gen] building (cpu, runner host): generator probe_generator changed; "
        "in a fresh build tree" in lines
    )
    # The generator's input did not change, so only a fresh tree makes Ninja run it again.
    assert value.read_text() == "input version 2\n"


def test_an_unknown_generator_is_one_clear_error(generated_project):
    recipe = generated_project.recipes_dir / "gen.yaml"
    recipe.write_text(recipe.read_text().replace("[probe_generator]", "[no_such_generator_xyz]"))
    result = opforge(generated_project.root, "build")
    assert result.returncode == 1
    assert (
        f"opforge: error: {recipe}: generators[0]: no Python module 'no_such_generator_xyz'"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("under", ["modules", "."])
@pytest.mark.parametrize(
    "init", ["raise SystemExit(0)\n", "print('side effect')\nraise ImportError('x')\n"]
)
def test_finding_a_generator_runs_none_of_its_packages_code(generated_project, under, init):
    # Finding gpkg.gen imported gpkg: its SystemExit(0) made validate and build exit 0, silent.
    package = generated_project.root / under / "gpkg"
    package.mkdir()
    (package / "__init__.py").write_text(init)
    (package / "gen.py").write_text("VALUE = 1\n")
    recipe = generated_project.recipes_dir / "gen.yaml"
    recipe.write_text(
        recipe.read_text().replace("[probe_generator]", "[probe_generator, gpkg.gen]")
    )
    result = opforge(generated_project.root, "recipes", "validate")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1 recipe(s) valid: gen\n", "the package's code did not run"
    recipe.write_text(recipe.read_text().replace("gpkg.gen]", "gpkg.nosuch]"))
    result = opforge(generated_project.root, "recipes", "validate")
    assert result.returncode == 1 and "side effect" not in result.stdout
    assert "generators[1]: no Python module 'gpkg.nosuch'" in result.stderr


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        ("python_packages: ['']", "python_packages[0]: '' must be a Python distribution name"),
        ("generators: [os]", "generators[0]: 'os' has no source file (a built-in or frozen"),
        ("generators: [probe_generator, sys]", "generators[1]: 'sys' has no source file"),
    ],
)
def test_a_field_a_build_cannot_use_stops_it_in_one_line(generated_project, field, problem):
    """`opforge build` validates first: nothing is built, and the error is one line."""
    recipe = generated_project.recipes_dir / "gen.yaml"
    text = recipe.read_text().replace("generators: [probe_generator]\n", "")
    recipe.write_text(f"{text}{field}\n")
    result = opforge(generated_project.root, "build")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    first, hint = result.stderr.strip().splitlines()
    assert first.startswith(f"opforge: error: {recipe}: {problem}"), first
    assert hint.startswith("  hint: ")
    assert not generated_project.dist_dir.exists()


def test_the_build_path_refuses_what_it_cannot_fingerprint_or_look_up(generated_project):
    """Past validation too (a caller that builds a Recipe itself), a generator without source
    and a package name importlib cannot look up are one-line errors, not tracebacks."""
    recipe = generated_project.load_recipes(generated_project.load_pins()).get("gen")
    frozen = dataclasses.replace(recipe, generators=("probe_generator", "os"))
    with pytest.raises(RecipeError) as info:
        generator_sources(frozen, generated_project.root)
    assert str(info.value) == (
        f"{recipe.path}: generators[1]: 'os' has no source file (a built-in or frozen module)"
    )
    assert set(generator_sources(recipe, generated_project.root)) == {"probe_generator"}
    with pytest.raises(BuildError, match=r"^python package '' is not a distribution name \(x\)$"):
        require_python_package("", "x")


def test_adapter_recipes_name_the_op_generator():
    from opforge.pins.model import load_pins
    from opforge.recipes.loader import load_recipes

    book = load_recipes([REPO / "recipes"], load_pins(REPO / "checksums.yaml"), REPO)
    for name in ("kernels", "torch-adapter", "mindspore-adapter"):
        assert "opforge.kernels" in book.get(name).generators, name
    assert "python/opforge/mindspore/_aot_cuda.so" in book.get("mindspore-adapter").outputs_for(
        "gpu"
    )
    assert "python/opforge/mindspore/_aot_cuda.so" not in book.get("mindspore-adapter").outputs_for(
        "cpu"
    )


EXTRA_CMAKE = """\
cmake_minimum_required(VERSION 3.24)
project(extra NONE)
option(WITH_EXTRA "install the extra file" OFF)
install(FILES base.txt DESTINATION share/extra)
if(WITH_EXTRA)
  install(FILES extra.txt DESTINATION share/extra)
endif()
"""


def test_a_deleted_profile_output_is_rebuilt(tmp_path):
    root = tmp_path
    (root / "recipes").mkdir()
    (root / "checksums.yaml").write_text("pins: {}\n")
    (root / "extra").mkdir()
    (root / "extra" / "CMakeLists.txt").write_text(EXTRA_CMAKE)
    (root / "extra" / "base.txt").write_text("base\n")
    (root / "extra" / "extra.txt").write_text("extra\n")
    (root / "recipes" / "extra.yaml").write_text(
        "name: extra\nschema: 1\nsources: [extra/*]\n"
        "cmake: {source_dir: extra}\noutputs: [share/extra/base.txt]\n"
        "profiles:\n  cpu: {}\n"
        "  gpu: {options: {WITH_EXTRA: true}, outputs: [share/extra/extra.txt]}\n"
    )
    project = Project(root, root / "checksums.yaml")
    lines: list[str] = []
    assert [r.status for r in _engine(project, lines).build([], "gpu")] == ["built"]
    manifest = json.loads((project.build_record).read_text())
    assert set(manifest["targets"]["extra"]["gpu"]["outputs"]) == {
        "share/extra/base.txt",
        "share/extra/extra.txt",
    }
    (project.dist_dir / "gpu" / "share" / "extra" / "extra.txt").unlink()
    lines.clear()
    assert [r.status for r in _engine(project, lines).build([], "gpu")] == ["built"]
    assert "[extra] building (gpu, runner host): output share/extra/extra.txt missing" in lines
    assert (project.dist_dir / "gpu" / "share" / "extra" / "extra.txt").is_file()
    # The cpu profile does not declare it, so it need not exist there.
    assert [r.status for r in _engine(project, []).build([], "cpu")] == ["built"]


NS_CMAKE = """\
cmake_minimum_required(VERSION 3.24)
project({name} NONE)
install(FILES __init__.py DESTINATION python/nsprobe/{name})
"""


@pytest.fixture
def two_wheels(tmp_path) -> Project:
    """Two recipes installing a package each into one shared prefix, as the adapters do."""
    (tmp_path / "checksums.yaml").write_text("pins: {}\n")
    (tmp_path / "recipes").mkdir()
    for name, deps in (("alpha", "[]"), ("beta", "[alpha]")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "CMakeLists.txt").write_text(NS_CMAKE.format(name=name))
        (tmp_path / name / "__init__.py").write_text(f"NAME = {name!r}\n")
        (tmp_path / "recipes" / f"{name}.yaml").write_text(
            f"name: {name}\nschema: 1\nsources: [{name}/*]\n"
            f"cmake: {{source_dir: {name}}}\nprofiles: {{cpu: {{}}}}\ndepends_on: {deps}\n"
            f"outputs: [python/nsprobe/{name}/*.py]\n"
            f"wheel: {{name: nsprobe-{name}, root: python, requires: ['pytest>=1']}}\n"
        )
    return Project(tmp_path, tmp_path / "checksums.yaml")


def _wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {n for n in archive.namelist() if ".dist-info/" not in n}


def test_each_wheel_carries_only_its_own_package(two_wheels):
    assert _statuses(two_wheels) == {"alpha": "built", "beta": "built"}
    dist = two_wheels.dist_dir
    alpha = next(dist.glob("nsprobe_alpha-*.whl"))
    beta = next(dist.glob("nsprobe_beta-*.whl"))
    assert _wheel_names(alpha) == {"nsprobe/alpha/__init__.py"}
    assert _wheel_names(beta) == {"nsprobe/beta/__init__.py"}
    # Rebuilding alpha after beta installed beside it still gives alpha alone.
    (two_wheels.root / "alpha" / "__init__.py").write_text("NAME = 'alpha2'\n")
    assert _statuses(two_wheels, ["alpha"]) == {"alpha": "built"}
    assert _wheel_names(next(dist.glob("nsprobe_alpha-*.whl"))) == {"nsprobe/alpha/__init__.py"}


def test_dist_install_takes_target_names(two_wheels, tmp_path):
    _statuses(two_wheels)
    site = tmp_path / "site"
    result = opforge(two_wheels.root, "dist", "install", "beta", "--target", str(site))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "installed nsprobe_beta-0.1.0+cpu-py3-none-linux_x86_64.whl"
    assert (site / "nsprobe" / "beta" / "__init__.py").is_file()
    assert not (site / "nsprobe" / "alpha").exists()
    unknown = opforge(two_wheels.root, "dist", "install", "gamma")
    assert unknown.returncode == 1
    assert "opforge: error: unknown target 'gamma'" in unknown.stderr
    assert "targets with cpu wheels: alpha, beta" in unknown.stderr


def test_the_lock_covers_dist_across_build_directories(three_targets, tmp_path):
    """Containerised builds each have their own build directory (their handoff's) but share
    dist/."""
    dist = three_targets.dist_dir
    dist.mkdir()
    handoff = Handoff(three_targets.root, tmp_path / "cache", tmp_path / "elsewhere", "host")
    with open(dist / ".opforge.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = subprocess.run(
            [sys.executable, "-m", "opforge", "--handoff", handoff.to_json(), "build"],
            capture_output=True,
            text=True,
            check=False,
        )
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"opforge: error: another opforge build is writing {dist}"
    )
    assert not three_targets.build_record.exists()
    assert not (tmp_path / "elsewhere" / "cpu").exists(), "nothing was built"


@pytest.mark.parametrize(
    "requirement",
    ["pytest\\nName: evil", "pytest\\r\\nX-Injected: 1", "pytest\\u2028Name: evil", "numpy<3\\x85"],
)
def test_a_line_break_in_a_wheel_requirement_is_refused(wheel_project, requirement):
    recipe = wheel_project.recipes_dir / "probe.yaml"
    recipe.write_text(
        recipe.read_text().replace("requires: [pytest]", f'requires: ["{requirement}"]')
    )
    result = opforge(wheel_project.root, "build")
    assert result.returncode == 1
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"opforge: error: {recipe}: wheel.requires[0]: "), result.stderr
    assert "contains a line break or control character" in first
    assert "Traceback" not in result.stderr
    assert not list(wheel_project.dist_dir.glob("*.whl"))
