"""``ci/matrix.yaml``: each CUDA's cuDNN versions crossed with the frameworks, exclude rules
with reasons, and the cells they leave."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from opforge.ci.schema import schema_problem
from opforge.errors import ConfigError, unreadable
from opforge.images.spec import NO_FRAMEWORK, Combination, load_combinations
from opforge.requirements import requirement_problem
from opforge.yamlfile import read_yaml_file

DEFAULT_RUNNER = ("self-hosted", "gpu")
_MATRIX_HINT = "ci/README.md describes the matrix file; compare with the one in the repository"


def _id_part(framework: str) -> str:
    """``torch2.13.0`` for ``torch==2.13.0``: the framework's part of its cells' ids."""
    return re.sub(r"[^A-Za-z0-9.]+", "", framework.replace("==", ""))


@dataclass(frozen=True)
class Cell:
    """One point of the matrix, included or excluded (with the rule's reason)."""

    cuda: str
    cudnn: str
    framework: str
    excluded: str | None = None
    flavour: str = "pip"
    # Requirements installed with the framework (MindSpore: numpy<2).
    framework_with: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """``cuda13.0-cudnn9.13-torch2.13.0``."""
        return f"cuda{self.cuda}-cudnn{self.cudnn}-{_id_part(self.framework)}"

    @property
    def framework_name(self) -> str:
        """``torch`` or ``mindspore``."""
        return re.split(r"[=<>!~ ]", self.framework, maxsplit=1)[0]

    @property
    def requirements(self) -> tuple[str, ...]:
        """What the cell's images install as the framework."""
        return (self.framework, *self.framework_with)

    @property
    def adapter(self) -> str | None:
        """The recipe of the cell's framework adapter (None: the images carry no framework)."""
        return {"torch": "torch-adapter", "mindspore": "mindspore-adapter"}.get(self.framework_name)


@dataclass(frozen=True)
class Matrix:
    """The parsed matrix: runner labels, every cell, and the cell per-submission CI runs."""

    path: Path
    runner: tuple[str, ...]
    cells: tuple[Cell, ...]
    ci_cell: str | None = None

    @property
    def included(self) -> list[Cell]:
        """Cells the nightly runs."""
        return [c for c in self.cells if c.excluded is None]

    def cell(self, cell_id: str) -> Cell:
        """The cell called ``cell_id``; an unknown or excluded one is an error saying why."""
        for c in self.cells:
            if c.id == cell_id:
                if c.excluded:
                    raise ConfigError(
                        f"cell {cell_id} is excluded: {c.excluded}",
                        hint="`opforge ci list` shows the cells that run",
                    )
                return c
        raise ConfigError(
            f"no cell {cell_id!r} in {self.path}",
            hint=f"cells: {', '.join(c.id for c in self.included)}",
        )


def _matches(rule: dict, values: dict[str, str]) -> bool:
    return all(
        values[axis] in (wanted if isinstance(wanted, list) else [wanted])
        for axis, wanted in rule.items()
    )


def _requirement_error(where: str, requirement: str, problem: str) -> ConfigError:
    return ConfigError(
        f"{where}: {requirement!r} {problem}",
        hint="give one PEP 508 requirement per entry, e.g. torch==2.13.0 or 'numpy<2'",
    )


def _frameworks(path: Path, raw: list[dict]) -> list[tuple[str, tuple[str, ...]]]:
    """Each framework and what it installs with; the images' pip reads them line by line, so
    each is checked as recipes' ``wheel.requires`` are (a line break would add pip options)."""
    found = []
    # Ids name jobs, artifacts and report rows: two frameworks must not share one.
    id_parts: dict[str, int] = {}
    for i, entry in enumerate(raw):
        where = f"{path}: frameworks[{i}]"
        requirement, extra = entry["requirement"], tuple(entry.get("with") or ())
        if requirement == NO_FRAMEWORK and extra:
            raise ConfigError(
                f"{where}.with: {NO_FRAMEWORK!r} (no framework) installs nothing with it",
                hint=f"remove `with:` from the {NO_FRAMEWORK!r} entry",
            )
        problem = None if requirement == NO_FRAMEWORK else requirement_problem(requirement)
        if problem:
            raise _requirement_error(f"{where}.requirement", requirement, problem)
        for j, other in enumerate(extra):
            problem = requirement_problem(other)
            if problem:
                raise _requirement_error(f"{where}.with[{j}]", other, problem)
        first = id_parts.setdefault(_id_part(requirement), i)
        if first != i:
            raise ConfigError(
                f"{where}.requirement: {requirement!r} gives the same cell ids as "
                f"frameworks[{first}] ({_id_part(requirement)})",
                hint="list each framework once (a cell id keeps a requirement's letters, digits "
                "and dots)",
            )
        found.append((requirement, extra))
    return found


def load_matrix(path: Path, versions: Path) -> Matrix:
    """Read the matrix; every exclude needs a reason, every included cell an image."""
    try:
        data = read_yaml_file(path)
    except OSError as exc:
        raise unreadable(path, exc, "the CI matrix of the project") from None
    problem = schema_problem(data)
    if problem:
        raise ConfigError(f"{path}: {problem}", hint=_MATRIX_HINT)
    frameworks = _frameworks(path, data["frameworks"])
    rules = [(rule["match"], rule["reason"].strip()) for rule in data.get("exclude") or []]
    combos: dict[tuple[str, str], Combination] = {
        (c.cuda, c.cudnn): c for c in load_combinations(versions)
    }
    cells = []
    for cuda, cudnns in data["cuda"].items():
        for cudnn, (framework, extra) in itertools.product(cudnns, frameworks):
            values = {"cuda": cuda, "cudnn": cudnn, "framework": framework}
            reason = next((why for match, why in rules if _matches(match, values)), None)
            combo = combos.get((cuda, cudnn))
            if reason is None and combo is None:
                raise ConfigError(
                    f"{path}: cell cuda {cuda} + cudnn {cudnn} + {framework} has no image in "
                    f"{versions}",
                    hint="add the combination to images/versions.yaml or exclude the cell with "
                    "a reason",
                )
            flavour = combo.flavours()[0] if combo is not None and combo.flavours() else "pip"
            cells.append(Cell(cuda, cudnn, framework, reason, flavour, extra))
    runner = tuple(data.get("runner") or DEFAULT_RUNNER)
    matrix = Matrix(path, runner, tuple(cells), data.get("ci_cell"))
    if matrix.ci_cell is not None:
        try:
            matrix.cell(matrix.ci_cell)
        except ConfigError as exc:
            # Said as the file's own mistake: `ci list` would fail on it too.
            raise ConfigError(
                f"{path}: ci_cell: {exc.message}",
                hint="set ci_cell to one of the cells that run: "
                + ", ".join(c.id for c in matrix.included),
            ) from None
    return matrix
