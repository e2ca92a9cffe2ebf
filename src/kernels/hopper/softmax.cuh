// Online softmax of one consumer warpgroup's 64 rows, split in two steps so that the rescale of O
// can wait for the P·V multiply still in flight (intra-warpgroup overlap):
//   update(): row max, the weights 2^(s·f − m) in place, the running sum, and each row's alpha;
//   rescale(): O *= alpha, once the previous P·V has completed.
// Each lane holds rows g and g + 8 of its warp's 16 (c = 0, 1 and c = 2, 3 of the accumulator);
// a row's keys are spread over the 4 lanes of a quad, so reductions are two xor-shuffles.
//
// NaN rule (README): a NaN logit is skipped by fmaxf but becomes NaN through 2^(NaN) in the sum and
// in P·V, so the row's output and log-sum-exp are NaN; a +Inf logit makes the max +Inf and
// 2^(Inf − Inf) NaN; −Inf logits (masked or real) weigh 0. A row whose sum is exactly 0 saw no key.
//
// SLACK > 0 (FlashAttention-4's conditional rescale): the max a row's weights are taken against moves
// only when a tile's max exceeds it by more than SLACK (base 2). The weights are then ≤ 2^SLACK (256
// at 8: far inside float32 and bfloat16's range, and bfloat16 keeps 8 significant bits at any scale),
// and the result is the same after normalisation: O and the sum share the stale max, and the
// log-sum-exp adds it back. A first tile (max −inf), a +Inf logit and NaN keep the rules above:
// (x − (−inf)) and (+inf − m) exceed any slack; −inf − (−inf) is NaN, which compares false.
#pragma once
#include "flash/mma.cuh"

template <int NT, int SLACK = 0>
struct RowSoftmax {
  static_assert(SLACK >= 0 && SLACK <= 16, "SLACK: 0 (the max moves on every rise) … 16 (weights ≤ 2^16)");
  float row_max[2];
  float row_sum[2];

  __device__ __forceinline__ void init() {
    row_max[0] = row_max[1] = neg_inf();
    row_sum[0] = row_sum[1] = 0.f;
  }

  // s·factor are base-2 logits (factor > 0); s becomes the unnormalised weights. Returns in alpha
  // the factor O must be scaled by, and whether any lane of the warp has an alpha ≠ 1.
  __device__ __forceinline__ bool update(float (&s)[NT][4], float factor, float (&alpha)[2]) {
    bool moved = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float raw = neg_inf();
#pragma unroll
      for (int j = 0; j < NT; ++j) raw = fmaxf(raw, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
      raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 1));
      raw = fmaxf(raw, __shfl_xor_sync(0xffffffffu, raw, 2));
      const float risen = fmaxf(row_max[h], raw * factor);
      const float mx = SLACK > 0 && risen - row_max[h] <= static_cast<float>(SLACK) ? row_max[h] : risen;
      // A row that has seen only −inf keeps max −inf; subtracting 0 keeps its weights 0, not NaN.
      const float base = mx == neg_inf() ? 0.f : mx;
      const float a = row_max[h] == mx ? 1.f : fast_exp2(row_max[h] - base);
      row_max[h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        s[j][2 * h] = fast_exp2(fmaf(s[j][2 * h], factor, -base));
        s[j][2 * h + 1] = fast_exp2(fmaf(s[j][2 * h + 1], factor, -base));
        sum += s[j][2 * h] + s[j][2 * h + 1];
      }
      row_sum[h] = row_sum[h] * a + sum;
      alpha[h] = a;
      moved |= a != 1.f;
    }
    return __any_sync(0xffffffffu, moved);
  }

  template <int DT>
  __device__ __forceinline__ static void rescale(float (&o)[DT][4], const float (&alpha)[2]) {
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      o[d][0] *= alpha[0];
      o[d][1] *= alpha[0];
      o[d][2] *= alpha[1];
      o[d][3] *= alpha[1];
    }
  }

  // 1/l (0 for a row that saw no key, NaN for a NaN sum) and the natural-log log-sum-exp.
  __device__ __forceinline__ void finish(float (&inv)[2], float (&lse)[2]) {
    constexpr float LN2 = 0.6931471805599453f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool empty = l == 0.f;
      float log2l;
      asm("lg2.approx.f32 %0, %1;\n" : "=f"(log2l) : "f"(empty ? 1.f : l));
      inv[h] = empty ? 0.f : 1.f / l;
      lse[h] = empty ? neg_inf() : (row_max[h] + log2l) * LN2;
    }
  }
};
