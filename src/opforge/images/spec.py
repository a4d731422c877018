"""What an image is: kind, flavour, CUDA x cuDNN and base, from ``images/versions.yaml``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from opforge.errors import ConfigError
from opforge.yamlfile import parse_yaml

KINDS = ("devel", "runtime")
FLAVOURS = ("pip", "ngc")
DEFAULT_BASE = "debian:bookworm-slim"
# The torch the images carry by default: the CPU adapter builds and tests against it.
DEFAULT_FRAMEWORKS = ("torch==2.13.0",)


@dataclass(frozen=True)
class NgcImage:
    """An nvidia/cuda image and its recorded digest (None: not pinned yet)."""

    image: str
    digest: str | None


@dataclass(frozen=True)
class Combination:
    """One CUDA x cuDNN pair and how each flavour provides it."""

    cuda: str
    cudnn: str
    ngc: dict[str, NgcImage]
    pip: dict[str, tuple[str, ...]] | None
    pip_reason: str | None = None


@dataclass(frozen=True)
class ImageSpec:
    """Everything that decides an image's content (and so its tag)."""

    kind: str
    flavour: str
    combination: Combination
    base_image: str
    frameworks: tuple[str, ...] = DEFAULT_FRAMEWORKS
    keep_ca: bool = False
    extra_ca: Path | None = None
    find_links: tuple[Path, ...] = field(default=())

    @property
    def name(self) -> str:
        """A readable name: ``devel pip cuda13.0 cudnn9.13``."""
        return (
            f"{self.kind} {self.flavour} cuda{self.combination.cuda} cudnn{self.combination.cudnn}"
        )


def load_combinations(path: Path) -> list[Combination]:
    """Read ``images/versions.yaml``; errors name the file and the entry."""
    try:
        data = parse_yaml(path, path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    entries = data.get("combinations") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected a non-empty `combinations:` list")
    combos = []
    for i, raw in enumerate(entries):
        where = f"{path}: combinations[{i}]"
        try:
            ngc = {
                kind: NgcImage(str(raw["ngc"][kind]["image"]), raw["ngc"][kind].get("digest"))
                for kind in KINDS
            }
            pip = raw.get("pip")
            if pip is not None:
                pip = {kind: tuple(pip[kind]) for kind in KINDS}
            elif not raw.get("pip_reason"):
                raise ConfigError(f"{where}: `pip: null` needs a `pip_reason`")
            combos.append(
                Combination(str(raw["cuda"]), str(raw["cudnn"]), ngc, pip, raw.get("pip_reason"))
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"{where}: missing or malformed {exc}",
                hint="each entry has cuda, cudnn, ngc.devel/runtime.image and pip (or pip_reason)",
            ) from None
    return combos


def find_combination(combos: list[Combination], cuda: str | None, cudnn: str | None) -> Combination:
    """The entry for ``cuda``/``cudnn`` (the first entry when both are None)."""
    for combo in combos:
        if (cuda is None or combo.cuda == cuda) and (cudnn is None or combo.cudnn == cudnn):
            return combo
    known = ", ".join(f"cuda {c.cuda} + cudnn {c.cudnn}" for c in combos)
    raise ConfigError(
        f"no image combination for cuda {cuda or 'any'} + cudnn {cudnn or 'any'}",
        hint=f"known in images/versions.yaml: {known}",
    )
