// Online softmax (FlashAttention-2): a running row max m and row sum l in base 2, the output
// accumulator rescaled by 2^(m_old − m_new) whenever the max grows, and one division at the end.
//
// Each thread holds rows g and g+8 of each of its MI m-tiles; a row's 8·NT columns are spread over
// the 4 lanes of a quad, so row reductions are two xor-shuffles. The row sum stays per-lane until
// finish(): the quad reduction is then done once, not once per key tile.
//
// NaN and Inf (README, "Rows that see nothing, NaN and Inf"): the max propagates NaN (max_nan, where
// fmaxf would skip it and let the row look empty), so a NaN logit makes the max, every weight and the
// sum NaN; a +inf logit makes the max +inf, its own weight 2^(inf − inf) = NaN and so the sum NaN. A
// row is empty exactly when its sum is 0: every visible weight is ≥ 2^0 = 1 at the max.
#pragma once
#include "flash/mma.cuh"

__device__ __forceinline__ float quad_max(float x) {
  x = max_nan(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return max_nan(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int MI, int NT, int DT>
struct OnlineSoftmax {
  float row_max[MI][2];
  float row_sum[MI][2];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[i][h] = neg_inf();
        row_sum[i][h] = 0.f;
      }
  }

  // s·factor: base-2 logits of one key tile (factor > 0, see scale_and_mask); s is overwritten with
  // the unnormalised weights 2^(s·factor − m). o: the output accumulator, rescaled to the new max.
  __device__ __forceinline__ void update(float (&s)[MI][NT][4], float (&o)[MI][DT][4], float factor) {
    bool moved = false;
    float alphas[MI][2];
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float raw = neg_inf();
#pragma unroll
        for (int j = 0; j < NT; ++j) raw = max_nan(raw, max_nan(s[i][j][2 * h], s[i][j][2 * h + 1]));
        const float mx = max_nan(row_max[i][h], quad_max(raw) * factor);
        // A row that has seen only −inf so far keeps max −inf; subtracting 0 instead keeps every
        // weight 2^(−inf) = 0 rather than NaN from (−inf) − (−inf).
        const float base = mx == neg_inf() ? 0.f : mx;
        // Exactly 1 when the max did not move (also for a row still at −inf, whose O is 0).
        const float alpha = row_max[i][h] == mx ? 1.f : fast_exp2(row_max[i][h] - base);
        row_max[i][h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          s[i][j][2 * h] = fast_exp2(fmaf(s[i][j][2 * h], factor, -base));
          s[i][j][2 * h + 1] = fast_exp2(fmaf(s[i][j][2 * h + 1], factor, -base));
          sum += s[i][j][2 * h] + s[i][j][2 * h + 1];
        }
        row_sum[i][h] = row_sum[i][h] * alpha + sum;
        alphas[i][h] = alpha;
        moved |= alpha != 1.f;
      }
    }
    // Rescaling O costs 4·MI·DT multiplies per lane per tile (128 at D=128, 32 rows per warp), as
    // many as the exponentials. Once the row maxima settle — after a few tiles on real and random
    // data alike — no row's max moves and alpha is exactly 1 everywhere: the warp skips it as a whole,
    // so the branch never diverges.
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int d = 0; d < DT; ++d) {
            o[i][d][2 * h] *= alphas[i][h];
            o[i][d][2 * h + 1] *= alphas[i][h];
          }
    }
  }

  // Completes the row sums; returns 1/l (0 for a row that saw no key, NaN for a NaN row) and the
  // natural-log log-sum-exp (−inf for a row that saw no key, NaN for a NaN row) of row (i, h).
  __device__ __forceinline__ void finish(float (&inv)[MI][2], float (&lse)[MI][2]) {
    constexpr float LN2 = 0.6931471805599453f;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = quad_sum(row_sum[i][h]);
        const bool empty = l == 0.f;
        float log2l;
        asm("lg2.approx.f32 %0, %1;\n" : "=f"(log2l) : "f"(empty ? 1.f : l));
        inv[i][h] = empty ? 0.f : 1.f / l;
        lse[i][h] = empty ? neg_inf() : (row_max[i][h] + log2l) * LN2;
      }
  }
};
