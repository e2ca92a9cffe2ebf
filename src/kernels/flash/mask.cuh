// Masking: turns a warp's raw Q·Kᵀ accumulators into base-2 logits, with the additive bias, the
// boolean mask and the causal / window / padding rule applied per element where a tile needs it.
#pragma once
#include "flash/mma.cuh"
#include "flash/schedule.cuh"

// s[i][j][c]: m-tile i (16 rows), n-tile j (8 keys), accumulator c — row g + 8·(c/2), key 2t + c%2.
// `boundary` comes from tile_needs_mask(); bias and mask are per element on every tile.
//
// Returns the factor that still turns s into base-2 logits. On the common path (an inner tile, no
// bias or mask, scale > 0) s is left raw and the factor is scale·log2(e): the softmax then folds it
// into one FFMA per element, 2^(s·f − m), and takes the row max on raw values (max commutes with a
// positive factor). Elsewhere s is scaled here and the factor is 1.
template <int MI, int NT, int BIAS, bool MASK>
__device__ __forceinline__ float scale_and_mask(float (&s)[MI][NT][4], const FlashParams& p, const TileWork& w,
                                               int row0, int n0, int lane, bool boundary) {
  if (!boundary && BIAS == 0 && !MASK && p.scale_log2 > 0.f) return p.scale_log2;
  constexpr float LOG2E = 1.4426950408889634f;
  const i64 bias_head = BIAS ? w.b * p.bias_strides[0] + w.n * p.bias_strides[1] : 0;
  const i64 mask_head = MASK ? w.b * p.mask_strides[0] + w.n * p.mask_strides[1] : 0;
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + i * 16 + (lane >> 2) + half * 8;
      // Rows past t_len are zeroed by the epilogue; they only must not read past the bias/mask.
      const bool row_ok = row < w.t_len;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = n0 + j * 8 + (lane & 3) * 2 + e;
          float x = s[i][j][half * 2 + e] * p.scale_log2;
          const bool in_range = row_ok && key < w.s_len;
          if constexpr (BIAS != 0) {
            if (in_range) {
              x += LOG2E * load_bias<BIAS>(p.bias, bias_head + row * p.bias_strides[2] + key * p.bias_strides[3]);
            }
          }
          if constexpr (MASK) {
            if (in_range && p.mask[mask_head + row * p.mask_strides[2] + key * p.mask_strides[3]] == 0) {
              x = neg_inf();
            }
          }
          if (boundary && !key_visible(p, w, row, key)) x = neg_inf();
          s[i][j][half * 2 + e] = x;
        }
      }
    }
  }
  return 1.f;
}
