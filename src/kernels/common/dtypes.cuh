// Element types of attnlab's kernels and their conversions to and from float, in inline PTX rather
// than cuda_fp16.h / cuda_bf16.h: NVRTC then needs no include path, and nvcc builds the same code.
// Half and bfloat16 are carried as their 16 raw bits, as the host stores them (Uint16Array).
#pragma once

struct f16_t {
  unsigned short bits;
};
struct bf16_t {
  unsigned short bits;
};

__device__ __forceinline__ float to_float(float x) { return x; }

__device__ __forceinline__ float to_float(f16_t x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}

// bfloat16 is the top half of a float32: widening is exact and needs no instruction.
__device__ __forceinline__ float to_float(bf16_t x) { return __uint_as_float(((unsigned)x.bits) << 16); }

template <typename T>
__device__ __forceinline__ T from_float(float x);

template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}

// Round to nearest even, as the host's encoder does, so a GPU result and a host-rounded reference agree.
template <>
__device__ __forceinline__ f16_t from_float<f16_t>(float x) {
  f16_t r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}

// cvt.rn.bf16.f32 needs sm_80; attnlab's oldest target is sm_80.
template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float x) {
  bf16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

// max that returns NaN when either operand is NaN (fmaxf returns the other one): a NaN logit must
// make the row max NaN, not vanish. One instruction on sm_80+, like fmaxf.
__device__ __forceinline__ float max_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
