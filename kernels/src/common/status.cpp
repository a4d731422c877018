#include "common/status.hpp"

namespace opforge {
namespace {
thread_local std::string last_error;
}  // namespace

opforge_status fail(opforge_status status, const std::string& message) {
  last_error = message;
  return status;
}

void clear_error() { last_error.clear(); }

}  // namespace opforge

extern "C" {

OPFORGE_API int opforge_abi_version(void) { return OPFORGE_ABI_VERSION; }

OPFORGE_API const char* opforge_last_error(void) { return opforge::last_error.c_str(); }

OPFORGE_API int opforge_has_cuda(void) {
#ifdef OPFORGE_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

OPFORGE_API int opforge_has_cudnn(void) {
#ifdef OPFORGE_HAVE_CUDNN
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
