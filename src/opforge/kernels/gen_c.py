"""The kernel library's C ABI, generated from the op table.

Three files: ``opforge/ops.h`` (the declarations, installed with the library's headers),
``ops_args.hpp`` (one argument struct per op, what the CPU and CUDA kernels receive, and their
declarations) and ``ops_api.cpp`` (each ``opforge_<op>`` and ``opforge_<op>_infer``: argument
reading, the table's checks, the output shape rules, dispatch).
"""

from __future__ import annotations

import textwrap

from opforge.kernels.checks import Check, argument_checks
from opforge.kernels.optable import Arg, Op, OpTable

GENERATED = "Generated from kernels/ops.yaml by `python -m opforge.kernels`; do not edit."

_DTYPE_ENUM = {
    "float32": "DType::kFloat32",
    "float16": "DType::kFloat16",
    "bfloat16": "DType::kBFloat16",
    "int64": "DType::kInt64",
}


def c_params(op: Op, *, infer: bool = False) -> list[str]:
    """The C parameters of ``opforge_<op>`` (or its ``_infer`` variant), in order."""
    params = []
    for arg in op.args:
        if arg.is_tensor:
            params.append(f"{'DLTensor*' if arg.mutable else 'const DLTensor*'} {arg.name}")
        elif arg.type == "int[]":
            params += [f"const int64_t* {arg.name}", f"int64_t {arg.name}_len"]
        else:
            params.append(f"{_C_SCALAR[(arg.type, arg.optional)]} {arg.name}")
    params += [f"DLTensor* {out.name}" for out in op.outputs]
    if not infer:
        params.append("void* stream")
    return params


_C_SCALAR = {
    ("int", False): "int64_t",
    ("int", True): "const int64_t*",
    ("float", False): "double",
    ("float", True): "const double*",
    ("bool", False): "int",
    ("str", False): "int",
}

_MEMBER = {
    ("int", False): "int64_t {} = 0;",
    ("int", True): "std::optional<int64_t> {};",
    ("float", False): "double {} = 0.0;",
    ("float", True): "std::optional<double> {};",
    ("bool", False): "bool {} = false;",
    ("str", False): "int {} = 0;",
    ("int[]", False): "std::vector<int64_t> {};",
}


def enum_constant(op: Op, arg: Arg, value: str) -> str:
    """The C constant of one value of a str argument, e.g. OPFORGE_GELU_APPROXIMATE_TANH."""
    return f"OPFORGE_{op.name}_{arg.name}_{value}".upper()


def _comment(text: str, indent: str = "") -> list[str]:
    lines = textwrap.wrap(text, 96 - len(indent))
    return [f"{indent}/*"] + [f"{indent} * {line}" for line in lines] + [f"{indent} */"]


def header(table: OpTable) -> str:
    """``opforge/ops.h``: every op's declarations (included by ``opforge/opforge.h``)."""
    lines = [
        f"/* {GENERATED} */",
        "#ifndef OPFORGE_OPS_H_",
        "#define OPFORGE_OPS_H_",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        "",
    ]
    for op in table.ops.values():
        lines += _comment(op.doc)
        for arg in op.args:
            if arg.type == "str":
                for i, value in enumerate(arg.checks["values"]):
                    lines.append(f"#define {enum_constant(op, arg, value)} {i}")
        lines.append(f"OPFORGE_API opforge_status opforge_{op.name}({', '.join(c_params(op))});")
        lines.append(
            "/* Checks the arguments of opforge_"
            f"{op.name} and describes its outputs (see opforge_infer in opforge.h). */"
        )
        lines.append(
            f"OPFORGE_API opforge_status opforge_{op.name}_infer({', '.join(c_params(op, infer=True))});"
        )
        lines.append("")
    lines += ["#ifdef __cplusplus", "}", "#endif", "", "#endif /* OPFORGE_OPS_H_ */", ""]
    return "\n".join(lines)


def args_header(table: OpTable) -> str:
    """``ops_args.hpp``: the argument struct of every op and the kernels' declarations."""
    lines = [
        f"// {GENERATED}",
        "// Each op's kernels receive its arguments checked: tensors are nullptr when an optional",
        "// one is absent, dims are normalised, outputs have the shapes the table gives.",
        "#pragma once",
        "",
        "#include <cstdint>",
        "#include <optional>",
        "#include <vector>",
        "",
        '#include "common/tensor.hpp"',
        "",
        "namespace opforge {",
        "namespace ops {",
    ]
    for op in table.ops.values():
        lines.append(f"struct {op.class_name} {{")
        for arg in op.args:
            if arg.is_tensor:
                const = "" if arg.mutable else "const "
                lines.append(f"  {const}Tensor* {arg.name} = nullptr;")
            else:
                lines.append("  " + _MEMBER[(arg.type, arg.optional)].format(arg.name))
        lines += [f"  Tensor* {out.name} = nullptr;" for out in op.outputs]
        lines.append("};")
    lines += ["}  // namespace ops", "", "namespace cpu {"]
    lines += [
        f"opforge_status {op.name}(const ops::{op.class_name}& args);" for op in table.ops.values()
    ]
    lines += ["}  // namespace cpu", "", "#ifdef OPFORGE_HAVE_CUDA", "namespace cuda {"]
    lines += [
        f"opforge_status {op.name}(const ops::{op.class_name}& args, void* stream);"
        for op in table.ops.values()
    ]
    lines += ["}  // namespace cuda", "#endif", "", "}  // namespace opforge", ""]
    return "\n".join(lines)


def api_source(table: OpTable) -> str:
    """``ops_api.cpp``: every op's C entry points."""
    lines = [
        f"// {GENERATED}",
        '#include "common/call.hpp"',
        '#include "ops_args.hpp"',
        "",
        "#ifdef OPFORGE_HAVE_CUDA",
        "#define OPFORGE_CUDA_CALL(expr) opforge::cuda::expr",
        "#else",
        "#define OPFORGE_CUDA_CALL(expr) ((void)stream, OPFORGE_ERROR_UNSUPPORTED)",
        "#endif",
        "",
        "namespace {",
        "using opforge::Call;",
        "using opforge::DType;",
        "",
    ]
    for op in table.ops.values():
        lines += _prepare(table, op)
    lines += ["}  // namespace", "", 'extern "C" {', ""]
    for op in table.ops.values():
        names = [p.rsplit(" ", 1)[1].lstrip("*") for p in c_params(op, infer=True)]
        call_args = ", ".join(["call", "args", "storage", *names])
        storage = len(op.tensors) + len(op.outputs)
        for infer in (False, True):
            suffix = "_infer" if infer else ""
            lines.append(
                f"OPFORGE_API opforge_status opforge_{op.name}{suffix}("
                f"{', '.join(c_params(op, infer=infer))}) {{"
            )
            lines.append(f'  Call call("{op.name}", Call::{"kInfer" if infer else "kRun"});')
            lines.append(f"  opforge::ops::{op.class_name} args;")
            lines.append(f"  opforge::Tensor storage[{storage}];")
            lines.append(f"  prepare_{op.name}({call_args});")
            if infer:
                lines.append("  return call.status();")
            else:
                lines.append(
                    f"  return call.run([&] {{ return opforge::cpu::{op.name}(args); }},\n"
                    f"                  [&] {{ return OPFORGE_CUDA_CALL({op.name}(args, stream)); }});"
                )
            lines += ["}", ""]
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)


def _q(text: str) -> str:
    return f'"{text}"'


def _a(name: str) -> str:
    return f"args.{name}"


def _no_overlap(written: list[str], read: list[str], updated: int) -> str:
    """The call refusing shared memory; the first ``updated`` of ``written`` are updated in
    place."""
    named = [", ".join(f"{{{_a(n)}, {_q(n)}}}" for n in names) for names in (written, read)]
    return f"call.no_overlap({{{named[0]}}}, {{{named[1]}}}{f', {updated}' if updated else ''});"


def _c_check(check: Check) -> str:
    """A check as the call of the library's ``Call`` method."""
    kind, spec = check.kind, check.spec
    name = check.arg.name if check.arg is not None else ""
    a, q = _a(name), _q(name)
    if kind == "dtypes":
        enums = ", ".join(_DTYPE_ENUM[d] for d in spec)
        return f"call.dtypes({a}, {q}, {{{enums}}}, {_q(', '.join(spec))});"
    if kind == "rank":
        return f"call.rank({a}, {q}, {spec[0]}, {spec[1]});"
    value = f"*{a}" if check.arg is not None and check.arg.optional else a
    guard = f"if ({a}) " if check.arg is not None and check.arg.optional else ""
    if kind == "dim":
        return f"{a} = call.dim({name}, {_a(spec)}, {_q(spec)}, {q});"
    if kind == "at_least":
        return f"{guard}call.at_least({value}, {spec}, {q});"
    if kind == "finite":
        return f"{guard}call.finite({value}, {q});"
    if kind == "choice":
        return f"call.choice({value}, {len(spec)}, {q}, {_q(', '.join(spec))});"
    if kind == "suffix":
        return f"call.suffix({value}, {q}, {_a(spec)}, {_q(spec)});"
    if kind in ("like", "broadcastable"):
        return f"call.{kind}({_a(spec)}, {_q(spec)}, {a}, {q});"
    if kind == "channels":
        ref, like = spec
        return f"call.channels({_a(ref)}, {_q(ref)}, {a}, {q}{', true' if like else ''});"
    if kind == "batch_shaped":
        of, normalized = spec
        return (
            f"call.shaped(call.batch_shape({_a(of)}, {_a(normalized)}), "
            f"{_q('the leading dims of ' + of)}, {a}, {q});"
        )
    if kind == "shaped":
        ref, like = spec
        return f"call.shaped({_a(ref)}, {_q(ref)}, {a}, {q}{f', {_a(like)}' if like else ''});"
    if kind == "together":
        named = ", ".join(f"{{{_a(t)}, {_q(t)}}}" for t in spec)
        return f"call.together({{{named}}});"
    if kind == "required_unless":
        named = ", ".join(f"{{{_a(t)}, {_q(t)}}}" for t in spec["tensors"])
        return f"call.required_unless({_a(spec['flag'])}, {_q(spec['flag'])}, {{{named}}});"
    when = _a(spec["when"]) if "when" in spec else "true"
    return f"call.per_channel_count({_a(spec['of'])}, {_q(spec['of'])}, {spec['min']}, {when});"


def _prepare(table: OpTable, op: Op) -> list[str]:
    params = ", ".join(c_params(op, infer=True))
    body: list[str] = []
    slot = 0
    for arg in op.tensors:
        body.append(
            f"  {_a(arg.name)} = call.input({arg.name}, {_q(arg.name)}, storage[{slot}], "
            f"{'true' if arg.optional else 'false'});"
        )
        slot += 1
    for arg in op.scalars:
        if arg.type == "int[]":
            body.append(
                f"  {_a(arg.name)} = call.int_list({arg.name}, {arg.name}_len, {_q(arg.name)});"
            )
        elif "dim" in arg.checks:
            continue  # read by call.dim below, normalised
        elif arg.optional:
            body.append(f"  if ({arg.name} != nullptr) {_a(arg.name)} = *{arg.name};")
        else:
            cast = "!= 0" if arg.type == "bool" else ""
            body.append(f"  {_a(arg.name)} = {arg.name}{(' ' + cast) if cast else ''};")
    body += [f"  {_c_check(check)}" for check in argument_checks(table, op)]
    for out in op.outputs:
        shape, dtype = _output_rule(out.rule, out.spec)
        body.append(
            f"  {_a(out.name)} = call.output({out.name}, {_q(out.name)}, storage[{slot}], "
            f"{shape}, {dtype});"
        )
        slot += 1
    updated = [a.name for a in op.updated]
    outputs = [o.name for o in op.outputs]
    read = [a.name for a in op.tensors if not a.mutable]
    flag = op.update_flag
    if updated and flag is not None:
        # Without the flag nothing is updated: the statistics are read, and may share memory.
        body.append(f"  if ({_a(flag.name)}) {{")
        body.append(f"    {_no_overlap(updated + outputs, read, len(updated))}")
        body.append("  } else {")
        body.append(f"    {_no_overlap(outputs, read + updated, 0)}")
        body.append("  }")
    else:
        body.append(f"  {_no_overlap(updated + outputs, read, len(updated))}")
    return [
        f"void prepare_{op.name}(Call& call, opforge::ops::{op.class_name}& args, "
        f"opforge::Tensor* storage, {params}) {{",
        *body,
        "}",
        "",
    ]


def _output_rule(kind: str, spec) -> tuple[str, str]:
    if kind == "like":
        return f"call.shape_of({_a(spec)})", f"{_a(spec)}->dl_dtype"
    if kind == "broadcast":
        a, b = spec
        return (
            f"call.broadcast_shape({_a(a)}, {_q(a)}, {_a(b)}, {_q(b)})",
            f"{_a(a)}->dl_dtype",
        )
    if kind == "reduce":
        return (
            f"call.reduce_shape({_a(spec['of'])}, {_q(spec['of'])}, {_a(spec['dim'])}, "
            f"{_a(spec['keepdim'])})",
            "opforge::kInt64Type",
        )
    if kind == "channels":
        return f"call.channels_shape({_a(spec)})", "opforge::kFloat32Type"
    if kind == "batch":
        return (
            f"call.batch_shape({_a(spec['of'])}, {_a(spec['normalized'])})",
            "opforge::kFloat32Type",
        )
    return _a(spec), "opforge::kFloat32Type"
