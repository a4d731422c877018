"""``opforge doctor``: what this machine offers for building and testing, as one table."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from opforge.build.toolchain import NOT_THE_TOOL, TOOL_RULE, find_tool
from opforge.dockerengine import BadDockerHost, engine_version
from opforge.errors import ToolMissing
from opforge.proxies import DOWNLOAD_PROXY_NAMES, PROXY_NAMES, proxy_problem
from opforge.redact import mask_url
from opforge.report import printable
from opforge.settings import TOOL_VARIABLES, Settings, ca_bundle_problem


@dataclass(frozen=True)
class Check:
    """One row: what was checked, whether it is usable, and the detail (version, path, reason)."""

    name: str
    ok: bool
    detail: str


def _docker_engine(docker_host: str) -> Check:
    if importlib.util.find_spec("docker") is None:
        return Check("docker engine", False, "docker SDK not installed (pip install docker)")
    try:
        version = engine_version()
    except BadDockerHost as exc:
        return Check("docker engine", False, f"{exc.message}: {exc.hint}")
    except ToolMissing:
        return Check(
            "docker engine", False, f"not reachable at {docker_host} (is dockerd running?)"
        )
    return Check("docker engine", True, f"reachable, server {version}")


def site_packages() -> list[str]:
    """This interpreter's site-packages directories (where pip puts nvidia/* wheels)."""
    return [*site.getsitepackages(), site.getusersitepackages()]


# FindCUDNN.cmake's search, mirrored so that doctor names the cuDNN the build will link.
_CUDNN_INCLUDE_SUFFIXES = ("include", "include/x86_64-linux-gnu", "include/aarch64-linux-gnu")
_CUDNN_LIB_SUFFIXES = ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu")


def cudnn_search_roots(cudnn_root: Path | None) -> list[Path]:
    """Roots searched for cuDNN, in FindCUDNN.cmake's order: ``cudnn_root`` (CUDNN_ROOT),
    nvidia/cudnn in this Python's site-packages (pip wheels), the CUDA toolkit, /usr."""
    roots: list[Path] = []
    if cudnn_root:
        roots.append(cudnn_root)
    paths = sysconfig.get_paths()
    for packages in dict.fromkeys([paths["purelib"], paths["platlib"], *site_packages()]):
        roots.append(Path(packages) / "nvidia" / "cudnn")
    roots += [Path("/usr/local/cuda"), Path("/usr")]
    return list(dict.fromkeys(roots))


def _cudnn_header(root: Path) -> Path | None:
    for suffix in _CUDNN_INCLUDE_SUFFIXES:
        include = root / suffix
        if (include / "cudnn.h").is_file():
            return include / "cudnn.h"
        versioned = sorted(include.glob("cudnn_v[0-9]*.h"), reverse=True)
        if versioned:
            return versioned[0]
    return None


def _cudnn_library(root: Path) -> Path | None:
    for suffix in _CUDNN_LIB_SUFFIXES:
        found = sorted((root / suffix).glob("libcudnn.so*"))
        if found:
            return found[0]
    return None


_HEADER_BYTES = 1 << 20


def _cudnn_version(header: Path) -> str:
    """MAJOR.MINOR.PATCHLEVEL from cudnn_version.h beside the header (cuDNN 8 and 9), else from
    the header itself (cuDNN 7 and versioned-only layouts)."""
    for candidate in (header.parent / "cudnn_version.h", header):
        if candidate.is_file():
            # The defines sit near the top (cuDNN 7's cudnn.h: in its first few KB); a header
            # of any size is read only that far.
            try:
                with candidate.open("rb") as header_file:
                    text = header_file.read(_HEADER_BYTES).decode(errors="replace")
            except OSError:
                continue
            parts = [
                re.search(rf"#define CUDNN_{k}\s+(\d+)", text)
                for k in ("MAJOR", "MINOR", "PATCHLEVEL")
            ]
            if all(parts):
                return ".".join(m.group(1) for m in parts)
    return "unknown version"


def _cudnn(cudnn_root: Path | None) -> Check:
    roots = cudnn_search_roots(cudnn_root)
    for root in roots:
        header, library = _cudnn_header(root), _cudnn_library(root)
        if header and library:
            return Check("cuDNN", True, f"{_cudnn_version(header)} at {root}")
    searched = ", ".join(str(r) for r in roots)
    return Check(
        "cuDNN",
        False,
        f"not found (searched {searched}); `opforge pins install nvidia-cudnn-cu13` or set CUDNN_ROOT",
    )


def _gpu() -> Check:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Check("GPU", False, "none (nvidia-smi not found)")
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return Check("GPU", False, "nvidia-smi did not answer")
    lines = [line for line in out.stdout.splitlines() if line.startswith("GPU")]
    if out.returncode != 0 or not lines:
        return Check("GPU", False, "none visible to nvidia-smi")
    return Check("GPU", True, "; ".join(lines))


def _package(name: str) -> Check:
    try:
        return Check(name, True, importlib.metadata.version(name))
    except importlib.metadata.PackageNotFoundError:
        return Check(name, False, "not installed")


def numpy_for_mindspore(mindspore: str | None, numpy: str | None) -> Check:
    """MindSpore 2.x is built against NumPy 1.x: under NumPy 2 (which its metadata allows),
    ``Tensor * 2.5`` raises SystemError. A MindSpore environment needs ``numpy<2``."""
    if mindspore is None:
        return Check("numpy for MindSpore", True, "no MindSpore here")
    if numpy is None:
        return Check("numpy for MindSpore", False, "numpy missing: pip install 'numpy<2'")
    if int(numpy.split(".")[0]) >= 2:
        return Check(
            "numpy for MindSpore",
            False,
            f"numpy {numpy} with MindSpore {mindspore}, which is built against NumPy 1.x "
            "(Tensor * 2.5 raises SystemError): pip install 'numpy<2'",
        )
    return Check("numpy for MindSpore", True, f"numpy {numpy} (MindSpore needs <2)")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _tool(name: str, override: str | None) -> Check:
    """The tool a build will use, by the rule of ``opforge.build.toolchain``, and why that one."""
    tool = find_tool(name, override)
    if tool is None and override:
        # Set, so nothing else is looked for: say that this one does not run, as a build would.
        variable = TOOL_VARIABLES[name]
        return Check(
            name,
            False,
            f"${variable}={override!r} does not run as {name} ({NOT_THE_TOOL}); point "
            f"{variable} at the {name} to use, or unset it",
        )
    if tool is None:
        return Check(name, False, "not found (looked in: " + TOOL_RULE[name] + ")")
    return Check(name, True, f"{tool.version} ({tool.path}, from {tool.origin})")


def proxies_check(proxies: Mapping[str, str], conflicts: Sequence[str] = ()) -> Check:
    """The proxy variables in effect, passwords masked; one requests cannot use (a download
    through it would fail), or two spellings of one variable that disagree, make the row bad
    and say why."""
    found, ok = [], not conflicts
    for name in PROXY_NAMES:
        if name not in proxies:
            continue
        value = proxies[name]
        problem = proxy_problem(value) if name in DOWNLOAD_PROXY_NAMES else None
        found.append(f"{name}={mask_url(value)}" + (f" (unusable: {problem})" if problem else ""))
        ok = ok and problem is None
    found += [f"({conflict})" for conflict in conflicts]
    if not found:
        return Check("proxies", True, "none set (direct connections)")
    return Check("proxies", ok, " ".join(found))


def run_checks(settings: Settings) -> list[Check]:
    """Probe the machine; nothing here raises for a missing piece."""
    return [
        Check("python", True, f"{sys.version.split()[0]} ({sys.executable})"),
        _docker_engine(settings.docker_host),
        *(
            _tool(name, settings.tool_overrides.get(name))
            for name in ("cmake", "ninja", "c++", "nvcc")
        ),
        _cudnn(settings.cudnn_root),
        _gpu(),
        _package("torch"),
        _package("mindspore"),
        numpy_for_mindspore(_version("mindspore"), _version("numpy")),
        proxies_check(settings.proxies, settings.proxy_conflicts),
        _ca_bundle(settings.ca_bundle),
    ]


def _ca_bundle(path: str | None) -> Check:
    """The CA bundle downloads trust (settings.ca_bundle_problem says what is wrong with it)."""
    if path is None:
        return Check("CA bundle", True, "requests default (certifi)")
    problem = ca_bundle_problem(path)
    return Check("CA bundle", problem is None, problem or path)


def render_table(checks: list[Check]) -> str:
    """A plain-text table, one check per row."""
    width = max(len(c.name) for c in checks)
    rows = [f"{'check'.ljust(width)}  status  detail", f"{'-' * width}  ------  ------"]
    # A detail echoes the environment (a proxy, CUDNN_ROOT): its control characters as codes.
    rows += [
        f"{c.name.ljust(width)}  {'ok' if c.ok else '--':6}  {printable(c.detail)}" for c in checks
    ]
    return "\n".join(rows)
