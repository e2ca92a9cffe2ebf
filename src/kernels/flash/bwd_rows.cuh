// The backward's two memory-bound kernels around the main one (FlashAttention-2's preprocessing
// and dQ conversion).
//
// prep: one warp per row (b, n, t) of the padded (B·N, t_pad) layout: D = rowsum(dO ∘ O) in float32
// (from the float32 output when the caller kept one, o_f32: in a peaked softmax the 16-bit O's rounding
// dominates dK's error, docs/guide/gradient-accuracy.md),
// the log-sum-exp turned into base 2 (so P = 2^(s·scale·log2e − lse2) is one FFMA and one MUFU op),
// and the row's float32 dQ accumulator zeroed. A padded row (t ≥ t_len) and a row that saw no key
// (lse −inf) get lse2 = +inf: every weight 2^(x − inf) is then exactly 0, where exp(−inf − (−inf))
// would be NaN.
//
// dq_convert: dQ = scale · accumulator, rounded once to the input dtype, 8 elements per thread.
#pragma once
#include "flash/bwd_common.cuh"

// Σ a[i]·b[i] over the 8 16-bit elements of two 16-byte chunks.
template <bool FP16>
__device__ __forceinline__ float dot8(const u128& a, const u128& b) {
  const u32 wa[4] = {a.x, a.y, a.z, a.w};
  const u32 wb[4] = {b.x, b.y, b.z, b.w};
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum = fmaf(half_to_float<FP16>(wa[i] & 0xffffu), half_to_float<FP16>(wb[i] & 0xffffu), sum);
    sum = fmaf(half_to_float<FP16>(wa[i] >> 16), half_to_float<FP16>(wb[i] >> 16), sum);
  }
  return sum;
}

// FLAG_Q (the Hopper module): a row whose Q holds a non-finite element gets lse2 = NaN, so that the
// dK/dV loop can tell from the row statistics alone which query blocks need their Q and dO tiles
// cleaned (bwd_dkdv_sm90.cuh): lse2 is NaN then, or D is not finite. The NaN changes no result: a
// row that sees a key already has a NaN log-sum-exp from the forward, and a row that sees none has
// weight 0 for every key whatever lse2 holds (the visibility rule is a select).
template <bool FP16, bool FLAG_Q = false>
__device__ __forceinline__ void flash_bwd_prep(const FlashParams& p, const FlashBwdParams& x) {
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<i64>(p.B) * p.N * x.t_pad) return;
  const int t = static_cast<int>(row % x.t_pad);
  const int bn = static_cast<int>(row / x.t_pad);
  const int b = bn / p.N;
  const int n = bn % p.N;
  const int t_len = clamp_len(p.q_lens, b, p.T);
  float dot = 0.f;
  bool q_bad = false;
  if (FLAG_Q && t < t_len) {
    const u16* q = p.q + b * p.q_strides[0] + t * p.q_strides[1] + n * p.q_strides[2];
    for (int c = lane; c < p.H / 8; c += 32) {
      const u128 v = *reinterpret_cast<const u128*>(q + c * 8);
      const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) q_bad |= non_finite16<FP16>(w[i]) || non_finite16<FP16>(w[i] >> 16);
    }
    q_bad = __any_sync(0xffffffffu, q_bad);
  }
  if (t < t_len && x.o_f32 != nullptr) {
    const i64 at = b * p.o_strides[0] + t * p.o_strides[1] + n * p.o_strides[2];
    for (int c = lane; c < p.Hv / 8; c += 32) {
      const u128 g = *reinterpret_cast<const u128*>(x.d_o + at + c * 8);
      const float4 o0 = *reinterpret_cast<const float4*>(x.o_f32 + at + c * 8);
      const float4 o1 = *reinterpret_cast<const float4*>(x.o_f32 + at + c * 8 + 4);
      const float o[8] = {o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w};
      const u32 w[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        dot = fmaf(o[2 * i], half_to_float<FP16>(w[i] & 0xffffu), dot);
        dot = fmaf(o[2 * i + 1], half_to_float<FP16>(w[i] >> 16), dot);
      }
    }
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
  } else if (t < t_len) {
    const i64 at = b * p.o_strides[0] + t * p.o_strides[1] + n * p.o_strides[2];
    for (int c = lane; c < p.Hv / 8; c += 32) {
      dot += dot8<FP16>(*reinterpret_cast<const u128*>(p.o + at + c * 8),
                        *reinterpret_cast<const u128*>(x.d_o + at + c * 8));
    }
#pragma unroll
    for (int m = 16; m >= 1; m >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
  }
  if (lane == 0) {
    constexpr float LOG2E = 1.4426950408889634f;
    const float lse = t < t_len ? p.lse[(static_cast<i64>(b) * p.T + t) * p.N + n] : neg_inf();
    x.lse2[row] = q_bad ? __int_as_float(0x7fc00000) : lse == neg_inf() ? -neg_inf() : lse * LOG2E;
    x.dsum[row] = dot;
  }
  if (x.dq_accum != nullptr && t < p.T) {
    float* acc = x.dq_accum + ((static_cast<i64>(b) * p.T + t) * p.N + n) * p.H;
    for (int c = lane; c < p.H / 4; c += 32) reinterpret_cast<u128*>(acc)[c] = u128{0, 0, 0, 0};
  }
}

struct __align__(16) F32x4 {
  float x, y, z, w;
};

template <bool FP16>
__device__ __forceinline__ void flash_bwd_dq_convert(const FlashParams& p, const FlashBwdParams& x) {
  const i64 chunks = static_cast<i64>(p.B) * p.T * p.N * p.H / 8;
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 c = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const F32x4* from = reinterpret_cast<const F32x4*>(x.dq_accum) + 2 * c;
    const F32x4 a = from[0];
    const F32x4 b = from[1];
    const float s = x.scale;
    reinterpret_cast<u128*>(x.dq)[c] = u128{pack2<FP16>(a.x * s, a.y * s), pack2<FP16>(a.z * s, a.w * s),
                                            pack2<FP16>(b.x * s, b.y * s), pack2<FP16>(b.z * s, b.w * s)};
  }
}
