// The backward kernels' own launch parameters, passed beside the forward's FlashParams (which
// describes Q, K, V, the forward's output O, its log-sum-exp, lengths, causality and window).
//
// Mirrored byte for byte by src/backends/cuda/flash/sm80/backward-params.ts (marshalFlashBwdParams):
// 8-byte fields first, then the 4-byte ones; test/kernels/kernel-params-layout.test.ts holds both to
// the compiler's layout.
#pragma once
#include "flash/params.cuh"

struct FlashBwdParams {
  const u16* d_o;   // ∂loss/∂O (B,T,N,Hv), O's strides (FlashParams::o_strides)
  float* lse2;      // (B·N, t_pad) log-sum-exp in base 2; +inf on padded rows and rows that see no key
  float* dsum;      // (B·N, t_pad) D = rowsum(dO ∘ O); 0 on padded rows
  float* dq_accum;  // (B,T,N,H) float32 accumulator of dQ / scale, or null (deterministic pass)
  u16* dq;          // (B,T,N,H), Q's strides
  u16* dk;          // (B,S,K,H), K's strides
  u16* dv;          // (B,S,K,Hv), V's strides
  const float* o_f32;  // O unrounded, float32 (B,T,N,Hv), O's strides, or null: D = rowsum(dO ∘ O) from it
  float* dbias;     // float32 dBias accumulator, the bias's strides (FlashParams::bias_strides), or null
  float scale;      // the softmax scale: dQ = scale·dS·K, dK = scale·dSᵀ·Q
  int t_pad;        // T rounded up to a multiple of 128: every query block reads whole lse2/dsum rows
};
