#include "common/call.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace opforge {
namespace {

std::string list_string(const std::vector<int64_t>& v) { return shape_string(v); }

// A double as the shortest text that reads back to it (-1e-09, 0.5, inf), not to_string's six
// fixed decimals (which print -1e-9 as -0.000000).
std::string number_string(double value) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

// Whether every element of `t` has an address of its own (no zero or interleaved strides).
bool self_overlapping(const Tensor& t) {
  if (t.numel() == 0) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (|stride|, size) of dims with size > 1
  for (int i = 0; i < t.ndim(); ++i) {
    if (t.shape[i] > 1) dims.emplace_back(t.strides[i] < 0 ? -t.strides[i] : t.strides[i], t.shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 1;  // elements spanned by the dims so far
  for (const auto& [stride, size] : dims) {
    if (stride < reach) return true;
    reach = stride * size;
  }
  return false;
}

// Whether `t` occupies one gap-free block of memory (some permutation of a contiguous tensor).
bool dense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int i = 0; i < t.ndim(); ++i) {
    if (t.shape[i] > 1) dims.emplace_back(t.strides[i] < 0 ? -t.strides[i] : t.strides[i], t.shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.data == b.data && a.shape == b.shape && a.strides == b.strides &&
         same_dtype(a.dl_dtype, b.dl_dtype);
}

}  // namespace

Call::Call(const char* op, Mode mode) : op_(std::string("opforge_") + op), mode_(mode) {
  clear_error();
}

opforge_status Call::reject(opforge_status status, const std::string& message) {
  if (ok()) status_ = fail(status, op_ + ": " + message);
  return status_;
}

opforge_status Call::status_from_backend(opforge_status s) {
  status_ = s;
  return s;
}

void Call::same_device(const Tensor& t, const char* name) {
  if (!has_device_) {
    device_ = t.device;
    has_device_ = true;
  } else if (!opforge::same_device(device_, t.device)) {
    invalid(std::string("device mismatch: ") + name + " is on " + device_string(t.device) +
            " but the other tensors are on " + device_string(device_));
  }
}

Tensor* Call::input(const DLTensor* t, const char* name, Tensor& storage, bool optional) {
  if (t == nullptr && optional) return nullptr;
  if (!ok()) return &storage;
  const std::string problem = read_tensor(t, name, storage, mode_ == kInfer);
  if (!problem.empty()) {
    invalid(problem);
    return &storage;
  }
  same_device(storage, name);
  return &storage;
}

std::vector<int64_t> Call::int_list(const int64_t* values, int64_t length, const char* name) {
  if (!ok()) return {};
  if (length < 0 || length > OPFORGE_MAX_NDIM) {
    invalid(std::string(name) + " has " + std::to_string(length) + " values (supported: 0 to " +
            std::to_string(OPFORGE_MAX_NDIM) + ")");
    return {};
  }
  if (length > 0 && values == nullptr) {
    invalid(std::string(name) + " is NULL");
    return {};
  }
  return std::vector<int64_t>(values, values + length);
}

void Call::dtypes(const Tensor* t, const char* name, std::initializer_list<DType> allowed,
                  const char* allowed_text) {
  if (!ok() || t == nullptr) return;
  if (std::find(allowed.begin(), allowed.end(), t->dtype) == allowed.end()) {
    reject(OPFORGE_ERROR_INVALID_DTYPE, std::string(name) + " has dtype " +
                                            dtype_string(t->dl_dtype) + " (supported: " +
                                            allowed_text + ")");
  }
}

void Call::rank(const Tensor* t, const char* name, int lo, int hi) {
  if (!ok() || t == nullptr) return;
  if (t->ndim() < lo || t->ndim() > hi) {
    invalid(std::string(name) + " must have " + std::to_string(lo) + " to " + std::to_string(hi) +
            " dimensions, got shape " + shape_string(t->shape));
  }
}

void Call::like(const Tensor* ref, const char* ref_name, const Tensor* t, const char* name) {
  if (!ok() || t == nullptr || ref == nullptr) return;
  if (t->shape != ref->shape) {
    invalid(std::string("shape mismatch: ") + ref_name + " is " + shape_string(ref->shape) +
            " but " + name + " is " + shape_string(t->shape));
  } else if (!same_dtype(t->dl_dtype, ref->dl_dtype)) {
    reject(OPFORGE_ERROR_INVALID_DTYPE, std::string("dtype mismatch: ") + ref_name + " is " +
                                            dtype_string(ref->dl_dtype) + " but " + name + " is " +
                                            dtype_string(t->dl_dtype));
  }
}

void Call::broadcastable(const Tensor* ref, const char* ref_name, const Tensor* t,
                         const char* name) {
  if (!ok() || t == nullptr || ref == nullptr) return;
  if (!same_dtype(t->dl_dtype, ref->dl_dtype)) {
    reject(OPFORGE_ERROR_INVALID_DTYPE, std::string("dtype mismatch: ") + ref_name + " is " +
                                            dtype_string(ref->dl_dtype) + " but " + name + " is " +
                                            dtype_string(t->dl_dtype));
    return;
  }
  broadcast_shape(ref, ref_name, t, name);
}

void Call::param_dtype(const Tensor& t, const char* name, const Tensor* like) {
  if (t.dtype == DType::kFloat32 || (like != nullptr && same_dtype(t.dl_dtype, like->dl_dtype))) {
    return;
  }
  const bool other = like != nullptr && like->dtype != DType::kFloat32;
  reject(OPFORGE_ERROR_INVALID_DTYPE,
         std::string(name) + " must be float32" +
             (other ? " or " + dtype_string(like->dl_dtype) : std::string()) + ", got " +
             dtype_string(t.dl_dtype));
}

void Call::channels(const Tensor* ref, const char* ref_name, const Tensor* t, const char* name,
                    bool or_like) {
  if (!ok() || t == nullptr || ref == nullptr) return;
  const int64_t c = ref->ndim() > 1 ? ref->shape[1] : 0;
  if (t->ndim() != 1 || t->shape[0] != c) {
    invalid(std::string(name) + " must have shape [" + std::to_string(c) +
            "] (one per channel of " + ref_name + "), got " + shape_string(t->shape));
    return;
  }
  param_dtype(*t, name, or_like ? ref : nullptr);
}

void Call::shaped(const std::vector<int64_t>& shape, const char* shape_name, const Tensor* t,
                  const char* name, const Tensor* like) {
  if (!ok() || t == nullptr) return;
  if (t->shape != shape) {
    // torch's wording (its OpInfo error inputs match on it), in opforge's one line.
    invalid(std::string("Expected ") + name + " to be of same shape as " + shape_name + " " +
            list_string(shape) + ", got " + shape_string(t->shape));
    return;
  }
  param_dtype(*t, name, like);
}

int64_t Call::dim(int64_t dim, const Tensor* of, const char* of_name, const char* name) {
  if (!ok() || of == nullptr) return 0;
  const int64_t rank = std::max(of->ndim(), 1);
  if (dim < -rank || dim >= rank) {
    invalid(std::string(name) + " " + std::to_string(dim) + " is out of range for " + of_name +
            " of shape " + shape_string(of->shape) + " (valid: " + std::to_string(-rank) +
            " to " + std::to_string(rank - 1) + ")");
    return 0;
  }
  return dim < 0 ? dim + rank : dim;
}

std::optional<int64_t> Call::dim(const int64_t* dim_value, const Tensor* of, const char* of_name,
                                 const char* name) {
  if (dim_value == nullptr) return std::nullopt;
  return dim(*dim_value, of, of_name, name);
}

void Call::at_least(double value, double lo, const char* name) {
  if (ok() && !(value >= lo)) {
    invalid(std::string(name) + " must be at least " + number_string(lo) + ", got " +
            number_string(value));
  }
}

void Call::finite(double value, const char* name) {
  if (ok() && !std::isfinite(value)) {
    invalid(std::string(name) + " must be finite, got " + number_string(value));
  }
}

int Call::choice(int value, int count, const char* name, const char* values_text) {
  if (ok() && (value < 0 || value >= count)) {
    invalid(std::string(name) + " must be one of " + values_text + " (0 to " +
            std::to_string(count - 1) + "), got " + std::to_string(value));
  }
  return value;
}

void Call::suffix(const std::vector<int64_t>& shape, const char* name, const Tensor* of,
                  const char* of_name) {
  if (!ok() || of == nullptr) return;
  // torch's wording (its OpInfo error inputs match on it), in opforge's one line.
  if (shape.empty()) {
    invalid(std::string("Expected ") + name + " to be at least 1-dimensional, got []");
    return;
  }
  const bool fits = shape.size() <= of->shape.size() &&
                    std::equal(shape.begin(), shape.end(), of->shape.end() - shape.size());
  if (!fits) {
    const std::string dims = list_string(shape);
    invalid(std::string("Given ") + name + "=" + dims + ", expected " + of_name +
            " with shape [*, " + dims.substr(1) + ", got " + of_name + " of shape " +
            shape_string(of->shape));
  }
}

void Call::together(std::initializer_list<Named> tensors) {
  if (!ok()) return;
  bool any = false, all = true;
  std::string names;
  for (const auto& [t, name] : tensors) {
    any = any || t != nullptr;
    all = all && t != nullptr;
    names += (names.empty() ? "" : " and ") + std::string(name);
  }
  if (any && !all) invalid("give " + names + " together, or none of them");
}

void Call::required_unless(bool flag, const char* flag_name, std::initializer_list<Named> tensors) {
  if (!ok() || flag) return;
  for (const auto& [t, name] : tensors) {
    if (t == nullptr) {
      invalid(std::string(name) + " is required when " + flag_name + " is false");
      return;
    }
  }
}

void Call::per_channel_count(const Tensor* x, const char* name, int64_t min, bool when) {
  if (!ok() || x == nullptr || !when || x->numel() == 0 || x->ndim() < 2) return;
  const int64_t per_channel = x->numel() / x->shape[1];
  if (per_channel < min) {
    invalid("needs at least " + std::to_string(min) + " values per channel, got " + name +
            " of shape " + shape_string(x->shape));
  }
}

std::vector<int64_t> Call::shape_of(const Tensor* t) const {
  return ok() && t != nullptr ? t->shape : std::vector<int64_t>{};
}

std::vector<int64_t> Call::broadcast_shape(const Tensor* a, const char* a_name, const Tensor* b,
                                           const char* b_name) {
  if (!ok() || a == nullptr || b == nullptr) return {};
  const size_t n = std::max(a->shape.size(), b->shape.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a->shape.size() ? 1 : a->shape[i - (n - a->shape.size())];
    const int64_t db = i < n - b->shape.size() ? 1 : b->shape[i - (n - b->shape.size())];
    if (da != db && da != 1 && db != 1) {
      invalid(std::string("shapes do not broadcast: ") + a_name + " is " + shape_string(a->shape) +
              " but " + b_name + " is " + shape_string(b->shape));
      return {};
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> Call::reduce_shape(const Tensor* x, const char* name,
                                        std::optional<int64_t> dim, bool keepdim) {
  if (!ok() || x == nullptr) return {};
  std::vector<int64_t> out;
  int64_t reduced = x->numel();
  if (!dim) {
    if (keepdim) out.assign(x->shape.size(), 1);
  } else if (x->ndim() == 0) {
    reduced = 1;
  } else {
    reduced = x->shape[*dim];
    out = x->shape;
    if (keepdim) {
      out[*dim] = 1;
    } else {
      out.erase(out.begin() + *dim);
    }
  }
  // Both frameworks refuse a reduction over nothing even where the result would be empty
  // (torch.argmax of a 0 x 0 tensor over dim 0).
  if (reduced == 0) {
    invalid(std::string("cannot reduce ") + name + " of shape " + shape_string(x->shape) +
            (dim ? " over dim " + std::to_string(*dim) + ", which has size 0" : ", which is empty"));
    return {};
  }
  return out;
}

std::vector<int64_t> Call::channels_shape(const Tensor* x) const {
  return ok() && x != nullptr && x->ndim() > 1 ? std::vector<int64_t>{x->shape[1]}
                                               : std::vector<int64_t>{};
}

std::vector<int64_t> Call::batch_shape(const Tensor* x, const std::vector<int64_t>& normalized) const {
  if (!ok() || x == nullptr || normalized.size() > x->shape.size()) return {};
  return std::vector<int64_t>(x->shape.begin(), x->shape.end() - normalized.size());
}

Tensor* Call::output(DLTensor* t, const char* name, Tensor& storage,
                     const std::vector<int64_t>& shape, DLDataType dtype) {
  if (!ok()) return &storage;
  if (t == nullptr) {
    invalid(std::string(name) + " is NULL");
    return &storage;
  }
  if (mode_ == kInfer) {
    if (t->shape == nullptr && !shape.empty()) {
      invalid(std::string(name) + " has NULL shape (give room for " +
              std::to_string(OPFORGE_MAX_NDIM) + " dims)");
      return &storage;
    }
    t->ndim = static_cast<int32_t>(shape.size());
    std::copy(shape.begin(), shape.end(), t->shape);
    t->dtype = dtype;
    t->device = device_;
    t->strides = nullptr;
    t->byte_offset = 0;
    return &storage;
  }
  const std::string problem = read_tensor(t, name, storage);
  if (!problem.empty()) {
    invalid(problem);
    return &storage;
  }
  same_device(storage, name);
  if (!ok()) return &storage;
  if (storage.shape != shape) {
    invalid(std::string(name) + " must have shape " + shape_string(shape) + ", got " +
            shape_string(storage.shape));
  } else if (!same_dtype(storage.dl_dtype, dtype)) {
    reject(OPFORGE_ERROR_INVALID_DTYPE, std::string(name) + " must be " + dtype_string(dtype) +
                                            ", got " + dtype_string(storage.dl_dtype));
  } else if (self_overlapping(storage)) {
    invalid(std::string(name) + " has overlapping elements (strides " +
            shape_string(storage.strides) + "); outputs need one address per element");
  }
  return &storage;
}

void Call::no_overlap(std::initializer_list<Named> written, std::initializer_list<Named> read,
                      size_t updated) {
  if (!ok()) return;
  size_t index = 0;
  for (const auto& [t, name] : written) {
    if (index++ < updated && t != nullptr && self_overlapping(*t)) {
      invalid(std::string(name) + " has overlapping elements (strides " +
              shape_string(t->strides) + "); it is updated in place and needs one address per " +
              "element");
      return;
    }
  }
  if (mode_ == kInfer) return;
  // Interleaved strided views can share a span without sharing an element; only gap-free
  // tensors are known to collide. A tensor updated in place is refused on any shared span: a
  // missed collision there reads a value already updated (running statistics are small).
  auto overlaps = [&](const Tensor& a, const Tensor& b) {
    return spans_meet(a, b) && dense(a) && dense(b);
  };
  index = 0;
  for (auto w = written.begin(); w != written.end(); ++w) {
    const bool in_place = index++ < updated;
    if (w->first == nullptr) continue;
    for (const auto& [r, name] : read) {
      if (r == nullptr || !(in_place ? spans_meet(*w->first, *r) : overlaps(*w->first, *r)))
        continue;
      if (in_place) {
        invalid(std::string(w->second) + " is updated in place and overlaps " + name +
                " in memory; give it memory of its own");
        return;
      }
      if (!same_view(*w->first, *r)) {
        invalid(std::string(w->second) + " overlaps " + name +
                " in memory; give it memory of its own (or exactly the same view)");
        return;
      }
    }
    for (auto o = written.begin(); o != w; ++o) {
      if (o->first != nullptr && overlaps(*w->first, *o->first)) {
        invalid(std::string(w->second) + " and " + o->second + " overlap in memory");
        return;
      }
    }
  }
}

}  // namespace opforge
