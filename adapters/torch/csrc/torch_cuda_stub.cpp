// Link-time stand-in for libtorch_cuda.so (never installed): the one stable-ABI symbol the CUDA
// build of _C.so takes from it. At run time the libtorch_cuda.so of the CUDA torch that
// `import torch` loaded provides the real one.
#include <cstdint>

extern "C" __attribute__((visibility("default"))) int32_t aoti_torch_get_current_cuda_stream(
    int32_t, void**) {
  return 1;
}
