// The backward's main loop (FlashAttention-2, Algorithm 2): one block owns BNK keys of one
// (batch, KV head), keeps their K and V tiles in shared memory and dK, dV in registers, and walks
// over every query block of every query head of its group (GQA/MQA: the group's sum comes out of
// the same registers, in a fixed order, with no reduction pass).
//
// The products are computed transposed, keys as rows, so each warp owns 16·MI keys and every
// product but dQ stays in its registers (mainloop.cuh's tiles with the roles swapped: C::BM is the
// key block, C::BN the query block):
//   Sᵀ  = K·Qᵀ           qk_tile (A = this warp's K rows, B = the Q tile)
//   Pᵀ  = 2^(Sᵀ·scale·log2e − lse2)
//   dPᵀ = V·dOᵀ          qk_tile (A = V rows, B = the dO tile)
//   dV += Pᵀ·dO          pv_tile (P from the accumulators, dO read transposed)
//   dSᵀ = Pᵀ ∘ (dPᵀ − D)
//   dK += dSᵀ·Q          pv_tile
//   dQ += dS·K           (DQ only) dSᵀ goes to shared memory transposed; the warps split the
//                        query block × head dim and add their tiles to the float32 accumulator
//                        with reductions (order-dependent: deterministic runs use flash_bwd_dq).
// Pipeline: Q, dO, lse2 and D of the next query block load (cp.async) while this one computes;
// two barriers per query block (one when DQ is off).
//
// Bias, mask and modifiers (C::BIAS, C::MASK, common/modifiers.cuh): P is recomputed with the
// forward's logit (weights_tile_ex), dS goes through the score modifier's chain rule and into dBias
// (ds_mods_tile), and a block mask's EMPTY (head, query block) steps are never visited: the walk and
// the loads ahead of it go from one non-empty step to the next.
#pragma once
#include "flash/bwd_common.cuh"
#include "flash/mainloop.cuh"

template <class C, bool DQ>
struct BwdKvLayout {
  static constexpr int BNK = C::BM;  // keys per block
  static constexpr int BMQ = C::BN;  // queries per step
  static constexpr int DS_PITCH = BNK + 8;
  static constexpr u32 KV_TILE = BNK * C::PITCH * 2;
  static constexpr u32 Q_TILE = BMQ * C::PITCH * 2;
  // One stage: Q | dO | lse2 | D.
  static constexpr u32 STAGE = 2 * Q_TILE + 2 * BMQ * 4;
  static constexpr u32 DS_BYTES = DQ ? BMQ * DS_PITCH * 2 : 0;
  // K | V | stage 0 | stage 1 | dSᵀ (DQ only).
  static constexpr unsigned SHARED_BYTES = 2 * KV_TILE + 2 * STAGE + DS_BYTES;
  // The dQ product: the block's BMQ/16 m-tiles times SPLIT column ranges of the head dim, one per warp.
  static constexpr int MQ = BMQ / 16;
  static constexpr int SPLIT = C::NW / MQ;
  static constexpr int DQ_COLS = C::D / (SPLIT > 0 ? SPLIT : 1);
  static_assert(!DQ || (SPLIT * MQ == C::NW && DQ_COLS % 16 == 0), "dQ: warps must tile (BMQ/16) × D/16");
};

template <class C, bool DQ>
__device__ __forceinline__ void flash_bwd_dkdv(const FlashParams& p, const FlashBwdParams& x, const FlashMods& m) {
  using L = BwdKvLayout<C, DQ>;
  constexpr int BNK = L::BNK, BMQ = L::BMQ;
  extern __shared__ __align__(16) unsigned char smem[];
  const u32 k_smem = smem_addr(smem);
  const u32 v_smem = k_smem + L::KV_TILE;
  const u32 stage0 = v_smem + L::KV_TILE;
  const u32 ds_smem = stage0 + 2 * L::STAGE;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;
  const int t = lane & 3;

  const KeyBlockWork kb = key_block_work<BNK, BMQ>(p);
  const TileWork& w = kb.w;
  const int kn0 = kb.kn0, mb_lo = kb.mb_lo, blocks = kb.blocks;
  const int key0 = kn0 + warp * 16 * C::MI;  // first key of this warp
  const int steps = blocks * p.group;        // (head, query block) pairs, head-major

  float dk[C::MI][C::DT][4], dv[C::MI][C::DT][4];
#pragma unroll
  for (int i = 0; i < C::MI; ++i)
#pragma unroll
    for (int d = 0; d < C::DT; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) dk[i][d][c] = dv[i][d][c] = 0.f;

  // Step s's head and first query row, its classification, and the step after s (s + 1 without a
  // block mask, else the next non-empty one; `steps` when none is left).
  auto head_of = [&](int s) { return w.kv_head * p.group + s / blocks; };
  auto row_of = [&](int s) { return (mb_lo + s % blocks) * BMQ; };
  auto kind_of = [&](int s) {
    const int m0 = row_of(s);
    return tile_kind(m, w.b, head_of(s), m0, imin(m0 + BMQ, w.t_len) - 1, kn0, imin(kn0 + BNK, w.s_len) - 1);
  };
  auto next_step = [&](int s) {
    ++s;
    if constexpr (ATTNLAB_BLOCK_MASK) {
      while (s < steps && kind_of(s) == ATTNLAB_TILE_EMPTY) ++s;
    }
    return s;
  };
  const int first = ATTNLAB_BLOCK_MASK ? next_step(-1) : 0;

  if (first < steps) {
    load_kv_tiles<BNK>(k_smem, v_smem, p, w, kn0, [](u32 dst, const u16* src, i64 stride, int rows, int cols) {
      load_tile<BNK, C::D, C::THREADS>(dst, src, stride, rows, cols);
    });
    auto load_step = [&](u32 dst, int s) {
      load_query_step<BMQ, C::THREADS>(dst, dst + L::Q_TILE, dst + 2 * L::Q_TILE, p, x, kb, s,
                                       [](u32 to, const u16* src, i64 stride, int rows, int cols) {
                                         load_tile<BMQ, C::D, C::THREADS>(to, src, stride, rows, cols);
                                       });
    };
    load_step(stage0, first);
    cp_async_commit();
    // A operands: this warp's K (resp. V) rows; B: the Q (resp. dO) tile; transposed B: dO (resp. Q).
    // The V, dO and Q addresses are the K, Q and dO ones at fixed offsets: 3 registers, not 6.
    const LaneAddresses ka = lane_addresses<C>(k_smem, stage0, stage0 + L::Q_TILE, warp, lane);
    const float* row_stats = reinterpret_cast<const float*>(smem + 2 * L::KV_TILE + 2 * L::Q_TILE);

    u32 stage = 0;
    for (int s = first; s < steps;) {
      const int m0 = row_of(s);
      cp_async_wait<0>();
      // Each thread cleans what it copied: K once (with the first step's group), Q and dO at every step.
      if (s == first) zero_non_finite<BNK, C::D, C::THREADS, C::FP16>(smem);
      zero_non_finite<BMQ, C::D, C::THREADS, C::FP16>(smem + 2 * L::KV_TILE + stage);
      const bool do_dirty = zero_non_finite<BMQ, C::D, C::THREADS, C::FP16>(smem + 2 * L::KV_TILE + stage + L::Q_TILE);
      // This step's tiles landed; every warp is done with the other stage and dSᵀ.
      const bool any_dirty = __syncthreads_or(do_dirty);
      // Recomputed where used rather than held across the step: the D = 128 loop has no register to spare.
      if (next_step(s) < steps) load_step(stage0 + (stage ^ L::STAGE), next_step(s));
      cp_async_commit();

      float st[C::MI][C::NT][4];
      qk_tile<C>(st, ka.q, ka.k + stage);
      const float* lse2 = row_stats + stage / 4;
      const float* dsum = lse2 + BMQ;
      // Read where used (a 64-bit shared load per n-tile): held in registers for the whole step they
      // would take 4·NT more per lane and make the D = 128 loop spill.
      weights_tile_ex<true, C::BIAS, C::MASK>(st, p, w, head_of(s), key_block_boundary<BNK, BMQ>(p, kb, m0),
                                              ATTNLAB_MODIFIERS ? kind_of(s) : ATTNLAB_TILE_FULL, key0, m0, lane,
                                              [&](int, int j, int c) { return lse2[j * 8 + 2 * t + (c & 1)]; }, m);
      float dpt[C::MI][C::NT][4];
      qk_tile<C>(dpt, ka.q + L::KV_TILE, ka.k + L::Q_TILE + stage);
      pv_tile<C>(dv, st, ka.v + stage);
      if (any_dirty) {
        const int n = head_of(s);
        const i64 oa = w.b * p.o_strides[0] + n * p.o_strides[2] + m0 * p.o_strides[1];
#pragma unroll
        for (int i = 0; i < C::MI; ++i)
          add_non_finite_do<C::NT, C::DT, C::FP16>(dv[i], st[i], x.d_o + oa, p.o_strides[1], w.t_len - m0, p.Hv,
                                                   lane);
      }
      ds_tile(dpt, st, [&](int, int j, int c) { return dsum[j * 8 + 2 * t + (c & 1)]; });
      if constexpr (ATTNLAB_SCORE_MOD || C::BIAS != 0) {
        // P is spent: st takes Sᵀ = K·Qᵀ again where the modifier's gradient reads the raw score.
        if constexpr (ATTNLAB_SCORE_MOD && ATTNLAB_SCORE_MOD_NEEDS_SCORE) qk_tile<C>(st, ka.q, ka.k + stage);
        ds_mods_tile<true, C::BIAS, C::BIAS != 0>(dpt, st, p, x, w, head_of(s), key0, m0, lane, m);
      }
      pv_tile<C>(dk, dpt, ka.v - L::Q_TILE + stage);

      if constexpr (DQ) {
        u16* ds = reinterpret_cast<u16*>(smem + (ds_smem - k_smem));
#pragma unroll
        for (int i = 0; i < C::MI; ++i)
#pragma unroll
          for (int j = 0; j < C::NT; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int key = key0 - kn0 + i * 16 + g + 8 * (c >> 1);
              const int row = j * 8 + 2 * t + (c & 1);
              ds[row * L::DS_PITCH + key] = round16<C::FP16>(dpt[i][j][c]);
            }
        __syncthreads();  // dSᵀ complete
        const int mq = warp % L::MQ;
        const int col0 = (warp / L::MQ) * L::DQ_COLS;
        float dq[L::DQ_COLS / 8][4];
#pragma unroll
        for (int d = 0; d < L::DQ_COLS / 8; ++d)
#pragma unroll
          for (int c = 0; c < 4; ++c) dq[d][c] = 0.f;
        const u32 a_lane = ds_smem + ((mq * 16 + (lane & 15)) * L::DS_PITCH + (lane >> 4) * 8) * 2;
        const u32 b_lane = k_smem + (((lane & 7) + ((lane >> 3) & 1) * 8) * C::PITCH + (lane >> 4) * 8 + col0) * 2;
#pragma unroll
        for (int kk = 0; kk < BNK / 16; ++kk) {
          u32 a[4];
          ldmatrix_x4(a, a_lane + kk * 16 * 2);
#pragma unroll
          for (int d = 0; d < L::DQ_COLS / 8; d += 2) {
            u32 b[4];
            ldmatrix_x4_trans(b, b_lane + (kk * 16 * C::PITCH + d * 8) * 2);
            mma_16816<C::FP16>(dq[d], a, b[0], b[1]);
            mma_16816<C::FP16>(dq[d + 1], a, b[2], b[3]);
          }
        }
        const int n = head_of(s);
        float* acc = x.dq_accum + (static_cast<i64>(w.b) * p.T * p.N + n) * p.H;
        atomic_add_tile<L::DQ_COLS / 8>(acc, static_cast<i64>(p.N) * p.H, dq, m0 + mq * 16, col0, w.t_len, p.H,
                                        lane);
      }
      stage ^= L::STAGE;
      s = next_step(s);
    }
  }
  // Every key row of the block is written, zeros where no query sees it (padding included).
  u16* dk_out = x.dk + w.b * p.k_strides[0] + w.kv_head * p.k_strides[2];
  u16* dv_out = x.dv + w.b * p.v_strides[0] + w.kv_head * p.v_strides[2];
  store_tile<C::MI, C::DT, C::FP16>(dk_out, p.k_strides[1], dk, x.scale, key0, p.S, p.H, lane);
  store_tile<C::MI, C::DT, C::FP16>(dv_out, p.v_strides[1], dv, 1.f, key0, p.S, p.Hv, lane);
}
