"""``ci/matrix.yaml``: axes, exclude rules with reasons, and the cells they leave."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from opforge.errors import ConfigError
from opforge.images.spec import Combination, load_combinations
from opforge.yamlfile import parse_yaml

AXES = ("cuda", "cudnn", "framework")


@dataclass(frozen=True)
class Cell:
    """One point of the matrix, included or excluded (with the rule's reason)."""

    cuda: str
    cudnn: str
    framework: str
    excluded: str | None = None
    flavour: str = "pip"

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
    def targets(self) -> tuple[str, ...]:
        """The recipes this cell builds and tests."""
        adapter = {"torch": "torch-adapter", "mindspore": "mindspore-adapter"}[self.framework_name]
        return ("kernels", adapter)


@dataclass(frozen=True)
class Matrix:
    """The parsed matrix: runner labels and every cell."""

    path: Path
    runner: tuple[str, ...]
    cells: tuple[Cell, ...]

    @property
    def included(self) -> list[Cell]:
        """Cells the nightly runs."""
        return [c for c in self.cells if c.excluded is None]

    def cell(self, cell_id: str) -> Cell:
        """The cell called ``cell_id``; an unknown or excluded one is an error saying why."""
        for c in self.cells:
            if c.id == cell_id:
                if c.excluded:
                    raise ConfigError(f"cell {cell_id} is excluded: {c.excluded}")
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


def load_matrix(path: Path, versions: Path) -> Matrix:
    """Read the matrix; every exclude needs a reason, every included cell an image."""
    try:
        data = parse_yaml(path, path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if not isinstance(data, dict) or not isinstance(data.get("axes"), dict):
        raise ConfigError(f"{path}: expected `axes:` with {', '.join(AXES)}")
    axes = data["axes"]
    for axis in AXES:
        if not isinstance(axes.get(axis), list) or not axes[axis]:
            raise ConfigError(f"{path}: axes.{axis}: expected a non-empty list")
    rules = []
    for i, rule in enumerate(data.get("exclude") or []):
        where = f"{path}: exclude[{i}]"
        if not isinstance(rule, dict) or not isinstance(rule.get("match"), dict):
            raise ConfigError(f"{where}: expected `match:` and `reason:`")
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
    combos: dict[tuple[str, str], Combination] = {
        (c.cuda, c.cudnn): c for c in load_combinations(versions)
    }
    cells = []
    for cuda, cudnn, framework in itertools.product(*(map(str, axes[a]) for a in AXES)):
        values = {"cuda": cuda, "cudnn": cudnn, "framework": framework}
        reason = next((why for match, why in rules if _matches(match, values)), None)
        combo = combos.get((cuda, cudnn))
        if reason is None and combo is None:
            raise ConfigError(
                f"{path}: cell cuda {cuda} + cudnn {cudnn} + {framework} has no image in {versions}",
                hint="add the combination to images/versions.yaml or exclude the cell with a reason",
            )
        flavour = "pip" if combo is not None and combo.pip is not None else "ngc"
        cells.append(Cell(cuda, cudnn, framework, reason, flavour))
    runner = tuple(str(label) for label in data.get("runner") or ["self-hosted", "gpu"])
    return Matrix(path, runner, tuple(cells))
