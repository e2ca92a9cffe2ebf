// FP8 quantisation around cuDNN's FP8 attention: bf16 Q/K/V → e4m3 with per-tensor scales and amax
// (one launch for all three), the current-scaling scale computation, and e4m3 O → bf16.
//
// Every scale and amax lives in one small device block (the "scalar block"), one float per 16-byte
// slot because cuDNN's graph declares each scalar tensor with BYTE_ALIGNMENT 16. Slots 0–7 are the
// tensors of cuDNN's FP8 graph; 8–13 belong to these kernels. Keeping them on the device lets a
// step run without the host in the loop until the amax values are read back at its end.
//
// Arithmetic matches src/te/quantise.ts bit for bit: x·scale as a float32 product, then one
// round-to-nearest-even to e4m3 with saturation (cvt.rn.satfinite, sm_89+); dequantising is
// decode(x8)·(1/scale) in float32, then one round-to-nearest-even to bf16.
//
// attnlab-min-arch: sm_89

#define SLOT(i) ((i) * 4)
#define DESCALE_Q 0
#define DESCALE_K 1
#define DESCALE_V 2
#define DESCALE_S 3
#define SCALE_S 4
#define SCALE_O 5
#define AMAX_S 6
#define AMAX_O 7
#define SCALE_Q 8   // SCALE_Q + z for z = 0, 1, 2 (Q, K, V)
#define AMAX_Q 11   // AMAX_Q + z

// 8 elements per thread and step: one 16-byte load of bf16, one 8-byte store of e4m3.
#define VEC 8
#define THREADS 256

__device__ __forceinline__ float bf16_bits_to_float(unsigned bits) { return __uint_as_float(bits << 16); }

// Two floats → two e4m3 codes in one 16-bit word; `lo` lands in the low byte (the lower address).
__device__ __forceinline__ unsigned short e4m3x2(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// e4m3fn: bias 7, subnormals m·2^-9, S.1111.111 is NaN, no infinities.
__device__ __forceinline__ float e4m3_to_float(unsigned code) {
  const unsigned e = (code >> 3) & 15u, m = code & 7u;
  float magnitude;
  if (e == 0) magnitude = (float)m * 0.001953125f;
  else if (e == 15u && m == 7u) magnitude = __uint_as_float(0x7fc00000u);
  else magnitude = __uint_as_float(((e + 120u) << 23) | (m << 20));
  return (code & 0x80u) ? -magnitude : magnitude;
}

// Block-wide max of non-negative floats, then one atomicMax on their bits (for x ≥ 0 the IEEE order
// and the unsigned order agree). fmaxf skips NaN, as the host's absMax does.
__device__ __forceinline__ void block_amax(float local, float* target) {
  __shared__ float warp_max[THREADS / 32];
  for (int offset = 16; offset > 0; offset >>= 1) local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    local = threadIdx.x < THREADS / 32 ? warp_max[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
    if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(target), __float_as_uint(local));
  }
}

// blockIdx.y picks the tensor (0 Q, 1 K, 2 V). Records amax in block[AMAX_Q + z]; unless amax_only,
// also writes x·scale as e4m3 with scale = block[SCALE_Q + z]. Sizes are in groups of VEC elements.
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_quantise3(
    const uint4* __restrict__ q, const uint4* __restrict__ k, const uint4* __restrict__ v,
    uint2* __restrict__ q8, uint2* __restrict__ k8, uint2* __restrict__ v8,
    long long q_groups, long long kv_groups, float* __restrict__ block, int amax_only) {
  const int z = blockIdx.y;
  const uint4* in = z == 0 ? q : (z == 1 ? k : v);
  uint2* out = z == 0 ? q8 : (z == 1 ? k8 : v8);
  const long long groups = z == 0 ? q_groups : kv_groups;
  const float scale = block[SLOT(SCALE_Q + z)];
  float amax = 0.0f;
  for (long long g = (long long)blockIdx.x * THREADS + threadIdx.x; g < groups; g += (long long)gridDim.x * THREADS) {
    const uint4 raw = in[g];
    const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
    float x[VEC];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      x[2 * i] = bf16_bits_to_float(words[i] & 0xffffu);
      x[2 * i + 1] = bf16_bits_to_float(words[i] >> 16);
    }
#pragma unroll
    for (int i = 0; i < VEC; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (!amax_only) {
      uint2 packed;
      packed.x = (unsigned)e4m3x2(x[0] * scale, x[1] * scale) | ((unsigned)e4m3x2(x[2] * scale, x[3] * scale) << 16);
      packed.y = (unsigned)e4m3x2(x[4] * scale, x[5] * scale) | ((unsigned)e4m3x2(x[6] * scale, x[7] * scale) << 16);
      out[g] = packed;
    }
  }
  block_amax(amax, block + SLOT(AMAX_Q + z));
}

// Current scaling, one thread: scales from this step's amax of Q, K, V (fp8_max / amax, 1 when amax
// is 0 or not finite), scale_s = fp8_max because P ≤ 1, scale_o = scale_v because |O| ≤ max|V|.
extern "C" __global__ void attnlab_fp8_current_scales(float* block, float fp8_max) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float scales[3];
  for (int z = 0; z < 3; z++) {
    const float amax = block[SLOT(AMAX_Q + z)];
    // amax ≤ FLT_MAX is false for NaN and infinity alike (no math header needed under NVRTC).
    scales[z] = (amax > 0.0f && amax <= 3.402823466e38f) ? fp8_max / amax : 1.0f;
    block[SLOT(SCALE_Q + z)] = scales[z];
    block[SLOT(DESCALE_Q + z)] = 1.0f / scales[z];
  }
  block[SLOT(SCALE_S)] = fp8_max;
  block[SLOT(DESCALE_S)] = 1.0f / fp8_max;
  block[SLOT(SCALE_O)] = scales[2];
}

// O8 (e4m3) → bf16: decode(x8)·(1/scale_o), the float32 product rounded once to bf16.
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_dequantise(
    const uint2* __restrict__ in, uint4* __restrict__ out, long long groups, const float* __restrict__ block) {
  const float inverse = 1.0f / block[SLOT(SCALE_O)];
  for (long long g = (long long)blockIdx.x * THREADS + threadIdx.x; g < groups; g += (long long)gridDim.x * THREADS) {
    const uint2 raw = in[g];
    float x[VEC];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      x[i] = e4m3_to_float((raw.x >> (8 * i)) & 0xffu) * inverse;
      x[4 + i] = e4m3_to_float((raw.y >> (8 * i)) & 0xffu) * inverse;
    }
    out[g] = make_uint4(bf16x2(x[0], x[1]), bf16x2(x[2], x[3]), bf16x2(x[4], x[5]), bf16x2(x[6], x[7]));
  }
}
