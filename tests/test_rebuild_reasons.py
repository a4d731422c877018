"""The one line a rebuild prints to say why: which inputs or outputs changed."""

from __future__ import annotations

from opforge.build.fingerprint import changed_categories, describe_change, describe_output_change

BASE = {
    "recipe": "r1",
    "profile": "cpu",
    "options": {"CMAKE_BUILD_TYPE": "Release"},
    "sources": {"a.cpp": "1", "b.cpp": "2"},
    "generators": {"opforge.kernels": "g1"},
    "pins": {"dlpack-source": "p1"},
    "toolchain": {"opforge": "0.1.0", "cmake": "cmake version 3.25.1", "c++": "g++ 12"},
    "image": "host",
    "depends_on": {"kernels": "k1"},
}


def changed(**updates) -> dict:
    """BASE with some categories replaced."""
    return {**BASE, **updates}


def test_each_kind_of_input_is_named():
    cases = {
        "recipe changed": changed(recipe="r2"),
        "source a.cpp changed": changed(sources={"a.cpp": "9", "b.cpp": "2"}),
        "source c.cpp added": changed(sources={**BASE["sources"], "c.cpp": "3"}),
        "source b.cpp removed": changed(sources={"a.cpp": "1"}),
        "pin dlpack-source changed": changed(pins={"dlpack-source": "p2"}),
        "generator opforge.kernels changed": changed(generators={"opforge.kernels": "g2"}),
        "tool cmake changed (cmake version 3.25.1 -> cmake version 4.4.4)": changed(
            toolchain={**BASE["toolchain"], "cmake": "cmake version 4.4.4"}
        ),
        "option CMAKE_BUILD_TYPE changed (Release -> Debug)": changed(
            options={"CMAKE_BUILD_TYPE": "Debug"}
        ),
        "image changed (host -> opforge-devel:abc)": changed(image="opforge-devel:abc"),
        "dependency kernels changed": changed(depends_on={"kernels": "k2"}),
    }
    for expected, new in cases.items():
        assert describe_change(BASE, new) == expected


def test_several_changes_share_one_line_and_long_lists_are_cut():
    new = changed(
        recipe="r2",
        sources={f"s{i}.cpp": "x" for i in range(5)},
        toolchain={**BASE["toolchain"], "nvcc": "release 13.0"},
    )
    line = describe_change(BASE, new)
    assert "\n" not in line
    assert line == (
        "recipe changed; sources s0.cpp, s1.cpp, s2.cpp (+2 more) added; "
        "sources a.cpp, b.cpp removed; tool nvcc added"
    )


def test_a_record_from_another_format_still_gets_a_reason():
    assert describe_change({"inputs": "old"}, BASE).startswith("recipe changed")
    assert describe_change(BASE, dict(BASE)) == "inputs recorded in another format"


def test_categories_the_build_tool_cannot_track():
    new = changed(toolchain={**BASE["toolchain"], "c++": "g++ 13"}, sources={"a.cpp": "0"})
    assert changed_categories(BASE, new) == {"toolchain", "sources"}


def test_output_changes():
    old = {"lib/a.so": "1", "lib/b.so": "2", "wheel:x.whl": "3"}
    assert describe_output_change(old, {"lib/a.so": "1", "wheel:x.whl": "3"}, []) == (
        "output lib/b.so missing"
    )
    assert describe_output_change(old, {**old, "lib/a.so": "9"}, []) == "output lib/a.so altered"
    assert describe_output_change(old, dict(old), []) == ""
    assert describe_output_change(old, dict(old), ["lib/new*.so"]) == (
        "declared output lib/new*.so not installed"
    )
