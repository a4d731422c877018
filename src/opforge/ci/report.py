"""Turning the cells' JUnit XML reports into one table (markdown or terminal)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ConfigError


@dataclass
class CellResult:
    """Totals of one cell's reports."""

    cell: str
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0

    @property
    def status(self) -> str:
        """``passed``, ``failed`` or ``no tests``."""
        if self.failures or self.errors:
            return "failed"
        return "passed" if self.tests else "no tests"


def collect(root: Path) -> list[CellResult]:
    """Totals per cell: each ``*.xml`` under ``root`` counts for the cell named by the first
    folder below ``root`` (``cell-<id>/...`` as the workflow downloads them, or ``<id>/``)."""
    if not root.is_dir():
        raise ConfigError(
            f"no report folder {root}",
            hint="give the folder the cells' reports were downloaded to (one sub-folder per cell)",
        )
    results: dict[str, CellResult] = {}
    for path in sorted(root.rglob("*.xml")):
        first = path.relative_to(root).parts[0]
        cell = first.removeprefix("cell-") if first != path.name else path.stem
        try:
            tree = ET.parse(path)
        except ET.ParseError as exc:
            raise ConfigError(
                f"{path}: not a JUnit XML report ({exc})",
                hint="remove the file or re-run the cell that wrote it (pytest --junitxml)",
            ) from None
        suites = tree.getroot()
        suites = [suites] if suites.tag == "testsuite" else suites.findall("testsuite")
        result = results.setdefault(cell, CellResult(cell))
        for suite in suites:
            result.tests += int(suite.get("tests", 0))
            result.failures += int(suite.get("failures", 0))
            result.errors += int(suite.get("errors", 0))
            result.skipped += int(suite.get("skipped", 0))
            result.seconds += float(suite.get("time", 0) or 0)
    return list(results.values())


def table(results: list[CellResult], fmt: str = "terminal") -> str:
    """The results as a markdown table or aligned terminal text."""
    header = ["cell", "status", "tests", "failed", "errors", "skipped", "time (s)"]
    rows = [
        [
            r.cell,
            r.status,
            str(r.tests),
            str(r.failures),
            str(r.errors),
            str(r.skipped),
            f"{r.seconds:.1f}",
        ]
        for r in results
    ]
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    return (
        "\n".join(
            "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))
            for row in [header, *rows]
        )
        + "\n"
    )
