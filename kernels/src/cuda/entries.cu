// The generated entry points' CUDA side for softmax, argmax and batch_norm: each op's checked
// arguments (ops_args.hpp) mapped onto its kernels, which take any strides.
#include <cmath>
#include <string>

#include "backends.hpp"
#include "common/views.hpp"
#include "cuda/common.cuh"
#include "cuda/layout.hpp"

namespace opforge::cuda {
namespace {

// A per-channel float32 vector and its stride (any, as the C ABI allows).
struct Channels {
  float* data = nullptr;
  int64_t stride = 1;
  __device__ float& operator[](int64_t c) const { return data[c * stride]; }
};

Channels channels(const Tensor* t) {
  return t == nullptr ? Channels{} : Channels{t->ptr<float>(), t->strides[0]};
}

constexpr int kFrozenThreads = 256;

// Backward of the inference forward, one block per channel: the statistics are constants, so
// dx = dy * weight * invstd, dweight = sum(dy * xhat), dbias = sum(dy).
template <class T>
__global__ void __launch_bounds__(kFrozenThreads)
    frozen_backward(const T* __restrict__ x, const T* __restrict__ dy, Channels weight,
                    Channels mean, Channels invstd, T* __restrict__ dx, Channels dweight,
                    Channels dbias, int64_t n, int64_t c, int64_t s) {
  __shared__ float scratch[32];
  const int64_t ch = blockIdx.x;
  const float m = mean[ch], is = invstd[ch];
  const float scale = (weight.data != nullptr ? weight[ch] : 1.0f) * is;
  float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
  const int64_t count = n * s;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t at = (i / s) * c * s + ch * s + i % s;
    const float g = to_f(dy[at]);
    sum_dy += g;
    sum_dy_xhat += g * (to_f(x[at]) - m) * is;
    dx[at] = from_f<T>(g * scale);
  }
  sum_dy = block_reduce<false>(sum_dy, scratch);
  sum_dy_xhat = block_reduce<false>(sum_dy_xhat, scratch);
  if (threadIdx.x == 0) {
    dweight[ch] = sum_dy_xhat;
    dbias[ch] = sum_dy;
  }
}

}  // namespace

opforge_status softmax(const ops::Softmax& args, void* stream) {
  Tensor y = scalar_as_vector(*args.y);
  return softmax_forward(scalar_as_vector(*args.x), static_cast<int>(args.dim), y, stream);
}

opforge_status softmax_backward(const ops::SoftmaxBackward& args, void* stream) {
  Tensor dx = scalar_as_vector(*args.dx);
  return softmax_backward(scalar_as_vector(*args.y), scalar_as_vector(*args.dy),
                          static_cast<int>(args.dim), dx, stream);
}

opforge_status argmax(const ops::Argmax& args, void* stream) {
  if (!args.dim) {
    // The flattened tensor (in row-major order: a contiguous copy of a strided one) as one row;
    // out as its one-element result.
    const auto s = static_cast<cudaStream_t>(stream);
    Scratch scratch(s);
    Tensor dense;
    if (const auto status = dense_like("opforge_argmax", *args.x, true, scratch, s, dense)) {
      return status;
    }
    Tensor index = *args.out;
    dense.shape = {1, args.x->numel()};
    dense.strides = {args.x->numel(), 1};
    index.shape = {1, 1};
    index.strides = {1, 1};
    return argmax(dense, 1, index, stream);
  }
  const Tensor x = scalar_as_vector(*args.x);
  const int dim = static_cast<int>(*args.dim);
  Tensor out = with_reduced_dim(*args.out, x, dim);
  return argmax(x, dim, out, stream);
}

opforge_status batch_norm(const ops::BatchNorm& args, void* stream) {
  BatchNorm bn;
  bn.x = args.x;
  bn.out = args.y;
  bn.weight = args.weight;
  bn.bias = args.bias;
  bn.running_mean = args.running_mean;
  bn.running_var = args.running_var;
  bn.save_mean = args.save_mean;
  bn.save_invstd = args.save_invstd;
  bn.momentum = args.momentum;
  bn.eps = args.eps;
  set_batch_norm_shape(*args.x, bn);
  return args.training ? batch_norm_forward_training(bn, stream)
                       : batch_norm_forward_inference(bn, stream);
}

opforge_status batch_norm_backward(const ops::BatchNormBackward& args, void* stream) {
  BatchNorm bn;
  bn.x = args.x;
  bn.dy = args.dy;
  bn.out = args.dx;
  bn.weight = args.weight;
  bn.save_mean = const_cast<Tensor*>(args.save_mean);
  bn.save_invstd = const_cast<Tensor*>(args.save_invstd);
  bn.dweight = args.dweight;
  bn.dbias = args.dbias;
  // cuDNN wants the forward's epsilon, but with saved statistics it never uses it.
  bn.eps = 1e-5;
  set_batch_norm_shape(*args.x, bn);
  if (args.training) return batch_norm_backward(bn, stream);
  DeviceGuard guard(args.x->device.device_id);
  if (guard.status() != cudaSuccess) {
    return cuda_failure("opforge_batch_norm_backward", "cudaSetDevice", guard.status());
  }
  if (bn.c == 0) return OPFORGE_OK;
  const auto s = static_cast<cudaStream_t>(stream);
  Scratch scratch(s);
  Tensor x, dy, dx;
  const char* op = "opforge_batch_norm_backward";
  if (const auto status = dense_like(op, *args.x, true, scratch, s, x)) return status;
  if (const auto status = dense_like(op, *args.dy, true, scratch, s, dy)) return status;
  if (const auto status = dense_like(op, *args.dx, false, scratch, s, dx)) return status;
  const opforge_status launched = by_dtype(args.x->dtype, [&](auto tag) {
    using T = decltype(tag);
    frozen_backward<T><<<static_cast<unsigned>(bn.c), kFrozenThreads, 0, s>>>(
        x.ptr<T>(), dy.ptr<T>(), channels(args.weight), channels(args.save_mean),
        channels(args.save_invstd), dx.ptr<T>(), channels(args.dweight), channels(args.dbias),
        bn.n, bn.c, bn.s);
    return check_launch(op);
  });
  if (launched != OPFORGE_OK) return launched;
  return copy_back(op, dx, *args.dx, s);
}

}  // namespace opforge::cuda
