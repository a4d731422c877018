// Reading and checking DLTensor arguments: the validation every op shares.
#pragma once

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.hpp"
#include "opforge/opforge.h"

namespace opforge {

// A DLTensor with strides made explicit (DLPack allows strides == NULL for row-major).
struct Tensor {
  char* data = nullptr;  // already advanced by byte_offset
  DLDevice device{};
  DLDataType dl_dtype{};
  DType dtype = DType::kOther;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements

  int ndim() const { return static_cast<int>(shape.size()); }

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }

  bool contiguous() const {
    if (numel() == 0) return true;  // no element to address: any strides will do (torch uses 0)
    int64_t expected = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] != 1 && strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }

  template <class T>
  T* ptr() const {
    return reinterpret_cast<T*>(data);
  }
};

// The byte range [first, last] a tensor's elements occupy.
inline std::pair<const char*, const char*> byte_span(const Tensor& t) {
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < t.ndim(); ++i) {
    const int64_t reach = (t.shape[i] - 1) * t.strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t item = std::max<int64_t>(1, t.dl_dtype.bits / 8);
  return {t.data + lo * item, t.data + hi * item + item - 1};
}

// Whether the byte ranges of a's and b's elements meet (they may share an element).
inline bool spans_meet(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto [a_lo, a_hi] = byte_span(a);
  const auto [b_lo, b_hi] = byte_span(b);
  return !(a_hi < b_lo || b_hi < a_lo);
}

inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

inline std::string device_string(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    default: return "device_type " + std::to_string(d.device_type);
  }
}

inline bool same_device(DLDevice a, DLDevice b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

inline bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// Fills `out` from `t`, or returns a message saying why `t` cannot be used. `data` may be NULL
// only when `allow_null_data` (shape inference reads shapes alone). Element counts and the byte
// extent of the strides must fit in int64, so no kernel's index arithmetic can overflow.
inline std::string read_tensor(const DLTensor* t, const char* name, Tensor& out,
                               bool allow_null_data = false) {
  if (t == nullptr) return std::string(name) + " is NULL";
  if (t->ndim < 0 || t->ndim > OPFORGE_MAX_NDIM) {
    return std::string(name) + " has " + std::to_string(t->ndim) + " dimensions (supported: 0 to " +
           std::to_string(OPFORGE_MAX_NDIM) + ")";
  }
  if (t->ndim > 0 && t->shape == nullptr) return std::string(name) + " has NULL shape";
  out.data = static_cast<char*>(t->data) + t->byte_offset;
  out.device = t->device;
  out.dl_dtype = t->dtype;
  out.dtype = dtype_of(t->dtype);
  out.shape.assign(t->shape, t->shape + t->ndim);
  out.strides.resize(t->ndim);
  int64_t running = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (out.shape[i] < 0) return std::string(name) + " has a negative dimension";
    out.strides[i] = t->strides ? t->strides[i] : running;
    if (__builtin_mul_overflow(running, out.shape[i], &running)) {
      return std::string(name) + " of shape " + shape_string(out.shape) +
             " has more elements than int64 can count";
    }
  }
  if (running > 0) {
    // The farthest element from the first, in bytes, must be addressable.
    const int64_t itemsize = std::max<int64_t>(1, t->dtype.bits / 8);
    int64_t extent = 0;
    for (int i = 0; i < t->ndim; ++i) {
      int64_t span = 0;
      const int64_t stride = out.strides[i] < 0 ? -out.strides[i] : out.strides[i];
      if (out.strides[i] == INT64_MIN || __builtin_mul_overflow(out.shape[i] - 1, stride, &span) ||
          __builtin_add_overflow(extent, span, &extent)) {
        return std::string(name) + " has strides " + shape_string(out.strides) +
               " that reach beyond what int64 can address";
      }
    }
    if (__builtin_mul_overflow(extent + 1, itemsize, &extent)) {
      return std::string(name) + " has strides " + shape_string(out.strides) +
             " that reach beyond what int64 can address";
    }
  }
  if (out.numel() > 0 && t->data == nullptr && !allow_null_data) {
    return std::string(name) + " has NULL data";
  }
  return "";
}

// Calls fn(offsets) for every multi-index of `shape` with dimension `skip` held at 0 (pass -1
// to visit every element); offsets[k] is that index's element offset in tensor k.
template <size_t K, class F>
void for_each_index(const std::vector<int64_t>& shape, int skip,
                    const std::array<const std::vector<int64_t>*, K>& strides, F&& fn) {
  const int nd = static_cast<int>(shape.size());
  for (int d = 0; d < nd; ++d) {
    if (d != skip && shape[d] == 0) return;
  }
  std::vector<int64_t> index(nd, 0);
  std::array<int64_t, K> offsets{};
  while (true) {
    fn(offsets);
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (d == skip) continue;
      if (++index[d] < shape[d]) {
        for (size_t k = 0; k < K; ++k) offsets[k] += (*strides[k])[d];
        break;
      }
      for (size_t k = 0; k < K; ++k) offsets[k] -= (*strides[k])[d] * (shape[d] - 1);
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace opforge
