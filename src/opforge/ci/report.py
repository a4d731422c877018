"""The nightly summary: the cells' JUnit XML reports and cell records as one table.

``opforge ci run-cell CELL --junit-dir DIR`` writes ``DIR/CELL/*.xml`` (its tests' JUnit
reports) and ``DIR/CELL/cell-record.json`` (its status, and the error that stopped it); the
workflow downloads each cell's files into ``cell-CELL/``. Every file counts for the cell named by
the first folder below the report folder, so a cell that stopped before its tests (no Docker, a
failed image build) is still a row: its record says it failed, and why.
"""

from __future__ import annotations

import json
import math
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ConfigError, OpforgeError
from opforge.report import printable
from opforge.yamlfile import read_text_file

# The file name opforge.ci.cell writes its record to (that module imports this one).
RECORD = "cell-record.json"
SUITE_ROOTS = ("testsuite", "testsuites")
REWRITE_HINT = "remove the file or re-run the cell that wrote it (pytest --junitxml)"
# A cell's JUnit report is some kilobytes per thousand tests; a record is smaller still.
MAX_REPORT_BYTES = 64 << 20


@dataclass
class CellResult:
    """Totals of one cell's reports, and what its cell record says."""

    cell: str
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    recorded: str | None = None  # the record's status: "passed", "failed" or None (no record)
    reason: str = ""  # why the cell failed, as its record says

    @property
    def status(self) -> str:
        """``failed`` (by its record or its tests), ``passed`` or ``no tests``."""
        if self.recorded == "failed" or self.failures or self.errors:
            return "failed"
        return "passed" if self.tests else "no tests"


class CellsFailed(OpforgeError):
    """A cell of the report failed: the table, already printed, gives each one's reason."""


def _cell_name(root: Path, path: Path, fallback: str) -> str:
    """``X`` for ``root/cell-X/...`` or ``root/X/...``; ``fallback`` for a file in ``root``."""
    first = path.relative_to(root).parts[0]
    return first.removeprefix("cell-") if first != path.name else fallback


def _number(path: Path, suite: ET.Element, name: str, whole: bool) -> float:
    """The suite's attribute ``name`` (absent or empty: 0), refused unless a number >= 0."""
    raw = suite.get(name) or "0"
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = -1
    if value < 0 or not math.isfinite(value):
        kind = "a whole number" if whole else "a number of seconds"
        raise ConfigError(
            f"{path}: <{suite.tag}> attribute {name}={raw!r} is not {kind}", hint=REWRITE_HINT
        )
    return value


def _add_junit(result: CellResult, path: Path) -> None:
    """Add the totals of the JUnit XML report ``path`` to ``result``."""
    try:
        top = ET.fromstring(read_text_file(path, limit=MAX_REPORT_BYTES))
    except ET.ParseError as exc:
        raise ConfigError(f"{path}: not a JUnit XML report ({exc})", hint=REWRITE_HINT) from None
    if top.tag not in SUITE_ROOTS:
        raise ConfigError(
            f"{path}: not a JUnit XML report (its root element is <{top.tag}>, "
            "not <testsuite> or <testsuites>)",
            hint=REWRITE_HINT,
        )
    for suite in [top] if top.tag == "testsuite" else top.findall("testsuite"):
        result.tests += int(_number(path, suite, "tests", whole=True))
        result.failures += int(_number(path, suite, "failures", whole=True))
        result.errors += int(_number(path, suite, "errors", whole=True))
        result.skipped += int(_number(path, suite, "skipped", whole=True))
        result.seconds += _number(path, suite, "time", whole=False)


def _read_record(path: Path) -> dict:
    """The cell record ``path``, refused unless a JSON object whose status is passed or failed."""
    hint = "remove the file or re-run the cell that wrote it (opforge ci run-cell)"
    try:
        record = json.loads(read_text_file(path, limit=MAX_REPORT_BYTES))
    except ValueError as exc:
        raise ConfigError(f"{path}: not a cell record ({exc})", hint=hint) from None
    except RecursionError:
        raise ConfigError(f"{path}: not a cell record (nested too deeply)", hint=hint) from None
    if not isinstance(record, dict) or record.get("status") not in ("passed", "failed"):
        raise ConfigError(
            f'{path}: not a cell record (no "status": "passed" or "failed")', hint=hint
        )
    return record


def _add_record(result: CellResult, record: dict) -> None:
    """Note a cell record's status in ``result`` (any failed record fails the cell), and the
    error that stopped the cell as the reason, on one line."""
    if record["status"] == "failed":
        error = record.get("error")
        why = " ".join(error.split()) if isinstance(error, str) and error.strip() else None
        why = why or "no reason recorded (see the cell's log)"
        result.reason = f"{result.reason}; {why}" if result.reason else why
    if result.recorded != "failed":
        result.recorded = record["status"]


def collect(root: Path) -> list[CellResult]:
    """Totals per cell, by cell name, from every ``*.xml`` and ``cell-record.json`` under
    ``root`` (an empty list if it holds none: run-cell collects its own folder this way)."""
    if not root.is_dir():
        what = "not a folder" if root.exists() else "no such folder"
        raise ConfigError(
            f"no report folder {root}: {what}",
            hint="give the folder the cells' reports were downloaded to (one sub-folder per cell)",
        )
    results: dict[str, CellResult] = {}
    for path in sorted(root.rglob("*")):
        if path.name == RECORD and path.is_file():
            record = _read_record(path)
            fallback = record["cell"] if isinstance(record.get("cell"), str) else path.stem
            result = results.setdefault(_cell_name(root, path, fallback), CellResult(""))
            _add_record(result, record)
        elif path.suffix == ".xml" and path.is_file():
            result = results.setdefault(_cell_name(root, path, path.stem), CellResult(""))
            _add_junit(result, path)
    for cell, result in results.items():
        result.cell = cell
    return sorted(results.values(), key=lambda r: r.cell)


def table(results: list[CellResult], fmt: str = "terminal") -> str:
    """The results as a markdown table or aligned terminal text."""
    header = ["cell", "status", "tests", "failed", "errors", "skipped", "time (s)", "reason"]
    rows = [
        [
            printable(field)
            for field in (
                r.cell,
                r.status,
                str(r.tests),
                str(r.failures),
                str(r.errors),
                str(r.skipped),
                f"{r.seconds:.1f}",
                r.reason,
            )
        ]
        for r in results
    ]
    if fmt == "markdown":
        cells = [[v.replace("|", "\\|") for v in row] for row in rows]
        lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        return "\n".join(lines) + "\n"
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    return "".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in [header, *rows]
    )


def print_report(root: Path, fmt: str = "terminal") -> int:
    """``opforge ci report``: print the table of the cells under ``root``; return 0.

    Raises ``ConfigError`` when ``root`` holds no report or record, and ``CellsFailed`` (after
    printing the table) when any cell failed, so the command exits non-zero.
    """
    results = collect(root)
    if not results:
        raise ConfigError(
            f"nothing to report in {root}: no JUnit XML report (*.xml) or {RECORD} found",
            hint="`opforge ci run-cell CELL --junit-dir DIR` writes them; give the folder the "
            "cells' artifacts were downloaded to",
        )
    sys.stdout.write(table(results, fmt))
    sys.stdout.flush()
    failed = [printable(r.cell) for r in results if r.status == "failed"]
    if failed:
        raise CellsFailed(
            f"{len(failed)} of {len(results)} cells failed: {', '.join(failed)}",
            hint=f"the table gives each failed cell's reason; its {RECORD} and log say more",
        )
    return 0
