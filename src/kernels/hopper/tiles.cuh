// The Hopper kernel's configuration and the steps its warpgroups take (hopper_fwd.cu runs them):
// the tile shapes and register split, the mbarrier ring, the wgmma chains of Q·Kᵀ and P·V, the
// conversion of S to P's A fragments, the zeroing of padded V rows and the epilogue.
#pragma once
#include "flash/epilogue.cuh"
#include "flash/mask.cuh"
#include "flash/schedule.cuh"
#include "hopper/softmax.cuh"
#include "hopper/wgmma.cuh"

template <int D_, int BN_, int STAGES_, bool FP16_, bool OVERLAP_, int BIAS_ = 0, bool MASK_ = false,
          int CONSUMERS_ = 2, bool PINGPONG_ = false, bool LATE_WAIT_ = false, bool DESC_STEP_ = false,
          bool GROUPED_ = false, int PERSISTENT_ = 0, int PROBE_ = 0, int SLACK_ = 0, int DV_ = D_>
struct HopperConfig {
  // D: the key head dim (Q and K: H rounded up to whole 64-column boxes); DV: the value head dim (V
  // and O: Hv rounded up the same way), D unless given. Q·Kᵀ runs D/16 k-steps, P·V is N = DV.
  static constexpr int D = D_, DV = DV_, BN = BN_, STAGES = STAGES_;
  static constexpr bool FP16 = FP16_, OVERLAP = OVERLAP_;
  static constexpr int BIAS = BIAS_;  // 0 none, else the bias element type (flash/params.cuh)
  static constexpr bool MASK = MASK_;
  // Consumer warpgroups of 64 query rows each (2: 128 rows, 3: 192 rows), plus the producer.
  static constexpr int CONSUMERS = CONSUMERS_, BM = 64 * CONSUMERS_;
  static constexpr int THREADS = 128 * (CONSUMERS_ + 1);
  // Registers per thread after setmaxnreg: the producer keeps 24, the consumers share the rest of
  // the 64K-register file (2: 24 + 2·240 = 504 of 512 per thread slot; 3: 24 + 3·160 = 504).
  // The dynamic grid's producer (PERSISTENT = 2) keeps 32: with 24, every variant with its
  // atomicAdd spilled 8–68 bytes (ptxas, sm_90a; a volatile load in its place spilled nothing), so
  // 2 consumers get 232 (the pool: (168 − 32)·128 freed ≥ (232 − 168)·256 asked) and 3 keep 160
  // ((128 − 32)·128 = (160 − 128)·384 exactly; FlashAttention-3's 32/160 split): 0 spills on every tile.
  static constexpr int PRODUCER_REGS = PERSISTENT_ == 2 ? 32 : 24;
  static constexpr int CONSUMER_REGS = CONSUMERS_ == 2 ? (PERSISTENT_ == 2 ? 232 : 240) : 160;
  // FlashAttention-3's ping-pong: the consumers issue their GEMMs in turn (named barriers 2, 3, …),
  // so one warpgroup's softmax runs while another's multiplies occupy the tensor cores.
  static constexpr bool PINGPONG = PINGPONG_;
  // docs/internals/hopper-forward.md. LATE_WAIT: the wait for P_{j−1}·V_{j−1} sits behind a
  // branch on the loop parity, in its own basic block after the softmax of tile j. In one block
  // ptxas schedules that wait (WARPGROUP.DEPBAR.LE gsb0, 0x0) at the top, before the softmax, so the
  // softmax never overlaps the warpgroup's own P·V (ncu, H=128: 9.8% of all stall samples on it).
  // DESC_STEP: the shared-memory descriptors of a tile are made once and stepped by adding the byte
  // offset >> 4 (the start-address field cannot carry: shared addresses are < 2^18), with the
  // consumer index made warp-uniform, so the turn issues its wgmmas without per-step address math.
  static constexpr bool LATE_WAIT = LATE_WAIT_, DESC_STEP = DESC_STEP_;
  // GROUPED: a 1-D grid walked longest-first across a group of heads whose K and V fit in L2
  // together (hopper_tile), instead of longest-first within each head (schedule.cuh's 2-D grid).
  static constexpr bool GROUPED = GROUPED_;
  // PERSISTENT (1 or 2): a 1-D grid of about one block per SM with the K/V ring, the Q barriers and
  // the ping-pong turns running on across work items (hopper_fwd). 1, static: block p runs items p,
  // p + gridDim.x, … in the 2-D grid's order. 2, DYNAMIC: block p runs item p, then
  // whatever a global atomic counter (HopperParams::work_counter, zeroed before each launch) hands
  // its producer next, in a longest-first order over L2-sized sections of heads (dynamic_tile);
  // the producer passes each item to the consumers through shared memory and the Q barriers.
  static constexpr bool PERSISTENT = PERSISTENT_ != 0, DYNAMIC = PERSISTENT_ == 2;
  static_assert(PERSISTENT_ >= 0 && PERSISTENT_ <= 2, "PERSISTENT is 0 (off), 1 (static) or 2 (dynamic)");
  static_assert(!(GROUPED && PERSISTENT), "one block order at a time");
  // Measurement probes for the harness only (wrong results on purpose; the library never sets one):
  // 1 skips the softmax (P = S), 2 loads K/V only into the first STAGES buffers and then reuses
  // them, so the timings without the exponentials or without the tile traffic can be taken apart.
  static constexpr int PROBE = PROBE_;
  // SLACK (FlashAttention-4's conditional rescale): a row keeps its running max while a
  // tile's max exceeds it by at most SLACK in base 2, so O is rescaled only when some row of the warp
  // moved further (hopper/softmax.cuh); 0 moves the max on every rise, as before.
  static constexpr int SLACK = SLACK_;
  static_assert(CONSUMERS == 2 || CONSUMERS == 3, "two or three consumer warpgroups");
  static_assert(!PINGPONG || OVERLAP, "ping-pong is scheduled on the overlapped loop");
  static constexpr int BOXES = D / 64, V_BOXES = DV / 64;  // 64-column TMA boxes per row of Q/K, of V
  static constexpr u32 Q_BYTES = BM * D * 2;
  static constexpr u32 K_BYTES = BN * D * 2, V_BYTES = BN * DV * 2;  // one stage's K tile, V tile
  static constexpr u32 Q_BOX = BM * 128, KV_BOX = BN * 128;  // bytes of one box
  static constexpr int NT = BN / 8, DT = DV / 8;             // accumulator n-tiles of S, of O
  static_assert(D % 64 == 0 && DV % 64 == 0 && D <= 256 && DV <= 256 && BN % 16 == 0 && BN <= 256, "tile shape");
  static_assert(KV_BOX % 1024 == 0, "each box must start on a 1024-byte swizzle atom");
};

// Shared memory of one block: 1024 bytes of slack to align the tiles, the tiles, the barriers (and
// the dynamic grid's item slot).
template <class C>
constexpr u32 hopper_smem_bytes() {
  return 1024 + C::Q_BYTES + C::STAGES * (C::K_BYTES + C::V_BYTES) + 8 * (2 + 4 * C::STAGES + (C::DYNAMIC ? 1 : 0));
}

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

// Writes the consumer's rows: O·(1/l) (zeros for rows past the batch's length or that saw no key)
// and the log-sum-exp. Straight from the accumulators: per 8 columns a quad writes 16 bytes of a
// row; at T=8192 the output is < 1% of the kernel's traffic-free time.
template <class C>
__device__ __forceinline__ void store_rows(const FlashParams& p, const TileWork& w, const float (&o)[C::DT][4],
                                           const float (&inv)[2], const float (&lse)[2], int row0, int lane) {
  u16* out = p.o + w.b * p.o_strides[0] + w.n * p.o_strides[2];
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= p.T) continue;
    // A select, not a multiply by 0: an empty or padding row is 0 whatever its accumulator holds.
    const bool write = row < w.t_len && inv[h] != 0.f;
    const bool finite_row = write && inv[h] == inv[h];  // inv is NaN for a NaN row
    u16* dst = out + row * p.o_strides[1] + 2 * t;
#pragma unroll
    for (int d = 0; d < C::DT; ++d) {
      if (8 * d >= p.Hv) break;  // columns past Hv (D rounds Hv up to 64) are TMA's zeros, not output
      float x[2] = {o[d][2 * h] * inv[h], o[d][2 * h + 1] * inv[h]};
      // A NaN element of a finite row can only be a hidden key's NaN/Inf value times its weight 0
      // inside P·V (the causal diagonal tile): recompute it over the keys the row sees
      // (flash/recompute.cuh). On finite inputs this is one compare per element, never taken.
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (finite_row && x[e] != x[e]) x[e] = recompute_element<C::FP16 ? 1 : 0, C::BIAS, C::MASK>(p, w.b, w.n, row, 8 * d + 2 * t + e);
      *reinterpret_cast<u32*>(dst + 8 * d) = write ? pack2<C::FP16>(x[0], x[1]) : 0u;
    }
    if (p.lse != nullptr && t == 0) p.lse[(static_cast<i64>(w.b) * p.T + row) * p.N + w.n] = row < w.t_len ? lse[h] : neg_inf();
  }
}
