"""``opforge ci``: the nightly CUDA x cuDNN x framework matrix, its workflow and its cells."""

from __future__ import annotations

import argparse
from pathlib import Path

from opforge.ci.matrix import Matrix, load_matrix
from opforge.ci.workflow import WORKFLOW_PATH
from opforge.cli.common import path_text, project, refuse_a_file_as_folder, resolved
from opforge.report import printable
from opforge.settings import Settings


def _matrix(settings: Settings) -> Matrix:
    found = project(settings)
    return load_matrix(found.matrix_file, found.versions_file)


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """Every cell with its flavour, or the reason it is excluded."""
    for cell in _matrix(settings).cells:
        status = (
            f"excluded: {printable(cell.excluded)}"
            if cell.excluded
            else f"included ({cell.flavour} images)"
        )
        print(f"{cell.id:40} {status}")
    return 0


def cmd_render(args: argparse.Namespace, settings: Settings) -> int:
    """Write (or check) the nightly workflow."""
    from opforge.ci.workflow import sync_workflow

    matrix = _matrix(settings)
    if sync_workflow(project(settings).root, matrix, check=args.check):
        print(f"wrote {WORKFLOW_PATH} ({len(matrix.included)} cells)")
    else:
        print(f"{WORKFLOW_PATH} is up to date ({len(matrix.included)} cells)")
    return 0


def cmd_run_cell(args: argparse.Namespace, settings: Settings) -> int:
    """Run one cell as the workflow does."""
    from opforge.ci.cell import run_cell

    cell = _matrix(settings).cell(args.cell)
    root = project(settings).root
    refuse_a_file_as_folder("--junit-dir", Path(args.junit_dir))
    if args.image_cache:
        refuse_a_file_as_folder("--image-cache", Path(args.image_cache))
    run_cell(cell, Path(args.junit_dir).resolve(), resolved(args.image_cache), args.dry_run, root)
    return 0


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    """The cells' JUnit reports and cell records as one table; non-zero when a cell failed."""
    from opforge.ci.report import print_report

    return print_report(Path(args.reports), args.format)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``ci`` and its actions."""
    ci = sub.add_parser("ci", help="the nightly CUDA x cuDNN x framework matrix")
    actions = ci.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser(
        "list", help="every cell, included or excluded with the reason"
    ).set_defaults(func=cmd_list)
    render = actions.add_parser("render", help=f"write {WORKFLOW_PATH} from ci/matrix.yaml")
    render.add_argument(
        "--check", action="store_true", help="only check that the committed file is up to date"
    )
    render.set_defaults(func=cmd_render)
    run = actions.add_parser("run-cell", help="run one cell with the workflow's own commands")
    run.add_argument("cell", metavar="CELL", help="a cell id from `opforge ci list`")
    run.add_argument(
        "--junit-dir",
        type=path_text,
        default="reports",
        metavar="DIR",
        help="JUnit XML reports (default: reports)",
    )
    run.add_argument(
        "--image-cache",
        type=path_text,
        metavar="DIR",
        help="load/save opforge's images here (the CI cache)",
    )
    run.add_argument("--dry-run", action="store_true", help="print the commands only")
    run.set_defaults(func=cmd_run_cell)
    report = actions.add_parser("report", help="one table from the cells' JUnit XML reports")
    report.add_argument(
        "reports",
        type=path_text,
        metavar="DIR",
        help="folder holding the reports (one sub-folder per cell)",
    )
    report.add_argument(
        "--format",
        choices=["terminal", "markdown"],
        default="terminal",
        help="a table for the terminal (default) or a markdown table, e.g. for a job summary",
    )
    report.set_defaults(func=cmd_report)
