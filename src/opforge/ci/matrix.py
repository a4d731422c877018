"""``ci/matrix.yaml``: each CUDA's cuDNN versions crossed with the frameworks, exclude rules
with reasons, and the cells they leave."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ConfigError, unreadable
from opforge.images.spec import Combination, load_combinations
from opforge.yamlfile import read_yaml_file

AXES = ("cuda", "cudnn", "framework")
_MATRIX_HINT = "ci/README.md describes the matrix file; compare with the one in the repository"


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
        name = re.sub(r"[^A-Za-z0-9.]+", "", self.framework.replace("==", ""))
        return f"cuda{self.cuda}-cudnn{self.cudnn}-{name}"

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
    for axis, wanted in rule.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        if values[axis] not in [str(o) for o in options]:
            return False
    return True


def _frameworks(path: Path, data: dict) -> list[tuple[str, tuple[str, ...]]]:
    raw = data.get("frameworks")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(
            f"{path}: expected a non-empty `frameworks:` list",
            hint=_MATRIX_HINT,
        )
    found = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not str(entry.get("requirement") or "").strip():
            raise ConfigError(
                f"{path}: frameworks[{i}]: expected `requirement:` (and optionally `with:`)",
                hint='e.g. {requirement: "torch==2.13.0"}',
            )
        found.append((str(entry["requirement"]), tuple(str(w) for w in entry.get("with") or [])))
    return found


def _cudnn_per_cuda(path: Path, data: dict) -> dict[str, list[str]]:
    raw = data.get("cuda")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(
            f"{path}: expected `cuda:` mapping each CUDA version to its cuDNN list",
            hint=_MATRIX_HINT,
        )
    for cuda, cudnns in raw.items():
        if not isinstance(cudnns, list) or not cudnns:
            raise ConfigError(
                f"{path}: cuda.{cuda}: expected a non-empty list of cuDNN versions",
                hint=_MATRIX_HINT,
            )
    return {str(cuda): [str(c) for c in cudnns] for cuda, cudnns in raw.items()}


def _rules(path: Path, data: dict) -> list[tuple[dict, str]]:
    rules = []
    for i, rule in enumerate(data.get("exclude") or []):
        where = f"{path}: exclude[{i}]"
        if not isinstance(rule, dict) or not isinstance(rule.get("match"), dict):
            raise ConfigError(
                f"{where}: expected `match:` and `reason:`",
                hint=_MATRIX_HINT,
            )
        if not str(rule.get("reason") or "").strip():
            raise ConfigError(
                f"{where}: an exclude needs a `reason:`", hint="say why the cell cannot run"
            )
        unknown = sorted(set(rule["match"]) - set(AXES))
        if unknown:
            raise ConfigError(
                f"{where}.match.{unknown[0]}: unknown axis", hint=f"axes: {', '.join(AXES)}"
            )
        rules.append((rule["match"], str(rule["reason"]).strip()))
    return rules


def load_matrix(path: Path, versions: Path) -> Matrix:
    """Read the matrix; every exclude needs a reason, every included cell an image."""
    try:
        data = read_yaml_file(path)
    except OSError as exc:
        raise unreadable(path, exc, "the CI matrix of the project") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected `cuda:`, `frameworks:` and `exclude:`",
            hint=_MATRIX_HINT,
        )
    cudnn_per_cuda = _cudnn_per_cuda(path, data)
    frameworks = _frameworks(path, data)
    rules = _rules(path, data)
    combos: dict[tuple[str, str], Combination] = {
        (c.cuda, c.cudnn): c for c in load_combinations(versions)
    }
    cells = []
    for cuda, cudnns in cudnn_per_cuda.items():
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
    runner = tuple(str(label) for label in data.get("runner") or ["self-hosted", "gpu"])
    matrix = Matrix(path, runner, tuple(cells), data.get("ci_cell"))
    if matrix.ci_cell is not None:
        matrix.cell(matrix.ci_cell)  # an unknown or excluded ci_cell is an error here
    return matrix
