"""opforge.mindspore beyond the conformance table: argument errors, kernel failures, numeric
gradients, running statistics in a training step, and the wheel in a fresh environment."""

from __future__ import annotations

import re
import subprocess
import venv
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
ofm = pytest.importorskip("opforge.mindspore")

from mindspore import Tensor  # noqa: E402
from mindspore import dtype as mstype  # noqa: E402

from tests.mindspore_adapter.harness import call  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def f32(*shape, seed=0):
    return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# --- argument errors: raised before any kernel runs, naming the op and the problem ---


def _add(a, b):
    return ofm.add(a, b)


def _softmax_dim2(x):
    return ofm.softmax(x, 2)


def _argmax_dim_minus2(x):
    return ofm.argmax(x, -2)


def _argmax_dim1(x):
    return ofm.argmax(x, 1)


def _bn_train(x, w):
    return ofm.batch_norm(x, None, None, w, None, True)


def _bn_train_stats(x, rm, rv):
    return ofm.batch_norm(x, rm, rv, None, None, True)


def _bn_mean_only(x, rm):
    return ofm.batch_norm(x, rm, None, None, None, True)


def _bn_infer_no_stats(x):
    return ofm.batch_norm(x, None, None, training=False)


def _bn_train_plain(x):
    return ofm.batch_norm(x, None, None, training=True)


def _ln_past_64_bits(x):
    return ofm.layer_norm(x, (2**64 + 4,))


def _ln_past_31_bits(x):
    return ofm.layer_norm(x, (2**33,))


# (id, function, its inputs, error, message)
ERRORS = [
    (
        "add shape",
        _add,
        lambda: (f32(2, 3), f32(3, 2)),
        ValueError,
        "opforge.mindspore.add: shapes do not broadcast: input is [2, 3] but other is [3, 2]",
    ),
    (
        "add float64",
        _add,
        lambda: (f32(4).astype(mstype.float64),) * 2,
        TypeError,
        "opforge.mindspore.add: the result dtype would be float64; opforge computes float32",
    ),
    (
        "softmax dim",
        _softmax_dim2,
        lambda: (f32(2, 3),),
        ValueError,
        "opforge.mindspore.softmax: axis 2 is out of range for input of shape [2, 3] (valid: -2 to 1)",
    ),
    (
        "softmax int32",
        _softmax_dim2,
        lambda: (Tensor(np.ones((2, 3, 1), np.int32)),),
        TypeError,
        "opforge.mindspore.softmax: input has dtype int32 (supported: float32, float16, bfloat16)",
    ),
    (
        "argmax dim",
        _argmax_dim_minus2,
        lambda: (f32(5),),
        ValueError,
        "opforge.mindspore.argmax: dim -2 is out of range for input of shape [5] (valid: -1 to 0)",
    ),
    (
        "argmax empty dim",
        _argmax_dim1,
        lambda: (f32(3, 0),),
        ValueError,
        "opforge.mindspore.argmax: cannot reduce input of shape [3, 0] over dim 1, which has size 0",
    ),
    (
        "batch_norm weight",
        _bn_train,
        lambda: (f32(4, 3), f32(4)),
        ValueError,
        "opforge.mindspore.batch_norm: weight must have shape [3] (one per channel of input_x), got [4]",
    ),
    (
        "batch_norm weight float16",
        _bn_train,
        lambda: (f32(4, 3), f32(3).astype(mstype.float16)),
        TypeError,
        "opforge.mindspore.batch_norm: weight must be float32, got float16",
    ),
    (
        "batch_norm statistics size",
        _bn_train_stats,
        lambda: (f32(4, 3), f32(2), f32(2)),
        ValueError,
        "opforge.mindspore.batch_norm: running_mean must have shape [3] (one per channel of input_x), "
        "got [2]",
    ),
    (
        "batch_norm one statistic",
        _bn_mean_only,
        lambda: (f32(4, 3), f32(3)),
        ValueError,
        "opforge.mindspore.batch_norm: give running_mean and running_var together, or none of them",
    ),
    (
        "batch_norm inference without statistics",
        _bn_infer_no_stats,
        lambda: (f32(4, 3),),
        ValueError,
        "opforge.mindspore.batch_norm: running_mean is required when training is false",
    ),
    (
        "batch_norm 1-d",
        _bn_train_plain,
        lambda: (f32(4),),
        ValueError,
        "opforge.mindspore.batch_norm: input_x must have 2 to 4 dimensions, got shape [4]",
    ),
    (
        "batch_norm one value per channel",
        _bn_train_plain,
        lambda: (f32(1, 3),),
        ValueError,
        "opforge.mindspore.batch_norm: needs at least 2 values per channel, got input_x of shape "
        "[1, 3]",
    ),
    (
        # An empty tensor's dims may pass 2**31; the shape that carries the scalars may not.
        "layer_norm shape past 31 bits",
        _ln_past_31_bits,
        lambda: (Tensor(np.ones((0, 2**33), np.float32)),),
        ValueError,
        "opforge.mindspore.layer_norm: normalized_shape [8589934592] is past what opforge's "
        "MindSpore ops can carry: each value must be below 2**31 in magnitude",
    ),
]


@pytest.mark.parametrize(
    "fn, inputs, error, message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_argument_errors(fn, inputs, error, message, mode):
    # In GRAPH mode the call is compiled in a Cell and the check runs while the graph compiles.
    with pytest.raises(error) as raised:
        call(fn, mode)(*inputs())
    assert message in str(raised.value)


def test_a_shape_past_64_bits_is_refused_naming_it(mode):
    # It once reached the kernel's checks wrapped to 64 bits, and then an error naming nothing.
    # PYNATIVE sees the Python int; GRAPH mode's compiler has wrapped it already (MindSpore
    # 2.10: 2**64 + 4 arrives as -2**63 + 4), which the shape check refuses, as it would 4
    # (a last dim of 5).
    with pytest.raises((OverflowError, ValueError)) as raised:
        call(_ln_past_64_bits, mode)(f32(2, 5))
    assert re.match(r"opforge\.mindspore\.layer_norm: .*normalized_shape", str(raised.value))
    if mode == "pynative":
        assert "out of range for 64-bit ints, got [18446744073709551620]" in str(raised.value)


def test_kernel_failure_names_op_and_reason(mode, capfd):
    # Past the Python checks (the attribute input says dim 7 of a 2-d tensor): the kernel refuses.
    from opforge.mindspore._runtime import _make_primitive, attrs_for

    softmax = _make_primitive("softmax", "cpu")
    attrs = attrs_for("softmax", {"dim": 7})

    def fn(x, attrs):
        return softmax(x, attrs)

    with pytest.raises(RuntimeError):
        # PYNATIVE runs ops asynchronously: the failure surfaces when the result is read.
        call(fn, mode)(f32(2, 3), attrs).asnumpy()
    expected = "softmax: opforge_softmax: dim 7 is out of range for x of shape [2, 3]"
    assert f"opforge.mindspore: {expected}" in capfd.readouterr().err
    assert ofm.last_error().startswith(expected)


# --- numeric gradients: central differences of the adapter's own forward ---


def numeric_gradient(loss, values: np.ndarray, h: float = 1e-2) -> np.ndarray:
    grad = np.zeros_like(values, dtype=np.float64)
    for i in np.ndindex(values.shape):
        up, down = values.copy(), values.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (loss(up) - loss(down)) / (2 * h)
    return grad


def test_softmax_numeric_gradient(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    weights = Tensor(rng.standard_normal((3, 5)).astype(np.float32))

    def loss(x):
        return (ofm.softmax(x, 0) * weights).sum()

    analytic = ms.grad(call(loss, mode))(Tensor(x)).asnumpy()
    numeric = numeric_gradient(lambda v: float(loss(Tensor(v.astype(np.float32))).asnumpy()), x)
    np.testing.assert_allclose(analytic, numeric, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
def test_batch_norm_numeric_gradient(mode, training):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 3, 2)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 3).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    rm = Tensor(rng.standard_normal(3).astype(np.float32) * 0.1)
    rv = Tensor(rng.uniform(0.5, 2.0, 3).astype(np.float32))
    weights = Tensor(rng.standard_normal(x.shape).astype(np.float32))

    def loss(x, w, b):
        return (ofm.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5) * weights).sum()

    dx, dw, db = ms.grad(call(loss, mode), grad_position=(0, 1, 2))(Tensor(x), Tensor(w), Tensor(b))

    def at(**values):
        args = {"x": x, "w": w, "b": b, **values}
        return float(loss(*(Tensor(args[k].astype(np.float32)) for k in "xwb")).asnumpy())

    for name, analytic in (("x", dx), ("w", dw), ("b", db)):
        base = {"x": x, "w": w, "b": b}[name]
        numeric = numeric_gradient(lambda v, name=name: at(**{name: v}), base)
        np.testing.assert_allclose(analytic.asnumpy(), numeric, rtol=3e-2, atol=3e-3, err_msg=name)


def test_add_alpha_gradient(mode):
    def loss(a, b):
        return ofm.add(a, b, -2.5).sum()

    da, db = ms.grad(call(loss, mode), grad_position=(0, 1))(f32(4, 2), f32(4, 2, seed=1))
    np.testing.assert_array_equal(da.asnumpy(), np.ones((4, 2), np.float32))
    np.testing.assert_array_equal(db.asnumpy(), np.full((4, 2), -2.5, np.float32))


def test_argmax_is_not_differentiated_through(mode):
    def loss(x):
        return ofm.argmax(x, -1).astype(mstype.float32).sum() + x.sum()

    np.testing.assert_array_equal(ms.grad(call(loss, mode))(f32(3, 4)).asnumpy(), np.ones((3, 4)))


# --- running statistics: updated in place, as mindspore.ops.batch_norm does ---


class TrainingNorm(ms.nn.Cell):
    """A BatchNorm layer as a user writes it with opforge: Parameters updated in place."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = ms.Parameter(Tensor(np.ones(channels, np.float32)), name="weight")
        self.bias = ms.Parameter(Tensor(np.zeros(channels, np.float32)), name="bias")
        self.running_mean = ms.Parameter(
            Tensor(np.zeros(channels, np.float32)), name="running_mean", requires_grad=False
        )
        self.running_var = ms.Parameter(
            Tensor(np.ones(channels, np.float32)), name="running_var", requires_grad=False
        )

    def construct(self, x):
        return ofm.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, True, 0.1, 1e-5
        )


def test_running_statistics_updated_in_a_training_step(mode):
    norm = TrainingNorm(3)
    x = np.random.default_rng(5).standard_normal((16, 3)).astype(np.float32) * 2 + 1
    for _ in range(2):
        norm(Tensor(x))
    expected_mean, expected_var = np.zeros(3), np.ones(3)
    for _ in range(2):
        expected_mean = 0.9 * expected_mean + 0.1 * x.mean(0)
        expected_var = 0.9 * expected_var + 0.1 * x.var(0, ddof=1)
    np.testing.assert_allclose(norm.running_mean.asnumpy(), expected_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(norm.running_var.asnumpy(), expected_var, rtol=1e-5, atol=1e-6)


# --- the wheel on its own ---


@pytest.mark.slow
def test_wheel_in_fresh_venv_runs_without_source_tree(tmp_path):
    wheels = sorted((REPO / "dist").glob("opforge_mindspore-*+cpu-*.whl"))
    if not wheels:
        pytest.skip(
            "no dist/opforge_mindspore-*+cpu wheel: `opforge build mindspore-adapter` builds it"
        )
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # The wheel's own requirements (MindSpore 2.10.0, NumPy 1.x) come from the index.
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheels[-1]],
        check=True,
        timeout=1200,
    )
    script = (
        "import mindspore as ms, numpy as np, opforge.mindspore as ofm\n"
        "ms.set_device('CPU')\n"
        "x = ms.Tensor(np.array([[1.0, 2.0, 3.0]], np.float32))\n"
        "print(ofm.__file__)\n"
        "print([round(float(v), 4) for v in ofm.softmax(x, -1).asnumpy()[0]], np.__version__)\n"
    )
    out = subprocess.run(
        [python, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith(str(env_dir)), lines[0]
    assert lines[1].startswith("[0.09, 0.2447, 0.6652] 1."), lines[1]


# --- what opforge does not take: said in one error naming the function ---


class _SoftmaxCell(ms.nn.Cell):
    def construct(self, x):
        return ofm.softmax(x, -1)


def test_dynamic_shapes_are_refused_naming_opforge(tmp_path, monkeypatch):
    # MindSpore's own dynamic-shape test pattern: a Cell whose inputs have a None dim.
    monkeypatch.chdir(tmp_path)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        net = _SoftmaxCell()
        net.set_inputs(Tensor(shape=[None, 4], dtype=mstype.float32))
        with pytest.raises(
            ValueError, match=r"opforge.mindspore.softmax: input has a dynamic shape \[None, 4\]"
        ):
            net(f32(3, 4))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


class _ScalarArgumentCell(ms.nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x, value):
        return self.op(x, value)


def _argmax_along(x, dim):
    return ofm.argmax(x, dim)


def _softmax_along(x, dim):
    return ofm.softmax(x, dim)


def _add_scaled(x, alpha):
    return ofm.add(x, x, alpha=alpha)


def _mul_by(x, value):
    return ofm.mul(x, value)


def _add_number(x, value):
    return ofm.add(value, x)


@pytest.mark.parametrize(
    ("op", "value", "name"),
    [
        # A dim known only at run time reached the attrs as None: argmax took it as "no dim" and
        # flattened ([[1, 5], [7, 2]] gave 2, not [1, 0]).
        (_argmax_along, 1, "argmax: dim"),
        (_softmax_along, 1, "softmax: axis"),
        (_add_scaled, 2.0, "add: alpha"),
        # A number operand known only at run time has no value to promote by.
        (_mul_by, 2.0, "mul: other"),
        (_add_number, 2, "add: input"),
    ],
    ids=["argmax", "softmax", "add", "mul-operand", "add-operand"],
)
def test_graph_scalars_known_only_at_run_time_are_refused(op, value, name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ms.set_context(mode=ms.GRAPH_MODE)
    x = Tensor(np.array([[1.0, 5.0], [7.0, 2.0]], np.float32))
    try:
        with pytest.raises(TypeError) as info:
            _ScalarArgumentCell(op)(x, ms.mutable(value))
        operand = name.endswith(("input", "other"))
        assert str(info.value).splitlines()[0] == (
            f"opforge.mindspore.{name} must be a constant when the graph is compiled, got a "
            "value known only at run time (mindspore.mutable or computed from tensors): pass a "
            f"Python value{' or a Tensor' if operand else ''}"
        )
        # The same value as a constant is taken.
        in_graph = _ScalarArgumentCell(op)(x, value).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    # PYNATIVE knows every value: mutable is just the number there.
    np.testing.assert_allclose(op(x, ms.mutable(value)).asnumpy(), in_graph, rtol=1e-6)
    if op is _argmax_along:
        assert in_graph.tolist() == [1, 0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: ofm.gelu(x, ["tanh"]), "gelu: approximate must be one of 'none', 'tanh'"),
        (lambda x: ofm.gelu(x, {}), "gelu: approximate must be one of 'none', 'tanh'"),
        (lambda x: ofm.softmax(x, [1]), "softmax: axis must be an int, got [1]"),
        (lambda x: ofm.argmax(x, [1]), "argmax: dim must be an int, got [1]"),
        (lambda x: ofm.add(x, x, [1.0]), "add: alpha must be a number, got [1.0]"),
        (lambda x: ofm.layer_norm(x, 3.0), "layer_norm: normalized_shape must be a sequence"),
        (lambda x: ofm.layer_norm(x, None), "layer_norm: normalized_shape must be a sequence"),
        (
            lambda x: ofm.layer_norm_stats(x, None, None, 1.0, 1),
            "layer_norm_stats: begin_norm_axis must be an int, got float 1.0",
        ),
        # ops.LayerNorm takes -1 and no other negative axis.
        (
            lambda x: ofm.layer_norm_stats(x, None, None, -2, -2),
            "layer_norm_stats: begin_norm_axis must be an int in [-1, 2), as in ops.LayerNorm, "
            "got -2",
        ),
    ],
    ids=[
        "list",
        "dict",
        "dim-list",
        "argmax-list",
        "alpha-list",
        "float",
        "none",
        "axis",
        "negative-axis",
    ],
)
def test_scalar_arguments_of_any_wrong_kind_are_refused_naming_them(call, message):
    # A list reached the checks' cache first: "unhashable type: 'list'".
    with pytest.raises((TypeError, ValueError)) as info:
        call(f32(2, 3))
    assert str(info.value).startswith(f"opforge.mindspore.{message}")


def test_numpy_ints_are_ints():
    x = f32(2, 3)
    np.testing.assert_array_equal(ofm.layer_norm(x, np.int64(3)), ofm.layer_norm(x, 3))
    gamma, beta = Tensor(np.ones(3, np.float32)), Tensor(np.zeros(3, np.float32))
    for got, expected in zip(
        ofm.layer_norm_stats(x, gamma, beta, np.int64(1), np.int32(1)),
        ofm.layer_norm_stats(x, gamma, beta, 1, 1),
        strict=True,
    ):
        np.testing.assert_array_equal(got, expected)


def test_cached_checks_tell_signed_zeros_apart():
    # 0.0 == -0.0: as one key, the second call reused the first's alpha of -0.0.
    x, y = Tensor(np.array([-0.0, 1.0], np.float32)), Tensor(np.ones(2, np.float32))
    for zero in (0.0, np.float32(0.0), np.float16(0.0)):
        assert np.signbit(ofm.add(x, y, -zero).asnumpy()[0])
        assert not np.signbit(ofm.add(x, y, zero).asnumpy()[0])


class _LayerNormCell(ms.nn.Cell):
    def construct(self, x, n):
        return ofm.layer_norm(x, (n,))[0]


def test_graph_shape_tuples_holding_a_run_time_value_are_refused(tmp_path, monkeypatch):
    # ops.isconstant calls the tuple constant; its element reaches the attrs as None.
    monkeypatch.chdir(tmp_path)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(TypeError) as info:
            _LayerNormCell()(f32(2, 3), ms.mutable(3))
        assert str(info.value).splitlines()[0] == (
            "opforge.mindspore.layer_norm: normalized_shape must be constants when the graph is "
            "compiled, got (None,) (None: a value known only at run time, such as "
            "mindspore.mutable): pass Python ints"
        )
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("value", [np.ones((2, 3), np.float32), [1.0, 2.0], "x"])
def test_non_tensor_inputs_say_a_mindspore_tensor_is_needed(value):
    with pytest.raises(
        TypeError, match=r"opforge.mindspore.softmax: input must be a mindspore.Tensor"
    ):
        ofm.softmax(value)


def test_numbers_past_64_bits_are_refused_naming_the_argument():
    # PYNATIVE only: in GRAPH mode MindSpore's parser wraps such a constant to an int64 before
    # any op sees it (mindspore.ops.add gets the same wrapped value).
    with pytest.raises(
        OverflowError, match=r"^opforge\.mindspore\.add: alpha is too large for a double"
    ):
        ofm.add(f32(3), f32(3), alpha=10**400)
    with pytest.raises(
        OverflowError, match=r"^opforge\.mindspore\.softmax: axis is out of range for a 64-bit int"
    ):
        ofm.softmax(f32(3), 2**64)


# --- refusals read the same in both modes: GRAPH mode compiles most checks, and MindSpore gave
# a `raise` in compiled code back as the repr of its message ("'opforge.mindspore.add: ...'") ---


def _add_none(x):
    return ofm.add(x, None)


def _add_text(x):
    return ofm.add(x, "1")


def _mul_numbers(x):
    return ofm.mul(2.0, 3.0)


def _rms_no_gamma(x):
    return ofm.rms_norm(x, None)


def _ln_list_weight(x):
    return ofm.layer_norm(x, 4, weight=[1.0] * 4)


def _softmax_list(x):
    return ofm.softmax([1.0, 2.0])


def _softmax_dim5(x):
    return ofm.softmax(x, 5)


def _bn_momentum(x):
    return ofm.batch_norm(x, None, None, training=True, momentum=1.5)


def _mul(a, b):
    return ofm.mul(a, b)


def _rms_eps_zero(x, gamma):
    return ofm.rms_norm(x, gamma, 0.0)


def _rms(x, gamma):
    return ofm.rms_norm(x, gamma)


def _ones(dtype):
    return lambda: (f32(2, 4), Tensor(np.ones(4, np.float32)).astype(dtype))


_WRONG = "has dtype {}, which opforge does not take (tensors of float32, float16, bfloat16, "

# (id, function, its inputs, exception, the start of its message after "opforge.mindspore.")
REFUSALS = [
    (
        "add-none",
        _add_none,
        lambda: (f32(2, 4),),
        TypeError,
        "add: operands are mindspore.Tensor or Python numbers, got NoneType (wrap arrays with "
        "mindspore.Tensor(...))",
    ),
    (
        "add-str",
        _add_text,
        lambda: (f32(2, 4),),
        TypeError,
        "add: operands are mindspore.Tensor or Python numbers, got str",
    ),
    (
        "mul-numbers",
        _mul_numbers,
        lambda: (f32(2, 4),),
        TypeError,
        "mul: give at least one tensor, got 2.0 and 3.0",
    ),
    (
        "rms_norm-no-gamma",
        _rms_no_gamma,
        lambda: (f32(2, 4),),
        TypeError,
        "rms_norm: gamma must be a mindspore.Tensor (its shape gives the normalised dims), got "
        "NoneType",
    ),
    (
        "layer_norm-list",
        _ln_list_weight,
        lambda: (f32(2, 4),),
        TypeError,
        "layer_norm: weight must be a mindspore.Tensor, got list (wrap arrays with "
        "mindspore.Tensor(...))",
    ),
    (
        "softmax-list",
        _softmax_list,
        lambda: (f32(2, 4),),
        TypeError,
        "softmax: input must be a mindspore.Tensor, got list",
    ),
    (
        "softmax-dim",
        _softmax_dim5,
        lambda: (f32(2, 4),),
        ValueError,
        "softmax: axis 5 is out of range for input of shape [2, 4]",
    ),
    (
        "batch_norm-momentum",
        _bn_momentum,
        lambda: (f32(2, 4),),
        ValueError,
        "batch_norm: momentum must be in [0, 1], as in mindspore.ops.batch_norm, got 1.5",
    ),
    # A tensor of a dtype the promotion does not know was told it is not a tensor.
    *(
        (
            f"{fn.__name__[1:]}-{name}",
            fn,
            _ones(dtype),
            TypeError,
            f"{fn.__name__[1:]}: other {_WRONG.format(name)}",
        )
        for fn in (_add, _mul)
        for dtype, name in (
            (mstype.uint16, "uint16"),
            (mstype.uint32, "uint32"),
            (mstype.uint64, "uint64"),
            (mstype.complex64, "complex64"),
        )
    ),
    (
        "rms_norm-epsilon",
        _rms_eps_zero,
        _ones(mstype.float32),
        ValueError,
        "rms_norm: epsilon must be in (0, 1], as in mindspore.ops.rms_norm, got 0.0",
    ),
    (
        "rms_norm-dtypes",
        _rms,
        _ones(mstype.float16),
        TypeError,
        "rms_norm: gamma must have the dtype of x, as in mindspore.ops.rms_norm: x is float32, "
        "gamma is float16",
    ),
]


@pytest.mark.parametrize(
    ("fn", "inputs", "error", "message"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_refusals_start_with_opforge_in_both_modes(fn, inputs, error, message, mode):
    with pytest.raises(error) as raised:
        call(fn, mode)(*inputs())
    assert str(raised.value).startswith(f"opforge.mindspore.{message}"), str(raised.value)


@pytest.mark.parametrize(
    ("function", "value"),
    [
        ("rms_norm.mindspore", ["x"]),
        ("rms_norm.mindspore", ["x", "x"]),
        ("rms_norm.mindspore", ["x", "beta"]),
        ("rms_norm.mindspore", "x"),
        ("rms_norm.torch", ["input", "weight"]),
    ],
    ids=["one", "twice", "unknown", "text", "torch"],
)
def test_same_dtype_in_the_op_table_names_parameters_of_a_mindspore_function(
    tmp_path, function, value
):
    from opforge.errors import ConfigError
    from opforge.kernels import optable
    from tests.test_op_table import _set, _table

    key = f"ops.{function}.0.same_dtype"
    path = _table(tmp_path, _set(key, value))
    with pytest.raises(ConfigError) as info:
        optable.load(path)
    assert f"{key}: expected two or more distinct parameters of a mindspore function" in str(
        info.value
    )
