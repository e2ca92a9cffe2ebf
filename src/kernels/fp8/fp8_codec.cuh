// Conversions and the block-wide amax shared by the FP8 kernels (quantise.cu, gradients.cu): bf16 and
// float ↔ e4m3/e5m2 pairs by the hardware's cvt instructions (sm_89+), rounding to nearest even with
// saturation, as src/backends/cpu/fp8-quantise.ts does on the host. The includer defines THREADS
// (the block size block_amax reduces over).
#pragma once

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
