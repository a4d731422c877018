// The C ABI: validate every argument, then dispatch to the CPU or CUDA implementation.
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include "backends.hpp"
#include "common/status.hpp"

// The CUDA branch of a call; in a CPU-only build it is never taken (Call::run refuses first).
#ifdef OPFORGE_HAVE_CUDA
#define OPFORGE_CUDA_CALL(expr) opforge::cuda::expr
#else
#define OPFORGE_CUDA_CALL(expr) ((void)stream, OPFORGE_ERROR_UNSUPPORTED)
#endif

namespace opforge {
namespace {

// Validation of one call; the first problem found is the one reported.
class Call {
 public:
  explicit Call(const char* op) : op_(op) { clear_error(); }

  bool ok() const { return status_ == OPFORGE_OK; }
  opforge_status status() const { return status_; }

  opforge_status reject(opforge_status status, const std::string& message) {
    if (ok()) status_ = fail(status, op_ + ": " + message);
    return status_;
  }

  void read(const DLTensor* t, const char* name, Tensor& out) {
    if (!ok()) return;
    const std::string problem = read_tensor(t, name, out);
    if (!problem.empty()) reject(OPFORGE_ERROR_INVALID_ARGUMENT, problem);
  }

  // nullptr when `t` is NULL (an absent optional argument), else `storage` filled from `t`.
  Tensor* read_optional(const DLTensor* t, const char* name, Tensor& storage) {
    if (t == nullptr) return nullptr;
    read(t, name, storage);
    return &storage;
  }

  void floating(const Tensor& t, const char* name) {
    if (ok() && !is_floating(t.dtype)) {
      reject(OPFORGE_ERROR_INVALID_ARGUMENT,
             std::string(name) + " has dtype " + dtype_string(t.dl_dtype) +
                 " (supported: float32, float16, bfloat16)");
    }
  }

  void device_of(const Tensor& ref, const char* ref_name, const Tensor& t, const char* name) {
    if (ok() && !same_device(ref.device, t.device)) {
      reject(OPFORGE_ERROR_INVALID_ARGUMENT, std::string("device mismatch: ") + ref_name +
                                                 " is on " + device_string(ref.device) + " but " +
                                                 name + " is on " + device_string(t.device));
    }
  }

  // Same shape, dtype and device as `ref`.
  void like(const Tensor& ref, const char* ref_name, const Tensor& t, const char* name) {
    if (!ok()) return;
    if (t.shape != ref.shape) {
      reject(OPFORGE_ERROR_INVALID_ARGUMENT, std::string("shape mismatch: ") + ref_name + " is " +
                                                 shape_string(ref.shape) + " but " + name +
                                                 " is " + shape_string(t.shape));
    } else if (!same_dtype(t.dl_dtype, ref.dl_dtype)) {
      reject(OPFORGE_ERROR_INVALID_ARGUMENT, std::string("dtype mismatch: ") + ref_name + " is " +
                                                 dtype_string(ref.dl_dtype) + " but " + name +
                                                 " is " + dtype_string(t.dl_dtype));
    }
    device_of(ref, ref_name, t, name);
  }

  // A batch_norm parameter or statistic: float32, shape [c], on x's device.
  void channel_vector(const Tensor* t, const char* name, int64_t c, const Tensor& x) {
    if (!ok() || t == nullptr) return;
    if (t->ndim() != 1 || t->shape[0] != c) {
      reject(OPFORGE_ERROR_INVALID_ARGUMENT, std::string(name) + " must have shape [" +
                                                 std::to_string(c) + "] (one per channel), got " +
                                                 shape_string(t->shape));
    } else if (t->dtype != DType::kFloat32) {
      reject(OPFORGE_ERROR_INVALID_ARGUMENT,
             std::string(name) + " must be float32, got " + dtype_string(t->dl_dtype));
    }
    device_of(x, "x", *t, name);
  }

  // `dim` normalised into [0, ndim); a 0-d tensor accepts 0 and -1.
  int dim(int64_t dim, int ndim) {
    const int64_t rank = ndim == 0 ? 1 : ndim;
    if (dim < -rank || dim >= rank) {
      reject(OPFORGE_ERROR_INVALID_ARGUMENT,
             "dim " + std::to_string(dim) + " is out of range for a tensor of " +
                 std::to_string(ndim) + " dimension(s) (valid: " + std::to_string(-rank) +
                 " to " + std::to_string(rank - 1) + ")");
      return 0;
    }
    return static_cast<int>(dim < 0 ? dim + rank : dim);
  }

  // Runs the call on the tensors' device: the CPU reference, or the CUDA implementation once
  // its preconditions (a CUDA build, contiguous tensors) hold.
  template <class CpuFn, class CudaFn>
  opforge_status run(const Tensor& ref, std::initializer_list<std::pair<const Tensor*, const char*>> all,
                     CpuFn&& on_cpu, CudaFn&& on_cuda) {
    if (!ok()) return status_;
    switch (ref.device.device_type) {
      case kDLCPU:
        on_cpu();
        return OPFORGE_OK;
      case kDLCUDA:
#ifdef OPFORGE_HAVE_CUDA
        for (const auto& [t, name] : all) {
          if (t != nullptr && !t->contiguous()) {
            return reject(OPFORGE_ERROR_UNSUPPORTED,
                          std::string(name) + " is not contiguous (strides " +
                              shape_string(t->strides) +
                              "); the CUDA implementation needs row-major contiguous tensors");
          }
        }
        return on_cuda();
#else
        (void)all;
        (void)on_cuda;
        return reject(OPFORGE_ERROR_UNSUPPORTED,
                      "tensors are on " + device_string(ref.device) +
                          " but this library was built without CUDA (OPFORGE_WITH_CUDA=OFF)");
#endif
      default:
        return reject(OPFORGE_ERROR_UNSUPPORTED,
                      "unsupported device " + device_string(ref.device));
    }
  }

 private:
  std::string op_;
  opforge_status status_ = OPFORGE_OK;
};

// A 0-d tensor seen as shape [1], so reductions over "dim 0" have one element.
void as_vector_if_scalar(Tensor& t) {
  if (t.ndim() == 0) {
    t.shape = {1};
    t.strides = {1};
  }
}

// Checks x for batch_norm and fills the N×C×S view.
void batch_norm_shape(Call& call, const Tensor& x, BatchNorm& bn) {
  if (!call.ok()) return;
  if (x.ndim() < 2 || x.ndim() > 4) {
    call.reject(OPFORGE_ERROR_INVALID_ARGUMENT,
                "x must be NxC, NxCxL or NxCxHxW, got shape " + shape_string(x.shape));
    return;
  }
  bn.n = x.shape[0];
  bn.c = x.shape[1];
  bn.s = 1;
  for (int d = 2; d < x.ndim(); ++d) bn.s *= x.shape[d];
}

void check_eps(Call& call, double eps) {
  if (call.ok() && !(eps >= 0.0 && std::isfinite(eps))) {
    call.reject(OPFORGE_ERROR_INVALID_ARGUMENT,
                "eps must be finite and >= 0, got " + std::to_string(eps));
  }
}

}  // namespace
}  // namespace opforge

using opforge::BatchNorm;
using opforge::Call;
using opforge::Tensor;

extern "C" {

OPFORGE_API opforge_status opforge_add(const DLTensor* a, const DLTensor* b, double alpha,
                                       DLTensor* out, void* stream) {
  Call call("opforge_add");
  Tensor ta, tb, to;
  call.read(a, "a", ta);
  call.read(b, "b", tb);
  call.read(out, "out", to);
  call.floating(ta, "a");
  call.like(ta, "a", tb, "b");
  call.like(ta, "a", to, "out");
  return call.run(
      ta, {{&ta, "a"}, {&tb, "b"}, {&to, "out"}},
      [&] { opforge::cpu::add(ta, tb, alpha, to); },
      [&] { return OPFORGE_CUDA_CALL(add(ta, tb, alpha, to, stream)); });
}

OPFORGE_API opforge_status opforge_softmax_forward(const DLTensor* x, int64_t dim, DLTensor* y,
                                                   void* stream) {
  Call call("opforge_softmax_forward");
  Tensor tx, ty;
  call.read(x, "x", tx);
  call.read(y, "y", ty);
  call.floating(tx, "x");
  call.like(tx, "x", ty, "y");
  const int d = call.ok() ? call.dim(dim, tx.ndim()) : 0;
  opforge::as_vector_if_scalar(tx);
  opforge::as_vector_if_scalar(ty);
  return call.run(
      tx, {{&tx, "x"}, {&ty, "y"}},
      [&] { opforge::cpu::softmax_forward(tx, d, ty); },
      [&] { return OPFORGE_CUDA_CALL(softmax_forward(tx, d, ty, stream)); });
}

OPFORGE_API opforge_status opforge_softmax_backward(const DLTensor* y, const DLTensor* dy,
                                                    int64_t dim, DLTensor* dx, void* stream) {
  Call call("opforge_softmax_backward");
  Tensor ty, tdy, tdx;
  call.read(y, "y", ty);
  call.read(dy, "dy", tdy);
  call.read(dx, "dx", tdx);
  call.floating(ty, "y");
  call.like(ty, "y", tdy, "dy");
  call.like(ty, "y", tdx, "dx");
  const int d = call.ok() ? call.dim(dim, ty.ndim()) : 0;
  for (Tensor* t : {&ty, &tdy, &tdx}) opforge::as_vector_if_scalar(*t);
  return call.run(
      ty, {{&ty, "y"}, {&tdy, "dy"}, {&tdx, "dx"}},
      [&] { opforge::cpu::softmax_backward(ty, tdy, d, tdx); },
      [&] { return OPFORGE_CUDA_CALL(softmax_backward(ty, tdy, d, tdx, stream)); });
}

OPFORGE_API opforge_status opforge_argmax(const DLTensor* x, int64_t dim, int keepdim,
                                          DLTensor* out, void* stream) {
  Call call("opforge_argmax");
  Tensor tx, to;
  call.read(x, "x", tx);
  call.read(out, "out", to);
  call.floating(tx, "x");
  call.device_of(tx, "x", to, "out");
  if (call.ok() && to.dtype != opforge::DType::kInt64) {
    call.reject(OPFORGE_ERROR_INVALID_ARGUMENT,
                "out must be int64, got " + opforge::dtype_string(to.dl_dtype));
  }
  const int d = call.ok() ? call.dim(dim, tx.ndim()) : 0;
  if (call.ok()) {
    std::vector<int64_t> expected = tx.shape;
    if (tx.ndim() > 0) {
      if (keepdim) {
        expected[d] = 1;
      } else {
        expected.erase(expected.begin() + d);
      }
    }
    if (to.shape != expected) {
      call.reject(OPFORGE_ERROR_INVALID_ARGUMENT,
                  "out must have shape " + opforge::shape_string(expected) + " for x of shape " +
                      opforge::shape_string(tx.shape) + ", dim " + std::to_string(dim) +
                      (keepdim ? ", keepdim" : "") + "; got " + opforge::shape_string(to.shape));
    } else if (to.numel() > 0 && tx.ndim() > 0 && tx.shape[d] == 0) {
      call.reject(OPFORGE_ERROR_INVALID_ARGUMENT,
                  "cannot take the argmax over dim " + std::to_string(dim) +
                      ", which has size 0 in x of shape " + opforge::shape_string(tx.shape));
    }
  }
  opforge::as_vector_if_scalar(tx);
  // View out with x's rank: size 1 at `d` (the stride there is never used).
  if (call.ok() && to.ndim() != tx.ndim()) {
    to.shape.insert(to.shape.begin() + d, 1);
    to.strides.insert(to.strides.begin() + d, 0);
  }
  return call.run(
      tx, {{&tx, "x"}, {&to, "out"}},
      [&] { opforge::cpu::argmax(tx, d, to); },
      [&] { return OPFORGE_CUDA_CALL(argmax(tx, d, to, stream)); });
}

OPFORGE_API opforge_status opforge_batch_norm_forward_training(
    const DLTensor* x, const DLTensor* weight, const DLTensor* bias, DLTensor* running_mean,
    DLTensor* running_var, double momentum, double eps, DLTensor* y, DLTensor* save_mean,
    DLTensor* save_invstd, void* stream) {
  Call call("opforge_batch_norm_forward_training");
  Tensor tx, ty, tw, tb, trm, trv, tsm, tsi;
  BatchNorm bn;
  call.read(x, "x", tx);
  call.read(y, "y", ty);
  bn.weight = call.read_optional(weight, "weight", tw);
  bn.bias = call.read_optional(bias, "bias", tb);
  bn.running_mean = call.read_optional(running_mean, "running_mean", trm);
  bn.running_var = call.read_optional(running_var, "running_var", trv);
  bn.save_mean = call.read_optional(save_mean, "save_mean", tsm);
  bn.save_invstd = call.read_optional(save_invstd, "save_invstd", tsi);
  call.floating(tx, "x");
  call.like(tx, "x", ty, "y");
  opforge::batch_norm_shape(call, tx, bn);
  call.channel_vector(bn.weight, "weight", bn.c, tx);
  call.channel_vector(bn.bias, "bias", bn.c, tx);
  call.channel_vector(bn.running_mean, "running_mean", bn.c, tx);
  call.channel_vector(bn.running_var, "running_var", bn.c, tx);
  call.channel_vector(bn.save_mean, "save_mean", bn.c, tx);
  call.channel_vector(bn.save_invstd, "save_invstd", bn.c, tx);
  if (call.ok() && (bn.running_mean == nullptr) != (bn.running_var == nullptr)) {
    call.reject(OPFORGE_ERROR_INVALID_ARGUMENT,
                "give both running_mean and running_var, or neither");
  }
  if (call.ok() && tx.numel() > 0 && bn.n * bn.s < 2) {
    call.reject(OPFORGE_ERROR_INVALID_ARGUMENT,
                "training needs more than one value per channel, got x of shape " +
                    opforge::shape_string(tx.shape));
  }
  opforge::check_eps(call, eps);
  bn.x = &tx;
  bn.out = &ty;
  bn.momentum = momentum;
  bn.eps = eps;
  return call.run(
      tx,
      {{&tx, "x"}, {&ty, "y"}, {bn.weight, "weight"}, {bn.bias, "bias"},
       {bn.running_mean, "running_mean"}, {bn.running_var, "running_var"},
       {bn.save_mean, "save_mean"}, {bn.save_invstd, "save_invstd"}},
      [&] { opforge::cpu::batch_norm_forward_training(bn); },
      [&] { return OPFORGE_CUDA_CALL(batch_norm_forward_training(bn, stream)); });
}

OPFORGE_API opforge_status opforge_batch_norm_forward_inference(
    const DLTensor* x, const DLTensor* weight, const DLTensor* bias, const DLTensor* running_mean,
    const DLTensor* running_var, double eps, DLTensor* y, void* stream) {
  Call call("opforge_batch_norm_forward_inference");
  Tensor tx, ty, tw, tb, trm, trv;
  BatchNorm bn;
  call.read(x, "x", tx);
  call.read(y, "y", ty);
  call.read(running_mean, "running_mean", trm);
  call.read(running_var, "running_var", trv);
  bn.weight = call.read_optional(weight, "weight", tw);
  bn.bias = call.read_optional(bias, "bias", tb);
  bn.running_mean = &trm;
  bn.running_var = &trv;
  call.floating(tx, "x");
  call.like(tx, "x", ty, "y");
  opforge::batch_norm_shape(call, tx, bn);
  call.channel_vector(bn.weight, "weight", bn.c, tx);
  call.channel_vector(bn.bias, "bias", bn.c, tx);
  call.channel_vector(bn.running_mean, "running_mean", bn.c, tx);
  call.channel_vector(bn.running_var, "running_var", bn.c, tx);
  opforge::check_eps(call, eps);
  bn.x = &tx;
  bn.out = &ty;
  bn.eps = eps;
  return call.run(
      tx,
      {{&tx, "x"}, {&ty, "y"}, {bn.weight, "weight"}, {bn.bias, "bias"},
       {bn.running_mean, "running_mean"}, {bn.running_var, "running_var"}},
      [&] { opforge::cpu::batch_norm_forward_inference(bn); },
      [&] { return OPFORGE_CUDA_CALL(batch_norm_forward_inference(bn, stream)); });
}

OPFORGE_API opforge_status opforge_batch_norm_backward(
    const DLTensor* dy, const DLTensor* x, const DLTensor* weight, const DLTensor* save_mean,
    const DLTensor* save_invstd, double eps, DLTensor* dx, DLTensor* dweight, DLTensor* dbias,
    void* stream) {
  Call call("opforge_batch_norm_backward");
  Tensor tdy, tx, tw, tsm, tsi, tdx, tdw, tdb;
  BatchNorm bn;
  call.read(dy, "dy", tdy);
  call.read(x, "x", tx);
  call.read(dx, "dx", tdx);
  call.read(save_mean, "save_mean", tsm);
  call.read(save_invstd, "save_invstd", tsi);
  bn.weight = call.read_optional(weight, "weight", tw);
  bn.dweight = call.read_optional(dweight, "dweight", tdw);
  bn.dbias = call.read_optional(dbias, "dbias", tdb);
  bn.save_mean = &tsm;
  bn.save_invstd = &tsi;
  call.floating(tx, "x");
  call.like(tx, "x", tdy, "dy");
  call.like(tx, "x", tdx, "dx");
  opforge::batch_norm_shape(call, tx, bn);
  call.channel_vector(bn.weight, "weight", bn.c, tx);
  call.channel_vector(bn.save_mean, "save_mean", bn.c, tx);
  call.channel_vector(bn.save_invstd, "save_invstd", bn.c, tx);
  call.channel_vector(bn.dweight, "dweight", bn.c, tx);
  call.channel_vector(bn.dbias, "dbias", bn.c, tx);
  opforge::check_eps(call, eps);
  bn.x = &tx;
  bn.dy = &tdy;
  bn.out = &tdx;
  bn.eps = eps;
  return call.run(
      tx,
      {{&tx, "x"}, {&tdy, "dy"}, {&tdx, "dx"}, {bn.weight, "weight"},
       {bn.save_mean, "save_mean"}, {bn.save_invstd, "save_invstd"}, {bn.dweight, "dweight"},
       {bn.dbias, "dbias"}},
      [&] { opforge::cpu::batch_norm_backward(bn); },
      [&] { return OPFORGE_CUDA_CALL(batch_norm_backward(bn, stream)); });
}

}  // extern "C"
