// Reading and checking DLTensor arguments: the validation every op shares.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "opforge/opforge.h"

namespace opforge {

// A DLTensor with strides made explicit (DLPack allows strides == NULL for row-major).
struct Tensor {
  char* data = nullptr;  // already advanced by byte_offset
  DLDevice device{};
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }

  bool contiguous() const {
    int64_t expected = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
};

inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

inline std::string dtype_string(DLDataType t) {
  const char* base = t.code == kDLFloat ? "float" : t.code == kDLInt ? "int"
                   : t.code == kDLUInt ? "uint" : t.code == kDLBfloat ? "bfloat" : "dtype";
  std::string s = std::string(base) + std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

inline std::string device_string(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    default: return "device_type " + std::to_string(d.device_type);
  }
}

inline bool is_float32(DLDataType t) { return t.code == kDLFloat && t.bits == 32 && t.lanes == 1; }

// Fills `out` from `t`, or returns a message saying why `t` cannot be used.
inline std::string read_tensor(const DLTensor* t, const char* name, Tensor& out) {
  if (t == nullptr) return std::string(name) + " is NULL";
  if (t->ndim < 0) return std::string(name) + " has negative ndim";
  if (t->ndim > 0 && t->shape == nullptr) return std::string(name) + " has NULL shape";
  out.data = static_cast<char*>(t->data) + t->byte_offset;
  out.device = t->device;
  out.dtype = t->dtype;
  out.shape.assign(t->shape, t->shape + t->ndim);
  out.strides.resize(t->ndim);
  int64_t running = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (out.shape[i] < 0) return std::string(name) + " has a negative dimension";
    out.strides[i] = t->strides ? t->strides[i] : running;
    running *= out.shape[i];
  }
  if (out.numel() > 0 && t->data == nullptr) return std::string(name) + " has NULL data";
  return "";
}

}  // namespace opforge
