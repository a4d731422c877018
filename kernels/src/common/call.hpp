// One call of the C ABI: reading its arguments, the checks the op table declares, the output
// shape rules and the dispatch to a device. The entry points generated from kernels/ops.yaml
// (ops_api.cpp) are sequences of calls to this class; nothing here knows any op.
//
// The first problem found is the one reported; once a check has failed, later checks do nothing,
// so a generated entry can run them all in a row. In infer mode (opforge_<op>_infer) outputs are
// described rather than checked: their ndim, shape, dtype and device are written.
#pragma once

#include <exception>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "common/tensor.hpp"

namespace opforge {

class Call {
 public:
  enum Mode { kRun, kInfer };
  using Named = std::pair<const Tensor*, const char*>;

  Call(const char* op, Mode mode);

  bool ok() const { return status_ == OPFORGE_OK; }
  opforge_status status() const { return status_; }
  opforge_status reject(opforge_status status, const std::string& message);
  opforge_status invalid(const std::string& message) {
    return reject(OPFORGE_ERROR_INVALID_ARGUMENT, message);
  }

  // --- arguments ---
  // A tensor argument read into `storage` (nullptr when optional and absent). Data may be NULL
  // in infer mode. The first tensor read fixes the call's device; every other must be on it.
  Tensor* input(const DLTensor* t, const char* name, Tensor& storage, bool optional);
  std::vector<int64_t> int_list(const int64_t* values, int64_t length, const char* name);

  // --- checks of one tensor (each does nothing for an absent optional tensor) ---
  void dtypes(const Tensor* t, const char* name, std::initializer_list<DType> allowed,
              const char* allowed_text);
  void rank(const Tensor* t, const char* name, int lo, int hi);
  void like(const Tensor* ref, const char* ref_name, const Tensor* t, const char* name);
  void broadcastable(const Tensor* ref, const char* ref_name, const Tensor* t, const char* name);
  // Of shape [C], C the size of dim 1 of `ref`; float32, or also `ref`'s dtype if `or_like`.
  void channels(const Tensor* ref, const char* ref_name, const Tensor* t, const char* name,
                bool or_like = false);
  // Of exactly `shape`; float32, or also the dtype of `like` when given.
  void shaped(const std::vector<int64_t>& shape, const char* shape_name, const Tensor* t,
              const char* name, const Tensor* like = nullptr);

  // --- scalar checks ---
  // `dim` normalised into [0, rank) of `of` (a 0-d tensor takes 0 and -1).
  int64_t dim(int64_t dim, const Tensor* of, const char* of_name, const char* name);
  std::optional<int64_t> dim(const int64_t* dim, const Tensor* of, const char* of_name,
                             const char* name);
  void at_least(double value, double lo, const char* name);
  void finite(double value, const char* name);
  int choice(int value, int count, const char* name, const char* values_text);
  // `shape` is non-empty and equal to the trailing dims of `of`.
  void suffix(const std::vector<int64_t>& shape, const char* name, const Tensor* of,
              const char* of_name);

  // --- op-level checks ---
  void together(std::initializer_list<Named> tensors);
  void required_unless(bool flag, const char* flag_name, std::initializer_list<Named> tensors);
  void per_channel_count(const Tensor* x, const char* name, int64_t min, bool when);

  // --- output shape rules (empty when a check has already failed) ---
  std::vector<int64_t> shape_of(const Tensor* t) const;
  std::vector<int64_t> broadcast_shape(const Tensor* a, const char* a_name, const Tensor* b,
                                       const char* b_name);
  std::vector<int64_t> reduce_shape(const Tensor* x, const char* name, std::optional<int64_t> dim,
                                    bool keepdim);
  std::vector<int64_t> channels_shape(const Tensor* x) const;
  std::vector<int64_t> batch_shape(const Tensor* x, const std::vector<int64_t>& normalized) const;

  // An output of `shape` and `dtype` on the call's device: checked (run) or described (infer).
  Tensor* output(DLTensor* t, const char* name, Tensor& storage, const std::vector<int64_t>& shape,
                 DLDataType dtype);

  // Outputs and in-place tensors may not share memory with any other argument (an output that
  // is exactly an input, element for element, is allowed). The first `updated` of `written` are
  // updated in place (running statistics): they need one address per element and may not share
  // memory with what is read even as the same view (the kernel would read values it has already
  // updated).
  void no_overlap(std::initializer_list<Named> written, std::initializer_list<Named> read,
                  size_t updated = 0);

  // Runs the CPU or CUDA implementation on the call's device. No C++ exception may cross the
  // C ABI (it would abort the caller's process): a failed allocation of a kernel's working
  // buffers (per-row offsets of a strided view, say) becomes an error status.
  template <class CpuFn, class CudaFn>
  opforge_status run(CpuFn&& on_cpu, CudaFn&& on_cuda) {
    try {
      return run_on_device(on_cpu, on_cuda);
    } catch (const std::bad_alloc&) {
      return reject(OPFORGE_ERROR_INTERNAL,
                    "out of host memory for the kernel's working buffers: free memory, or pass "
                    "a contiguous tensor (a strided view needs per-element offsets)");
    } catch (const std::exception& e) {
      return reject(OPFORGE_ERROR_INTERNAL, std::string("internal error: ") + e.what());
    }
  }

  DLDevice device() const { return device_; }

 private:
  template <class CpuFn, class CudaFn>
  opforge_status run_on_device(CpuFn& on_cpu, CudaFn& on_cuda) {
    if (!ok()) return status_;
    switch (device_.device_type) {
      case kDLCPU: {
        const opforge_status s = on_cpu();
        return s == OPFORGE_OK ? s : status_from_backend(s);
      }
      case kDLCUDA:
#ifdef OPFORGE_HAVE_CUDA
      {
        const opforge_status s = on_cuda();
        return s == OPFORGE_OK ? s : status_from_backend(s);
      }
#else
        (void)on_cuda;
        return reject(OPFORGE_ERROR_UNSUPPORTED,
                      "tensors are on " + device_string(device_) +
                          " but this library was built without CUDA (OPFORGE_WITH_CUDA=OFF)");
#endif
      default:
        return reject(OPFORGE_ERROR_UNSUPPORTED, "unsupported device " + device_string(device_));
    }
  }

  void same_device(const Tensor& t, const char* name);
  void param_dtype(const Tensor& t, const char* name, const Tensor* like);
  opforge_status status_from_backend(opforge_status s);

  std::string op_;
  Mode mode_;
  opforge_status status_ = OPFORGE_OK;
  bool has_device_ = false;
  DLDevice device_{kDLCPU, 0};
};

inline constexpr DLDataType kFloat32Type{kDLFloat, 32, 1};
inline constexpr DLDataType kInt64Type{kDLInt, 64, 1};

}  // namespace opforge
