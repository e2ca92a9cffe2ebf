// The two tensor-core steps of one key tile, for one warp: S = Q·Kᵀ and O += P·V, with the
// ldmatrix lane addressing they share. The caller owns the pipeline (flash_fwd.cu).
#pragma once
#include "flash/copy.cuh"

template <int D_, int BM_, int BN_, int NW_, int STAGES_, bool FP16_, int BIAS_, bool MASK_>
struct FlashConfig {
  static constexpr int D = D_, BM = BM_, BN = BN_, NW = NW_, STAGES = STAGES_, BIAS = BIAS_;
  static constexpr bool FP16 = FP16_, MASK = MASK_;
  static constexpr int THREADS = NW * 32;
  static constexpr int MI = BM / (16 * NW);  // 16-row m-tiles per warp
  static constexpr int NT = BN / 8;          // 8-key n-tiles of S
  static constexpr int DT = D / 8;           // 8-column n-tiles of O
  static constexpr int PITCH = SmemTile<D>::PITCH;
  static constexpr int KV_TILE_BYTES = BN * PITCH * 2;  // one K or one V tile in shared memory
  // Dynamic shared memory of one block, Q | K0 | V0 (| K1 | V1), as flash_fwd lays it out; the
  // host reads it back (attnlab_flash_fwd_shared_bytes) instead of trusting its own formula.
  static constexpr unsigned SHARED_BYTES = BM * PITCH * 2 + STAGES * 2 * KV_TILE_BYTES;
  static_assert(D % 16 == 0 && D >= 32 && D <= 256, "D: a multiple of 16 in [32, 256]");
  static_assert(BM % (16 * NW) == 0 && MI >= 1, "BM: a multiple of 16 rows per warp");
  static_assert(BN % 16 == 0, "BN: a multiple of 16 (one k-step of P·V)");
  static_assert(STAGES == 1 || STAGES == 2, "STAGES: 1 (FA2's K/V overlap) or 2 (double buffer)");
};

// Per-lane ldmatrix addresses (bytes in the shared window), fixed for the whole key loop.
struct LaneAddresses {
  u32 q, k, v;
};

template <class C>
__device__ __forceinline__ LaneAddresses lane_addresses(u32 q_smem, u32 k_smem, u32 v_smem, int warp, int lane) {
  LaneAddresses a;
  // A (Q): lanes 0–15 address rows 0–15 at column 0, lanes 16–31 the same rows at column 8.
  a.q = q_smem + ((warp * 16 * C::MI + (lane & 15)) * C::PITCH + (lane >> 4) * 8) * 2;
  // B (K, not transposed): matrices (keys 0–7, d 0–7), (keys 0–7, d 8–15), (keys 8–15, d 0–7), (8–15, 8–15).
  a.k = k_smem + (((lane & 7) + ((lane >> 4) << 3)) * C::PITCH + ((lane >> 3) & 1) * 8) * 2;
  // B (V, transposed): matrices (keys 0–7, d 0–7), (keys 8–15, d 0–7), (keys 0–7, d 8–15), (8–15, 8–15).
  a.v = v_smem + (((lane & 7) + ((lane >> 3) & 1) * 8) * C::PITCH + (lane >> 4) * 8) * 2;
  return a;
}

// s = Q·Kᵀ for the warp's 16·MI rows and the tile's BN keys. Q is re-read from shared memory at
// every tile: holding it in registers would take D/2·MI more per lane (64 at D=128, MI=2).
template <class C>
__device__ __forceinline__ void qk_tile(float (&s)[C::MI][C::NT][4], u32 q_lane, u32 k_lane) {
#pragma unroll
  for (int i = 0; i < C::MI; ++i)
#pragma unroll
    for (int j = 0; j < C::NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[i][j][c] = 0.f;
#pragma unroll
  for (int kk = 0; kk < C::D / 16; ++kk) {
    u32 a[C::MI][4];
#pragma unroll
    for (int i = 0; i < C::MI; ++i) ldmatrix_x4(a[i], q_lane + (i * 16 * C::PITCH + kk * 16) * 2);
#pragma unroll
    for (int j = 0; j < C::NT; j += 2) {
      u32 b[4];
      ldmatrix_x4(b, k_lane + (j * 8 * C::PITCH + kk * 16) * 2);
#pragma unroll
      for (int i = 0; i < C::MI; ++i) {
        mma_16816<C::FP16>(s[i][j], a[i], b[0], b[1]);
        mma_16816<C::FP16>(s[i][j + 1], a[i], b[2], b[3]);
      }
    }
  }
}

// o += P·V, P being the softmax weights left in s by OnlineSoftmax::update.
template <class C>
__device__ __forceinline__ void pv_tile(float (&o)[C::MI][C::DT][4], const float (&s)[C::MI][C::NT][4], u32 v_lane) {
#pragma unroll
  for (int kk = 0; kk < C::BN / 16; ++kk) {
    // The S accumulators of n-tiles 2kk and 2kk+1 are exactly the A fragment of keys 16kk..16kk+15.
    u32 a[C::MI][4];
#pragma unroll
    for (int i = 0; i < C::MI; ++i) {
      a[i][0] = pack2<C::FP16>(s[i][2 * kk][0], s[i][2 * kk][1]);
      a[i][1] = pack2<C::FP16>(s[i][2 * kk][2], s[i][2 * kk][3]);
      a[i][2] = pack2<C::FP16>(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
      a[i][3] = pack2<C::FP16>(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
    }
#pragma unroll
    for (int d = 0; d < C::DT; d += 2) {
      u32 b[4];
      ldmatrix_x4_trans(b, v_lane + (kk * 16 * C::PITCH + d * 8) * 2);
#pragma unroll
      for (int i = 0; i < C::MI; ++i) {
        mma_16816<C::FP16>(o[i][d], a[i], b[0], b[1]);
        mma_16816<C::FP16>(o[i][d + 1], a[i], b[2], b[3]);
      }
    }
  }
}
