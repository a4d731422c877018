/*
 * opforge kernel library: the C ABI every framework adapter calls.
 *
 * Every op takes DLPack DLTensor descriptors (data, device, dtype, shape, strides in elements,
 * byte_offset) and a stream (a cudaStream_t for CUDA tensors, ignored on the CPU; NULL means the
 * default stream). Every op returns an opforge_status; on failure opforge_last_error() gives a
 * message naming the op and what was wrong, valid until the next call on the same thread.
 */
#ifndef OPFORGE_OPFORGE_H_
#define OPFORGE_OPFORGE_H_

#include <dlpack/dlpack.h>

#if defined(OPFORGE_BUILDING_LIBRARY)
#define OPFORGE_API __attribute__((visibility("default")))
#else
#define OPFORGE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a signature or the meaning of an argument changes. */
#define OPFORGE_ABI_VERSION 1

typedef enum opforge_status {
  OPFORGE_OK = 0,
  /* Shapes, dtypes, devices or strides the op does not accept. */
  OPFORGE_ERROR_INVALID_ARGUMENT = 1,
  /* Valid input this build cannot run, e.g. a CUDA tensor in a library built without CUDA. */
  OPFORGE_ERROR_UNSUPPORTED = 2,
  /* The CUDA runtime reported an error. */
  OPFORGE_ERROR_CUDA = 3,
  OPFORGE_ERROR_INTERNAL = 4
} opforge_status;

/* OPFORGE_ABI_VERSION of the loaded library, to detect a header/library mismatch. */
OPFORGE_API int opforge_abi_version(void);

/* The message of the last failed call on this thread ("" if none). */
OPFORGE_API const char* opforge_last_error(void);

/* Whether this build has the CUDA implementations (1) or is CPU-only (0). */
OPFORGE_API int opforge_has_cuda(void);

/*
 * out = a + alpha * b, elementwise. a, b and out have the same shape, dtype and device; any
 * strides (out must not overlap a or b unless it is the same tensor). dtypes: float32.
 */
OPFORGE_API opforge_status opforge_add(const DLTensor* a, const DLTensor* b, double alpha,
                                       DLTensor* out, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* OPFORGE_OPFORGE_H_ */
