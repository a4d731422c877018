"""The op table (``kernels/ops.yaml``): loading, validation and the model the generators read.

Every error names the file and the key (``kernels/ops.yaml: ops.softmax.inputs.x.dtypes: ...``).
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opforge.errors import ConfigError
from opforge.yamlfile import read_yaml_file

VERSION = 2
DTYPES = ("float32", "float16", "bfloat16", "int64")
SCALAR_TYPES = ("int", "int?", "float", "float?", "bool", "int[]", "str")

_TENSOR_CHECKS = {
    "dtypes",
    "like",
    "rank",
    "channels",
    "shape",
    "batch",
    "broadcast",
    "param_dtype",
}
_SCALAR_CHECKS = {"dim", "min", "finite", "values", "suffix", "updates", "from"}
_OUTPUT_RULES = {"like", "broadcast", "reduce", "channels", "batch", "shape"}
_OP_CHECKS = {"together", "required_unless", "per_channel_count"}
_OP_KEYS = {
    "doc",
    "signature",
    "inputs",
    "scalars",
    "checks",
    "outputs",
    "backward",
    "jvp",
    "torch",
    "mindspore",
}
FRAMEWORKS = ("torch", "mindspore")
_KEYS_HINT = "the header of kernels/ops.yaml lists every key"
_FUNCTION_KEYS = {
    "def",
    "doc",
    "args",
    "returns",
    "promote",
    "zero_dim_as_number",
    "ranges",
    "same_dtype",
    "takes_out",
    "raises",
}
# The exceptions a torch function's `raises` may give a check.
EXCEPTIONS = ("IndexError", "ValueError", "TypeError", "NotImplementedError", "RuntimeError")
# Keys of an argument's checks that qualify another check or say what the op updates: no check
# of their own, so no name in `raises`.
_QUALIFIERS = {"param_dtype", "updates", "from"}
# A number parameter's allowed interval, as the framework states it: "(0, 1]", "[0, 1]".
_INTERVAL = re.compile(r"^([(\[])\s*([-+.0-9eE]+)\s*,\s*([-+.0-9eE]+)\s*([)\]])$")
# The modules a framework function's expressions may use besides its parameters: what the
# generated _ops.py of each adapter imports under these names.
EXPRESSION_MODULES = {"torch": {"torch", "_rt"}, "mindspore": {"ops", "_rt"}}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Names the generated C, C++ and Python code cannot take for an op or an argument: keywords of
# the three languages, and what the generated functions name themselves (`stream`, the CUDA
# stream of every C entry point; `out`, the refused out= keyword of the Python helpers).
_CPP_KEYWORD_TEXT = """
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
nullptr operator or or_eq private protected public register reinterpret_cast requires restrict
return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq
"""
_CPP_KEYWORDS = frozenset(_CPP_KEYWORD_TEXT.split())
_RESERVED = _CPP_KEYWORDS | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
_RESERVED_ARGS = _RESERVED | {"stream", "out"}
_RESERVED_OUTPUTS = _RESERVED | {"stream"}
_TOP_KEYS = {"version", "dtype_sets", "ops"}
_ARG = re.compile(
    r"^(Tensor(?:\([a-z]!\))?\??|int\[\]|int\??|float\??|bool|str)\s+([a-z][a-z0-9_]*)$"
)


@dataclass(frozen=True)
class Arg:
    """One argument of an op: its type, whether optional or updated in place, and its checks."""

    name: str
    type: str  # Tensor, int, float, bool, int[], str (without the ? of optional)
    optional: bool = False
    mutable: bool = False
    checks: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_tensor(self) -> bool:
        """Whether the argument is a tensor (else a scalar, list or string)."""
        return self.type == "Tensor"


@dataclass(frozen=True)
class Output:
    """One output: its name and the rule giving its shape and dtype."""

    name: str
    rule: str
    spec: Any


@dataclass(frozen=True)
class Call:
    """A call of an op of the table inside a derivative rule, and the output taken from it."""

    op: str
    args: Mapping[str, str]
    output: str


@dataclass(frozen=True)
class Derivative:
    """A backward or forward-mode rule, in one of three forms: linear factors; one call of
    another op whose outputs give several targets (``op``, ``args``, ``outputs``); or, per
    target, the sum of one or more calls (``each``; a backward sums them to the input's shape)."""

    linear: Mapping[str, str | int] | None = None
    op: str | None = None
    args: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    each: Mapping[str, tuple[Call, ...]] | None = None

    @property
    def targets(self) -> tuple[str, ...]:
        """The inputs (backward) or outputs (forward mode) the rule gives derivatives of."""
        if self.linear is not None:
            return tuple(self.linear)
        if self.each is not None:
            return tuple(self.each)
        return tuple(self.outputs)

    @property
    def sources(self) -> set[str]:
        """The names the rule reads: inputs, outputs, scalars, grads or tangents."""
        if self.linear is not None:
            return {str(f) for f in self.linear.values() if f != 1}
        if self.each is not None:
            return {src for calls in self.each.values() for c in calls for src in c.args.values()}
        return set(self.args.values())


@dataclass(frozen=True)
class Param:
    """A parameter of a framework function: name, default source text, keyword-only."""

    name: str
    default: str | None = None
    keyword_only: bool = False


@dataclass(frozen=True)
class Function:
    """A framework function built on an op: its parameters, the op's arguments, the result."""

    name: str
    params: tuple[Param, ...]
    doc: str
    args: Mapping[str, str]
    returns: str | tuple[str, ...]
    promote: tuple[str, ...] = ()
    # MindSpore only (torch always does this): 0-d tensor operands promote as Python numbers do.
    zero_dim_as_number: bool = False
    # MindSpore only: intervals a number parameter must lie in, as the framework's op refuses
    # values outside them (``ops.batch_norm``: eps in (0, 1]); parameter name -> "(0, 1]".
    ranges: Mapping[str, str] = field(default_factory=dict)
    # MindSpore only: tensor parameters that must share one dtype, as the framework's op refuses
    # a mix (``ops.rms_norm``: x and gamma) where opforge's kernel would take it.
    same_dtype: tuple[str, ...] = ()
    # torch only: the framework's call takes ``out=`` (``torch.add(a, b, out=t)``). The function
    # takes ``out=None``, keyword-only, and refuses a tensor naming itself, as opforge returns
    # new tensors: without it, Python's own "unexpected keyword argument" would be the answer.
    takes_out: bool = False
    # torch only: check name (``check_names``) -> the exception torch's own call raises where
    # that check fails, when it is not the one opforge raises by default (``_fake_checks``).
    raises: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Op:
    """One op of the table."""

    name: str
    doc: str
    args: tuple[Arg, ...]
    outputs: tuple[Output, ...]
    checks: tuple[Mapping[str, Any], ...] = ()
    backward: Derivative | None = None
    jvp: Derivative | None = None
    functions: Mapping[str, tuple[Function, ...]] = field(default_factory=dict)

    def arg(self, name: str) -> Arg:
        """The argument called ``name``."""
        return next(a for a in self.args if a.name == name)

    @property
    def tensors(self) -> tuple[Arg, ...]:
        """The tensor arguments, in order."""
        return tuple(a for a in self.args if a.is_tensor)

    @property
    def scalars(self) -> tuple[Arg, ...]:
        """The non-tensor arguments, in order."""
        return tuple(a for a in self.args if not a.is_tensor)

    @property
    def updated(self) -> tuple[Arg, ...]:
        """The tensors the op updates in place (``Tensor(a!)``), in order."""
        return tuple(a for a in self.args if a.mutable)

    @property
    def update_flag(self) -> Arg | None:
        """The bool argument under which the op updates them (``updates``); None: every call."""
        return next((a for a in self.args if "updates" in a.checks), None)

    @property
    def differentiable(self) -> tuple[str, ...]:
        """The inputs the backward gives gradients for (empty: not differentiable)."""
        return () if self.backward is None else self.backward.targets

    @property
    def class_name(self) -> str:
        """The op's name in CamelCase (the C++ argument struct)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


def check_name(owner: str, key: str) -> str:
    """The name a framework function's ``raises`` gives a check of an argument or output:
    ``<name>.<key>`` (``eps.min``, ``normalized_shape.suffix``, ``out.reduce``)."""
    return f"{owner}.{key}"


def check_names(op: Op) -> tuple[str, ...]:
    """The names of ``op``'s checks in ``raises``: one per check key of an argument
    (``eps.min``), ``<argument>.suffix.longer`` for a suffix longer than its tensor's dims (a
    case of ``<argument>.suffix`` that torch's rms_norm refuses apart), each op-level rule by
    its own name (``together``), and ``<output>.reduce`` for a reduction over nothing."""
    names = [check_name(a.name, key) for a in op.args for key in a.checks if key not in _QUALIFIERS]
    names += [check_name(a.name, "suffix.longer") for a in op.args if "suffix" in a.checks]
    names += [next(iter(rule)) for rule in op.checks]
    names += [check_name(o.name, "reduce") for o in op.outputs if o.rule == "reduce"]
    return tuple(names)


@dataclass(frozen=True)
class OpTable:
    """The whole table: dtype sets and ops, in file order."""

    path: Path
    dtype_sets: Mapping[str, tuple[str, ...]]
    ops: Mapping[str, Op]


def load(path: Path) -> OpTable:
    """Read and validate the op table at ``path``."""
    return parse(path, read_yaml_file(path))


def parse(path: Path, data: object) -> OpTable:
    """Validate the parsed YAML of an op table."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping with `version`, `dtype_sets` and `ops`",
            hint=_KEYS_HINT,
        )
    unknown = sorted(str(k) for k in data if k not in _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: unknown key", hint=_KEYS_HINT)
    if data.get("version") != VERSION:
        raise ConfigError(
            f"{path}: version: expected {VERSION}, got {data.get('version')!r}",
            hint=f"this opforge reads op tables of version {VERSION}",
        )
    sets = data.get("dtype_sets", {})
    if not isinstance(sets, dict):
        raise ConfigError(
            f"{path}: dtype_sets: expected a mapping of name -> dtypes",
            hint=_KEYS_HINT,
        )
    dtype_sets: dict[str, tuple[str, ...]] = {}
    for name, dtypes in sets.items():
        if not isinstance(dtypes, list) or not dtypes or not set(dtypes) <= set(DTYPES):
            raise ConfigError(
                f"{path}: dtype_sets.{name}: expected a list drawn from {DTYPES}",
                hint=_KEYS_HINT,
            )
        dtype_sets[str(name)] = tuple(dtypes)
    raw_ops = data.get("ops")
    if not isinstance(raw_ops, dict) or not raw_ops:
        raise ConfigError(
            f"{path}: ops: expected a mapping of op name -> entry",
            hint=_KEYS_HINT,
        )
    ops = {str(name): _op(path, str(name), raw, dtype_sets) for name, raw in raw_ops.items()}
    table = OpTable(path, dtype_sets, ops)
    for op in ops.values():
        for kind in ("backward", "jvp"):
            _check_derivative(table, op, kind, getattr(op, kind))
    return table


class _Where:
    """The key path of a value, for error messages."""

    def __init__(self, path: Path, key: str) -> None:
        self.path, self.key = path, key

    def __truediv__(self, key: object) -> _Where:
        return _Where(self.path, f"{self.key}.{key}")

    def error(self, message: str, hint: str | None = None) -> ConfigError:
        return ConfigError(f"{self.path}: {self.key}: {message}", hint=hint)


def _mapping(where: _Where, value: object, allowed: set[str] | None = None) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error("expected a mapping")
    if allowed is not None:
        unknown = sorted(set(map(str, value)) - allowed)
        if unknown:
            raise (where / unknown[0]).error(
                "unknown key", hint=f"allowed: {', '.join(sorted(allowed))}"
            )
    return value


def _is_literal(source: str) -> bool:
    """Whether ``source`` is a plain literal: a number (signed), a string, None, True or False."""
    try:
        value = ast.literal_eval(source)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return value is None or isinstance(value, (bool, int, float, str))


def _check_doc(where: _Where, doc: str) -> None:
    """A description goes into a C comment and a Python docstring as written: text that would
    end either, a backslash (an escape in the docstring) or a control character is refused."""
    for bad, what in (("*/", "'*/'"), ('"""', '\'"""\''), ("\\", "a backslash")):
        if bad in doc:
            raise where.error(f"{what} would end or escape the generated comment or docstring")
    if any(ord(c) < 0x20 and c != "\n" for c in doc) or "\x7f" in doc:
        raise where.error("a control character in the description")


def _signature(where: _Where, name: str, text: object) -> tuple[list[Arg], list[str]]:
    if not isinstance(text, str):
        raise where.error("expected `name(Type arg, ...) -> Type out`")
    text = " ".join(text.split())
    found = re.match(rf"^{re.escape(name)}\((.*)\) -> (.+)$", text)
    if not found:
        raise where.error(f"expected `{name}(Type arg, ...) -> Type out`, got {text!r}")
    args: list[Arg] = []
    for part in filter(None, (p.strip() for p in found.group(1).split(","))):
        arg = _ARG.match(part)
        if not arg:
            raise where.error(
                f"cannot read argument {part!r} (types: Tensor, Tensor?, {SCALAR_TYPES})"
            )
        kind, arg_name = arg.groups()
        mutable = "!" in kind
        optional = kind.endswith("?")
        base = kind.split("(")[0].rstrip("?")
        if base == "int" and kind == "int[]":
            base = "int[]"
        args.append(Arg(arg_name, base, optional, mutable))
    returns = found.group(2).strip()
    if returns.startswith("(") and returns.endswith(")"):
        returns = returns[1:-1]
    outputs = []
    for part in (p.strip() for p in returns.split(",")):
        out = re.match(r"^Tensor ([a-z][a-z0-9_]*)$", part)
        if not out:
            raise where.error(f"cannot read output {part!r} (expected `Tensor name`)")
        outputs.append(out.group(1))
    for reserved, kind in ((_RESERVED_ARGS, [a.name for a in args]), (_RESERVED_OUTPUTS, outputs)):
        taken = next((n for n in kind if n in reserved), None)
        if taken:
            raise where.error(
                f"{taken!r} is a keyword of C, C++ or Python, or a name the generated code "
                "uses itself (stream, and out= for an argument); rename it"
            )
    names = [a.name for a in args] + outputs
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise where.error(f"{duplicate!r} is named twice")
    return args, outputs


def _op(path: Path, name: str, raw: object, dtype_sets: Mapping[str, tuple]) -> Op:
    where = _Where(path, f"ops.{name}")
    if not _NAME.fullmatch(name):
        raise where.error("op names are lowercase letters, digits and underscores")
    if name in _RESERVED:
        raise where.error(f"{name!r} is a keyword of C, C++ or Python, which the generated code is")
    raw = _mapping(where, raw, _OP_KEYS)
    doc = raw.get("doc")
    if not isinstance(doc, str) or not doc.strip():
        raise (where / "doc").error("expected a description of the op")
    _check_doc(where / "doc", doc)
    args, output_names = _signature(where / "signature", name, raw.get("signature"))
    by_name = {a.name: a for a in args}
    tensors = {a.name for a in args if a.is_tensor}
    inputs = _mapping(where / "inputs", raw.get("inputs"), tensors)
    scalars = _mapping(where / "scalars", raw.get("scalars"), set(by_name) - tensors)
    resolved: list[Arg] = []
    for arg in args:
        if arg.is_tensor:
            checks = _mapping(where / "inputs" / arg.name, inputs.get(arg.name), _TENSOR_CHECKS)
            _check_tensor(where / "inputs" / arg.name, checks, by_name, dtype_sets)
            if not checks.keys() & {"dtypes", "like", "channels", "shape", "batch", "broadcast"}:
                raise (where / "inputs" / arg.name).error(
                    "say what the tensor must be (dtypes, like, channels, shape, batch or broadcast)"
                )
        else:
            checks = _mapping(where / "scalars" / arg.name, scalars.get(arg.name), _SCALAR_CHECKS)
            _check_scalar(where / "scalars" / arg.name, arg, checks, by_name)
        resolved.append(Arg(arg.name, arg.type, arg.optional, arg.mutable, checks))
    outputs_raw = _mapping(where / "outputs", raw.get("outputs"), set(output_names))
    outputs = []
    for out_name in output_names:
        rule = _mapping(where / "outputs" / out_name, outputs_raw.get(out_name), _OUTPUT_RULES)
        if len(rule) != 1:
            raise (where / "outputs" / out_name).error(
                f"give exactly one shape rule ({', '.join(sorted(_OUTPUT_RULES))})"
            )
        ((kind, spec),) = rule.items()
        _check_output(where / "outputs" / out_name, kind, spec, by_name)
        outputs.append(Output(out_name, kind, spec))
    checks = raw.get("checks") or []
    if not isinstance(checks, list):
        raise (where / "checks").error("expected a list")
    for i, check in enumerate(checks):
        _check_op_rule(where / "checks" / i, check, by_name)
    functions = {
        framework: tuple(
            _function(where / framework / i, entry, by_name, output_names, framework)
            for i, entry in enumerate(_list(where / framework, raw.get(framework)))
        )
        for framework in FRAMEWORKS
    }
    op = Op(
        name,
        " ".join(doc.split()),
        tuple(resolved),
        tuple(outputs),
        tuple(checks),
        _derivative(where / "backward", raw.get("backward")),
        _derivative(where / "jvp", raw.get("jvp")),
        functions,
    )
    _check_raises(where / "torch", op)
    return op


def _check_raises(where: _Where, op: Op) -> None:
    """The torch functions' ``raises`` name checks the op makes. The op's fake kernel, which
    every call of the op shares, raises them too: one function per op may give them."""
    known = check_names(op)
    giving = [i for i, fn in enumerate(op.functions["torch"]) if fn.raises]
    if len(giving) > 1:
        raise (where / giving[1] / "raises").error(
            "only one torch function of an op may give raises (the op's fake kernel raises them)"
        )
    for i in giving:
        for name, exception in op.functions["torch"][i].raises.items():
            if name not in known:
                raise (where / i / "raises" / exception).error(
                    f"{name!r} is no check of {op.name}", hint=f"its checks: {', '.join(known)}"
                )


def _list(where: _Where, value: object) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error("expected a list of functions")
    return value


def _tensor_ref(where: _Where, value: object, by_name: Mapping[str, Arg]) -> None:
    if not isinstance(value, str) or value not in by_name or not by_name[value].is_tensor:
        raise where.error(f"expected the name of a tensor argument, got {value!r}")


def _check_tensor(where, checks, by_name, dtype_sets) -> None:
    for key, value in checks.items():
        if key == "dtypes" and value not in dtype_sets:
            raise (where / key).error(
                f"unknown dtype set {value!r}", hint=f"defined: {', '.join(dtype_sets)}"
            )
        if key in ("like", "channels", "broadcast", "param_dtype"):
            _tensor_ref(where / key, value, by_name)
        if key == "param_dtype" and not checks.keys() & {"channels", "shape"}:
            raise (where / key).error("applies to channels or shape parameters")
        if key == "batch":
            spec = _mapping(where / key, value, {"of", "normalized"})
            _tensor_ref(where / key / "of", spec.get("of"), by_name)
            if spec.get("normalized") not in by_name or by_name[spec["normalized"]].type != "int[]":
                raise (where / key / "normalized").error("expected the name of an int[] argument")
        if key == "shape" and (value not in by_name or by_name[value].type != "int[]"):
            raise (where / key).error(f"expected the name of an int[] argument, got {value!r}")
        if key == "rank" and not (
            isinstance(value, list)
            and len(value) == 2
            and all(isinstance(v, int) and v >= 0 for v in value)
            and value[0] <= value[1]
        ):
            raise (where / key).error("expected [min, max] ranks")


def _check_scalar(where, arg: Arg, checks, by_name) -> None:
    for key, value in checks.items():
        if key in ("dim", "suffix"):
            _tensor_ref(where / key, value, by_name)
            wanted = ("int",) if key == "dim" else ("int[]",)
            if arg.type not in wanted:
                raise (where / key).error(f"applies to {' or '.join(wanted)} arguments")
        if key == "min" and not isinstance(value, (int, float)):
            raise (where / key).error("expected a number")
        if key == "finite" and value is not True:
            raise (where / key).error("expected true")
        if key == "values" and (
            arg.type != "str"
            or not isinstance(value, list)
            or not all(isinstance(v, str) for v in value)
        ):
            raise (where / key).error("expected a list of strings for a str argument")
        if key == "updates" and (
            arg.type != "bool"
            or not isinstance(value, list)
            or not all(v in by_name and by_name[v].mutable for v in value)
        ):
            raise (where / key).error(
                "expected, for a bool argument, the list of Tensor(a!) arguments it has updated"
            )
        if key == "from" and (
            "updates" not in checks
            or not isinstance(value, list)
            or not value
            or not all(v in by_name and by_name[v].is_tensor for v in value)
        ):
            raise (where / key).error(
                "expected, beside updates, the list of tensor arguments the update is computed from"
            )
    if arg.type == "str" and "values" not in checks:
        raise where.error("a str argument needs its `values`")


def _check_output(where, kind, spec, by_name) -> None:
    if kind in ("like", "channels"):
        _tensor_ref(where / kind, spec, by_name)
    elif kind == "broadcast":
        if not isinstance(spec, list) or len(spec) != 2:
            raise (where / kind).error("expected [a, b]")
        for ref in spec:
            _tensor_ref(where / kind, ref, by_name)
    elif kind == "reduce":
        spec = _mapping(where / kind, spec, {"of", "dim", "keepdim"})
        _tensor_ref(where / kind / "of", spec.get("of"), by_name)
        for key, types in (("dim", ("int",)), ("keepdim", ("bool",))):
            if spec.get(key) not in by_name or by_name[spec[key]].type not in types:
                raise (where / kind / key).error(f"expected the name of a {types[0]} argument")
    elif kind == "batch":
        spec = _mapping(where / kind, spec, {"of", "normalized"})
        _tensor_ref(where / kind / "of", spec.get("of"), by_name)
        if spec.get("normalized") not in by_name:
            raise (where / kind / "normalized").error("expected the name of an int[] argument")
    elif kind == "shape" and (spec not in by_name or by_name[spec].type != "int[]"):
        raise (where / kind).error("expected the name of an int[] argument")


def _check_op_rule(where: _Where, check: object, by_name: Mapping[str, Arg]) -> None:
    check = _mapping(where, check, _OP_CHECKS)
    if len(check) != 1:
        raise where.error(f"give one rule ({', '.join(sorted(_OP_CHECKS))})")
    ((kind, spec),) = check.items()
    if kind == "together":
        if not isinstance(spec, list) or len(spec) < 2:
            raise (where / kind).error("expected two or more optional tensors")
        for ref in spec:
            _tensor_ref(where / kind, ref, by_name)
    elif kind == "required_unless":
        spec = _mapping(where / kind, spec, {"flag", "tensors"})
        if spec.get("flag") not in by_name or by_name[spec["flag"]].type != "bool":
            raise (where / kind / "flag").error("expected the name of a bool argument")
        for ref in spec.get("tensors") or []:
            _tensor_ref(where / kind / "tensors", ref, by_name)
    else:
        spec = _mapping(where / kind, spec, {"of", "min", "when"})
        _tensor_ref(where / kind / "of", spec.get("of"), by_name)
        if not isinstance(spec.get("min"), int):
            raise (where / kind / "min").error("expected an integer")
        if "when" in spec and (spec["when"] not in by_name or by_name[spec["when"]].type != "bool"):
            raise (where / kind / "when").error("expected the name of a bool argument")


def _derivative(where: _Where, raw: object) -> Derivative | None:
    if raw is None:
        return None
    raw = _mapping(where, raw, {"linear", "op", "args", "outputs", "each"})
    if "linear" in raw:
        if set(raw) != {"linear"}:
            raise where.error("`linear` stands alone")
        return Derivative(linear=_mapping(where / "linear", raw["linear"]))
    if "each" in raw:
        if set(raw) != {"each"}:
            raise where.error("`each` stands alone")
        each = {}
        for target, calls in _mapping(where / "each", raw["each"]).items():
            calls = calls if isinstance(calls, list) else [calls]
            parsed = []
            for i, call in enumerate(calls):
                call = _mapping(where / "each" / target / i, call, {"op", "args", "output"})
                if not isinstance(call.get("op"), str) or not isinstance(call.get("output"), str):
                    raise (where / "each" / target / i).error("expected {op, args, output}")
                parsed.append(
                    Call(
                        call["op"],
                        _mapping(where / "each" / target / i / "args", call.get("args")),
                        call["output"],
                    )
                )
            each[str(target)] = tuple(parsed)
        return Derivative(each=each)
    if not isinstance(raw.get("op"), str):
        raise (where / "op").error("expected the name of an op of this table")
    return Derivative(
        op=raw["op"],
        args=_mapping(where / "args", raw.get("args")),
        outputs=_mapping(where / "outputs", raw.get("outputs")),
    )


def _check_derivative(table: OpTable, op: Op, kind: str, rule: Derivative | None) -> None:
    if rule is None:
        return
    where = _Where(table.path, f"ops.{op.name}.{kind}")
    inputs = {a.name for a in op.tensors}
    scalars = {a.name: a for a in op.scalars}
    outputs = {o.name for o in op.outputs}
    targets = inputs if kind == "backward" else outputs
    seeds = (
        {f"grad_{o}" for o in outputs} if kind == "backward" else {f"tangent_{i}" for i in inputs}
    )
    if rule.linear is not None:
        for name, factor in rule.linear.items():
            if name not in inputs:
                raise (where / "linear" / name).error("not a tensor input of the op")
            if factor != 1 and (factor not in scalars or scalars[factor].type != "float"):
                raise (where / "linear" / name).error("expected 1 or the name of a float argument")
        return
    known = inputs | set(scalars) | outputs | seeds
    what = "grad_<output>" if kind == "backward" else "tangent_<input>"
    if rule.each is not None:
        for target, calls in rule.each.items():
            if target not in targets:
                raise (where / "each" / target).error(
                    f"not {'an input' if kind == 'backward' else 'an output'} of {op.name}"
                )
            for i, call in enumerate(calls):
                at = where / "each" / target / i
                callee = _check_call(table, at, call.op, call.args, known, what)
                if call.output not in {o.name for o in callee.outputs}:
                    raise (at / "output").error(f"{callee.name} has no output {call.output!r}")
        return
    callee = _check_call(table, where, rule.op, rule.args, known, what)
    callee_outputs = {o.name for o in callee.outputs}
    for target, source in rule.outputs.items():
        if target not in targets:
            raise (where / "outputs" / target).error(
                f"not {'an input' if kind == 'backward' else 'an output'} of {op.name}"
            )
        if source not in callee_outputs:
            raise (where / "outputs" / target).error(f"{callee.name} has no output {source!r}")


def _check_call(
    table: OpTable, where: _Where, name: str | None, args: Mapping, known: set[str], what: str
) -> Op:
    callee = table.ops.get(name or "")
    if callee is None:
        raise (where / "op").error(f"unknown op {name!r}")
    callee_args = {a.name for a in callee.args}
    if set(args) != callee_args:
        missing = sorted(callee_args - set(args)) or sorted(set(args) - callee_args)
        raise (where / "args").error(
            f"must give exactly the arguments of {callee.name} "
            f"({', '.join(a.name for a in callee.args)}); check {missing[0]!r}"
        )
    for arg_name, source in args.items():
        if source not in known:
            raise (where / "args" / arg_name).error(
                f"{source!r} is not an input, output, scalar or {what}"
            )
    return callee


def _function(
    where: _Where, raw: object, by_name: Mapping[str, Arg], outputs: list[str], framework: str
) -> Function:
    raw = _mapping(where, raw, _FUNCTION_KEYS)
    text = raw.get("def")
    try:
        tree = ast.parse(f"def {text}: pass") if isinstance(text, str) else None
    except SyntaxError:
        tree = None
    if tree is None or not isinstance(tree.body[0], ast.FunctionDef):
        raise (where / "def").error(
            f"expected a Python signature like `name(a, b=1)`, got {text!r}"
        )
    fn = tree.body[0]
    spec = fn.args
    defaults = [None] * (len(spec.args) - len(spec.defaults)) + list(spec.defaults)
    params = [
        Param(a.arg, None if d is None else ast.unparse(d))
        for a, d in zip(spec.args, defaults, strict=True)
    ]
    params += [
        Param(a.arg, None if d is None else ast.unparse(d), keyword_only=True)
        for a, d in zip(spec.kwonlyargs, spec.kw_defaults, strict=True)
    ]
    for param in params:
        if param.default is not None and not _is_literal(param.default):
            raise (where / "def").error(
                f"the default of {param.name!r} must be a literal (a number, a string, None, "
                f"True or False), got {param.default!r}"
            )
    if spec.vararg or spec.kwarg or spec.posonlyargs:
        raise (where / "def").error("*args, **kwargs and positional-only parameters are not taken")
    doc = raw.get("doc")
    if not isinstance(doc, str) or not doc.strip():
        raise (where / "doc").error("expected a docstring")
    _check_doc(where / "doc", doc)
    args = _mapping(where / "args", raw.get("args"))
    if set(args) != set(by_name):
        missing = sorted(set(by_name) - set(args)) or sorted(set(args) - set(by_name))
        raise (where / "args").error(f"must give every argument of the op; check {missing[0]!r}")
    names = {p.name for p in params} | EXPRESSION_MODULES[framework]
    for arg_name, expr in args.items():
        _check_expression(where / "args" / arg_name, expr, names)
        # torch's helper copies what the kernel updated back into the caller's tensor of the
        # argument's name (a float32 copy of a 2-byte statistic); nothing else would.
        if (
            by_name[arg_name].mutable
            and str(expr) != arg_name
            and (framework != "torch" or arg_name not in {p.name for p in params})
        ):
            raise (where / "args" / arg_name).error(
                "an argument the op updates in place is the function's parameter of its "
                "name, or (torch only) an expression of it, copied back after the call"
            )
    returns = raw.get("returns")
    if isinstance(returns, list):
        mutable = {a.name for a in by_name.values() if a.mutable}
        for i, item in enumerate(returns):
            if item not in outputs and item not in mutable:
                _check_expression(where / "returns" / i, item, names | set(outputs))
        returns = tuple(returns)
    elif isinstance(returns, str):
        if returns not in outputs:
            _check_expression(where / "returns", returns, names | set(outputs))
    else:
        raise (where / "returns").error("expected an output name, a list of them or an expression")
    promote = raw.get("promote") or []
    if not isinstance(promote, list) or any(p not in names for p in promote):
        raise (where / "promote").error("expected a list of the function's parameters")
    if promote and isinstance(returns, tuple):
        # The adapters cast a promoted op's one result back to the promoted dtype.
        raise (where / "promote").error("expected a function with one result (returns: a name)")
    zero_dim = raw.get("zero_dim_as_number", False)
    if not isinstance(zero_dim, bool) or (zero_dim and (framework != "mindspore" or not promote)):
        raise (where / "zero_dim_as_number").error(
            "expected true or false, on a mindspore function that promotes"
        )
    ranges = _mapping(where / "ranges", raw.get("ranges") or {})
    for name, interval in ranges.items():
        if framework != "mindspore" or name not in {p.name for p in params}:
            raise (where / "ranges" / name).error("expected a parameter of a mindspore function")
        if not isinstance(interval, str) or not _INTERVAL.fullmatch(interval):
            raise (where / "ranges" / name).error(
                f'expected an interval such as "(0, 1]", got {interval!r}'
            )
    same_dtype = raw.get("same_dtype", [])
    param_names = [p.name for p in params]
    if same_dtype != [] and (
        framework != "mindspore"
        or not isinstance(same_dtype, list)
        or not all(isinstance(name, str) and name in param_names for name in same_dtype)
        or len(set(same_dtype)) != len(same_dtype)
        or len(same_dtype) < 2
    ):
        raise (where / "same_dtype").error(
            "expected two or more distinct parameters of a mindspore function"
        )
    takes_out = raw.get("takes_out", False)
    if not isinstance(takes_out, bool) or (takes_out and framework != "torch"):
        raise (where / "takes_out").error("expected true or false, on a torch function")
    if takes_out and "out" in {p.name for p in params}:
        raise (where / "def").error(
            "a function with takes_out gets its `out=None` from the generator: leave it out of def"
        )
    raises = _raises(where / "raises", raw.get("raises"), framework)
    return Function(
        fn.name,
        tuple(params),
        " ".join(doc.split()),
        dict(args),
        returns,
        tuple(promote),
        zero_dim,
        dict(ranges),
        tuple(same_dtype),
        takes_out,
        raises,
    )


def _raises(where: _Where, raw: object, framework: str) -> dict[str, str]:
    """``{ValueError: [eps.min, together]}`` as check name -> exception (names checked against
    the op's checks once the op is read: ``_check_raises``)."""
    given = _mapping(where, raw, set(EXCEPTIONS))
    if given and framework != "torch":
        raise where.error("expected on a torch function only")
    raises: dict[str, str] = {}
    for exception, names in given.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise (where / exception).error("expected a list of check names (eps.min, together)")
        for name in names:
            if name in raises:
                raise (where / exception).error(f"{name!r} is given {raises[name]} already")
            raises[name] = str(exception)
    return raises


def _check_expression(where: _Where, expr: object, names: set[str]) -> None:
    if not isinstance(expr, (str, int, float)) or isinstance(expr, bool):
        raise where.error(f"expected a parameter name or a Python expression, got {expr!r}")
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError:
        raise where.error(f"not a Python expression: {expr!r}") from None
    free = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unknown = sorted(free - names - {"None", "True", "False", "tuple", "len", "float", "int"})
    if unknown:
        raise where.error(f"{unknown[0]!r} is not a parameter of the function")
