// batch_norm without cuDNN, for any strides (batch_norm_native.cu).
#pragma once

#include <cuda_runtime.h>

#include "backends.hpp"

namespace opforge::cuda {

// Spatial sizes (S = L or H*W) up to this take the native kernels even when cuDNN is there and
// no single-read tile fits: they are column reductions over N of an N x (C*S) matrix, which
// cuDNN's batch norm handles poorly (2-D input: 0.50x torch forward, 0.47x backward on an H100;
// see the README). Above it, cuDNN takes what the tiles cannot hold.
constexpr int64_t kNativeMaxSpatial = 32;

opforge_status native_batch_norm_forward_training(const BatchNorm& bn, cudaStream_t stream);
opforge_status native_batch_norm_forward_inference(const BatchNorm& bn, cudaStream_t stream);
opforge_status native_batch_norm_backward(const BatchNorm& bn, cudaStream_t stream);

// The native training forward and backward's single-read tiles alone (each channel's batch
// whole in (cluster) shared memory), where they fit: *ran says whether they ran. They read x
// and dy once where cuDNN's batch norm reads them twice, so they come before it.
opforge_status resident_batch_norm_forward_training(const BatchNorm& bn, cudaStream_t stream,
                                                    bool* ran);
opforge_status resident_batch_norm_backward(const BatchNorm& bn, cudaStream_t stream, bool* ran);

}  // namespace opforge::cuda
