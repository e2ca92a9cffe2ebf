// Masking: turns a warp's raw Q·Kᵀ accumulators into base-2 logits, with the additive bias, the
// boolean mask, the score and mask modifiers (common/modifiers.cuh) and the causal / window / padding
// rule applied per element where a tile needs it.
#pragma once
#include "common/modifiers.cuh"
#include "flash/mma.cuh"
#include "flash/schedule.cuh"

// s[i][j][c]: m-tile i (16 rows), n-tile j (8 keys), accumulator c — row g + 8·(c/2), key 2t + c%2.
// `boundary` comes from tile_needs_mask(), `kind` from tile_kind(); bias, mask and a score modifier
// are per element on every tile, a mask modifier on PARTIAL tiles only.
//
// Returns the factor that still turns s into base-2 logits. On the common path (an inner tile, no
// bias, mask or modifier, scale > 0) s is left raw and the factor is scale·log2(e): the softmax then
// folds it into one FFMA per element, 2^(s·f − m), and takes the row max on raw values (max commutes
// with a positive factor). Elsewhere s is scaled here and the factor is 1. A score modifier sees the
// natural-log score scale·q·k + bias and its result is turned into base 2 after it; modifiers are
// evaluated only for pairs inside the lengths (rows past t_len are zeroed by the epilogue, keys past
// s_len are masked by the boundary rule), so a captured tensor is never read out of its range.
template <int MI, int NT, int BIAS, bool MASK>
__device__ __forceinline__ float scale_and_mask(float (&s)[MI][NT][4], const FlashParams& p, const TileWork& w,
                                               int row0, int n0, int lane, bool boundary,
                                               const FlashMods& m = FlashMods{}, int kind = ATTNLAB_TILE_PARTIAL) {
  const bool mask_mod = ATTNLAB_MASK_MOD && kind != ATTNLAB_TILE_FULL;
  if (!boundary && BIAS == 0 && !MASK && !ATTNLAB_SCORE_MOD && !mask_mod && p.scale_log2 > 0.f) return p.scale_log2;
  constexpr float LOG2E = 1.4426950408889634f;
  constexpr float LN2 = 0.6931471805599453f;
  const i64 bias_head = BIAS ? w.b * p.bias_strides[0] + w.n * p.bias_strides[1] : 0;
  const i64 mask_head = MASK ? w.b * p.mask_strides[0] + w.n * p.mask_strides[1] : 0;
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + i * 16 + (lane >> 2) + half * 8;
      // Rows past t_len are zeroed by the epilogue; they only must not read past the bias/mask.
      const bool row_ok = row < w.t_len;
      const int mod_row = imin(row, w.t_len - 1);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = n0 + j * 8 + (lane & 3) * 2 + e;
          const bool in_range = row_ok && key < w.s_len;
          float x;
          if constexpr (ATTNLAB_SCORE_MOD) {
            // Evaluated for every element without a test (rows past t_len at the last valid row: the
            // epilogue discards them; keys past s_len as they are: the boundary rule below masks
            // them), unless the modifier reads a captured tensor at an index that depends on kv and
            // only on pairs inside the lengths can the read stay inside the tensor (ATTNLAB_SCORE_
            // MOD_READS_KV: `keyBias[b, kv]`). In natural-log units: the factor log2(e) returned
            // below turns them into base 2 in the softmax's FFMA.
            float sn = s[i][j][half * 2 + e] * (p.scale_log2 * LN2);
            if constexpr (BIAS != 0) {
              if (in_range) sn += load_bias<BIAS>(p.bias, bias_head + row * p.bias_strides[2] + key * p.bias_strides[3]);
            }
            if constexpr (ATTNLAB_SCORE_MOD_READS_KV) {
              x = in_range ? mod_score(m, sn, w.b, w.n, row, key) : sn;
            } else {
              x = mod_score(m, sn, w.b, w.n, mod_row, key);
            }
          } else {
            x = s[i][j][half * 2 + e] * p.scale_log2;
            if constexpr (BIAS != 0) {
              if (in_range) {
                x += LOG2E * load_bias<BIAS>(p.bias, bias_head + row * p.bias_strides[2] + key * p.bias_strides[3]);
              }
            }
          }
          if constexpr (MASK) {
            if (in_range && p.mask[mask_head + row * p.mask_strides[2] + key * p.mask_strides[3]] == 0) {
              x = neg_inf();
            }
          }
          if (mask_mod && in_range && !mod_keeps(m, w.b, w.n, row, key)) x = neg_inf();
          if (boundary && !key_visible(p, w, row, key)) x = neg_inf();
          s[i][j][half * 2 + e] = x;
        }
      }
    }
  }
  return ATTNLAB_SCORE_MOD ? LOG2E : 1.f;
}
