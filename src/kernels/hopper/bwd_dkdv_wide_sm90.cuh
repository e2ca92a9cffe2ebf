// The backward's dK/dV loop on Hopper (sm_90a) past a head dim of 128: D = 192 and 256 (H, Hv padded to
// them). The D ≤ 128 loop (bwd_dkdv_sm90.cuh) gives each warpgroup 64 keys × the whole head dim of dK and
// dV, D/2 float32 registers a lane each: 256 at D = 256 before anything else, past the 255 a thread may
// have. Here (FlashAttention-3's division for these head dims, docs/internals/backward.md "Head dims past
// 128"): a block of 64 keys, both warpgroups over all of them, each owning half of the columns of dK, dV
// and dQ — D/4 registers a lane each for dK and dV.
//
// Per step (64 query rows), warpgroup wg:
//   Sᵀ  = K·Q_wgᵀ     m64 (the 64 keys) × n32 (queries 32·wg …) × k D, both K-major
//   dPᵀ = V·dO_wgᵀ    the same with V and dO
//   Pᵀ, dSᵀ           elementwise as in the D ≤ 128 loop (keys are the accumulator rows), then stored to
//                     shared memory as keys × queries (stmatrix): each warpgroup writes its 32 queries
//   dV += Pᵀ·dO       m64 (keys) × n (wg's columns) × k 64 queries: A = Pᵀ from shared memory (K-major),
//   dK += dSᵀ·Q       B = dO / Q MN-major; the same with dSᵀ and Q
//   dQ  = dS·K        m64 (queries) × n (wg's columns) × k 64 keys: A = the dSᵀ tile read MN-major
//                     (imm-trans-a: its rows are keys, queries contiguous), B = K MN-major; in two passes
//                     of the warpgroup's columns, each staged in float32 and bulk-added a warp's 16 rows
//                     at a time (bwd_dq_accum.cuh's adds; the parts' layout below)
// Each warpgroup does half of every product, so their tensor work is equal.
//
// A warpgroup's columns: D = 256, columns [128·wg, 128·wg + 128) — two 64-column boxes, one n128 wgmma a
// k-step; D = 192, a 64-column box (0 or 2) and half of box 1 (columns 64 + 32·wg …, n32 at a 64-byte
// offset inside the swizzled row, as the D = 64 loop's dQ reads K): 96 columns, n64 + n32.
//
// Registers a lane: dK and dV D/4 each, Sᵀ and dPᵀ 16 each, dQ of one pass ≤ 32. ptxas (nvcc 13.0, sm_90a,
// bf16 and fp16, no spills): 216 at D = 256 (PAIR 241, HALVES 244, deterministic 222), 196 at D = 192 (206,
// 228, 202).
//
// Schedule: lock-step, two barriers a step. The loads of step s + 1 are issued at the top of step s into
// the other of the two Q/dO stages (free: every product of step s − 1 retired and its dQ adds read their
// staging before the barrier that ended it). Sᵀ and dPᵀ as two commit groups (Pᵀ starts when Sᵀ lands);
// Pᵀ and dSᵀ to shared memory; barrier (both warpgroups' 32 queries of P and dS); dV, dQ's first pass,
// then dK as three groups, dQ's first pass staged and added while dK multiplies, the second pass issued
// and added; the step's end barrier. The tensor cores idle through the elementwise work: the D ≤ 128
// loop's one-barrier overlap is the next step (docs/internals/backward.md).
//
// Shared memory (bf16 or fp16): K | V (D/64 boxes of 64 rows × 128 B each) | 2 stages of (Q | dO) | Pᵀ |
// dSᵀ (8 KiB each) | the dQ staging (D = 192: 16 KiB a warpgroup; D = 256: none, each warpgroup stages
// into its own 16 KiB half of the current stage's dO once its dV has read it) | 2 × (lse2, D) 512 B.
// D = 192: 1 + 48 + 96 + 16 + 32 + 1 = 194 KiB; D = 256: 1 + 64 + 128 + 16 + 1 = 210 KiB (of 227).
//
// The dQ workspace: the D ≤ 128 layout generalised to parts of any width W (a multiple of 32): for head
// bn its t_pad × D floats hold, part after part in column order, each part's t_pad rows of W floats,
// 16-byte chunks of row t at c ^ (t % 8) (hopper_dq_in_box<W>). D ≤ 128's two halves are the case
// W = D/2, so prep's zeroing (every float of the head) serves all; the parts here are 64 wide at D = 256
// and 64 | 32 | 32 | 64 at D = 192 (hopper_wide_dq_part).
//
// Hooks: causal (both alignments), windows, padding lengths, GQA/MQA (dK, dV summed over the group in
// registers), H ≠ Hv (zero-filled columns), NaN rules (as bwd_dkdv_sm90.cuh: non-finite Q, K, dO zeroed
// after their loads, dO's added back into dV from P), deterministic mode (the ordered dQ adds of
// bwd_dq_order.cuh). No bias, boolean mask, modifiers or block mask: the host refuses them here
// (backward-variant.ts), never runs them wrong.
#pragma once
#include "hopper/bwd_dkdv_sm90.cuh"

// PAIR (FLASH_BWD_WIDE_PAIR): both dQ passes in flight at once — issued as dV | dQ's first | dK | dQ's
// second, the first staged while dK and the second multiply — each with a staging of its own (D = 256:
// the second in the warpgroup's half of the stage's Q once dK has read it; D = 192: 8 KiB more a warpgroup).
// HALVES (FLASH_BWD_WIDE_HALVES, with PAIR): each warpgroup issues dV and dK over its own 32 queries as soon
// as its own Pᵀ and dSᵀ are in shared memory (a barrier of its 128 threads), so that they multiply while dSᵀ
// is computed and the block barrier waits; the other warpgroup's 32 queries follow that barrier.
template <int D_, bool FP16_, bool PAIR_ = false, bool HALVES_ = false>
struct HopperBwdWideConfig {
  static constexpr int D = D_, BNK = 64, BMQ = 64, THREADS = 256, NW = 8;
  static constexpr bool FP16 = FP16_, PAIR = PAIR_ || HALVES_, HALVES = HALVES_;
  static constexpr int BOXES = D / 64;
  static constexpr u32 BOX = 64 * 128;  // 64 rows × 64 columns of 16-bit elements, 128-byte swizzle
  static constexpr u32 KV_BYTES = BOXES * BOX, Q_BYTES = BOXES * BOX, STAGE = 2 * Q_BYTES;
  static constexpr int STAGES = 2;
  static constexpr u32 STATS = 2 * BMQ * 4;  // lse2 | D of a stage
  static constexpr u32 PS_BYTES = BOX;       // Pᵀ or dSᵀ: 64 keys × 64 queries
  // A warpgroup's columns: segment A (WA wide, box-aligned) and segment B (WB wide, D = 192 only).
  static constexpr int WA = D == 256 ? 128 : 64, WB = D == 256 ? 0 : 32;
  // Segment B's accumulator fragments, 1 where it has none (a zero-length array is ill-formed). A named
  // constant: NVRTC 13 fails to substitute `C::WB ? C::WB / 8 : 1` written in a template's parameter
  // types at D = 192 ("no instance of function template matches") where nvcc 13.0 accepts it.
  static constexpr int WB_FRAGS = WB == 0 ? 1 : WB / 8;
  // dQ passes: segment A's first 64 columns, then the rest (A's second box at D = 256, B at 192).
  static constexpr int Q0 = 64, Q1 = D == 256 ? 64 : 32;
  static constexpr bool STAGING_IN_DO = D == 256;
  static constexpr u32 STAGING_WG = 64 * 64 * 4;  // a warpgroup's 64 rows × 64 columns of float32
  static constexpr u32 STAGING_WG1 = PAIR && !STAGING_IN_DO ? 64 * Q1 * 4 : 0;  // D = 192's second pass
  static constexpr u32 STAGING = STAGING_IN_DO ? 0 : 2 * (STAGING_WG + STAGING_WG1);
  static_assert(D == 192 || D == 256, "the head dims past 128");
};

template <class C>
constexpr unsigned hopper_bwd_wide_smem_bytes() {
  return 1024 + 2 * C::KV_BYTES + C::STAGES * C::STAGE + 2 * C::PS_BYTES + C::STAGING + C::STAGES * C::STATS;
}
static_assert(hopper_bwd_wide_smem_bytes<HopperBwdWideConfig<256, false>>() <= 227 * 1024, "an H100/H200 block");
static_assert(hopper_bwd_wide_smem_bytes<HopperBwdWideConfig<192, false>>() <= 227 * 1024, "an H100/H200 block");
static_assert(hopper_bwd_wide_smem_bytes<HopperBwdWideConfig<192, false, true>>() <= 227 * 1024, "an H100/H200 block");

// Byte offset of column c (a multiple of 32) inside a tile of 64-column boxes.
template <class C>
__device__ __forceinline__ u32 wide_col_bytes(int c) {
  return static_cast<u32>(c / 64) * C::BOX + static_cast<u32>(c % 64) * 2;
}

// The dQ workspace part holding column h of a D-column head dim: its first column and width.
template <int D>
__device__ __forceinline__ void hopper_wide_dq_part(int h, int& c0, int& w) {
  if (D == 256 || h < 64 || h >= 128) {
    c0 = h & ~63;
    w = 64;
  } else {
    c0 = h & ~31;
    w = 32;
  }
}
// Offset in floats of row m0 of the part at columns [c0, c0 + W) of head bn.
template <int D, int W>
__device__ __forceinline__ i64 hopper_wide_dq_offset(i64 bn, int c0, int t_pad, int m0) {
  return (bn * t_pad) * D + static_cast<i64>(c0) * t_pad + static_cast<i64>(m0) * W;
}

// dQ = scale · workspace from the parts' layout, 8 elements a thread (two chunks of one part row).
template <int D, bool FP16>
__device__ __forceinline__ void hopper_bwd_wide_dq_convert(const FlashParams& p, const FlashBwdParams& x) {
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
    int c0, w;
    hopper_wide_dq_part<D>(h, c0, w);
    const float* part = x.dq_accum + (bn * x.t_pad) * D + static_cast<i64>(c0) * x.t_pad;
    const int lo = w == 64 ? hopper_dq_in_box<64>(t, h - c0) : hopper_dq_in_box<32>(t, h - c0);
    const int hi = w == 64 ? hopper_dq_in_box<64>(t, h - c0 + 4) : hopper_dq_in_box<32>(t, h - c0 + 4);
    const F32x4 a = *reinterpret_cast<const F32x4*>(part + lo);
    const F32x4 b = *reinterpret_cast<const F32x4*>(part + hi);
    const float s = x.scale;
    reinterpret_cast<u128*>(x.dq)[c] = u128{pack2<FP16>(a.x * s, a.y * s), pack2<FP16>(a.z * s, a.w * s),
                                            pack2<FP16>(b.x * s, b.y * s), pack2<FP16>(b.z * s, b.w * s)};
  }
}

// Four 8×8 b16 matrices stored as they are (ldmatrix's inverse): lanes 8i … 8i + 7 give the row addresses
// of matrix i; each lane's r[i] is (row g, columns 2t, 2t + 1) of matrix i.
__device__ __forceinline__ void stmatrix_x4(u32 addr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// A warpgroup's m64n32 accumulator tile (keys × its 32 queries) into a 64 × 64 keys × queries tile, 128-byte
// swizzled, K-major for the dV/dK A operand. Lane L addresses row (key) 16·w + 8·(L/8 % 2) + L % 8 of
// matrix L/8, whose 8 queries are chunk 4·wg + 2·kk + L/16.
template <bool FP16>
__device__ __forceinline__ void store_keys_by_queries(u32 tile, const float (&acc)[4][4], int warp, int wg, int lane) {
  u32 a[2][4];
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    a[kk][0] = pack2<FP16>(acc[2 * kk][0], acc[2 * kk][1]);
    a[kk][1] = pack2<FP16>(acc[2 * kk][2], acc[2 * kk][3]);
    a[kk][2] = pack2<FP16>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[kk][3] = pack2<FP16>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  }
  const int mi = lane >> 3, r = lane & 7;
  const int key = 16 * (warp % 4) + 8 * (mi & 1) + r;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const int chunk = 4 * wg + 2 * kk + (mi >> 1);
    stmatrix_x4(tile + key * 128 + ((chunk ^ r) << 4), a[kk]);
  }
}

// dV += Pᵀ·dO (or dK += dSᵀ·Q) over a warpgroup's columns: A = the keys × queries tile at `a_tile`, B = the
// stage's dO (Q) at `b_tile`, STEPS k-steps of 16 queries from k-step kk0 (all 4, or a warpgroup's 2 with
// HALVES). Segment B only at D = 192.
template <class C, int STEPS = 4>
__device__ __forceinline__ void wide_dkv(float (&acc_a)[C::WA / 8][4], float (&acc_b)[C::WB_FRAGS][4],
                                         u32 a_tile, u32 b_tile, int col_a, int col_b, int kk0 = 0) {
  const u32 a_lo = sw128_lo(a_tile, 16);
  const u32 ba_lo = sw128_lo(b_tile + wide_col_bytes<C>(col_a), C::BOX);
  const u32 bb_lo = sw128_lo(b_tile + wide_col_bytes<C>(col_b), C::BOX);
#pragma unroll
  for (int j = 0; j < STEPS; ++j) {
    const int kk = kk0 + j;
    const u64 a = sw128_at(a_lo, kk * 32);
    if constexpr (C::WA == 128) {
      wgmma_sst_n128<C::FP16, 0, 1>(acc_a, a, sw128_at(ba_lo, kk * 2048), 1);
    } else {
      wgmma_sst_n64<C::FP16, 0, 1>(acc_a, a, sw128_at(ba_lo, kk * 2048), 1);
    }
    if constexpr (C::WB == 32) wgmma_sst_n32<C::FP16, 0, 1>(acc_b, a, sw128_at(bb_lo, kk * 2048), 1);
  }
}

// One pass of dQ = dS·K over columns [col, col + W): A = the dSᵀ tile MN-major, B = K MN-major, 4 k-steps
// of 16 keys.
template <class C, int W>
__device__ __forceinline__ void wide_dq_pass(float (&dq)[W / 8][4], u32 ds_tile, u32 k_smem, int col) {
  const u32 a_lo = sw128_lo(ds_tile, C::BOX);
  const u32 b_lo = sw128_lo(k_smem + wide_col_bytes<C>(col), C::BOX);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (W == 64) {
      wgmma_sst_n64<C::FP16, 1, 1>(dq, sw128_at(a_lo, k * 2048), sw128_at(b_lo, k * 2048), k > 0);
    } else {
      wgmma_sst_n32<C::FP16, 1, 1>(dq, sw128_at(a_lo, k * 2048), sw128_at(b_lo, k * 2048), k > 0);
    }
  }
}

// The slow path of a query block whose dO held a non-finite element (zeroed in shared memory, so dV's
// product left it out): adds P · dO[r][h] to dV[key][h] for each such element of the warpgroup's columns
// and each of the lane's two keys whose P for row r is not 0 (bwd_common.cuh's add_non_finite_do, with P
// read from the Pᵀ tile in shared memory, where both warpgroups' queries are).
template <class C, int NA>
__device__ __forceinline__ void wide_add_non_finite_do(float (&dv_a)[NA][4], float (&dv_b)[C::WB_FRAGS][4],
                                                       const unsigned char* p_tile, const u16* d_o, i64 stride,
                                                       int rows, int cols, int col_a, int col_b, int warp, int lane) {
  const int g = lane >> 2, t = lane & 3;
  for (int r = 0; r < imin(rows, C::BMQ); ++r) {
    float pk[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = 16 * (warp % 4) + g + 8 * h;
      const u16 bits = *reinterpret_cast<const u16*>(p_tile + key * 128 + (((r >> 3) ^ (key & 7)) << 4) + (r & 7) * 2);
      pk[h] = half_to_float<C::FP16>(bits);
    }
    const u16* row = d_o + r * stride;
    auto add = [&](float(&acc)[4], int col) {
      if (col >= cols) return;
      const u32 pair = *reinterpret_cast<const u32*>(row + col);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const u32 hb = e ? pair >> 16 : pair & 0xffffu;
        if (!non_finite16<C::FP16>(hb)) continue;
        const float x = half_to_float<C::FP16>(static_cast<u16>(hb));
#pragma unroll
        for (int k = 0; k < 2; ++k)
          if (pk[k] != 0.f) acc[2 * k + e] += pk[k] * x;
      }
    };
#pragma unroll
    for (int d = 0; d < NA; ++d) add(dv_a[d], col_a + 8 * d + 2 * t);
    if constexpr (C::WB != 0) {
#pragma unroll
      for (int d = 0; d < C::WB / 8; ++d) add(dv_b[d], col_b + 8 * d + 2 * t);
    }
  }
}

// DQ: dQ's products and adds (without: dK and dV alone, the `dkdv_only` entry). DET (with DQ): the dQ adds
// of each query block in bwd_dq_order.cuh's order of key blocks.
template <class C, bool DQ, bool DET = false>
__device__ __forceinline__ void hopper_bwd_dkdv_wide(const FlashParams& p, const FlashBwdParams& x) {
  static_assert(DQ || !DET, "the order is the dQ adds'");
  constexpr int BNK = C::BNK, BMQ = C::BMQ;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_addr(smem_raw);
  const u32 base = (raw + 1023) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const u32 k_smem = base;
  const u32 v_smem = k_smem + C::KV_BYTES;
  const u32 stage0 = v_smem + C::KV_BYTES;
  const u32 p_tile = stage0 + C::STAGES * C::STAGE;
  const u32 ds_tile = p_tile + C::PS_BYTES;
  const u32 dq0 = ds_tile + C::PS_BYTES;  // D = 192's staging
  const u32 stats0 = dq0 + C::STAGING;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane & 3;
  // The warpgroup as a warp-uniform value (a lane-0 shuffle): wgmma under a branch on threadIdx is
  // otherwise serialised (C7520).
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0);
  // The warpgroup's columns: segment A [col_a, col_a + WA), segment B [col_b, col_b + WB) (D = 192).
  const int col_a = 128 * wg;  // D = 256: boxes 2·wg and 2·wg + 1; D = 192: box 0 or box 2
  const int col_b = 64 + 32 * wg;
  // The dQ passes' columns: A's first 64, then A's second box (D = 256) or segment B (D = 192).
  const int q1_col = C::D == 256 ? col_a + 64 : col_b;

  const KeyBlockWork kb = key_block_work<BNK, BMQ>(p, DET && dq_order_descending(p), false);
  const TileWork& w = kb.w;
  const int kn0 = kb.kn0, blocks = kb.blocks;
  const int key0 = kn0 + 16 * (warp % 4);  // the first of this warp's 16 key rows (both warpgroups)
  const int steps = blocks * p.group;
  auto head_of = [&](int s) { return w.kv_head * p.group + s / blocks; };
  auto row_of = [&](int s) { return (kb.mb_lo + s % blocks) * BMQ; };

  // Tiles of D columns as D/64 boxes of 64 (load_tile_sw128 needs the 256 threads to cover whole rows
  // of a box: 24 chunks a row at D = 192 do not divide them). Each box has the same thread → chunk
  // mapping, which zero_non_finite relies on.
  auto load_boxes = [](u32 dst, const u16* src, i64 stride, int rows, int cols) {
#pragma unroll
    for (int b = 0; b < C::BOXES; ++b)
      load_tile_sw128<64, 64, C::THREADS>(dst + b * C::BOX, src + b * 64, stride, rows, cols - b * 64);
  };
  auto zero_boxes = [&](u32 tile) {
    bool found = false;
#pragma unroll
    for (int b = 0; b < C::BOXES; ++b)
      found |= zero_non_finite<64, 64, C::THREADS, C::FP16, true>(smem + (tile - base) + b * C::BOX);
    return found;
  };

  float dk_a[C::WA / 8][4], dv_a[C::WA / 8][4];
  float dk_b[C::WB_FRAGS][4], dv_b[C::WB_FRAGS][4];
#pragma unroll
  for (int d = 0; d < C::WA / 8; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk_a[d][c] = dv_a[d][c] = 0.f;
#pragma unroll
  for (int d = 0; d < C::WB_FRAGS; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk_b[d][c] = dv_b[d][c] = 0.f;

  if (steps > 0) {
    auto stage_of = [&](int i) { return stage0 + static_cast<u32>(i % C::STAGES) * C::STAGE; };
    auto stats_of = [&](int i) { return stats0 + static_cast<u32>(i % C::STAGES) * C::STATS; };
    auto load_step = [&](int i, int s) {
      const u32 dst = stage_of(i);
      load_query_rows<BMQ, C::THREADS>(dst, dst + C::Q_BYTES, stats_of(i), p, x, w, head_of(s), row_of(s), load_boxes);
    };
    auto flagged = [&](int i, int s) {
      return s < steps && stats_flag_non_finite<BMQ>(smem + (stats_of(i) - base));
    };
    auto clean_step = [&](int i) {
      zero_boxes(stage_of(i));
      zero_boxes(stage_of(i) + C::Q_BYTES);
      fence_proxy_async();
      __syncthreads();
    };

    load_kv_tiles<BNK>(k_smem, v_smem, p, w, kn0, load_boxes);
    load_step(0, 0);
    cp_async_commit();
    cp_async_wait<0>();
    compiler_fence();
    zero_boxes(k_smem);  // K, once a block
    bool dirty = flagged(0, 0);
    fence_proxy_async();
    dirty = __syncthreads_or(dirty);
    if (dirty) clean_step(0);

    const i64 bn_base = static_cast<i64>(w.b) * p.N;
    for (int s = 0; s < steps; ++s) {
      const int i = s;
      // Step s + 1's tiles into the other stage, a whole step ahead.
      if (s + 1 < steps) load_step(i + 1, s + 1);
      cp_async_commit();

      const int n = head_of(s), m0 = row_of(s);
      const u32 q_tile = stage_of(i), do_tile = q_tile + C::Q_BYTES;
      const float* lse2 = reinterpret_cast<const float*>(smem + (stats_of(i) - base));
      const float* dsum = lse2 + BMQ;
      float st[4][4], dpt[4][4];
      {
        // Sᵀ and dPᵀ: the 64 keys against this warpgroup's 32 queries (rows 32·wg … of the Q and dO tiles,
        // 4 swizzle atoms in).
        const u32 k_lo = sw128_lo(k_smem, 16), v_lo = sw128_lo(v_smem, 16);
        const u32 q_lo = sw128_lo(q_tile + wg * 32 * 128, 16), do_lo = sw128_lo(do_tile + wg * 32 * 128, 16);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < C::D / 16; ++k) {
          const u32 at = (k / 4) * C::BOX + (k % 4) * 32;
          wgmma_sst_n32<C::FP16, 0, 0>(st, sw128_at(k_lo, at), sw128_at(q_lo, at), k > 0);
        }
        wgmma_commit();
#pragma unroll
        for (int k = 0; k < C::D / 16; ++k) {
          const u32 at = (k / 4) * C::BOX + (k % 4) * 32;
          wgmma_sst_n32<C::FP16, 0, 0>(dpt, sw128_at(v_lo, at), sw128_at(do_lo, at), k > 0);
        }
        wgmma_commit();
      }
      wgmma_wait<1>();
      fence_accumulators(st);
      const int q0 = m0 + 32 * wg;  // this warpgroup's first query row
      if (!key_block_boundary<BNK, BMQ>(p, kb, m0)) {
        weights_all_visible(st, p.scale_log2, lse2 + 32 * wg, t);
      } else {
        float(&st3)[1][4][4] = reinterpret_cast<float(&)[1][4][4]>(st);
        weights_tile<true>(st3, p, w, true, key0, q0, lane,
                           [&](int, int j, int c) { return lse2[32 * wg + j * 8 + 2 * t + (c & 1)]; });
      }
      store_keys_by_queries<C::FP16>(p_tile, st, warp, wg, lane);
      // HALVES: dV over this warpgroup's own 32 queries (k-steps 2·wg, 2·wg + 1) once its warps' Pᵀ is there.
      auto issue_own = [&](float(&acc_a)[C::WA / 8][4], float(&acc_b)[C::WB_FRAGS][4], u32 a_tile,
                           u32 b_tile) {
        fence_proxy_async();
        named_barrier_sync(1 + wg, 128);
        wgmma_fence();
        wide_dkv<C, 2>(acc_a, acc_b, a_tile, b_tile, col_a, col_b, 2 * wg);
        wgmma_commit();
      };
      if constexpr (C::HALVES) {
        issue_own(dv_a, dv_b, p_tile, do_tile);
        wgmma_wait<1>();  // dPᵀ; dV's own half may still run
      } else {
        wgmma_wait<0>();
      }
      fence_accumulators(dpt);
      ds_rows(dpt, st, dsum + 32 * wg, t);
      store_keys_by_queries<C::FP16>(ds_tile, dpt, warp, wg, lane);
      if constexpr (C::HALVES) issue_own(dk_a, dk_b, ds_tile, q_tile);
      fence_proxy_async();
      __syncthreads();  // Pᵀ and dSᵀ of both warpgroups' queries

      if (dirty) {
        if constexpr (C::HALVES) {
          wgmma_wait<0>();  // dV's own half, before its accumulators take the non-finite dO terms
          fence_accumulators(dv_a);
          if constexpr (C::WB != 0) fence_accumulators(dv_b);
        }
        const i64 oa = w.b * p.o_strides[0] + n * p.o_strides[2] + m0 * p.o_strides[1];
        wide_add_non_finite_do<C>(dv_a, dv_b, smem + (p_tile - base), x.d_o + oa, p.o_strides[1], w.t_len - m0, p.Hv,
                                  col_a, col_b, warp, lane);
      }
      const i64 bn = bn_base + n;
      // Staging: a warp's 16 rows × the pass's columns (D = 256: inside the warpgroup's own half of dO).
      const u32 staging = (C::STAGING_IN_DO ? do_tile + wg * C::STAGING_WG : dq0 + wg * C::STAGING_WG);
      // dV and dK over all 64 queries, or with HALVES over the other warpgroup's 32.
      auto issue_rest = [&](float(&acc_a)[C::WA / 8][4], float(&acc_b)[C::WB_FRAGS][4], u32 a_tile,
                            u32 b_tile) {
        if constexpr (C::HALVES) {
          wide_dkv<C, 2>(acc_a, acc_b, a_tile, b_tile, col_a, col_b, 2 * (1 - wg));
        } else {
          wide_dkv<C>(acc_a, acc_b, a_tile, b_tile, col_a, col_b);
        }
      };
      wgmma_fence();
      issue_rest(dv_a, dv_b, p_tile, do_tile);
      wgmma_commit();
      if constexpr (!DQ) {
        issue_rest(dk_a, dk_b, ds_tile, q_tile);
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(dv_a);
        fence_accumulators(dk_a);
        if constexpr (C::WB != 0) {
          fence_accumulators(dv_b);
          fence_accumulators(dk_b);
        }
      } else if constexpr (C::PAIR) {
        float dq[C::Q0 / 8][4], dq1[C::Q1 / 8][4];
        wide_dq_pass<C, C::Q0>(dq, ds_tile, k_smem, col_a);
        wgmma_commit();
        issue_rest(dk_a, dk_b, ds_tile, q_tile);
        wgmma_commit();
        wide_dq_pass<C, C::Q1>(dq1, ds_tile, k_smem, q1_col);
        wgmma_commit();
        wgmma_wait<2>();  // dV (both halves) and dQ's first pass; dK and the second pass may still run
        fence_accumulators(dq);
        fence_accumulators(dv_a);
        if constexpr (C::WB != 0) fence_accumulators(dv_b);
        const u32 at = staging + (warp % 4) * 16 * C::Q0 * 4;
        store_dq_box<C::Q0>(at, dq, lane);
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
          if constexpr (DET) {
            const int place = dq_place<BNK>(p, kb);
            if (!dq_first_adder<BNK, BMQ>(p, kb, place, m0 / BMQ))
              dq_wait_turn(dq_semaphore<C::D, BMQ>(p, x, bn, m0 / BMQ), place);
          }
          bulk_reduce_add_f32(x.dq_accum + hopper_wide_dq_offset<C::D, C::Q0>(bn, col_a, x.t_pad, m0 + 16 * (warp % 4)),
                              at, 16 * C::Q0 * 4);
          bulk_commit();
        }
        wgmma_wait<0>();
        fence_accumulators(dq1);
        fence_accumulators(dk_a);
        if constexpr (C::WB != 0) fence_accumulators(dk_b);
        // The second pass's own place: D = 256, this warpgroup's half of the stage's Q (dK has read it).
        const u32 staging1 = C::STAGING_IN_DO ? q_tile + wg * C::STAGING_WG : dq0 + 2 * C::STAGING_WG + wg * C::STAGING_WG1;
        const u32 at1 = staging1 + (warp % 4) * 16 * C::Q1 * 4;
        store_dq_box<C::Q1>(at1, dq1, lane);
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
          bulk_reduce_add_f32(x.dq_accum + hopper_wide_dq_offset<C::D, C::Q1>(bn, q1_col, x.t_pad, m0 + 16 * (warp % 4)),
                              at1, 16 * C::Q1 * 4);
          bulk_commit();
        }
      } else {
      {
        float dq[C::Q0 / 8][4];
        wide_dq_pass<C, C::Q0>(dq, ds_tile, k_smem, col_a);
        wgmma_commit();
        issue_rest(dk_a, dk_b, ds_tile, q_tile);
        wgmma_commit();
        wgmma_wait<1>();  // dV and dQ's first pass; dK may still run
        fence_accumulators(dq);
        fence_accumulators(dv_a);
        if constexpr (C::WB != 0) fence_accumulators(dv_b);
        const u32 at = staging + (warp % 4) * 16 * C::Q0 * 4;
        store_dq_box<C::Q0>(at, dq, lane);
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
          if constexpr (DET) {
            const int place = dq_place<BNK>(p, kb);
            if (!dq_first_adder<BNK, BMQ>(p, kb, place, m0 / BMQ))
              dq_wait_turn(dq_semaphore<C::D, BMQ>(p, x, bn, m0 / BMQ), place);
          }
          bulk_reduce_add_f32(x.dq_accum + hopper_wide_dq_offset<C::D, C::Q0>(bn, col_a, x.t_pad, m0 + 16 * (warp % 4)),
                              at, 16 * C::Q0 * 4);
          bulk_commit();
        }
      }
      {
        float dq[C::Q1 / 8][4];
        wgmma_fence();
        wide_dq_pass<C, C::Q1>(dq, ds_tile, k_smem, q1_col);
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(dq);
        fence_accumulators(dk_a);
        if constexpr (C::WB != 0) fence_accumulators(dk_b);
        // The first pass's place: its adds have read it once this warp's lane 0 says so.
        const u32 at = staging + (warp % 4) * 16 * C::Q0 * 4;
        if (lane == 0) bulk_wait_read<0>();
        __syncwarp();
        store_dq_box<C::Q1>(at, dq, lane);
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) {
          bulk_reduce_add_f32(x.dq_accum + hopper_wide_dq_offset<C::D, C::Q1>(bn, q1_col, x.t_pad, m0 + 16 * (warp % 4)),
                              at, 16 * C::Q1 * 4);
          bulk_commit();
        }
      }
      }
      // The step's end: the staging (and at D = 256 the stage's dO, which the next step's loads overwrite)
      // read by the adds; DET: the adds complete, before the release below. Step s + 1's tiles landed.
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
      bool dirty_next = flagged(i + 1, s + 1);
      fence_proxy_async();
      dirty_next = __syncthreads_or(dirty_next);
      if constexpr (DET) {
        if (threadIdx.x == 0) dq_pass_turn(dq_semaphore<C::D, BMQ>(p, x, bn, m0 / BMQ), dq_place<BNK>(p, kb));
      }
      if (dirty_next) clean_step(i + 1);
      dirty = dirty_next;
    }
  }
  if (DQ && lane == 0) bulk_wait<0>();
  // Every key row of the block is written, zeros where no query sees it (padding included).
  u16* dk_out = x.dk + w.b * p.k_strides[0] + w.kv_head * p.k_strides[2];
  u16* dv_out = x.dv + w.b * p.v_strides[0] + w.kv_head * p.v_strides[2];
  {
    const float(&k3)[1][C::WA / 8][4] = reinterpret_cast<const float(&)[1][C::WA / 8][4]>(dk_a);
    const float(&v3)[1][C::WA / 8][4] = reinterpret_cast<const float(&)[1][C::WA / 8][4]>(dv_a);
    store_tile<1, C::WA / 8, C::FP16>(dk_out + col_a, p.k_strides[1], k3, x.scale, key0, p.S, p.H - col_a, lane);
    store_tile<1, C::WA / 8, C::FP16>(dv_out + col_a, p.v_strides[1], v3, 1.f, key0, p.S, p.Hv - col_a, lane);
  }
  if constexpr (C::WB != 0) {
    const float(&k3)[1][C::WB / 8][4] = reinterpret_cast<const float(&)[1][C::WB / 8][4]>(dk_b);
    const float(&v3)[1][C::WB / 8][4] = reinterpret_cast<const float(&)[1][C::WB / 8][4]>(dv_b);
    store_tile<1, C::WB / 8, C::FP16>(dk_out + col_b, p.k_strides[1], k3, x.scale, key0, p.S, p.H - col_b, lane);
    store_tile<1, C::WB / 8, C::FP16>(dv_out + col_b, p.v_strides[1], v3, 1.f, key0, p.S, p.Hv - col_b, lane);
  }
}
