// attnlab-min-arch: sm_90a
//
// Hopper forward kernel (sm_90a): softmax(Q·Kᵀ·scale)·V with wgmma, TMA and warp specialisation.
//
// One block owns 128 query rows of one (batch, head) and runs three warpgroups:
//   warpgroup 0, the producer: one thread issues TMA loads (cp.async.bulk.tensor) of the Q tile once
//     and of the K and V tiles into a ring of STAGES buffers; each load completes on an mbarrier
//     ("full"), and a buffer is refilled only after both consumers released it ("empty"). It keeps
//     24 registers (setmaxnreg), so the consumers get 240.
//   warpgroups 1 and 2, the consumers: 64 query rows each. S = Q·Kᵀ is one wgmma chain with A and B
//     from shared memory; the online softmax runs on the accumulators in registers; P (bf16/fp16,
//     still in registers) times V is a second wgmma chain with A from registers.
// OVERLAP = 1 (FlashAttention-3's intra-warpgroup pipelining): Q·K_{j+1}ᵀ is issued before P_j·V_j,
// so the tensor cores multiply while the softmax of the next tile runs; O's rescale waits for P·V.
//
// Shared memory: Q (128 × D), then STAGES K tiles, STAGES V tiles (BN × D), each a row of boxes of
// 64 columns (128 bytes) with the 128-byte swizzle, then the mbarriers. Keys are visited last tile
// first, as the mma.sync kernel does (schedule.cuh), so the masked tiles come first.
//
// Padding: TMA fills rows past T or S with zeros. Keys in [kv_len, S) of a batch are real memory:
// their logits are masked to −inf, and their V rows are zeroed in shared memory before P·V, since
// 0 · NaN would otherwise leak a padded NaN into every row.
//
// Head dims: H and Hv round up to HOPPER_D (64, 128, 256); TMA reads the columns past them as zeros
// (nothing added to Q·Kᵀ, zero output columns that are not stored).
//
// NaN rule: a NaN output element of a finite row can only be a hidden key's NaN/Inf value times its
// weight 0 inside P·V (causal diagonal, window edge, mask, −inf bias); the epilogue recomputes such
// elements over the visible keys (flash/recompute.cuh), at one compare per element otherwise.
//
// Specialisation: HOPPER_D, HOPPER_BN, HOPPER_STAGES, HOPPER_FP16, HOPPER_OVERLAP, HOPPER_BIAS (the
// bias element code, 0 none) and HOPPER_MASK define the extern "C" entry attnlab_hopper_fwd. With -DATTNLAB_NVCC_TEST the file
// instantiates the table's variants instead.
#include "flash/epilogue.cuh"
#include "flash/mask.cuh"
#include "flash/schedule.cuh"
#include "hopper/softmax.cuh"
#include "hopper/wgmma.cuh"

struct HopperParams {
  TmaDesc tm_q;  // (H, T, N, B) boxes of 64 × 128 rows
  TmaDesc tm_k;  // (H, S, K, B) boxes of 64 × BN rows
  TmaDesc tm_v;  // (Hv, S, K, B) boxes of 64 × BN rows
  FlashParams f;
};
// 3 tensor maps (128 bytes each) + FlashParams (280), rounded up to the maps' 64-byte alignment.
static_assert(sizeof(HopperParams) == 704, "HopperParams layout changed: update src/backends/cuda/flash/hopper.ts");

template <int D_, int BN_, int STAGES_, bool FP16_, bool OVERLAP_, int BIAS_ = 0, bool MASK_ = false>
struct HopperConfig {
  static constexpr int D = D_, BN = BN_, STAGES = STAGES_, BM = 128;
  static constexpr bool FP16 = FP16_, OVERLAP = OVERLAP_;
  static constexpr int BIAS = BIAS_;  // 0 none, else the bias element type (flash/params.cuh)
  static constexpr bool MASK = MASK_;
  static constexpr int THREADS = 384;
  static constexpr int BOXES = D / 64;                      // 64-column TMA boxes per row
  static constexpr u32 Q_BYTES = BM * D * 2;
  static constexpr u32 KV_BYTES = BN * D * 2;
  static constexpr u32 Q_BOX = BM * 128, KV_BOX = BN * 128;  // bytes of one box
  static constexpr int NT = BN / 8, DT = D / 8;
  static_assert(D % 64 == 0 && BN % 16 == 0 && BN <= 256, "tile shape");
  static_assert(KV_BOX % 1024 == 0, "each box must start on a 1024-byte swizzle atom");
};

// Shared memory of one block: 1024 bytes of slack to align the tiles, the tiles, the barriers.
template <class C>
constexpr u32 hopper_smem_bytes() {
  return 1024 + C::Q_BYTES + 2 * C::STAGES * C::KV_BYTES + 8 * (1 + 4 * C::STAGES);
}

// The N = BN (Q·Kᵀ) and N = D (P·V) wgmma shapes.
template <class C>
__device__ __forceinline__ void qk_step(float (&s)[C::NT][4], u64 a, u64 b, int acc) {
  if constexpr (C::BN == 64) wgmma_ss_n64<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 80) wgmma_ss_n80<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 96) wgmma_ss_n96<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 128) wgmma_ss_n128<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 144) wgmma_ss_n144<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 160) wgmma_ss_n160<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 176) wgmma_ss_n176<C::FP16>(s, a, b, acc);
  else if constexpr (C::BN == 192) wgmma_ss_n192<C::FP16>(s, a, b, acc);
  else wgmma_ss_n256<C::FP16>(s, a, b, acc);
}
template <class C>
__device__ __forceinline__ void pv_step(float (&o)[C::DT][4], const u32 (&a)[4], u64 b) {
  if constexpr (C::D == 64) wgmma_rs_n64<C::FP16>(o, a, b);
  else if constexpr (C::D == 128) wgmma_rs_n128<C::FP16>(o, a, b);
  else wgmma_rs_n256<C::FP16>(o, a, b);
}

// Barrier addresses: q_full, then per stage k_full, k_empty, v_full, v_empty.
struct Barriers {
  u32 base;
  __device__ __forceinline__ u32 q_full() const { return base; }
  __device__ __forceinline__ u32 k_full(int s) const { return base + 8 + 32 * s; }
  __device__ __forceinline__ u32 k_empty(int s) const { return base + 16 + 32 * s; }
  __device__ __forceinline__ u32 v_full(int s) const { return base + 24 + 32 * s; }
  __device__ __forceinline__ u32 v_empty(int s) const { return base + 32 + 32 * s; }
};

template <class C>
__device__ __forceinline__ void produce(const HopperParams& hp, const TileWork& w, u32 sq, u32 sk, u32 sv,
                                        const Barriers& bar, int block_lo, int block_hi) {
  tma_prefetch_desc(&hp.tm_q);
  tma_prefetch_desc(&hp.tm_k);
  tma_prefetch_desc(&hp.tm_v);
  mbar_arrive_expect_tx(bar.q_full(), C::Q_BYTES);
#pragma unroll
  for (int c = 0; c < C::BOXES; ++c) tma_load_4d(sq + c * C::Q_BOX, &hp.tm_q, bar.q_full(), c * 64, w.m0, w.n, w.b);
  int it = 0;
  for (int nb = block_hi - 1; nb >= block_lo; --nb, ++it) {
    const int s = it % C::STAGES;
    const u32 phase = (it / C::STAGES) & 1;
    const u32 k_dst = sk + s * C::KV_BYTES, v_dst = sv + s * C::KV_BYTES;
    mbar_wait(bar.k_empty(s), phase ^ 1);
    mbar_arrive_expect_tx(bar.k_full(s), C::KV_BYTES);
#pragma unroll
    for (int c = 0; c < C::BOXES; ++c)
      tma_load_4d(k_dst + c * C::KV_BOX, &hp.tm_k, bar.k_full(s), c * 64, nb * C::BN, w.kv_head, w.b);
    mbar_wait(bar.v_empty(s), phase ^ 1);
    mbar_arrive_expect_tx(bar.v_full(s), C::KV_BYTES);
#pragma unroll
    for (int c = 0; c < C::BOXES; ++c)
      tma_load_4d(v_dst + c * C::KV_BOX, &hp.tm_v, bar.v_full(s), c * 64, nb * C::BN, w.kv_head, w.b);
  }
}

// Zeroes V rows [kv_len, S) of the tile at key n0 (real memory of a padded batch; rows past S are
// TMA's zeros already). Both consumer warpgroups share the work and meet at named barrier 1.
template <class C>
__device__ __forceinline__ void zero_padded_values(const FlashParams& p, const TileWork& w, u32 v_tile, int n0,
                                                   int consumer_thread) {
  const int lo = imax(w.s_len - n0, 0);
  const int hi = imin(C::BN, p.S - n0);
  if (lo >= hi) return;  // uniform over both warpgroups: the same tile, the same lengths
  const int chunks = (hi - lo) * 8;  // 16-byte chunks per box (a swizzle only permutes within a row)
  for (int i = consumer_thread; i < chunks * C::BOXES; i += 256) {
    const int box = i / chunks, r = lo + (i % chunks) / 8, c = i % 8;
    st_shared_zero16(v_tile + box * C::KV_BOX + r * 128 + c * 16);
  }
  fence_proxy_async();
  named_barrier_sync(1, 256);
}

template <class C>
__device__ __forceinline__ void qk_issue(float (&s)[C::NT][4], u32 q_rows, u32 k_tile) {
#pragma unroll
  for (int k = 0; k < C::D / 16; ++k) {
    const u32 col = (k % 4) * 32, box = k / 4;
    qk_step<C>(s, sw128_desc(q_rows + box * C::Q_BOX + col, 16, 1024),
               sw128_desc(k_tile + box * C::KV_BOX + col, 16, 1024), k > 0);
  }
}
template <class C>
__device__ __forceinline__ void pv_issue(float (&o)[C::DT][4], const u32 (&pa)[C::BN / 16][4], u32 v_tile) {
#pragma unroll
  for (int kk = 0; kk < C::BN / 16; ++kk) pv_step<C>(o, pa[kk], sw128_desc(v_tile + kk * 2048, C::KV_BOX, 1024));
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

template <class C>
__device__ __forceinline__ void consume(const FlashParams& p, const TileWork& w, u32 sq, u32 sk, u32 sv,
                                        const Barriers& bar, int block_lo, int block_hi, int consumer) {
  const int thread = threadIdx.x % 128;
  const int lane = thread % 32;
  const int row0 = w.m0 + consumer * 64 + (thread / 32) * 16;  // first row of this warp
  const u32 q_rows = sq + consumer * 64 * 128;                  // this warpgroup's 64 rows in each Q box
  float o[C::DT][4];
#pragma unroll
  for (int d = 0; d < C::DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  RowSoftmax<C::NT> softmax;
  softmax.init();
  float alpha[2];
  float s[C::NT][4];
  u32 pa[C::BN / 16][4];

  // Logits of tile nb into base-2 weights (s overwritten); returns whether O must be rescaled.
  auto softmax_tile = [&](int nb) {
    const int n0 = nb * C::BN;
    float (&s3)[1][C::NT][4] = reinterpret_cast<float (&)[1][C::NT][4]>(s);
    const float factor = scale_and_mask<1, C::NT, C::BIAS, C::MASK>(s3, p, w, row0, n0, lane, tile_needs_mask<C::BN>(p, w, n0));
    return softmax.update(s, factor, alpha);
  };
  auto release = [&](u32 empty) {
    if (lane == 0) mbar_arrive(empty);
  };
  auto wait_values = [&](int it, int nb) {
    const int st = it % C::STAGES;
    mbar_wait(bar.v_full(st), (it / C::STAGES) & 1);
    if (p.kv_lens != nullptr) zero_padded_values<C>(p, w, sv + st * C::KV_BYTES, nb * C::BN, consumer * 128 + thread);
  };

  // The register writes to O (rescale) and P must stay before wgmma.fence: pinning them with empty
  // volatile asms keeps the compiler from sinking them past it (ptxas would then add a second
  // warpgroup.arrive, C7519).
  auto fence_operands = [&]() {
    fence_accumulators(o);
    keep_fragments(pa);
    wgmma_fence();
  };

  mbar_wait(bar.q_full(), 0);
  const int tiles = block_hi - block_lo;
  if constexpr (!C::OVERLAP) {
    for (int it = 0; it < tiles; ++it) {
      const int nb = block_hi - 1 - it, st = it % C::STAGES;
      const u32 phase = (it / C::STAGES) & 1;
      mbar_wait(bar.k_full(st), phase);
      fence_operands();
      qk_issue<C>(s, q_rows, sk + st * C::KV_BYTES);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(s);
      release(bar.k_empty(st));
      if (softmax_tile(nb)) RowSoftmax<C::NT>::rescale(o, alpha);
      to_a_fragments<C>(pa, s);
      wait_values(it, nb);
      fence_operands();
      pv_issue<C>(o, pa, sv + st * C::KV_BYTES);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(o);
      keep_fragments(pa);
      release(bar.v_empty(st));
    }
  } else {
    // Prologue: S_0 and its softmax (O is still 0: no rescale needed).
    mbar_wait(bar.k_full(0), 0);
    wgmma_fence();
    qk_issue<C>(s, q_rows, sk);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(s);
    release(bar.k_empty(0));
    softmax_tile(block_hi - 1);
    to_a_fragments<C>(pa, s);
    for (int it = 1; it < tiles; ++it) {
      const int nb = block_hi - 1 - it, st = it % C::STAGES, prev = (it - 1) % C::STAGES;
      mbar_wait(bar.k_full(st), (it / C::STAGES) & 1);
      fence_operands();
      qk_issue<C>(s, q_rows, sk + st * C::KV_BYTES);  // S_it = Q·K_itᵀ
      wgmma_commit();
      wait_values(it - 1, nb + 1);
      fence_operands();  // the zeroing branch above may have moved O or P between registers
      pv_issue<C>(o, pa, sv + prev * C::KV_BYTES);  // O += P_{it−1}·V_{it−1}
      wgmma_commit();
      wgmma_wait<1>();  // S_it is ready; P·V may still run
      fence_accumulators(s);
      release(bar.k_empty(st));
      const bool moved = softmax_tile(nb);
      wgmma_wait<0>();  // P_{it−1}·V_{it−1} done: O and P's registers are free
      fence_accumulators(o);
      keep_fragments(pa);
      release(bar.v_empty(prev));
      if (moved) RowSoftmax<C::NT>::rescale(o, alpha);
      to_a_fragments<C>(pa, s);
    }
    const int last = (tiles - 1) % C::STAGES;
    wait_values(tiles - 1, block_lo);
    fence_operands();
    pv_issue<C>(o, pa, sv + last * C::KV_BYTES);
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(o);
    keep_fragments(pa);
    release(bar.v_empty(last));
  }
  float inv[2], lse[2];
  softmax.finish(inv, lse);
  store_rows<C>(p, w, o, inv, lse, row0, lane);
}

template <class C>
__device__ __forceinline__ void hopper_fwd(const HopperParams& hp) {
  const FlashParams& p = hp.f;
  const TileWork w = schedule_tile<C::BM>(p);
  if (w.m0 >= p.T) return;
  if (w.n_lo >= w.n_hi) {
    store_empty_block<C::BM, C::THREADS>(p, w);
    return;
  }
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 sq = (smem_addr(smem) + 1023) & ~1023u;
  const u32 sk = sq + C::Q_BYTES;
  const u32 sv = sk + C::STAGES * C::KV_BYTES;
  const Barriers bar{sv + C::STAGES * C::KV_BYTES};
  if (threadIdx.x == 0) {
    mbar_init(bar.q_full(), 1);
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(bar.k_full(s), 1);
      mbar_init(bar.v_full(s), 1);
      mbar_init(bar.k_empty(s), 8);  // one arrival per consumer warp
      mbar_init(bar.v_empty(s), 8);
    }
    mbar_fence_init();
  }
  __syncthreads();
  const int block_lo = w.n_lo / C::BN;
  const int block_hi = (w.n_hi + C::BN - 1) / C::BN;
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_decrease<24>();
    if (threadIdx.x == 0) produce<C>(hp, w, sq, sk, sv, bar, block_lo, block_hi);
  } else {
    regs_increase<240>();
    consume<C>(p, w, sq, sk, sv, bar, block_lo, block_hi, warpgroup - 1);
  }
}

#ifdef HOPPER_D
extern "C" __global__ void __launch_bounds__(384, 1) attnlab_hopper_fwd(const __grid_constant__ HopperParams p) {
  hopper_fwd<HopperConfig<HOPPER_D, HOPPER_BN, HOPPER_STAGES, HOPPER_FP16 != 0, HOPPER_OVERLAP != 0, HOPPER_BIAS,
                          HOPPER_MASK != 0>>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C>
__global__ void __launch_bounds__(384, 1) hopper_fwd_test(const __grid_constant__ HopperParams p) {
  hopper_fwd<C>(p);
}
template __global__ void hopper_fwd_test<HopperConfig<64, 128, 2, false, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, true, false>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<256, 80, 2, false, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true, 1, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<256, 80, 2, true, true, 2, false>>(const __grid_constant__ HopperParams);
#endif
