"""Which CMake cache options a recipe may set.

opforge passes some defines itself (the install prefix, the tools it found, the pinned files'
paths); a recipe option of the same name would override them, e.g. install outside the project
with ``CMAKE_INSTALL_PREFIX: /elsewhere``. Those names are reserved. An option's key must also
be a plain CMake variable name: it becomes ``-D<key>=<value>``, so ``-DX`` or ``X=Y`` or a
``:TYPE`` suffix would change what the define says. A value must be one line: CMake stores it
in ``CMakeCache.txt``, one entry a line, and a line break there leaves a cache the next configure
cannot parse.
"""

from __future__ import annotations

import re

from opforge.requirements import has_control_character

# The defines opforge.build.cmake passes to every configure, and why each is opforge's own.
RESERVED_DEFINES: dict[str, str] = {
    "CMAKE_INSTALL_PREFIX": "opforge installs every target into dist/<profile>",
    "CMAKE_PREFIX_PATH": "opforge points it at dist/<profile> so targets find their dependencies",
    "CMAKE_MAKE_PROGRAM": "opforge passes the ninja it found (see `opforge doctor`)",
    "CMAKE_CXX_COMPILER": "opforge passes the C++ compiler it found (see `opforge doctor`)",
    "CMAKE_CUDA_COMPILER": "opforge passes the nvcc it found (see `opforge doctor`)",
    "Python3_EXECUTABLE": "opforge passes the interpreter running it",
}
# Prefix of the defines through which pinned files' cached paths reach a build.
RESERVED_PREFIX = "OPFORGE_PIN_"

_CMAKE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def value_problem(value: object) -> str | None:
    """Why ``value`` cannot be a CMake option's value (None when it can be): a line break of any
    kind or a control character (a NUL could not even be passed as an argument)."""
    if isinstance(value, str) and (
        value.splitlines() not in ([value], []) or has_control_character(value)
    ):
        return f"value {value!r} contains a line break or control character"
    return None


def option_problem(key: str, value: object = "") -> tuple[str, str] | None:
    """Why ``key: value`` cannot be a recipe's CMake option, and what to do (None when it can
    be)."""
    if not _CMAKE_NAME.fullmatch(key):
        return (
            f"{key!r} is not a plain CMake variable name (letters, digits and '_'; "
            "no '-D', '=', ':TYPE' or spaces)",
            "write the bare variable name as the key, e.g. `CMAKE_BUILD_TYPE: Release`",
        )
    if key in RESERVED_DEFINES:
        why = RESERVED_DEFINES[key]
    elif key.startswith(RESERVED_PREFIX):
        why = f"{RESERVED_PREFIX}* carry the pinned files' cached paths"
    else:
        problem = value_problem(value)
        if problem is None:
            return None
        return problem, "write the value on one line, without control characters"
    return (
        f"{key} is set by opforge and may not be overridden ({why})",
        "remove the option from the recipe",
    )
