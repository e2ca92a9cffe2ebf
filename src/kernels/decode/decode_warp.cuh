// A decode warp's work on one tile and at the end, shared by both decode kernels (flash_decode.cu,
// flash_decode_heads.cu): the online softmax of its KPW keys for the two rows (g, g+8) each lane
// holds, the P·V of those keys (tensor cores, or scalar_pv where V holds NaN/Inf at keys a row does
// not see), and the merge of the warps that split a row tile's keys. C gives DT (Hv / 8) and PITCHV
// (the V tile's row pitch in elements).
#pragma once
#include "decode/decode_common.cuh"

// A block's keys: rows of tokens t_first … t_last see the union [lo, hi) (visible ranges grow with
// t: [lo(t_first), hi(t_last))), all of them [all_lo, all_hi) = [lo(t_last), hi(t_first)); split
// `split` of p.splits takes tiles [tile_lo, tile_hi) of TK keys from lo.
struct BlockKeys {
  int lo, hi, all_lo, all_hi, tile_lo, tile_hi;
};
template <int TK>
__device__ __forceinline__ BlockKeys block_keys(const DecodeParams& p, int t_first, int t_last, int Tb, int Sb,
                                                int split) {
  const KeyRange first = key_range(p, t_first, Tb, Sb), last = key_range(p, t_last, Tb, Sb);
  const int lo = first.lo, hi = imax(last.hi, lo);
  const int tiles = (hi - lo + TK - 1) / TK;
  const int per_split = (tiles + p.splits - 1) / p.splits;
  const int tile_lo = imin(split * per_split, tiles);
  return {lo, hi, last.lo, first.hi, tile_lo, imin(tile_lo + per_split, tiles)};
}

// The keys [lo, hi) each of this lane's two rows r0 + g, r0 + g + 8 of a kv head sees (rows_b rows:
// p.group per token), or none for padding rows; and the zeroed output accumulators.
template <int DT>
__device__ __forceinline__ void start_rows(const DecodeParams& p, int r0, int rows_b, int Tb, int Sb, int g,
                                           int (&lo)[2], int (&hi)[2], float (&o)[DT][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = r0 + g + 8 * h;
    const KeyRange range = rr < rows_b ? key_range(p, rr / p.group, Tb, Sb) : KeyRange{0, 0};
    lo[h] = range.lo;
    hi[h] = range.hi;
  }
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[d][c] = 0.f;
}

// Q's A fragments for a warp's 16 rows r0 + g, r0 + g + 8 of kv head kh (rows_b rows of G = p.group per
// token; 0 for padding rows), straight from global memory in the mma A layout: (row g, cols 2tq..+1),
// (g+8, …), (g, 2tq+8..), (g+8, 2tq+8..). The heads kernels hold them in registers for the whole loop.
template <int KT>
__device__ __forceinline__ void load_q_fragments(u32 (&qa)[KT][4], const DecodeParams& p, int b, int kh, int G,
                                                 int r0, int rows_b, int lane) {
  const int g = lane / 4, tq = lane % 4;
  const u16* q_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = r0 + g + 8 * h;
    q_row[h] = rr < rows_b ? p.q + query_token(p, b, rr / G) * p.q_token + (i64)(kh * G + rr % G) * p.q_head
                           : nullptr;
  }
#pragma unroll
  for (int kk = 0; kk < KT; ++kk)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const u16* row = q_row[c % 2];
      qa[kk][c] = row ? *reinterpret_cast<const u32*>(row + kk * 16 + 2 * tq + 8 * (c / 2)) : 0u;
    }
}

// Where element (row, col) of a K or V tile lives in shared memory (a 32-bit shared address from the
// tile's): padded token rows of PITCH elements (the row-copy kernels: ldmatrix's 8 rows hit 8 bank groups
// through the 16-byte pad), or TMA's 128-byte swizzle (flash_decode_ws.cu's TMA loader): 64-column halves
// of ROWS rows × 128 B one after the other, 16-byte chunk c of row r at chunk c ^ (r % 8), so 8 rows of
// one logical chunk land in 8 different bank groups with no pad (each half starts 1024-byte aligned).
// Sw128GroupLayout: groups of GROUP rows one after the other, each its two halves of GROUP rows (the
// harness's grouped boxes, decode_tma.cuh: one copy moves both halves of a group's rows).
template <int PITCH>
struct PitchLayout {
  __device__ static __forceinline__ u32 at(u32 tile, int row, int col) { return tile + (row * PITCH + col) * 2; }
};
template <int ROWS>
struct Sw128Layout {
  __device__ static __forceinline__ u32 at(u32 tile, int row, int col) {
    return tile + (col / 64) * (ROWS * 128) + row * 128 + ((((col % 64) / 8) ^ (row % 8)) << 4) + (col % 8) * 2;
  }
};
template <int GROUP>
struct Sw128GroupLayout {
  static_assert(GROUP % 8 == 0, "whole 1024-byte swizzle atoms");
  __device__ static __forceinline__ u32 at(u32 tile, int row, int col) {
    return Sw128Layout<GROUP>::at(tile + (row / GROUP) * (GROUP * 256), row % GROUP, col);
  }
};

// s = Q·Kᵀ for the warp's 16 rows and KPW keys, K rows row0 … of the tile at k_tile (layout L);
// q_frag(kk, qa) gives the A fragment of Q's columns 16·kk … (from registers or shared).
template <int KT, int KPW, class L, bool FP16, class QFrag>
__device__ __forceinline__ void qk_tile_at(float (&s)[KPW / 8][4], u32 k_tile, int row0, int lane, QFrag q_frag) {
#pragma unroll
  for (int nt = 0; nt < KPW / 8; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) s[nt][c] = 0.f;
  const int key_row = row0 + (lane / 16) * 8 + (lane % 8);
  const int col = ((lane / 8) % 2) * 8;
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    u32 qa[4];
    q_frag(kk, qa);
#pragma unroll
    for (int kc = 0; kc < KPW / 16; ++kc) {
      u32 kb[4];
      ldmatrix_x4(kb, L::at(k_tile, key_row + kc * 16, kk * 16 + col));
      mma_16816<FP16>(s[2 * kc], qa, kb[0], kb[1]);
      mma_16816<FP16>(s[2 * kc + 1], qa, kb[2], kb[3]);
    }
  }
}
template <int KT, int KPW, int PITCH, bool FP16, class QFrag>
__device__ __forceinline__ void qk_tile(float (&s)[KPW / 8][4], u32 k_tile, int row0, int lane, QFrag q_frag) {
  qk_tile_at<KT, KPW, PitchLayout<PITCH>, FP16>(s, k_tile, row0, lane, q_frag);
}

// Scales the logits s into base 2, masks (−inf) the keys key0 + … a row does not see ([lo, hi) per
// row), and folds them into the running max m, sum l and output o; s becomes the weights.
template <int KPW, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[KPW / 8][4], float (&o)[DT][4], float (&m)[2],
                                               float (&l)[2], int key0, const int (&lo)[2], const int (&hi)[2],
                                               float scale_log2, int tq) {
  float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
  for (int nt = 0; nt < KPW / 8; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int h = c / 2, j = key0 + nt * 8 + 2 * tq + (c % 2);
      s[nt][c] = (j >= lo[h] && j < hi[h]) ? s[nt][c] * scale_log2 : neg_inf();
      mx[h] = nan_max(mx[h], s[nt][c]);
    }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float m_new = nan_max(m[h], quad_nan_max(mx[h]));
    const float base = m_new == neg_inf() ? 0.f : m_new;
    const float alpha = fast_exp2(m[h] - base);  // 0 while the row had seen nothing
    m[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < KPW / 8; ++nt)
#pragma unroll
      for (int c = 2 * h; c < 2 * h + 2; ++c) {
        s[nt][c] = fast_exp2(s[nt][c] - base);
        sum += s[nt][c];
      }
    l[h] = l[h] * alpha + sum;
#pragma unroll
    for (int d = 0; d < DT; ++d) {
      o[d][2 * h] *= alpha;
      o[d][2 * h + 1] *= alpha;
    }
  }
}

// o += P·V over the warp's KPW keys key0 …, whose V rows are rows row0 … of the tile at v_tile
// (shared address, layout L). 16 keys every row of the block sees ([all_lo, all_hi)) cannot be
// contaminated by masked values; other chunks are checked for NaN/Inf in V (2 lanes a row, 16 bytes
// at a time) and, if one holds any, multiplied in scalar code.
template <class C, bool FP16, int KPW, class L>
__device__ __forceinline__ void pv_tile_at(float (&o)[C::DT][4], const float (&s)[KPW / 8][4], u32 v_tile, int key0,
                                           int row0, int all_lo, int all_hi, const int (&lo)[2], const int (&hi)[2],
                                           int lane) {
  constexpr int DV = C::DT * 8;
  const int g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int kc = 0; kc < KPW / 16; ++kc) {
    const int chunk0 = key0 + kc * 16, chunk_row = row0 + kc * 16;
    bool use_scalar = false;
    if (!(chunk0 >= all_lo && chunk0 + 16 <= all_hi)) {
      bool bad = false;
      const int row = chunk_row + lane / 2;
#pragma unroll
      for (int c = (lane % 2) * 8; c < DV; c += 16) {
        const u128 x = ld_shared_u128(L::at(v_tile, row, c));
        bad |= has_non_finite<FP16>(x.x) | has_non_finite<FP16>(x.y) | has_non_finite<FP16>(x.z) |
               has_non_finite<FP16>(x.w);
      }
      use_scalar = __any_sync(0xffffffffu, bad);
    }
    if (!use_scalar) {
      u32 a[4] = {pack2<FP16>(s[2 * kc][0], s[2 * kc][1]), pack2<FP16>(s[2 * kc][2], s[2 * kc][3]),
                  pack2<FP16>(s[2 * kc + 1][0], s[2 * kc + 1][1]), pack2<FP16>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
      const int v_row = chunk_row + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int d = 0; d < C::DT; d += 2) {
        u32 vb[4];
        ldmatrix_x4_trans(vb, L::at(v_tile, v_row, d * 8 + (lane / 16) * 8));
        mma_16816<FP16>(o[d], a, vb[0], vb[1]);
        mma_16816<FP16>(o[d + 1], a, vb[2], vb[3]);
      }
    } else {
      // Scalar P·V over the visible pairs only (weights by shuffles, V one row at a time).
      float pt[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) pt[nt][c] = s[2 * kc + nt][c];
      scalar_pv<C, FP16>(o, pt, [&](int kk, int col) { return ld_shared_u16(L::at(v_tile, chunk_row + kk, col)); },
                         chunk0, lo, hi, g, tq);
    }
  }
}
template <class C, bool FP16, int KPW>
__device__ __forceinline__ void pv_tile(float (&o)[C::DT][4], const float (&s)[KPW / 8][4], u32 v_tile, int key0,
                                        int row0, int all_lo, int all_hi, const int (&lo)[2], const int (&hi)[2],
                                        int lane) {
  pv_tile_at<C, FP16, KPW, PitchLayout<C::PITCHV>>(o, s, v_tile, key0, row0, all_lo, all_hi, lo, hi, lane);
}

// Shared memory of the merge, per warp: 16 maxima, 16 sums (quad-summed here), 16 × DV outputs.
struct MergeSlots {
  float *m, *l, *o;
};
__device__ __forceinline__ MergeSlots merge_slots(void* base, int warps) {
  float* m = reinterpret_cast<float*>(base);
  return {m, m + warps * 16, m + warps * 32};
}
template <int DT>
__device__ __forceinline__ void stash_partial(const MergeSlots& e, int warp, const float (&m)[2], float (&l)[2],
                                              const float (&o)[DT][4], int lane) {
  constexpr int DV = DT * 8;
  const int g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (tq == 0) {
      e.m[warp * 16 + g + 8 * h] = m[h];
      e.l[warp * 16 + g + 8 * h] = l[h];
    }
  }
#pragma unroll
  for (int d = 0; d < DT; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) e.o[(warp * 16 + g + 8 * (c / 2)) * DV + d * 8 + 2 * tq + (c % 2)] = o[d][c];
}

// Row `out_row` (token · N + n) from the SLICES partial rows at(0 … SLICES−1) of the merge slots:
// its output and log-sum-exp (splits = 1), or its split's normalised row and log-sum-exp. `part`
// of THREADS_PER_ROW threads write columns part·2, … (or part, … of a partial row).
template <int SLICES, int DV, int THREADS_PER_ROW, bool FP16, class At>
__device__ __forceinline__ void write_merged_row(const DecodeParams& p, const MergeSlots& e, At at, i64 token,
                                                 int n, int split, int part) {
  constexpr float LN2 = 0.6931471805599453f;
  float M = neg_inf();
#pragma unroll
  for (int w = 0; w < SLICES; ++w) M = nan_max(M, e.m[at(w)]);
  const float base = M == neg_inf() ? 0.f : M;
  float weight[SLICES], L = 0.f;
#pragma unroll
  for (int w = 0; w < SLICES; ++w) {
    weight[w] = fast_exp2(e.m[at(w)] - base);
    L += e.l[at(w)] * weight[w];
  }
  const bool empty = L == 0.f;  // false for NaN: a NaN row stays NaN
  const float inv = empty ? 0.f : 1.f / L;
  float log2l;
  asm("lg2.approx.f32 %0, %1;\n" : "=f"(log2l) : "f"(empty ? 1.f : L));
  const float lse = empty ? neg_inf() : (base + log2l) * LN2;
  const i64 out_row = token * p.N + n;
  if (p.splits == 1) {
    u16* dst = p.o + token * p.o_token + (i64)n * p.o_head;
    for (int col = part * 2; col < p.Hv; col += THREADS_PER_ROW * 2) {
      float x0 = 0.f, x1 = 0.f;
#pragma unroll
      for (int w = 0; w < SLICES; ++w) {
        x0 += e.o[at(w) * DV + col] * weight[w];
        x1 += e.o[at(w) * DV + col + 1] * weight[w];
      }
      *reinterpret_cast<u32*>(dst + col) = pack2<FP16>(x0 * inv, x1 * inv);
    }
    if (p.lse && part == 0) p.lse[out_row] = lse;
  } else {
    float* dst = p.o_part + ((i64)split * p.rows_total + out_row) * DV;
    for (int col = part; col < p.Hv; col += THREADS_PER_ROW) {
      float x = 0.f;
#pragma unroll
      for (int w = 0; w < SLICES; ++w) x += e.o[at(w) * DV + col] * weight[w];
      dst[col] = x * inv;
    }
    if (part == 0) p.lse_part[(i64)split * p.rows_total + out_row] = lse;
  }
}
