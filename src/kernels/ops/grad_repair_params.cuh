// The gradient NaN repair's own launch parameters (grad_nan_repair.cu), passed beside the forward's
// FlashParams (Q, K, V, the forward's output O and log-sum-exp, bias, mask, lengths, causality,
// window).
//
// Mirrored byte for byte by src/backends/cuda/ops/gradient-nan-repair.ts (gradientRepairFields):
// 8-byte fields first, then the 4-byte ones; test/kernels/kernel-params-layout.test.ts holds both to
// the compiler's layout.
#pragma once
#include "flash/params.cuh"

struct GradRepairParams {
  const u16* d_o;    // ∂loss/∂O (B,T,N,Hv), O's strides (FlashParams::o_strides), the inputs' dtype
  u16* dq;           // (B,T,N,H) contiguous, the inputs' dtype
  u16* dk;           // (B,S,K,H) contiguous
  u16* dv;           // (B,S,K,Hv) contiguous
  void* dbias;       // (dbias_dims) contiguous, the inputs' dtype, or null when no bias was given
  float scale;       // the softmax scale: dQ = scale·dS·K, dK = scale·dSᵀ·Q
  int dbias_dims[4]; // the bias's own shape: 1 or B, 1 or N, 1 or T, 1 or S
};
