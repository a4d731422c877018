"""``opforge test --runner host --junit-dir DIR``: each target's pytest writes DIR/<target>.xml,
the report the docker runner writes, with the same name and layout."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import run_opforge

_TESTS = {
    "alpha": "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n",
    "beta": "def test_three():\n    pass\n",
}


def _project(root: Path, tests: dict[str, str]) -> None:
    """A project of one target per entry, each with a pytest file of its own as its test."""
    (root / "checksums.yaml").write_text("pins: {}\n")
    (root / "recipes").mkdir()
    for name, body in tests.items():
        (root / name).mkdir()
        (root / name / "CMakeLists.txt").write_text(f"project({name} NONE)\n")
        (root / name / f"test_{name}.py").write_text(body)
        (root / "recipes" / f"{name}.yaml").write_text(
            f"name: {name}\nschema: 1\nsources: [{name}/*]\ncmake: {{source_dir: {name}}}\n"
            f"profiles: {{cpu: {{}}}}\noutputs: [lib/{name}]\n"
            f"test: {{command: [python, -m, pytest, -q, -p, no:cacheprovider, {name}]}}\n"
        )


def _suite(report: Path) -> dict[str, str]:
    root = ET.parse(report).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None, report
    return dict(suite.attrib)


def test_the_host_runner_writes_one_junit_report_per_target(tmp_path):
    _project(tmp_path, _TESTS)
    result = run_opforge("test", "--runner", "host", "--junit-dir", "out/reports", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    reports = tmp_path / "out" / "reports"
    assert sorted(p.name for p in reports.iterdir()) == ["alpha.xml", "beta.xml"]
    alpha, beta = _suite(reports / "alpha.xml"), _suite(reports / "beta.xml")
    assert (alpha["tests"], alpha["failures"]) == ("2", "0")
    assert (beta["tests"], beta["failures"]) == ("1", "0")
    assert "[alpha] test: python -m pytest" in result.stdout


def test_a_failing_target_still_leaves_its_report(tmp_path):
    _project(tmp_path, {"alpha": "def test_fails():\n    assert 1 == 2\n"})
    result = run_opforge("test", "alpha", "--junit-dir", "reports", cwd=tmp_path)
    assert result.returncode == 1
    suite = _suite(tmp_path / "reports" / "alpha.xml")
    assert (suite["tests"], suite["failures"]) == ("1", "1")


def test_a_file_where_the_report_folder_goes_is_one_line(tmp_path):
    _project(tmp_path, _TESTS)
    (tmp_path / "reports").write_text("not a folder\n")
    result = run_opforge("test", "--junit-dir", "reports", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"opforge: error: cannot create directory {tmp_path / 'reports'}: it exists and is not "
        "a directory",
        f"  hint: move {tmp_path / 'reports'} away, or give --junit-dir a directory",
    ]
