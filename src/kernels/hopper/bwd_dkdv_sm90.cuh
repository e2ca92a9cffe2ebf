// The backward's dK/dV loop on Hopper (sm_90a): FlashAttention-2's Algorithm 2 with the products on
// wgmma, the block's two warpgroups each owning 64 of its 128 keys.
//
// Why: the mma.sync loop (flash/bwd_dkdv.cuh) gives each warp 16 keys against the whole 64-query
// tile, so every warp re-reads the Q and dO tiles from shared memory for each of its four products:
// ~92 KB of ldmatrix traffic per warp and query block, against 10.5 MFLOP per block — it runs at
// 0.60× PyTorch's FlashAttention-2 backward. A wgmma reads its shared operands once per warpgroup
// (4 warps), so the same products read ~1/3 of those bytes.
//
// Per query block of 64 rows, warpgroup wg (keys kn0 + 64·wg …):
//   Sᵀ  = K_wg·Qᵀ    wgmma m64n64k16, A = K rows, B = the Q tile (both K-major: head dim contiguous)
//   dPᵀ = V_wg·dOᵀ   the same with V and dO
//   Pᵀ = 2^(Sᵀ·scale·log2e − lse2), dSᵀ = Pᵀ ∘ (dPᵀ − D)   on the accumulators (bwd_common.cuh)
//   dV += Pᵀ·dO      wgmma m64n(D)k16, A = Pᵀ from registers, B = dO MN-major (as V in the forward)
//   dK += dSᵀ·Q      the same with dSᵀ and Q
//   dQ += dS·K       (DQ) dSᵀ goes to shared memory as dS (queries × keys, K-major); warpgroup wg
//                    computes the 64 queries × half wg of the head dim (m64n(D/2)k16, B = K
//                    MN-major) over all 128 keys, stages it in float32 and each warp adds its 16 rows
//                    to the workspace with one bulk reduce-add (hopper/bwd_dq_accum.cuh). Halves keep
//                    the warpgroups' tensor work equal at D = 64 too (one warpgroup taking all of dQ
//                    there does 6 units of 64³ a step against the other's 4); the other split, each
//                    warpgroup its own 64 keys over the whole head dim, would double the adds.
// The accumulator layout of a warpgroup's m64 wgmma is mma.sync's C fragment per warp (warp w holds
// rows 16w + g and 16w + g + 8), so the masking, weights and dS code is the mma.sync loop's, with
// warp 4·wg + w owning keys kn0 + 16·(4·wg + w) — the same keys as there.
//
// Schedule of step s (a loop running every phase in lock step behind two barriers per step leaves the
// tensor cores idle through the elementwise work, the dQ reductions and the loads: ncu has 36% issue
// slots busy and integer ALU the busiest pipe at 0.99× / 0.96× FA2):
//   Sᵀ(s) and dPᵀ(s) are two commit groups, issued at the end of step s − 1: Pᵀ is computed while
//   dPᵀ still multiplies, and dV(s) is issued before dSᵀ, which is computed while dV multiplies
//   (FlashAttention-3's order); dQ(s) then dK(s) are issued after the step's one barrier, and dQ's
//   staging and bulk adds run while dK multiplies; the loads of step s + 2 are issued behind them.
// One barrier per step needs three stages of Q/dO/statistics and two dS buffers: at the barrier of
// step s every warpgroup has retired all of step s − 1's products, so the stage step s − 1 read and
// the dS buffer step s − 2 wrote are free; each issuing lane waits for its bulk adds of step s − 1 to
// have read the dQ staging before that barrier too (they had the whole step to run).
//
// Loads: cp.async into 128-byte swizzled boxes of 64 columns (TMA's SWIZZLE_128B, which the wgmma
// descriptors of hopper/sm90.cuh read), two steps ahead. cp.async writes through the generic proxy,
// so each thread fences it to the async proxy before the barrier that publishes the tiles to wgmma.
// No producer warpgroup or TMA: every thread loads, as in the mma.sync loop.
//
// Shared memory (D = 128, bf16): K 32 KB | V 32 KB | 3 stages of (Q 16 KB | dO 16 KB) | 2 × dS 16 KB
// and the dQ staging 32 KB (DQ) | 3 × (lse2, D) 512 B = 226.5 KB with 1 KB of alignment slack
// (231,936 of the 232,448 bytes allowed; one block per SM either way, by registers). The statistics
// sit after the 1 KiB-aligned regions: inside each stage they would round it up to
// the 1 KiB swizzle atom (3 × 512 B), and the staging would not fit. D = 64: 16 | 16 | 3 × 16 | 2 × 16 + 16 | 1.5 = 130.5 KB.
#pragma once
#include "flash/bwd_common.cuh"
#ifndef FLASH_BWD_LEAN
#define FLASH_BWD_LEAN 0  // docs/internals/backward.md, v6 and v7: the host passes 1 unless ATTNLAB_FLASH_BWD_LEAN=0
#endif
#ifndef FLASH_BWD_GRAD_FROM_OUTPUT
#define FLASH_BWD_GRAD_FROM_OUTPUT 0
#endif
#ifndef FLASH_BWD_STATS_EARLY
#define FLASH_BWD_STATS_EARLY 0  // ATTNLAB_FLASH_BWD_STATS_EARLY=1: stats_early below
#endif
#include "hopper/bwd_dq_accum.cuh"
#include "hopper/bwd_dq_order.cuh"
#include "hopper/wgmma.cuh"

template <int D_, bool FP16_, int BIAS_ = 0, bool MASK_ = false, bool MASK_ROWS_ = false, bool DBIAS_STORE_ = false>
struct HopperBwdConfig {
  static constexpr int D = D_, BNK = 128, BMQ = 64, THREADS = 256, NW = 8;
  static constexpr bool FP16 = FP16_;
  static constexpr int BIAS = BIAS_;    // the bias element type (flash/mask.cuh's codes), 0 none: P and dBias
  // dBias stored in the bias's type, once an element (dbias_store_tile), not added into float32.
  static constexpr bool DBIAS_STORE = BIAS_ != 0 && DBIAS_STORE_;
  static constexpr bool MASK = MASK_;   // a boolean mask: P
  // The mask read as 16-byte rows (load_mask_rows): its keys contiguous, every other stride and its
  // address multiples of 16 bytes (the host checks).
  static constexpr bool MASK_ROWS = MASK_ && MASK_ROWS_;
  static constexpr int BOXES = D / 64;
  static constexpr int DT = D / 8;    // 8-column n-tiles of dK, dV
  static constexpr int NT = BMQ / 8;  // 8-query n-tiles of Sᵀ, dPᵀ
  static constexpr u32 KV_BOX = BNK * 128, KV_BYTES = BOXES * KV_BOX;
  static constexpr u32 Q_BOX = BMQ * 128, Q_BYTES = BOXES * Q_BOX;
  static constexpr u32 STAGE = 2 * Q_BYTES;  // Q | dO: whole 1 KiB swizzle atoms
  static constexpr u32 STATS = 2 * BMQ * 4;  // lse2 | D of a stage, kept after the 1 KiB-aligned regions
  static constexpr u32 DS_BOX = BMQ * 128, DS_BYTES = (BNK / 64) * DS_BOX;  // 64 keys per box
  // dQ: each warpgroup computes the 64 queries × DQ_W = D/2 columns of its half of the head dim, and
  // stages it in float32 (hopper/bwd_dq_accum.cuh's layout) for its warps' bulk reduce-adds.
  static constexpr int DQ_W = D / 2, DQ_NT = DQ_W / 8;
  static constexpr u32 DQ_BOX_BYTES = BMQ * DQ_W * 4, DQ_BYTES = 2 * DQ_BOX_BYTES;
  static constexpr u32 DQ_WARP_BYTES = 16 * DQ_W * 4;  // a warp's 16 rows of its half, one bulk reduce
  static constexpr int STAGES = 3, DS_BUFFERS = 2;  // the one-barrier schedule's (see above)
  // With a block mask: a bit a step (head, query block) after the statistics, 512 bytes (the shared memory
  // left at D = 128: 232,448 − 231,936).
  static constexpr int STEP_BITS = ATTNLAB_BLOCK_MASK ? 4096 : 0;
  static_assert(D == 64 || D == 128, "one or two 64-column boxes of the head dim (dQ's split)");
};

template <class C, bool DQ>
constexpr unsigned hopper_bwd_smem_bytes() {
  return 1024 + 2 * C::KV_BYTES + C::STAGES * C::STAGE + (DQ ? C::DS_BUFFERS * C::DS_BYTES + C::DQ_BYTES : 0) +
         C::STAGES * C::STATS + C::STEP_BITS / 8;
}
static_assert(hopper_bwd_smem_bytes<HopperBwdConfig<128, false>, true>() <= 227 * 1024, "an H100/H200 block");

// Rows [0, ROWS) of a (ROWS × D) tile into 128-byte swizzled boxes (sw128_offset), zero-filled past
// valid_rows and valid_cols. The same thread → chunk mapping as load_tile (zero_non_finite relies on
// it): thread i copies chunk i % (D/8) of rows i / (D/8) + k · THREADS/(D/8), whose swizzled column
// stays fixed since the row step is a multiple of 8. WHOLE: whole tiles take a copy with no predicate
// (below); the producer warpgroup of bwd_dkdv_sm90_ws.cuh, within 24 registers, spills 24 B more at
// D = 128 and 20 B at D = 64 with that second path, so it keeps one.
template <int ROWS, int D, int THREADS, bool WHOLE = false>
__device__ __forceinline__ void load_tile_sw128(u32 dst, const u16* src, i64 row_stride, int valid_rows,
                                                int valid_cols) {
  constexpr int CHUNKS = D / 8;
  constexpr int ROWS_PER_STEP = THREADS / CHUNKS;
  static_assert(THREADS % CHUNKS == 0 && ROWS % ROWS_PER_STEP == 0 && ROWS_PER_STEP % 8 == 0, "tile mapping");
  const int c = threadIdx.x % CHUNKS;
  const int r0 = threadIdx.x / CHUNKS;
  const bool col_ok = c * 8 < valid_cols;
  const u16* from = src + r0 * row_stride + c * 8;
  u32 to = dst + sw128_offset<ROWS>(r0, c);
  if (WHOLE && valid_rows >= ROWS && valid_cols >= D) {
    // A whole tile (every tile but the last of a length that is no multiple of the rows, or of a head dim
    // below D): one copy an iteration with no predicate, where the general form spends a compare, an
    // AND and three selects (PTX) on each of a step's 8 copies a thread at D = 128.
#pragma unroll
    for (int it = 0; it < ROWS / ROWS_PER_STEP; ++it) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from));
      from += ROWS_PER_STEP * row_stride;
      to += ROWS_PER_STEP * 128;
    }
    return;
  }
#pragma unroll
  for (int it = 0; it < ROWS / ROWS_PER_STEP; ++it) {
    const bool ok = col_ok && r0 + it * ROWS_PER_STEP < valid_rows;
    cp_async_16(to, ok ? from : src, ok ? 16 : 0);
    from += ROWS_PER_STEP * row_stride;
    to += ROWS_PER_STEP * 128;
  }
}

// m64n64k16 with B MN-major (imm-trans-b = 1): dQ's B is K, whose rows are the reduction (keys).
template <bool FP16>
__device__ __forceinline__ void wgmma_ss_n64_tb(float (&d)[8][4], u64 a_desc, u64 b_desc, int accumulate) {
#define ATTNLAB_WGMMA_N64_TB(TYPE)                                                                                  \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"                                                          \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                         \
               " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
               "%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 1; }\n"                                                 \
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),         \
                 "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),         \
                 "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),         \
                 "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),         \
                 "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),         \
                 "+f"(d[7][2]), "+f"(d[7][3])                                                                      \
               : "l"(a_desc), "l"(b_desc), "r"(accumulate))
  if constexpr (FP16) {
    ATTNLAB_WGMMA_N64_TB("f16");
  } else {
    ATTNLAB_WGMMA_N64_TB("bf16");
  }
#undef ATTNLAB_WGMMA_N64_TB
}

// m64n32k16 with B MN-major: dQ's half of a 64-column head dim (D = 64).
template <bool FP16>
__device__ __forceinline__ void wgmma_ss_n32_tb(float (&d)[4][4], u64 a_desc, u64 b_desc, int accumulate) {
#define ATTNLAB_WGMMA_N32_TB(TYPE)                                                                                  \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %18, 0;\n"                                                          \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE                                         \
               " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 1; }\n"          \
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),         \
                 "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),         \
                 "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])                                        \
               : "l"(a_desc), "l"(b_desc), "r"(accumulate))
  if constexpr (FP16) {
    ATTNLAB_WGMMA_N32_TB("f16");
  } else {
    ATTNLAB_WGMMA_N32_TB("bf16");
  }
#undef ATTNLAB_WGMMA_N32_TB
}

// Four 8×8 b16 matrices stored transposed (the inverse of ldmatrix .trans): lanes 8i..8i+7 give the
// row addresses of stored matrix i, and each lane's r[i] = (row g, columns 2t, 2t+1) of source matrix i
// lands in stored rows 2t and 2t+1 at column g.
__device__ __forceinline__ void stmatrix_x4_trans(u32 addr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// The A fragments (m16k16 per warp, 4 registers per k-step) of a 64-column accumulator tile.
template <bool FP16>
__device__ __forceinline__ void sm90_a_fragments(u32 (&a)[4][4], const float (&s)[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = pack2<FP16>(s[2 * kk][0], s[2 * kk][1]);
    a[kk][1] = pack2<FP16>(s[2 * kk][2], s[2 * kk][3]);
    a[kk][2] = pack2<FP16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[kk][3] = pack2<FP16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}
__device__ __forceinline__ void pin_fragments(u32 (&a)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+r"(a[kk][c])::"memory");
}


// The boolean mask of a warp's 16 keys [key0, key0 + 16) for the 64 query rows of a step, as two
// 16-byte loads a lane: row m0 + lane and row m0 + lane + 32 (rows past t_len read nothing). One load
// an element (LDG.U8, the mma.sync loop's way) is 32 loads a lane a step at 4 query rows × 8 keys per
// warp instruction, a quarter of each 32-byte sector used, each an address computation of its own,
// and issued after Sᵀ lands; these are 2 a lane, whole sectors, issued before Sᵀ so that they land
// while it multiplies (packed to 32 bits a lane at once: nonzero_bytes16). A warp whose 16 keys run past the mask's S (the last block of an S that is no
// multiple of 16) reads byte by byte, the missing keys 0.
__device__ __forceinline__ void load_mask_rows(u128 (&r)[2], const FlashParams& p, const TileWork& w, int n, int m0,
                                               int key0, int lane) {
  const u8* head = p.mask + w.b * p.mask_strides[0] + n * p.mask_strides[1] + key0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int q = m0 + lane + 32 * h;
    r[h] = u128{0u, 0u, 0u, 0u};
    if (q >= w.t_len) continue;
    const u8* row = head + q * p.mask_strides[2];
    if (key0 + 16 <= p.S) {
      asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(r[h].x), "=r"(r[h].y), "=r"(r[h].z), "=r"(r[h].w)
                   : "l"(row));
    } else {
      u32 word[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int k = 0; k < 16; ++k)
        if (key0 + k < p.S) word[k / 4] |= static_cast<u32>(row[k]) << (8 * (k % 4));
      r[h] = u128{word[0], word[1], word[2], word[3]};
    }
  }
}

// Bit i (i < 4) set when byte i of x is nonzero: each byte's OR folded into its low bit, then the
// four low bits (at 0, 8, 16, 24) gathered to 24…27 by one multiply (the partial products land on
// distinct bits, so nothing carries).
__device__ __forceinline__ u32 nonzero_bytes4(u32 x) {
  x |= x >> 4;
  x |= x >> 2;
  x |= x >> 1;
  return ((x & 0x01010101u) * 0x01020408u) >> 24 & 0xfu;
}
__device__ __forceinline__ u32 nonzero_bytes16(const u128& r) {
  return nonzero_bytes4(r.x) | nonzero_bytes4(r.y) << 4 | nonzero_bytes4(r.z) << 8 | nonzero_bytes4(r.w) << 12;
}

// P ← 0 where the mask drops the pair, over a warp's Pᵀ tile (keys key0 + g + 8·(c/2), rows
// 8j + 2t + c%2): the lane holding row r's bits (r % 32, half r / 32) gives them by shuffle, 8 a lane.
// `word`: a lane's two rows packed, row m0 + lane in bits 0–15 and row m0 + lane + 32 in 16–31.
template <int NT>
__device__ __forceinline__ void apply_mask_rows(float (&pt)[NT][4], u32 word, int lane) {
  static_assert(NT == 8, "64 query rows a step");
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jj = 0; jj < 4; ++jj)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const u32 bits = __shfl_sync(0xffffffffu, word, 8 * jj + 2 * t + e);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int cc = 0; cc < 2; ++cc)
          if (((bits >> (16 * h + g + 8 * cc)) & 1u) == 0u) pt[jj + 4 * h][2 * cc + e] = 0.f;
    }
}

// An L2 prefetch of one step's rows of a dense operand (the bias, ELEM bytes an element, or the mask,
// 1): rows [m0, min(m0 + BMQ, t_len)) of (b, head) over the key block's keys [kn0, min(kn0 + BNK, S)),
// one 128-byte line a thread. Issued a step ahead, so that the step's own loads (per element, or the
// mask's 16-byte rows) find the lines in L2 rather than wait on memory with nothing else to do: the
// operand is read once a (b, n) pair, 4.3 GB of mask or 8.6 GB of bf16 bias at B=4 N=16 T=S=8192,
// more than L2 holds. Keys must be contiguous (stride 1); other layouts are not prefetched.
// L1: the mask's lines go on to L1 as well (prefetch.global.L1, through L2): a step's mask is 8 KB of the
// ~28 KB of L1 that 227 KB of shared memory leaves, and its loads wait after Sᵀ is issued, before P can
// start. At B=4 N=16 T=S=8192 the mask added 3.15 ms a backward (0.79 µs a step) where its bytes alone take
// 1.3–1.4 ms, so the loads' L2 latency, not the bytes, is taken as the cost here.
template <int BMQ, int BNK, int ELEM, int THREADS, bool L1 = false>
__device__ __forceinline__ void prefetch_operand_rows(const void* base, const i64 (&strides)[4], const TileWork& w,
                                                      int S, int head, int m0, int kn0) {
  constexpr int LINES = BNK * ELEM / 128;  // 128-byte lines a row of the key block
  static_assert(LINES >= 1 && (BMQ * LINES) % 64 == 0, "whole lines");
  if (strides[3] != 1) return;
  const unsigned char* tile = static_cast<const unsigned char*>(base) +
                              (w.b * strides[0] + head * strides[1] + m0 * strides[2] + kn0) * ELEM;
  const int rows = imin(BMQ, w.t_len - m0);
  const int lines = imin(LINES, ((S - kn0) * ELEM + 127) / 128);
  for (int i = threadIdx.x; i < BMQ * LINES; i += THREADS) {
    const int r = i / LINES, l = i % LINES;
    if (r < rows && l < lines) {
      const unsigned char* line = tile + r * strides[2] * ELEM + l * 128;
      if constexpr (L1) {
        asm volatile("prefetch.global.L1 [%0];\n" ::"l"(line));
      } else {
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(line));
      }
    }
  }
}

// dBias += dS over a warp's dSᵀ tile (keys key0 + g + 8·(c/2), rows m0 + 8j + 2t + c%2) by float32
// reductions at the bias's element. Where the keys are contiguous and every stride and S even, lanes g
// and g ^ 1 swap one of their two rows, so that each holds two adjacent keys of one row and adds them
// with one red.global.add.v2.f32 (8-byte aligned): 16 reductions a lane a step instead of 32. Pairs
// whose dS are both 0 (not visible, or P = 0) add nothing and are skipped.
template <int NT>
__device__ __forceinline__ void dbias_add_tile(const float (&ds)[NT][4], const FlashParams& p, const FlashBwdParams& x,
                                               const TileWork& w, int head, int key0, int m0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const i64 head_at = w.b * p.bias_strides[0] + head * p.bias_strides[1];
  const bool pairs = p.bias_strides[3] == 1 && p.S % 2 == 0 &&
                     ((p.bias_strides[0] | p.bias_strides[1] | p.bias_strides[2]) & 1) == 0;
  const bool even = (g & 1) == 0;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row0 = ds[j][2 * h], row1 = ds[j][2 * h + 1];  // key g + 8h, rows 2t and 2t + 1
      if (pairs) {
        const float got = __shfl_xor_sync(0xffffffffu, even ? row1 : row0, 4);
        const float lo = even ? row0 : got, hi = even ? got : row1;  // keys kv, kv + 1 of row q
        const int q = m0 + 8 * j + 2 * t + (even ? 0 : 1);
        const int kv = key0 + 8 * h + (g & ~1);
        if (lo != 0.f || hi != 0.f) {
          asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(x.dbias + head_at + q * p.bias_strides[2] + kv),
                       "f"(lo), "f"(hi)
                       : "memory");
        }
      } else {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float v = e ? row1 : row0;
          if (v == 0.f) continue;
          const i64 at = head_at + (m0 + 8 * j + 2 * t + e) * p.bias_strides[2] + (key0 + 8 * h + g) * p.bias_strides[3];
          asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(x.dbias + at), "f"(v) : "memory");
        }
      }
    }
}

// dBias = dS over a warp's dSᵀ tile where every bias element belongs to one (b, n, t, s) position (no
// broadcast dimension: FLASH_DBIAS_STORE), stored once in the bias's element type (BIAS, flash/mask.cuh's
// codes), zeros included, where dbias_add_tile adds into a zeroed float32 accumulator that a conversion
// then reads again: at B=4 N=16 T=S=8192 a (B,N,T,S) bf16 bias's accumulator is 17 GB zeroed, added to
// and read, against 8.6 GB written here. The same bits as the accumulator rounded once (one add to 0).
// The same row swap as dbias_add_tile: each lane stores two adjacent keys of one row, one 4-byte store
// (16-bit) or 8-byte store (float32); otherwise an element at a time. Rows and keys past T and S are
// not stored; the tiles a loop never visits (causal, window, lengths, a block mask) are zeroed by the host.
template <int BIAS, int NT>
__device__ __forceinline__ void dbias_store_tile(const float (&ds)[NT][4], const FlashParams& p, const FlashBwdParams& x,
                                                 const TileWork& w, int head, int key0, int m0, int lane) {
  static_assert(BIAS >= 1 && BIAS <= 3, "float32, bfloat16 or float16");
  const int g = lane >> 2, t = lane & 3;
  const i64 head_at = w.b * p.bias_strides[0] + head * p.bias_strides[1];
  const bool pairs = p.bias_strides[3] == 1 && p.S % 2 == 0 &&
                     ((p.bias_strides[0] | p.bias_strides[1] | p.bias_strides[2]) & 1) == 0;
  const bool even = (g & 1) == 0;
  auto store1 = [&](i64 at, float v) {
    if constexpr (BIAS == 1) {
      x.dbias[at] = v;
    } else {
      reinterpret_cast<u16*>(x.dbias)[at] = static_cast<u16>(pack2<BIAS == 3>(v, 0.f) & 0xFFFFu);
    }
  };
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float row0 = ds[j][2 * h], row1 = ds[j][2 * h + 1];  // key g + 8h, rows 2t and 2t + 1
      if (pairs) {
        const float got = __shfl_xor_sync(0xffffffffu, even ? row1 : row0, 4);
        const float lo = even ? row0 : got, hi = even ? got : row1;  // keys kv, kv + 1 of row q
        const int q = m0 + 8 * j + 2 * t + (even ? 0 : 1);
        const int kv = key0 + 8 * h + (g & ~1);
        if (q < p.T && kv < p.S) {
          const i64 at = head_at + q * p.bias_strides[2] + kv;
          if constexpr (BIAS == 1) {
            *reinterpret_cast<float2*>(x.dbias + at) = make_float2(lo, hi);
          } else {
            *reinterpret_cast<u32*>(reinterpret_cast<u16*>(x.dbias) + at) = pack2<BIAS == 3>(lo, hi);
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int q = m0 + 8 * j + 2 * t + e, kv = key0 + 8 * h + g;
          if (q < p.T && kv < p.S)
            store1(head_at + q * p.bias_strides[2] + kv * p.bias_strides[3], e ? row1 : row0);
        }
      }
    }
}

// sw128_desc(addr + offset, leading, 1024) from the low word of sw128_desc(addr, leading, 1024): the
// start address is bits 0-13 (>> 4) of that word, and every tile address plus offset stays below 2^18
// (the 227 KB of shared memory), so adding offset >> 4 never carries into the leading-offset field. One
// IADD a descriptor where sw128_desc of each address takes an add, a mask, a shift and an OR (PTX), for
// the 56 descriptors a warp builds a step at D = 128.
__device__ __forceinline__ u32 sw128_lo(u32 addr, u32 leading_bytes) {
  return ((addr & 0x3FFFF) >> 4) | ((leading_bytes >> 4) << 16);
}
__device__ __forceinline__ u64 sw128_at(u32 lo, u32 offset_bytes) {
  constexpr u32 HI = (1024 >> 4) | (1u << 30);  // stride 1024 bytes, SWIZZLE_128B
  return (static_cast<u64>(HI) << 32) | (lo + (offset_bytes >> 4));
}

// The warp's ballot and the index of the lowest set bit of x (nonzero), in PTX: nothing here depends on
// NVRTC declaring __ballot_sync or __ffs.
__device__ __forceinline__ u32 warp_ballot(bool p) {
  u32 bits;
  asm volatile("{ .reg .pred q; setp.ne.u32 q, %1, 0; vote.sync.ballot.b32 %0, q, 0xffffffff; }\n"
               : "=r"(bits)
               : "r"(static_cast<u32>(p)));
  return bits;
}
__device__ __forceinline__ int lowest_set_bit(u32 x) {
  u32 at;
  asm("bfind.u32 %0, %1;\n" : "=r"(at) : "r"(x & (0u - x)));
  return static_cast<int>(at);
}

// dV += Pᵀ·dO and dK += dSᵀ·Q, one k-step of 16 queries: N = D.
template <class C>
__device__ __forceinline__ void dkv_step(float (&d)[C::DT][4], const u32 (&a)[4], u64 b_desc) {
  if constexpr (C::D == 64) {
    wgmma_rs_n64<C::FP16>(d, a, b_desc);
  } else {
    wgmma_rs_n128<C::FP16>(d, a, b_desc);
  }
}

// Pᵀ over a warp's 16 keys × 64 queries where the tile needs no per-element rule (no bias, mask or
// modifier, and key_block_boundary false): one FFMA and one EX2 an element, the lse2 of the lane's two
// columns of each 8-query n-tile read as one float2 (the general weights_tile_ex tests `boundary` per
// element and reads each lse2 on its own: ~3 more instructions an element, 32 elements a lane a step).
// The same arithmetic as recompute_p, so the same P bit for bit.
template <int NT>
__device__ __forceinline__ void weights_all_visible(float (&st)[NT][4], float scale_log2, const float* lse2, int t) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 l = *reinterpret_cast<const float2*>(lse2 + j * 8 + 2 * t);
    st[j][0] = fast_exp2(fmaf(st[j][0], scale_log2, -l.x));
    st[j][1] = fast_exp2(fmaf(st[j][1], scale_log2, -l.y));
    st[j][2] = fast_exp2(fmaf(st[j][2], scale_log2, -l.x));
    st[j][3] = fast_exp2(fmaf(st[j][3], scale_log2, -l.y));
  }
}

// Pᵀ with score/mask modifiers over a tile wholly inside the lengths with no built-in per-element rule
// (key_block_boundary false, m0 + 64 ≤ t_len; no bias, no mask read byte by byte): the score modifier
// on every score with no test, then, where the tile is not FULL, one tile-uniform branch for the mask
// modifier. The general weights_tile_ex tests the lengths and the built-in masks per score, and those
// branches around each modifier call keep the compiler from loading a captured value the modifier
// reads at a tile-uniform index (ALiBi's slope) once a tile. The same arithmetic as weights_tile_ex.
template <int NT>
__device__ __forceinline__ void weights_mods_interior(float (&st)[NT][4], const FlashParams& p, int b, int head,
                                                      bool mask_mod, int key0, int m0, int lane, const float* lse2,
                                                      const FlashMods& m) {
  constexpr float LOG2E = 1.4426950408889634f;
  constexpr float LN2 = 0.6931471805599453f;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 l = *reinterpret_cast<const float2*>(lse2 + j * 8 + 2 * t);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float x;
      if constexpr (ATTNLAB_SCORE_MOD) {
        const int q = m0 + 8 * j + 2 * t + (c & 1), kv = key0 + g + 8 * (c >> 1);
        x = mod_score(m, st[j][c] * (p.scale_log2 * LN2), b, head, q, kv) * LOG2E;
      } else {
        x = st[j][c] * p.scale_log2;
      }
      st[j][c] = fast_exp2(x - ((c & 1) ? l.y : l.x));
    }
  }
  if (ATTNLAB_MASK_MOD && mask_mod) {
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int q = m0 + 8 * j + 2 * t + (c & 1), kv = key0 + g + 8 * (c >> 1);
        if (!mod_keeps(m, b, head, q, kv)) st[j][c] = 0.f;
      }
  }
}

// dSᵀ through the score modifier's chain rule from P itself, where the generated source can take the
// gradient from the modified score y (ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT: softcap's 1 − (y/c)², the
// derivative of its tanh from the tanh's output): P = 2^(log2e·y − lse2), so y = ln2·(log2 P + lse2), one
// MUFU.LG2 a score where recomputing the raw score takes a sixth product a step (Sᵀ = K·Qᵀ again) and
// the gradient a second tanh. Runs after ds_rows, while st still holds P in float32; a pair with dS = 0
// (P = 0: not visible, or underflowed) stays 0 without its logarithm. y's error is lse2's rounding (|lse2|·2^-24)
// plus lg2.approx's 2^-22, against tanh.approx.f32's 2^-11 in the recomputed form.
template <int NT>
__device__ __forceinline__ void ds_mods_from_p(float (&dst)[NT][4], const float (&pt)[NT][4], const float* lse2,
                                               int b, int head, int key0, int m0, int lane, const FlashMods& m) {
#if ATTNLAB_SCORE_MOD && ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT
  constexpr float LN2 = 0.6931471805599453f;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 l = *reinterpret_cast<const float2*>(lse2 + j * 8 + 2 * t);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (dst[j][c] == 0.f) continue;
      float log2p;
      asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(log2p) : "f"(pt[j][c]));
      const float y = (log2p + ((c & 1) ? l.y : l.x)) * LN2;
      const int q = m0 + 8 * j + 2 * t + (c & 1), kv = key0 + g + 8 * (c >> 1);
      dst[j][c] = attnlab_score_mod_backward_from_output(y, dst[j][c], b, head, q, kv, *m.c);
    }
  }
#else
  (void)dst, (void)pt, (void)lse2, (void)b, (void)head, (void)key0, (void)m0, (void)lane, (void)m;
#endif
}

// FLASH_BWD_STATS_EARLY (the loop without hooks): the lane's lse2 of n-tiles 0..3 read before the wait for
// Sᵀ, and its D of n-tiles 0..1 before the wait for dPᵀ, so that the first FFMAs of Pᵀ and dSᵀ find them in
// registers. ncu (H100, H=128): the first FFMA of Pᵀ waited on its LDS for 3.8% of the loop's samples, and Pᵀ's
// stretch (21% of a step) is longer than dPᵀ's product under it. More of them spills at D = 128 (all 8 lse2
// pairs 12 B, 4 D pairs 4 B; nvcc 13.0). The same arithmetic, the same bits.
template <int N>
__device__ __forceinline__ void stats_early(float2 (&pre)[N], const float* row, int t) {
#pragma unroll
  for (int j = 0; j < N; ++j) pre[j] = *reinterpret_cast<const float2*>(row + j * 8 + 2 * t);
}
template <int N>
__device__ __forceinline__ float2 stat_pair(const float2 (&pre)[N], const float* row, int j, int t) {
  return j < N ? pre[j < N ? j : 0] : *reinterpret_cast<const float2*>(row + j * 8 + 2 * t);
}
// weights_all_visible and ds_rows with the first N pairs from registers.
template <int N, int NT>
__device__ __forceinline__ void weights_all_visible_early(float (&st)[NT][4], float scale_log2, const float2 (&pre)[N],
                                                          const float* lse2, int t) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 l = stat_pair(pre, lse2, j, t);
    st[j][0] = fast_exp2(fmaf(st[j][0], scale_log2, -l.x));
    st[j][1] = fast_exp2(fmaf(st[j][1], scale_log2, -l.y));
    st[j][2] = fast_exp2(fmaf(st[j][2], scale_log2, -l.x));
    st[j][3] = fast_exp2(fmaf(st[j][3], scale_log2, -l.y));
  }
}
template <int N, int NT>
__device__ __forceinline__ void ds_rows_early(float (&dpt)[NT][4], const float (&pt)[NT][4], const float2 (&pre)[N],
                                              const float* dsum, int t) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 d = stat_pair(pre, dsum, j, t);
#pragma unroll
    for (int c = 0; c < 4; ++c)
      dpt[j][c] = pt[j][c] == 0.f ? 0.f : pt[j][c] * (dpt[j][c] - ((c & 1) ? d.y : d.x));
  }
}

// ds_tile's dSᵀ = Pᵀ ∘ (dPᵀ − D) with the D of the lane's two columns of each n-tile read as one float2.
template <int NT>
__device__ __forceinline__ void ds_rows(float (&dpt)[NT][4], const float (&pt)[NT][4], const float* dsum, int t) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const float2 d = *reinterpret_cast<const float2*>(dsum + j * 8 + 2 * t);
#pragma unroll
    for (int c = 0; c < 4; ++c)
      dpt[j][c] = pt[j][c] == 0.f ? 0.f : pt[j][c] * (dpt[j][c] - ((c & 1) ? d.y : d.x));
  }
}

// cp.async.wait_group has no memory clobber (flash/mma.cuh): this keeps the compiler from reading a
// tile this thread copied (the statistics' flags, the non-finite scan) before the wait.
__device__ __forceinline__ void compiler_fence() { asm volatile("" ::: "memory"); }

__device__ __forceinline__ u32 opaque_u32(u32 x) {
  asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
  return x;
}

// The semaphore of step s's (head, query block) (bwd_dq_order.cuh), for DET's ordered dQ adds.
template <class C>
__device__ __forceinline__ int* dq_semaphore_of_step(const FlashParams& p, const FlashBwdParams& x,
                                                     const KeyBlockWork& kb, int s) {
  const i64 bn = static_cast<i64>(kb.w.b) * p.N + kb.w.kv_head * p.group + s / kb.blocks;
  return dq_semaphore<C::D, C::BMQ>(p, x, bn, kb.mb_lo + s % kb.blocks);
}

// A step's query head and first query row.
struct StepAt {
  int n, m0;
};

// DET (with DQ, without a block mask): the dQ adds of each query block in bwd_dq_order.cuh's order of
// key blocks, bitwise repeatable.
template <class C, bool DQ, bool DET = false>
__device__ __forceinline__ void hopper_bwd_dkdv(const FlashParams& p, const FlashBwdParams& x,
                                                const FlashMods& m = FlashMods{}) {
  static_assert(DQ || !DET, "the order is the dQ adds'");
  static_assert(!(DET && ATTNLAB_BLOCK_MASK), "the order needs every step of the key block visited");
  constexpr int BNK = C::BNK, BMQ = C::BMQ;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_addr(smem_raw);
  const u32 base = (raw + 1023) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);  // the same bytes as generic pointers
  const u32 k_smem = base;
  const u32 v_smem = k_smem + C::KV_BYTES;
  const u32 stage0 = v_smem + C::KV_BYTES;
  const u32 ds0 = stage0 + C::STAGES * C::STAGE;
  const u32 dq0 = ds0 + C::DS_BUFFERS * C::DS_BYTES;                   // DQ only
  const u32 stats0 = ds0 + (DQ ? C::DS_BUFFERS * C::DS_BYTES + C::DQ_BYTES : 0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wg = warp / 4, t = lane & 3;  // warpgroup; the lane's C-fragment column role
  // The warpgroup as a value ptxas knows to be warp-uniform (a lane-0 shuffle): a wgmma under a branch
  // on threadIdx is otherwise treated as divergent and serialised (C7520).
  const int wg_uniform = __shfl_sync(0xffffffffu, wg, 0);

  const KeyBlockWork kb = key_block_work<BNK, BMQ>(p, DET && dq_order_descending(p),
                                                    C::BIAS != 0 && p.bias_strides[0] == 0 && p.B > 1);
  const TileWork& w = kb.w;
  const int kn0 = kb.kn0, blocks = kb.blocks;
  const int key0 = kn0 + warp * 16;    // first key of this warp: warpgroup wg's keys kn0 + 64·wg …
  const int steps = blocks * p.group;  // (head, query block) pairs, head-major
  // Step s's query head and first query row; with a block mask its tile's kind, and the walk skips
  // the EMPTY steps (the loads two steps ahead go from one non-empty step to the next): step_after(s)
  // is s + 1 without one. The iterations, not the steps, pick the stage and dS buffers.
  auto head_of = [&](int s) { return w.kv_head * p.group + s / blocks; };
  auto row_of = [&](int s) { return (kb.mb_lo + s % blocks) * BMQ; };
  auto kind_of = [&](int s) {
    const int m0 = row_of(s);
    return tile_kind(m, w.b, head_of(s), m0, imin(m0 + BMQ, w.t_len) - 1, kn0, imin(kn0 + BNK, w.s_len) - 1);
  };
  // With a block mask the block first classifies its steps together, a step a thread, into a bit a step
  // in the 512 bytes after the statistics (HopperBwdConfig::STEP_BITS, up to 4096 steps): each thread
  // walking every step itself (tile_kind, four integer divisions by run-time block sizes) was ~25 k
  // instructions a thread a key block by a count of the code, and a document mask's key block has
  // ~9 steps of work among its 128 (8 packed documents; the 8 equal documents ran only 1.38× faster
  // than dense causal on an H100). Past 4096 steps each thread walks, the kinds of 8 steps loaded at once.
  u32* step_bits = reinterpret_cast<u32*>(smem + (stats0 + C::STAGES * C::STATS - base));
  const bool bitmap = ATTNLAB_BLOCK_MASK && steps <= C::STEP_BITS;
  // NO_HOOKS: no bias, mask, modifier or block mask. Those modules sit at 255 registers with spills of
  // their own (the section on them in docs/internals/backward.md), and the two shortcuts below (WALK, and
  // whole tiles' loads) moved their spills by 4–60 B either way (nvcc 13.0, D=128), so they keep the
  // general code.
  // FLASH_BWD_LEAN (the default; ATTNLAB_FLASH_BWD_LEAN=0 turns it off) turns them on.
  constexpr bool NO_HOOKS =
      FLASH_BWD_LEAN != 0 && C::BIAS == 0 && !C::MASK && !ATTNLAB_MODIFIERS && !ATTNLAB_BLOCK_MASK;
  auto load_kv = [&] {
    load_kv_tiles<BNK>(k_smem, v_smem, p, w, kn0, [](u32 dst, const u16* src, i64 stride, int rows, int cols) {
      load_tile_sw128<BNK, C::D, C::THREADS, NO_HOOKS>(dst, src, stride, rows, cols);
    });
  };
  // With a block mask K and V (64 KB at D = 128) are copied before the classification, whose tile_kind
  // reads of the kinds (and its barrier) then wait under the copies instead of before them: the 8 equal
  // documents leave ~9 steps of work to a key block, against which a block's fixed costs weigh.
  const bool kv_early = ATTNLAB_BLOCK_MASK && steps > 0;
  if (kv_early) load_kv();
  if constexpr (ATTNLAB_BLOCK_MASK) {
    if (bitmap) {
      for (int word = warp; word * 32 < steps; word += C::NW) {
        const int s = word * 32 + lane;
        const u32 bits = warp_ballot(s < steps && kind_of(s) != ATTNLAB_TILE_EMPTY);
        if (lane == 0) step_bits[word] = bits;
      }
      __syncthreads();
    }
  }
  auto step_after = [&](int s) {
    ++s;
    if constexpr (ATTNLAB_BLOCK_MASK) {
      if (bitmap) {
        while (s < steps) {
          const u32 rest = step_bits[s >> 5] >> (s & 31);
          if (rest != 0u) return imin(s + lowest_set_bit(rest), steps);
          s = (s | 31) + 1;
        }
        return steps;
      }
      for (; s < steps; s += 8) {
        int kinds[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) kinds[u] = s + u < steps ? kind_of(s + u) : ATTNLAB_TILE_FULL;
#pragma unroll
        for (int u = 0; u < 8; ++u)
          if (kinds[u] != ATTNLAB_TILE_EMPTY) return imin(s + u, steps);
      }
      s = steps;
    }
    return s;
  };
  const int first = step_after(-1);
  // The (head, row) of the step after the one at `at` where WALK: the walk takes every step,
  // head-major, so it is one increment (the query block wrapping to mb_lo at the head's end), where
  // head_of and row_of divide by the run-time `blocks`, ~20 instructions for each step's loads and again
  // for the step itself.
  constexpr bool WALK = NO_HOOKS;
  auto step_at = [&](int s) { return StepAt{head_of(s), row_of(s)}; };
  const int m_end = (kb.mb_lo + blocks) * BMQ;
  auto at_after = [&](StepAt at) {
    const bool wrap = at.m0 + BMQ == m_end;  // selects, no branch
    return StepAt{at.n + (wrap ? 1 : 0), wrap ? kb.mb_lo * BMQ : at.m0 + BMQ};
  };

  float dk[C::DT][4], dv[C::DT][4];
#pragma unroll
  for (int d = 0; d < C::DT; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[d][c] = dv[d][c] = 0.f;

  if (first < steps) {
    auto stage_of = [&](int i) { return stage0 + static_cast<u32>(i % C::STAGES) * C::STAGE; };
    auto stats_of = [&](int i) { return stats0 + static_cast<u32>(i % C::STAGES) * C::STATS; };
    // The tiles of step s (at `at` where WALK) into the stage of iteration i.
    auto load_step = [&](int i, int s, StepAt at) {
      const u32 dst = stage_of(i);
      if constexpr (WALK) {
        load_query_rows<BMQ, C::THREADS>(dst, dst + C::Q_BYTES, stats_of(i), p, x, w, at.n, at.m0,
                                         [](u32 to, const u16* src, i64 stride, int rows, int cols) {
                                           load_tile_sw128<BMQ, C::D, C::THREADS, true>(to, src, stride, rows, cols);
                                         });
      } else {
        load_query_step<BMQ, C::THREADS>(dst, dst + C::Q_BYTES, stats_of(i), p, x, kb, s,
                                         [](u32 to, const u16* src, i64 stride, int rows, int cols) {
                                           load_tile_sw128<BMQ, C::D, C::THREADS>(to, src, stride, rows, cols);
                                         });
      }
    };
    // Whether the statistics of step s (iteration i) flag a non-finite Q or dO row (bwd_common.cuh):
    // only then are its Q and dO tiles cleaned and dV takes add_non_finite_do. Needs this thread's
    // copies landed.
    auto flagged = [&](int i, int s) {
      return s < steps && stats_flag_non_finite<BMQ>(smem + (stats_of(i) - base));
    };
    // The slow path of a flagged step: each thread zeroes the non-finite elements it copied, published
    // by one more barrier (uniform: the flag is the block's OR).
    auto clean_step = [&](int i) {
      zero_non_finite<BMQ, C::D, C::THREADS, C::FP16, true>(smem + (stage_of(i) - base));
      zero_non_finite<BMQ, C::D, C::THREADS, C::FP16, true>(smem + (stage_of(i) - base) + C::Q_BYTES);
      fence_proxy_async();
      __syncthreads();
    };
    // This warpgroup's 64 key rows inside each K (V) box: the A operand of Sᵀ (dPᵀ).
    const u32 k_rows = k_smem + wg * 64 * 128;
    const u32 v_rows = v_smem + wg * 64 * 128;
    float st[C::NT][4], dpt[C::NT][4];
    // Sᵀ of the stage of iteration i into st, one commit group.
    auto issue_s = [&](int i) {
      const u32 q_tile = stage_of(i);
      const u32 k_lo = sw128_lo(opaque_u32(k_rows), 16), q_lo = sw128_lo(q_tile, 16);
#pragma unroll
      for (int k = 0; k < C::D / 16; ++k) {
        const u32 col = (k % 4) * 32, box = k / 4;
        wgmma_ss_n64<C::FP16>(st, sw128_at(k_lo, box * C::KV_BOX + col), sw128_at(q_lo, box * C::Q_BOX + col), k > 0);
      }
      wgmma_commit();
    };
    // Sᵀ and dPᵀ of iteration i as two commit groups, so that Pᵀ can start when Sᵀ is done.
    auto issue_sdp = [&](int i) {
      const u32 do_tile = stage_of(i) + C::Q_BYTES;
      const u32 v_lo = sw128_lo(opaque_u32(v_rows), 16), do_lo = sw128_lo(do_tile, 16);
      wgmma_fence();
      issue_s(i);
#pragma unroll
      for (int k = 0; k < C::D / 16; ++k) {
        const u32 col = (k % 4) * 32, box = k / 4;
        wgmma_ss_n64<C::FP16>(dpt, sw128_at(v_lo, box * C::KV_BOX + col), sw128_at(do_lo, box * C::Q_BOX + col), k > 0);
      }
      wgmma_commit();
    };

    if (!kv_early) load_kv();
    int s1 = step_after(first);  // the step of the next iteration
    StepAt at = WALK ? step_at(first) : StepAt{0, 0};
    load_step(0, first, at);
    cp_async_commit();
    if (s1 < steps) load_step(1, s1, at_after(at));
    cp_async_commit();
    cp_async_wait<1>();  // K, V and step 0 (this thread's copies)
    compiler_fence();
    zero_non_finite<BNK, C::D, C::THREADS, C::FP16, true>(smem);  // K, once per block
    bool dirty = flagged(0, first);
    fence_proxy_async();
    dirty = __syncthreads_or(dirty);
    if (dirty) clean_step(0);

    int s = first;
    [[maybe_unused]] StepAt before = at;  // DET and WALK: the step before s
    // DET's semaphore of the (head, query block) at `a` (bwd_dq_order.cuh).
    auto dq_semaphore_at = [&](StepAt a) {
      return dq_semaphore<C::D, BMQ>(p, x, static_cast<i64>(w.b) * p.N + a.n, a.m0 / BMQ);
    };
    for (int i = 0; s < steps; ++i) {
      const int s2 = step_after(s1);  // the step whose tiles this iteration loads
      if constexpr (C::BIAS != 0 || C::MASK) {
        if (s1 < steps) {
          constexpr int ELEM = C::BIAS == 1 ? 4 : 2;
          if constexpr (C::BIAS != 0)
            prefetch_operand_rows<BMQ, BNK, ELEM, C::THREADS>(p.bias, p.bias_strides, w, p.S, head_of(s1), row_of(s1), kn0);
          if constexpr (C::MASK)
            prefetch_operand_rows<BMQ, BNK, 1, C::THREADS, true>(p.mask, p.mask_strides, w, p.S, head_of(s1), row_of(s1), kn0);
        }
      }
      const int n = WALK ? at.n : head_of(s);
      const int m0 = WALK ? at.m0 : row_of(s);
      const int kind = ATTNLAB_MODIFIERS ? kind_of(s) : ATTNLAB_TILE_FULL;
      const u32 q_tile = stage_of(i);
      const u32 do_tile = q_tile + C::Q_BYTES;
      const float* lse2 = reinterpret_cast<const float*>(smem + (stats_of(i) - base));
      const float* dsum = lse2 + BMQ;
      float(&st3)[1][C::NT][4] = reinterpret_cast<float(&)[1][C::NT][4]>(st);
      float(&dpt3)[1][C::NT][4] = reinterpret_cast<float(&)[1][C::NT][4]>(dpt);

      issue_sdp(i);
      constexpr bool EARLY = NO_HOOKS && FLASH_BWD_STATS_EARLY != 0;
      float2 lse2_early[4], dsum_early[2];
      if constexpr (EARLY) stats_early(lse2_early, lse2, t);
      // The mask's rows load while Sᵀ multiplies, packed to one word a lane at once.
      u32 mask_word = 0;
      if constexpr (C::MASK_ROWS) {
        u128 rows[2];
        load_mask_rows(rows, p, w, n, m0, key0, lane);
        mask_word = nonzero_bytes16(rows[0]) | nonzero_bytes16(rows[1]) << 16;
      }
      wgmma_wait<1>();  // Sᵀ(s); dPᵀ(s) may still run
      fence_accumulators(st);
      // P; with a bias, a boolean mask or modifiers the forward's logit and masks (bwd_common.cuh).
      const bool boundary = key_block_boundary<BNK, BMQ>(p, kb, m0);
      // The interior path also serves a mask read as rows (applied below) and a mask modifier's FULL tiles.
      constexpr bool PLAIN = C::BIAS == 0 && (!C::MASK || C::MASK_ROWS) && !ATTNLAB_SCORE_MOD;
      constexpr bool MODS = C::BIAS == 0 && (!C::MASK || C::MASK_ROWS) && (ATTNLAB_SCORE_MOD || ATTNLAB_MASK_MOD);
      if (PLAIN && !boundary && (!ATTNLAB_MASK_MOD || kind == ATTNLAB_TILE_FULL)) {
        if constexpr (EARLY) {
          weights_all_visible_early(st, p.scale_log2, lse2_early, lse2, t);
        } else {
          weights_all_visible(st, p.scale_log2, lse2, t);
        }
      } else if (MODS && !boundary && m0 + BMQ <= w.t_len) {
        weights_mods_interior(st, p, w.b, n, kind != ATTNLAB_TILE_FULL, key0, m0, lane, lse2, m);
      } else {
        weights_tile_ex<true, C::BIAS, C::MASK && !C::MASK_ROWS>(
            st3, p, w, n, boundary, kind, key0, m0, lane, [&](int, int j, int c) { return lse2[j * 8 + 2 * t + (c & 1)]; },
            m);
      }
      if constexpr (C::MASK_ROWS) apply_mask_rows(st, mask_word, lane);
      if (dirty) {
        const i64 oa = w.b * p.o_strides[0] + n * p.o_strides[2] + m0 * p.o_strides[1];
        add_non_finite_do<C::NT, C::DT, C::FP16>(dv, st, x.d_o + oa, p.o_strides[1], w.t_len - m0, p.Hv, lane);
      }
      u32 pa[4][4], da[4][4];
      sm90_a_fragments<C::FP16>(pa, st);
      fence_accumulators(dv);
      pin_fragments(pa);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BMQ / 16; ++kk) dkv_step<C>(dv, pa[kk], sw128_at(sw128_lo(do_tile, C::Q_BOX), kk * 2048));
      wgmma_commit();

      if constexpr (EARLY) stats_early(dsum_early, dsum, t);
      wgmma_wait<1>();  // dPᵀ(s); dV(s) may still run
      fence_accumulators(dpt);
      if constexpr (EARLY) {
        ds_rows_early(dpt, st, dsum_early, dsum, t);
      } else {
        ds_rows(dpt, st, dsum, t);
      }
      if constexpr (ATTNLAB_SCORE_MOD || C::BIAS != 0) {
        // dS through the score modifier's chain rule, and dBias. P lives on in pa (dV's operand), so
        // st takes Sᵀ = K·Qᵀ again where the modifier's gradient reads the raw score: one more product
        // of the five, waited for at once (dV(s) with it); holding the raw scores would take 32
        // registers a lane the D = 128 loop does not have.
        // Where the generated gradient takes the modified score (ds_mods_from_p), P gives it instead.
        // FLASH_BWD_GRAD_FROM_OUTPUT: asked for by the host (ATTNLAB_FLASH_BWD_SCORE_GRAD=output).
        constexpr bool FROM_P = ATTNLAB_SCORE_MOD && ATTNLAB_SCORE_MOD_NEEDS_SCORE &&
                                ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT && FLASH_BWD_GRAD_FROM_OUTPUT;
        if constexpr (ATTNLAB_SCORE_MOD && ATTNLAB_SCORE_MOD_NEEDS_SCORE && !FROM_P) {
          wgmma_fence();
          issue_s(i);
          wgmma_wait<0>();
          fence_accumulators(st);
          fence_accumulators(dv);
          pin_fragments(pa);
        }
        if constexpr (FROM_P) {
          ds_mods_from_p(dpt, st, lse2, w.b, n, key0, m0, lane, m);
        } else if constexpr (ATTNLAB_SCORE_MOD) {
          ds_mods_tile<true, C::BIAS, false>(dpt3, st3, p, x, w, n, key0, m0, lane, m);
        }
        if constexpr (C::BIAS != 0) {
          if constexpr (C::DBIAS_STORE) {
            dbias_store_tile<C::BIAS>(dpt, p, x, w, n, key0, m0, lane);
          } else {
            dbias_add_tile(dpt, p, x, w, n, key0, m0, lane);
          }
        }
      }
      sm90_a_fragments<C::FP16>(da, dpt);
      pin_fragments(da);
      const u32 ds_smem = ds0 + static_cast<u32>(i % C::DS_BUFFERS) * C::DS_BYTES;
      if constexpr (DQ) {
        // dS (query q, key kl of this warpgroup's 64) at box wg, row q, column kl, from the dSᵀ A
        // fragments: stmatrix .trans stores each 8 × 8 (keys × queries) block as queries × keys. Lane L
        // gives the row address of block L / 8 = (key half h, query n-tile 2kk + i / 2): row r = L % 8.
        const int blk = lane >> 3, r = lane & 7;
        const u32 ds_row = ds_smem + wg * C::DS_BOX + r * 128 + (((2 * (warp % 4) + (blk & 1)) ^ r) << 4);
#pragma unroll
        for (int kk = 0; kk < BMQ / 16; ++kk) stmatrix_x4_trans(ds_row + (16 * kk + 8 * (blk >> 1)) * 128, da[kk]);
      }
      // The step's one barrier: dS(s) complete (both warpgroups' keys), step s + 1's tiles landed, and
      // every warpgroup done with step s − 1 (its stage takes step s + 2's loads below).
      // The staging of dQ(s − 1) is free once its bulk reduces have read it (each issuing lane's wait,
      // published by the barrier); they had all of this step's products to run.
      // DET: the adds of step s − 1 complete (written, not only read), so that the barrier orders them
      // before the release of that query block to the next key block.
      if (DQ && lane == 0) {
        if constexpr (DET) {
          bulk_wait<0>();
          dq_adds_done();
        } else {
          bulk_wait_read<0>();
        }
      }
      cp_async_wait<0>();
      compiler_fence();
      bool dirty_next = flagged(i + 1, s1);
      fence_proxy_async();
      dirty_next = __syncthreads_or(dirty_next);
      if constexpr (DET) {
        // Without a block mask the steps are the iterations: step s − 1 (at `before`) came before.
        if (threadIdx.x == 0 && s > 0)
          dq_pass_turn(WALK ? dq_semaphore_at(before) : dq_semaphore_of_step<C>(p, x, kb, s - 1), dq_place<BNK>(p, kb));
      }

      // dK(s), then step s + 2's loads behind the products.
      auto issue_dk_and_loads = [&] {
#pragma unroll
        for (int kk = 0; kk < BMQ / 16; ++kk) dkv_step<C>(dk, da[kk], sw128_at(sw128_lo(q_tile, C::Q_BOX), kk * 2048));
        wgmma_commit();
        // Worked out here, not at the top of the step: only `at` lives through the step (the 255-register
        // loop spilled 4 bytes keeping the next two steps' as well).
        if (s2 < steps) load_step(i + 2, s2, at_after(at_after(at)));
        cp_async_commit();
      };
      // This warpgroup's 64-column box of dQ: both at D = 128, warpgroup 0's at D = 64. Each path is
      // straight-line from its first wgmma to its wait, which keeps ptxas from serialising them.
      if constexpr (DQ) {
        float dq[C::DQ_NT][4];
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BNK / 16; ++k) {
          // K's columns [DQ_W·wg, DQ_W·wg + DQ_W): box wg at D = 128, bytes 64·wg of each 128-byte row at D = 64.
          const u32 k_cols = C::D == 128 ? wg * C::KV_BOX : wg * 64;
          const u64 a = sw128_at(sw128_lo(ds_smem, 16), (k / 4) * C::DS_BOX + (k % 4) * 32);
          const u64 b = sw128_at(sw128_lo(k_smem + k_cols, C::KV_BOX), k * 2048);
          if constexpr (C::D == 128) {
            wgmma_ss_n64_tb<C::FP16>(dq, a, b, k > 0);
          } else {
            wgmma_ss_n32_tb<C::FP16>(dq, a, b, k > 0);
          }
        }
        wgmma_commit();
        issue_dk_and_loads();
        wgmma_wait<1>();  // dV(s) and dQ(s); the reductions run while dK(s) multiplies
        fence_accumulators(dq);
        fence_accumulators(dv);
        pin_fragments(pa);
        // This warp's 16 rows of half wg of dQ(s) into the staging, then its lane 0 adds the run (4 KiB
        // at D = 128) to the workspace with one bulk reduce (cp.reduce.async.bulk .add.f32, the TMA
        // unit's float32 adds): 1 instruction a warp where per-element reductions take 2·DQ_NT a lane.
        const u32 staging = dq0 + wg_uniform * C::DQ_BOX_BYTES + (warp % 4) * C::DQ_WARP_BYTES;
        store_dq_box<C::DQ_W>(staging, dq, lane);
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
          const i64 bn = static_cast<i64>(w.b) * p.N + n;
          if constexpr (DET) {
            const int place = dq_place<BNK>(p, kb);
            if (!dq_first_adder<BNK, BMQ>(p, kb, place, m0 / BMQ))
              dq_wait_turn(dq_semaphore<C::D, BMQ>(p, x, bn, m0 / BMQ), place);
          }
          bulk_reduce_add_f32(x.dq_accum + hopper_dq_box_offset<C::DQ_W>(bn, wg_uniform, x.t_pad, m0 + 16 * (warp % 4)),
                              staging, C::DQ_WARP_BYTES);
          bulk_commit();
        }
        wgmma_wait<0>();
      } else {
        wgmma_fence();
        issue_dk_and_loads();
        wgmma_wait<0>();
      }
      fence_accumulators(dv);
      fence_accumulators(dk);
      pin_fragments(pa);
      pin_fragments(da);
      if (dirty_next) clean_step(i + 1);
      dirty = dirty_next;
      if constexpr (WALK) {
        if constexpr (DET) before = at;
        at = at_after(at);
      }
      s = s1;
      s1 = s2;
    }
  } else if (kv_early) {
    // Every step EMPTY: the early K and V copies land before the block's shared memory goes.
    cp_async_commit();
    cp_async_wait<0>();
  }
  // The last bulk reduces complete before the block's shared memory goes.
  if (DQ && lane == 0) bulk_wait<0>();
  if constexpr (DET) {
    if (lane == 0) dq_adds_done();
    __syncthreads();
    if (threadIdx.x == 0 && steps > 0)
      dq_pass_turn(dq_semaphore_of_step<C>(p, x, kb, steps - 1), dq_place<BNK>(p, kb));
  }
  // Every key row of the block is written, zeros where no query sees it (padding included).
  u16* dk_out = x.dk + w.b * p.k_strides[0] + w.kv_head * p.k_strides[2];
  u16* dv_out = x.dv + w.b * p.v_strides[0] + w.kv_head * p.v_strides[2];
  const float(&dk3)[1][C::DT][4] = reinterpret_cast<const float(&)[1][C::DT][4]>(dk);
  const float(&dv3)[1][C::DT][4] = reinterpret_cast<const float(&)[1][C::DT][4]>(dv);
  store_tile<1, C::DT, C::FP16>(dk_out, p.k_strides[1], dk3, x.scale, key0, p.S, p.H, lane);
  store_tile<1, C::DT, C::FP16>(dv_out, p.v_strides[1], dv3, 1.f, key0, p.S, p.Hv, lane);
}
