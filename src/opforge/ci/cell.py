"""One matrix cell, run locally with exactly the commands the nightly workflow runs.

A cell builds its devel and runtime images, builds the kernel library and both adapters (GPU
profile, linked against the cell's cuDNN) in devel, runs the recipes' tests that need no GPU in
runtime (on a GPU host the GPU tests too), and writes its JUnit reports and a cell record
(``<junit-dir>/<cell>/cell-record.json``: CUDA, cuDNN, image tags and IDs, what was built,
what was skipped and why, timings, test totals).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from opforge.ci.matrix import Cell
from opforge.ci.report import collect
from opforge.errors import BuildError

# Every cell builds the kernel library and both adapters where the devel image allows.
BUILD_TARGETS = ("kernels", "mindspore-adapter", "torch-adapter")
RECORD = "cell-record.json"
# Libraries a framework's GPU build loads that a runtime image does not carry by design: the
# driver's, which the NVIDIA container runtime mounts from the host.
DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
# Each framework's GPU libraries, for the check that the runtime image resolves what they link.
GPU_LIBRARIES = {"mindspore": "mindspore/lib/plugin/libmindspore_gpu.so.*"}


def image_flags(cell: Cell) -> list[str]:
    """The image options of the cell's images, as ``opforge images build`` takes them."""
    flags = ["--flavour", cell.flavour, "--cuda", cell.cuda, "--cudnn", cell.cudnn]
    for requirement in cell.requirements:
        flags += ["--framework", requirement]
    return flags


def cell_commands(
    cell: Cell, junit_dir: Path, skipped: dict[str, str] | None = None
) -> list[list[str]]:
    """The opforge commands of a cell: images, build in devel (gpu), tests in runtime.

    ``skipped`` maps targets the devel image cannot build to the reason; they are left out.
    """
    skipped = skipped or {}
    built = [t for t in BUILD_TARGETS if t not in skipped]
    tested = [t for t in ("kernels", cell.adapter) if t in built]
    image = image_flags(cell)
    return [
        ["opforge", "images", "build", "--kind", "devel", *image],
        ["opforge", "images", "build", "--kind", "runtime", *image],
        ["opforge", "build", *built, "--profile", "gpu", "--runner", "docker", *image],
        [
            "opforge",
            "test",
            *tested,
            "--profile",
            "gpu",
            "--runner",
            "docker",
            *image,
            "--junit-dir",
            str(junit_dir / cell.id),
        ],
    ]


def image_cache_commands(cache: Path, save: bool) -> list[list[str]]:
    """docker load (before) / save (after) of opforge's images, for the CI cache step."""
    archive = str(cache / "opforge-images.tar")
    if not save:
        return [["sh", "-c", f'[ ! -f "{archive}" ] || docker load -i "{archive}"']]
    return [
        [
            "sh",
            "-c",
            f'mkdir -p "{cache}" && docker save -o "{archive}" $(docker images -q "opforge/*" | sort -u)',
        ]
    ]


def _run(argv: list[str], cwd: Path) -> list[str]:
    """Run one command, streaming its output; return its stdout lines; raise on failure."""
    print("$ " + " ".join(argv), flush=True)
    real = [sys.executable, "-m", "opforge", *argv[1:]] if argv[0] == "opforge" else argv
    lines = []
    with subprocess.Popen(real, cwd=cwd, stdout=subprocess.PIPE, text=True, bufsize=1) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line.rstrip("\n"))
    if process.returncode != 0:
        raise BuildError(
            f"`{' '.join(argv)}` failed (exit {process.returncode})",
            hint="its output is above; fix the cause and run the cell again",
        )
    return lines


def _container_output(client, image: str, script: str) -> str:
    return client.containers.run(image, ["sh", "-c", script], remove=True).decode().strip()


def devel_skips(client, devel: str, cell: Cell) -> dict[str, str]:
    """Targets the devel image cannot build, with the reason. The GPU torch adapter builds
    against any torch >= 2.11, a CPU build included (stable ABI, libtorch_cuda linked through a
    stub), so only an image without torch skips it."""
    found = _container_output(
        client, devel, "python -c 'import torch' 2>/dev/null && echo yes || echo no"
    )
    if found != "yes":
        return {"torch-adapter": "the devel image has no torch (the cell's framework is not torch)"}
    return {}


def _cuda_suffix(library: str) -> tuple[int, ...] | None:
    """(11, 6) for ``libmindspore_gpu.so.11.6``: a plugin built for that CUDA version."""
    found = re.search(r"\.so\.(\d+)\.(\d+)$", library)
    return (int(found.group(1)), int(found.group(2))) if found else None


def unresolved_links(ldd_output: str, cuda: str) -> dict[str, list[str]]:
    """Parse ``== <library>`` + ``ldd`` blocks: each library's sonames that did not resolve,
    driver libraries aside. Of libraries built per CUDA version (MindSpore's GPU plugins,
    ``.so.11.1`` and ``.so.11.6``) only the one the framework loads on ``cuda`` is kept: the
    newest not above it."""
    found: dict[str, list[str]] = {}
    current = None
    for line in ldd_output.splitlines():
        if line.startswith("== "):
            current = line[3:].rsplit("/site-packages/", 1)[-1]
            found[current] = []
        elif current and "not found" in line:
            soname = line.split("=>")[0].strip()
            if soname not in DRIVER_LIBRARIES:
                found[current].append(soname)
    wanted = tuple(int(x) for x in cuda.split("."))
    versions = [v for lib in found if (v := _cuda_suffix(lib)) is not None and v <= wanted]
    loaded = max(versions, default=None)
    return {
        lib: missing
        for lib, missing in found.items()
        if _cuda_suffix(lib) is None or _cuda_suffix(lib) == loaded
    }


def gpu_library_links(client, runtime: str, cell: Cell) -> dict[str, list[str]]:
    """For a framework with GPU libraries: the sonames of those it loads on the cell's CUDA that
    the runtime image cannot resolve (an empty list: every link resolves)."""
    pattern = GPU_LIBRARIES.get(cell.framework_name)
    if pattern is None:
        return {}
    script = (
        "site=$(python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'); "
        f'for lib in "$site"/{pattern}; do echo "== $lib"; ldd "$lib"; done'
    )
    found = unresolved_links(_container_output(client, runtime, script), cell.cuda)
    if not found:
        raise BuildError(
            f"no {pattern} for CUDA {cell.cuda} in the runtime image {runtime}",
            hint=f"is {cell.framework} in the image, and does it have a CUDA {cell.cuda} build?",
        )
    return found


def _artifacts(project_root: Path) -> dict[str, str]:
    """sha256 of the GPU build's native libraries (what the GPU machine runs)."""
    dist = project_root / "dist" / "gpu"
    paths = sorted(dist.glob("lib/libopforge_kernels.so.*.*")) + sorted(
        dist.glob("python/opforge/mindspore/_aot_cuda.so")
    )
    return {
        str(p.relative_to(project_root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths
    }


def run_cell(
    cell: Cell,
    junit_dir: Path,
    image_cache: Path | None,
    dry_run: bool = False,
    project_root: Path | None = None,
) -> dict:
    """Run (or, dry, print) the cell's commands in order; stop at the first failure.

    Returns the cell record, also written to ``<junit_dir>/<cell>/cell-record.json``.
    """
    if dry_run:
        for argv in [
            *(image_cache_commands(image_cache, False) if image_cache else []),
            *cell_commands(cell, junit_dir),
            *(image_cache_commands(image_cache, True) if image_cache else []),
        ]:
            print("$ " + " ".join(argv), flush=True)
        return {}
    from opforge.dockerengine import docker_client
    from opforge.images.build import LayerLog

    root = project_root or Path.cwd()
    out = junit_dir / cell.id
    out.mkdir(parents=True, exist_ok=True)
    record: dict = {
        "cell": cell.id,
        "cuda": cell.cuda,
        "cudnn": cell.cudnn,
        "framework": list(cell.requirements),
        "flavour": cell.flavour,
        "status": "failed",
    }
    seconds: dict[str, float] = {}
    record["seconds"] = seconds
    try:
        if image_cache is not None:
            _run(image_cache_commands(image_cache, False)[0], root)
        client = docker_client(instead="pass --dry-run to print the cell's commands only")
        # Recorded as each is built: a failed runtime build still names the devel image.
        images: dict = {}
        record["images"] = images
        for kind, argv in zip(
            ("devel", "runtime"), cell_commands(cell, junit_dir)[:2], strict=True
        ):
            started = time.monotonic()
            lines = _run(argv, root)
            seconds[f"image_{kind}"] = round(time.monotonic() - started, 1)
            layers = LayerLog()
            for line in lines:
                layers.feed(line)
            tag = lines[-1].strip()
            image = client.images.get(tag)
            images[kind] = {
                "tag": tag,
                "id": image.id,
                "size": image.attrs.get("Size"),
                # Images this run's build made (empty: found up to date), e.g. to remove them.
                "created": layers.created,
            }
        record["nvcc"] = _container_output(
            client, images["devel"]["tag"], "nvcc --version | tail -2"
        )
        skipped = devel_skips(client, images["devel"]["tag"], cell)
        record["skipped"] = skipped
        for target, why in skipped.items():
            print(f"[cell] skip {target}: {why}", flush=True)
        build, test = cell_commands(cell, junit_dir, skipped)[2:]
        started = time.monotonic()
        _run(build, root)
        seconds["build"] = round(time.monotonic() - started, 1)
        record["built"] = [t for t in BUILD_TARGETS if t not in skipped]
        record["artifacts"] = _artifacts(root)
        started = time.monotonic()
        _run(test, root)
        seconds["tests"] = round(time.monotonic() - started, 1)
        if not list(out.glob("*.xml")):
            raise BuildError(
                f"the tests wrote no JUnit report to {out}",
                hint="the recipe's test command must be pytest (it is given --junitxml)",
            )
        links = gpu_library_links(client, images["runtime"]["tag"], cell)
        if links:
            record["gpu_library_links"] = links
            missing = {lib: sonames for lib, sonames in links.items() if sonames}
            if missing:
                raise BuildError(
                    f"the runtime image lacks libraries {cell.framework}'s GPU build links: "
                    + "; ".join(f"{lib}: {', '.join(s)}" for lib, s in missing.items()),
                    hint="add their Debian packages to the toolkit's runtime list in "
                    "images/versions.yaml and run `opforge images lock-debs`",
                )
        if image_cache is not None:
            _run(image_cache_commands(image_cache, True)[0], root)
        record["status"] = "passed"
    except BuildError as exc:
        record["error"] = exc.message
        raise BuildError(
            f"cell {cell.id}: {exc.message}", hint=exc.hint, details=exc.details
        ) from None
    finally:
        results = [r for r in collect(junit_dir) if r.cell == cell.id] if junit_dir.is_dir() else []
        if results:
            r = results[0]
            record["tests"] = {
                "tests": r.tests,
                "failures": r.failures,
                "errors": r.errors,
                "skipped": r.skipped,
            }
        (out / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        print(f"[cell] {cell.id}: {record['status']}; record in {out / RECORD}", flush=True)
    return record
