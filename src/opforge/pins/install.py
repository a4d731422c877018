"""``pins install``: pip-install pinned wheels, verified by sha256, into this interpreter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from opforge.errors import PinError
from opforge.pins.fetch import Fetcher
from opforge.pins.model import Pin, refuse_shared_file_names
from opforge.pip import pip_install


def install_wheels(pins: Sequence[Pin], fetcher: Fetcher, target: Path | None = None) -> list[str]:
    """Fetch (verified), then ``pip install --no-deps`` the wheels; returns their file names.

    ``--no-deps``: every wheel the environment needs is pinned on its own, so pip resolves
    nothing and cannot pick an unpinned release (a free nvidia-nvvm once broke ptxas).
    """
    not_wheels = [pin.name for pin in pins if not pin.filename.endswith(".whl")]
    if not_wheels:
        raise PinError(
            f"pin {not_wheels[0]} is not a wheel",
            hint="pins install takes wheel pins only; use `pins fetch --dest DIR` for other files",
        )
    pins = list({pin.name: pin for pin in pins}.values())  # a name given twice: once
    refuse_shared_file_names(
        pins, "given to pip", "install them one at a time, or fix the URL of one in the pins file"
    )
    fetcher.fetch_many(pins)
    with fetcher.cache.wheel_links(pins) as files:
        pip_install(files, ", ".join(pin.name for pin in pins), target)
    return [f.name for f in files]
