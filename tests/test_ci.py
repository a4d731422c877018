"""The nightly matrix and its workflow: cells and reasons, deterministic rendering, --check,
GitHub's workflow schema and zizmor, run-cell's commands, and the JUnit report table."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from opforge.ci.cell import cell_commands, unresolved_links
from opforge.ci.matrix import load_matrix
from opforge.ci.workflow import WORKFLOW_PATH, render
from opforge.errors import ConfigError
from opforge.images.service import ImageOptions, image_spec
from opforge.project import Project
from tests.conftest import run_opforge

REPO = Path(__file__).resolve().parent.parent
MATRIX = REPO / "ci" / "matrix.yaml"
VERSIONS = REPO / "images" / "versions.yaml"


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return run_opforge(*args, cwd=root)


def test_cells_cover_three_cudnn_per_cuda_and_every_exclusion_has_a_reason():
    matrix = load_matrix(MATRIX, VERSIONS)
    included = matrix.included
    for cuda in ("11.8", "12.4", "13.0"):
        assert len({c.cudnn for c in included if c.cuda == cuda}) >= 3, cuda
    # Registry-free images for every included cell: Debian's toolkit for 11.8 and 12.4.
    assert {c.flavour for c in included if c.cuda in ("11.8", "12.4")} == {"deb"}
    assert {c.flavour for c in included if c.cuda == "13.0"} == {"pip"}
    assert {c.id for c in included if c.framework_name == "mindspore"} == {
        "cuda11.8-cudnn8.9-mindspore2.10.0"
    }
    mindspore = matrix.cell("cuda11.8-cudnn8.9-mindspore2.10.0")
    assert mindspore.requirements == ("mindspore==2.10.0", "numpy<2")
    excluded = [c for c in matrix.cells if c.excluded]
    assert {c.framework_name for c in excluded} == {"mindspore", "torch"}
    assert {c.cuda for c in excluded if c.framework_name == "torch"} == {"12.4"}
    assert (
        "CUDA 13 build"
        in matrix.cells[
            [c.id for c in matrix.cells].index("cuda12.4-cudnn9.1-torch2.13.0")
        ].excluded
    )
    assert (
        "link the CUDA 11 libraries"
        in next(
            c for c in excluded if c.cuda == "13.0" and c.framework_name == "mindspore"
        ).excluded
    )
    assert "cuDNN 8" in next(c for c in excluded if c.cuda == "11.8").excluded
    # Cells without a framework: the kernel library on every CUDA x cuDNN.
    kernels_only = [c for c in included if c.framework_name == "none"]
    assert len(kernels_only) == 9 and all(c.adapter is None for c in kernels_only)
    assert matrix.cell(matrix.ci_cell).cuda != "13.0"


def write_matrix(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_an_exclude_without_reason_is_refused(tmp_path):
    path = write_matrix(
        tmp_path,
        """
        cuda: {"13.0": ["9.13"]}
        frameworks: [{requirement: "torch==2.13.0"}]
        exclude:
          - match: {cuda: "13.0"}
        """,
    )
    with pytest.raises(ConfigError, match=r"exclude\[0\]\.reason: required key is missing"):
        load_matrix(path, VERSIONS)


def test_a_cell_without_image_must_be_excluded(tmp_path):
    path = write_matrix(
        tmp_path, 'cuda: {"12.1": ["9.13"]}\nframeworks: [{requirement: "torch==2.13.0"}]\n'
    )
    with pytest.raises(
        ConfigError, match=r"cell cuda 12\.1 \+ cudnn 9\.13 \+ torch==2\.13\.0 has no image"
    ):
        load_matrix(path, VERSIONS)


def test_rendering_is_deterministic_and_the_committed_workflow_is_current():
    matrix = load_matrix(MATRIX, VERSIONS)
    assert render(matrix) == render(load_matrix(MATRIX, VERSIONS))
    result = cli(REPO, "ci", "render", "--check")
    assert result.returncode == 0, result.stderr
    workflow = yaml.safe_load((REPO / WORKFLOW_PATH).read_text())
    assert workflow["permissions"] == {"contents": "read"}
    assert {"schedule", "workflow_dispatch"} <= set(workflow["on"])
    include = workflow["jobs"]["cell"]["strategy"]["matrix"]["include"]
    assert [row["cell"] for row in include] == [c.id for c in matrix.included]


def test_check_catches_a_stale_workflow(tmp_path):
    for name in ("ci", "images", ".github"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "checksums.yaml", tmp_path / "checksums.yaml")
    assert cli(tmp_path, "ci", "render", "--check").returncode == 0
    matrix = tmp_path / "ci" / "matrix.yaml"
    matrix.write_text(matrix.read_text().replace('"9.27", "9.28"]', '"9.27"]', 1))
    stale = cli(tmp_path, "ci", "render", "--check")
    assert stale.returncode == 1
    assert f"{WORKFLOW_PATH} is out of date" in stale.stderr and "opforge ci render" in stale.stderr
    assert cli(tmp_path, "ci", "render").returncode == 0
    assert "cudnn9.28" not in (tmp_path / WORKFLOW_PATH).read_text()
    assert cli(tmp_path, "ci", "render", "--check").returncode == 0


def test_check_says_the_workflow_is_missing_or_a_folder(tmp_path):
    for name in ("ci", "images", ".github"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "checksums.yaml", tmp_path / "checksums.yaml")
    workflow = tmp_path / WORKFLOW_PATH
    workflow.unlink()
    missing = cli(tmp_path, "ci", "render", "--check")
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"opforge: error: {WORKFLOW_PATH} is missing\n")
    workflow.mkdir()
    for argv in (["--check"], []):
        folder = cli(tmp_path, "ci", "render", *argv)
        assert folder.returncode == 1
        assert folder.stderr.splitlines() == [
            f"opforge: error: {WORKFLOW_PATH} is a directory",
            f"  hint: remove the folder {WORKFLOW_PATH}, then run `opforge ci render`",
        ]


def test_render_names_a_file_where_the_workflows_folder_goes(tmp_path):
    # render said "File exists" with a hint to check the folder; --check said the workflow
    # "cannot be read: Not a directory" and hinted at render, which failed.
    for name in ("ci", "images"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "checksums.yaml", tmp_path / "checksums.yaml")
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github" / "workflows").write_text("not a folder")
    for argv in (["--check"], []):
        result = cli(tmp_path, "ci", "render", *argv)
        assert result.returncode == 1
        assert result.stderr.splitlines() == [
            "opforge: error: .github/workflows is a file, where the folder holding "
            f"{WORKFLOW_PATH} goes",
            f"  hint: move {tmp_path / '.github' / 'workflows'} away, then run `opforge ci render`",
        ]
    assert (tmp_path / ".github" / "workflows").read_text() == "not a folder"


def test_workflow_passes_githubs_schema_and_zizmor():
    for tool in ("check-jsonschema", "zizmor"):
        if shutil.which(tool) is None and not (Path(sys.executable).parent / tool).exists():
            pytest.skip(f"{tool} is not installed (the dev extra installs it)")
    bindir = Path(sys.executable).parent
    schema = subprocess.run(
        [bindir / "check-jsonschema", "--builtin-schema", "vendor.github-workflows", WORKFLOW_PATH],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert schema.returncode == 0, schema.stdout + schema.stderr
    audit = subprocess.run(
        [bindir / "zizmor", "--offline", "--min-severity", "medium", WORKFLOW_PATH],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_run_cell_runs_what_the_workflow_runs(tmp_path):
    workflow = yaml.safe_load((REPO / WORKFLOW_PATH).read_text())
    step = next(
        s
        for s in workflow["jobs"]["cell"]["steps"]
        if s.get("name", "").startswith("Build in devel")
    )
    assert step["run"].startswith('opforge ci run-cell "$CELL"')
    dry = cli(
        REPO,
        "ci",
        "run-cell",
        "cuda13.0-cudnn9.13-torch2.13.0",
        "--dry-run",
        "--junit-dir",
        str(tmp_path),
    )
    assert dry.returncode == 0, dry.stderr
    cell = load_matrix(MATRIX, VERSIONS).cell("cuda13.0-cudnn9.13-torch2.13.0")
    expected = ["$ " + " ".join(argv) for argv in cell_commands(cell, tmp_path)]
    assert dry.stdout.splitlines() == expected
    assert "--runner docker" in expected[2] and "--profile gpu" in expected[2]
    assert "kernels mindspore-adapter torch-adapter" in expected[2]
    excluded = cli(REPO, "ci", "run-cell", "cuda13.0-cudnn9.13-mindspore2.10.0", "--dry-run")
    assert excluded.returncode == 1
    assert "is excluded: MindSpore 2.10's GPU plugins link the CUDA 11" in excluded.stderr
    unknown = cli(REPO, "ci", "run-cell", "cuda9-nope", "--dry-run")
    assert unknown.returncode == 1 and "no cell 'cuda9-nope'" in unknown.stderr


@pytest.mark.parametrize("flag", ["--junit-dir", "--image-cache"])
def test_run_cell_refuses_a_file_for_a_folder_before_running(tmp_path, flag):
    afile = tmp_path / "afile"
    afile.write_text("")
    cell = "cuda13.0-cudnn9.13-torch2.13.0"
    result = cli(REPO, "ci", "run-cell", cell, "--dry-run", flag, str(afile))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"opforge: error: {flag} {afile} is not a directory",
        f"  hint: give a folder to {flag} (created when missing)",
    ]


def test_report_tables_real_junit_results(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_sample.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "@pytest.mark.skip(reason='x')\n"
        "def test_skipped(): pass\n"
    )
    reports = tmp_path / "artifacts"
    for cell, args in (("cell-cudaA", []), ("cell-cudaB", ["-k", "ok"])):
        out = reports / cell / "reports"
        out.mkdir(parents=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(suite),
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={out / 'kernels.xml'}",
                *args,
            ],
            capture_output=True,
        )
    markdown = cli(REPO, "ci", "report", str(reports), "--format", "markdown")
    # A cell whose tests failed fails the report too, after the table.
    assert markdown.returncode == 1, markdown.stderr
    assert markdown.stderr.splitlines()[0] == "opforge: error: 1 of 2 cells failed: cudaA"
    lines = markdown.stdout.splitlines()
    assert lines[0] == "| cell | status | tests | failed | errors | skipped | time (s) | reason |"
    assert lines[2].startswith("| cudaA | failed | 3 | 1 | 0 | 1 |")
    assert lines[3].startswith("| cudaB | passed | 1 | 0 | 0 | 0 |")
    terminal = cli(REPO, "ci", "report", str(reports))
    assert terminal.stdout.splitlines()[1].split()[:3] == ["cudaA", "failed", "3"]
    passing = cli(REPO, "ci", "report", str(reports / "cell-cudaB"))
    assert passing.returncode == 0 and passing.stderr == ""
    assert passing.stdout.splitlines()[1].split()[:3] == ["reports", "passed", "1"]
    (reports / "cell-cudaC").mkdir()
    (reports / "cell-cudaC" / "broken.xml").write_text("<testsuite")
    broken = cli(REPO, "ci", "report", str(reports))
    assert broken.returncode == 1 and "not a JUnit XML report" in broken.stderr
    assert "  hint: remove the file or re-run the cell" in broken.stderr


def test_report_without_its_folder_gives_the_hint(tmp_path):
    missing = cli(REPO, "ci", "report", str(tmp_path / "nothing"))
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        f"opforge: error: no report folder {tmp_path / 'nothing'}: no such folder",
        "  hint: give the folder the cells' reports were downloaded to (one sub-folder per cell)",
    ]
    (tmp_path / "file.xml").write_text("<testsuite/>")
    a_file = cli(REPO, "ci", "report", str(tmp_path / "file.xml"))
    assert a_file.stderr.splitlines()[0] == (
        f"opforge: error: no report folder {tmp_path / 'file.xml'}: not a folder"
    )


def test_report_rows_a_cell_that_failed_before_its_tests(tmp_path):
    """run-cell without a Docker engine writes only its cell record: the report still has the
    cell as a failed row, with the record's reason, and exits non-zero."""
    reports = tmp_path / "artifacts"
    cell = "cuda13.0-cudnn9.13-torch2.13.0"
    run = run_opforge(
        "ci",
        "run-cell",
        cell,
        "--junit-dir",
        str(reports),
        cwd=REPO,
        env={"DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}"},
    )
    assert run.returncode == 1
    record = json.loads((reports / cell / "cell-record.json").read_text())
    assert record["status"] == "failed" and "no Docker engine answers" in record["error"]
    assert not list(reports.rglob("*.xml"))
    # A passed cell beside it, as the workflow downloads them (cell-<id>/reports/<id>/).
    passed = reports / "cell-cudaP" / "reports" / "cudaP"
    passed.mkdir(parents=True)
    (passed / "kernels.xml").write_text(
        '<testsuites><testsuite tests="2" failures="0" errors="0" skipped="0" time="1.5"/>'
        "</testsuites>"
    )
    (passed / "cell-record.json").write_text(json.dumps({"cell": "cudaP", "status": "passed"}))
    report = cli(REPO, "ci", "report", str(reports), "--format", "markdown")
    assert report.returncode == 1
    assert report.stdout.splitlines()[2:] == [
        f"| {cell} | failed | 0 | 0 | 0 | 0 | 0.0 | {record['error']} |",
        "| cudaP | passed | 2 | 0 | 0 | 0 | 1.5 |  |",
    ]
    assert report.stderr.splitlines() == [
        f"opforge: error: 1 of 2 cells failed: {cell}",
        "  hint: the table gives each failed cell's reason; its cell-record.json and log say more",
    ]
    assert "Traceback" not in report.stderr


def test_report_of_an_empty_folder_says_nothing_was_found(tmp_path):
    (tmp_path / "cell-cudaA").mkdir()
    (tmp_path / "cell-cudaA" / "notes.txt").write_text("not a report")
    empty = cli(REPO, "ci", "report", str(tmp_path))
    assert empty.returncode == 1 and empty.stdout == ""
    assert empty.stderr.splitlines() == [
        f"opforge: error: nothing to report in {tmp_path}: no JUnit XML report (*.xml) or "
        "cell-record.json found",
        "  hint: `opforge ci run-cell CELL --junit-dir DIR` writes them; give the folder the "
        "cells' artifacts were downloaded to",
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('<testsuite tests="abc"/>', "<testsuite> attribute tests='abc' is not a whole number"),
        ('<testsuite tests="-1"/>', "<testsuite> attribute tests='-1' is not a whole number"),
        (
            '<testsuites><testsuite tests="1" time="1,5"/></testsuites>',
            "<testsuite> attribute time='1,5' is not a number of seconds",
        ),
        (
            '<testsuite tests="1" time="nan"/>',
            "<testsuite> attribute time='nan' is not a number of seconds",
        ),
        (
            "<html/>",
            "not a JUnit XML report (its root element is <html>, not <testsuite> or <testsuites>)",
        ),
    ],
)
def test_report_refuses_a_malformed_junit_file_naming_it(tmp_path, body, message):
    path = tmp_path / "cell-cudaA" / "kernels.xml"
    path.parent.mkdir()
    path.write_text(body)
    refused = cli(REPO, "ci", "report", str(tmp_path))
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"opforge: error: {path}: {message}",
        "  hint: remove the file or re-run the cell that wrote it (pytest --junitxml)",
    ]


@pytest.mark.parametrize("body", ["{", "[]", '{"status": "maybe"}'])
def test_report_refuses_a_malformed_cell_record_naming_it(tmp_path, body):
    path = tmp_path / "cell-cudaA" / "cell-record.json"
    path.parent.mkdir()
    path.write_text(body)
    refused = cli(REPO, "ci", "report", str(tmp_path))
    assert refused.returncode == 1 and refused.stdout == ""
    lines = refused.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"opforge: error: {path}: not a cell record")
    assert (
        lines[1] == "  hint: remove the file or re-run the cell that wrote it (opforge ci run-cell)"
    )


def test_an_unknown_or_excluded_ci_cell_is_refused(tmp_path):
    body = MATRIX.read_text()
    for cell, message in (
        ("cuda9.9-cudnn1-torch2.13.0", "no cell 'cuda9.9-cudnn1-torch2.13.0'"),
        ("cuda13.0-cudnn9.13-mindspore2.10.0", "is excluded"),
    ):
        path = tmp_path / "matrix.yaml"
        path.write_text(
            body.replace(f"ci_cell: {load_matrix(MATRIX, VERSIONS).ci_cell}", f"ci_cell: {cell}")
        )
        with pytest.raises(ConfigError, match=re.escape(message)) as info:
            load_matrix(path, VERSIONS)
        # Named as the file's key, with the cells it may name (`ci list` fails on it too).
        assert info.value.message.startswith(f"{path}: ci_cell: ")
        assert info.value.hint.startswith("set ci_cell to one of the cells that run: cuda")


def test_a_cell_without_framework_builds_images_without_one(tmp_path):
    cell = load_matrix(MATRIX, VERSIONS).cell("cuda12.4-cudnn9.13-none")
    devel, _, build, test = cell_commands(cell, tmp_path)
    assert devel[devel.index("--framework") + 1] == "none"
    assert build[2:5] == ["kernels", "mindspore-adapter", "torch-adapter"]
    assert test[2:4] == ["kernels", "--profile"]
    options = ImageOptions(flavour="deb", cuda="12.4", cudnn="9.13", frameworks=("none",))
    assert image_spec(Project(REPO, REPO / "checksums.yaml"), "devel", options).frameworks == ()


def test_cell_commands_leave_out_what_the_devel_image_cannot_build(tmp_path):
    cell = load_matrix(MATRIX, VERSIONS).cell("cuda11.8-cudnn9.1-torch2.13.0")
    skipped = {"torch-adapter": "CPU torch"}
    images, _, build, test = cell_commands(cell, tmp_path, skipped)
    assert build[:4] == ["opforge", "build", "kernels", "mindspore-adapter"]
    assert test[:4] == ["opforge", "test", "kernels", "--profile"]
    assert images[images.index("--flavour") + 1] == "deb"
    assert test[-1] == str(tmp_path / cell.id)


@pytest.mark.docker
@pytest.mark.slow
def test_the_ci_cell_runs_for_real(tmp_path_factory, client):
    """The one non-default cell per-submission CI runs (ci_cell in ci/matrix.yaml): images from
    a debootstrap base, the GPU build in devel, the tests in runtime, JUnit and cell record.
    Everything it creates (images, volume, project copy) is removed at the end."""
    from tests.test_docker import copy_project, created_on

    matrix = load_matrix(MATRIX, VERSIONS)
    cell = matrix.cell(matrix.ci_cell)
    root = copy_project(tmp_path_factory.mktemp("ci-cell"))
    shutil.copytree(REPO / "ci", root / "ci")
    env = {**os.environ, "BASE_IMAGE": "opforge-base:{suite}"}
    with created_on(client) as created:
        try:
            run = subprocess.run(
                [sys.executable, "-m", "opforge", "ci", "run-cell", cell.id],
                cwd=root,
                env={**env, "OPFORGE_PIP_CACHE_VOLUME": os.environ["OPFORGE_PIP_CACHE_VOLUME"]},
                capture_output=True,
                text=True,
                timeout=3600,
            )
            record_path = root / "reports" / cell.id / "cell-record.json"
            record = json.loads(record_path.read_text())
            created.from_record(record.get("images", {}))
            assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
            assert record["status"] == "passed" and record["cuda"] == cell.cuda
            assert f"release {cell.cuda}" in record["nvcc"]
            assert {"devel", "runtime"} <= set(record["images"])
            assert "kernels" in record["built"] and "mindspore-adapter" in record["built"]
            # The GPU torch adapter builds against the image's CPU torch (stable ABI); an image
            # without torch skips it, saying why.
            if cell.framework_name == "torch":
                assert "torch-adapter" in record["built"]
            else:
                assert "has no torch" in record["skipped"]["torch-adapter"]
            assert any(path.endswith("_aot_cuda.so") for path in record["artifacts"])
            assert record["tests"]["tests"] > 0 and record["tests"]["failures"] == 0
            assert record["tests"]["errors"] == 0
            assert (root / "reports" / cell.id / "kernels.xml").is_file()
            # The library the runtime image tested links the cell's cuDNN major.
            lib = next(root.glob("dist/gpu/lib/libopforge_kernels.so.*.*"))
            needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
            assert f"libcudnn.so.{cell.cudnn.split('.')[0]}" in needed
        finally:
            shutil.rmtree(root, ignore_errors=True)


def test_the_gpu_plugin_check_reads_the_plugin_the_framework_loads_on_that_cuda():
    ldd = textwrap.dedent(
        """\
        == /venv/lib/python3.11/site-packages/mindspore/lib/plugin/libmindspore_gpu.so.11.1
        \tlibcudnn.so.8 => /usr/local/cuda/lib64/libcudnn.so.8 (0x1)
        \tlibnvrtc.so.11.1 => not found
        \tlibcuda.so.1 => not found
        == /venv/lib/python3.11/site-packages/mindspore/lib/plugin/libmindspore_gpu.so.11.6
        \tlibnvrtc.so.11.2 => /usr/lib/x86_64-linux-gnu/libnvrtc.so.11.2 (0x1)
        \tlibcuda.so.1 => not found
        """
    )
    # CUDA 11.8 loads the 11.6 plugin: resolved but for the driver, which the host brings.
    assert unresolved_links(ldd, "11.8") == {"mindspore/lib/plugin/libmindspore_gpu.so.11.6": []}
    # CUDA 11.4 would load the 11.1 one, which lacks its nvrtc.
    assert unresolved_links(ldd, "11.4") == {
        "mindspore/lib/plugin/libmindspore_gpu.so.11.1": ["libnvrtc.so.11.1"]
    }
    assert unresolved_links(ldd, "10.2") == {}


def test_a_project_without_its_matrix_or_versions_gives_the_hint(tmp_path):
    (tmp_path / "checksums.yaml").write_text("pins: {}\n")
    matrix = cli(tmp_path, "ci", "list")
    assert matrix.returncode == 1
    assert matrix.stderr.splitlines() == [
        f"opforge: error: cannot read {tmp_path / 'ci' / 'matrix.yaml'}: No such file or directory",
        f"  hint: {tmp_path / 'ci' / 'matrix.yaml'} is the CI matrix of the project: run from an "
        "opforge checkout, or pass --project DIR",
    ]
    (tmp_path / "ci").mkdir()
    shutil.copy(MATRIX, tmp_path / "ci" / "matrix.yaml")
    versions = cli(tmp_path, "ci", "list")
    assert versions.returncode == 1
    lines = versions.stderr.splitlines()
    assert lines[0].startswith(f"opforge: error: cannot read {tmp_path / 'images'}")
    assert lines[1].startswith("  hint: ") and "--project DIR" in lines[1]


def test_report_escapes_what_a_record_or_folder_name_would_print_raw(tmp_path):
    """A root-level record names its cell; neither that name nor a folder's reaches the
    terminal or the markdown table with an escape sequence or a line break."""
    (tmp_path / "cell-record.json").write_text(
        json.dumps({"cell": "\x1b[31mRED\x1b[0m\nnewline", "status": "failed", "error": "a\tb"})
    )
    tabbed = tmp_path / "cell-x\ty" / "kernels.xml"
    tabbed.parent.mkdir()
    tabbed.write_text('<testsuite tests="1" time="0.5"/>')
    terminal = cli(REPO, "ci", "report", str(tmp_path))
    markdown = cli(REPO, "ci", "report", str(tmp_path), "--format", "markdown")
    for result in (terminal, markdown):
        assert result.returncode == 1
        assert "\x1b" not in result.stdout + result.stderr and "\t" not in result.stdout
        assert result.stderr.splitlines()[0] == (
            "opforge: error: 1 of 2 cells failed: \\x1b[31mRED\\x1b[0m\\nnewline"
        )
    assert markdown.stdout.splitlines()[2:] == [
        "| \\x1b[31mRED\\x1b[0m\\nnewline | failed | 0 | 0 | 0 | 0 | 0.0 | a b |",
        "| x\\ty | passed | 1 | 0 | 0 | 0 | 0.5 |  |",
    ]
    rows = terminal.stdout.splitlines()
    assert len(rows) == 3 and rows[1].startswith("\\x1b[31mRED\\x1b[0m\\nnewline  failed")


def test_render_says_when_the_workflow_was_already_up_to_date(tmp_path):
    for name in ("ci", "images", ".github"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "checksums.yaml", tmp_path / "checksums.yaml")
    workflow = tmp_path / WORKFLOW_PATH
    cells = len(load_matrix(MATRIX, VERSIONS).included)
    unchanged = cli(tmp_path, "ci", "render")
    assert unchanged.returncode == 0, unchanged.stderr
    assert unchanged.stdout == f"{WORKFLOW_PATH} is up to date ({cells} cells)\n"
    workflow.write_text("stale\n")
    written = cli(tmp_path, "ci", "render")
    assert written.stdout == f"wrote {WORKFLOW_PATH} ({cells} cells)\n"
    assert workflow.read_text() == (REPO / WORKFLOW_PATH).read_text()
