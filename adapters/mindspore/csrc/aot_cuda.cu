// The CUDA build of the AOT entry points: the same adapter, compiled by nvcc, on device memory.
#define OPFORGE_MS_CUDA 1
#include "aot.cpp"
