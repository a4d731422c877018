// What the generated MindSpore AOT entry points (aot_ops.inc) share; nothing here knows an op.
//
// MindSpore calls every AOT kernel as
//   int Fn(int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,
//          void* stream, void* extra)
// with the inputs first and the outputs after them. Scalar arguments (dims, flags, alpha, eps)
// travel in the shape of a last, zero-element "attribute" input: shapes are plain int64 arrays
// on the host for CPU and GPU kernels alike, whereas `extra`'s attribute interface is a C++ class
// whose layout differs between MindSpore's two ABIs and whose header does not compile outside
// MindSpore's own tree. opforge/mindspore/_encoding.py says how they are written; Attrs reads
// them. Each op's parameter layout (inputs, then the attribute input, then its outputs and an
// updated copy of each tensor it writes in place) comes from the op table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "opforge/opforge.h"

#ifdef OPFORGE_MS_CUDA
#include <cuda_runtime.h>
#define OPFORGE_MS_ENTRY_SUFFIX _cuda
#else
#define OPFORGE_MS_ENTRY_SUFFIX _cpu
#endif

#define OPFORGE_MS_API extern "C" __attribute__((visibility("default")))

namespace opforge_ms {
namespace {

std::mutex error_mutex;
std::string error_message;  // the last failure; GRAPH mode runs kernels off the Python thread

// A failure of this adapter's own checks (as opposed to the kernel library's).
constexpr int kAdapterError = 100;

class Failure {
 public:
  explicit Failure(std::string message) : message(std::move(message)) {}
  std::string message;
};

// One AOT invocation: typed access to its parameters.
class Call {
 public:
  Call(const char* op, int nparam, void** params, int* ndims, int64_t** shapes,
       const char** dtypes, void* stream)
      : op_(op), nparam_(nparam), params_(params), ndims_(ndims), shapes_(shapes),
        dtypes_(dtypes), stream_(stream) {}

  void expect_params(int inputs, int outputs) {
    if (nparam_ != inputs + outputs) {
      throw Failure("expected " + std::to_string(inputs) + " inputs and " +
                    std::to_string(outputs) + " outputs, MindSpore passed " +
                    std::to_string(nparam_) + " parameters (adapter and library out of step?)");
    }
  }

  // Parameter i as a contiguous DLTensor (MindSpore hands AOT kernels dense buffers).
  DLTensor tensor(int i) const {
    DLTensor t{};
    t.data = params_[i];
    t.device = device();
    t.ndim = ndims_[i];
    t.dtype = dtype(i);
    t.shape = shapes_[i];
    t.strides = nullptr;
    t.byte_offset = 0;
    return t;
  }

  int64_t elements(int i) const {
    int64_t n = 1;
    for (int d = 0; d < ndims_[i]; ++d) n *= shapes_[i][d];
    return n;
  }

  int64_t* attr_values(int i) const { return shapes_[i] + 1; }
  int attr_count(int i) const { return ndims_[i] - 1; }

  void copy(int to, int from) const {
    const DLTensor t = tensor(from);
    const size_t bytes = static_cast<size_t>(elements(from)) * (t.dtype.bits / 8);
    if (bytes == 0) return;
#ifdef OPFORGE_MS_CUDA
    const cudaError_t err = cudaMemcpyAsync(params_[to], params_[from], bytes,
                                            cudaMemcpyDeviceToDevice,
                                            static_cast<cudaStream_t>(stream_));
    if (err != cudaSuccess) throw Failure(std::string("copying a buffer: ") + cudaGetErrorString(err));
#else
    std::memcpy(params_[to], params_[from], bytes);
#endif
  }

  void* stream() const { return stream_; }
  const char* op() const { return op_; }

 private:
  DLDevice device() const {
#ifdef OPFORGE_MS_CUDA
    int id = 0;
    if (cudaGetDevice(&id) != cudaSuccess) throw Failure("no current CUDA device");
    return DLDevice{kDLCUDA, id};
#else
    return DLDevice{kDLCPU, 0};
#endif
  }

  DLDataType dtype(int i) const {
    const std::string name = dtypes_[i];
    if (name == "float32") return DLDataType{kDLFloat, 32, 1};
    if (name == "float16") return DLDataType{kDLFloat, 16, 1};
    if (name == "bfloat16") return DLDataType{kDLBfloat, 16, 1};
    if (name == "float64") return DLDataType{kDLFloat, 64, 1};
    if (name == "int64") return DLDataType{kDLInt, 64, 1};
    if (name == "int32") return DLDataType{kDLInt, 32, 1};
    if (name == "int8") return DLDataType{kDLInt, 8, 1};
    throw Failure("parameter " + std::to_string(i) + " has dtype " + name +
                  ", which the kernel library does not take");
  }

  const char* op_;
  int nparam_;
  void** params_;
  int* ndims_;
  int64_t** shapes_;
  const char** dtypes_;
  void* stream_;
};

// The scalar arguments read, in order, from the attribute input's shape [0, v1, v2, ...], as
// opforge/mindspore/_encoding.py writes them (all values lie in 0..2**31-1).
class Attrs {
 public:
  Attrs(const Call& call, int index)
      : values_(call.attr_values(index)), count_(call.attr_count(index)) {}

  bool flag() { return next() != 0; }
  // A str argument: the index of its value, one entry (as _encoding.py writes it).
  int choice() { return static_cast<int>(next()); }
  int64_t integer() {
    const bool negative = next() != 0;
    const int64_t magnitude = next();
    return negative ? -magnitude : magnitude;
  }
  double real() {
    uint64_t bits = 0;
    for (int i = 0; i < 4; ++i) bits = (bits << 16) | (static_cast<uint64_t>(next()) & 0xffff);
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  std::optional<int64_t> optional_integer() {
    const bool present = flag();
    const int64_t value = integer();
    return present ? std::optional<int64_t>(value) : std::nullopt;
  }
  std::optional<double> optional_real() {
    const bool present = flag();
    const double value = real();
    return present ? std::optional<double>(value) : std::nullopt;
  }
  std::vector<int64_t> integers() {
    const int64_t n = next();
    std::vector<int64_t> values;
    for (int64_t i = 0; i < n; ++i) values.push_back(integer());
    return values;
  }

 private:
  int64_t next() {
    if (read_ >= count_) throw Failure("the attribute input holds too few values");
    return values_[read_++];
  }
  const int64_t* values_;
  int count_;
  int read_ = 0;
};

DLTensor* optional(bool present, DLTensor& t) { return present ? &t : nullptr; }

int check(opforge_status status) {
  if (status != OPFORGE_OK) throw Failure(opforge_last_error());
  return 0;
}

// Runs one op; a failure is kept for opforge_ms_last_error() and printed, because in GRAPH mode
// MindSpore reports only the return code, far from the Python call.
int invoke(const char* op, int (*fn)(Call&), int nparam, void** params, int* ndims,
           int64_t** shapes, const char** dtypes, void* stream) {
  Call call(op, nparam, params, ndims, shapes, dtypes, stream);
  std::string message;
  int status = 0;
  try {
    return fn(call);
  } catch (const Failure& failure) {
    message = failure.message;
    status = kAdapterError;
  } catch (const std::exception& exc) {
    message = exc.what();
    status = kAdapterError;
  }
  if (message.rfind(op, 0) != 0) message = std::string(op) + ": " + message;
  std::fprintf(stderr, "opforge.mindspore: %s\n", message.c_str());
  std::lock_guard<std::mutex> lock(error_mutex);
  error_message = message;
  return status;
}

}  // namespace
}  // namespace opforge_ms

#define OPFORGE_MS_CONCAT_(a, b) a##b
#define OPFORGE_MS_CONCAT(a, b) OPFORGE_MS_CONCAT_(a, b)
// extern "C" int opforge_ms_<op>_<cpu|cuda>(...) with MindSpore's AOT signature.
#define OPFORGE_MS_ENTRY(op)                                                                   \
  OPFORGE_MS_API int OPFORGE_MS_CONCAT(opforge_ms_##op, OPFORGE_MS_ENTRY_SUFFIX)(             \
      int nparam, void** params, int* ndims, int64_t** shapes, const char** dtypes,            \
      void* stream, void* /*extra*/) {                                                         \
    return opforge_ms::invoke(#op, &opforge_ms::op, nparam, params, ndims, shapes, dtypes,     \
                              stream);                                                         \
  }
