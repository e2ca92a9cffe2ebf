// The wgmma dK/dV loop (bwd_dkdv_sm90.cuh) with its loads moved to a producer warpgroup: 384
// threads, warpgroup 0 loads, warpgroups 1 and 2 compute (each 64 of the block's 128 keys, exactly as
// the two warpgroups of the 256-thread loop), FlashAttention-3's division of the block.
//
// Why: in the 256-thread loop every thread issues its share of the cp.async copies (8 a step at
// D = 128, with their 64-bit address arithmetic, in a loop at 255 registers), and the step's one
// __syncthreads both publishes the loads and exchanges dS, so the two warpgroups run every phase at
// the same time and neither's elementwise work overlaps the other's products. Here:
//   producer (128 threads, setmaxnreg down to PRODUCER_REGS): K and V once, then per step waits for
//     the stage to be empty, copies Q, dO, lse2 and D with cp.async (zero-filled past the lengths, as
//     before), waits for its own copies, zeroes the non-finite Q and dO elements it copied (always:
//     the same result as doing it only for flagged blocks, and the producer is otherwise idle),
//     publishes the block's non-finite flag in shared memory, fences to the async proxy and arrives
//     on the stage's `full` mbarrier (count 128).
//   consumers (setmaxnreg up to CONSUMER_REGS): wait `full`, run the step as the 256-thread loop does,
//     exchange dS over a named barrier of their 256 threads (dQ needs both warpgroups' keys), and each
//     thread arrives on the stage's `empty` mbarrier (count 256) once its products have retired.
// The dS buffers and the dQ staging need no more than the named barrier: at the barrier of step s
// both warpgroups have retired every product of step s − 1 (the same argument as the 256-thread loop).
// Registers: 2 × 128 × 232 + 128 × 32 = 63,488 of the 64,512 the launch hands out (384 threads × 168), so
// setmaxnreg.inc never waits on a register file the block does not already hold. ptxas (nvcc 13.0): no
// spills at D = 64 and 128, bf16 and fp16, deterministic or not. The producer within 24 registers (beside
// consumers of 240) spilled 24 bytes at D = 128, reloaded every step (ncu: 25 M local-memory requests a
// launch at B=4 T=S=8192 N=16, 16% L1 hits); the consumers spill from 224 down (124 B at 224, 388 B at 200).
//
// FLASH_BWD_PINGPONG (ATTNLAB_FLASH_BWD_PINGPONG=1|keys; not with the ordered dQ adds of deterministic mode):
// dQ split by keys instead of head-dim halves. Each warpgroup adds dS_wg·K_wg over its own 64 keys and
// the whole head dim (m64n64k16 with B = its K rows, one pass a 64-column half, the same 32 accumulator
// registers), so that it reads only its own dS and the dS exchange across warpgroups goes: each syncs
// its own 128 threads before dQ reads its dS. Nothing then holds the two consumer warpgroups in the
// same phase but the stages' mbarriers, and with `1` two more named barriers make them take turns
// issuing Sᵀ and dPᵀ (FlashAttention-3's forward ping-pong: the tensor pipe runs the products in issue
// order, so one warpgroup's Pᵀ and dSᵀ run under the other's products). Costs: two bulk adds a warp a
// step instead of one (64 KiB a block a step into L2 instead of 32), and at D = 128 the second pass's
// staging waits for the first's adds to have read it (a warp's 4 KiB, under the second pass's products).
// Staging both passes at once (64 KiB) leaves room for two Q/dO stages only, and ptxas (nvcc 13.0) spills
// 4 B at two stages in this loop with or without the split.
#pragma once
#include "hopper/bwd_dkdv_sm90.cuh"

#ifndef FLASH_BWD_PINGPONG
#define FLASH_BWD_PINGPONG 0  // 1: dQ by keys and the warpgroups' turns; 2: dQ by keys alone
#endif
// FLASH_BWD_WS_FLAGGED (ATTNLAB_FLASH_BWD_WS_FLAGGED=1): the producer zeroes the non-finite Q and dO elements
// of a step only where the step's statistics flag a row (as the 256-thread loop does), where it scans every
// element of every step otherwise. ncu (H100, B=4 T=S=8192 N=16 H=128, non-causal): the producer's scan of
// 32 KiB a step (an LDS and ~8 integer tests a 16-byte chunk, short-scoreboard bound within 32 registers) is
// where its warps spend their samples, and the consumers wait on the `full` mbarrier for 30% of theirs.
#ifndef FLASH_BWD_WS_FLAGGED
#define FLASH_BWD_WS_FLAGGED 0
#endif

// The OR of `p` over the `threads` threads of named barrier `id` (bar.red.or), for every one of them.
__device__ __forceinline__ bool named_barrier_or(int id, int threads, bool p) {
  u32 any;
  asm volatile("{ .reg .pred a, b; setp.ne.u32 a, %1, 0; barrier.red.or.pred b, %2, %3, a; selp.u32 %0, 1, 0, b; }\n"
               : "=r"(any)
               : "r"(static_cast<u32>(p)), "r"(id), "r"(threads)
               : "memory");
  return any != 0;
}

// The producer-warpgroup loop's layout with dQ split by keys (FLASH_BWD_PINGPONG): each warpgroup stages
// a 64-column pass of dQ at a time, 16 KiB (the same 32 KiB as the halves at D = 128, twice it at 64).
template <class C>
struct HopperBwdPingPong : C {
  // A warpgroup's staging: one pass, 64 rows × 64 columns of float32 (a half at D = 128, both at 64).
  static constexpr u32 DQ_PASS_BYTES = C::BMQ * 64 * 4, DQ_BYTES = 2 * DQ_PASS_BYTES;
};
template <class C, bool PP>
struct HopperBwdWsLayout {
  using type = C;
};
template <class C>
struct HopperBwdWsLayout<C, true> {
  using type = HopperBwdPingPong<C>;
};
// Whether the loop of these template arguments splits dQ by keys: the ordered adds (DET) need one adding
// warp an element, and without dQ there is nothing to split.
__host__ __device__ constexpr bool hopper_bwd_ws_pingpong(bool dq, bool det, int mode) { return mode != 0 && dq && !det; }

struct HopperBwdWs {
  static constexpr int THREADS = 384, PRODUCER = 128, CONSUMERS = 256;
  // The budget above with FLASH_BWD_LEAN (the default); 24 / 240 with ATTNLAB_FLASH_BWD_LEAN=0.
  static constexpr int PRODUCER_REGS = FLASH_BWD_LEAN ? 32 : 24, CONSUMER_REGS = FLASH_BWD_LEAN ? 232 : 240;
  static_assert(CONSUMERS * CONSUMER_REGS + PRODUCER * PRODUCER_REGS <= THREADS * 168, "the launch's registers");
  static constexpr int DS_BARRIER = 1;  // named barrier of the consumers' dS exchange
  // FLASH_BWD_PINGPONG: each consumer warpgroup's own barrier (2, 3) before dQ reads its dS, and the
  // barriers of its turn to issue Sᵀ and dPᵀ (4, 5). FLASH_BWD_WS_FLAGGED: the producer's flag (6).
  static constexpr int WG_BARRIER = 2, TURN_BARRIER = 4, PRODUCER_BARRIER = 6;
};

// Bytes after the loop's own shared memory: full and empty mbarriers of each stage, K/V's, and a
// 32-bit non-finite flag per stage.
template <class C>
constexpr unsigned hopper_bwd_ws_sync_bytes() {
  return 16 * C::STAGES + 8 + 4 * C::STAGES;
}
template <class C0, bool DQ, bool DET = false, int PINGPONG = FLASH_BWD_PINGPONG>
constexpr unsigned hopper_bwd_ws_smem_bytes() {
  using C = typename HopperBwdWsLayout<C0, hopper_bwd_ws_pingpong(DQ, DET, PINGPONG)>::type;
  return hopper_bwd_smem_bytes<C, DQ>() + hopper_bwd_ws_sync_bytes<C>();
}
// The dQ-by-keys layout at D=128 (16 KiB more than the shared one) in a module built with it; a block mask's
// bitmaps leave it no room, and the launcher builds it for plain problems only (backward-variant.ts pingpongOf).
static_assert(FLASH_BWD_PINGPONG == 0 || ATTNLAB_BLOCK_MASK ||
                  hopper_bwd_ws_smem_bytes<HopperBwdConfig<128, false>, true, false, FLASH_BWD_PINGPONG>() <= 227 * 1024,
              "an H100/H200 block");


// PINGPONG: FLASH_BWD_PINGPONG's modes (the header); FLAGGED: FLASH_BWD_WS_FLAGGED.
template <class C0, bool DQ, bool DET = false, int PINGPONG = FLASH_BWD_PINGPONG, bool FLAGGED = FLASH_BWD_WS_FLAGGED != 0>
__device__ __forceinline__ void hopper_bwd_dkdv_ws(const FlashParams& p, const FlashBwdParams& x) {
  static_assert(DQ || !DET, "the order is the dQ adds'");
  constexpr bool PP = hopper_bwd_ws_pingpong(DQ, DET, PINGPONG);  // dQ by keys (the header says why)
  constexpr bool TURNS = PP && PINGPONG == 1;
  using C = typename HopperBwdWsLayout<C0, PP>::type;
  using W = HopperBwdWs;
  constexpr int BNK = C::BNK, BMQ = C::BMQ;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_addr(smem_raw);
  const u32 base = (raw + 1023) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const u32 k_smem = base;
  const u32 v_smem = k_smem + C::KV_BYTES;
  const u32 stage0 = v_smem + C::KV_BYTES;
  const u32 ds0 = stage0 + C::STAGES * C::STAGE;
  const u32 dq0 = ds0 + C::DS_BUFFERS * C::DS_BYTES;  // DQ only
  const u32 stats0 = ds0 + (DQ ? C::DS_BUFFERS * C::DS_BYTES + C::DQ_BYTES : 0);
  const u32 full0 = stats0 + C::STAGES * C::STATS;  // 8-byte aligned: the regions before are 512-byte multiples
  const u32 empty0 = full0 + 8 * C::STAGES;
  const u32 kv_bar = empty0 + 8 * C::STAGES;
  const u32 flags0 = kv_bar + 8;
  auto stage_of = [&](int s) { return stage0 + static_cast<u32>(s % C::STAGES) * C::STAGE; };
  auto stats_of = [&](int s) { return stats0 + static_cast<u32>(s % C::STAGES) * C::STATS; };

  const KeyBlockWork kb = key_block_work<BNK, BMQ>(p, DET && dq_order_descending(p));
  const TileWork& w = kb.w;
  const int kn0 = kb.kn0, blocks = kb.blocks;
  const int steps = blocks * p.group;  // (head, query block) pairs, head-major
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int i = 0; i < C::STAGES; ++i) {
      mbar_init(full0 + 8 * i, W::PRODUCER);
      mbar_init(empty0 + 8 * i, W::CONSUMERS);
    }
    mbar_init(kv_bar, W::PRODUCER);
    mbar_fence_init();
  }
  __syncthreads();

  if (warp < W::PRODUCER / 32) {
    regs_decrease<W::PRODUCER_REGS>();
    if (steps == 0) return;
    load_kv_tiles<BNK>(k_smem, v_smem, p, w, kn0, [](u32 dst, const u16* src, i64 stride, int rows, int cols) {
      load_tile_sw128<BNK, C::D, W::PRODUCER>(dst, src, stride, rows, cols);
    });
    cp_async_commit();
    cp_async_wait<0>();
    compiler_fence();
    zero_non_finite<BNK, C::D, W::PRODUCER, C::FP16, true>(smem);  // K, once per block
    fence_proxy_async();
    mbar_arrive(kv_bar);
    for (int s = 0; s < steps; ++s) {
      const int i = s % C::STAGES;
      mbar_wait(empty0 + 8 * i, ((s / C::STAGES) & 1) ^ 1);
      const u32 dst = stage_of(s);
      load_query_step<BMQ, W::PRODUCER>(dst, dst + C::Q_BYTES, stats_of(s), p, x, kb, s,
                                        [](u32 to, const u16* src, i64 stride, int rows, int cols) {
                                          load_tile_sw128<BMQ, C::D, W::PRODUCER>(to, src, stride, rows, cols);
                                        });
      cp_async_commit();
      cp_async_wait<0>();
      compiler_fence();
      if constexpr (FLAGGED) {
        // Warp 0 copied the statistics; the OR over the producer's 128 threads tells each of them whether
        // to clean the elements it copied (a non-finite Q or dO element gives its row a NaN lse2 or a
        // non-finite D: bwd_common.cuh, stats_flag_non_finite).
        const bool flagged = named_barrier_or(W::PRODUCER_BARRIER, W::PRODUCER,
                                              stats_flag_non_finite<BMQ>(smem + (stats_of(s) - base)));
        if (flagged) {
          zero_non_finite<BMQ, C::D, W::PRODUCER, C::FP16, true>(smem + (dst - base));
          zero_non_finite<BMQ, C::D, W::PRODUCER, C::FP16, true>(smem + (dst - base) + C::Q_BYTES);
        }
        if (threadIdx.x == 0) st_shared_s32(flags0 + 4 * i, flagged ? 1 : 0);
      } else {
        zero_non_finite<BMQ, C::D, W::PRODUCER, C::FP16, true>(smem + (dst - base));
        zero_non_finite<BMQ, C::D, W::PRODUCER, C::FP16, true>(smem + (dst - base) + C::Q_BYTES);
        if (warp == 0) {
          const bool flagged = __any_sync(0xffffffffu, stats_flag_non_finite<BMQ>(smem + (stats_of(s) - base)));
          if (lane == 0) st_shared_s32(flags0 + 4 * i, flagged ? 1 : 0);
        }
      }
      fence_proxy_async();
      mbar_arrive(full0 + 8 * i);
    }
    return;
  }

  regs_increase<W::CONSUMER_REGS>();
  const int cw = warp - W::PRODUCER / 32;  // consumer warp 0..7: keys kn0 + 16·cw …
  const int wg = cw / 4, t = lane & 3;
  // The warpgroup as a value ptxas knows to be warp-uniform (bwd_dkdv_sm90.cuh says why).
  const int wg_uniform = __shfl_sync(0xffffffffu, wg, 0);
  const int key0 = kn0 + cw * 16;

  float dk[C::DT][4], dv[C::DT][4];
#pragma unroll
  for (int d = 0; d < C::DT; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[d][c] = dv[d][c] = 0.f;

  if (steps > 0) {
    const u32 k_rows = k_smem + wg * 64 * 128;
    const u32 v_rows = v_smem + wg * 64 * 128;
    float st[C::NT][4], dpt[C::NT][4];
    mbar_wait(kv_bar, 0);
    // TURNS: warpgroup 0 issues first (warpgroup 1 arrives for its first turn).
    if (TURNS && wg_uniform == 1) named_barrier_arrive(W::TURN_BARRIER, W::CONSUMERS);

    // The step's (head, first row) by increments, head-major (bwd_dkdv_sm90.cuh's WALK), not s / blocks.
    int n = w.kv_head * p.group, m0 = kb.mb_lo * BMQ;
    const int m_end = (kb.mb_lo + blocks) * BMQ;
    for (int s = 0; s < steps; ++s) {
      const int i = s % C::STAGES;
      if constexpr (!FLASH_BWD_LEAN) {
        n = w.kv_head * p.group + s / blocks;
        m0 = (kb.mb_lo + s % blocks) * BMQ;
      }
      const u32 q_tile = stage_of(s);
      const u32 do_tile = q_tile + C::Q_BYTES;
      mbar_wait(full0 + 8 * i, (s / C::STAGES) & 1);
      const float* lse2 = reinterpret_cast<const float*>(smem + (stats_of(s) - base));
      const float* dsum = lse2 + BMQ;
      float(&st3)[1][C::NT][4] = reinterpret_cast<float(&)[1][C::NT][4]>(st);

      // K's and V's rows as values opaque to the compiler each step: otherwise ptxas keeps their 16
      // loop-invariant descriptors (32 registers at D=128) live across the loop and spills.
      const u32 k_lo = sw128_lo(opaque_u32(k_rows), 16), v_lo = sw128_lo(opaque_u32(v_rows), 16);
      const u32 q_lo = sw128_lo(q_tile, 16), do_lo = sw128_lo(do_tile, 16);
      // TURNS: this warpgroup's Sᵀ and dPᵀ go to the tensor pipe after the other's of the step before.
      if constexpr (TURNS) named_barrier_sync(W::TURN_BARRIER + wg_uniform, W::CONSUMERS);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < C::D / 16; ++k) {
        const u32 col = (k % 4) * 32, box = k / 4;
        wgmma_ss_n64<C::FP16>(st, sw128_at(k_lo, box * C::KV_BOX + col), sw128_at(q_lo, box * C::Q_BOX + col), k > 0);
      }
      wgmma_commit();
#pragma unroll
      for (int k = 0; k < C::D / 16; ++k) {
        const u32 col = (k % 4) * 32, box = k / 4;
        wgmma_ss_n64<C::FP16>(dpt, sw128_at(v_lo, box * C::KV_BOX + col), sw128_at(do_lo, box * C::Q_BOX + col), k > 0);
      }
      wgmma_commit();
      // FLASH_BWD_STATS_EARLY: the first statistics in registers before the waits (bwd_dkdv_sm90.cuh).
      constexpr bool EARLY = FLASH_BWD_STATS_EARLY != 0;
      float2 lse2_early[4], dsum_early[2];
      if constexpr (EARLY) stats_early(lse2_early, lse2, t);
      // The other warpgroup's turn; warpgroup 1's last arrival would have no turn to open.
      if constexpr (TURNS) {
        if (wg_uniform == 0 || s + 1 < steps) named_barrier_arrive(W::TURN_BARRIER + 1 - wg_uniform, W::CONSUMERS);
      }
      wgmma_wait<1>();  // Sᵀ(s); dPᵀ(s) may still run
      fence_accumulators(st);
      if (key_block_boundary<BNK, BMQ>(p, kb, m0)) {
        weights_tile<true>(st3, p, w, true, key0, m0, lane, [&](int, int j, int c) { return lse2[j * 8 + 2 * t + (c & 1)]; });
      } else {
        if constexpr (EARLY) {
          weights_all_visible_early(st, p.scale_log2, lse2_early, lse2, t);
        } else {
          weights_all_visible(st, p.scale_log2, lse2, t);  // bwd_dkdv_sm90.cuh
        }
      }
      if (ld_shared_s32(flags0 + 4 * i) != 0) {
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
      sm90_a_fragments<C::FP16>(da, dpt);
      pin_fragments(da);
      const u32 ds_smem = ds0 + static_cast<u32>(s % C::DS_BUFFERS) * C::DS_BYTES;
      if constexpr (PP) {
        // dS(s) of this warpgroup's keys, stored transposed in its own box, for its own dQ only.
        const int blk = lane >> 3, r = lane & 7;
        const u32 ds_box = ds_smem + wg_uniform * C::DS_BOX;
        const u32 ds_row = ds_box + r * 128 + (((2 * (cw % 4) + (blk & 1)) ^ r) << 4);
#pragma unroll
        for (int kk = 0; kk < BMQ / 16; ++kk) stmatrix_x4_trans(ds_row + (16 * kk + 8 * (blk >> 1)) * 128, da[kk]);
        // This warp's staging is free once its bulk adds of step s − 1 have read it (it is this warp's
        // alone). The dS buffer this step writes was last read by dQ(s − 2), which every thread of the
        // warpgroup retired before the barrier of step s − 1.
        if (lane == 0) bulk_wait_read<0>();
        fence_proxy_async();
        named_barrier_sync(W::WG_BARRIER + wg_uniform, 128);  // dS(s) of this warpgroup's 64 keys
        // dQ(s) += dS_wg·K_wg, a 64-column half of the head dim a pass (m64n64k16, B = this warpgroup's
        // 64 K rows MN-major), each staged and added as it completes; at D = 64 one pass is both halves.
        float dq[8][4];
        const u32 stage_rows = dq0 + wg_uniform * C::DQ_PASS_BYTES + (cw % 4) * (C::DQ_PASS_BYTES / 4);
        auto issue_dq = [&](int half) {
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const u64 a = sw128_at(sw128_lo(ds_box, 16), k * 32);
            const u64 b = sw128_at(sw128_lo(k_smem + half * C::KV_BOX, C::KV_BOX), (4 * wg_uniform + k) * 2048);
            wgmma_ss_n64_tb<C::FP16>(dq, a, b, k > 0);
          }
          wgmma_commit();
        };
        // Columns [64·pass, 64·pass + 64) of dQ, this warp's 16 rows, into its 4 KiB of the staging (the
        // half's layout of hopper/bwd_dq_accum.cuh; at D = 64 both 32-column halves, 2 KiB each), then
        // added to the workspace by its lane 0.
        auto stage_and_add = [&](int pass) {
          if constexpr (C::D == 128) {
            store_dq_box<64>(stage_rows, dq, lane);
          } else {
            store_dq_box<32>(stage_rows, reinterpret_cast<const float(&)[4][4]>(dq[0]), lane);
            store_dq_box<32>(stage_rows + C::DQ_WARP_BYTES, reinterpret_cast<const float(&)[4][4]>(dq[4]), lane);
          }
          fence_proxy_async();
          __syncwarp();
          if (lane == 0) {
            const i64 bn = static_cast<i64>(w.b) * p.N + n;
#pragma unroll
            for (int h = 0; h < 128 / C::D; ++h)
              bulk_reduce_add_f32(
                  x.dq_accum + hopper_dq_box_offset<C::DQ_W>(bn, C::D == 128 ? pass : h, x.t_pad, m0 + 16 * (cw % 4)),
                  stage_rows + h * C::DQ_WARP_BYTES, C::DQ_WARP_BYTES);
            bulk_commit();
          }
        };
        issue_dq(0);
#pragma unroll
        for (int kk = 0; kk < BMQ / 16; ++kk) dkv_step<C>(dk, da[kk], sw128_at(sw128_lo(q_tile, C::Q_BOX), kk * 2048));
        wgmma_commit();
        wgmma_wait<1>();  // dV(s) and the first pass of dQ(s); dK(s) may still run
        fence_accumulators(dq);
        fence_accumulators(dv);
        pin_fragments(pa);
        stage_and_add(0);
        if constexpr (C::D == 128) {
          issue_dq(1);
          // The first pass's adds have read this warp's staging (they ran under the second pass).
          if (lane == 0) bulk_wait_read<0>();
          __syncwarp();
          wgmma_wait<0>();
          fence_accumulators(dq);
          stage_and_add(1);
        } else {
          wgmma_wait<0>();
        }
      } else if constexpr (DQ) {
        // dS stored transposed, as the 256-thread loop does (bwd_dkdv_sm90.cuh).
        const int blk = lane >> 3, r = lane & 7;
        const u32 ds_row = ds_smem + wg * C::DS_BOX + r * 128 + (((2 * (cw % 4) + (blk & 1)) ^ r) << 4);
#pragma unroll
        for (int kk = 0; kk < BMQ / 16; ++kk) stmatrix_x4_trans(ds_row + (16 * kk + 8 * (blk >> 1)) * 128, da[kk]);
        // The dQ staging of step s − 1 is free once this warp's bulk adds have read it; DET: they
        // complete, so that the barrier orders them before the release of that query block.
        if (lane == 0) {
          if constexpr (DET) {
            bulk_wait<0>();
            dq_adds_done();
          } else {
            bulk_wait_read<0>();
          }
        }
        fence_proxy_async();
        named_barrier_sync(W::DS_BARRIER, W::CONSUMERS);  // dS(s) of both warpgroups' keys
        if constexpr (DET) {
          if (cw == 0 && lane == 0 && s > 0)
            dq_pass_turn(dq_semaphore_of_step<C>(p, x, kb, s - 1), dq_place<BNK>(p, kb));
        }
        float dq[C::DQ_NT][4];
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BNK / 16; ++k) {
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
#pragma unroll
        for (int kk = 0; kk < BMQ / 16; ++kk) dkv_step<C>(dk, da[kk], sw128_at(sw128_lo(q_tile, C::Q_BOX), kk * 2048));
        wgmma_commit();
        wgmma_wait<1>();  // dV(s) and dQ(s); the staging and bulk adds run while dK(s) multiplies
        fence_accumulators(dq);
        fence_accumulators(dv);
        pin_fragments(pa);
        const u32 staging = dq0 + wg_uniform * C::DQ_BOX_BYTES + (cw % 4) * C::DQ_WARP_BYTES;
        __syncwarp();
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
          bulk_reduce_add_f32(x.dq_accum + hopper_dq_box_offset<C::DQ_W>(bn, wg_uniform, x.t_pad, m0 + 16 * (cw % 4)),
                              staging, C::DQ_WARP_BYTES);
          bulk_commit();
        }
        wgmma_wait<0>();
      } else {
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BMQ / 16; ++kk) dkv_step<C>(dk, da[kk], sw128_at(sw128_lo(q_tile, C::Q_BOX), kk * 2048));
        wgmma_commit();
        wgmma_wait<0>();
      }
      fence_accumulators(dv);
      fence_accumulators(dk);
      pin_fragments(pa);
      pin_fragments(da);
      // Stage s read to the end (its products retired, the statistics and the flag read): the producer
      // may refill it. Every consumer thread arrives for its own reads: with one arrival a warp after a
      // __syncwarp, racecheck reported the producer's next copies racing the other lanes' reads.
      mbar_arrive(empty0 + 8 * i);
      if constexpr (FLASH_BWD_LEAN) {
        const bool wrap = m0 + BMQ == m_end;
        n += wrap ? 1 : 0;
        m0 = wrap ? kb.mb_lo * BMQ : m0 + BMQ;
      }
    }
  }
  if (DQ && lane == 0) bulk_wait<0>();
  if constexpr (DET) {
    if (lane == 0) dq_adds_done();
    named_barrier_sync(W::DS_BARRIER, W::CONSUMERS);
    if (cw == 0 && lane == 0 && steps > 0)
      dq_pass_turn(dq_semaphore_of_step<C>(p, x, kb, steps - 1), dq_place<BNK>(p, kb));
  }
  u16* dk_out = x.dk + w.b * p.k_strides[0] + w.kv_head * p.k_strides[2];
  u16* dv_out = x.dv + w.b * p.v_strides[0] + w.kv_head * p.v_strides[2];
  const float(&dk3)[1][C::DT][4] = reinterpret_cast<const float(&)[1][C::DT][4]>(dk);
  const float(&dv3)[1][C::DT][4] = reinterpret_cast<const float(&)[1][C::DT][4]>(dv);
  store_tile<1, C::DT, C::FP16>(dk_out, p.k_strides[1], dk3, x.scale, key0, p.S, p.H, lane);
  store_tile<1, C::DT, C::FP16>(dv_out, p.v_strides[1], dv3, 1.f, key0, p.S, p.Hv, lane);
}
