// The deterministic dQ pass: the forward's shape (one block per BM query rows of one (batch, head),
// key tiles streamed last to first, schedule_tile's key range) with dQ kept in registers, so no two
// blocks ever add to the same element and the result is bitwise reproducible. Per key tile:
//   S  = Q·Kᵀ, P = 2^(S·scale·log2e − lse2)     qk_tile
//   dP = dO·Vᵀ, dS = P ∘ (dP − D)              qk_tile (A = the dO tile, B = V)
//   dQ += dS·K                                 pv_tile (K read transposed)
// K and V are double buffered (tile j−1 loads while tile j computes), as the forward's STAGES = 2.
// Bias, mask and modifiers as in the dK/dV loop (bwd_dkdv.cuh), without dBias (that loop adds it);
// a block mask's EMPTY key tiles are skipped as in the forward.
#pragma once
#include "flash/bwd_common.cuh"
#include "flash/mainloop.cuh"

template <class C>
struct BwdDqLayout {
  static constexpr u32 Q_TILE = C::BM * C::PITCH * 2;
  static constexpr u32 STAGE = 2 * C::KV_TILE_BYTES;
  // Q | dO | K0 | V0 | K1 | V1.
  static constexpr unsigned SHARED_BYTES = 2 * Q_TILE + 2 * STAGE;
};

template <class C>
__device__ __forceinline__ void flash_bwd_dq(const FlashParams& p, const FlashBwdParams& x, const FlashMods& m) {
  using L = BwdDqLayout<C>;
  static_assert(C::STAGES == 2, "the dQ pass double-buffers K and V");
  extern __shared__ __align__(16) unsigned char smem[];
  const u32 q_smem = smem_addr(smem);
  const u32 do_smem = q_smem + L::Q_TILE;
  const u32 k_smem = do_smem + L::Q_TILE;
  const u32 v_smem = k_smem + C::KV_TILE_BYTES;
  const TileWork w = schedule_tile<C::BM>(p);
  if (w.m0 >= p.T) return;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane >> 2;
  const int row0 = w.m0 + warp * 16 * C::MI;

  float dq[C::MI][C::DT][4];
#pragma unroll
  for (int i = 0; i < C::MI; ++i)
#pragma unroll
    for (int d = 0; d < C::DT; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) dq[i][d][c] = 0.f;

  if (w.n_lo < w.n_hi) {
    auto load_kv = [&](u32 offset, int n0) {
      load_kv_tiles<C::BN>(k_smem + offset, v_smem + offset, p, w, n0,
                           [](u32 dst, const u16* src, i64 stride, int rows, int cols) {
                             load_tile<C::BN, C::D, C::THREADS>(dst, src, stride, rows, cols);
                           });
    };
    const int block_lo = w.n_lo / C::BN;
    const int block_hi = (w.n_hi + C::BN - 1) / C::BN;
    auto kind_of = [&](int nb) {
      return tile_kind(m, w.b, w.n, w.m0, w.m_last, nb * C::BN, imin(nb * C::BN + C::BN, w.s_len) - 1);
    };
    auto next_tile = [&](int nb) {
      --nb;
      if constexpr (ATTNLAB_BLOCK_MASK) {
        while (nb >= block_lo && kind_of(nb) == ATTNLAB_TILE_EMPTY) --nb;
      }
      return nb;
    };
    const int first = next_tile(block_hi);
    // The tile in the other buffer pair (< block_lo when none): kept only with a block mask; without
    // one it is nb − 1, and an extra live register costs the D = 128 pass its spill-free allocation.
    int ahead = ATTNLAB_BLOCK_MASK && first < block_lo ? block_lo - 1 : next_tile(first);
    load_q_do_tiles<C::BM>(q_smem, do_smem, p, x, w.b, w.n, w.m0, w.t_len,
                           [](u32 dst, const u16* src, i64 stride, int rows, int cols) {
                             load_tile<C::BM, C::D, C::THREADS>(dst, src, stride, rows, cols);
                           });
    if (!ATTNLAB_BLOCK_MASK || first >= block_lo) load_kv(0, first * C::BN);
    cp_async_commit();
    if (ahead >= block_lo) load_kv(L::STAGE, ahead * C::BN);
    cp_async_commit();

    // Row statistics of this lane's rows g and g + 8 of each m-tile (t_pad covers the whole block).
    float lse_r[C::MI][2], d_r[C::MI][2];
    const i64 stats = (static_cast<i64>(w.b) * p.N + w.n) * x.t_pad;
#pragma unroll
    for (int i = 0; i < C::MI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        lse_r[i][h] = x.lse2[stats + row0 + i * 16 + g + 8 * h];
        d_r[i][h] = x.dsum[stats + row0 + i * 16 + g + 8 * h];
      }
    // Q as A against K; dO as A against V; K transposed as the B of dS·K.
    const LaneAddresses qa_l = lane_addresses<C>(q_smem, k_smem, k_smem, warp, lane);
    const LaneAddresses da_l = lane_addresses<C>(do_smem, v_smem, v_smem, warp, lane);

    u32 stage = 0;
    for (int nb = first; nb >= block_lo;) {
      const int n0 = nb * C::BN;
      const int after = ATTNLAB_BLOCK_MASK ? ahead : nb - 1;
      cp_async_wait<1>();  // tile nb landed; tile nb − 1 may still be in flight
      // K's NaN must not meet the zero dS of rows that do not see its key (bwd_common.cuh).
      zero_non_finite<C::BN, C::D, C::THREADS, C::FP16>(smem + 2 * L::Q_TILE + stage);
      __syncthreads();
      float s[C::MI][C::NT][4], dp[C::MI][C::NT][4];
      qk_tile<C>(s, qa_l.q, qa_l.k + stage);
      qk_tile<C>(dp, da_l.q, da_l.k + stage);
      weights_tile_ex<false, C::BIAS, C::MASK>(s, p, w, w.n, tile_needs_mask<C::BN>(p, w, n0),
                                               ATTNLAB_MODIFIERS ? kind_of(nb) : ATTNLAB_TILE_FULL, row0, n0, lane,
                                               [&](int i, int, int c) { return lse_r[i][c >> 1]; }, m);
      ds_tile(dp, s, [&](int i, int, int c) { return d_r[i][c >> 1]; });
      if constexpr (ATTNLAB_SCORE_MOD) {
        if constexpr (ATTNLAB_SCORE_MOD_NEEDS_SCORE) qk_tile<C>(s, qa_l.q, qa_l.k + stage);
        ds_mods_tile<false, C::BIAS, false>(dp, s, p, x, w, w.n, row0, n0, lane, m);
      }
      pv_tile<C>(dq, dp, qa_l.v + stage);
      __syncthreads();  // every warp is done with this buffer pair: refill it with the tile after `after`
      if constexpr (ATTNLAB_BLOCK_MASK) ahead = after >= block_lo ? next_tile(after) : block_lo - 1;
      const int refill = ATTNLAB_BLOCK_MASK ? ahead : nb - 2;
      if (refill >= block_lo) load_kv(stage, refill * C::BN);
      cp_async_commit();
      stage ^= L::STAGE;
      nb = after;
    }
  }
  u16* out = x.dq + w.b * p.q_strides[0] + w.n * p.q_strides[2];
  store_tile<C::MI, C::DT, C::FP16>(out, p.q_strides[1], dq, x.scale, row0, p.T, p.H, lane);
}
