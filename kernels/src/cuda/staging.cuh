// Tensors that kernels needing contiguous, aligned memory (layer_norm, rms_norm) read and write
// whatever their strides: a non-contiguous input is first copied into a temporary, a
// non-contiguous output is written through a temporary copied into place afterwards. The
// temporaries come from cudaMallocAsync and are freed on the same stream.
#pragma once

#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "common/tensor.hpp"

namespace opforge::cuda::kit {

class Staging {
 public:
  Staging(const char* op, cudaStream_t stream) : op_(op), stream_(stream) {}
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // The elements of `t` as row-major memory of dtype `as` (kOther: t's own), 16-byte aligned
  // when `align16`: `t`'s own memory when it already is that, else a temporary copy. nullptr
  // for an absent tensor or once something failed.
  const void* input(const Tensor* t, bool align16 = false, DType as = DType::kOther);
  // Row-major memory the kernels write `t` through: `t`'s own when contiguous, else a
  // temporary that finish() copies into `t`.
  void* output(Tensor* t);
  // `bytes` of device memory (256-byte aligned) until finish().
  void* scratch(size_t bytes);

  bool ok() const { return status_ == OPFORGE_OK; }
  opforge_status status() const { return status_; }
  // After the kernels: copies the output temporaries into their tensors and frees every
  // temporary; returns the call's status (the first failure).
  opforge_status finish();

 private:
  void* allocate(size_t bytes);
  void release();

  const char* op_;
  cudaStream_t stream_;
  opforge_status status_ = OPFORGE_OK;
  std::vector<void*> temporaries_;
  std::vector<std::pair<Tensor*, void*>> pending_;  // outputs and their temporaries
};

// Copies the elements of `shape` from `src` (dtype, strides in elements) to `dst`, converting
// through float (same dtype, or float16/bfloat16 to float32).
opforge_status copy_strided(const char* op, const void* src, DType src_type,
                            const std::vector<int64_t>& src_strides, void* dst, DType dst_type,
                            const std::vector<int64_t>& dst_strides,
                            const std::vector<int64_t>& shape, cudaStream_t stream);

}  // namespace opforge::cuda::kit
