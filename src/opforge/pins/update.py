"""``pins update``: record the digest of a pin's file as currently served."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from opforge.errors import DigestMismatch, PinError
from opforge.pins.digest import hash_file
from opforge.pins.fetch import Fetcher
from opforge.pins.index import index_for, published_sha256
from opforge.pins.model import Pin, load_pins
from opforge.pins.rewrite import require_writable_pins, rewrite_pin
from opforge.redact import mask_credentials


@dataclass(frozen=True)
class PinUpdate:
    """The pin before and after, and the index that confirmed the digest (if any)."""

    old: Pin
    new: Pin
    confirmed_by: str | None

    @property
    def changed(self) -> bool:
        """True when any recorded digest differs."""
        return (self.old.sha256, self.old.md5, self.old.size) != (
            self.new.sha256,
            self.new.md5,
            self.new.size,
        )


def update_pin(pins_path: Path, name: str, fetcher: Fetcher) -> PinUpdate:
    """Download pin ``name``, check it against its package index, and rewrite its digests.

    Only the pin's ``sha256`` (and ``md5``/``size`` where the pin records them) change in the
    file; nothing is written when the index disagrees with what was downloaded.
    """
    old = load_pins(pins_path, updating=name).select([name])[0]
    require_writable_pins(pins_path)  # before the download, which may be large
    url, temp = fetcher.download(old)
    try:
        algorithms = ("sha256", "md5") if old.md5 is not None else ("sha256",)
        digests = hash_file(temp, algorithms)
        size = temp.stat().st_size
        _check_mirrors_agree(old, url, digests["sha256"], fetcher)
        index = index_for(old)
        if index is not None:
            listed = published_sha256(old, index, fetcher)
            if listed != digests["sha256"]:
                raise DigestMismatch(
                    mask_credentials(
                        f"pin {name}: {url} served a file with sha256 {digests['sha256']}, "
                        f"but the index {index} lists {listed}"
                    ),
                    hint="the download was altered on the way (proxy, mirror); the pin was "
                    "left unchanged",
                )
        new = old.with_digests(
            digests["sha256"],
            digests.get("md5"),
            size if old.size is not None else None,
        )
        changes: dict[str, str | int] = {"sha256": new.sha256}
        if new.md5 is not None:
            changes["md5"] = new.md5
        if new.size is not None:
            changes["size"] = new.size
        rewrite_pin(pins_path, name, changes)
        fetcher.cache.commit(temp, new)
        return PinUpdate(old, new, index)
    finally:
        temp.unlink(missing_ok=True)


def _check_mirrors_agree(pin: Pin, served_by: str, sha256: str, fetcher: Fetcher) -> None:
    """Raise when a later URL of ``pin`` serves a file other than ``served_by``'s: a fetch
    takes any URL whose file matches, so the digest recorded must be every mirror's. A mirror
    that serves nothing is passed over, as a fetch passes over it."""
    for url in pin.urls[pin.urls.index(served_by) + 1 :]:
        try:
            _, temp = fetcher.download(replace(pin, urls=(url,)))
        except PinError as exc:
            fetcher.log(f"{pin.name}: {url} was not compared: {exc}")
            continue
        try:
            other = hash_file(temp, ("sha256",))["sha256"]
        finally:
            temp.unlink(missing_ok=True)
        if other != sha256:
            raise DigestMismatch(
                mask_credentials(
                    f"pin {pin.name}: the mirrors serve different files: {served_by} sha256 "
                    f"{sha256}, {url} sha256 {other}"
                ),
                hint="find which mirror is wrong and remove it from `urls:`; the pin was left "
                "unchanged",
            )
