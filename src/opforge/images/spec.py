"""What an image is: kind, flavour, CUDA x cuDNN and base, from ``images/versions.yaml``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from opforge.errors import ConfigError, unreadable
from opforge.frameworks import TORCH
from opforge.pins.model import PIN_NAME
from opforge.yamlfile import parse_yaml, read_yaml_file

KINDS = ("devel", "runtime")
# In the order a cell picks them: those that need no container registry first.
FLAVOURS = ("pip", "deb", "ngc")
# `{suite}` is the Debian suite the flavour needs (the pip flavour's wheels run on bookworm), so
# one BASE_IMAGE value (e.g. opforge-base:{suite}) serves every combination.
DEFAULT_BASE = "debian:{suite}-slim"
PIP_SUITE = "bookworm"
# The torch the images carry by default: the CPU adapter builds and tests against it.
DEFAULT_FRAMEWORKS = (TORCH,)
# `--framework none`: an image without a framework (the kernel library needs none).
NO_FRAMEWORK = "none"
# A Docker image reference without digest (name[:tag], the registry's host first if any), as
# Docker's reference grammar has it; the digest is recorded apart, in `digest:`.
_HOST = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REFERENCE = re.compile(
    rf"(?:{_HOST}(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::\w[\w.-]{{0,127}})?", re.ASCII
)
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# A base image may be pinned by digest in place (debian@sha256:...); {suite} is filled in first.
_BASE_IMAGE = re.compile(rf"{_IMAGE_REFERENCE.pattern}(?:@{_DIGEST.pattern})?", re.ASCII)
BASE_IMAGE_HINT = "give name[:tag] or name@sha256:<digest>, e.g. debian:{suite}-slim"
# A Debian toolkit's CUDA version and suite make its lock files' names (images/debian/<suite>-
# cuda<X>-<kind>.lock) and the suite fills the base image's tag: both are checked when read, so
# neither can lead out of images/debian nor make a reference Docker refuses at build time.
_CUDA_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*", re.ASCII)
_SUITE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*", re.ASCII)
# An apt `package=version` (Debian policy's names and versions): handed to apt-get as one
# argument each, where a leading '-' would be an option and a line break a new instruction.
_DEB_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]*(?:=[0-9][A-Za-z0-9.+~:-]*)?", re.ASCII)
_COMBINATION_KEYS = {"cuda", "cudnn", *FLAVOURS, *(f"{f}_reason" for f in FLAVOURS)}


@dataclass(frozen=True)
class NgcImage:
    """An nvidia/cuda image and its recorded digest (None: not pinned yet)."""

    image: str
    digest: str | None


@dataclass(frozen=True)
class DebianToolkit:
    """A CUDA toolkit from Debian's archive: its suite and the packages asked for per kind.

    Everything apt adds for them is fixed, with versions and sha256, by the kind's lock file.
    """

    cuda: str
    suite: str
    packages: dict[str, tuple[str, ...]]

    def lock_path(self, images_dir: Path, kind: str) -> Path:
        """``images/debian/<suite>-cuda<X>-<kind>.lock``."""
        return images_dir / "debian" / f"{self.suite}-cuda{self.cuda}-{kind}.lock"


@dataclass(frozen=True)
class Combination:
    """One CUDA x cuDNN pair and how each flavour provides it (or why it cannot)."""

    cuda: str
    cudnn: str
    ngc: dict[str, NgcImage] | None
    pip: dict[str, tuple[str, ...]] | None
    deb: dict[str, tuple[str, ...]] | None = None
    debian: DebianToolkit | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def pip_reason(self) -> str | None:
        """Why the pip flavour cannot make this combination (None when it can)."""
        return self.reasons.get("pip")

    def flavours(self) -> list[str]:
        """The flavours that provide this combination, registry-free ones first."""
        return [f for f in FLAVOURS if getattr(self, f) is not None]

    def wheel_pins(self, flavour: str, kind: str) -> tuple[str, ...]:
        """The pinned wheels (checksums.yaml names) ``flavour`` installs into a ``kind`` image."""
        wheels = {"pip": self.pip, "deb": self.deb, "ngc": None}[flavour]
        if flavour != "ngc" and wheels is None:
            raise self.missing(flavour)
        return wheels[kind] if wheels else ()

    def missing(self, flavour: str) -> ConfigError:
        """The error for asking this combination of a flavour it lacks."""
        offered = self.flavours()
        return ConfigError(
            f"cuda {self.cuda} + cudnn {self.cudnn} has no {flavour} flavour: "
            f"{self.reasons.get(flavour, 'not in images/versions.yaml')}",
            hint=f"use --flavour {offered[0]}"
            if offered
            else "add a flavour in images/versions.yaml",
        )


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
    extra_ca_from: str = "--extra-ca"  # where extra_ca came from, for its errors
    find_links: tuple[Path, ...] = field(default=())

    @property
    def name(self) -> str:
        """A readable name: ``devel pip cuda13.0 cudnn9.13``."""
        return (
            f"{self.kind} {self.flavour} cuda{self.combination.cuda} cudnn{self.combination.cudnn}"
        )


def base_image_problem(text: str) -> str | None:
    """Why ``text`` cannot be a base image (``{suite}`` standing for a Debian suite), or None:
    it goes into a Dockerfile's ``FROM``, where a line break would add instructions."""
    if not text.strip():
        return "is empty"
    if not _BASE_IMAGE.fullmatch(text.replace("{suite}", PIP_SUITE)):
        return "is not an image reference"
    return None


def fill_base(base_image: str | None, suite: str) -> str:
    """``base_image`` (or the default) with ``{suite}`` filled; one that is no image reference
    (``$BASE_IMAGE`` is not checked before) is refused."""
    problem = None if base_image is None else base_image_problem(base_image)
    if problem:
        raise ConfigError(
            f"base image {base_image!r} {problem}",
            hint=f"fix $BASE_IMAGE (or --base-image): {BASE_IMAGE_HINT}",
        )
    return (base_image or DEFAULT_BASE).replace("{suite}", suite)


def base_for(flavour: str, combination: Combination, base_image: str | None) -> str:
    """The base image for a flavour: ``base_image`` (or the default) with ``{suite}`` filled."""
    if flavour == "deb":
        if combination.debian is None:
            raise combination.missing("deb")
        suite = combination.debian.suite
    else:
        suite = PIP_SUITE
    return fill_base(base_image, suite)


def _ngc_image(where: str, raw: dict) -> NgcImage:
    """One ``ngc.<kind>`` entry, its reference and digest checked: both go into a Dockerfile's
    ``FROM``, where a line break would add instructions of its own."""
    image, digest = raw["image"], raw.get("digest")
    if not isinstance(image, str) or not _IMAGE_REFERENCE.fullmatch(image):
        raise ConfigError(
            f"{where}.image: {image!r} is not an image reference",
            hint="give name[:tag], e.g. nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04 (the digest "
            "goes in `digest:`)",
        )
    if digest is not None and (not isinstance(digest, str) or not _DIGEST.fullmatch(digest)):
        raise ConfigError(
            f"{where}.digest: {digest!r} is not a sha256 digest",
            hint="give sha256: and 64 lowercase hex digits, or null until `opforge images lock` "
            "records it",
        )
    return NgcImage(image, digest)


def _wheels(where: str, raw: dict, key: str) -> dict[str, tuple[str, ...]] | None:
    value = raw.get(key)
    if value is None:
        return None
    wheels = {kind: tuple(value[kind]) for kind in KINDS}
    for kind, names in wheels.items():
        bad = next((n for n in names if not isinstance(n, str) or not PIN_NAME.fullmatch(n)), None)
        if bad is not None or not names:
            raise ConfigError(
                f"{where}.{key}.{kind}: {bad!r} is not a pin name"
                if names
                else f"{where}.{key}.{kind}: expected the names of pinned wheels",
                hint="list pins of checksums.yaml (`opforge pins list`)",
            )
    return wheels


def _toolkits(path: Path, data: dict) -> dict[str, DebianToolkit]:
    toolkits = {}
    for cuda, raw in (data.get("debian") or {}).items():
        where = f"{path}: debian.{cuda}"
        if not _CUDA_VERSION.fullmatch(str(cuda)):
            raise ConfigError(
                f"{path}: debian: {str(cuda)!r} is not a CUDA version",
                hint='key each Debian toolkit by its CUDA version, e.g. "12.4"',
            )
        try:
            packages = {kind: tuple(raw[kind]) for kind in KINDS}
            suite = raw["suite"]
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"{where}: missing or malformed {exc}",
                hint="each Debian toolkit has suite, devel and runtime (apt package=version lists)",
            ) from None
        if not isinstance(suite, str) or not _SUITE.fullmatch(suite):
            raise ConfigError(
                f"{where}.suite: {suite!r} is not a Debian suite name",
                hint="give the suite's name in lowercase letters, digits and hyphens, "
                "e.g. bookworm or trixie",
            )
        for kind, names in packages.items():
            bad = next(
                (n for n in names if not isinstance(n, str) or not _DEB_PACKAGE.fullmatch(n)), None
            )
            if bad is not None or not names:
                raise ConfigError(
                    f"{where}.{kind}: {bad!r} is not an apt package=version"
                    if names
                    else f"{where}.{kind}: expected apt package=version entries",
                    hint='give Debian package names, each optionally with "=version", e.g. '
                    '"libcudart12=12.4.127~12.4.1-2"',
                )
        toolkits[str(cuda)] = DebianToolkit(str(cuda), suite, packages)
    return toolkits


def _check_combination(where: str, raw: object) -> None:
    """Refuse an entry with a key no flavour has, or a CUDA or cuDNN version that is not one:
    both go into image tags and the CI matrix's cell names."""
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where}: expected a mapping with cuda, cudnn and the flavours",
            hint="images/README.md describes the file",
        )
    unknown = sorted(str(k) for k in raw if k not in _COMBINATION_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown key",
            hint=f"an entry has {', '.join(sorted(_COMBINATION_KEYS))}",
        )
    for key in ("cuda", "cudnn"):
        value = raw.get(key)
        if value is not None and (
            not isinstance(value, (str, int, float))
            or isinstance(value, bool)
            or not _CUDA_VERSION.fullmatch(str(value))
        ):
            raise ConfigError(
                f"{where}.{key}: {value!r} is not a version",
                hint=f'write it as digits and dots in quotes, e.g. {key}: "13.0"',
            )


def load_combinations(path: Path, text: str | None = None) -> list[Combination]:
    """Read ``images/versions.yaml``, or parse its ``text`` already read (a caller editing the
    file then edits what it parsed); errors name the file and the entry."""
    try:
        data = read_yaml_file(path) if text is None else parse_yaml(path, text)
    except OSError as exc:
        raise unreadable(path, exc, "the image versions of the project") from None
    entries = data.get("combinations") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(
            f"{path}: expected a non-empty `combinations:` list",
            hint="images/README.md describes the file; compare with the one in the repository",
        )
    toolkits = _toolkits(path, data)
    combos = []
    seen: dict[tuple[str, str], int] = {}
    for i, raw in enumerate(entries):
        where = f"{path}: combinations[{i}]"
        _check_combination(where, raw)
        try:
            cuda = str(raw["cuda"])
            ngc = raw.get("ngc")
            if ngc is not None:
                ngc = {kind: _ngc_image(f"{where}.ngc.{kind}", ngc[kind]) for kind in KINDS}
            reasons = {f: str(raw[f"{f}_reason"]) for f in FLAVOURS if raw.get(f"{f}_reason")}
            combo = Combination(
                cuda,
                str(raw["cudnn"]),
                ngc,
                _wheels(where, raw, "pip"),
                _wheels(where, raw, "deb"),
                toolkits.get(cuda) if raw.get("deb") is not None else None,
                reasons,
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"{where}: missing or malformed {exc}",
                hint="each entry has cuda, cudnn and, per flavour (pip, deb, ngc), its wheels or "
                "images or a `<flavour>_reason`",
            ) from None
        for flavour in FLAVOURS:
            if getattr(combo, flavour) is None and flavour not in reasons:
                raise ConfigError(
                    f"{where}: `{flavour}: null` needs a `{flavour}_reason`",
                    hint="say why this flavour cannot make the combination",
                )
        if combo.deb is not None and combo.debian is None:
            raise ConfigError(
                f"{where}: a deb flavour needs the Debian toolkit `debian.{cuda}`",
                hint="add its suite and packages under `debian:`",
            )
        first = seen.setdefault((combo.cuda, combo.cudnn), i)
        if first != i:
            raise ConfigError(
                f"{where}: cuda {combo.cuda} + cudnn {combo.cudnn} is combinations[{first}] again",
                hint="give each CUDA x cuDNN pair once",
            )
        combos.append(combo)
    return combos


def refuse_empty(flag: str, value: str | None) -> None:
    """Refuse an empty version flag (``--cuda ''``): it names no version, and leaving the flag
    out is how the default is asked for."""
    if value is not None and not value.strip():
        raise ConfigError(
            f"{flag} {value!r} is empty",
            hint=f"give a version from images/versions.yaml (`opforge images list`), "
            f"or leave {flag} out for the default",
        )


def find_combination(combos: list[Combination], cuda: str | None, cudnn: str | None) -> Combination:
    """The entry for ``cuda``/``cudnn`` (the first entry when both are None)."""
    refuse_empty("--cuda", cuda)
    refuse_empty("--cudnn", cudnn)
    for combo in combos:
        if (cuda is None or combo.cuda == cuda) and (cudnn is None or combo.cudnn == cudnn):
            return combo
    known = ", ".join(f"cuda {c.cuda} + cudnn {c.cudnn}" for c in combos)
    raise ConfigError(
        f"no image combination for cuda {cuda or 'any'} + cudnn {cudnn or 'any'}",
        hint=f"known in images/versions.yaml: {known}",
    )
