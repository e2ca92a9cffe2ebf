// The steps the Hopper forward's consumers take on one tile (fwd_mainloop.cuh runs them): the
// mbarrier ring's addresses, the wgmma chains of Q·Kᵀ and P·V for a HopperConfig (fwd_config.cuh),
// the conversion of S to P's A fragments and the zeroing of padded V rows.
#pragma once
#include "flash/mma.cuh"
#include "flash/schedule.cuh"
#include "hopper/fwd_config.cuh"
#include "hopper/gen/wgmma.cuh"

// The N = BN (Q·Kᵀ) and N = DV (P·V) wgmma shapes.
template <class C>
__device__ __forceinline__ void qk_step(float (&s)[C::NT][4], u64 a, u64 b, int acc) {
  if constexpr (C::BN == 64) wgmma_ss_n64<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 80) wgmma_ss_n80<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 96) wgmma_ss_n96<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 112) wgmma_ss_n112<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 128) wgmma_ss_n128<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 144) wgmma_ss_n144<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 160) wgmma_ss_n160<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 176) wgmma_ss_n176<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 192) wgmma_ss_n192<C::FP16>(s, a, b, acc);
  else wgmma_ss_n256<C::FP16>(s, a, b, acc);
}
template <class C>
__device__ __forceinline__ void pv_step(float (&o)[C::DT][4], const u32 (&a)[4], u64 b) {
  if constexpr (C::DV == 64) wgmma_rs_n64<C::FP16>(o, a, b);
  else if constexpr (C::DV == 128) wgmma_rs_n128<C::FP16>(o, a, b);
  else if constexpr (C::DV == 192) wgmma_rs_n192<C::FP16>(o, a, b);
  else wgmma_rs_n256<C::FP16>(o, a, b);
}

// Barrier addresses: q_full, then per stage k_full, k_empty, v_full, v_empty, then q_empty (the
// persistent grid's: Q is free for the next item).
struct Barriers {
  u32 base;
  int stages;
  __device__ __forceinline__ u32 q_full() const { return base; }
  __device__ __forceinline__ u32 k_full(int s) const { return base + 8 + 32 * s; }
  __device__ __forceinline__ u32 k_empty(int s) const { return base + 16 + 32 * s; }
  __device__ __forceinline__ u32 v_full(int s) const { return base + 24 + 32 * s; }
  __device__ __forceinline__ u32 v_empty(int s) const { return base + 32 + 32 * s; }
  __device__ __forceinline__ u32 q_empty() const { return base + 8 + 32 * stages; }
  // Not a barrier: the dynamic grid's next work item (an int), written by the producer between its
  // q_empty wait and its q_full arrival, read by the consumers after their q_full wait.
  __device__ __forceinline__ u32 item_slot() const { return base + 16 + 32 * stages; }
};

// Zeroes V rows [kv_len, S) of the tile at key n0 (real memory of a padded batch; rows past S are
// TMA's zeros already). The consumer warpgroups share the work and meet at named barrier 1; only the
// first tile a block visits can hold such rows (n_hi ≤ kv_len), so this runs once per block at most.
template <class C>
__device__ __forceinline__ void zero_padded_values(const FlashParams& p, const TileWork& w, u32 v_tile, int n0,
                                                   int consumer_thread) {
  const int lo = imax(w.s_len - n0, 0);
  const int hi = imin(C::BN, p.S - n0);
  if (lo >= hi) return;  // uniform over both warpgroups: the same tile, the same lengths
  const int chunks = (hi - lo) * 8;  // 16-byte chunks per box (a swizzle only permutes within a row)
  for (int i = consumer_thread; i < chunks * C::V_BOXES; i += 128 * C::CONSUMERS) {
    const int box = i / chunks, r = lo + (i % chunks) / 8, c = i % 8;
    st_shared_zero16(v_tile + box * C::KV_BOX + r * 128 + c * 16);
  }
  fence_proxy_async();
  named_barrier_sync(1, 128 * C::CONSUMERS);
}

template <class C>
__device__ __forceinline__ void qk_issue(float (&s)[C::NT][4], u32 q_rows, u32 k_tile) {
  const u64 q_desc = sw128_desc(q_rows, 16, 1024), k_desc = sw128_desc(k_tile, 16, 1024);
#pragma unroll
  for (int k = 0; k < C::D / 16; ++k) {
    const u32 col = (k % 4) * 32, box = k / 4;
    if constexpr (C::DESC_STEP)
      qk_step<C>(s, q_desc + ((box * C::Q_BOX + col) >> 4), k_desc + ((box * C::KV_BOX + col) >> 4), k > 0);
    else
      qk_step<C>(s, sw128_desc(q_rows + box * C::Q_BOX + col, 16, 1024),
                 sw128_desc(k_tile + box * C::KV_BOX + col, 16, 1024), k > 0);
  }
}
template <class C>
__device__ __forceinline__ void pv_issue(float (&o)[C::DT][4], const u32 (&pa)[C::BN / 16][4], u32 v_tile) {
  const u64 v_desc = sw128_desc(v_tile, C::KV_BOX, 1024);
#pragma unroll
  for (int kk = 0; kk < C::BN / 16; ++kk)
    pv_step<C>(o, pa[kk], C::DESC_STEP ? v_desc + kk * (2048 >> 4) : sw128_desc(v_tile + kk * 2048, C::KV_BOX, 1024));
}
// wgmma.wait_group 0 with a different asm text, so that the two waits of LATE_WAIT's parity branch
// stay two (identical inline asms in both arms would be hoisted above the branch).
__device__ __forceinline__ void wgmma_wait_all_odd() {
  asm volatile("wgmma.wait_group.sync.aligned 0; // odd tile\n" ::: "memory");
}
template <class C>
__device__ __forceinline__ void to_a_fragments(u32 (&pa)[C::BN / 16][4], const float (&s)[C::NT][4]) {
#pragma unroll
  for (int kk = 0; kk < C::BN / 16; ++kk) {
    pa[kk][0] = pack2<C::FP16>(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = pack2<C::FP16>(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = pack2<C::FP16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = pack2<C::FP16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}
template <int KS>
__device__ __forceinline__ void keep_fragments(u32 (&pa)[KS][4]) {
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+r"(pa[kk][c])::"memory");
}
