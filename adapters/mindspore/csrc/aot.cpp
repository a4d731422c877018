// MindSpore AOT entry points over the kernel library's C ABI: the runtime (aot_runtime.hpp) and
// one entry per op of the op table (aot_ops.inc, generated), compiled twice: with the C++
// compiler for MindSpore's CPU kernels and (via aot_cuda.cu) with nvcc for its GPU kernels.
#include "aot_runtime.hpp"

#include "aot_ops.inc"

// The message of the last failed call in this process (empty if none), for the Python wrappers.
OPFORGE_MS_API const char* OPFORGE_MS_CONCAT(opforge_ms_last_error, OPFORGE_MS_ENTRY_SUFFIX)() {
  static thread_local std::string copy;
  std::lock_guard<std::mutex> lock(opforge_ms::error_mutex);
  copy = opforge_ms::error_message;
  return copy.c_str();
}
