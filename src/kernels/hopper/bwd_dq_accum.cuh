// The wgmma backward's float32 dQ workspace: laid out as the dK/dV loop's staging boxes, so that each
// warpgroup adds its 64 query rows × 64 head-dim columns of dQ with one bulk reduce-add
// (cp.reduce.async.bulk, FlashAttention-3's dQ path) instead of 8192 per-element reductions.
//
// Layout: (B·N, D/64 boxes, t_pad, 64) floats — rows of one box of one head contiguous, so the 64
// rows of a query block (m0 a multiple of 64) are one 16 KiB run — with the 16-byte chunks of row t
// permuted by t % 8 (chunk c at c ^ (t % 8), or with FLASH_BWD_DQ_SWIZZLE the permutation below): the
// staging store of the wgmma accumulator (lane g, t writes rows g and g + 8, columns 8j + 2t) then spreads
// its bytes over the 32 banks where the plain layout puts 8 rows on the same 8 banks.
//
// prep zeroes the workspace (every padded row too: the bulk adds cover whole query blocks), and
// dq_convert reads it back: dQ = scale · workspace in the input dtype, (B,T,N,H) contiguous.
#pragma once
#include "flash/bwd_rows.cuh"
#include "hopper/sm90.cuh"

// Offset in floats of row m0 of half `half` (columns [W·half, W·half + W), W = D/2) of head bn (= b·N + n).
template <int W>
__device__ __forceinline__ i64 hopper_dq_box_offset(i64 bn, int half, int t_pad, int m0) {
  return ((bn * 2 + half) * t_pad + m0) * W;
}

// FLASH_BWD_DQ_SWIZZLE (ATTNLAB_FLASH_BWD_DQ_SWIZZLE=1): chunk c of row r at c ^ (2·(r % 4) + (r / 4) % 2)
// instead of c ^ (r % 8). A 64-bit store is issued a half-warp at a time (lanes g = 0–3, then 4–7): with
// c ^ (r % 8) each half-warp's 16 lanes land on 4 chunks of every 8 (2-way conflicts), 4 wavefronts a warp
// instruction where 2 is the least (ncu, H100: every staging STS.64 at 4.00 wavefronts, ideal 2.00; the
// staging and the fence after it were 15% of the 256-thread loop's warp samples at H=128); this spreads
// each half-warp over all 8.
#ifndef FLASH_BWD_DQ_SWIZZLE
#define FLASH_BWD_DQ_SWIZZLE 0
#endif
__device__ __forceinline__ int hopper_dq_chunk_xor(int r) {
  return FLASH_BWD_DQ_SWIZZLE ? ((r & 3) << 1) | ((r >> 2) & 1) : (r & 7);
}

// Offset in floats of element (row r, column c) of a half's rows, r counted from a multiple of 8.
template <int W>
__device__ __forceinline__ int hopper_dq_in_box(int r, int c) {
  return r * W + (((c >> 2) ^ hopper_dq_chunk_xor(r & 7)) << 2) + (c & 3);
}

// A warp's 16 rows of a warpgroup's m64nW float32 accumulator (rows 16·w + g and 16·w + g + 8) into
// its part of the staging, rows counted from the warp's first.
template <int W>
__device__ __forceinline__ void store_dq_box(u32 rows, const float (&acc)[W / 8][4], int lane) {
  static_assert(W == 32 || W == 64, "4 or 8 chunks of 16 bytes a row: the xor below stays inside the row");
  // Element (r, 8j + 2t) at hopper_dq_in_box: chunk (2j + t/2) ^ x(g), which is (t/2 ^ x(g)) with bits 1-3
  // flipped by j, so the lane's address of j is that of j = 0 with byte bits 5-7 xor'ed by j (the
  // warp's part starts on a 256-byte boundary, and a row takes 4·W ≥ 128 bytes).
  const int g = lane >> 2, t = lane & 3;
  const u32 first = rows + 4 * hopper_dq_in_box<W>(g, 2 * t);
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < W / 8; ++j) {
      const u32 at = (first + h * 8 * W * 4) ^ (j << 5);
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(acc[j][2 * h]), "f"(acc[j][2 * h + 1])
                   : "memory");
    }
}

// ---- bulk (non-tensor) reduce-add of a shared-memory run into global memory, a bulk async-group per thread ----
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most `pending` of this thread's bulk groups still read their shared-memory source.
template <int pending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(pending) : "memory");
}
// Until at most `pending` of them are incomplete (their global writes done).
template <int pending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(pending) : "memory");
}

// flash_bwd_prep's statistics, and the workspace rows of its (b, n, t) zeroed in this layout; with
// SEMAPHORES (the ordered adds of bwd_dq_order.cuh) also the int after the floats of each (b·N + n,
// query block of 64 rows), by the warp of the block's first row.
template <int D, bool FP16, bool SEMAPHORES = false>
__device__ __forceinline__ void hopper_bwd_prep(const FlashParams& p, const FlashBwdParams& x) {
  FlashBwdParams stats = x;
  stats.dq_accum = nullptr;  // the row-major zeroing of flash_bwd_prep is not this layout's
  flash_bwd_prep<FP16, true>(p, stats);
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (x.dq_accum == nullptr || row >= static_cast<i64>(p.B) * p.N * x.t_pad) return;
  const int t = static_cast<int>(row % x.t_pad);
  const i64 bn = row / x.t_pad;
  constexpr int W = D / 2;
  for (int c = threadIdx.x % 32; c < D / 4; c += 32) {
    float* at = x.dq_accum + hopper_dq_box_offset<W>(bn, c / (W / 4), x.t_pad, t) + 4 * (c % (W / 4));
    *reinterpret_cast<u128*>(at) = u128{0, 0, 0, 0};
  }
  if (SEMAPHORES && t % 64 == 0 && threadIdx.x % 32 == 0) {
    int* semaphores = reinterpret_cast<int*>(x.dq_accum + static_cast<i64>(p.B) * p.N * x.t_pad * D);
    semaphores[bn * (x.t_pad / 64) + t / 64] = 0;
  }
}

// dQ = scale · workspace, 8 elements (two chunks of one box row) per thread, grid-stride.
template <int D, bool FP16>
__device__ __forceinline__ void hopper_bwd_dq_convert(const FlashParams& p, const FlashBwdParams& x) {
  const int per_row = p.H / 8;
  const i64 chunks = static_cast<i64>(p.B) * p.T * p.N * per_row;
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 c = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const i64 row = c / per_row;  // (b·T + t)·N + n
    const int h = static_cast<int>(c - row * per_row) * 8;
    const int n = static_cast<int>(row % p.N);
    const i64 bt = row / p.N;
    const int t = static_cast<int>(bt % p.T);
    const i64 bn = (bt / p.T) * p.N + n;
    constexpr int W = D / 2;
    const float* half = x.dq_accum + hopper_dq_box_offset<W>(bn, h / W, x.t_pad, 0);
    const F32x4 a = *reinterpret_cast<const F32x4*>(half + hopper_dq_in_box<W>(t, h % W));
    const F32x4 b = *reinterpret_cast<const F32x4*>(half + hopper_dq_in_box<W>(t, h % W + 4));
    const float s = x.scale;
    reinterpret_cast<u128*>(x.dq)[c] = u128{pack2<FP16>(a.x * s, a.y * s), pack2<FP16>(a.z * s, a.w * s),
                                            pack2<FP16>(b.x * s, b.y * s), pack2<FP16>(b.z * s, b.w * s)};
  }
}
