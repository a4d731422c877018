"""The PyTorch adapter, generated from the op table.

``ops.cpp``: the ``opforge`` library for LibTorch's stable ABI — each op's schema, and one CPU/CUDA
kernel per op that describes its tensors to the kernel library, asks it for the outputs' shapes
(``opforge_<op>_infer``), allocates them and runs the op on torch's current stream.
``_ops.py``: each op's argument checks in Python, raising the exception torch raises for each
problem (its fake kernel runs them; a helper's failed eager call asks them which exception to
raise), fake kernels (``torch.compile``), autograd (``autograd.Function`` per differentiable
op, with ``setup_context``, ``jvp`` and ``vmap``), the Autograd-key kernels for direct
``torch.ops.opforge`` calls, and the ``opforge.torch`` helpers of the table's ``torch`` entries.
"""

from __future__ import annotations

from opforge.kernels.checks import Check, argument_checks
from opforge.kernels.optable import Arg, Function, Op, OpTable, check_name

GENERATED = "Generated from kernels/ops.yaml by `python -m opforge.kernels`; do not edit."

_CPP_TYPES = {
    ("int", False): "int64_t",
    ("int", True): "std::optional<int64_t>",
    ("float", False): "double",
    ("float", True): "std::optional<double>",
    ("bool", False): "bool",
    ("int[]", False): "std::vector<int64_t>",
    ("str", False): "std::string",
}


def torch_schema(op: Op) -> str:
    """The op's schema in PyTorch's language (namespace ``opforge``)."""
    args = []
    for arg in op.args:
        if arg.is_tensor:
            alias = (
                f"({chr(ord('a') + sum(a.mutable for a in op.args[: op.args.index(arg)]))}!)"
                if arg.mutable
                else ""
            )
            args.append(f"Tensor{alias}{'?' if arg.optional else ''} {arg.name}")
        else:
            args.append(f"{arg.type}{'?' if arg.optional else ''} {arg.name}")
    outs = [f"Tensor {o.name}" for o in op.outputs]
    returns = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"{op.name}({', '.join(args)}) -> {returns}"


# --- C++ ---


def _cpp_param(arg: Arg) -> str:
    if arg.is_tensor:
        return f"{'std::optional<Tensor>' if arg.optional else 'Tensor'} {arg.name}"
    return f"{_CPP_TYPES[(arg.type, arg.optional)]} {arg.name}"


def _cpp_kernel(op: Op) -> list[str]:
    outs = op.outputs
    result = "Tensor" if len(outs) == 1 else f"std::tuple<{', '.join(['Tensor'] * len(outs))}>"
    params = ", ".join(_cpp_param(a) for a in op.args)
    lines = [f"{result} {op.name}({params}) {{", f'  Call call("{op.name}");']
    c_args = []
    for arg in op.args:
        if arg.is_tensor:
            lines.append(f'  DLTensor* {arg.name}_ = call.in({arg.name}, "{arg.name}");')
            c_args.append(f"{arg.name}_")
        elif arg.type == "int[]":
            c_args += [f"{arg.name}.data()", f"static_cast<int64_t>({arg.name}.size())"]
        elif arg.type == "str":
            values = ", ".join(f'"{v}"' for v in arg.checks["values"])
            lines.append(
                f'  const int {arg.name}_ = call.choice({arg.name}, {{{values}}}, "{arg.name}");'
            )
            c_args.append(f"{arg.name}_")
        elif arg.optional:
            lines.append(f"  const auto* {arg.name}_ = {arg.name} ? &*{arg.name} : nullptr;")
            c_args.append(f"{arg.name}_")
        else:
            c_args.append(arg.name if arg.type != "bool" else f"{arg.name} ? 1 : 0")
    for out in outs:
        lines.append(f"  DLTensor* {out.name}_ = call.out();")
    all_args = ", ".join(c_args + [f"{o.name}_" for o in outs])
    first = next(a.name for a in op.tensors if not a.optional)
    lines.append(f"  call.check(opforge_{op.name}_infer({all_args}));")
    for out in outs:
        if out.rule == "like":
            lines.append(f"  Tensor {out.name} = call.allocate_like({out.name}_, {out.spec});")
        else:
            lines.append(f"  Tensor {out.name} = call.allocate({out.name}_, {first});")
    lines.append(f"  call.check(opforge_{op.name}({all_args}, call.stream()));")
    names = ", ".join(o.name for o in outs)
    lines.append(f"  return {names if len(outs) == 1 else '{' + names + '}'};")
    lines += ["}", ""]
    return lines


def cpp_source(table: OpTable) -> str:
    """``ops.cpp``: the stable-ABI kernels and registrations of every op."""
    lines = [
        f"// {GENERATED}",
        '#include "runtime.hpp"',
        "",
        "namespace opforge_torch {",
        "",
    ]
    for op in table.ops.values():
        lines += _cpp_kernel(op)
    lines += ["}  // namespace opforge_torch", "", "STABLE_TORCH_LIBRARY(opforge, m) {"]
    lines += [f'  m.def("{torch_schema(op)}");' for op in table.ops.values()]
    lines.append("}")
    for key, guard in (("CPU", None), ("CUDA", "OPFORGE_TORCH_CUDA")):
        if guard:
            lines.append(f"#ifdef {guard}")
        lines.append(f"STABLE_TORCH_LIBRARY_IMPL(opforge, {key}, m) {{")
        lines += [
            f'  m.impl("{op.name}", TORCH_BOX(&opforge_torch::{op.name}));'
            for op in table.ops.values()
        ]
        lines.append("}")
        if guard:
            lines.append("#endif")
    return "\n".join(lines) + "\n"


# --- Python ---


def _fake_output(op: Op, rule: str, spec) -> str:
    first = next(a.name for a in op.tensors if not a.optional)
    if rule == "like":
        return f"like_output({spec})"
    if rule == "broadcast":
        a, b = spec
        return f"{a}.new_empty(_shapes.broadcast({a}.shape, {b}.shape))"
    if rule == "reduce":
        of = spec["of"]
        return (
            f"{of}.new_empty(_shapes.reduce({of}.shape, {spec['dim']}, {spec['keepdim']}), "
            "dtype=torch.int64)"
        )
    if rule == "channels":
        return f"{spec}.new_empty(_shapes.channels({spec}.shape), dtype=torch.float32)"
    if rule == "batch":
        of = spec["of"]
        return (
            f"{of}.new_empty(_shapes.batch({of}.shape, {spec['normalized']}), dtype=torch.float32)"
        )
    return f"{first}.new_empty(_shapes.given({spec}), dtype=torch.float32)"


def _raises(op: Op) -> dict[str, str]:
    """Check name -> the exception the op's torch function says torch raises for it (at most
    one function of an op gives them: ``optable``)."""
    return {k: v for fn in op.functions.get("torch", ()) for k, v in fn.raises.items()}


def _errors(raises: dict[str, str], **cases: str) -> str:
    """The keyword arguments that give a ``_fake_checks`` call the exceptions ``raises`` names
    for its cases (keyword -> check name); none where it names none (the check's default)."""
    return "".join(f", {key}={raises[name]}" for key, name in cases.items() if name in raises)


def _check_lines(table: OpTable, op: Op) -> list[str]:
    """The calls of ``_fake_checks`` that make the op's checks: the library's argument checks
    in its order (``checks.argument_checks``), then that a reduction has values to reduce, each
    raising the exception torch raises for it."""
    raises = _raises(op)
    tensors = ", ".join(f"{a.name!r}: {a.name}" for a in op.tensors)
    lines = [f"_fc.same_device({op.name!r}, {{{tensors}}})"]
    lines += [_fake_check(op, check, raises) for check in argument_checks(table, op)]
    for out in op.outputs:
        if out.rule == "reduce":
            of, dim = out.spec["of"], out.spec["dim"]
            error = _errors(raises, error=check_name(out.name, "reduce"))
            lines.append(f"_fc.reducible({op.name!r}, {of}, {of!r}, {dim}{error})")
    return [f"    {line}" for line in lines]


def _fake_check(op: Op, check: Check, raises: dict[str, str]) -> str:
    """A check as the call of its ``_fake_checks`` function."""
    kind, spec, name = check.kind, check.spec, repr(op.name)
    arg = check.arg.name if check.arg is not None else ""
    t = f"{arg}, {arg!r}"
    error = _errors(raises, error=check.name)
    if kind == "dtypes":
        return f"_fc.dtypes({name}, {t}, {spec!r}{error})"
    if kind == "rank":
        return f"_fc.rank({name}, {t}, {spec[0]}, {spec[1]}{error})"
    if kind == "dim":
        return f"_fc.dim({name}, {arg}, {spec}, {spec!r}, {arg!r}{error})"
    if kind == "suffix":
        error = _errors(raises, error=check.name, longer=f"{check.name}.longer")
        return f"_fc.suffix({name}, {arg}, {spec}, {spec!r}, {arg!r}{error})"
    if kind == "at_least":
        return f"_fc.at_least({name}, {arg}, {spec}, {arg!r}{error})"
    if kind == "finite":
        return f"_fc.finite({name}, {arg}, {arg!r}{error})"
    if kind == "choice":
        return f"_fc.choice({name}, {arg}, {tuple(spec)!r}, {arg!r}{error})"
    if kind in ("like", "broadcastable"):
        return f"_fc.{kind}({name}, {spec}, {spec!r}, {t}{error})"
    if kind == "channels":
        ref, like = spec
        return f"_fc.channels({name}, {ref}, {ref!r}, {t}, {bool(like)}{error})"
    if kind == "batch_shaped":
        of, normalized = spec
        return (
            f"_fc.shaped({name}, _fc.batch_shape({of}, {normalized}), "
            f"{'the leading dims of ' + of!r}, {t}{error})"
        )
    if kind == "shaped":
        ref, like = spec
        return f"_fc.shaped({name}, {ref}, {ref!r}, {t}, {like}{error})"
    if kind == "together":
        named = ", ".join(f"{n!r}: {n}" for n in spec)
        return f"_fc.together({name}, {{{named}}}{error})"
    if kind == "required_unless":
        named = ", ".join(f"{n!r}: {n}" for n in spec["tensors"])
        return f"_fc.required_unless({name}, {spec['flag']}, {spec['flag']!r}, {{{named}}}{error})"
    when = spec.get("when", "True")
    return (
        f"_fc.per_channel_count({name}, {spec['of']}, {spec['of']!r}, {spec['min']}, {when}{error})"
    )


def _integer_only(op: Op) -> bool:
    return all(o.rule == "reduce" for o in op.outputs)


def _call(table: OpTable, call_op: str, args: dict, output: str | None, scalars: set[str]) -> str:
    """A call of a table op in a derivative, through its helper: the result is differentiable
    where the callee is (its ``autograd.Function`` applied from Python, as torch.func needs: from
    inside the dispatcher's Autograd key it has no kernel there) and fails naming the op where it
    is not."""
    callee = table.ops[call_op]
    values = [
        f"ctx.{args[a.name]}" if args[a.name] in scalars else args[a.name] for a in callee.args
    ]
    text = f"_{callee.name}({', '.join(values)})"
    if output is not None and len(callee.outputs) > 1:
        text += f"[{[o.name for o in callee.outputs].index(output)}]"
    return text


def _saved_if_read(op: Op, tensor: str) -> str:
    """``tensor`` as setup_context saves it for the backward: with per-input rules (``each``),
    only where the gradient of an input whose rule reads it is wanted, as torch's own mul saves
    ``other`` only for ``self``'s gradient: an operand changed in place after the call is then
    no error where no gradient reads it."""
    each = op.backward.each if op.backward is not None else None
    if each is None:
        return tensor
    index = {a.name: i for i, a in enumerate(op.args)}
    readers = [
        name for name, calls in each.items() if any(tensor in c.args.values() for c in calls)
    ]
    if tensor in {o.name for o in op.outputs} or set(readers) >= set(each):
        return tensor
    wanted = " or ".join(f"ctx.needs_input_grad[{index[name]}]" for name in readers)
    return f"{tensor} if {wanted} else None"


def _function_class(table: OpTable, op: Op) -> list[str]:
    cls = f"_{op.class_name}"
    names = [a.name for a in op.args]
    outs = [o.name for o in op.outputs]
    tensor_names = {a.name for a in op.tensors} | set(outs)
    scalar_names = {a.name for a in op.scalars}
    positions = {a.name: i for i, a in enumerate(op.tensors)}
    backward, jvp = op.backward, op.jvp
    assert backward is not None
    grads = {f"grad_{o}" for o in outs}
    lines = [
        f"class {cls}(torch.autograd.Function):",
        f'    """Autograd of opforge::{op.name} (generated from the op table)."""',
        "",
        "    @staticmethod",
        f"    def forward({', '.join(names)}):",
        f"        return _OPS.{op.name}.default({', '.join(names)})",
        "",
        "    @staticmethod",
        "    def setup_context(ctx, inputs, output):",
        f"        {', '.join(names)}, = inputs",
        f"        {', '.join(outs)}, = {'(output,)' if len(outs) == 1 else 'output'}",
    ]
    if backward.linear is not None:
        seeded = set(outs)
    else:
        seeded = {src[len("grad_") :] for src in backward.sources if src in grads}
    frozen = [o for o in outs if o not in seeded]
    if frozen:
        lines.append(f"        ctx.mark_non_differentiable({', '.join(frozen)})")
    back_tensors = sorted(backward.sources & tensor_names)
    fwd_tensors = sorted(jvp.sources & tensor_names) if jvp else []
    tangents = sorted(s for s in (jvp.sources if jvp else ()) if s.startswith("tangent_"))
    if back_tensors:
        saved = ", ".join(_saved_if_read(op, t) for t in back_tensors)
        lines.append(f"        ctx.save_for_backward({saved})")
    if fwd_tensors:
        lines.append(f"        ctx.save_for_forward({', '.join(fwd_tensors)})")
    used_scalars = set()
    for rule in filter(None, (backward, jvp)):
        used_scalars |= rule.sources & scalar_names
    for name in sorted(used_scalars):
        lines.append(f"        ctx.{name} = as_given({name})")
    for tangent in tangents if jvp and jvp.linear is None else ():
        base = tangent[len("tangent_") :]
        lines.append(f"        ctx.meta_{base} = ({base}.shape, {base}.dtype, {base}.device)")
    if backward.linear is not None or backward.each is not None or (jvp and jvp.linear is not None):
        lines.append(f"        ctx.shapes = ({', '.join(f'{a.name}.shape' for a in op.tensors)},)")
        lines.append(f"        ctx.out_shape = {outs[0]}.shape")

    lines += [
        "",
        "    @staticmethod",
        f"    def backward(ctx, {', '.join('grad_' + o for o in outs)}):",
    ]
    if back_tensors:
        lines.append(f"        {', '.join(back_tensors)}, = ctx.saved_tensors")
    result: dict[str, str] = {}
    if backward.linear is not None:
        for name, factor in backward.linear.items():
            scaled = f"grad_{outs[0]}" if factor == 1 else f"grad_{outs[0]} * ctx.{factor}"
            result[name] = f"sum_to({scaled}, ctx.shapes[{positions[name]}])"
    elif backward.each is not None:
        for name, calls in backward.each.items():
            total = " + ".join(_call(table, c.op, c.args, c.output, scalar_names) for c in calls)
            result[name] = f"sum_to({total}, ctx.shapes[{positions[name]}])"
    else:
        callee = table.ops[backward.op]
        callee_outs = [o.name for o in callee.outputs]
        lines.append(
            f"        {', '.join(callee_outs)}, = "
            f"_as_tuple({_call(table, backward.op, backward.args, None, scalar_names)})"
        )
        result = dict(backward.outputs)
    returned = []
    for i, arg in enumerate(op.args):
        # Absent optional inputs, and inputs that need none, get no gradient.
        returned.append(
            f"{result[arg.name]} if ctx.needs_input_grad[{i}] else None"
            if arg.name in result
            else "None"
        )
    lines.append(f"        return {', '.join(returned)}")

    lines += [
        "",
        "    @staticmethod",
        f"    def jvp(ctx, {', '.join('tangent_' + n for n in names)}):",
    ]
    if jvp is not None:
        lines.append(f'        refuse_nested_forward_mode("{op.name}")')
    if jvp is None:
        lines.append(f'        refuse_forward_mode("{op.name}")')
    elif jvp.linear is not None:
        terms = [
            f"(tangent_{name}, {'1' if factor == 1 else 'ctx.' + str(factor)})"
            for name, factor in jvp.linear.items()
        ]
        lines.append(f"        return linear_tangent(ctx.out_shape, {', '.join(terms)})")
    else:
        if fwd_tensors:
            lines.append(f"        {', '.join(fwd_tensors)}, = ctx.saved_tensors")
        for tangent in tangents:
            base = tangent[len("tangent_") :]
            lines.append(f"        {tangent} = zeros_if_none({tangent}, ctx.meta_{base})")
        if jvp.each is not None:
            out_tangents = {
                name: " + ".join(_call(table, c.op, c.args, c.output, scalar_names) for c in calls)
                for name, calls in jvp.each.items()
            }
        else:
            callee = table.ops[jvp.op]
            lines.append(
                f"        {', '.join(o.name for o in callee.outputs)}, = "
                f"_as_tuple({_call(table, jvp.op, jvp.args, None, scalar_names)})"
            )
            out_tangents = dict(jvp.outputs)
        lines.append(f"        return {', '.join(out_tangents.get(o, 'None') for o in outs)}")
    lines += [
        "",
        "    @staticmethod",
        "    def vmap(info, in_dims, *args):",
        f"        return vmap_by_loop({cls}.apply, info, in_dims, *args{_updated_in_place(op)})",
        "",
        "",
    ]
    return lines


def _updated_in_place(op: Op) -> str:
    """vmap_by_loop's ``updated`` (the arguments the op updates in place, by position),
    ``when`` (the position of the bool argument under which it does; None: every call) and
    ``sources`` (the tensors the update is computed from, by position; None: unknown)."""
    updated = {op.args.index(a): a.name for a in op.updated}
    if not updated:
        return ""
    flag = op.update_flag
    when = op.args.index(flag) if flag is not None else None
    sources = None
    if flag is not None and "from" in flag.checks:
        sources = {i: a.name for i, a in enumerate(op.args) if a.name in flag.checks["from"]}
    return f", updated={updated!r}, when={when!r}, sources={sources!r}, op={op.name!r}"


def _bool_int_checks(op: Op, fn: Function) -> list[str]:
    """Checks that torch's own parser makes and the dispatcher's does not: a bool is an int to
    Python and a float tensor converts to one, so ``softmax(x, True)`` would run over dim 1 and
    ``argmax(x, 1, keepdim=1)`` would keep the dim, where torch refuses both; a float argument
    given as a tensor that requires grad would lose its gradient. A float argument computed
    from a parameter of its own name (rms_norm's ``eps=None``) is checked as that parameter."""
    lines = []
    params = {p.name for p in fn.params}
    for arg in op.args:
        name = str(fn.args[arg.name])
        if arg.type == "float" and not name.isidentifier() and arg.name in params:
            name = arg.name
        if not name.isidentifier():
            continue
        if arg.type == "int":
            optional = ", optional=True" if arg.optional else ""
            lines.append(f'    int_argument("{fn.name}", "{name}", {name}{optional})')
        elif arg.type == "bool":
            lines.append(f'    bool_argument("{fn.name}", "{name}", {name})')
        elif arg.type == "float":
            lines.append(f'    float_argument("{fn.name}", "{name}", {name})')
    return lines


def _helper(op: Op, fn: Function) -> list[str]:
    params = []
    star = False
    for p in fn.params:
        if p.keyword_only and not star:
            params.append("*")
            star = True
        params.append(p.name if p.default is None else f"{p.name}={p.default}")
    doc = fn.doc
    if fn.takes_out:
        # torch's call takes out=: the same keyword, refused naming the helper, where Python's
        # own "unexpected keyword argument" would not say why or what to do. Checked first; an
        # output of the op named `out` (add's) then takes the name over.
        params += [] if star else ["*"]
        params.append("out=None")
        doc += " ``out=`` is refused: the result is always a new tensor."
    lines = [f"def {fn.name}({', '.join(params)}):", f'    """{doc}"""']
    if fn.takes_out:
        lines += ["    if out is not None:", f'        raise out_not_supported("{fn.name}")']
    if fn.promote:
        names = ", ".join(fn.promote)
        lines.append(f'    {names}, cast_ = promote("{fn.name}", {names})')
    lines += _bool_int_checks(op, fn)
    call_args = []
    for arg in op.args:
        expr = str(fn.args[arg.name])
        if arg.type == "int[]":
            # torch's own parser would raise a many-line error naming the schema, not the helper.
            lines.append(f'    {arg.name}_ = int_list("{fn.name}", "{expr}", {expr})')
            call_args.append(f"{arg.name}_")
        elif expr == arg.name:
            call_args.append(arg.name)
        else:
            lines.append(f"    {arg.name}_ = {expr}")
            call_args.append(f"{arg.name}_")
    outs = [o.name for o in op.outputs]
    lines.append(f"    {', '.join(outs)} = _{op.name}({', '.join(call_args)})")
    lines += _write_backs(op, fn)
    if fn.promote:
        lines += [f"    {name} = cast_result({name}, cast_)" for name in outs]
    if isinstance(fn.returns, tuple):
        lines.append(f"    return {', '.join(fn.returns)}")
    else:
        lines.append(f"    return {fn.returns}")
    return [*lines, "", ""]


def _write_backs(op: Op, fn: Function) -> list[str]:
    """An argument the op updates in place that the helper gives the kernel through an
    expression (batch_norm's float32 copy of a 2-byte running statistic) is copied back into the
    caller's tensor of its name after the call, when the op updated it (its update flag)."""
    flag = op.update_flag
    when = "True" if flag is None else str(fn.args[flag.name])
    return [
        f"    write_back({arg.name}, {arg.name}_, {when})"
        for arg in op.updated
        if str(fn.args[arg.name]) != arg.name
    ]


def _tuple(names: list[str]) -> str:
    return f"({names[0]},)" if len(names) == 1 else f"({', '.join(names)})"


def _dispatch(op: Op) -> list[str]:
    names = [a.name for a in op.args]
    tensors = [a.name for a in op.tensors]
    call = f"_OPS.{op.name}.default"
    updated = ", ".join(f"{a.name!r}: {a.name}" for a in op.updated)
    lines = [
        f"_{op.name}_direct = direct_kernel({call})",
        "",
        "",
        f"def _{op.name}({', '.join(names)}):",
        # An argument of the wrong type fails in torch's schema matching with a many-line
        # message; argument_error makes it one line (free when nothing is raised).
        "    try:",
    ]
    required = [a.name for a in op.tensors if not a.optional]
    # torch's argument parser passes None for a Tensor as an undefined tensor, which the
    # dispatcher then refuses in a many-line message about "no tensor arguments".
    named = ", ".join(f"{n!r}: {n}" for n in required)
    lines += [
        f"        if {' or '.join(f'{n} is None' for n in required)}:",
        f'            raise missing_tensor("{op.name}", {{{named}}})',
    ]
    if updated:
        flag = op.update_flag
        if flag is None:
            lines.append(f'        refuse_lazy_bits("{op.name}", {{{updated}}})')
        else:
            # Tensors only read in this call (the update flag off) may be lazily negated views.
            lines += [
                f"        if {flag.name}:",
                f'            refuse_lazy_bits("{op.name}", {{{updated}}})',
                "        else:",
                *(f"            {a.name} = resolved_bits({a.name})" for a in op.updated),
            ]
    lines += [
        f"        keys = kernel_keys({', '.join(tensors)})",
        "        if keys is not None:",
        f"            return _{op.name}_direct(keys, {', '.join(names)})",
    ]
    if op.backward is not None:
        lines.append(f"        if helper_needs_autograd({', '.join(tensors)}):")
        if updated:
            lines.append(f'            refuse_grad_of_updated("{op.name}", {{{updated}}})')
        lines.append(f'            refuse_functionalize("{op.name}")')
        lines.append(f"            return _{op.class_name}.apply({', '.join(names)})")
    lines += [
        f"        return {call}({', '.join(names)})",
        "    except RuntimeError as exc:",
        f"        raise argument_error(exc, _{op.name}_checks, {_tuple(names)}) from None",
    ]
    return [*lines, "", ""]


def python_source(table: OpTable) -> str:
    """``_ops.py``: fake kernels, autograd, Autograd-key kernels and helpers of every op."""
    lines = [
        f'"""{GENERATED}"""',
        "",
        "from __future__ import annotations",
        "",
        "import torch",
        "",
        "from opforge.torch import _fake_checks as _fc",
        "from opforge.torch import _runtime as _rt",
        "from opforge.torch import _shapes",
        "from opforge.torch._runtime import (",
        "    argument_error,",
        "    as_given,",
        "    autograd_kernel,",
        "    bool_argument,",
        "    cast_result,",
        "    direct_kernel,",
        "    float_argument,",
        "    helper_needs_autograd,",
        "    int_argument,",
        "    int_list,",
        "    kernel_keys,",
        "    like_output,",
        "    linear_tangent,",
        "    missing_tensor,",
        "    out_not_supported,",
        "    promote,",
        "    refuse_forward_mode,",
        "    refuse_functionalize,",
        "    refuse_grad_of_updated,",
        "    refuse_lazy_bits,",
        "    refuse_nested_forward_mode,",
        "    resolved_bits,",
        "    underivable_kernel,",
        "    sum_to,",
        "    vmap_by_loop,",
        "    write_back,",
        "    zeros_if_none,",
        ")",
        "",
        "_OPS = torch.ops.opforge",
        '_LIB = torch.library.Library("opforge", "IMPL")',
        "",
        "",
        "def _as_tuple(value):",
        "    return value if isinstance(value, tuple) else (value,)",
        "",
        "",
    ]
    helpers: list[str] = []
    for op in table.ops.values():
        names = [a.name for a in op.args]
        outs = [_fake_output(op, o.rule, o.spec) for o in op.outputs]
        lines += [
            # The op's checks: its fake kernel's, and what a failed eager call asks for the
            # exception torch raises (argument_error).
            f"def _{op.name}_checks({', '.join(names)}):",
            *_check_lines(table, op),
            "",
            "",
            f'@torch.library.register_fake("opforge::{op.name}")',
            f"def _{op.name}_fake({', '.join(names)}):",
            f"    _{op.name}_checks({', '.join(names)})",
            f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}",
            "",
            "",
        ]
        positions = tuple(i for i, a in enumerate(op.args) if a.is_tensor)
        if op.backward is not None:
            lines += _function_class(table, op)
            updated = {op.args.index(a): a.name for a in op.updated}
            flag = op.update_flag
            when = op.args.index(flag) if flag is not None else None
            extra = f", {updated!r}, {when!r}" if updated else ""
            lines += [
                f'_LIB.impl("{op.name}", autograd_kernel(_OPS.{op.name}.default, _{op.class_name}, '
                f'{positions!r}{extra}), "Autograd", with_keyset=True)',
                "",
                "",
            ]
        elif not _integer_only(op):
            lines += [
                f'_LIB.impl("{op.name}", underivable_kernel(_OPS.{op.name}.default, "{op.name}", '
                f'{positions!r}), "Autograd", with_keyset=True)',
                "",
                "",
            ]
        # The op called under vmap with nothing to differentiate (torch.ops.opforge.*, argmax,
        # the backward ops): torch's batching fallback cannot take a batch of size 0 and warns
        # on every call, so the same loop as the autograd.Function's vmap, on the op itself.
        lines += [
            f'@torch.library.register_vmap("opforge::{op.name}")',
            f"def _{op.name}_vmap(info, in_dims, *args):",
            f"    return vmap_by_loop(_OPS.{op.name}.default, info, in_dims, *args"
            f"{_updated_in_place(op)})",
            "",
            "",
        ]
        lines += _dispatch(op)
        for fn in op.functions.get("torch", ()):
            helpers += _helper(op, fn)
    public = sorted(fn.name for op in table.ops.values() for fn in op.functions.get("torch", ()))
    lines += helpers
    lines.append(f"__all__ = {public!r}")
    return "\n".join(lines).rstrip() + "\n"
