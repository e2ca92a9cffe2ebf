// One output element recomputed in plain float32 arithmetic over exactly the keys its row sees: the
// repair for a NaN that a masked key's value put into a tensor-core product.
//
// P·V on tensor cores multiplies every key of a tile, and a masked key's weight 0 times a NaN (or
// Inf) value is NaN, so a NaN in V behind a causal diagonal, a window edge, a boolean mask or a −inf
// bias would reach rows that never see it (padded keys are zero-filled on load and cannot). The
// README's rule says masked positions never contribute, whatever they hold. Zeroing V for such keys
// is not possible per row inside a tile, so the kernels leave the product alone and, for each output
// element that comes out NaN in a row whose softmax is finite, recompute that element here, skipping
// every key whose logit is −inf. Without NaN or Inf in V this never runs; with them it costs S loads
// when the row sees a NaN in that column (the answer is NaN), else about 2·S·H FMAs over the keys the
// row sees: a slow path taken only for poisoned data.
//
// The logit is the kernels' (base 2): q·k · scale·log2(e) + log2(e) · bias, or log2(e) · score_mod(q·k ·
// scale + bias) with a score modifier, −inf where the mask, the mask modifier, the lengths, causality
// or the window hide the pair. A row with a NaN or +inf logit is NaN (returned as
// such), a row with no key 0.
#pragma once
#include "common/modifiers.cuh"
#include "flash/mma.cuh"
#include "flash/schedule.cuh"

// Element decoders: ELEM 0 bfloat16, 1 float16, 2 float32 (the pointer is cast as the kernel does).
template <int ELEM>
__device__ __forceinline__ float load_elem(const u16* base, i64 offset) {
  if constexpr (ELEM == 0) {
    return __uint_as_float(static_cast<u32>(base[offset]) << 16);
  } else if constexpr (ELEM == 1) {
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(base[offset]));
    return f;
  } else {
    return reinterpret_cast<const float*>(base)[offset];
  }
}

template <int ELEM>
__device__ __forceinline__ void store_elem(u16* base, i64 offset, float x) {
  if constexpr (ELEM == 0) {
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(base[offset]) : "f"(x));
  } else if constexpr (ELEM == 1) {
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(base[offset]) : "f"(x));
  } else {
    reinterpret_cast<float*>(base)[offset] = x;
  }
}

// The visible keys of (b, row): lengths, the diagonal, causality and the window, as schedule_tile.
__device__ __forceinline__ TileWork row_work(const FlashParams& p, int b, int n) {
  TileWork w;
  w.b = b;
  w.n = n;
  w.kv_head = n / p.group;
  w.t_len = clamp_len(p.q_lens, b, p.T);
  w.s_len = clamp_len(p.kv_lens, b, p.S);
  w.diag = (p.flags & FLASH_FLAG_BOTTOM_RIGHT) ? w.s_len - w.t_len : 0;
  w.m0 = w.m_last = w.n_lo = w.n_hi = 0;  // unused by key_visible
  return w;
}

template <int ELEM, int BIAS, bool MASK>
__device__ __forceinline__ float base2_logit(const FlashParams& p, const TileWork& w, int row, int key,
                                             const FlashMods& m) {
  constexpr float LOG2E = 1.4426950408889634f;
  constexpr float LN2 = 0.6931471805599453f;
  if (!key_visible(p, w, row, key)) return neg_inf();
  if (ATTNLAB_MASK_MOD && row < w.t_len && !mod_keeps(m, w.b, w.n, row, key)) return neg_inf();
  if constexpr (MASK) {
    const i64 at = w.b * p.mask_strides[0] + w.n * p.mask_strides[1] + row * p.mask_strides[2] + key * p.mask_strides[3];
    if (p.mask[at] == 0) return neg_inf();
  }
  const i64 q = w.b * p.q_strides[0] + row * p.q_strides[1] + w.n * p.q_strides[2];
  const i64 k = w.b * p.k_strides[0] + key * p.k_strides[1] + w.kv_head * p.k_strides[2];
  float dot = 0.f;
  for (int h = 0; h < p.H; ++h) dot = fmaf(load_elem<ELEM>(p.q, q + h), load_elem<ELEM>(p.k, k + h), dot);
  if constexpr (ATTNLAB_SCORE_MOD) {
    float sn = dot * (p.scale_log2 * LN2);
    if constexpr (BIAS != 0) {
      sn += load_bias<BIAS>(p.bias, w.b * p.bias_strides[0] + w.n * p.bias_strides[1] + row * p.bias_strides[2] +
                                        key * p.bias_strides[3]);
    }
    return LOG2E * mod_score(m, sn, w.b, w.n, row, key);
  }
  float x = dot * p.scale_log2;
  if constexpr (BIAS != 0) {
    const i64 at = w.b * p.bias_strides[0] + w.n * p.bias_strides[1] + row * p.bias_strides[2] + key * p.bias_strides[3];
    x += LOG2E * load_bias<BIAS>(p.bias, at);
  }
  return x;
}

// O[b, row, n, col] by IEEE arithmetic over the keys the row sees (normalised). Not inlined: it is
// a cold path, and inlined it would lengthen the kernels' register allocation for nothing.
template <int ELEM, int BIAS, bool MASK>
__device__ __noinline__ float recompute_element(const FlashParams& p, int b, int n, int row, int col,
                                                const FlashMods& mods = FlashMods{}) {
  const TileWork w = row_work(p, b, n);
  if (row >= w.t_len) return 0.f;
  const float NaN = __int_as_float(0x7fffffff);
  const i64 v = w.b * p.v_strides[0] + w.kv_head * p.v_strides[2] + col;
  // The common poison first: a NaN value the row sees makes the element NaN whatever the rest holds.
  // One load per key, and a logit only where V is NaN, instead of a logit per key.
  for (int key = 0; key < w.s_len; ++key) {
    const float x = load_elem<ELEM>(p.v, v + key * p.v_strides[1]);
    if (x != x && base2_logit<ELEM, BIAS, MASK>(p, w, row, key, mods) != neg_inf()) return NaN;
  }
  float m = neg_inf();
  for (int key = 0; key < w.s_len; ++key) m = max_nan(m, base2_logit<ELEM, BIAS, MASK>(p, w, row, key, mods));
  if (m != m || m == -neg_inf()) return NaN;  // a NaN or +inf logit: a NaN row
  if (m == neg_inf()) return 0.f;               // the row sees no key
  float sum = 0.f, acc = 0.f;
  for (int key = 0; key < w.s_len; ++key) {
    const float x = base2_logit<ELEM, BIAS, MASK>(p, w, row, key, mods);
    if (x == neg_inf()) continue;  // masked: contributes nothing, whatever V holds
    const float weight = fast_exp2(x - m);
    sum += weight;
    acc = fmaf(weight, load_elem<ELEM>(p.v, v + key * p.v_strides[1]), acc);  // 0 · NaN stays NaN
  }
  return acc / sum;
}

// The natural-log log-sum-exp of (b, row) over the keys it sees, for a row whose kernel result came
// out NaN: a NaN key behind a boolean mask (converted to a finite bias for cuDNN) makes cuDNN's
// whole row NaN, including a row that does not see that key. NaN again for a NaN or +inf visible
// logit, −inf for a row that sees no key or is padding.
template <int ELEM, int BIAS, bool MASK>
__device__ __noinline__ float recompute_lse(const FlashParams& p, int b, int n, int row, const FlashMods& mods = FlashMods{}) {
  constexpr float LN2 = 0.6931471805599453f;
  const TileWork w = row_work(p, b, n);
  if (row >= w.t_len) return neg_inf();
  float m = neg_inf();
  for (int key = 0; key < w.s_len; ++key) m = max_nan(m, base2_logit<ELEM, BIAS, MASK>(p, w, row, key, mods));
  if (m != m || m == -neg_inf()) return __int_as_float(0x7fffffff);
  if (m == neg_inf()) return neg_inf();
  float sum = 0.f;
  for (int key = 0; key < w.s_len; ++key) {
    const float x = base2_logit<ELEM, BIAS, MASK>(p, w, row, key, mods);
    if (x != neg_inf()) sum += fast_exp2(x - m);
  }
  float log2sum;
  asm("lg2.approx.f32 %0, %1;\n" : "=f"(log2sum) : "f"(sum));
  return (m + log2sum) * LN2;
}
