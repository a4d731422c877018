/*
 * opforge kernel library: the C ABI every framework adapter calls.
 *
 * Tensors are DLPack DLTensor descriptors: data, device, dtype, shape, strides (in elements;
 * NULL means row-major) and byte_offset. All tensors of one call live on the same device. The
 * stream is a cudaStream_t for CUDA tensors (NULL: the legacy default stream) and is ignored on
 * the CPU, where every op runs synchronously on the calling thread.
 *
 * Every op returns an opforge_status. On failure nothing useful was written and
 * opforge_last_error() returns a message naming the op and the offending argument, valid until
 * the next call on the same thread. Element counts and stride extents must fit in int64; an
 * output may not share memory with another argument unless it is exactly that argument's view.
 *
 * dtypes: data tensors are float32, float16 or bfloat16 (arithmetic in float32 on the GPU,
 * float64 in the CPU reference); indices are int64; parameters and statistics are float32 (or
 * the data's dtype where an op says so). Each op's arguments, checks and output shapes are
 * declared in kernels/ops.yaml and documented in opforge/ops.h.
 *
 * Layouts: every implementation, CPU and CUDA, accepts any strides (negative and zero strides
 * for inputs); the CUDA kernels read the common views (transposed, permuted, row-strided) in
 * place and others through contiguous copies on the stream. Empty tensors and size-1 dims are
 * valid.
 */
#ifndef OPFORGE_OPFORGE_H_
#define OPFORGE_OPFORGE_H_

#include <dlpack/dlpack.h>
#include <stdint.h>

#if defined(OPFORGE_BUILDING_LIBRARY)
#define OPFORGE_API __attribute__((visibility("default")))
#else
#define OPFORGE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a signature or the meaning of an argument changes. */
#define OPFORGE_ABI_VERSION 3

/* Tensors have at most this many dimensions. */
#define OPFORGE_MAX_NDIM 16

typedef enum opforge_status {
  OPFORGE_OK = 0,
  /* Shapes, dtypes, devices, dims or values the op does not accept. */
  OPFORGE_ERROR_INVALID_ARGUMENT = 1,
  /* Valid input this build cannot run: a CUDA tensor in a CPU-only build, a device other than
     the CPU and CUDA. */
  OPFORGE_ERROR_UNSUPPORTED = 2,
  /* The CUDA runtime or cuDNN reported an error. */
  OPFORGE_ERROR_CUDA = 3,
  OPFORGE_ERROR_INTERNAL = 4,
  /* An argument of a dtype the op does not take, or tensors whose dtypes disagree (a kind of
     invalid argument that frameworks report as a type error). */
  OPFORGE_ERROR_INVALID_DTYPE = 5
} opforge_status;

/* OPFORGE_ABI_VERSION of the loaded library, to detect a header/library mismatch. */
OPFORGE_API int opforge_abi_version(void);

/* The message of the last failed call on this thread ("" if none). */
OPFORGE_API const char* opforge_last_error(void);

/* Whether this build has the CUDA implementations (1) or is CPU-only (0). */
OPFORGE_API int opforge_has_cuda(void);

/* Whether this build's CUDA batch_norm uses cuDNN (1) or is unavailable (0). */
OPFORGE_API int opforge_has_cudnn(void);

/*
 * Shape inference. Every op has a twin, opforge_<op>_infer, taking the same arguments minus the
 * stream: it runs the op's argument checks and describes each output instead of computing it.
 * Inputs need ndim, shape, dtype and device (data may be NULL); each output's `shape` must point
 * to room for OPFORGE_MAX_NDIM values, and ndim, shape, dtype and device are written (strides
 * NULL, data untouched). Framework adapters use it to allocate outputs and to report argument
 * errors before any kernel runs.
 */

#ifdef __cplusplus
}
#endif

/* The ops, generated from kernels/ops.yaml. */
#include "opforge/ops.h"

#endif /* OPFORGE_OPFORGE_H_ */
