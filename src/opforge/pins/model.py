"""The pins file (``checksums.yaml``): every external input, by URL and digest."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from opforge.errors import ConfigError, PinError
from opforge.hosts import host_name_problem
from opforge.requirements import has_control_character
from opforge.yamlfile import read_yaml_file

# A pin's name reaches file names, CMake variables and log lines: letters, digits, '.', '_', '-'.
# Matched whole (fullmatch): `$` would also match before a final newline.
PIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_PIN_KEYS = {"url", "urls", "sha256", "md5", "size", "index", "description"}
# A recorded size bounds a download and is shown in listings; no pinned file comes near a TiB,
# and a larger number is a typo (YAML reads 1e30 as a float, 10**30 as an int).
MAX_PIN_SIZE = 1 << 40


@dataclass(frozen=True)
class Pin:
    """One external input: where to get it and the digests it must have."""

    name: str
    urls: tuple[str, ...]
    sha256: str
    md5: str | None = None
    size: int | None = None
    index: str | None = None
    description: str | None = None

    @property
    def filename(self) -> str:
        """The file's own name, from its first URL (fragment and query dropped), reduced to a
        plain base name; the pin's name where the URL gives none that is safe to write."""
        return safe_basename(urlsplit(self.urls[0]).path) or self.name

    def with_digests(self, sha256: str, md5: str | None, size: int | None) -> Pin:
        """A copy of this pin recording other digests (used by ``pins update``)."""
        return Pin(self.name, self.urls, sha256, md5, size, self.index, self.description)


def safe_basename(url_path: str) -> str | None:
    """The last component of a URL path, decoded, if it is usable as a file name in a directory.

    Decoding can reveal separators (``..%2F..%2Fx``), so the decoded name is split again; ``.``,
    ``..``, hidden names, control characters and over-long names give ``None``.
    """
    name = re.split(r"[/\\]", unquote(url_path))[-1]
    if not name or name.startswith(".") or len(name.encode()) > 255:
        return None
    if has_control_character(name):
        return None
    return name


@dataclass(frozen=True)
class PinSet:
    """All pins of one ``checksums.yaml``, in file order."""

    path: Path
    pins: dict[str, Pin]

    def select(self, names: list[str] | None) -> list[Pin]:
        """The pins named (all when ``names`` is empty), raising on any unknown name."""
        if not names:
            return list(self.pins.values())
        unknown = [n for n in names if n not in self.pins]
        if unknown:
            known = ", ".join(self.pins) or "(none)"
            raise PinError(
                f"unknown pin {', '.join(repr(n) for n in unknown)} in {self.path}",
                hint=f"known pins: {known}",
            )
        return [self.pins[n] for n in names]


# Unicode's format, control, private-use, surrogate, unassigned and line/paragraph separators.
_UNPRINTED = frozenset({"Cf", "Cc", "Co", "Cs", "Cn", "Zl", "Zp"})


def url_problem(url: object) -> str | None:
    """Why ``url`` is not a usable http(s) URL, or None. URLs reach log lines and requests:
    whitespace and control characters (a YAML escape can put a newline or an ANSI sequence in
    one) are refused, and so is anything urllib cannot split (``http://[abc/``, port 99999)."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return "not an http:// or https:// URL"
    if has_control_character(url) or any(c.isspace() for c in url):
        return "whitespace or a control character in the URL (percent-encode it)"
    # Bidi overrides (U+202E), zero-width and other unprinted characters change how the URL
    # reads in a review or a log line without changing what is fetched.
    hidden = next((c for c in url if unicodedata.category(c) in _UNPRINTED), None)
    if hidden is not None:
        return (
            f"an invisible or formatting character (U+{ord(hidden):04X}) in the URL "
            "(percent-encode it)"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if not parts.hostname:
        return "no host in the URL"
    problem = host_name_problem(parts.hostname)
    return None if problem is None else f"host {parts.hostname!r} {problem}"


def _where(path: Path, *keys: str) -> str:
    return f"{path}: " + ".".join(keys)


def _parse_pin(path: Path, name: str, raw: object, unpinned_ok: bool, replacing: bool) -> Pin:
    if not PIN_NAME.fullmatch(name):
        raise ConfigError(
            f"{_where(path, 'pins')}: {name!r}: not a valid pin name",
            hint="a pin name is up to 100 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
        )
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{_where(path, 'pins', name)}: expected a mapping with url and sha256, "
            f"got {type(raw).__name__}",
            hint="write the pin as `NAME: {url: ..., sha256: ...}`",
        )
    # key=str: YAML keys may be numbers or booleans beside text, which do not compare.
    unknown = sorted(set(raw) - _PIN_KEYS, key=str)
    if unknown:
        raise ConfigError(
            f"{_where(path, 'pins', name, str(unknown[0]))}: unknown key",
            hint=f"a pin takes only {', '.join(sorted(_PIN_KEYS))}",
        )
    if ("url" in raw) == ("urls" in raw):
        raise ConfigError(
            f"{_where(path, 'pins', name)}: give exactly one of url or urls",
            hint="use `url:` for one location, `urls:` for a list of mirrors tried in order",
        )
    urls = [raw["url"]] if "url" in raw else raw["urls"]
    key = "url" if "url" in raw else "urls"
    if not isinstance(urls, list) or not urls:
        raise ConfigError(
            f"{_where(path, 'pins', name, key)}: expected http(s) URL(s), got {raw[key]!r}",
            hint="write full http:// or https:// URLs",
        )
    for url in urls:
        if problem := url_problem(url):
            raise ConfigError(
                f"{_where(path, 'pins', name, key)}: expected http(s) URL(s), got {url!r}: "
                f"{problem}",
                hint="write full http:// or https:// URLs",
            )
    sha256 = raw.get("sha256")
    md5 = raw.get("md5")
    if replacing:
        # `pins update` is about to record both as served: a malformed value must not stop the
        # very command its error points to. A recorded md5 stays recorded (it is rewritten too).
        # Only a list or mapping cannot be rewritten in place.
        for key, value in (("sha256", sha256), ("md5", md5)):
            if isinstance(value, (list, dict)):
                raise ConfigError(
                    f"{_where(path, 'pins', name, key)}: expected a digest, got {value!r}",
                    hint=f'write `{key}: ""` in its place; `opforge pins update {name}` then '
                    "records the digest of the file as served",
                )
        sha256 = sha256 if isinstance(sha256, str) and _HEX64.fullmatch(sha256) else ""
        if md5 is not None and not (isinstance(md5, str) and _HEX32.fullmatch(md5)):
            md5 = ""
    else:
        if unpinned_ok and sha256 in (None, ""):
            sha256 = ""
        elif not isinstance(sha256, str) or not _HEX64.fullmatch(sha256):
            raise ConfigError(
                f"{_where(path, 'pins', name, 'sha256')}: expected 64 lowercase hex digits, "
                f"got {sha256!r}",
                hint=f"run `opforge pins update {name}` to record the digest of the file as served",
            )
        if md5 is not None and (not isinstance(md5, str) or not _HEX32.fullmatch(md5)):
            raise ConfigError(
                f"{_where(path, 'pins', name, 'md5')}: expected 32 lowercase hex digits, "
                f"got {md5!r}",
                hint="md5 is an optional legacy digest; fix it or remove the key",
            )
    size = raw.get("size")
    if size is not None and (
        not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_PIN_SIZE
    ):
        shown = repr(size) if len(repr(size)) <= 40 else f"{repr(size)[:37]}..."
        raise ConfigError(
            f"{_where(path, 'pins', name, 'size')}: expected a byte count up to 2**40 (1 TiB), "
            f"got {shown}",
            hint="size is optional; fix it or remove the key",
        )
    index = raw.get("index")
    if index is not None and (problem := url_problem(index)):
        raise ConfigError(
            f"{_where(path, 'pins', name, 'index')}: expected the URL of a simple package index, "
            f"got {index!r}: {problem}",
            hint="e.g. index: https://pypi.org/simple",
        )
    description = raw.get("description")
    if description is not None and not isinstance(description, str):
        raise ConfigError(
            f"{_where(path, 'pins', name, 'description')}: expected text",
            hint="quote the description, or remove the key",
        )
    return Pin(name, tuple(urls), sha256, md5, size, index, description)


def load_pins(path: Path, *, updating: str | None = None) -> PinSet:
    """Read and validate a pins file; every problem names the file and the key.

    With ``updating`` (the pin ``pins update`` re-records), any pin may leave ``sha256`` empty
    (a new pin awaiting its own update), and the pin named may hold any ``sha256`` or ``md5``
    value at all, since both are about to be replaced; every other check still applies.
    """
    try:
        data = read_yaml_file(path)
    except FileNotFoundError:
        raise ConfigError(
            f"pins file {path} does not exist",
            hint="pass --pins FILE, or run from the project root that holds checksums.yaml",
        ) from None
    if not isinstance(data, dict) or "pins" not in data:
        raise ConfigError(
            f"{path}: expected a top-level `pins:` mapping",
            hint="start the file with `pins:` followed by one entry per input",
        )
    extra = sorted(set(data) - {"pins"}, key=str)
    if extra:
        raise ConfigError(
            f"{path}: {extra[0]}: unknown top-level key", hint="only `pins:` is allowed"
        )
    raw_pins = data["pins"] or {}
    if not isinstance(raw_pins, dict):
        raise ConfigError(
            f"{path}: pins: expected a mapping of name -> pin",
            hint="write each pin as `NAME: {url: ..., sha256: ...}` under `pins:`",
        )
    pins = {}
    for name, raw in raw_pins.items():
        if not isinstance(name, str):
            raise ConfigError(
                f"{_where(path, 'pins')}: {name!r}: a pin name must be text",
                hint="quote the name if YAML reads it as a number or a boolean",
            )
        pins[name] = _parse_pin(path, name, raw, updating is not None, name == updating)
    return PinSet(path, pins)


def refuse_shared_file_names(pins: Sequence[Pin], where: str, hint: str) -> None:
    """``PinError`` naming the first two pins whose files have one name: placed side by side
    ``where`` ("placed in DIR", "given to pip"), one would take the other's place."""
    first: dict[str, str] = {}
    for pin in pins:
        other = first.setdefault(pin.filename, pin.name)
        if other != pin.name:
            raise PinError(
                f"pins {other} and {pin.name} would both be {where} as {pin.filename}", hint=hint
            )
