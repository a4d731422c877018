"""``opforge recipes``: list, show and validate the build recipes."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from opforge.cli.common import path_text, project
from opforge.report import printable
from opforge.settings import Settings


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """Print one line per recipe."""
    found = project(settings)
    for recipe in found.load_recipes(found.load_pins()).order():
        deps = ", ".join(recipe.depends_on) or "-"
        print(
            f"{recipe.name:<20} profiles={','.join(recipe.profiles):<8} "
            f"depends_on={deps:<16} {printable(recipe.description)}"
        )
    return 0


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    """Print a recipe as loaded, with the file it came from."""
    found = project(settings)
    recipe = found.load_recipes(found.load_pins()).get(args.name)
    print(f"# {recipe.path}")
    print(yaml.safe_dump(recipe.raw, sort_keys=False).rstrip())
    return 0


def cmd_validate(args: argparse.Namespace, settings: Settings) -> int:
    """Validate the project's recipes, plus any recipe files given."""
    found = project(settings)
    book = found.load_recipes(found.load_pins(), extra=[Path(p) for p in args.paths])
    print(f"{len(book.recipes)} recipe(s) valid: {', '.join(sorted(book.recipes))}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``recipes`` and its actions."""
    recipes = sub.add_parser("recipes", help="list, show and validate build recipes")
    actions = recipes.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="one line per recipe, dependencies first").set_defaults(
        func=cmd_list
    )
    show = actions.add_parser("show", help="print one recipe")
    show.add_argument("name", metavar="NAME", help="a target (see `opforge recipes list`)")
    show.set_defaults(func=cmd_show)
    validate = actions.add_parser(
        "validate", help="check recipes against the schema, pins and graph"
    )
    validate.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        type=path_text,
        help="extra recipe files (or folders of them) to check with the project's",
    )
    validate.set_defaults(func=cmd_validate)
