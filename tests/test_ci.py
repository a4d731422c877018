"""The nightly matrix and its workflow: cells and reasons, deterministic rendering, --check,
GitHub's workflow schema and zizmor, run-cell's commands, and the JUnit report table."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from opforge.ci.cell import cell_commands
from opforge.ci.matrix import load_matrix
from opforge.ci.workflow import WORKFLOW_PATH, render
from opforge.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
MATRIX = REPO / "ci" / "matrix.yaml"
VERSIONS = REPO / "images" / "versions.yaml"


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opforge", *args], cwd=root, capture_output=True, text=True
    )


def test_cells_cover_the_cuda_versions_and_every_exclusion_has_a_reason():
    matrix = load_matrix(MATRIX, VERSIONS)
    assert {c.cuda for c in matrix.cells} >= {"11.8", "12.4", "12.8", "13.0"}
    assert {c.id for c in matrix.included} == {
        "cuda11.8-cudnn8.9-mindspore2.10.0",
        "cuda12.4-cudnn9.1-torch2.13.0",
        "cuda12.8-cudnn9.8-torch2.13.0",
        "cuda13.0-cudnn9.13-torch2.13.0",
    }
    excluded = [c for c in matrix.cells if c.excluded]
    assert excluded and all(c.excluded.strip() for c in excluded)
    mindspore_13 = next(c for c in matrix.cells if c.id == "cuda13.0-cudnn9.13-mindspore2.10.0")
    assert "need CUDA 11.x" in mindspore_13.excluded
    assert next(c for c in matrix.included if c.cuda == "13.0").flavour == "pip"


def write_matrix(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_an_exclude_without_reason_is_refused(tmp_path):
    path = write_matrix(
        tmp_path,
        """
        axes: {cuda: ["13.0"], cudnn: ["9.13"], framework: ["torch==2.13.0"]}
        exclude:
          - match: {cuda: "13.0"}
        """,
    )
    with pytest.raises(ConfigError, match=r"exclude\[0\]: an exclude needs a `reason:`"):
        load_matrix(path, VERSIONS)


def test_a_cell_without_image_must_be_excluded(tmp_path):
    path = write_matrix(
        tmp_path, 'axes: {cuda: ["12.1"], cudnn: ["9.13"], framework: ["torch==2.13.0"]}\n'
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
    matrix.write_text(matrix.read_text().replace('"torch==2.13.0"', '"torch==2.14.0"', 1))
    stale = cli(tmp_path, "ci", "render", "--check")
    assert stale.returncode == 1
    assert f"{WORKFLOW_PATH} is out of date" in stale.stderr and "opforge ci render" in stale.stderr
    assert cli(tmp_path, "ci", "render").returncode == 0
    assert "torch2.14.0" in (tmp_path / WORKFLOW_PATH).read_text()
    assert cli(tmp_path, "ci", "render", "--check").returncode == 0


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
    excluded = cli(REPO, "ci", "run-cell", "cuda13.0-cudnn9.13-mindspore2.10.0", "--dry-run")
    assert (
        excluded.returncode == 1
        and "is excluded: MindSpore 2.x GPU wheels need CUDA 11.x" in excluded.stderr
    )
    unknown = cli(REPO, "ci", "run-cell", "cuda9-nope", "--dry-run")
    assert unknown.returncode == 1 and "no cell 'cuda9-nope'" in unknown.stderr


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
    assert markdown.returncode == 0, markdown.stderr
    lines = markdown.stdout.splitlines()
    assert lines[0] == "| cell | status | tests | failed | errors | skipped | time (s) |"
    assert lines[2].startswith("| cudaA | failed | 3 | 1 | 0 | 1 |")
    assert lines[3].startswith("| cudaB | passed | 1 | 0 | 0 | 0 |")
    terminal = cli(REPO, "ci", "report", str(reports))
    assert terminal.stdout.splitlines()[1].split()[:3] == ["cudaA", "failed", "3"]
    (reports / "cell-cudaC").mkdir()
    (reports / "cell-cudaC" / "broken.xml").write_text("<testsuite")
    broken = cli(REPO, "ci", "report", str(reports))
    assert broken.returncode == 1 and "not a JUnit XML report" in broken.stderr
