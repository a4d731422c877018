"""The exceptions opforge raises for anything a user can fix.

Each carries a one-line message, optional lines of detail below it (a failed command's last
output lines, a recipe's further problems) and an optional hint; the CLI prints them and exits
non-zero without a traceback. Anything that is not an ``OpforgeError`` is a bug in opforge.
"""

from __future__ import annotations

from collections.abc import Sequence


class OpforgeError(Exception):
    """A user-facing failure: ``message`` says what is wrong (one line), ``details`` are lines
    shown below it as they are (indented by their maker), ``hint`` says how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, details: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = tuple(details)

    def __str__(self) -> str:
        return "\n".join((self.message, *self.details))


class ConfigError(OpforgeError):
    """A project file (checksums.yaml, a recipe) is missing, unreadable or malformed."""


class PinError(OpforgeError):
    """A pin is unknown, or its download cannot be obtained."""


class DigestMismatch(PinError):
    """A downloaded or cached file does not hash to the digest its pin records."""


class OfflineMiss(PinError):
    """``--offline`` was asked for and the cache does not hold the file."""


class RecipeError(ConfigError):
    """A recipe fails validation: unknown key, wrong type, missing pin, bad dependency, cycle."""


class BuildError(OpforgeError):
    """A build step failed or a build could not be started."""


class ToolMissing(BuildError):
    """A tool a build needs (cmake, ninja, a compiler) is not on PATH."""


def unreadable(path: object, exc: OSError, what: str = "a project file") -> ConfigError:
    """The error for a file that cannot be read, with a hint fitting why (missing or not)."""
    if isinstance(exc, FileNotFoundError):
        hint = f"{path} is {what}: run from an opforge checkout, or pass --project DIR"
    else:
        hint = f"check that {path} is a file you can read (permissions)"
    return ConfigError(f"cannot read {path}: {exc.strerror}", hint=hint)
