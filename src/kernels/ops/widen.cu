// attnlab_widen — a float32 copy of a bfloat16/float16 tensor on the device (every value is exact in
// float32), one thread per element: the float32 forward that float32Output runs takes its inputs from
// here rather than through the host (src/api/backward.ts).
#include "common/dtypes.cuh"

template <typename IT>
__global__ void attnlab_widen(const IT* in, float* out, long long count) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < count) out[e] = to_float(in[e]);
}

#ifdef ATTNLAB_NVCC_TEST
// Representative variants for the nvcc compile test (test/kernels/kernels-compile.test.ts).
template __global__ void attnlab_widen<bf16_t>(const bf16_t*, float*, long long);
template __global__ void attnlab_widen<f16_t>(const f16_t*, float*, long long);
#endif
