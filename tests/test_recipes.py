"""Recipe validation: every malformation is an error naming the file and the key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from opforge.build.cmake import cmake_steps
from opforge.build.toolchain import Tool
from opforge.errors import RecipeError
from opforge.pins.model import load_pins
from opforge.project import Project
from opforge.recipes.generators import generator_files
from opforge.recipes.model import CMakeSpec, Profile, Recipe
from opforge.recipes.options import option_problem
from opforge.recipes.schema import REMOVED_KEYS
from tests.conftest import REPO, run_opforge

GOOD = "b" * 64

BASE = """\
name: {name}
schema: 1
sources: ["src/{name}/**/*"]
cmake:
  source_dir: src/{name}
profiles:
  cpu: {{}}
outputs: [lib/lib{name}.so]
"""


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A minimal project: one pin, one valid recipe ``alpha`` with a CMake source dir."""
    (tmp_path / "checksums.yaml").write_text(
        f"pins:\n  tool:\n    url: http://h/t\n    sha256: {GOOD}\n"
    )
    (tmp_path / "recipes").mkdir()
    for name in ("alpha", "beta"):
        (tmp_path / "src" / name).mkdir(parents=True)
        (tmp_path / "src" / name / "CMakeLists.txt").write_text("project(x)\n")
    (tmp_path / "recipes" / "alpha.yaml").write_text(BASE.format(name="alpha"))
    return Project(tmp_path, tmp_path / "checksums.yaml")


def _load(project: Project):
    return project.load_recipes(load_pins(project.pins_path))


def _write(project: Project, name: str, text: str) -> Path:
    path = project.recipes_dir / f"{name}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_recipe_linked_in_from_outside_the_project_is_refused(project, tmp_path_factory):
    # Sources and source_dir linking out were refused; the recipe itself was not.
    outside = tmp_path_factory.mktemp("elsewhere") / "beta.yaml"
    outside.write_text(BASE.format(name="beta"))
    link = project.recipes_dir / "beta.yaml"
    link.symlink_to(outside)
    with pytest.raises(RecipeError) as info:
        _load(project)
    assert str(info.value).startswith(f"{link}: a link out of the project, to {outside}")
    link.unlink()
    (project.recipes_dir / "beta.yaml").symlink_to(project.recipes_dir / "alpha.yaml")
    assert list(_load(project).recipes) == ["alpha"], "a link inside is the file it names, once"


def test_valid_project_loads(project):
    assert list(_load(project).recipes) == ["alpha"]


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        (lambda t: t + "colour: red\n", "colour", "unknown key"),
        (
            lambda t: t.replace("  source_dir:", "  sourcedir: x\n  source_dir:"),
            "cmake.sourcedir",
            "unknown key",
        ),
        (lambda t: t.replace("  cpu: {}", "  cpu: {opts: {}}"), "profiles.cpu.opts", "unknown key"),
        (lambda t: t.replace("  cpu: {}", "  tpu: {}"), "profiles.tpu", "unknown name"),
        (lambda t: t.replace("schema: 1", "schema: 2"), "schema", "not a recipe format this"),
        # True and 1.0 equal 1 in Python: no format's number all the same.
        (lambda t: t.replace("schema: 1", "schema: true"), "schema", "true is not a recipe"),
        (lambda t: t.replace("schema: 1", "schema: 1.0"), "schema", "1.0 is not a recipe"),
        (lambda t: t.replace("schema: 1", 'schema: "1"'), "schema", '"1" is not a recipe'),
        (lambda t: t.replace("schema: 1\n", ""), "schema", "required key is missing"),
        (lambda t: t + "kind: cmake\n", "kind", "no longer a recipe key: every recipe is built"),
        (lambda t: t + "image: devel\n", "image", "no longer a recipe key: the image comes"),
        (
            lambda t: t.replace('sources: ["src/beta/**/*"]', "sources: src/beta"),
            "sources",
            "expected array, got str",
        ),
        (
            lambda t: t.replace("outputs: [lib/libbeta.so]", "outputs: [1]"),
            "outputs[0]",
            "expected string, got int",
        ),
        (lambda t: t.replace("name: beta\n", ""), "name", "required key is missing"),
        (
            lambda t: t.replace("cmake:\n  source_dir: src/beta\n", ""),
            "cmake",
            "required key is missing",
        ),
        (lambda t: t.replace("name: beta", "name: Beta_1"), "name", "lowercase letters"),
        (
            lambda t: t + "test: {command: [pytest], image: runtime}\n",
            "test.image",
            "no longer a recipe key: recipe tests run in the runtime image",
        ),
    ],
)
def test_schema_errors_name_file_and_key(project, change, key, problem):
    path = _write(project, "beta", change(BASE.format(name="beta")))
    with pytest.raises(RecipeError) as info:
        _load(project)
    assert str(info.value).startswith(f"{path}: {key}: "), str(info.value)
    assert problem in str(info.value)


def test_missing_pin_is_named(project):
    path = _write(project, "beta", BASE.format(name="beta") + "pins: [tool, icu4j]\n")
    with pytest.raises(
        RecipeError, match=r"pins\[1\]: pin 'icu4j' is not in .*checksums.yaml"
    ) as info:
        _load(project)
    assert str(path) in str(info.value)


def test_unknown_dependency_is_named(project):
    path = _write(project, "beta", BASE.format(name="beta") + "depends_on: [alpha, gamma]\n")
    with pytest.raises(RecipeError, match=r"depends_on\[1\]: unknown recipe 'gamma'") as info:
        _load(project)
    assert str(path) in str(info.value)


def test_dependency_cycle_is_named(project):
    _write(project, "alpha", BASE.format(name="alpha") + "depends_on: [beta]\n")
    _write(project, "beta", BASE.format(name="beta") + "depends_on: [alpha]\n")
    with pytest.raises(
        RecipeError,
        match=r"depends_on: dependency cycle (alpha -> beta -> alpha|beta -> alpha -> beta)",
    ):
        _load(project)


def test_self_dependency_is_a_cycle(project):
    _write(project, "beta", BASE.format(name="beta") + "depends_on: [beta]\n")
    with pytest.raises(RecipeError, match="dependency cycle beta -> beta"):
        _load(project)


def test_source_pattern_matching_nothing_is_an_error(project):
    _write(project, "beta", BASE.format(name="beta").replace("src/beta/**/*", "src/btea/**/*"))
    with pytest.raises(RecipeError, match=r"sources\[0\]: 'src/btea/\*\*/\*' matches no file"):
        _load(project)


def test_cmake_source_dir_without_cmakelists(project):
    _write(
        project, "beta", BASE.format(name="beta").replace("source_dir: src/beta", "source_dir: src")
    )
    with pytest.raises(RecipeError, match=r"cmake\.source_dir: 'src' has no CMakeLists\.txt"):
        _load(project)


def test_duplicate_names_are_refused(project):
    _write(project, "alpha2", BASE.format(name="alpha"))
    with pytest.raises(RecipeError, match="name: 'alpha' is already defined in"):
        _load(project)


def test_yaml_syntax_error_gives_the_line(project):
    path = _write(project, "beta", "name: beta\nkind: [cmake\n")
    with pytest.raises(RecipeError, match=rf"{path}: not valid YAML at line \d+"):
        _load(project)


def test_order_puts_dependencies_first_and_includes_them(project):
    _write(project, "beta", BASE.format(name="beta") + "depends_on: [alpha]\n")
    book = _load(project)
    assert [r.name for r in book.order(["beta"])] == ["alpha", "beta"]
    assert [r.name for r in book.order(["alpha"])] == ["alpha"]
    with pytest.raises(RecipeError, match="unknown target 'gamma'"):
        book.order(["gamma"])


def test_profile_options_override_recipe_options(project):
    _write(
        project,
        "beta",
        BASE.format(name="beta")
        .replace("  source_dir: src/beta", "  source_dir: src/beta\n  options: {A: 1, B: x}")
        .replace("  cpu: {}", "  cpu: {options: {B: y}}"),
    )
    assert _load(project).get("beta").options_for("cpu") == {"A": 1, "B": "y"}


def test_the_projects_own_recipes_are_valid():
    project = Project(REPO, REPO / "checksums.yaml")
    book = project.load_recipes(project.load_pins())
    assert "kernels" in book.recipes


def test_every_problem_in_every_file_is_reported(project):
    beta = _write(
        project,
        "beta",
        BASE.format(name="beta") + "image: gpu\ncolour: red\nshape: round\n",
    )
    gamma = _write(
        project,
        "gamma",
        BASE.format(name="gamma")
        .replace("src/gamma/**/*", "src/alpha/**/*")
        .replace("outputs: [lib/libgamma.so]", "outputs: [../escape]")
        + "pins: [icu4j]\ndepends_on: [delta]\n",
    ).resolve()
    (project.root / "src" / "gamma").mkdir()
    (project.root / "src" / "gamma" / "CMakeLists.txt").write_text("project(g)\n")
    with pytest.raises(RecipeError) as info:
        _load(project)
    lines = str(info.value).splitlines()
    assert (
        lines[0]
        == f"{beta}: image: no longer a recipe key: {REMOVED_KEYS['image']} (and 5 more below)"
    )
    assert lines[1:] == [
        f"  {beta}: colour: unknown key (allowed here: {ALLOWED})",
        f"  {beta}: shape: unknown key (allowed here: {ALLOWED})",
        f"  {gamma}: outputs[0]: '../escape' leaves dist/<profile> ('..' is not allowed)",
        f"  {gamma}: pins[0]: pin 'icu4j' is not in {project.pins_path}",
        f"  {gamma}: depends_on[0]: unknown recipe 'delta'",
    ]
    assert info.value.hint == "each line names the file and the key to fix"


ALLOWED = (
    "cmake, depends_on, description, generators, name, outputs, pins, profiles, "
    "python_packages, schema, sources, test, wheel"
)


def test_paths_inside_their_place_are_accepted(project):
    (project.root / "src" / "beta" / "gen").mkdir()
    (project.root / "src" / "beta" / "alias").symlink_to("gen")  # a link inside the project
    _write(
        project,
        "beta",
        BASE.format(name="beta").replace("outputs: [lib/libbeta.so]", "outputs: [lib/*.so*]")
        + "wheel: {name: beta, root: python}\n",
    )
    assert _load(project).get("beta").wheel.root == "python"


def test_profile_outputs_stay_under_the_install_prefix(project):
    recipe = _write(
        project,
        "beta",
        BASE.format(name="beta").replace("  cpu: {}", "  cpu: {outputs: [../../escape.so]}"),
    )
    with pytest.raises(RecipeError) as info:
        _load(project)
    assert str(info.value).splitlines()[0] == (
        f"{recipe}: profiles.cpu.outputs[0]: '../../escape.so' leaves dist/<profile> "
        "('..' is not allowed)"
    )


def test_a_key_given_twice_is_refused_with_its_line(project):
    path = _write(project, "beta", "name: alpha\n" + BASE.format(name="beta"))
    with pytest.raises(RecipeError) as info:
        _load(project)
    assert str(info.value) == f"{path}: duplicate key 'name' at line 2 (first at line 1)"


@pytest.mark.parametrize(
    ("options", "key", "problem"),
    [
        (
            "cmake_options: {CMAKE_INSTALL_PREFIX: /tmp/evil_prefix}",
            "cmake.options.CMAKE_INSTALL_PREFIX",
            "CMAKE_INSTALL_PREFIX is set by opforge and may not be overridden (opforge installs "
            "every target into dist/<profile>)",
        ),
        (
            "cpu_options: {CMAKE_CXX_COMPILER: /tmp/cc}",
            "profiles.cpu.options.CMAKE_CXX_COMPILER",
            "CMAKE_CXX_COMPILER is set by opforge",
        ),
        (
            "cpu_options: {OPFORGE_PIN_TOOL: /tmp/other.tar.gz}",
            "profiles.cpu.options.OPFORGE_PIN_TOOL",
            "OPFORGE_PIN_TOOL is set by opforge and may not be overridden (OPFORGE_PIN_*",
        ),
        ("cmake_options: {-DX: 1}", "cmake.options.-DX", "'-DX' is not a plain CMake variable"),
        ("cmake_options: {X=Y: 1}", "cmake.options.X=Y", "'X=Y' is not a plain CMake variable"),
        (
            "cmake_options: {'A:BOOL': true}",
            "cmake.options.A:BOOL",
            "'A:BOOL' is not a plain CMake variable",
        ),
    ],
)
def test_options_opforge_sets_or_that_are_not_variables_are_refused(project, options, key, problem):
    where, _, mapping = options.partition(": ")
    text = BASE.format(name="beta")
    if where == "cmake_options":
        text = text.replace(
            "  source_dir: src/beta", f"  source_dir: src/beta\n  options: {mapping}"
        )
    else:
        text = text.replace("  cpu: {}", f"  cpu: {{options: {mapping}}}")
    path = _write(project, "beta", text)
    with pytest.raises(RecipeError) as info:
        _load(project)
    assert str(info.value).startswith(f"{path}: {key}: recipe 'beta': {problem}"), str(info.value)


@pytest.mark.parametrize(
    ("options", "key", "problem"),
    [
        ("{1: a}", "cmake.options", "key 1 is a number in YAML, not a name"),
        ("{~: a}", "cmake.options", "key None is null in YAML, not a name"),
        ('{"A\\nB": a}', "cmake.options.'A\\nB'", "recipe 'beta': 'A\\nB' is not a plain CMake"),
    ],
)
def test_an_option_key_that_is_not_a_name_is_one_line(project, options, key, problem):
    """Through the CLI: a YAML key that is a number, null or holds a line break is refused in
    one line, without a traceback."""
    path = _write(
        project,
        "beta",
        BASE.format(name="beta").replace(
            "  source_dir: src/beta", f"  source_dir: src/beta\n  options: {options}"
        ),
    )
    result = run_opforge("--project", str(project.root), "recipes", "validate")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    first, hint = result.stderr.strip().splitlines()
    assert first.startswith(f"opforge: error: {path}: {key}: {problem}"), first
    assert hint.startswith("  hint: ")


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        (
            lambda t: t.replace("src/beta/**/*", "src/beta/**x"),
            "sources[0]",
            "'src/beta/**x' has '**' inside a name",
        ),
        (lambda t: t.replace("src/beta/**/*", "**"), "sources[0]", "'**' ends in '**'"),
        (
            lambda t: t.replace("src/beta/**/*", "**/*"),
            "sources[0]",
            "'**/*' also matches in build/, which opforge writes",
        ),
        (
            lambda t: t.replace("src/beta/**/*", "d*/x.txt"),
            "sources[0]",
            "'d*/x.txt' also matches in dist/",
        ),
        (
            lambda t: t.replace("[lib/libbeta.so]", "[lib/**.so]"),
            "outputs[0]",
            "'lib/**.so' has '**' inside a name",
        ),
        (lambda t: t + "pins: [tool, tool]\n", "pins", "'tool' is listed twice"),
        (lambda t: t + "depends_on: [alpha, alpha]\n", "depends_on", "'alpha' is listed twice"),
        (lambda t: t + "python_packages: ['']\n", "python_packages[0]", "'' must be a Python"),
        (lambda t: t + "python_packages: [a b]\n", "python_packages[0]", "'a b' must be a Python"),
        (lambda t: t + "generators: [os]\n", "generators[0]", "'os' has no source file"),
        (lambda t: t + "generators: [sys]\n", "generators[0]", "'sys' has no source file"),
        (
            lambda t: t + "generators: [json]\n",
            "generators[0]",
            "'json' is at ",
        ),
        (
            lambda t: t + "generators: [email.mime]\n",
            "generators[0]",
            "'email.mime': its package 'email' is at ",
        ),
        (
            lambda t: t + "generators: [opforge..kernels]\n",
            "generators[0]",
            "'opforge..kernels' is not a Python module name",
        ),
    ],
)
def test_what_a_build_would_crash_on_is_refused_by_validation(project, change, key, problem):
    path = _write(project, "beta", change(BASE.format(name="beta")))
    with pytest.raises(RecipeError) as info:
        _load(project)
    assert str(info.value).startswith(f"{path}: {key}: {problem}"), str(info.value)
    assert "\n" not in str(info.value)


def test_generators_of_the_project_and_of_opforge_are_accepted(project, monkeypatch):
    (project.root / "tools").mkdir()
    (project.root / "tools" / "gen_beta.py").write_text("print('generated')\n")
    monkeypatch.syspath_prepend(str(project.root / "tools"))
    _write(project, "beta", BASE.format(name="beta") + "generators: [gen_beta, opforge.kernels]\n")
    assert _load(project).get("beta").generators == ("gen_beta", "opforge.kernels")


def test_a_generator_at_the_project_root_is_found_from_any_folder(project, tmp_path):
    # It was found through sys.path alone: by `python -m opforge` started at the root, and by
    # neither the `opforge` script nor a run from another folder.
    (project.root / "gen_root.py").write_text("print('generated')\n")
    (project.root / "gens").mkdir()
    (project.root / "gens" / "__init__.py").write_text("raise SystemExit('not imported')\n")
    (project.root / "gens" / "sub.py").write_text("print('generated')\n")
    assert generator_files("gen_root", project.root, "w") == {
        "gen_root": project.root / "gen_root.py"
    }
    assert generator_files("gens.sub", project.root, "w") == {
        "gens.sub": project.root / "gens" / "sub.py"
    }
    _write(project, "beta", BASE.format(name="beta") + "generators: [gen_root, gens.sub]\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_opforge("--project", str(project.root), "recipes", "validate", cwd=elsewhere)
    assert result.returncode == 0, result.stderr


def test_validate_refuses_an_install_prefix_outside_the_project(project):
    _write(
        project,
        "beta",
        BASE.format(name="beta").replace(
            "  source_dir: src/beta",
            "  source_dir: src/beta\n  options: {CMAKE_INSTALL_PREFIX: /tmp/evil_prefix}",
        ),
    )
    result = run_opforge("--project", str(project.root), "recipes", "validate")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    first, hint = result.stderr.strip().splitlines()
    assert "beta.yaml: cmake.options.CMAKE_INSTALL_PREFIX: recipe 'beta': " in first
    assert hint == "  hint: remove the option from the recipe"


def test_every_define_opforge_passes_is_reserved_and_wins(tmp_path):
    recipe = Recipe(
        name="r",
        path=tmp_path / "r.yaml",
        raw={},
        sources=("x",),
        cmake=CMakeSpec("src"),
        profiles={"gpu": Profile("gpu")},
        outputs=("x",),
    )
    tools = {n: Tool(n, Path(f"/usr/bin/{n}"), "1") for n in ("cmake", "ninja", "c++", "nvcc")}
    steps = cmake_steps(
        recipe,
        root=tmp_path,
        build_dir=tmp_path / "b",
        prefix=tmp_path / "dist",
        options={"CMAKE_INSTALL_PREFIX": "/tmp/evil_prefix", "CMAKE_BUILD_TYPE": "Release"},
        pin_paths={"tool": tmp_path / "tool.tar.gz"},
        tools=tools,
        jobs=1,
    )
    defines = dict(arg[2:].split("=", 1) for arg in steps[0].argv if arg.startswith("-D"))
    assert defines["CMAKE_INSTALL_PREFIX"] == str(tmp_path / "dist")
    assert defines["CMAKE_BUILD_TYPE"] == "Release"
    for name in set(defines) - {"CMAKE_BUILD_TYPE"}:
        assert option_problem(name) is not None, f"{name} is passed by opforge but not reserved"


def test_a_removed_key_and_a_missing_recipe_file_come_with_hints(project):
    """Through the CLI: the message line, then a hint saying what to change."""
    root = project.root
    missing = run_opforge("--project", str(root), "recipes", "validate", str(root / "nope.yaml"))
    assert missing.returncode == 1
    lines = missing.stderr.strip().splitlines()
    assert lines[0] == f"opforge: error: {root / 'nope.yaml'}: no such recipe file or directory"
    assert lines[1] == "  hint: check the path: give a recipe .yaml file, or a directory of them"
    path = _write(project, "beta", BASE.format(name="beta") + "kind: cmake\n")
    removed = run_opforge("--project", str(root), "recipes", "validate")
    lines = removed.stderr.strip().splitlines()
    assert lines[0].startswith(f"opforge: error: {path}: kind: no longer a recipe key")
    assert lines[1] == f"  hint: delete `kind:` in {path}"
