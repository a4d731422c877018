"""The one translation of JSON Schema errors into ``where: what`` lines, shared by the recipe
loader and the CI matrix: list positions in brackets, mapping keys (numbers too) after dots."""

from __future__ import annotations

import jsonschema
import pytest

from opforge.ci.schema import schema_problem
from opforge.errors import RecipeError
from opforge.recipes.loader import parse_recipe
from opforge.schema_errors import key_path, key_text, schema_problems

DATA = {"items": [{"name": "a"}, {"name": "b"}], "by_number": {1: ["x"]}, "odd": {"a\nb": 1}}


@pytest.mark.parametrize(
    ("parts", "path"),
    [
        ([], "(top level)"),
        (["items"], "items"),
        (["items", 1], "items[1]"),
        (["items", 1, "name"], "items[1].name"),
        (["by_number", 1], "by_number.1"),
        (["by_number", 1, 0], "by_number.1[0]"),
        (["odd", "a\nb"], "odd.'a\\nb'"),
        (["items", 0, "missing"], "items[0].missing"),
        (["nowhere", "deeper"], "nowhere.deeper"),
    ],
)
def test_key_path_brackets_list_positions_and_dots_mapping_keys(parts, path):
    assert key_path(DATA, parts) == path


def test_key_text_quotes_what_would_break_the_line():
    assert key_text("cuda") == "cuda"
    assert [key_text(k) for k in ("", " ", "a\nb", 1, None)] == [
        "''",
        "' '",
        "'a\\nb'",
        "1",
        "None",
    ]


RULE = "^[a-z]+\\Z"
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "tags", "sizes"],
    "properties": {
        "name": {"type": "string", "pattern": RULE},
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "sizes": {"type": "array", "items": {"type": "integer", "description": "a size in bytes"}},
        "kinds": {"type": "object", "propertyNames": {"enum": ["cpu", "gpu"]}},
        "options": {"type": "object", "propertyNames": {"type": "string"}},
    },
}
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def test_every_problem_is_listed_once_sorted_by_key():
    data = {"name": "Bad1", "tags": ["t", "t"], "kinds": {"tpu": {}}, "zz": 1, "aa": 2}
    assert schema_problems(VALIDATOR, data, {RULE: "lowercase letters"}) == [
        "aa: unknown key (allowed here: kinds, name, options, sizes, tags)",
        "kinds.tpu: unknown name (allowed: cpu, gpu)",
        "name: 'Bad1' must be lowercase letters",
        "sizes: required key is missing",
        "tags: 't' is listed twice",
        "zz: unknown key (allowed here: kinds, name, options, sizes, tags)",
    ]


def test_a_described_schema_names_its_form_and_an_undescribed_one_its_type():
    data = {"name": 5, "tags": [], "sizes": [1, "2" * 100], "options": {1: "a"}}
    assert schema_problems(VALIDATOR, data) == [
        "name: expected string, got int",
        "options: key 1 is a number in YAML, not a name; write the name as text "
        "(quoted if YAML would read it as a number or null)",
        f"sizes[1]: expected a size in bytes, got '{'2' * 56}...",
    ]


def test_a_pattern_without_a_rule_falls_back_to_jsonschemas_words():
    (problem,) = schema_problems(VALIDATOR, {"name": "A", "tags": [], "sizes": []})
    assert problem == f"name: 'A' does not match '{RULE}'".replace("\\", "\\\\")


def test_the_matrix_and_a_recipe_write_a_number_key_alike(tmp_path):
    """A YAML key read as a number is a mapping key in both files, never a list position."""
    matrix = {"cuda": {"13.0": ["9.13"]}, "frameworks": [{"requirement": "none"}]}
    matrix["exclude"] = [{"match": {1: "x"}, "reason": "r"}]
    assert schema_problem(matrix) == (
        "exclude[0].match.1: the key must be an axis (cuda, cudnn, framework)"
    )
    recipe = tmp_path / "lib.yaml"
    recipe.write_text(
        "name: lib\nschema: 1\nsources: [lib/*]\ncmake: {source_dir: lib}\n"
        "profiles: {1: {}}\noutputs: [lib/x]\n"
    )
    with pytest.raises(RecipeError) as info:
        parse_recipe(recipe)
    assert str(info.value) == f"{recipe}: profiles.1: unknown name (allowed: cpu, gpu)"
