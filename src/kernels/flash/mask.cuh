// Masking: turns a warp's raw Q·Kᵀ accumulators into base-2 logits, with the additive bias, the
// boolean mask, the score and mask modifiers (common/modifiers.cuh) and the causal / window / padding
// rule applied per element where a tile needs it.
#pragma once
#include "common/modifiers.cuh"
#include "flash/mma.cuh"
#include "flash/schedule.cuh"

#if ATTNLAB_SCORE_MOD && !ATTNLAB_SCORE_MOD_READS_POSITIONS
// scale_and_mask with a score modifier that reads no captured tensor at an unbounded index of q or kv
// (ATTNLAB_SCORE_MOD_READS_POSITIONS = 0: ALiBi's slopes[h], softcap, relativeBias's clamped table
// index), and no bias: two passes over the tile. The first evaluates the modifier on every score with
// no test: rows past t_len (the epilogue discards them) and keys past s_len (the second pass masks
// them) read nothing out of range. The second pass, one branch per tile, applies the boolean mask, the
// mask modifier (PARTIAL tiles) and the boundary rule. With those tests inside one loop (a branch per
// score around the modifier, the boundary rule's beside it) ALiBi ran at 0.40× the unmodified kernel and
// its slope was loaded once per score (PTX: 64 loads a tile), now once a tile. Clamping the row into the
// lengths instead spilled 4 bytes in ALiBi (ptxas, sm_90a, D=128). The scores stay in natural-log units:
// the returned factor log2(e) takes them into base 2 in the softmax's FFMA. Modifiers that read at
// positions, and a bias, keep scale_and_mask's one loop, evaluated inside the lengths only.
// A modifier with constant input and output factors (ATTNLAB_SCORE_MOD_FOLDED: softcap's
// c·tanh(s/c)) takes them into the score's scale and the returned factor: raw·(scale/c) in one
// multiply, and c·log2(e) in the softmax's FFMA, two FP32 multiplies a score fewer than c·tanh(s·(1/c))
// and then ·log2(e) (the factor stays positive: OUT_SCALE > 0).
template <int MI, int NT, bool MASK>
__device__ __forceinline__ float modify_scores(float (&s)[MI][NT][4], const FlashParams& p, const TileWork& w, int row0,
                                               int n0, int lane, bool boundary, const FlashMods& m, bool mask_mod) {
  constexpr float LOG2E = 1.4426950408889634f;
  constexpr float LN2 = 0.6931471805599453f;
#if ATTNLAB_SCORE_MOD_FOLDED
  const float scale = p.scale_log2 * LN2 * ATTNLAB_SCORE_MOD_IN_SCALE;
#else
  const float scale = p.scale_log2 * LN2;
#endif
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + i * 16 + (lane >> 2) + half * 8;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = n0 + j * 8 + (lane & 3) * 2 + e;
          float& x = s[i][j][half * 2 + e];
#if ATTNLAB_SCORE_MOD_FOLDED
          x = mod_score_folded(m, x * scale, w.b, w.n, row, key);
#else
          x = mod_score(m, x * scale, w.b, w.n, row, key);
#endif
        }
      }
    }
  }
  if (MASK || mask_mod || boundary) {
    const i64 mask_head = MASK ? w.b * p.mask_strides[0] + w.n * p.mask_strides[1] : 0;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + i * 16 + (lane >> 2) + half * 8;
        const bool row_ok = row < w.t_len;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int key = n0 + j * 8 + (lane & 3) * 2 + e;
            const bool in_range = row_ok && key < w.s_len;
            float& x = s[i][j][half * 2 + e];
            if constexpr (MASK) {
              if (in_range && p.mask[mask_head + row * p.mask_strides[2] + key * p.mask_strides[3]] == 0) x = neg_inf();
            }
            if (mask_mod && in_range && !mod_keeps(m, w.b, w.n, row, key)) x = neg_inf();
            if (boundary && !key_visible(p, w, row, key)) x = neg_inf();
          }
        }
      }
    }
  }
#if ATTNLAB_SCORE_MOD_FOLDED
  return LOG2E * ATTNLAB_SCORE_MOD_OUT_SCALE;
#else
  return LOG2E;
#endif
}
#endif

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
#if ATTNLAB_SCORE_MOD && !ATTNLAB_SCORE_MOD_READS_POSITIONS
  if constexpr (BIAS == 0) return modify_scores<MI, NT, MASK>(s, p, w, row0, n0, lane, boundary, m, mask_mod);
#endif
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
          const bool in_range = row_ok && key < w.s_len;
          float x;
          if constexpr (ATTNLAB_SCORE_MOD) {
            float sn = s[i][j][half * 2 + e] * (p.scale_log2 * LN2);
            if (in_range) {
              if constexpr (BIAS != 0) {
                sn += load_bias<BIAS>(p.bias, bias_head + row * p.bias_strides[2] + key * p.bias_strides[3]);
              }
              sn = mod_score(m, sn, w.b, w.n, row, key);
            }
            x = sn * LOG2E;
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
  return 1.f;
}
