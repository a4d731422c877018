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
 * the next call on the same thread.
 *
 * dtypes: data tensors are float32, float16 or bfloat16 (arithmetic in float32 on the GPU,
 * float64 in the CPU reference); argmax indices are int64; batch_norm parameters and
 * statistics (weight, bias, running and saved statistics, their gradients) are float32 whatever
 * the data dtype.
 *
 * Layouts: the CPU implementations accept any strides (including negative and zero strides for
 * inputs). The CUDA implementations need row-major contiguous tensors and return
 * OPFORGE_ERROR_UNSUPPORTED otherwise. Empty tensors and size-1 dimensions are valid.
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
#define OPFORGE_ABI_VERSION 2

typedef enum opforge_status {
  OPFORGE_OK = 0,
  /* Shapes, dtypes, devices, dims or values the op does not accept. */
  OPFORGE_ERROR_INVALID_ARGUMENT = 1,
  /* Valid input this build cannot run: a CUDA tensor in a CPU-only build, a strided CUDA
     tensor, batch_norm on CUDA in a build without cuDNN. */
  OPFORGE_ERROR_UNSUPPORTED = 2,
  /* The CUDA runtime or cuDNN reported an error. */
  OPFORGE_ERROR_CUDA = 3,
  OPFORGE_ERROR_INTERNAL = 4
} opforge_status;

/* OPFORGE_ABI_VERSION of the loaded library, to detect a header/library mismatch. */
OPFORGE_API int opforge_abi_version(void);

/* The message of the last failed call on this thread ("" if none). */
OPFORGE_API const char* opforge_last_error(void);

/* Whether this build has the CUDA implementations (1) or is CPU-only (0). */
OPFORGE_API int opforge_has_cuda(void);

/* Whether this build's CUDA batch_norm uses cuDNN (1) or is unavailable (0). */
OPFORGE_API int opforge_has_cudnn(void);

/* out = a + alpha * b, elementwise; a, b, out of one shape and dtype. */
OPFORGE_API opforge_status opforge_add(const DLTensor* a, const DLTensor* b, double alpha,
                                       DLTensor* out, void* stream);

/*
 * y = softmax(x) along dim (negative dims count from the end). Numerically stable: the row
 * maximum is subtracted first, so large values do not overflow and -inf entries give exact
 * zeros. A row that is entirely -inf, or holds a NaN, gives NaN (as PyTorch does).
 */
OPFORGE_API opforge_status opforge_softmax_forward(const DLTensor* x, int64_t dim, DLTensor* y,
                                                   void* stream);

/* dx = y * (dy - sum(dy * y, dim)): the gradient of softmax given its output y. */
OPFORGE_API opforge_status opforge_softmax_backward(const DLTensor* y, const DLTensor* dy,
                                                    int64_t dim, DLTensor* dx, void* stream);

/*
 * out = index of the maximum of x along dim, as int64. Ties give the first index; NaN counts
 * as larger than any number (the first NaN wins). out has x's shape with dim removed, or set to
 * 1 when keepdim is non-zero. x must have at least one element along dim (unless out is empty).
 */
OPFORGE_API opforge_status opforge_argmax(const DLTensor* x, int64_t dim, int keepdim,
                                          DLTensor* out, void* stream);

/*
 * Batch normalisation over channel dim 1 of x (N×C, N×C×L or N×C×H×W); statistics are taken
 * over every dim but 1. weight and bias are optional (NULL: 1 and 0).
 *
 * Training forward: y = (x - mean) * invstd * weight + bias with the batch mean and biased
 * variance; save_mean and save_invstd (C each, may be NULL) receive mean and 1/sqrt(var + eps).
 * running_mean and running_var (optional, both or neither) become
 * (1 - momentum) * running + momentum * batch, with the unbiased variance for running_var.
 * Needs more than one value per channel.
 */
OPFORGE_API opforge_status opforge_batch_norm_forward_training(
    const DLTensor* x, const DLTensor* weight, const DLTensor* bias, DLTensor* running_mean,
    DLTensor* running_var, double momentum, double eps, DLTensor* y, DLTensor* save_mean,
    DLTensor* save_invstd, void* stream);

/* Inference forward: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias. */
OPFORGE_API opforge_status opforge_batch_norm_forward_inference(
    const DLTensor* x, const DLTensor* weight, const DLTensor* bias, const DLTensor* running_mean,
    const DLTensor* running_var, double eps, DLTensor* y, void* stream);

/*
 * Backward of the training forward, from its saved statistics: dx (required), dweight and
 * dbias (each optional, C elements). weight is optional (NULL: 1). eps must be the forward's.
 */
OPFORGE_API opforge_status opforge_batch_norm_backward(
    const DLTensor* dy, const DLTensor* x, const DLTensor* weight, const DLTensor* save_mean,
    const DLTensor* save_invstd, double eps, DLTensor* dx, DLTensor* dweight, DLTensor* dbias,
    void* stream);

#ifdef __cplusplus
}
#endif

#endif /* OPFORGE_OPFORGE_H_ */
