// What the naive path's softmax kernels share (softmax.cu forward, softmax_backward.cu backward): the
// one SoftmaxParams struct, block reductions, and the visibility rule of a (query, key) pair —
// exactly the CPU reference's (src/backends/cpu/visibility.ts): rows at or past the batch's query
// length and keys at or past its key length are out; the diagonal sits at i + (bottom_right ? Sb − Tb
// : 0); causal keeps keys up to it, a window [left, right] around it; a boolean mask removes single
// pairs and the bias is added (a −inf bias removes them too).
#pragma once
#include "common/dtypes.cuh"

// Field order and types must match SOFTMAX_FIELDS in src/backends/cuda/naive/softmax.ts.
struct SoftmaxParams {
  const float* scores;             // (B,N,T,S), scaled
  void* probs;                     // (B,N,T,S) of PT; may alias scores when PT is float
  float* lse;                      // (B,T,N) or null
  const void* bias;                // of BT, element (b,n,i,j) at b·bias_s0 + n·bias_s1 + i·bias_s2 + j·bias_s3
  const unsigned char* mask;       // bool, same indexing with mask_s*; nonzero keeps
  const int* q_lengths;            // (B) or null
  const int* kv_lengths;           // (B) or null
  long long bias_s0, bias_s1, bias_s2, bias_s3;
  long long mask_s0, mask_s1, mask_s2, mask_s3;
  int B, N, T, S;
  int window_left, window_right;   // inclusive bounds around the diagonal, when has_window
  int causal, bottom_right, has_window;
};

__device__ __forceinline__ float warp_max(float v) {
  // max_nan, not fmaxf: a NaN logit must make the row max NaN (README's NaN rule), not vanish.
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Reduces across the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <bool MAX>
__device__ float block_reduce(float v) {
  __shared__ float partial[32];
  __shared__ float result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = MAX ? warp_max(v) : warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    float w = lane < warps ? partial[lane] : (MAX ? negative_infinity() : 0.f);
    w = MAX ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

// Keys [lo, hi) that lengths, causality and the window leave to row i of batch b.
__device__ __forceinline__ void key_range(const SoftmaxParams& p, int b, int i, int& lo, int& hi) {
  const int q_len = p.q_lengths ? p.q_lengths[b] : p.T;
  const int kv_len = p.kv_lengths ? p.kv_lengths[b] : p.S;
  lo = 0;
  hi = 0;
  if (i >= q_len) return;
  const long long diagonal = (long long)i + (p.bottom_right ? kv_len - q_len : 0);
  long long l = 0, h = kv_len;
  if (p.causal) h = h < diagonal + 1 ? h : diagonal + 1;
  if (p.has_window) {
    const long long wl = diagonal - p.window_left, wh = diagonal + p.window_right + 1;
    l = l > wl ? l : wl;
    h = h < wh ? h : wh;
  }
  lo = (int)(l > 0 ? l : 0);
  hi = (int)(h > 0 ? h : 0);
}

template <typename BT>
__device__ __forceinline__ float logit(const SoftmaxParams& p, const float* row, int b, int n, int i, int j, int lo,
                                       int hi) {
  if (j < lo || j >= hi) return negative_infinity();
  if (p.mask && !p.mask[b * p.mask_s0 + n * p.mask_s1 + i * p.mask_s2 + j * p.mask_s3]) return negative_infinity();
  float x = row[j];
  if (p.bias) x += to_float(static_cast<const BT*>(p.bias)[b * p.bias_s0 + n * p.bias_s1 + i * p.bias_s2 + j * p.bias_s3]);
  return x;
}
