// What the decode kernels share (flash_decode.cu: one kv head per block; flash_decode_heads.cu:
// every kv head of a token row per block): the launch parameters, the NaN-propagating max, each
// query's visible key range, the scalar P·V for NaN/Inf values at partly masked keys, and the
// combine of the splits by their log-sum-exp.
#pragma once

// Programmatic dependent launch (sm_90; no-ops where the launch did not ask for it, and before sm_90): a
// kernel launched with it may start while the previous one in the stream finishes; it waits here until
// that kernel's writes are visible. grid_dependents_may_launch lets the next such kernel start early.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependents_may_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#include "decode/decode_load.cuh"
#include "flash/mma.cuh"

struct DecodeParams {
  const u16* q;            // query rows: token index · q_token + head · q_head
  const u16* k;            // cache rows: (dense b·S + j | packed offset + j | paged slot) · k_token + kv head · k_head
  const u16* v;
  u16* o;                  // output rows, laid out as the query (token-major)
  float* lse;              // natural-log log-sum-exp per (token, head), or null
  float* o_part;           // [split][token·N + head][Dv] float32, normalised per split (splits > 1)
  float* lse_part;         // [split][token·N + head]
  const int* block_table;  // (B, max_blocks) pool blocks, or null when the cache is not paged
  const int* q_offsets;    // B+1 starts of a packed query, or null (token = b·T + t)
  const int* kv_offsets;   // B+1 starts of packed keys, or null
  const int* q_lens;       // valid query lengths (B), or null
  const int* kv_lens;      // valid key lengths (B), or null
  i64 q_token, q_head, k_token, k_head, v_token, v_head, o_token, o_head;
  int B, T, S, N, K, H, Hv, group;
  int block_size, max_blocks;
  int splits;
  int window_left, window_right;  // inclusive, clamped to 1<<29 for unbounded
  float scale_log2;
  int flags;                      // FLASH_FLAG_* of flash/params.cuh
  int rows_total;                 // tokens · N: the row count of o_part / lse_part
};
// 12 pointers, 8 strides, 16 four-byte fields: 96 + 64 + 64 = 224 bytes (marshalled in decode-params.ts).
static_assert(sizeof(DecodeParams) == 224, "DecodeParams layout changed: update decode-params.ts");

__device__ __forceinline__ float nan_max(float a, float b) {
  // fmaxf drops a NaN; the rule wants it to win.
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
}
__device__ __forceinline__ float quad_nan_max(float x) {
  x = nan_max(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return nan_max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Keys [lo, hi) that query t of a batch with Tb queries and Sb keys sees.
struct KeyRange {
  int lo, hi;
};
__device__ __forceinline__ KeyRange key_range(const DecodeParams& p, int t, int Tb, int Sb) {
  const int diag = t + ((p.flags & FLASH_FLAG_BOTTOM_RIGHT) ? Sb - Tb : 0);
  int lo = 0, hi = Sb;
  if (p.flags & FLASH_FLAG_CAUSAL) hi = imin(hi, diag + 1);
  if (p.flags & FLASH_FLAG_WINDOW) {
    lo = imax(lo, diag - p.window_left);
    hi = imin(hi, diag + p.window_right + 1);
  }
  // lo can pass Sb (a window that starts after the last key, as a ring step's shifted window [0, ∞)
  // does for queries past the keys): clamp it, or the block's union [lo(first), hi(last)) reaches past
  // the cache and the loader reads keys (and block-table entries) that do not exist.
  lo = imin(imax(lo, 0), Sb);
  return {lo, imax(hi, lo)};
}

__device__ __forceinline__ i64 query_token(const DecodeParams& p, int b, int t) {
  return p.q_offsets ? (i64)p.q_offsets[b] + t : (i64)b * p.T + t;
}

template <bool FP16>
__device__ __forceinline__ u16 to_bits(float x) {
  u16 r;
  if constexpr (FP16) {
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  } else {
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  }
  return r;
}

template <bool FP16>
__device__ __forceinline__ bool has_non_finite(u32 x) {
  const u32 e = FP16 ? 0x7c00u : 0x7f80u;
  return (x & e) == e || ((x >> 16) & e) == e;
}

// The rare P·V of 16 keys whose V holds NaN/Inf where some row does not see them: per visible
// (row, key) pair, in scalar code. `pt` is the warp's 16 × 16 tile of weights in the mma layout (lane
// (g, tq) holds rows g, g+8 and keys 8·nt + 2·tq, +1); the weight of (row, key kk) comes from lane
// 4·g + (kk % 8) / 2 by a shuffle, so no shared memory is needed (the 4 KB it took kept two blocks of
// two row tiles from fitting on one SM). The column loop is not unrolled (unrolled, 4 copies of
// 16 × 4 × 16 multiply-adds made RT=4 take ~30 s to compile); each column group's 4 sums reach the
// accumulator registers through an unrolled select, since registers take only compile-time indices.
// v_at(kk, col): V's element (chunk row kk, column col) from shared memory, in the tile's layout.
template <class C, bool FP16, class VAt>
__device__ __forceinline__ void scalar_pv(float (&o)[C::DT][4], const float (&pt)[2][4], VAt v_at, int chunk0,
                                          const int (&lo)[2], const int (&hi)[2], int g, int tq) {
#pragma unroll 1
  for (int d = 0; d < C::DT; ++d) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      const int j = chunk0 + kk, from = 4 * g + (kk % 8) / 2;
      const float w[2] = {__shfl_sync(0xffffffffu, pt[kk / 8][kk % 2], from),
                          __shfl_sync(0xffffffffu, pt[kk / 8][2 + kk % 2], from)};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int h = c / 2;
        if (j < lo[h] || j >= hi[h]) continue;
        const u16 bits = v_at(kk, d * 8 + 2 * tq + (c % 2));
        float x;
        if constexpr (FP16) {
          asm("cvt.f32.f16 %0, %1;\n" : "=f"(x) : "h"(bits));
        } else {
          x = __uint_as_float(static_cast<u32>(bits) << 16);
        }
        acc[c] = fmaf(w[h], x, acc[c]);
      }
    }
#pragma unroll
    for (int dd = 0; dd < C::DT; ++dd)
      if (dd == d)
#pragma unroll
        for (int c = 0; c < 4; ++c) o[dd][c] += acc[c];
  }
}

// The combines' last step: row `row`'s output Σ_s w_s · O_s / Σ_s w_s over the `splits` normalised rows
// of o_part (weights w_s = e^(lse_s − base), their sum `sum`), and its log-sum-exp base + log sum. Each
// lane owns 4 columns and reads one 16-byte chunk of every split's row, independent loads the compiler
// can keep in flight. SKIP_ZERO: rows of weight 0 are not read (the combine of the persistent experiment,
// benchmarks/harnesses/decode-persistent-kernel.cu: the slot of a block with no tiles holds nothing written; 0 · a
// finite row adds nothing). L2: the rows are read from the L2 (ld.global.cg), past this SM's L1: other blocks of
// the same launch wrote them (the split kernel's own combine, flash_decode_ws.cu).
template <int DV, bool FP16, bool SKIP_ZERO, bool L2 = false>
__device__ __forceinline__ void write_combined_row(const DecodeParams& p, int row, int lane, const float* weights,
                                                   int splits, float base, float sum) {
  const bool empty = sum == 0.f;
  const float inv = empty ? 0.f : 1.f / sum;
  u16* dst = p.o + (i64)(row / p.N) * p.o_token + (i64)(row % p.N) * p.o_head;
  for (int col = 4 * lane; col < p.Hv; col += 128) {
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = 0; s < splits; ++s) {
      const float w = weights[s];
      if (SKIP_ZERO && w == 0.f) continue;
      const float4* at = reinterpret_cast<const float4*>(p.o_part + ((i64)s * p.rows_total + row) * DV + col);
      const float4 y = L2 ? __ldcg(at) : *at;
      x.x += w * y.x, x.y += w * y.y, x.z += w * y.z, x.w += w * y.w;
    }
    const float out[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (col + c < p.Hv) dst[col + c] = to_bits<FP16>(out[c] * inv);
  }
  if (p.lse && lane == 0) p.lse[row] = empty ? neg_inf() : base + __logf(sum);
}

// Row `row` from `splits` partial rows whose log-sum-exps lse_of(s) gives (read twice; the lanes take
// 32 splits at a time): the weights e^(lse_s − max) into `weights` (this warp's shared slots), then
// write_combined_row.
template <int DV, bool FP16, bool SKIP_ZERO, class LseOf, bool L2 = false>
__device__ __forceinline__ void combine_row(const DecodeParams& p, int row, int lane, float* weights, int splits,
                                            LseOf lse_of) {
  float M = neg_inf();
  for (int s = lane; s < splits; s += 32) M = nan_max(M, lse_of(s));
#pragma unroll
  for (int d = 16; d > 0; d /= 2) M = nan_max(M, __shfl_xor_sync(0xffffffffu, M, d));
  const float base = M == neg_inf() ? 0.f : M;
  float sum = 0.f;
  for (int s = lane; s < splits; s += 32) {
    // A split that saw nothing has weight 0 and O 0; one that saw a NaN carries it.
    const float w = __expf(lse_of(s) - base);
    weights[s] = w;
    sum += w;
  }
#pragma unroll
  for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  __syncwarp();
  write_combined_row<DV, FP16, SKIP_ZERO, L2>(p, row, lane, weights, splits, base, sum);
}

// The combine: one warp per (token, head) row merges the splits' normalised rows by their
// log-sum-exp: lse = log Σ e^lse_s, O = Σ e^(lse_s − lse) · O_s. Padding rows of a dense query
// (t ≥ its length) are left as the host zeroed them. The lanes read the splits' lse in parallel
// (one split each, 32 at a time) and put their weights in shared memory; then each lane owns 4
// columns and reads one 16-byte chunk of every split's row, independent loads the compiler can keep
// in flight (walking the splits three times one lse at a time, and once per column, cost ~0.6 µs
// per split at B=1, the sweep of benchmarks/results/h200/decode/2026-12-01-row-tile-split-counts).
constexpr int DEC_MAX_SPLITS = 128;  // decode-splits.ts never asks for more
template <int DV, bool FP16>
__device__ __forceinline__ void flash_decode_combine(const DecodeParams& p) {
  __shared__ float weights[4][DEC_MAX_SPLITS];
  grid_dependency_wait();
  grid_dependents_may_launch();
  const int warp = threadIdx.x / 32, row = blockIdx.x * 4 + warp, lane = threadIdx.x % 32;
  if (row >= p.rows_total) return;
  if (!p.q_offsets) {
    const int token = row / p.N, b = token / p.T, t = token % p.T;
    if (t >= (p.q_lens ? p.q_lens[b] : p.T)) return;
  }
  const int splits = imin(p.splits, DEC_MAX_SPLITS);
  combine_row<DV, FP16, false>(p, row, lane, weights[warp], splits,
                               [&](int s) { return p.lse_part[(i64)s * p.rows_total + row]; });
}

