// attnlab_widen — a float32 copy of a bfloat16/float16 tensor on the device (every value is exact in
// float32), one thread per element: the float32 forward that float32Output runs takes its inputs from
// here rather than through the host (src/api/backward.ts).
// attnlab_any_non_finite — sets *flag to 1 when an element of the tensor is NaN or ±inf: the cuDNN
// backward is refused such inputs (src/backends/cuda/cudnn/backward.ts).
#include "common/dtypes.cuh"

template <typename IT>
__global__ void attnlab_any_non_finite(const IT* in, long long count, int* flag) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < count && (__float_as_uint(to_float(in[e])) & 0x7f800000u) == 0x7f800000u) *flag = 1;
}

template <typename IT>
__global__ void attnlab_widen(const IT* in, float* out, long long count) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < count) out[e] = to_float(in[e]);
}

#ifdef ATTNLAB_NVCC_TEST
// Representative variants for the nvcc compile test (test/kernels/kernels-compile.test.ts).
template __global__ void attnlab_widen<bf16_t>(const bf16_t*, float*, long long);
template __global__ void attnlab_widen<f16_t>(const f16_t*, float*, long long);
template __global__ void attnlab_any_non_finite<bf16_t>(const bf16_t*, long long, int*);
template __global__ void attnlab_any_non_finite<float>(const float*, long long, int*);
#endif
