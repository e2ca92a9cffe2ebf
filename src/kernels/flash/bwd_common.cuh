// Pieces every backward main loop shares (the mma.sync dK/dV loop bwd_dkdv.cuh, the deterministic
// dQ pass bwd_dq.cuh, the Hopper dK/dV loop hopper/bwd_dkdv_sm90.cuh): the key block's query range,
// the softmax weights recomputed from the base-2 log-sum-exp and dS = P ∘ (dP − D) over a warp's
// accumulator tile, the cleaning of non-finite operand elements in shared memory (and the exact
// contribution of a non-finite dO element to dV), the final store of a float32 tile as 16-bit rows
// and the float32 reductions of dQ.
#pragma once
#include "common/modifiers.cuh"
#include "flash/bwd_params.cuh"
#include "flash/copy.cuh"
#include "flash/mma.cuh"
#include "flash/schedule.cuh"

template <bool FP16>
__device__ __forceinline__ float half_to_float(u16 h) {
  if constexpr (FP16) {
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
  } else {
    return __uint_as_float(static_cast<u32>(h) << 16);
  }
}

// One 16-bit value, rounded to nearest even (the transposed dS tile is stored element by element).
template <bool FP16>
__device__ __forceinline__ u16 round16(float x) {
  if constexpr (FP16) {
    return from_float<f16_t>(x).bits;
  } else {
    return from_float<bf16_t>(x).bits;
  }
}

// P = 2^(s·scale·log2e − lse2) for the raw Q·Kᵀ value s. `visible` is the per-element rule
// (causal, window, key padding); it is a select, not a −inf logit, so that a NaN log-sum-exp (a
// NaN row) stays inside the keys that row sees, as in the forward.
__device__ __forceinline__ float recompute_p(float s, float scale_log2, float lse2, bool visible) {
  const float pr = fast_exp2(fmaf(s, scale_log2, -lse2));
  return visible ? pr : 0.f;
}

// The work of one key block [kn0, kn0 + BNK) of one (batch, KV head) in the dK/dV loops: the query
// blocks of BMQ rows that hold a row seeing one of its keys, [mb_lo, mb_lo + blocks). Key j is seen
// by rows i with j − diag − right ≤ i ≤ j − diag + left (window) and i ≥ j − diag (causal).
struct KeyBlockWork {
  TileWork w;  // b, kv_head, t_len, s_len, diag (the query-side fields are unused)
  int kn0, mb_lo, blocks;
};

// Dispatch order of the (key block, b·K + kv_head) grid: the hardware starts blocks in linear order
// (x fastest), and with x the key block each head's blocks come one after the other, longest first
// under a causal mask. The last head then starts its longest block (all T/BMQ query blocks) when
// every SM has only ~2 heads' work left, and the grid ends on it running alone: a list-scheduling
// model of B=4 T=S=8192 N=16 on 132 SMs gives 2.8% over the ideal makespan (benchmarks/harnesses/backward-schedule-model.py
// schedule.py). Taking the heads in pairs, key block by key block (x = 0 of both heads, then x = 1,
// …), halves the work left behind each head's longest block: 0.05% in the same model, and still ~2
// heads' Q, dO and dQ accumulator in flight for L2 (an odd last head goes alone).
// `reverse` takes each head's key blocks last first (the ordered dQ adds of hopper/bwd_dq_order.cuh).
// `group` (2 unless key_block_work's batch_groups says otherwise) is how many rows of y go together.
__device__ __forceinline__ void key_block_order(int& key_block, int& bk, bool reverse = false, int group = 2) {
  const int nx = gridDim.x, ny = gridDim.y;
  const i64 linear = blockIdx.x + static_cast<i64>(nx) * blockIdx.y;
  const int pair = static_cast<int>(linear / (static_cast<i64>(group) * nx));
  const int width = imin(group, ny - group * pair);
  const int r = static_cast<int>(linear - static_cast<i64>(pair) * group * nx);
  key_block = reverse ? nx - 1 - r / width : r / width;
  bk = group * pair + r % width;
}

// The query blocks [mb_lo, mb_lo + blocks) of (w.b, w.kv_head) that hold a row seeing a key of the
// block at kn0. Both ends are nondecreasing in kn0 over the blocks with work (hopper/bwd_dq_order.cuh
// relies on it): each bound is a clamped kn0 − diag ± window term.
template <int BNK, int BMQ>
__device__ __forceinline__ void key_block_range(const FlashParams& p, const TileWork& w, int kn0, int& mb_lo,
                                                int& blocks) {
  const int kn_last = imin(kn0 + BNK, w.s_len) - 1;
  int lo = 0, hi = w.t_len;
  if (p.flags & FLASH_FLAG_CAUSAL) lo = imax(lo, kn0 - w.diag);
  if (p.flags & FLASH_FLAG_WINDOW) {
    lo = imax(lo, kn0 - w.diag - p.window_right);
    hi = imin(hi, kn_last - w.diag + p.window_left + 1);
  }
  if (kn0 >= w.s_len) hi = lo;
  mb_lo = lo / BMQ;
  blocks = hi > lo ? (hi + BMQ - 1) / BMQ - mb_lo : 0;
}

// `batch_pairs` groups the batches of one KV head instead of pairing the heads of one batch (bk =
// kv_head·B + b), all B of them up to 8: a bias shared by the batch ((1,N,T,S)) is then read, and its
// dBias accumulator added to, by the B blocks of a key block at about the same time, so that all but the
// first find the lines in L2 (the 4.3 GB of float32 accumulator at N=16 T=S=8192 does not fit there): in
// pairs, each line went to memory and back B/2 times.
template <int BNK, int BMQ>
__device__ __forceinline__ KeyBlockWork key_block_work(const FlashParams& p, bool reverse = false,
                                                       bool batch_pairs = false) {
  KeyBlockWork k;
  TileWork& w = k.w;
  int key_block, bk;
  key_block_order(key_block, bk, reverse, batch_pairs ? imax(1, imin(p.B, 8)) : 2);
  w.b = batch_pairs ? bk % p.B : bk / p.K;
  w.kv_head = batch_pairs ? bk / p.B : bk % p.K;
  w.t_len = clamp_len(p.q_lens, w.b, p.T);
  w.s_len = clamp_len(p.kv_lens, w.b, p.S);
  w.diag = (p.flags & FLASH_FLAG_BOTTOM_RIGHT) ? w.s_len - w.t_len : 0;
  k.kn0 = key_block * BNK;
  key_block_range<BNK, BMQ>(p, w, k.kn0, k.mb_lo, k.blocks);
  return k;
}

// Rows [n0, n0 + ROWS) of K and V of (w.b, w.kv_head) into k_dst and v_dst (load_tile's layout, or
// with SW128 the 128-byte swizzled boxes wgmma reads: LOAD is load_tile or load_tile_sw128); rows
// past s_len are zeros.
template <int ROWS, class Load>
__device__ __forceinline__ void load_kv_tiles(u32 k_dst, u32 v_dst, const FlashParams& p, const TileWork& w, int n0,
                                              Load load) {
  const i64 ks = p.k_strides[1], vs = p.v_strides[1];
  load(k_dst, p.k + w.b * p.k_strides[0] + w.kv_head * p.k_strides[2] + n0 * ks, ks, w.s_len - n0, p.H);
  load(v_dst, p.v + w.b * p.v_strides[0] + w.kv_head * p.v_strides[2] + n0 * vs, vs, w.s_len - n0, p.Hv);
}

// Rows [m0, m0 + ROWS) of Q and dO of (b, head n) into q_dst and do_dst; rows past t_len are zeros.
template <int ROWS, class Load>
__device__ __forceinline__ void load_q_do_tiles(u32 q_dst, u32 do_dst, const FlashParams& p, const FlashBwdParams& x,
                                                int b, int n, int m0, int t_len, Load load) {
  const i64 qa = b * p.q_strides[0] + n * p.q_strides[2] + m0 * p.q_strides[1];
  const i64 oa = b * p.o_strides[0] + n * p.o_strides[2] + m0 * p.o_strides[1];
  load(q_dst, p.q + qa, p.q_strides[1], t_len - m0, p.H);
  load(do_dst, x.d_o + oa, p.o_strides[1], t_len - m0, p.Hv);
}

// The Q and dO tiles of query head n, rows [m0, m0 + BMQ), and those rows' lse2 and D, as cp.async copies
// into q_dst, do_dst and stats_dst (lse2 | D).
template <int BMQ, int THREADS, class Load>
__device__ __forceinline__ void load_query_rows(u32 q_dst, u32 do_dst, u32 stats_dst, const FlashParams& p,
                                                const FlashBwdParams& x, const TileWork& w, int n, int m0, Load load) {
  load_q_do_tiles<BMQ>(q_dst, do_dst, p, x, w.b, n, m0, w.t_len, load);
  // t_pad is a multiple of 128 ≥ BMQ, so whole 16-byte chunks are in range.
  const i64 row = (static_cast<i64>(w.b) * p.N + n) * x.t_pad + m0;
  for (int c = threadIdx.x; c < 2 * BMQ / 4; c += THREADS) {
    const float* from = c < BMQ / 4 ? x.lse2 + row + 4 * c : x.dsum + row + 4 * (c - BMQ / 4);
    cp_async_16(stats_dst + 16 * c, from, 16);
  }
}

// Step s of a key block's walk over the query blocks of its group's heads (head-major: head
// kv_head·group + s / blocks, query block mb_lo + s % blocks). A loop that walks every step finds (head,
// row) by increments instead (hopper/bwd_dkdv_sm90.cuh, StepAt): this is an integer division by a run-time
// value, ~20 instructions.
template <int BMQ, int THREADS, class Load>
__device__ __forceinline__ void load_query_step(u32 q_dst, u32 do_dst, u32 stats_dst, const FlashParams& p,
                                                const FlashBwdParams& x, const KeyBlockWork& kb, int s, Load load) {
  const TileWork& w = kb.w;
  load_query_rows<BMQ, THREADS>(q_dst, do_dst, stats_dst, p, x, w, w.kv_head * p.group + s / kb.blocks,
                                (kb.mb_lo + s % kb.blocks) * BMQ, load);
}

// Whether some (key, row) pair of the key block and the query block at m0 may be invisible: only
// then do the weights need the per-element rule.
template <int BNK, int BMQ>
__device__ __forceinline__ bool key_block_boundary(const FlashParams& p, const KeyBlockWork& k, int m0) {
  const TileWork& w = k.w;
  return k.kn0 + BNK > w.s_len || ((p.flags & FLASH_FLAG_CAUSAL) && k.kn0 + BNK - 1 > m0 + w.diag) ||
         ((p.flags & FLASH_FLAG_WINDOW) &&
          (k.kn0 + BNK - 1 > m0 + w.diag + p.window_right || k.kn0 < m0 + BMQ - 1 + w.diag - p.window_left));
}

// s ← P over a warp's accumulator tile: element (i, j, c) lies at A-row r0 + 16i + g + 8·(c/2) and
// column c0 + 8j + 2t + c%2 (the mma.sync and wgmma C layout); the A-rows are keys in the dK/dV
// loops (KEY_ROWS, the transposed products) and query rows in the dQ pass. lse2_of(i, j, c) gives
// the element's row statistic.
//
// With a bias, a boolean mask or modifiers (BIAS, MASK, common/modifiers.cuh) the logit is the
// forward's (mask.cuh): s·scale·log2e + log2e·bias, or log2e·score_mod(s·scale + bias), and a pair the
// mask or the mask modifier (on a PARTIAL tile, `kind`) drops gets P = 0. `head` is the query head.
template <bool KEY_ROWS, int BIAS, bool MASK, int MI, int NT, class Lse2>
__device__ __forceinline__ void weights_tile_ex(float (&s)[MI][NT][4], const FlashParams& p, const TileWork& w,
                                                int head, bool boundary, int kind, int r0, int c0, int lane,
                                                Lse2 lse2_of, const FlashMods& m) {
  const int g = lane >> 2;
  const int t = lane & 3;
  const bool mask_mod = ATTNLAB_MASK_MOD && kind != ATTNLAB_TILE_FULL;
  constexpr bool PLAIN = BIAS == 0 && !MASK && !ATTNLAB_SCORE_MOD;
  if (PLAIN && !mask_mod) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int a = r0 + i * 16 + g + 8 * (c >> 1);
          const int b = c0 + j * 8 + 2 * t + (c & 1);
          const bool visible = !boundary || (KEY_ROWS ? key_visible(p, w, b, a) : key_visible(p, w, a, b));
          s[i][j][c] = recompute_p(s[i][j][c], p.scale_log2, lse2_of(i, j, c), visible);
        }
    return;
  }
  constexpr float LOG2E = 1.4426950408889634f;
  constexpr float LN2 = 0.6931471805599453f;
  const i64 bias_head = BIAS ? w.b * p.bias_strides[0] + head * p.bias_strides[1] : 0;
  const i64 mask_head = MASK ? w.b * p.mask_strides[0] + head * p.mask_strides[1] : 0;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int a = r0 + i * 16 + g + 8 * (c >> 1);
        const int b = c0 + j * 8 + 2 * t + (c & 1);
        const int q = KEY_ROWS ? b : a;
        const int kv = KEY_ROWS ? a : b;
        bool visible = !boundary || key_visible(p, w, q, kv);
        const bool in_range = q < w.t_len && kv < w.s_len;
        float x;
        if constexpr (ATTNLAB_SCORE_MOD) {
          float sn = s[i][j][c] * (p.scale_log2 * LN2);
          if (in_range) {
            if constexpr (BIAS != 0) sn += load_bias<BIAS>(p.bias, bias_head + q * p.bias_strides[2] + kv * p.bias_strides[3]);
            sn = mod_score(m, sn, w.b, head, q, kv);
          }
          x = sn * LOG2E;
        } else {
          x = s[i][j][c] * p.scale_log2;
          if constexpr (BIAS != 0) {
            if (in_range) x += LOG2E * load_bias<BIAS>(p.bias, bias_head + q * p.bias_strides[2] + kv * p.bias_strides[3]);
          }
        }
        if constexpr (MASK) {
          if (in_range && p.mask[mask_head + q * p.mask_strides[2] + kv * p.mask_strides[3]] == 0) visible = false;
        }
        if (mask_mod && in_range && !mod_keeps(m, w.b, head, q, kv)) visible = false;
        const float pr = fast_exp2(x - lse2_of(i, j, c));
        s[i][j][c] = visible ? pr : 0.f;
      }
}

// The plain form (no bias, mask or modifier), as the Hopper dK/dV loop calls it.
template <bool KEY_ROWS, int MI, int NT, class Lse2>
__device__ __forceinline__ void weights_tile(float (&s)[MI][NT][4], const FlashParams& p, const TileWork& w,
                                             bool boundary, int r0, int c0, int lane, Lse2 lse2_of) {
  weights_tile_ex<KEY_ROWS, 0, false>(s, p, w, 0, boundary, ATTNLAB_TILE_FULL, r0, c0, lane, lse2_of, FlashMods{});
}

// dS of the score modifier's input and the bias's gradient, after ds_tile left dS of the logit in ds:
// ds ← score_mod_backward(raw, ds) (the chain rule; `raw` holds the tile's Q·Kᵀ again when the
// modifier's gradient reads the score, ATTNLAB_SCORE_MOD_NEEDS_SCORE), and with DBIAS, dBias += ds
// by float32 reductions at the bias's (broadcast) element. Pairs with ds = 0 (not visible, or P = 0)
// are skipped: they add nothing, and skipping them keeps the reductions to the pairs a row sees.
template <bool KEY_ROWS, int BIAS, bool DBIAS, int MI, int NT>
__device__ __forceinline__ void ds_mods_tile(float (&ds)[MI][NT][4], const float (&raw)[MI][NT][4],
                                             const FlashParams& p, const FlashBwdParams& x, const TileWork& w,
                                             int head, int r0, int c0, int lane, const FlashMods& m) {
  constexpr float LN2 = 0.6931471805599453f;
  const int g = lane >> 2;
  const int t = lane & 3;
  const i64 bias_head = BIAS ? w.b * p.bias_strides[0] + head * p.bias_strides[1] : 0;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if (ds[i][j][c] == 0.f) continue;
        const int a = r0 + i * 16 + g + 8 * (c >> 1);
        const int b = c0 + j * 8 + 2 * t + (c & 1);
        const int q = KEY_ROWS ? b : a;
        const int kv = KEY_ROWS ? a : b;
        const i64 at = bias_head + q * p.bias_strides[2] + kv * p.bias_strides[3];
        if constexpr (ATTNLAB_SCORE_MOD) {
          float sn = 0.f;
          if constexpr (ATTNLAB_SCORE_MOD_NEEDS_SCORE) {
            sn = raw[i][j][c] * (p.scale_log2 * LN2);
            if constexpr (BIAS != 0) sn += load_bias<BIAS>(p.bias, at);
          }
          ds[i][j][c] = mod_score_backward(m, sn, ds[i][j][c], w.b, head, q, kv);
        }
        if constexpr (DBIAS) {
          asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(x.dbias + at), "f"(ds[i][j][c]) : "memory");
        }
      }
}

// dp ← dS = P ∘ (dP − D) over the same tile, D from dsum_of(i, j, c). Selected, not multiplied: an
// invisible pair's P is 0 and its dP may be NaN (a masked NaN value).
template <int MI, int NT, class Dsum>
__device__ __forceinline__ void ds_tile(float (&dp)[MI][NT][4], const float (&pr)[MI][NT][4], Dsum dsum_of) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        dp[i][j][c] = pr[i][j][c] == 0.f ? 0.f : pr[i][j][c] * (dp[i][j][c] - dsum_of(i, j, c));
}

// Writes rows [row0, row0 + 16·MI) × columns [0, cols) of a warp's accumulator tile, times `scale`,
// to a (rows × cols) matrix of row stride `stride` (elements) at `out`; rows ≥ rows_end are skipped.
// Each lane stores 2 adjacent elements per 4-byte write: the tile is written once per block.
template <int MI, int DT, bool FP16>
__device__ __forceinline__ void store_tile(u16* out, i64 stride, const float (&acc)[MI][DT][4], float scale,
                                           int row0, int rows_end, int cols, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + i * 16 + g + 8 * h;
      if (row >= rows_end) continue;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const int col = d * 8 + 2 * t;
        if (col < cols) {
          *reinterpret_cast<u32*>(out + row * stride + col) =
              pack2<FP16>(acc[i][d][2 * h] * scale, acc[i][d][2 * h + 1] * scale);
        }
      }
    }
}

// Adds a warp's 16×(8·NTILES) float32 tile to `base` (row stride `stride` floats) with reductions
// (red, no return value), rows ≥ rows_end and columns ≥ cols skipped. Hopper adds two adjacent
// floats per instruction (red.global.add.v2.f32, PTX 8.1, sm_90), halving the atomic traffic.
template <int NTILES>
__device__ __forceinline__ void atomic_add_tile(float* base, i64 stride, const float (&acc)[NTILES][4], int row0,
                                                int col0, int rows_end, int cols, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= rows_end) continue;
    float* at = base + row * stride;
#pragma unroll
    for (int d = 0; d < NTILES; ++d) {
      const int col = col0 + d * 8 + 2 * t;
      if (col >= cols) continue;
#if __CUDA_ARCH__ >= 900
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at + col), "f"(acc[d][2 * h]),
                   "f"(acc[d][2 * h + 1])
                   : "memory");
#else
      asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(at + col), "f"(acc[d][2 * h]) : "memory");
      asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(at + col + 1), "f"(acc[d][2 * h + 1]) : "memory");
#endif
    }
  }
}

// Whether a 16-bit element is ±inf or NaN: all exponent bits set (bf16 0x7f80, fp16 0x7c00).
template <bool FP16>
__device__ __forceinline__ bool non_finite16(u32 h) {
  constexpr u32 EXP = FP16 ? 0x7c00u : 0x7f80u;
  return (h & EXP) == EXP;
}

// Byte offset of 16-byte chunk c of row r in a tile of ROWS rows stored as 64-column boxes (128-byte
// rows, one box after the other) with the 128-byte swizzle (TMA's SWIZZLE_128B, what wgmma's
// descriptors read): chunk c % 8 of a row moves to position (c % 8) ^ (r % 8).
template <int ROWS>
__device__ __forceinline__ u32 sw128_offset(int r, int c) {
  return (c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}

// Zeroes the non-finite elements of the tile chunks this thread itself copied with load_tile<ROWS,
// D, THREADS> (or load_tile_sw128 when SW128: the same thread → chunk mapping), once its copies have
// landed (cp_async_wait) and before the barrier that publishes the tile; returns whether it met one.
// An operand's NaN must not meet a zero weight inside a tensor-core product (0·NaN = NaN): K's in
// dQ += dS·K for rows that do not see the key, Q's in dK += dSᵀ·Q for keys that do not see the row,
// dO's in dV += Pᵀ·dO for keys that do not see the row. The NaN still reaches every gradient the
// reference gives it: a row that sees a non-finite key or query element has a NaN log-sum-exp (the
// forward's rule), so its P and dS are NaN for every key it sees, and NaN · 0 is NaN; a row whose dO
// holds one has a non-finite D = rowsum(dO ∘ O) (the prep reads dO from global memory), so its dS is
// non-finite wherever P ≠ 0; and add_non_finite_do puts the element back into dV for those keys.
template <int ROWS, int D, int THREADS, bool FP16, bool SW128 = false>
__device__ __forceinline__ bool zero_non_finite(unsigned char* tile) {
  constexpr int CHUNKS = SmemTile<D>::CHUNKS;
  constexpr int PITCH_BYTES = SmemTile<D>::PITCH * 2;
  bool found = false;
  auto fix = [&](int r, int c) {
    u128* at = reinterpret_cast<u128*>(tile + (SW128 ? sw128_offset<ROWS>(r, c) : r * PITCH_BYTES + c * 16));
    u32 w[4] = {at->x, at->y, at->z, at->w};
    bool any = false;
#pragma unroll
    for (int i = 0; i < 4; ++i) any |= non_finite16<FP16>(w[i]) || non_finite16<FP16>(w[i] >> 16);
    if (!any) return;
    found = true;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (non_finite16<FP16>(w[i])) w[i] &= 0xffff0000u;
      if (non_finite16<FP16>(w[i] >> 16)) w[i] &= 0x0000ffffu;
    }
    *at = u128{w[0], w[1], w[2], w[3]};
  };
  if constexpr (THREADS % CHUNKS == 0) {
    constexpr int ROWS_PER_STEP = THREADS / CHUNKS;
#pragma unroll
    for (int r = threadIdx.x / CHUNKS; r < ROWS; r += ROWS_PER_STEP) fix(r, threadIdx.x % CHUNKS);
  } else {
    static_assert(!SW128, "the swizzled loader needs whole rows per pass");
    for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += THREADS) fix(idx / CHUNKS, idx % CHUNKS);
  }
  return found;
}

// Whether the query block whose statistics (lse2 | D, as load_query_step copies them to `stats`) this
// thread copied flags a row holding a non-finite element: lse2 NaN (the prep's flag for Q, or a NaN
// row) or D not finite (dO). Each of the first BMQ/2 threads checks its own 16-byte chunk, complete
// after its cp_async_wait; the caller ORs the answers over the block at its barrier. Only a flagged
// block cleans its Q and dO tiles (zero_non_finite) and takes add_non_finite_do.
template <int BMQ>
__device__ __forceinline__ bool stats_flag_non_finite(const unsigned char* stats) {
  if (threadIdx.x >= BMQ / 2) return false;
  const u128 v = *reinterpret_cast<const u128*>(stats + 16 * threadIdx.x);
  const u32 w[4] = {v.x, v.y, v.z, v.w};
  bool flagged = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const bool non_finite = (w[i] & 0x7f800000u) == 0x7f800000u;
    flagged |= threadIdx.x < BMQ / 4 ? non_finite && (w[i] & 0x007fffffu) != 0 : non_finite;
  }
  return flagged;
}

// The slow path of a query block whose dO tile held a non-finite element (zero_non_finite zeroed it
// in shared memory, so dV += Pᵀ·dO left it out): adds P · dO[i][h] to dV[key][h] for each such
// element and each of this warp's 16 keys (rows g and g + 8 of pt and dv) whose weight P for row i is
// not 0 — the reference's rule (it skips P = 0). pt: the warp's Pᵀ tile (keys × the block's 8·NT
// rows); d_o: row 0 of the block's dO, `rows` of them valid, `cols` = Hv columns. Each lane re-reads
// its own dV columns of every row from global memory (compile-time register indices only: a
// run-time index into dv would move it to local memory); P comes by shuffle from the lane of the
// quad that holds the row. Only poisoned inputs come here.
template <int NT, int DT, bool FP16>
__device__ __forceinline__ void add_non_finite_do(float (&dv)[DT][4], const float (&pt)[NT][4], const u16* d_o,
                                                  i64 stride, int rows, int cols, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
  // Row r = 8j + rr: j unrolled, so that pt is indexed by constants only.
#pragma unroll
  for (int j = 0; j < NT; ++j)
    for (int rr = 0; rr < 8; ++rr) {
      const int r = 8 * j + rr;
      if (r >= rows) break;
      const float mine[2] = {(rr & 1) ? pt[j][1] : pt[j][0], (rr & 1) ? pt[j][3] : pt[j][2]};
      const int src = g * 4 + (rr >> 1);
      const float pk[2] = {__shfl_sync(0xffffffffu, mine[0], src), __shfl_sync(0xffffffffu, mine[1], src)};
      const u16* row = d_o + r * stride;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const int col = d * 8 + 2 * t;
        if (col >= cols) continue;
        const u32 pair = *reinterpret_cast<const u32*>(row + col);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const u32 h = e ? pair >> 16 : pair & 0xffffu;
          if (!non_finite16<FP16>(h)) continue;
          const float x = half_to_float<FP16>(static_cast<u16>(h));
#pragma unroll
          for (int k = 0; k < 2; ++k)
            if (pk[k] != 0.f) dv[d][2 * k + e] += pk[k] * x;
        }
      }
    }
}
