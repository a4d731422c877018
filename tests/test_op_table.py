"""The op table (kernels/ops.yaml): validation errors that name file and key, every op covered
by the conformance data and both adapters, and the Python shape rules agreeing with the kernel
library's C++ ones."""

from __future__ import annotations

import ast
import copy
import importlib.util
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from opforge.errors import ConfigError
from opforge.kernels import gen_c, gen_mindspore, gen_torch, optable, shapes
from opforge.kernels.abi import Tensor
from opforge.kernels.checks import argument_checks
from tests.conformance import ops
from tests.conformance.runner import TABLE, all_cases, prepare

REPO = Path(__file__).resolve().parent.parent


def test_every_op_has_conformance_data():
    assert set(ops.names()) == set(TABLE.ops), "one module per op under tests/conformance/ops"
    covered = {c.op for c in all_cases()}
    assert covered == set(TABLE.ops)


def test_every_differentiable_op_names_a_backward_that_exists():
    for op in TABLE.ops.values():
        if op.backward is not None and op.backward.op:
            assert op.backward.op in TABLE.ops


def test_every_op_is_in_both_adapters_generated_code():
    torch_py = gen_torch.python_source(TABLE)
    torch_cpp = gen_torch.cpp_source(TABLE)
    ms_py = gen_mindspore.python_source(TABLE)
    ms_cpp = gen_mindspore.aot_source(TABLE)
    for name in TABLE.ops:
        assert f'register_fake("opforge::{name}")' in torch_py
        assert f'm.impl("{name}", TORCH_BOX(&opforge_torch::{name}));' in torch_cpp
        assert f"def _{name}(fn," in ms_py
        assert f"OPFORGE_MS_ENTRY({name})" in ms_cpp


def _generated_helpers(table) -> dict:
    tree = ast.parse(gen_torch.python_source(table))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_torch_helpers_take_out_where_the_table_says_and_refuse_it_first():
    helpers = _generated_helpers(TABLE)
    functions = [fn for op in TABLE.ops.values() for fn in op.functions["torch"]]
    assert any(fn.takes_out for fn in functions) and not all(fn.takes_out for fn in functions)
    for fn in functions:
        node = helpers[fn.name]
        keyword_only = {
            a.arg: d for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
        }
        everything = [a.arg for a in node.args.posonlyargs + node.args.args] + list(keyword_only)
        if not fn.takes_out:
            assert "out" not in everything, fn.name
            continue
        assert everything.count("out") == 1 and ast.unparse(keyword_only["out"]) == "None"
        # First, before any argument is converted or checked: the docstring, then the refusal.
        first = node.body[1]
        assert ast.unparse(first) == (
            f"if out is not None:\n    raise out_not_supported({fn.name!r})"
        ), fn.name
        assert "``out=`` is refused" in ast.get_docstring(node)


def test_takes_out_adds_out_to_a_torch_helper_and_nothing_else(tmp_path):
    def mutate(data):
        data["ops"]["layer_norm"]["torch"][0]["takes_out"] = True
        data["ops"]["add"]["torch"][0].pop("takes_out", None)

    table = optable.load(_table(tmp_path, mutate))
    helpers = _generated_helpers(table)
    assert [a.arg for a in helpers["layer_norm"].args.kwonlyargs] == ["out"]
    assert [a.arg for a in helpers["add"].args.kwonlyargs] == ["alpha"]
    # The refusal goes in after the docstring; the rest of the helper is as it was.
    before, after = _generated_helpers(TABLE)["layer_norm"], helpers["layer_norm"]
    assert ast.unparse(after.body[1]).startswith("if out is not None:")
    assert [ast.dump(n) for n in after.body[2:]] == [ast.dump(n) for n in before.body[1:]]


def test_generation_is_deterministic():
    again = optable.load(REPO / "kernels" / "ops.yaml")
    for generate in (
        gen_c.header,
        gen_c.api_source,
        gen_torch.python_source,
        gen_mindspore.python_source,
    ):
        assert generate(TABLE) == generate(again)


def test_raises_names_the_checks_the_generators_make():
    # optable validates `raises` against check_names; the generators name the checks they
    # render: the two agree (a suffix's longer case and a reduction are gen_torch's own).
    for op in TABLE.ops.values():
        made = {check.name for check in argument_checks(TABLE, op)}
        made |= {f"{a.name}.suffix.longer" for a in op.args if "suffix" in a.checks}
        made |= {f"{o.name}.reduce" for o in op.outputs if o.rule == "reduce"}
        assert set(optable.check_names(op)) == made, op.name


def _checks_of(source: str, op: str) -> str:
    tree = ast.parse(source)
    node = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == f"_{op}_checks"
    )
    return ast.unparse(node)


def test_raises_gives_the_fake_kernel_checks_their_exception(tmp_path):
    def mutate(data):
        data["ops"]["argmax"]["torch"][0]["raises"] = {
            "ValueError": ["x.dtypes", "out.reduce"],
            "TypeError": ["dim.dim"],
        }

    checks = _checks_of(gen_torch.python_source(optable.load(_table(tmp_path, mutate))), "argmax")
    assert "_fc.dtypes('argmax', x, 'x', ('float32', 'float16', 'bfloat16'), error=ValueError)" in (
        checks
    )
    assert "_fc.dim('argmax', dim, x, 'x', 'dim', error=TypeError)" in checks
    assert "_fc.reducible('argmax', x, 'x', dim, error=ValueError)" in checks
    # Without raises, each check keeps its default (IndexError for a dim, ...).
    assert "_fc.dim('argmax', dim, x, 'x', 'dim')" in _checks_of(
        gen_torch.python_source(TABLE), "argmax"
    )
    rms = _checks_of(gen_torch.python_source(TABLE), "rms_norm")
    assert (
        "_fc.suffix('rms_norm', normalized_shape, x, 'x', 'normalized_shape', longer=ValueError)"
        in (rms)
    )


def test_one_torch_function_of_an_op_gives_raises(tmp_path):
    def mutate(data):
        first = copy.deepcopy(data["ops"]["rms_norm"]["torch"][0])
        data["ops"]["rms_norm"]["torch"].append(
            {**first, "def": first["def"].replace("rms_norm", "rms")}
        )

    with pytest.raises(
        ConfigError, match=r"ops\.rms_norm\.torch\.1\.raises: only one torch function"
    ):
        optable.load(_table(tmp_path, mutate))


# --- the Python rules (torch fake kernels, MindSpore inference) match the C++ ones ---


def _python_shape(op, out, tensors, scalars):
    spec = out.spec
    shape = {k: np.shape(v) for k, v in tensors.items() if v is not None}
    if out.rule == "like":
        return shapes.like(shape[spec])
    if out.rule == "broadcast":
        return shapes.broadcast(shape[spec[0]], shape[spec[1]])
    if out.rule == "reduce":
        return shapes.reduce(shape[spec["of"]], scalars[spec["dim"]], scalars[spec["keepdim"]])
    if out.rule == "channels":
        return shapes.channels(shape[spec])
    if out.rule == "batch":
        return shapes.batch(shape[spec["of"]], scalars[spec["normalized"]])
    return shapes.given(scalars[spec])


@pytest.mark.slow
def test_python_shape_rules_agree_with_the_library(cpu_library):
    for case in all_cases():
        p = prepare(case)
        metas = {
            name: None if values is None else Tensor.meta(np.shape(values), p.dtype(case, name))
            for name, values in p.tensors.items()
        }
        described = cpu_library.infer(case.op, **metas, **p.scalars)
        for out in p.op.outputs:
            expected = _python_shape(p.op, out, p.tensors, p.scalars)
            assert described[out.name].shape == tuple(expected), (case.id, out.name)
            assert described[out.name].shape == np.shape(p.expected[out.name]), (case.id, out.name)


@pytest.fixture(scope="module")
def cpu_library(tmp_path_factory):
    from tests.kernels.conftest import _built_library

    return _built_library(tmp_path_factory, "cpu")


# --- validation: each mistake is one error naming the file and the key ---

GOOD = yaml.safe_load((REPO / "kernels" / "ops.yaml").read_text())


def _table(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    mutate(data)
    path = tmp_path / "ops.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _set(path: str, value):
    def mutate(data):
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()


def _renamed_running_mean(function: dict) -> dict:
    """batch_norm's torch function with its running_mean parameter called `mean`."""
    return {
        **function,
        "def": function["def"].replace("running_mean,", "mean,"),
        "args": {
            name: value.replace("running_mean", "mean") if isinstance(value, str) else value
            for name, value in function["args"].items()
        },
    }


BAD = [
    ("version", _set("version", 1), "version: expected 2, got 1"),
    ("unknown key", _set("ops.add.shape", "x"), "ops.add.shape: unknown key"),
    (
        "signature",
        _set("ops.add.signature", "add(a, b) -> out"),
        "ops.add.signature: cannot read argument 'a'",
    ),
    (
        "signature name",
        _set("ops.add.signature", "plus(Tensor a) -> Tensor out"),
        "ops.add.signature: expected `add(Type arg, ...) -> Type out`",
    ),
    (
        "dtype set",
        _set("ops.softmax.inputs.x.dtypes", "floaty"),
        "ops.softmax.inputs.x.dtypes: unknown dtype set 'floaty'",
    ),
    (
        "tensor without checks",
        _set("ops.softmax.inputs.x", {}),
        "ops.softmax.inputs.x: say what the tensor must be",
    ),
    (
        "dim of a scalar",
        _set("ops.softmax.scalars.dim.dim", "dim"),
        "ops.softmax.scalars.dim.dim: expected the name of a tensor argument",
    ),
    (
        "updates naming a tensor not updated in place",
        _set("ops.batch_norm.scalars.training.updates", ["running_mean", "weight"]),
        "ops.batch_norm.scalars.training.updates: expected, for a bool argument, the list of "
        "Tensor(a!) arguments it has updated",
    ),
    (
        "from without updates",
        _set("ops.batch_norm.scalars.eps.from", ["x"]),
        "ops.batch_norm.scalars.eps.from: expected, beside updates, the list of tensor arguments "
        "the update is computed from",
    ),
    (
        "from naming a scalar",
        _set("ops.batch_norm.scalars.training.from", ["momentum"]),
        "ops.batch_norm.scalars.training.from: expected, beside updates",
    ),
    (
        "updates on a non-bool",
        _set("ops.batch_norm.scalars.momentum.updates", ["running_mean"]),
        "ops.batch_norm.scalars.momentum.updates: expected, for a bool argument",
    ),
    (
        "output rule",
        _set("ops.softmax.outputs.y", {"like": "x", "channels": "x"}),
        "ops.softmax.outputs.y: give exactly one shape rule",
    ),
    (
        "missing output",
        _set("ops.softmax.outputs", {}),
        "ops.softmax.outputs.y: give exactly one shape rule",
    ),
    (
        "backward op",
        _set("ops.softmax.backward.op", "softmax_grad"),
        "ops.softmax.backward.op: unknown op 'softmax_grad'",
    ),
    (
        "backward args",
        _set("ops.softmax.backward.args", {"y": "y", "dy": "grad_y"}),
        "ops.softmax.backward.args: must give exactly the arguments of softmax_backward",
    ),
    (
        "backward source",
        _set("ops.softmax.backward.args", {"y": "y", "dy": "grad_z", "dim": "dim"}),
        "ops.softmax.backward.args.dy: 'grad_z' is not an input, output, scalar or grad_<output>",
    ),
    (
        "linear factor",
        _set("ops.add.backward", {"linear": {"a": 2}}),
        "ops.add.backward.linear.a: expected 1 or the name of a float argument",
    ),
    (
        "function args",
        _set(
            "ops.add.torch",
            [{"def": "add(a, b)", "doc": "d", "args": {"a": "a"}, "returns": "out"}],
        ),
        "ops.add.torch.0.args: must give every argument of the op",
    ),
    (
        "function expression",
        _set(
            "ops.add.torch",
            [
                {
                    "def": "add(a, b)",
                    "doc": "d",
                    "args": {"a": "a", "b": "c", "alpha": 1},
                    "returns": "out",
                }
            ],
        ),
        "ops.add.torch.0.args.b: 'c' is not a parameter of the function",
    ),
    (
        "takes_out on a mindspore function",
        _set("ops.add.mindspore.0.takes_out", True),
        "ops.add.mindspore.0.takes_out: expected true or false, on a torch function",
    ),
    (
        "takes_out that is no bool",
        _set("ops.add.torch.0.takes_out", "yes"),
        "ops.add.torch.0.takes_out: expected true or false, on a torch function",
    ),
    (
        "out in the def beside takes_out",
        _set("ops.add.torch.0.def", "add(input, other, *, alpha=1, out=None)"),
        "ops.add.torch.0.def: a function with takes_out gets its `out=None` from the generator",
    ),
    (
        "raises of an exception not offered",
        _set("ops.rms_norm.torch.0.raises", {"KeyError": ["eps.min"]}),
        "ops.rms_norm.torch.0.raises.KeyError: unknown key",
    ),
    (
        "raises of no check",
        _set("ops.rms_norm.torch.0.raises", {"ValueError": ["eps.max"]}),
        "ops.rms_norm.torch.0.raises.ValueError: 'eps.max' is no check of rms_norm",
    ),
    (
        "raises of a key that qualifies a check",
        _set("ops.rms_norm.torch.0.raises", {"ValueError": ["weight.param_dtype"]}),
        "ops.rms_norm.torch.0.raises.ValueError: 'weight.param_dtype' is no check of rms_norm",
    ),
    (
        "raises not a list",
        _set("ops.rms_norm.torch.0.raises", {"ValueError": "eps.min"}),
        "ops.rms_norm.torch.0.raises.ValueError: expected a list of check names",
    ),
    (
        "raises giving a check two exceptions",
        _set("ops.rms_norm.torch.0.raises", {"ValueError": ["eps.min"], "IndexError": ["eps.min"]}),
        "ops.rms_norm.torch.0.raises.IndexError: 'eps.min' is given ValueError already",
    ),
    (
        "raises on a mindspore function",
        _set("ops.rms_norm.mindspore.0.raises", {"ValueError": ["eps.min"]}),
        "ops.rms_norm.mindspore.0.raises: expected on a torch function only",
    ),
    (
        "range that is no interval",
        _set("ops.batch_norm.mindspore.0.ranges", {"eps": "0..1"}),
        "ops.batch_norm.mindspore.0.ranges.eps: expected an interval such as \"(0, 1]\", got '0..1'",
    ),
    (
        "range of no parameter",
        _set("ops.batch_norm.mindspore.0.ranges", {"epsilon": "(0, 1]"}),
        "ops.batch_norm.mindspore.0.ranges.epsilon: expected a parameter of a mindspore function",
    ),
    (
        # MindSpore's function passes an updated statistic on as it is: nothing copies back.
        "updated argument through an expression, mindspore",
        _set("ops.batch_norm.mindspore.0.args.running_mean", "_rt.copy(running_mean)"),
        "ops.batch_norm.mindspore.0.args.running_mean: an argument the op updates in place is "
        "the function's parameter of its name, or (torch only) an expression of it",
    ),
    (
        # torch's helper copies back into the parameter of the argument's name: it must exist.
        "updated argument with no parameter of its name, torch",
        _set(
            "ops.batch_norm.torch", [_renamed_running_mean(GOOD["ops"]["batch_norm"]["torch"][0])]
        ),
        "ops.batch_norm.torch.0.args.running_mean: an argument the op updates in place",
    ),
    # Names, text and defaults that the generated C, C++ or Python would take as code.
    ("op named as a C++ keyword", _set("ops.delete", {}), "ops.delete: 'delete' is a keyword"),
    (
        "argument named as a C keyword",
        _set("ops.mul.signature", "mul(Tensor a, Tensor int, float scale) -> Tensor out"),
        "ops.mul.signature: 'int' is a keyword of C, C++ or Python",
    ),
    (
        "argument named stream",
        _set("ops.mul.signature", "mul(Tensor a, Tensor stream, float scale) -> Tensor out"),
        "'stream' is a keyword of C, C++ or Python, or a name the generated code uses",
    ),
    (
        "argument named out",
        _set("ops.mul.signature", "mul(Tensor a, Tensor out, float scale) -> Tensor y"),
        "'out' is a keyword of C, C++ or Python, or a name the generated code uses",
    ),
    (
        "doc that ends the C comment",
        _set("ops.mul.doc", "evil */ #include </etc/passwd>"),
        "ops.mul.doc: '*/' would end or escape the generated comment",
    ),
    (
        "function doc that ends the docstring",
        _set("ops.mul.torch.0.doc", 'x"""; import os; """'),
        'ops.mul.torch.0.doc: \'"""\' would end or escape',
    ),
    (
        "doc with a backslash",
        _set("ops.mul.mindspore.0.doc", "a \\N{bell} b"),
        "ops.mul.mindspore.0.doc: a backslash would end or escape",
    ),
    (
        "default that is code",
        _set("ops.add.torch.0.def", "add(input, other, *, alpha=__import__('os').system('id'))"),
        "ops.add.torch.0.def: the default of 'alpha' must be a literal",
    ),
    ("unknown top-level key", _set("bogus", 1), "bogus: unknown key"),
    (
        # The adapters cast one promoted result back; a tuple's would stay float32.
        "promote with several results",
        _set("ops.mul.mindspore.0.returns", ["out"]),
        "ops.mul.mindspore.0.promote: expected a function with one result (returns: a name)",
    ),
]


@pytest.mark.parametrize(("mutate", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_mistakes_name_file_and_key(tmp_path, mutate, message):
    path = _table(tmp_path, mutate)
    with pytest.raises(ConfigError) as info:
        optable.load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def test_generator_command_reports_a_bad_table_in_one_line(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "ops.yaml"
    path.write_text(
        textwrap.dedent("""\
        version: 2
        ops: {}
    """)
    )
    result = subprocess.run(
        [sys.executable, "-m", "opforge.kernels", "c", str(path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"opforge: error: {path}: ops: expected a mapping")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_shapes_module_imports_nothing_from_a_framework():
    spec = importlib.util.find_spec("opforge.kernels.shapes")
    text = Path(spec.origin).read_text()
    assert (
        "import torch" not in text and "import mindspore" not in text and "from opforge" not in text
    )
