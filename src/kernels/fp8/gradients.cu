// FP8 quantisation around cuDNN's FP8 attention backward (src/backends/cuda/fp8/backward-run.ts):
// bf16 dO → FP8 with its scale and amax before the graph, and the graph's FP8 dQ, dK, dV → bf16 after.
// The gradient type is e5m2 (TE's HYBRID format) or e4m3 (its E4M3 format), chosen by `e5m2`.
//
// Scales and amax values live in the backward's scalar block, one float per 16-byte slot (cuDNN
// declares every scalar tensor with BYTE_ALIGNMENT 16); slot numbers are BACKWARD_SLOTS of
// backward-graph.ts. Arithmetic as quantise.cu: x·scale as a float32 product rounded once to FP8
// with saturation; dequantising is decode(x8)·(1/scale) in float32 rounded once to bf16.
//
// attnlab-min-arch: sm_89

#define SLOT(i) ((i) * 4)
#define SCALE_DQ 9  // SCALE_DQ + z for z = 0, 1, 2 (dQ, dK, dV)
#define SCALE_DO 16
#define AMAX_DO 17

#define THREADS 256

#include "fp8/fp8_codec.cuh"

// bf16 dO (groups of VEC elements) → FP8 with scale block[SCALE_DO]; its amax into block[AMAX_DO],
// which the host zeroed when it wrote the block.
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_quantise_gradient(
    const uint4* __restrict__ in, uint2* __restrict__ out, long long groups, float* __restrict__ block, int e5m2) {
  const float scale = block[SLOT(SCALE_DO)];
  const long long stride = (long long)gridDim.x * THREADS;
  float amax = 0.0f;
  for (long long g = (long long)blockIdx.x * THREADS + threadIdx.x; g < groups; g += stride)
    out[g] = quantise8(in[g], scale, amax, e5m2);
  block_amax(amax, block + SLOT(AMAX_DO));
}

// blockIdx.y picks the gradient (0 dQ, 1 dK, 2 dV): FP8 codes → bf16 with 1/block[SCALE_DQ + z].
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_dequantise_gradients(
    const uint2* __restrict__ dq8, const uint2* __restrict__ dk8, const uint2* __restrict__ dv8,
    uint4* __restrict__ dq, uint4* __restrict__ dk, uint4* __restrict__ dv,
    long long q_groups, long long kv_groups, const float* __restrict__ block, int e5m2) {
  const int z = blockIdx.y;
  const uint2* in = z == 0 ? dq8 : (z == 1 ? dk8 : dv8);
  uint4* out = z == 0 ? dq : (z == 1 ? dk : dv);
  const long long groups = z == 0 ? q_groups : kv_groups;
  const float inverse = 1.0f / block[SLOT(SCALE_DQ + z)];
  const long long stride = (long long)gridDim.x * THREADS;
  for (long long g = (long long)blockIdx.x * THREADS + threadIdx.x; g < groups; g += stride)
    out[g] = dequantise8(in[g], inverse, e5m2);
}
