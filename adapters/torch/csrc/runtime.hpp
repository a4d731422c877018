// What the generated kernels (ops.cpp) share; nothing here knows an op. Built against LibTorch's
// stable ABI only (torch/csrc/stable, the C shim), so one build serves every torch from
// TORCH_TARGET_VERSION on. Messages name the op as `opforge::<op>`; argument errors come from the
// kernel library's own checks (opforge_<op>_infer), run before anything is allocated.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <algorithm>
#include <array>
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
    // torch passes None for a Tensor argument as an undefined tensor.
    if (!t.defined()) throw std::runtime_error(prefix() + name + " must be a Tensor, got None");
    DLTensor& d = next_descriptor();
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
    return t.has_value() && t->defined() ? in(*t, name) : nullptr;
  }

  // An output for opforge_<op>_infer to describe, then for the op to fill.
  DLTensor* out() {
    DLTensor& d = next_descriptor();
    d.shape = shapes_[outputs_++].data();
    return &d;
  }

  // The tensor `described` (by opforge_<op>_infer) asks for, contiguous, on `like`'s device.
  // A dim of size 0 counts as 1, as in torch's contiguous strides ((1, 1) for a 3x0 tensor).
  Tensor allocate(DLTensor* described, const Tensor& like) {
    int64_t strides[OPFORGE_MAX_NDIM];
    int64_t running = 1;
    for (int i = described->ndim - 1; i >= 0; --i) {
      strides[i] = running;
      running *= std::max<int64_t>(described->shape[i], 1);
    }
    return make(described, like, strides);
  }

  // An output with the shape and dtype of `like` and, as torch's empty_like, its memory layout
  // when `like` is dense (a transposed or permuted view): the op then reads and writes both in
  // place. Anything else (a slice with gaps) gets a contiguous output.
  Tensor allocate_like(DLTensor* described, const Tensor& like) {
    const int64_t* like_strides = like.strides().data();
    if (!dense(described->ndim, described->shape, like_strides)) return allocate(described, like);
    return make(described, like, like_strides);
  }

  int choice(const std::string& value, std::initializer_list<const char*> values,
             const char* name) {
    int i = 0;
    std::string allowed;
    for (const char* v : values) {
      if (value == v) return i;
      allowed += std::string(i++ == 0 ? "" : values.size() == 2 ? " or " : ", ") + "'" + v + "'";
    }
    // torch's wording for two ("approximate argument must be either none or tanh"), quoted.
    const char* lead = values.size() == 2 ? " argument must be either " : " argument must be one of ";
    throw std::runtime_error(prefix() + name + lead + allowed + ", got '" + value + "'");
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
  static constexpr int kMaxTensors = 16;  // more than any op in the table has

  DLTensor& next_descriptor() {
    if (tensors_ == kMaxTensors) throw std::logic_error(prefix() + "more tensors than Call holds");
    DLTensor& d = descriptors_[tensors_++];
    d = DLTensor{};
    return d;
  }

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

  // Allocated directly (no dispatcher round trip: this runs on every call).
  Tensor make(DLTensor* described, const Tensor& like, const int64_t* strides) {
    AtenTensorHandle handle = nullptr;
    const int32_t device_type =
        described->device.device_type == kDLCUDA ? aoti_torch_device_type_cuda() : aoti_torch_device_type_cpu();
    if (aoti_torch_empty_strided(described->ndim, described->shape, strides, aoti_dtype(described->dtype),
                                 device_type, like.get_device_index(), &handle) != AOTI_TORCH_SUCCESS) {
      throw std::runtime_error(prefix() + "cannot allocate an output");
    }
    Tensor t(handle);
    described->data = t.data_ptr();
    described->strides = const_cast<int64_t*>(t.strides().data());
    return t;
  }

  // Whether strides lay `shape` out without gaps or overlaps (some permutation of contiguous).
  static bool dense(int ndim, const int64_t* shape, const int64_t* strides) {
    std::array<std::pair<int64_t, int64_t>, OPFORGE_MAX_NDIM> dims{};
    int n = 0;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] == 0) return false;  // empty: any layout will do, take contiguous
      if (shape[i] != 1) dims[n++] = {strides[i], shape[i]};
    }
    std::sort(dims.begin(), dims.begin() + n);
    int64_t expected = 1;
    for (int i = 0; i < n; ++i) {
      if (dims[i].first != expected) return false;
      expected *= dims[i].second;
    }
    return true;
  }

  static int32_t aoti_dtype(DLDataType t) {
    if (t.code == kDLFloat && t.bits == 32) return aoti_torch_dtype_float32();
    if (t.code == kDLFloat && t.bits == 16) return aoti_torch_dtype_float16();
    if (t.code == kDLBfloat && t.bits == 16) return aoti_torch_dtype_bfloat16();
    if (t.code == kDLInt && t.bits == 64) return aoti_torch_dtype_int64();
    throw std::runtime_error("opforge: the kernel library asked for an output dtype torch lacks");
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
      case ScalarType::ComplexFloat: return {kDLComplex, 64, 1};
      case ScalarType::ComplexDouble: return {kDLComplex, 128, 1};
      case ScalarType::UInt16: return {kDLUInt, 16, 1};
      case ScalarType::UInt32: return {kDLUInt, 32, 1};
      case ScalarType::UInt64: return {kDLUInt, 64, 1};
      default: return {kDLOpaqueHandle, 0, 1};  // named "unsupported" in the op's error
    }
  }

  const char* op_;
  int32_t cuda_device_ = -1;
  // Fixed storage, not initialised (no allocation or clearing on every call).
  std::array<DLTensor, kMaxTensors> descriptors_;
  std::array<std::array<int64_t, OPFORGE_MAX_NDIM>, kMaxTensors> shapes_;
  int tensors_ = 0;
  int outputs_ = 0;
};

}  // namespace opforge_torch
