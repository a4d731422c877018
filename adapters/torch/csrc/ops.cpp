// PyTorch adapter: each op checks its arguments with TORCH_CHECK (naming the op and the offending
// shape, dtype or device), describes the tensors as DLTensors and calls the shared C ABI. The
// registrations (TORCH_LIBRARY) are generated from kernels/ops.yaml into registrations.inc.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>

#ifdef OPFORGE_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "opforge/opforge.h"

namespace opforge_torch {
namespace {

DLDataType dl_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return {kDLFloat, 32, 1};
    case at::kHalf: return {kDLFloat, 16, 1};
    case at::kBFloat16: return {kDLBfloat, 16, 1};
    case at::kLong: return {kDLInt, 64, 1};
    case at::kDouble: return {kDLFloat, 64, 1};
    default: return {kDLOpaqueHandle, 0, 1};
  }
}

// A DLTensor view of a live tensor (sizes and strides point into the tensor's metadata).
DLTensor describe(const at::Tensor& t) {
  DLTensor d{};
  d.data = t.data_ptr();
  d.device = {t.is_cuda() ? kDLCUDA : kDLCPU, t.is_cuda() ? t.get_device() : 0};
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype = dl_dtype(t.scalar_type());
  d.shape = const_cast<int64_t*>(t.sizes().data());
  d.strides = const_cast<int64_t*>(t.strides().data());
  d.byte_offset = 0;
  return d;
}

void* stream_of(const at::Tensor& t) {
#ifdef OPFORGE_TORCH_CUDA
  if (t.is_cuda()) return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
#endif
  (void)t;
  return nullptr;
}

// The CUDA kernels take contiguous tensors; the CPU ones any strides.
at::Tensor for_kernel(const at::Tensor& t) { return t.is_cuda() ? t.contiguous() : t; }

void check_status(opforge_status status) {
  TORCH_CHECK(status == OPFORGE_OK, opforge_last_error());
}

void check_floating(const char* op, const char* name, const at::Tensor& t) {
  const auto s = t.scalar_type();
  TORCH_CHECK(s == at::kFloat || s == at::kHalf || s == at::kBFloat16, "opforge::", op, ": ",
              name, " must be float32, float16 or bfloat16, got ", s);
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "opforge::", op, ": ", name,
              " is on ", t.device(), "; only CPU and CUDA tensors are supported");
}

void check_like(const char* op, const char* ref_name, const at::Tensor& ref, const char* name,
                const at::Tensor& t) {
  TORCH_CHECK(t.device() == ref.device(), "opforge::", op, ": ", ref_name, " is on ",
              ref.device(), " but ", name, " is on ", t.device());
  TORCH_CHECK(t.sizes() == ref.sizes(), "opforge::", op, ": shape mismatch: ", ref_name, " is ",
              ref.sizes(), " but ", name, " is ", t.sizes());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), "opforge::", op, ": dtype mismatch: ",
              ref_name, " is ", ref.scalar_type(), " but ", name, " is ", t.scalar_type());
}

int64_t wrap_dim(const char* op, int64_t dim, const at::Tensor& t) {
  const int64_t rank = std::max<int64_t>(t.dim(), 1);
  TORCH_CHECK(dim >= -rank && dim < rank, "opforge::", op, ": dim ", dim,
              " is out of range for a tensor of shape ", t.sizes(), " (valid: ", -rank, " to ",
              rank - 1, ")");
  return dim < 0 ? dim + rank : dim;
}

// A batch_norm parameter or statistic as the kernels take it: float32, contiguous, x's device.
at::Tensor channel_vector(const char* name, const c10::optional<at::Tensor>& t, const at::Tensor& x) {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  TORCH_CHECK(t->dim() == 1 && t->size(0) == x.size(1), "opforge::batch_norm: ", name,
              " must have shape [", x.size(1), "] (one per channel of x ", x.sizes(), "), got ",
              t->sizes());
  TORCH_CHECK(t->device() == x.device(), "opforge::batch_norm: x is on ", x.device(), " but ",
              name, " is on ", t->device());
  return t->to(at::kFloat).contiguous();
}

DLTensor* optional_view(const at::Tensor& t, DLTensor& storage) {
  if (!t.defined()) return nullptr;
  storage = describe(t);
  return &storage;
}

#ifdef OPFORGE_TORCH_CUDA
using DeviceGuard = c10::cuda::OptionalCUDAGuard;
#else
struct DeviceGuard {
  explicit DeviceGuard(at::Device) {}
};
#endif

}  // namespace

at::Tensor add(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  check_floating("add", "a", a);
  check_like("add", "a", a, "b", b);
  DeviceGuard guard(a.device());
  const at::Tensor ka = for_kernel(a), kb = for_kernel(b);
  at::Tensor out = at::empty(a.sizes(), a.options());
  DLTensor da = describe(ka), db = describe(kb), dout = describe(out);
  check_status(opforge_add(&da, &db, alpha.toDouble(), &dout, stream_of(out)));
  return out;
}

at::Tensor softmax(const at::Tensor& x, int64_t dim) {
  check_floating("softmax", "x", x);
  const int64_t d = wrap_dim("softmax", dim, x);
  DeviceGuard guard(x.device());
  const at::Tensor kx = for_kernel(x);
  at::Tensor y = at::empty(x.sizes(), x.options());
  DLTensor dx = describe(kx), dy = describe(y);
  check_status(opforge_softmax_forward(&dx, d, &dy, stream_of(y)));
  return y;
}

at::Tensor softmax_backward(const at::Tensor& y, const at::Tensor& dy, int64_t dim) {
  check_floating("softmax_backward", "y", y);
  check_like("softmax_backward", "y", y, "dy", dy);
  const int64_t d = wrap_dim("softmax_backward", dim, y);
  DeviceGuard guard(y.device());
  const at::Tensor ky = for_kernel(y), kdy = for_kernel(dy);
  at::Tensor dx = at::empty(y.sizes(), y.options());
  DLTensor vy = describe(ky), vdy = describe(kdy), vdx = describe(dx);
  check_status(opforge_softmax_backward(&vy, &vdy, d, &vdx, stream_of(dx)));
  return dx;
}

at::Tensor argmax(const at::Tensor& x, int64_t dim, bool keepdim) {
  check_floating("argmax", "x", x);
  const int64_t d = wrap_dim("argmax", dim, x);
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  if (x.dim() > 0) {
    if (keepdim) {
      shape[d] = 1;
    } else {
      shape.erase(shape.begin() + d);
    }
  }
  DeviceGuard guard(x.device());
  const at::Tensor kx = for_kernel(x);
  at::Tensor out = at::empty(shape, x.options().dtype(at::kLong));
  DLTensor vx = describe(kx), vout = describe(out);
  check_status(opforge_argmax(&vx, d, keepdim ? 1 : 0, &vout, stream_of(out)));
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(
    const at::Tensor& x, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
    const c10::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  check_floating("batch_norm", "x", x);
  TORCH_CHECK(x.dim() >= 2 && x.dim() <= 4,
              "opforge::batch_norm: x must be NxC, NxCxL or NxCxHxW, got shape ", x.sizes());
  const bool has_rm = running_mean.has_value() && running_mean->defined();
  const bool has_rv = running_var.has_value() && running_var->defined();
  TORCH_CHECK(has_rm == has_rv, "opforge::batch_norm: give both running_mean and running_var, or neither");
  TORCH_CHECK(training || has_rm,
              "opforge::batch_norm: running_mean and running_var are required when training=False");
  DeviceGuard guard(x.device());
  const at::Tensor kx = for_kernel(x);
  const at::Tensor w = channel_vector("weight", weight, x), b = channel_vector("bias", bias, x);
  // The kernels update float32 statistics in place; other dtypes go through a float32 copy.
  const at::Tensor rm = channel_vector("running_mean", running_mean, x);
  const at::Tensor rv = channel_vector("running_var", running_var, x);
  at::Tensor y = at::empty(x.sizes(), x.options());
  DLTensor vx = describe(kx), vy = describe(y), vw, vb, vrm, vrv, vsm, vsi;
  at::Tensor save_mean, save_invstd;
  if (training) {
    save_mean = at::empty({x.size(1)}, x.options().dtype(at::kFloat));
    save_invstd = at::empty({x.size(1)}, x.options().dtype(at::kFloat));
    check_status(opforge_batch_norm_forward_training(
        &vx, optional_view(w, vw), optional_view(b, vb), optional_view(rm, vrm),
        optional_view(rv, vrv), momentum, eps, &vy, optional_view(save_mean, vsm),
        optional_view(save_invstd, vsi), stream_of(y)));
    if (has_rm && !rm.is_same(*running_mean)) running_mean->copy_(rm);
    if (has_rv && !rv.is_same(*running_var)) running_var->copy_(rv);
  } else {
    save_mean = at::empty({0}, x.options().dtype(at::kFloat));
    save_invstd = at::empty({0}, x.options().dtype(at::kFloat));
    check_status(opforge_batch_norm_forward_inference(
        &vx, optional_view(w, vw), optional_view(b, vb), optional_view(rm, vrm),
        optional_view(rv, vrv), eps, &vy, stream_of(y)));
  }
  return {y, save_mean, save_invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const c10::optional<at::Tensor>& weight,
    const at::Tensor& save_mean, const at::Tensor& save_invstd, double eps) {
  check_floating("batch_norm_backward", "x", x);
  check_like("batch_norm_backward", "x", x, "dy", dy);
  TORCH_CHECK(x.dim() >= 2 && x.dim() <= 4,
              "opforge::batch_norm_backward: x must be NxC, NxCxL or NxCxHxW, got shape ",
              x.sizes());
  DeviceGuard guard(x.device());
  const at::Tensor kx = for_kernel(x), kdy = for_kernel(dy);
  const at::Tensor w = channel_vector("weight", weight, x);
  const at::Tensor sm = channel_vector("save_mean", save_mean, x);
  const at::Tensor si = channel_vector("save_invstd", save_invstd, x);
  at::Tensor dx = at::empty(x.sizes(), x.options());
  at::Tensor dweight = at::empty({x.size(1)}, x.options().dtype(at::kFloat));
  at::Tensor dbias = at::empty({x.size(1)}, x.options().dtype(at::kFloat));
  DLTensor vdy = describe(kdy), vx = describe(kx), vdx = describe(dx), vw, vsm = describe(sm),
           vsi = describe(si), vdw = describe(dweight), vdb = describe(dbias);
  check_status(opforge_batch_norm_backward(&vdy, &vx, optional_view(w, vw), &vsm, &vsi, eps,
                                           &vdx, &vdw, &vdb, stream_of(dx)));
  return {dx, dweight, dbias};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Autograd kernels live in C++: a Python autograd kernel (torch.library.register_autograd) costs
// ~3.7 µs on every call, gradients or not, and refuses batch_norm, which mutates its running
// statistics. Gradients come from the library's kernels.

template <class Fn>
auto typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

class AddFunction : public torch::autograd::Function<AddFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                            const at::Scalar& alpha) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = typed_op<decltype(add)>("opforge::add");
    ctx->saved_data["alpha"] = alpha.toDouble();
    return op.call(a, b, alpha);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // d/db (a + alpha*b) = alpha: alpha * g computed by the library as g + (alpha - 1) * g.
    static auto op = typed_op<decltype(add)>("opforge::add");
    const double alpha = ctx->saved_data["alpha"].toDouble();
    return {grads[0], op.call(grads[0], grads[0], at::Scalar(alpha - 1.0)), at::Tensor()};
  }
};

class SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = typed_op<decltype(softmax)>("opforge::softmax");
    at::Tensor y = op.call(x, dim);
    ctx->saved_data["dim"] = dim;
    ctx->save_for_backward({y});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static auto op = typed_op<decltype(softmax_backward)>("opforge::softmax_backward");
    const at::Tensor y = ctx->get_saved_variables()[0];
    return {op.call(y, grads[0], ctx->saved_data["dim"].toInt()), at::Tensor()};
  }
};

// Gradients from the library's backward kernel; inference mode is an affine map of x.
class BatchNormFunction : public torch::autograd::Function<BatchNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const c10::optional<at::Tensor>& weight,
                               const c10::optional<at::Tensor>& bias,
                               const c10::optional<at::Tensor>& running_mean,
                               const c10::optional<at::Tensor>& running_var, bool training,
                               double momentum, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto op = typed_op<decltype(batch_norm)>("opforge::batch_norm");
    auto [y, save_mean, save_invstd] =
        op.call(x, weight, bias, running_mean, running_var, training, momentum, eps);
    const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
    if (training) {
      ctx->save_for_backward({x, w, save_mean, save_invstd});
    } else {
      ctx->save_for_backward({x, w, *running_mean, *running_var});
    }
    ctx->saved_data["training"] = training;
    ctx->saved_data["eps"] = eps;
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->saved_data["bias_dtype"] =
        has_bias ? static_cast<int64_t>(bias->scalar_type()) : static_cast<int64_t>(-1);
    ctx->mark_non_differentiable({save_mean, save_invstd});
    return {y, save_mean, save_invstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const double eps = ctx->saved_data["eps"].toDouble();
    at::Tensor dx, dweight, dbias;
    if (ctx->saved_data["training"].toBool()) {
      static auto op = typed_op<decltype(batch_norm_backward)>("opforge::batch_norm_backward");
      std::tie(dx, dweight, dbias) =
          op.call(grads[0], x, w.defined() ? c10::optional<at::Tensor>(w) : c10::nullopt,
                  saved[2], saved[3], eps);
    } else {
      std::vector<int64_t> axes{0}, shape(x.dim(), 1);
      for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
      shape[1] = -1;
      const at::Tensor invstd = (saved[3].to(at::kFloat) + eps).rsqrt();
      const at::Tensor scale = w.defined() ? invstd * w.to(at::kFloat) : invstd;
      const at::Tensor g = grads[0].to(at::kFloat);
      dx = (g * scale.view(shape)).to(x.scalar_type());
      const at::Tensor xhat = (x.to(at::kFloat) - saved[2].to(at::kFloat).view(shape)) * invstd.view(shape);
      dweight = (g * xhat).sum(axes);
      dbias = g.sum(axes);
    }
    // Absent weight or bias get no gradient; present ones get theirs in their own dtype.
    dweight = w.defined() ? dweight.to(w.scalar_type()) : at::Tensor();
    const int64_t bias_dtype = ctx->saved_data["bias_dtype"].toInt();
    dbias = bias_dtype >= 0 ? dbias.to(static_cast<at::ScalarType>(bias_dtype)) : at::Tensor();
    return {dx, dweight, dbias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// True when autograd must record this call; otherwise the call goes straight to the kernel,
// skipping the cost of building (and discarding) an autograd node.
bool records_grad(std::initializer_list<const at::Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

at::Tensor add_autograd(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  if (!records_grad({&a, &b})) {
    static auto op = typed_op<decltype(add)>("opforge::add");
    at::AutoDispatchBelowADInplaceOrView guard;
    return op.call(a, b, alpha);
  }
  return AddFunction::apply(a, b, alpha);
}

at::Tensor softmax_autograd(const at::Tensor& x, int64_t dim) {
  if (!records_grad({&x})) {
    static auto op = typed_op<decltype(softmax)>("opforge::softmax");
    at::AutoDispatchBelowADInplaceOrView guard;
    return op.call(x, dim);
  }
  return SoftmaxFunction::apply(x, dim);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_autograd(
    const at::Tensor& x, const c10::optional<at::Tensor>& weight,
    const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& running_mean,
    const c10::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  auto out = BatchNormFunction::apply(x, weight, bias, running_mean, running_var, training,
                                      momentum, eps);
  return {out[0], out[1], out[2]};
}

}  // namespace
}  // namespace opforge_torch

#include "registrations.inc"

TORCH_LIBRARY_IMPL(opforge, Autograd, m) {
  m.impl("add", TORCH_FN(opforge_torch::add_autograd));
  m.impl("softmax", TORCH_FN(opforge_torch::softmax_autograd));
  m.impl("batch_norm", TORCH_FN(opforge_torch::batch_norm_autograd));
}
