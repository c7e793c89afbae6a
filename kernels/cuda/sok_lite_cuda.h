// C API of the CUDA kernels: raw device pointers, sizes and a stream in; a cudaError_t out
// (cudaSuccess = 0). Nothing here includes TF, so the same launchers serve the op library and
// the ctypes harness in tests/gpu. Every launcher is asynchronous on `stream` and only checks
// its arguments and the launch itself; ids and row indices must be validated upstream (as
// kernels/core/validate.h does for the CPU path), out-of-range values are not detected here.
//
// Layouts follow kernels/core: tables and gradients are row-major float32 [rows, dim], samples
// are ragged (sample b owns positions [row_splits[b], row_splits[b + 1])), `inverse` maps a
// position to its unique row. Vectorized (float4) paths are taken when dim % 4 == 0 and every
// row pointer is 16-byte aligned; otherwise a scalar path gives the same results.
#ifndef SOK_LITE_KERNELS_CUDA_SOK_LITE_CUDA_H_
#define SOK_LITE_KERNELS_CUDA_SOK_LITE_CUDA_H_

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Same order as sok_lite::Combiner.
enum SokLiteCudaCombiner {
  SOK_LITE_CUDA_SUM = 0,
  SOK_LITE_CUDA_MEAN = 1,
  SOK_LITE_CUDA_SQRTN = 2,
};

// Same order, hyper-parameters and slots as sok_lite::OptimizerKind (kernels/core/optimizers.h).
enum SokLiteCudaOptimizer {
  SOK_LITE_CUDA_SGD = 0,
  SOK_LITE_CUDA_MOMENTUM = 1,
  SOK_LITE_CUDA_NESTEROV = 2,
  SOK_LITE_CUDA_ADAM = 3,
  SOK_LITE_CUDA_AMSGRAD = 4,
  SOK_LITE_CUDA_ADAGRAD = 5,
  SOK_LITE_CUDA_RMSPROP = 6,
  SOK_LITE_CUDA_FTRL = 7,
};

// scale[b] for b in [0, batch): 1 (sum), 1 / sum(w) (mean), 1 / sqrt(sum(w^2)) (sqrtn), with
// w = 1 when weights is null; 0 when the denominator is 0. As core SampleScales.
cudaError_t sok_lite_cuda_sample_scales(const int64_t* row_splits, const float* weights,
                                        int64_t batch, int combiner, float* scale,
                                        cudaStream_t stream);

// out[b, :] = scale[b] * sum_k w[k] * rows[inverse[k], :]; a sample with no ids gives zeros.
// Sums in position order, as core CombineForward. weights may be null (w = 1).
cudaError_t sok_lite_cuda_combine_forward(const float* rows, int64_t dim, const int32_t* inverse,
                                          const int64_t* row_splits, const float* weights,
                                          const float* scale, int64_t batch, float* out,
                                          cudaStream_t stream);

// grad_rows[u, :] = sum over positions k with inverse[k] == u of
// w[k] * scale[s] * grad_out[s, :], s being the sample of k. grad_rows ([num_unique, dim]) is
// zeroed first. Uses float atomicAdd: the summation order, hence the last bits of a row fed by
// several positions, varies from run to run.
cudaError_t sok_lite_cuda_combine_backward(const float* grad_out, int64_t dim,
                                           const int32_t* inverse, const int64_t* row_splits,
                                           int64_t batch, const float* weights, const float* scale,
                                           int64_t num_unique, float* grad_rows,
                                           cudaStream_t stream);

// out[i, :] = table[indices[i], :] for i in [0, n).
cudaError_t sok_lite_cuda_gather_rows(const float* table, int64_t dim, const int64_t* indices,
                                      int64_t n, float* out, cudaStream_t stream);

// Row-wise optimizer update, as core ApplyRows: rows rows[i] of var (and of every slot) get
// gradient grads[i, :], i in [0, n). Rows must be distinct. params (host memory, num_params
// values, at least NumParams(kind)) are the optimizer-specific hyper-parameters p of
// OptimizerHyper; slots (a host array of num_slots device pointers, exactly NumSlots(kind, p))
// are ordered as documented on sok_lite::OptimizerKind. Returns cudaErrorInvalidValue for an
// unknown kind or a wrong number of params / slots.
cudaError_t sok_lite_cuda_apply_rows(int kind, double learning_rate, double weight_decay,
                                     const double* params, int num_params, int64_t dim,
                                     const int64_t* rows, const float* grads, int64_t n, float* var,
                                     float* const* slots, int num_slots, cudaStream_t stream);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // SOK_LITE_KERNELS_CUDA_SOK_LITE_CUDA_H_
