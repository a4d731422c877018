// What the generated kernels (ops.cpp) share; nothing here knows an op. Built against LibTorch's
// stable ABI only (torch/csrc/stable, the C shim), so one build serves every torch from
// TORCH_TARGET_VERSION on. Messages name the op as `opforge::<op>`; argument errors come from the
// kernel library's own checks (opforge_<op>_infer), run before anything is allocated.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <array>
#include <deque>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "opforge/opforge.h"

namespace opforge_torch {

using torch::stable::Tensor;
using torch::headeronly::ScalarType;

// One call of an op: DLTensor descriptions of its tensors (alive as long as the call), the
// kernel library's status turned into exceptions, outputs allocated as the library describes.
class Call {
 public:
  explicit Call(const char* op) : op_(op) {}

  // A view of `t` for the kernel library; it reads sizes and strides from the tensor itself.
  DLTensor* in(const Tensor& t, const char* name) {
    DLTensor& d = descriptors_.emplace_back();
    d.data = t.data_ptr();
    d.device = device_of(t, name);
    d.dtype = dl_dtype(t.scalar_type());
    d.ndim = static_cast<int32_t>(t.dim());
    d.shape = const_cast<int64_t*>(t.sizes().data());
    d.strides = const_cast<int64_t*>(t.strides().data());
    d.byte_offset = 0;
    if (d.device.device_type == kDLCUDA) cuda_device_ = d.device.device_id;
    return &d;
  }

  DLTensor* in(const std::optional<Tensor>& t, const char* name) {
    return t.has_value() ? in(*t, name) : nullptr;
  }

  // An output for opforge_<op>_infer to describe, then for the op to fill.
  DLTensor* out() {
    DLTensor& d = descriptors_.emplace_back();
    d.shape = shapes_.emplace_back().data();
    return &d;
  }

  // The tensor `described` (by opforge_<op>_infer) asks for, on `like`'s device.
  Tensor allocate(DLTensor* described, const Tensor& like) {
    const torch::headeronly::IntHeaderOnlyArrayRef shape(described->shape, described->ndim);
    Tensor t = torch::stable::new_empty(like, shape, scalar_type(described->dtype));
    described->data = t.data_ptr();
    described->strides = nullptr;
    return t;
  }

  // An output with the shape and dtype of `like` and, as torch's empty_like, its memory layout:
  // an op on a transposed view returns a transposed result without copying either.
  Tensor allocate_like(DLTensor* described, const Tensor& like) {
    Tensor t = torch::stable::empty_like(like);
    described->data = t.data_ptr();
    described->strides = const_cast<int64_t*>(t.strides().data());
    return t;
  }

  int choice(const std::string& value, std::initializer_list<const char*> values,
             const char* name) {
    int i = 0;
    std::string allowed;
    for (const char* v : values) {
      if (value == v) return i;
      allowed += std::string(i++ ? ", " : "") + "'" + v + "'";
    }
    throw std::runtime_error(prefix() + name + " must be one of " + allowed + ", got '" +
                                value + "'");
  }

  // The stream of the call's CUDA device (torch's current one), or NULL for CPU tensors.
  void* stream() const {
    if (cuda_device_ < 0) return nullptr;
#ifdef OPFORGE_TORCH_CUDA
    void* stream = nullptr;
    if (aoti_torch_get_current_cuda_stream(cuda_device_, &stream) != AOTI_TORCH_SUCCESS) {
      throw std::runtime_error(prefix() + "cannot get the current CUDA stream of cuda:" +
                               std::to_string(cuda_device_));
    }
    return stream;
#else
    return nullptr;
#endif
  }

  void check(opforge_status status) const {
    if (status == OPFORGE_OK) return;
    std::string message = opforge_last_error();
    // The library names the C function (opforge_<op>: ...); torch users know the op.
    const std::string c_name = std::string("opforge_") + op_ + ": ";
    if (message.rfind(c_name, 0) == 0) message = message.substr(c_name.size());
    throw std::runtime_error(prefix() + message);
  }

 private:
  std::string prefix() const { return std::string("opforge::") + op_ + ": "; }

  DLDevice device_of(const Tensor& t, const char* name) const {
    if (t.is_cpu()) return DLDevice{kDLCPU, 0};
    if (t.is_cuda()) {
#ifdef OPFORGE_TORCH_CUDA
      return DLDevice{kDLCUDA, static_cast<int32_t>(t.get_device_index())};
#else
      throw std::runtime_error(prefix() + name +
                               " is a CUDA tensor but this opforge-torch is a CPU build: install "
                               "the GPU wheel (opforge build --profile gpu)");
#endif
    }
    throw std::runtime_error(prefix() + name +
                             " is on a device opforge does not support (CPU and CUDA only)");
  }

  static DLDataType dl_dtype(ScalarType t) {
    switch (t) {
      case ScalarType::Float: return {kDLFloat, 32, 1};
      case ScalarType::Half: return {kDLFloat, 16, 1};
      case ScalarType::BFloat16: return {kDLBfloat, 16, 1};
      case ScalarType::Double: return {kDLFloat, 64, 1};
      case ScalarType::Long: return {kDLInt, 64, 1};
      case ScalarType::Int: return {kDLInt, 32, 1};
      case ScalarType::Short: return {kDLInt, 16, 1};
      case ScalarType::Char: return {kDLInt, 8, 1};
      case ScalarType::Byte: return {kDLUInt, 8, 1};
      case ScalarType::Bool: return {kDLBool, 8, 1};
      default: return {kDLOpaqueHandle, 0, 1};
    }
  }

  static ScalarType scalar_type(DLDataType t) {
    if (t.code == kDLFloat && t.bits == 32) return ScalarType::Float;
    if (t.code == kDLFloat && t.bits == 16) return ScalarType::Half;
    if (t.code == kDLBfloat && t.bits == 16) return ScalarType::BFloat16;
    if (t.code == kDLInt && t.bits == 64) return ScalarType::Long;
    throw std::runtime_error("opforge: the kernel library asked for an output dtype torch lacks");
  }

  const char* op_;
  int32_t cuda_device_ = -1;
  std::deque<DLTensor> descriptors_;
  std::deque<std::array<int64_t, OPFORGE_MAX_NDIM>> shapes_;
};

}  // namespace opforge_torch
