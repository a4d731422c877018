// The C ABI: validate arguments, then dispatch to the CPU or CUDA implementation.
#include <string>

#include "backends.hpp"
#include "status.hpp"

using opforge::fail;
using opforge::Tensor;

namespace {

opforge_status check_same(const char* op, const Tensor& ref, const char* ref_name, const Tensor& t,
                          const char* name) {
  if (t.shape != ref.shape) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": shape mismatch: " + ref_name + " is " +
                    opforge::shape_string(ref.shape) + " but " + name + " is " +
                    opforge::shape_string(t.shape));
  }
  if (t.dtype.code != ref.dtype.code || t.dtype.bits != ref.dtype.bits ||
      t.dtype.lanes != ref.dtype.lanes) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": dtype mismatch: " + ref_name + " is " +
                    opforge::dtype_string(ref.dtype) + " but " + name + " is " +
                    opforge::dtype_string(t.dtype));
  }
  if (t.device.device_type != ref.device.device_type ||
      t.device.device_id != ref.device.device_id) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT,
                std::string(op) + ": device mismatch: " + ref_name + " is on " +
                    opforge::device_string(ref.device) + " but " + name + " is on " +
                    opforge::device_string(t.device));
  }
  return OPFORGE_OK;
}

}  // namespace

extern "C" {

OPFORGE_API opforge_status opforge_add(const DLTensor* a, const DLTensor* b, double alpha,
                                       DLTensor* out, void* stream) {
  opforge::clear_error();
  Tensor ta, tb, to;
  std::string problem = opforge::read_tensor(a, "a", ta);
  if (problem.empty()) problem = opforge::read_tensor(b, "b", tb);
  if (problem.empty()) problem = opforge::read_tensor(out, "out", to);
  if (!problem.empty()) return fail(OPFORGE_ERROR_INVALID_ARGUMENT, "opforge_add: " + problem);
  if (opforge_status s = check_same("opforge_add", ta, "a", tb, "b"); s != OPFORGE_OK) return s;
  if (opforge_status s = check_same("opforge_add", ta, "a", to, "out"); s != OPFORGE_OK) return s;
  if (!opforge::is_float32(ta.dtype)) {
    return fail(OPFORGE_ERROR_INVALID_ARGUMENT,
                "opforge_add: dtype " + opforge::dtype_string(ta.dtype) +
                    " is not supported (supported: float32)");
  }
  switch (ta.device.device_type) {
    case kDLCPU:
      (void)stream;  // CPU ops run synchronously on the calling thread.
      opforge::cpu::add(ta, tb, alpha, to);
      return OPFORGE_OK;
    case kDLCUDA:
#ifdef OPFORGE_HAVE_CUDA
      return opforge::cuda::add(ta, tb, alpha, to, stream);
#else
      return fail(OPFORGE_ERROR_UNSUPPORTED,
                  "opforge_add: tensors are on " + opforge::device_string(ta.device) +
                      " but this library was built without CUDA (OPFORGE_WITH_CUDA=OFF)");
#endif
    default:
      return fail(OPFORGE_ERROR_UNSUPPORTED,
                  "opforge_add: unsupported device " + opforge::device_string(ta.device));
  }
}

}  // extern "C"
