"""The MindSpore adapter, generated from the op table.

``aot_ops.inc``: one AOT entry point per op, reading MindSpore's parameters in the op's layout
(tensor inputs, the attribute input, the outputs, then an updated copy of each tensor the op writes
in place, since MindSpore kernels never write their inputs) and calling ``opforge_<op>``.
``_signatures.py``: each op's C signature (for the ctypes checks) and layout.
``_ops.py``: per op, the shape and dtype inference and bprop of its ``ops.Custom`` primitive, a
compile-time argument check, and the ``opforge.mindspore`` functions of the table's entries.
"""

from __future__ import annotations

import ast

from opforge.kernels.gen_c import GENERATED
from opforge.kernels.optable import Function, Op, OpTable
from opforge.kernels.signatures import c_signatures, param_kind


def layout(op: Op, table: OpTable) -> dict[str, list]:
    """The op's MindSpore layout: tensors (name, optional, mutable, allowed dtypes) and scalars."""
    tensors = []
    for arg in op.tensors:
        allowed = arg.checks.get("dtypes")
        text = ", ".join(table.dtype_sets[allowed]) if allowed else "float32"
        tensors.append((arg.name, arg.optional, arg.mutable, text))
    scalars = [(arg.name, param_kind(arg), arg.checks.get("dim")) for arg in op.scalars]
    return {"tensors": tensors, "scalars": scalars}


def signatures_source(table: OpTable) -> str:
    """``_signatures.py``: C signatures and MindSpore layouts of every op."""
    layouts = {name: layout(op, table) for name, op in table.ops.items()}
    return f'"""{GENERATED}"""\n\nSIGNATURES = {c_signatures(table)!r}\n\nLAYOUTS = {layouts!r}\n'


# --- C++ ---


def _aot_function(op: Op) -> list[str]:
    tensors = op.tensors
    mutable = [a for a in tensors if a.mutable]
    n_in = len(tensors) + 1
    n_out = len(op.outputs) + len(mutable)
    attrs_index = len(tensors)
    lines = [
        f"// {', '.join(a.name + ('?' if a.optional else '') for a in tensors)}, attrs"
        f" -> {', '.join([o.name for o in op.outputs] + [a.name + ' (updated)' for a in mutable])}",
        f"int {op.name}(Call& c) {{",
        f"  c.expect_params({n_in}, {n_out});",
        f"  Attrs attrs(c, {attrs_index});",
    ]
    for arg in tensors:
        if arg.optional:
            lines.append(f"  const bool has_{arg.name} = attrs.flag();")
    c_args = []
    for arg in op.args:
        if arg.is_tensor:
            continue
        if arg.type == "int[]":
            lines.append(f"  const std::vector<int64_t> {arg.name} = attrs.integers();")
        elif arg.type == "int":
            read = "attrs.optional_integer()" if arg.optional else "attrs.integer()"
            lines.append(f"  const auto {arg.name} = {read};")
        elif arg.type == "float":
            read = "attrs.optional_real()" if arg.optional else "attrs.real()"
            lines.append(f"  const auto {arg.name} = {read};")
        elif arg.type == "bool":
            lines.append(f"  const bool {arg.name} = attrs.flag();")
        else:  # str: the index of its value
            lines.append(f"  const int {arg.name} = attrs.choice();")
    for i, arg in enumerate(tensors):
        if not arg.mutable:
            lines.append(f"  DLTensor {arg.name} = c.tensor({i});")
    for j, out in enumerate(op.outputs):
        lines.append(f"  DLTensor {out.name} = c.tensor({n_in + j});")
    for k, arg in enumerate(mutable):
        slot = n_in + len(op.outputs) + k
        source = tensors.index(arg)
        lines.append(f"  DLTensor {arg.name}_updated = c.tensor({slot});")
        guard = f"if (has_{arg.name}) " if arg.optional else ""
        lines.append(f"  {guard}c.copy({slot}, {source});")
    for arg in op.args:
        if arg.is_tensor:
            name = f"{arg.name}_updated" if arg.mutable else arg.name
            c_args.append(f"optional(has_{arg.name}, {name})" if arg.optional else f"&{name}")
        elif arg.type == "int[]":
            c_args += [f"{arg.name}.data()", f"static_cast<int64_t>({arg.name}.size())"]
        elif arg.optional:
            c_args.append(f"{arg.name} ? &*{arg.name} : nullptr")
        elif arg.type == "bool":
            c_args.append(f"{arg.name} ? 1 : 0")
        else:
            c_args.append(arg.name)
    c_args += [f"&{o.name}" for o in op.outputs]
    lines.append(f"  return check(opforge_{op.name}({', '.join(c_args)}, c.stream()));")
    lines += ["}", ""]
    return lines


def aot_source(table: OpTable) -> str:
    """``aot_ops.inc``: the AOT entry point of every op (included by aot.cpp)."""
    lines = [f"// {GENERATED}", "namespace opforge_ms {", ""]
    for op in table.ops.values():
        lines += _aot_function(op)
    lines += ["}  // namespace opforge_ms", ""]
    lines += [f"OPFORGE_MS_ENTRY({op.name})" for op in table.ops.values()]
    return "\n".join(lines) + "\n"


# --- Python ---


def _shape_rule(rule: str, spec) -> str:
    if rule == "like":
        return f"_shapes.like({spec})"
    if rule == "broadcast":
        return f"_shapes.broadcast({spec[0]}, {spec[1]})"
    if rule == "reduce":
        return f"_shapes.reduce({spec['of']}, v[{spec['dim']!r}], v[{spec['keepdim']!r}])"
    if rule == "channels":
        return f"_shapes.channels({spec})"
    if rule == "batch":
        return f"_shapes.batch({spec['of']}, v[{spec['normalized']!r}])"
    return f"_shapes.given(v[{spec!r}])"


def _dtype_rule(rule: str, spec) -> str:
    if rule == "like":
        return spec
    if rule == "broadcast":
        return spec[0]
    if rule == "reduce":
        return "_rt.INT64"
    return "_rt.FLOAT32"


def _uses_values(op: Op) -> bool:
    return any(o.rule in ("reduce", "batch", "shape") for o in op.outputs)


def _inference(op: Op) -> list[str]:
    params = ", ".join([a.name for a in op.tensors] + ["attrs"])
    mutable = [a.name for a in op.tensors if a.mutable]
    shapes = [f"list({_shape_rule(o.rule, o.spec)})" for o in op.outputs]
    shapes += [f"list({name})" for name in mutable]
    dtypes = [_dtype_rule(o.rule, o.spec) for o in op.outputs] + list(mutable)
    lines = [f"def _{op.name}_shape({params}):"]
    if _uses_values(op):
        lines.append(f'    v = _rt.values("{op.name}", attrs)')
    if len(shapes) == 1:
        lines.append(f"    return {shapes[0]}")
    else:
        lines.append(f"    return ({', '.join(shapes)})")
    lines += ["", "", f"def _{op.name}_dtype({params}):"]
    if len(dtypes) == 1:
        lines.append(f"    return {dtypes[0]}")
    else:
        lines.append(f"    return ({', '.join(dtypes)})")
    return [*lines, "", ""]


def _bprop(table: OpTable, op: Op) -> list[str]:
    tensors = [a.name for a in op.tensors]
    outs = [o.name for o in op.outputs]
    optional = {a.name for a in op.tensors if a.optional}
    params = ", ".join([*tensors, "attrs", "out", "dout"])
    lines = [f"def _{op.name}_bprop({params}):"]
    builders: list[str] = []
    multi = len(outs) + sum(a.mutable for a in op.tensors) > 1
    if not multi:
        lines.append("    dout = _rt.sens_like(dout, out)")

    def ref(source: str) -> str:
        if source in tensors:
            return source
        if source in outs:
            return f"out[{outs.index(source)}]" if multi else "out"
        name = source[len("grad_") :]
        if not multi:
            return "dout"
        i = outs.index(name)
        return f"_rt.sens_like(dout[{i}], out[{i}])"

    def call(call_op: str, args: dict, output: str | None, tag: str) -> str:
        # The callee's attribute tensor, built at compile time from this op's attributes.
        callee = table.ops[call_op]
        given = []
        for arg in callee.tensors:
            if arg.optional:
                source = args[arg.name]
                present = f"v['has_{source}']" if source in optional else "True"
                given.append(f'"has_{arg.name}": {present}')
        given += [f'"{arg.name}": v[{args[arg.name]!r}]' for arg in callee.scalars]
        builder = f"_{op.name}_{tag}_attrs"
        builders.extend(
            [
                "@constexpr",
                f"def {builder}(attrs_shape):",
                f'    v = _rt.values("{op.name}", attrs_shape)',
                f'    return _rt.attrs_for("{callee.name}", {{{", ".join(given)}}})',
                "",
                "",
            ]
        )
        tensor_args = ", ".join(ref(args[a.name]) for a in callee.tensors)
        text = f'_rt.primitive("{callee.name}")({tensor_args}, {builder}(attrs.shape))'
        if output is not None and len(callee.outputs) > 1:
            text += f"[{[o.name for o in callee.outputs].index(output)}]"
        return text

    backward = op.backward
    assert backward is not None
    grads: dict[str, str] = {}
    if backward.linear is not None or optional:
        lines.append(f"    v = _{op.name}_values(attrs.shape)")
    if backward.linear is not None:
        for name, factor in backward.linear.items():
            seed = ref(f"grad_{outs[0]}")
            scaled = seed if factor == 1 else f"{seed} * v[{factor!r}]"
            grads[name] = f"_rt.sum_to({scaled}, {name}.shape)"
    elif backward.each is not None:
        for name, calls in backward.each.items():
            total = " + ".join(
                call(c.op, c.args, c.output, f"{name}{i}") for i, c in enumerate(calls)
            )
            grads[name] = f"_rt.sum_to({total}, {name}.shape)"
    else:
        callee = table.ops[backward.op]
        results = [o.name for o in callee.outputs]
        lines.append(f"    {', '.join(results)} = {call(backward.op, backward.args, None, 'grad')}")
        grads = dict(backward.outputs)
    returned = []
    for name in tensors:
        if name not in grads:
            returned.append(f"ops.zeros_like({name})")
        elif name in optional:
            returned.append(
                f"_rt.like({grads[name]}, {name}) if v['has_{name}'] else ops.zeros_like({name})"
            )
        else:
            returned.append(f"_rt.like({grads[name]}, {name})")
    returned.append("ops.zeros_like(attrs)")
    lines.append(f"    return ({', '.join(returned)})")
    return builders + lines + ["", ""]


# The backward ops whose derivatives in the arguments other than the output gradient (second
# derivatives, which the op table does not give) the adapter's ``_second_order`` module gives.
SECOND_ORDER = ("gelu_backward", "softmax_backward")


def _forward_of(table: OpTable, op: Op) -> Op | None:
    """The op whose backward rule is a call of ``op``, if any."""
    return next(
        (f for f in table.ops.values() if f.backward is not None and f.backward.op == op.name),
        None,
    )


def _no_derivative_bprop(table: OpTable, op: Op) -> list[str]:
    params = ", ".join([*(a.name for a in op.tensors), "attrs", "out", "dout"])
    lines = [f"def _{op.name}_bprop({params}):"]
    if all(o.rule == "reduce" for o in op.outputs):
        # Indices: nothing flows back through them.
        zeros = [f"ops.zeros_like({a.name})" for a in op.tensors] + ["ops.zeros_like(attrs)"]
        lines.append(f"    return ({', '.join(zeros)})")
    else:
        # Named after what the user differentiated: the forward op's functions.
        forward = _forward_of(table, op) or op
        names = [fn.name for fn in forward.functions.get("mindspore", ())] or [forward.name]
        lines.append(
            f'    return _rt.no_derivative("{names[0]}", "{" or ".join(names)}", "{op.name}")'
        )
    return [*lines, "", ""]


def _backward_bprop(table: OpTable, op: Op) -> list[str] | None:
    """The bprop of ``op``, the backward op of a forward op F with a forward-mode rule, or None
    where the table and ``SECOND_ORDER`` cannot give it. ``op`` computes J^T g from F's output
    gradient g, linear in g: its derivative in g given ``dout`` is J dout, F's jvp rule with
    ``dout`` as the tangent of F's input. Its derivatives in F's inputs and outputs are second
    derivatives: ``_second_order.<op>``."""
    forward = _forward_of(table, op)
    if op.name not in SECOND_ORDER or forward is None or forward.jvp is None:
        return None
    backward, jvp = forward.backward, forward.jvp
    if jvp.op is None or any(a.optional for a in op.tensors):
        return None
    tensors = [a.name for a in op.tensors]
    results = [o.name for o in op.outputs]
    # F's names (inputs, outputs, scalars) as this op's arguments; the tangent of F's input i as
    # the gradient of this op's output that is i's gradient.
    as_own = {source: name for name, source in backward.args.items()}
    for input_name, result in backward.outputs.items():
        index = results.index(result)
        as_own[f"tangent_{input_name}"] = f"dout[{index}]" if len(results) > 1 else "dout"
    callee = table.ops[jvp.op]
    if any(a.optional for a in callee.tensors) or any(
        source not in as_own for source in jvp.args.values()
    ):
        return None
    given = ", ".join(f'"{a.name}": v[{as_own[jvp.args[a.name]]!r}]' for a in callee.scalars)
    scalars = ", ".join(f"v[{a.name!r}]" for a in op.scalars)
    call_args = ", ".join(as_own[jvp.args[a.name]] for a in callee.tensors)
    callee_results = [o.name for o in callee.outputs]
    lines = [
        "@constexpr",
        f"def _{op.name}_jvp_attrs(attrs_shape):",
        f'    v = _rt.values("{op.name}", attrs_shape)',
        f'    return _rt.attrs_for("{callee.name}", {{{given}}})',
        "",
        "",
        "@constexpr",
        f"def _{op.name}_scalars(attrs_shape):",
        f'    v = _rt.values("{op.name}", attrs_shape)',
        f"    return ({scalars}{',' if len(op.scalars) == 1 else ''})",
        "",
        "",
        f"def _{op.name}_bprop({', '.join([*tensors, 'attrs', 'out', 'dout'])}):",
        f'    tangents = _rt.primitive("{callee.name}")({call_args}, '
        f"_{op.name}_jvp_attrs(attrs.shape))",
    ]
    if len(callee_results) == 1:
        lines.append("    tangents = (tangents,)")
    scalar_args = "".join(f", scalars[{i}]" for i in range(len(op.scalars)))
    lines += [
        f"    scalars = _{op.name}_scalars(attrs.shape)",
        f"    second = _second_order.{op.name}({', '.join(tensors)}{scalar_args}, dout)",
    ]
    grads = []
    primal = 0
    for name in tensors:
        source = backward.args[name]
        if source.startswith("grad_"):
            output = jvp.outputs[source[len("grad_") :]]
            grads.append(f"_rt.like(tangents[{callee_results.index(output)}], {name})")
        else:
            grads.append(f"_rt.like(second[{primal}], {name})")
            primal += 1
    lines.append(f"    return ({', '.join([*grads, 'ops.zeros_like(attrs)'])})")
    return [*lines, "", ""]


def _prepare(op: Op) -> list[str]:
    tensors = [a.name for a in op.tensors]
    scalars = [a.name for a in op.scalars]
    meta_params = [f"{t}_meta" for t in tensors]
    lines = [
        "@constexpr",
        "@_memo",
        f"def _{op.name}_attrs(fn, {', '.join(meta_params + scalars)}):",
        f'    return _rt.prepare("{op.name}", fn, ({", ".join(meta_params)},), ({", ".join(scalars)}{"," if len(scalars) == 1 else ""}))',
        "",
        "",
        f"def _{op.name}(fn, {', '.join(tensors + scalars)}):",
    ]
    if scalars:
        # In GRAPH mode a scalar known only at run time reaches the attrs as None, which would
        # read as "absent" (argmax over the flattened input instead of dim): refused first.
        known = ", ".join(f"ops.isconstant({s})" for s in scalars)
        lines.append(
            f"    _rt.constant_scalars(fn, {tuple(scalars)!r}, ({known}{',' if len(scalars) == 1 else ''}))"
        )
    metas = [f"_meta({t})" for t in tensors]
    lines.append(f"    attrs = _{op.name}_attrs(fn, {', '.join(metas + scalars)})")
    inputs = [f"_or_absent({a.name})" if a.optional else a.name for a in op.tensors]
    lines.append(f'    return _rt.primitive("{op.name}")({", ".join(inputs)}, attrs)')
    return [*lines, "", ""]


def _public(op: Op, fn: Function) -> list[str]:
    params = []
    star = False
    for p in fn.params:
        if p.keyword_only and not star:
            params.append("*")
            star = True
        params.append(p.name if p.default is None else f"{p.name}={p.default}")
    lines = [f"def {fn.name}({', '.join(params)}):", f'    """{fn.doc}"""']
    if fn.promote:
        names = ", ".join(fn.promote)
        extra = ", zero_dim_as_number=True" if fn.zero_dim_as_number else ""
        lines.append(f'    {names}, cast = _rt.promote("{fn.name}", {names}{extra})')
    for name, interval in fn.ranges.items():
        lines.append(f'    _rt.in_range("{fn.name}", "{name}", {name}, "{interval}")')
    values = []
    params = {p.name for p in fn.params}
    for arg in op.args:
        expr = str(fn.args[arg.name])
        if arg.is_tensor:
            # The parameter the caller passed, checked before any expression uses it. A promoted
            # one promote has checked, and may have left a number to fold (folded_factor).
            source = _source_param(expr, params)
            if source not in fn.promote:
                lines.append(
                    f'    _tensor_argument("{fn.name}", "{source}", {source}, {arg.optional})'
                )
        values.append(expr)
    if fn.same_dtype:
        names = ", ".join(f'"{name}"' for name in fn.same_dtype)
        dtypes = ", ".join(f"_dtype({name})" for name in fn.same_dtype)
        lines.append(f'    _rt.same_dtype("{fn.name}", ({names}), ({dtypes}))')
    tensor_values = [values[i] for i, a in enumerate(op.args) if a.is_tensor]
    scalar_values = [values[i] for i, a in enumerate(op.args) if not a.is_tensor]
    results = [o.name for o in op.outputs] + [f"{a.name}_updated" for a in op.tensors if a.mutable]
    lines.append(
        f'    {", ".join(results)} = _{op.name}("{fn.name}", {", ".join(tensor_values + scalar_values)})'
    )
    mutable = {a.name for a in op.updated}
    # The bool under which the op updates them (None: always): without it nothing is assigned,
    # so inference leaves alone what MindSpore cannot assign to (a view of another tensor).
    flag = op.update_flag

    def condition(name: str) -> str:
        text = f"{fn.args[name]} is not None"
        return text if flag is None else f"{fn.args[flag.name]} and {text}"

    # MindSpore refuses an in-place assign to a view of another tensor, and would do so after
    # the assigns before it: each later target is first assigned to itself (a no-op, or that
    # refusal), so an update is made whole or not at all.
    for name in sorted(mutable)[1:]:
        lines.append(f"    if {condition(name)}:")
        lines.append(f"        ops.assign({fn.args[name]}, {fn.args[name]})")
    for name in sorted(mutable):
        # MindSpore kernels never write their inputs: the op's in-place update, assigned back.
        lines.append(f"    if {condition(name)}:")
        lines.append(f"        ops.assign({fn.args[name]}, {name}_updated)")
    if isinstance(fn.returns, tuple):
        items = []
        for name in fn.returns:
            if name in mutable:
                expr = str(fn.args[name])
                items.append(f"None if {expr} is None else {name}_updated")
            else:
                items.append(name)
        lines.append(f"    return {', '.join(items)}")
    elif fn.promote:
        lines.append(f"    return _rt.cast_result({fn.returns}, cast)")
    else:
        lines.append(f"    return {fn.returns}")
    return [*lines, "", ""]


def parameter_names(op: Op, fn: Function) -> dict[str, str]:
    """The parameter of ``fn`` each argument of ``op`` is passed as, where its name differs: a
    plain parameter (``{dim: axis}``), or for a tensor the parameter its expression is built
    from (the one its tensor check names). Errors word arguments by these names."""
    params = {p.name for p in fn.params}
    names = {}
    for arg in op.args:
        expr = str(fn.args[arg.name])
        if expr in params:
            source = expr
        elif arg.is_tensor:
            source = _source_param(expr, params)
        else:
            continue
        if source != arg.name:
            names[arg.name] = source
    return names


def _source_param(expr: str, params: set[str]) -> str:
    """The function parameter an argument expression is built from (its first name)."""
    for node in ast.walk(ast.parse(expr, mode="eval")):
        if isinstance(node, ast.Name) and node.id in params:
            return node.id
    raise ValueError(f"{expr!r} names no parameter")


def python_source(table: OpTable) -> str:
    """``_ops.py``: inference, bprops, checks and public functions of every op."""
    lines = [
        f'"""{GENERATED}"""',
        "",
        "from __future__ import annotations",
        "",
        "from mindspore import Tensor, ops",
        "from mindspore.ops import constexpr",
        "",
        "from opforge.mindspore import _runtime as _rt",
        "from opforge.mindspore import _second_order, _shapes",
        "",
        "# Memoised: in PYNATIVE the checks run on every call, and a training loop repeats the same",
        "# arguments (a failing check is never cached).",
        "_memo = _rt.memo",
        "",
        "",
        "def _meta(t):",
        "    if t is None:",
        "        return None",
        "    return (t.shape, t.dtype)",
        "",
        "",
        "def _or_absent(t):",
        "    if t is None:",
        "        return _rt.absent()",
        "    return t",
        "",
        "",
        "def _tensor_argument(fn, name, value, optional):",
        # A Tensor made with init= and not yet initialised has no values: the kernel would read
        # whatever its memory holds (GRAPH mode initialises its inputs; getattr is False there).
        '    if isinstance(value, Tensor) and getattr(value, "has_init", False):',
        "        return _rt.uninitialized(fn, name)",
        "    if isinstance(value, Tensor) or (value is None and optional):",
        "        return True",
        "    return _rt.refuse(",
        "        fn,",
        # Joined by +: GRAPH mode's parser fails on an f-string implicitly joined to another.
        '        f"{name} must be a mindspore.Tensor, got {type(value).__name__} "',
        '        + "(wrap arrays with mindspore.Tensor(...))",',
        "    )",
        "",
        "",
        "def _dtype(t):",
        "    return t.dtype if isinstance(t, Tensor) else None",
        "",
        "",
    ]
    public: list[str] = []
    bodies: list[str] = []
    names: dict[str, dict[str, str]] = {}
    for op in table.ops.values():
        lines += _inference(op)
        if op.backward is not None:
            if op.backward.linear is not None or any(a.optional for a in op.tensors):
                lines += [
                    "@constexpr",
                    f"def _{op.name}_values(attrs_shape):",
                    f'    return _rt.values("{op.name}", attrs_shape)',
                    "",
                    "",
                ]
            lines += _bprop(table, op)
        else:
            lines += _backward_bprop(table, op) or _no_derivative_bprop(table, op)
        bprop = f"_{op.name}_bprop"
        lines += [f'_rt.register("{op.name}", _{op.name}_shape, _{op.name}_dtype, {bprop})', "", ""]
        lines += _prepare(op)
        for fn in op.functions.get("mindspore", ()):
            bodies += _public(op, fn)
            public.append(fn.name)
            mapping = parameter_names(op, fn)
            if mapping:
                names[fn.name] = mapping
    lines += bodies
    lines += [
        "# The parameter each kernel argument is passed as, per function, where the names differ.",
        f"_rt.name_arguments({names!r})",
        "",
    ]
    lines.append(f"__all__ = {sorted(public)!r}")
    return "\n".join(lines).rstrip() + "\n"
