// Conversions and the block-wide amax shared by the FP8 kernels (quantise.cu, gradients.cu): bf16 and
// float ↔ e4m3/e5m2 pairs by the hardware's cvt instructions (sm_89+), rounding to nearest even with
// saturation, as src/backends/cpu/fp8-quantise.ts does on the host; and the group codec both
// kernels' loops are made of (quantise8, dequantise8). The includer defines THREADS (the block size
// block_amax reduces over).
#pragma once

// 8 elements a group: one 16-byte load of bf16, one 8-byte store of FP8 (VEC of fp8/kernels.ts).
#define VEC 8

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

// Two floats → two e5m2 codes in one 16-bit word (TE's HYBRID gradients); `lo` in the low byte.
__device__ __forceinline__ unsigned short e5m2x2(float lo, float hi) {
  unsigned short r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two e4m3 codes (the low byte first) → two exact halves by the hardware conversion (sm_89+), then
// floats: every e4m3fn value (subnormals and NaN included) is exact in f16, so nothing rounds here.
__device__ __forceinline__ void e4m3x2_to_float2(unsigned short codes, float& lo, float& hi) {
  unsigned halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(codes));
  asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"((unsigned short)(halves & 0xffffu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"((unsigned short)(halves >> 16)));
}

// Two e5m2 codes → two floats, exactly (e5m2 is f16 with its low byte dropped).
__device__ __forceinline__ void e5m2x2_to_float2(unsigned short codes, float& lo, float& hi) {
  unsigned halves;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(halves) : "h"(codes));
  asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"((unsigned short)(halves & 0xffffu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"((unsigned short)(halves >> 16)));
}

// One FP8 format or the other by a flag: a literal `false` (quantise.cu's e4m3-only kernels) folds
// away once inlined; gradients.cu passes its run-time e5m2 argument.
__device__ __forceinline__ unsigned short fp8x2(float lo, float hi, bool e5m2) {
  return e5m2 ? e5m2x2(lo, hi) : e4m3x2(lo, hi);
}

__device__ __forceinline__ void fp8x2_to_float2(unsigned short codes, float& lo, float& hi, bool e5m2) {
  if (e5m2)
    e5m2x2_to_float2(codes, lo, hi);
  else
    e4m3x2_to_float2(codes, lo, hi);
}

// A group of VEC bf16 (16 bytes) → VEC FP8 codes (8 bytes, element 0 in the low byte of .x): each
// x·scale a float32 product rounded once to FP8 with saturation; the group's largest |x| (before
// scaling) folded into `amax`.
__device__ __forceinline__ uint2 quantise8(const uint4 raw, const float scale, float& amax, const bool e5m2) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
  float x[VEC];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    x[2 * i] = bf16_bits_to_float(words[i] & 0xffffu);
    x[2 * i + 1] = bf16_bits_to_float(words[i] >> 16);
  }
#pragma unroll
  for (int i = 0; i < VEC; i++) amax = fmaxf(amax, fabsf(x[i]));
  uint2 packed;
  packed.x = (unsigned)fp8x2(x[0] * scale, x[1] * scale, e5m2) |
             ((unsigned)fp8x2(x[2] * scale, x[3] * scale, e5m2) << 16);
  packed.y = (unsigned)fp8x2(x[4] * scale, x[5] * scale, e5m2) |
             ((unsigned)fp8x2(x[6] * scale, x[7] * scale, e5m2) << 16);
  return packed;
}

// A group of VEC FP8 codes → VEC bf16: decode(x8)·inverse in float32, rounded once to bf16.
__device__ __forceinline__ uint4 dequantise8(const uint2 raw, const float inverse, const bool e5m2) {
  float x[VEC];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    fp8x2_to_float2((unsigned short)(raw.x >> (16 * i)), x[2 * i], x[2 * i + 1], e5m2);
    fp8x2_to_float2((unsigned short)(raw.y >> (16 * i)), x[4 + 2 * i], x[4 + 2 * i + 1], e5m2);
  }
#pragma unroll
  for (int i = 0; i < VEC; i++) x[i] *= inverse;
  return make_uint4(bf16x2(x[0], x[1]), bf16x2(x[2], x[3]), bf16x2(x[4], x[5]), bf16x2(x[6], x[7]));
}
