// What the CPU and CUDA kernel files share beyond the generated argument structs (ops_args.hpp,
// one per op of kernels/ops.yaml, with each op's entry declared there): the batch_norm view and
// the internal helpers the per-op entries call.
#pragma once

#include "common/tensor.hpp"
#include "ops_args.hpp"

namespace opforge {

// Arguments of the batch_norm kernels, already checked. x is viewed as N×C×S (S = spatial size).
struct BatchNorm {
  const Tensor* x = nullptr;
  const Tensor* dy = nullptr;  // backward only
  Tensor* out = nullptr;       // y (forward) or dx (backward)
  const Tensor* weight = nullptr;
  const Tensor* bias = nullptr;
  Tensor* running_mean = nullptr;
  Tensor* running_var = nullptr;
  Tensor* save_mean = nullptr;     // forward: written (inference: the statistics used); backward: read
  Tensor* save_invstd = nullptr;   // forward: written (inference: the statistics used); backward: read
  Tensor* dweight = nullptr;
  Tensor* dbias = nullptr;
  double momentum = 0.0;
  double eps = 0.0;
  int64_t n = 0, c = 0, s = 0;
};

namespace cpu {
void softmax_forward(const Tensor& x, int dim, Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dy, int dim, Tensor& dx);
}  // namespace cpu

#ifdef OPFORGE_HAVE_CUDA
// Each returns OPFORGE_OK or a failure already recorded with fail(). Tensors are contiguous.
namespace cuda {
opforge_status softmax_forward(const Tensor& x, int dim, Tensor& y, void* stream);
opforge_status softmax_backward(const Tensor& y, const Tensor& dy, int dim, Tensor& dx,
                                void* stream);
opforge_status argmax(const Tensor& x, int dim, Tensor& out, void* stream);
opforge_status batch_norm_forward_training(const BatchNorm& bn, void* stream);
opforge_status batch_norm_forward_inference(const BatchNorm& bn, void* stream);
opforge_status batch_norm_backward(const BatchNorm& bn, void* stream);
}  // namespace cuda
#endif

}  // namespace opforge
