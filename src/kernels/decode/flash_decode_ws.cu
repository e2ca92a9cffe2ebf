// The heads kernel (flash_decode_heads.cu) with a producer warp: the same whole-token-row bulk copies,
// row tiles, online softmax and shared-memory merge, but no block-wide barrier per tile. The
// experiment for paged MQA (K=1), harness only (benchmarks/harnesses/decode-kernel.cu; the library does not run it).
//
// Why (docs/internals/decode.md): at K=1 each 512-byte K+V token row serves 32 query heads, 4
// m16n8k16 MMAs per key, and heads1.4x32.s3 reads 2.99 TB/s dense = 23.4 GB/s per SM over 128 SMs,
// ~43 SM clocks per key (1.98 GHz) where 4.3 TB/s needs ~30. Its 8 warps issue ~31 warp-instructions
// per key (ptx of the loop: 64 mma, 32 ldmatrix.x4, ~400 softmax/address/loader ops per warp per
// 128-key tile), 4 schedulers could issue them in ~8 clocks: the warps wait, not the pipes. Every tile
// starts with __syncthreads after which all 256 threads issue the tile's 256 row copies, then every
// warp runs the same phase at once (QK mma chains 8 deep, softmax shuffles and MUFU, P·V): 2 warps per
// scheduler in lockstep hide little. heads1.4x16.s5 (64-key tiles, same bytes per key) reads 2.19
// against 2.99: the fit time/key = a + b/TK gives b ≈ 2000 clocks per tile, a ≈ 27 per key.
// Here:
// - warp CONSUMERS (the last) is the producer: it waits a stage's `empty` barrier (one arrival per
//   consumer warp), zero-fills rows past the key range, issues the tile's K and V row copies (lane ℓ:
//   keys ℓ, ℓ+32, …; the paged table entries of the next tile loaded before the wait) and arms the
//   stage's `full` barrier with the bytes;
// - consumer warps wait `full`, compute as the heads kernel does, and release the stage (`empty`)
//   after their P·V: no warp waits for another during the loop, so one warp's softmax can overlap
//   another's MMAs and the copies never sit on a consumer's path;
// - QSMEM: Q's fragments come from shared memory by ldmatrix (one 16×16 A tile per k-step) instead of
//   32 registers, so 16 consumer warps (17 with the producer: ≤ 120 registers a thread) or two blocks
//   of 8 per SM fit the register file; MINB: the blocks per SM the launch bounds ask for;
// - FAST: the softmax of ws_softmax below (a shorter dependent chain and fewer instructions per key).
#ifndef ATTNLAB_FLASH_DECODE_WS_CU
#define ATTNLAB_FLASH_DECODE_WS_CU
#include "decode/decode_tma.cuh"
#include "decode/decode_warp.cuh"

// PRODUCERS: producer warps of the row copies, warps CONSUMERS … CONSUMERS + PRODUCERS − 1, splitting a
// tile's rows by 32-row chunks (measured: one producer warp issues ~68 clocks per row copy, 256 a
// 128-key tile, and ws1.4x32.s3f read 0.33× of heads1.4x32.s3). TMA: the tile as a handful of tensor
// copies instead (decode_tma.cuh; HB = 1, D = DV = 128, one producer warp): unpadded 128-byte-swizzled
// halves, read through Sw128Layout.
template <int D, int DV, bool FP16, int HB, int RTH, int SLICES, int KPW, int STAGES, bool QSMEM, int MINB,
          bool FAST = false, int PRODUCERS = 1, bool TMA = false, int GROUP = 0, int LOADONLY = 0, int ROWGROUPS = 1,
          bool MULTICAST = false>
struct WsConfig {
  static constexpr int D_ = D, DV_ = DV, HB_ = HB, RTH_ = RTH, SLICES_ = SLICES, KPW_ = KPW, STAGES_ = STAGES;
  static constexpr bool QSMEM_ = QSMEM, FAST_ = FAST, TMA_ = TMA;
  // harness only: 1, the consumers only release the stages; 2, nor load Q before nor merge after the loop
  static constexpr int LOADONLY_ = LOADONLY;
  static constexpr int GROUP_ = GROUP;  // TMA: rows a box moves both halves of (0: a box a half, decode_tma.cuh)
  // ROWGROUPS: blocks that share one key range, each with TILES row tiles of the head's rows (rank·TILES·16 …),
  // adjacent in the grid's x (split · ROWGROUPS + rank), each reading the whole range: the second read of a
  // tile hits the L2, and a row group replaces a split and its share of the combine (benchmarks/results/
  // benchmarks/results/h200/decode/2026-12-02-k1-loop-overheads: B=64 S=16k K=1 dense 3910 → 4175 GB/s with one split instead of two)
  static constexpr int ROWGROUPS_ = ROWGROUPS;
  // MULTICAST: the row group's two blocks as one cluster of two CTAs (the kernel's __cluster_dims__), its
  // producers each copying half of every tile into both (tma_produce): one read of a tile from the L2 for the
  // pair, and the pair in step by construction (decode-tma.ts, tmaMulticast; past ROW_GROUP_MAX_KEYS a block the
  // one-block form still reads more, benchmarks/results/h200/decode/2026-12-02-1m-tokens-k1-multicast)
  static constexpr bool MULTICAST_ = MULTICAST;
  static constexpr int MINB_ = MINB, PRODUCERS_ = PRODUCERS;
  static constexpr int TILES = HB * RTH;
  static constexpr int CONSUMERS = TILES * SLICES;
  static constexpr int THREADS = (CONSUMERS + PRODUCERS) * 32;
  static constexpr int TK = KPW * SLICES;
  static constexpr int KEYS_PER_LANE = (TK + 32 * PRODUCERS - 1) / (32 * PRODUCERS);  // a producer lane's keys
  static constexpr int PITCH = TMA ? HB * D : HB * D + 8;  // padded token rows, as HeadsConfig (TMA: swizzled)
  static constexpr int PITCHV = TMA ? HB * DV : HB * DV + 8;
  static constexpr int Q_PITCH = D + 8;
  static constexpr int BAR_BYTES = 128;                  // full[8], empty[8]
  static constexpr int Q_BYTES = QSMEM ? TILES * 16 * Q_PITCH * 2 : 0;
  static constexpr int ALIGN_BYTES = TMA ? 1024 : 0;     // the stages start 1024-byte aligned (the swizzle atom)
  static constexpr int K_BYTES = TK * PITCH * 2;
  static constexpr int V_BYTES = TK * PITCHV * 2;
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int LOOP_BYTES = STAGES * STAGE_BYTES;
  static constexpr int MERGE_BYTES = CONSUMERS * 16 * (DV + 2) * 4;
  static constexpr int SMEM =
      BAR_BYTES + Q_BYTES + ALIGN_BYTES + (LOOP_BYTES > MERGE_BYTES ? LOOP_BYTES : MERGE_BYTES);
  static constexpr int KT = D / 16;
  static constexpr int DT = DV / 8;
  static_assert(D % 16 == 0 && DV % 16 == 0 && D <= 128 && DV <= 128, "head dims: multiples of 16, ≤ 128");
  static_assert(KPW % 16 == 0 && KPW <= 64, "keys per warp: 16, 32, 48 or 64");
  static_assert(STAGES >= 2 && STAGES <= 8 && CONSUMERS <= 16, "stages, consumer warps");
  static_assert(Q_BYTES % 16 == 0, "the stages stay 16-byte aligned");
  static_assert(!TMA || (HB == 1 && D == 128 && DV == 128 && PRODUCERS == 1 && (TK & (TK - 1)) == 0),
                "the TMA loader: one kv head of H = Hv = 128, one producer warp, a power-of-two tile");
  static_assert(GROUP == 0 || (TMA && GROUP % 8 == 0 && TK % GROUP == 0) || (TMA && GROUP == -1 && LOADONLY),
                "TMA groups: 8·n rows tiling the tile (−1: unswizzled whole rows, nobody reads them)");
  static_assert(ROWGROUPS >= 1 && (ROWGROUPS == 1 || HB == 1), "row groups: one kv head a block");
  static_assert(!MULTICAST || (TMA && ROWGROUPS == 2 && GROUP >= 0 && LOADONLY == 0),
                "multicast: the TMA loader's row groups of two, boxes the consumers read");
};

// The consumer warps alone (the producer has left): barrier 1, CONSUMERS·32 threads.
__device__ __forceinline__ void consumers_sync(int threads) {
  asm volatile("bar.sync 1, %0;\n" ::"r"(threads) : "memory");
}

// online_softmax (decode_warp.cuh) with, where FAST: no masking of a warp's keys when every row of the
// block sees all of them (`all_visible`: every tile of a T=1 step without a window), the row maximum as a
// tree of fmaxf instead of a chain of nan_max (4 dependent ops a step: ~8 steps × ~15 clocks of latency
// per row at KPW = 32), and the rescale of o (DT·4 = 64 multiplies a thread) skipped when no row of the
// warp has a new maximum (alpha = 1 exactly), warp-uniform. NaN logits: fmaxf leaves them out of m (m
// is never NaN: its start is −inf and fmaxf returns NaN only for two NaNs, where m_new = fmaxf(m, NaN)),
// but e^(NaN − m) = NaN enters l and, through P·V, o — so the row still ends NaN, as the rule wants.
template <int KPW, int DT, bool FAST>
__device__ __forceinline__ void ws_softmax(float (&s)[KPW / 8][4], float (&o)[DT][4], float (&m)[2], float (&l)[2],
                                           int key0, const int (&lo)[2], const int (&hi)[2], float scale_log2,
                                           int tq, bool all_visible) {
  if constexpr (!FAST) {
    online_softmax<KPW, DT>(s, o, m, l, key0, lo, hi, scale_log2, tq);
  } else {
    constexpr int NT = KPW / 8;
    float t[2][NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int h = c / 2, j = key0 + nt * 8 + 2 * tq + (c % 2);
        s[nt][c] = (all_visible || (j >= lo[h] && j < hi[h])) ? s[nt][c] * scale_log2 : neg_inf();
      }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) t[h][nt] = fmaxf(s[nt][2 * h], s[nt][2 * h + 1]);
#pragma unroll
    for (int w = NT / 2; w >= 1; w /= 2)  // NT is 2, 4, 6 or 8: a tree where it halves, else fold
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < w; ++nt) t[h][nt] = fmaxf(t[h][nt], t[h][nt + w]);
    if constexpr (NT % 2) {  // KPW = 48: NT = 6 halves to 3, then 1: fold the odd ones
#pragma unroll
      for (int h = 0; h < 2; ++h) t[h][0] = fmaxf(t[h][0], fmaxf(t[h][1], t[h][2]));
    }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(t[h][0], __shfl_xor_sync(0xffffffffu, t[h][0], 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float base = m_new == neg_inf() ? 0.f : m_new;
      alpha[h] = m_new == m[h] ? 1.f : fast_exp2(m[h] - base);
      m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 2 * h; c < 2 * h + 2; ++c) {
          s[nt][c] = fast_exp2(s[nt][c] - base);
          sum += s[nt][c];
        }
      l[h] = l[h] * alpha[h] + sum;
    }
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        o[d][0] *= alpha[0], o[d][1] *= alpha[0];
        o[d][2] *= alpha[1], o[d][3] *= alpha[1];
      }
  }
}

// The stages' layouts: padded rows (row copies) or the TMA's swizzled halves of TK rows.
template <class C, bool TMA = C::TMA_>
struct WsLayouts {
  using K = PitchLayout<C::PITCH>;
  using V = PitchLayout<C::PITCHV>;
};
template <class C, bool GROUPED = (C::GROUP_ > 0)>
struct WsTmaLayout {
  using L = Sw128Layout<C::TK>;
};
template <class C>
struct WsTmaLayout<C, true> {
  using L = Sw128GroupLayout<C::GROUP_>;
};
template <class C>
struct WsLayouts<C, true> {
  using K = typename WsTmaLayout<C>::L;
  using V = typename WsTmaLayout<C>::L;
};

// The combine inside the split kernel, for a launch of p.splits > 1 given `counter`, its (sequence, kv head, row
// group)'s counter (zero before the launch): once every consumer thread has written its partial row, the block
// counts itself in; the last of the item's p.splits blocks merges their partial rows into the output as
// flash_decode_combine would (a warp a row, from the L2) and sets the counter back to zero for the next launch.
// Why: the combine's own launch and its wait for the split kernel's last block cost ~5% of a 1M-token K=1 call
// (benchmarks/results/h200/decode/2026-12-02-k1-loop-overheads §1: the loader alone read 4019 GB/s at two splits against 4226 for its
// copies alone). Measured slower, not faster (benchmarks/results/h200/decode/2026-12-02-cache-length-row-groups): the host runs it only
// where decodeTuning.combine = 'fused' asks (decode-tma.ts, tmaCombinesInSplit).
// `scratch`: shared memory no thread reads any more (the stages and merge slots): the flag, then the weights.
template <class C, bool FP16>
__device__ __forceinline__ void combine_in_split(const DecodeParams& p, int* counter, unsigned char* scratch, int b,
                                                 int kh0, int row0, int rows_b, int warp, int lane) {
  constexpr int CONSUMERS = C::CONSUMERS, RTH = C::RTH_;
  volatile int* last = reinterpret_cast<volatile int*>(scratch);
  __threadfence();                 // this thread's partial row, visible to the whole GPU before the block counts
  consumers_sync(CONSUMERS * 32);  // every partial row written, and the merge slots read
  if (threadIdx.x == 0) {
    __threadfence();
    const int arrived = atomicAdd(counter, 1);
    *last = arrived == p.splits - 1;
    if (arrived == p.splits - 1) *counter = 0;  // every block of the item has counted
  }
  consumers_sync(CONSUMERS * 32);
  if (!*last) return;
  __threadfence();  // the counter read before the other blocks' partial rows
  float* weights = reinterpret_cast<float*>(scratch + 128) + warp * DEC_MAX_SPLITS;
  for (int r = warp; r < C::TILES * 16; r += CONSUMERS) {  // this block's rows, as write_merged_row's
    const int rr = row0 + ((r / 16) % RTH) * 16 + r % 16;
    if (rr >= rows_b) continue;
    const int row = int(query_token(p, b, rr / p.group) * p.N) + (kh0 + r / 16 / RTH) * p.group + rr % p.group;
    const auto lse_of = [&](int s) { return __ldcg(p.lse_part + (i64)s * p.rows_total + row); };
    combine_row<C::DV_, FP16, false, decltype(lse_of), true>(p, row, lane, weights, p.splits, lse_of);
    __syncwarp();  // every lane has read this row's weights before the next row's are written (racecheck)
  }
}

// kmap, vmap: the TMA loader's tensor maps of K and V (tma_map_dims gives their shape), else unused.
// split_counters: where not null and p.splits > 1, the combine runs in this launch (combine_in_split), one
// counter per (sequence, kv head, row group) in that order.
template <class C, bool FP16>
__device__ __forceinline__ void flash_decode_ws(const DecodeParams& p, const TmaDesc* kmap = nullptr,
                                                const TmaDesc* vmap = nullptr, int* split_counters = nullptr) {
  constexpr int D = C::D_, DV = C::DV_, HB = C::HB_, RTH = C::RTH_, KPW = C::KPW_, STAGES = C::STAGES_;
  constexpr int TK = C::TK, TILES = C::TILES, SLICES = C::SLICES_, CONSUMERS = C::CONSUMERS;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int RG = C::ROWGROUPS_;
  const int split = blockIdx.x / RG, kh0 = blockIdx.y * HB, b = blockIdx.z;
  const int row0 = int(blockIdx.x % RG) * TILES * 16;  // this block's first row of a kv head's rows_b
  // Launched as a programmatic dependent (ATTNLAB_DEPENDENT_LAUNCH=1, launch-dependent.ts), the block may start
  // before the kernel ahead of it ends: it waits here until that kernel's writes are visible, then lets the
  // combine's blocks take their places beside it and wait too. Both are no-ops in a plain launch.
  grid_dependency_wait();
  grid_dependents_may_launch();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int G = p.group;

  const int Tb = p.q_offsets ? p.q_offsets[b + 1] - p.q_offsets[b] : (p.q_lens ? p.q_lens[b] : p.T);
  const int Sb = p.kv_offsets ? p.kv_offsets[b + 1] - p.kv_offsets[b] : (p.kv_lens ? p.kv_lens[b] : p.S);
  const int rows_b = Tb * G;
  if (rows_b == 0) return;
  const BlockKeys keys = C::TMA_ ? tma_block_keys<TK>(block_keys<TK>(p, 0, Tb - 1, Tb, Sb, 0), p.splits, split)
                                 : block_keys<TK>(p, 0, Tb - 1, Tb, Sb, split);
  const int u_lo = keys.lo, u_hi = keys.hi, tile_lo = keys.tile_lo, tile_hi = keys.tile_hi;

  const u32 full = smem_addr(smem), empty = full + 64;
  const u32 q_smem = full + C::BAR_BYTES;
  const u32 loop_unaligned = full + C::BAR_BYTES + C::Q_BYTES;
  const u32 loop_smem = C::ALIGN_BYTES ? (loop_unaligned + C::ALIGN_BYTES - 1) & ~u32(C::ALIGN_BYTES - 1) : loop_unaligned;
  unsigned char* loop = smem + (loop_smem - full);

  constexpr bool MC = C::MULTICAST_;
  // With MC, this CTA's rank in its cluster of two (__cluster_dims__(2, 1, 1) pairs blockIdx.x 2s and 2s + 1) and
  // the other CTA's.
  const int rank = int(blockIdx.x % RG), peer = rank ^ 1;
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES; ++s) {
      dec_mbar_init(full + s * 8, C::PRODUCERS_);
      dec_mbar_init(empty + s * 8, CONSUMERS * (MC ? 2 : 1));  // with MC, both CTAs' consumers release a stage
    }
  if constexpr (C::QSMEM_) {  // Q tile rows (row tile r: head r / RTH, rows (r % RTH)·16 …), zeros past rows_b
    for (int c = threadIdx.x; c < TILES * 16 * (D / 8); c += C::THREADS) {
      const int row = c / (D / 8), col = (c % (D / 8)) * 8, tile = row / 16;
      const int rr = row0 + (tile % RTH) * 16 + row % 16, n = (kh0 + tile / RTH) * G + rr % G;
      u128 x{0u, 0u, 0u, 0u};
      if (rr < rows_b)
        x = *reinterpret_cast<const u128*>(p.q + query_token(p, b, rr / G) * p.q_token + (i64)n * p.q_head + col);
      *reinterpret_cast<u128*>(smem + C::BAR_BYTES + (row * C::Q_PITCH + col) * 2) = x;
    }
  }
  __syncthreads();  // barriers initialised and Q written before anyone uses them
  if constexpr (MC) {  // and the other CTA's, before its copies and arrivals reach this one's barriers
    cluster_arrive();
    cluster_wait();
  }

  if (warp >= CONSUMERS) {  // the producers
    if constexpr (C::TMA_) {
      tma_produce<TK, STAGES, C::K_BYTES, C::STAGE_BYTES, C::GROUP_, MC>(p, kmap, vmap, keys, b, kh0, loop_smem,
                                                                         full, empty, lane, rank);
      if constexpr (MC) {  // the cluster's end (see the consumers')
        cluster_arrive();
        cluster_wait();
      }
      return;
    }
    const int pw = warp - CONSUMERS, P = C::PRODUCERS_;  // this warp's 32-row chunks: pw, pw + P, …
    const bool paged = p.block_table != nullptr;
    const int* table_row = paged ? p.block_table + (i64)b * p.max_blocks : nullptr;
    const i64 kv_base = p.kv_offsets ? (i64)p.kv_offsets[b] : (i64)b * p.S;
    const i64 k_head0 = (i64)kh0 * p.k_head, v_head0 = (i64)kh0 * p.v_head;
    auto row_of = [&](int r) { return lane + 32 * (pw + P * r); };
    auto pages_of = [&](int i, int (&pg)[C::KEYS_PER_LANE]) {
#pragma unroll
      for (int r = 0; r < C::KEYS_PER_LANE; ++r) {
        const int row = row_of(r), j = u_lo + i * TK + row;
        pg[r] = (paged && row < TK && i < tile_hi && j < u_hi) ? table_row[j / p.block_size] : 0;
      }
    };
    int pg[C::KEYS_PER_LANE];
    pages_of(tile_lo, pg);
    for (int i = tile_lo; i < tile_hi; ++i) {
      const int n = i - tile_lo, stage = n % STAGES;
      int next[C::KEYS_PER_LANE];
      pages_of(i + 1, next);  // issued before the wait: in flight while the consumers finish
      if (n >= STAGES) ws_wait(empty + stage * 8, (n / STAGES - 1) & 1);
      const int key0 = u_lo + i * TK;
      const u32 base = loop_smem + stage * C::STAGE_BYTES, bar = full + stage * 8;
      // Rows past the range first (zeros, ordered before later bulk copies into them); lane 0 arms the
      // barrier with this warp's bytes once every lane's zeros are written (its arrival releases them),
      // then the copies. `full` completes after all PRODUCERS arrivals and every byte.
      int rows = 0;  // this warp's rows in the range
#pragma unroll
      for (int r = 0; r < C::KEYS_PER_LANE; ++r) {
        const int row = row_of(r);
        if (row < TK && key0 + row >= u_hi) {
          zero_row(base + row * C::PITCH * 2, 0, HB * D);
          zero_row(base + C::K_BYTES + row * C::PITCHV * 2, 0, HB * DV);
        }
        rows += imax(0, imin(32, imin(TK, u_hi - key0) - (row - lane)));
      }
      dec_fence_proxy_async();
      __syncwarp();
      if (lane == 0) dec_mbar_arrive_expect_tx(bar, rows * HB * (p.H + p.Hv) * 2);
#pragma unroll
      for (int r = 0; r < C::KEYS_PER_LANE; ++r) {
        const int row = row_of(r), j = key0 + row;
        if (row < TK && j < u_hi) {
          const i64 slot = paged ? (i64)pg[r] * p.block_size + j % p.block_size : kv_base + j;
          bulk_row_copy(base + row * C::PITCH * 2, p.k + slot * p.k_token + k_head0, HB * D * 2, bar);
          bulk_row_copy(base + C::K_BYTES + row * C::PITCHV * 2, p.v + slot * p.v_token + v_head0, HB * DV * 2, bar);
        }
      }
#pragma unroll
      for (int r = 0; r < C::KEYS_PER_LANE; ++r) pg[r] = next[r];
    }
    return;  // the consumers' merge syncs on barrier 1 without these warps
  }

  const int g = lane / 4, tq = lane % 4;
  const int tile_id = warp % TILES, slice = warp / TILES;
  const int hh = tile_id / RTH, rt = tile_id % RTH, kh = kh0 + hh;
  u32 qa[C::QSMEM_ ? 1 : C::KT][4];
  if constexpr (!C::QSMEM_ && C::LOADONLY_ < 2) load_q_fragments<C::KT>(qa, p, b, kh, G, row0 + rt * 16, rows_b, lane);
  const u32 q_tile = q_smem + ((tile_id * 16 + lane % 16) * C::Q_PITCH + (lane / 16) * 8) * 2;

  int lo[2], hi[2];
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
  float o[C::DT][4];
  start_rows<C::DT>(p, row0 + rt * 16, rows_b, Tb, Sb, g, lo, hi, o);

  for (int i = tile_lo; i < tile_hi; ++i) {
    const int n = i - tile_lo, stage = n % STAGES;
    ws_wait(full + stage * 8, (n / STAGES) & 1);
    if constexpr (C::LOADONLY_) {  // the harness's loader ceiling: the bytes arrive, nobody computes
      __syncwarp();
      if (lane == 0) dec_mbar_arrive(empty + stage * 8);
      continue;
    }
    const u32 k_tile = loop_smem + stage * C::STAGE_BYTES + hh * D * 2;
    const u32 v_tile = loop_smem + stage * C::STAGE_BYTES + C::K_BYTES + hh * DV * 2;
    const int key0 = u_lo + i * TK + slice * KPW;
    float s[KPW / 8][4];
    using L = typename WsLayouts<C>::K;
    using LV = typename WsLayouts<C>::V;
    qk_tile_at<C::KT, KPW, L, FP16>(s, k_tile, slice * KPW, lane, [&](int kk, u32 (&a)[4]) {
      if constexpr (C::QSMEM_) {
        ldmatrix_x4(a, q_tile + kk * 32);
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) a[c] = qa[kk][c];
      }
    });
    const bool all_visible = key0 >= keys.all_lo && key0 + KPW <= keys.all_hi;
    ws_softmax<KPW, C::DT, C::FAST_>(s, o, m, l, key0, lo, hi, p.scale_log2, tq, all_visible);
    pv_tile_at<C, FP16, KPW, LV>(o, s, v_tile, key0, slice * KPW, keys.all_lo, keys.all_hi, lo, hi, lane);
    __syncwarp();  // the warp's reads of this stage are done before it is released
    if (lane == 0) {
      dec_mbar_arrive(empty + stage * 8);
      if constexpr (MC) mbar_arrive_cluster(empty + stage * 8, peer);  // the other producer copies here too
    }
  }
  // With MC: this CTA's last access to the other's shared memory (an arrival) is behind it; it leaves only when
  // the other has passed the same point, so no arrival ever reaches a CTA that has exited. Every copy into this
  // CTA has landed (its full barriers all completed), so the merge below may reuse the stages.
  if constexpr (MC) cluster_arrive();
  if constexpr (C::LOADONLY_ == 2) return;
  consumers_sync(CONSUMERS * 32);  // every consumer is done with the stages: the merge reuses them

  const MergeSlots slots = merge_slots(loop, CONSUMERS);
  stash_partial<C::DT>(slots, warp, m, l, o, lane);
  consumers_sync(CONSUMERS * 32);

  constexpr int THREADS_PER_ROW = CONSUMERS * 32 / (TILES * 16);  // 2·SLICES
  const int row = threadIdx.x / THREADS_PER_ROW, part = threadIdx.x % THREADS_PER_ROW;
  const int row_tile = row / 16, row16 = row % 16;
  const int rr = row0 + (row_tile % RTH) * 16 + row16;
  auto at = [&](int w) { return (w * TILES + row_tile) * 16 + row16; };
  if (rr < rows_b)
    write_merged_row<SLICES, DV, THREADS_PER_ROW, FP16>(p, slots, at, query_token(p, b, rr / G),
                                                        (kh0 + row_tile / RTH) * G + rr % G, split, part);
  if (split_counters && p.splits > 1)
    combine_in_split<C, FP16>(p, split_counters + ((i64)b * gridDim.y + blockIdx.y) * RG + blockIdx.x % RG, loop, b,
                              kh0, row0, rows_b, warp, lane);
  if constexpr (MC) cluster_wait();
}

// The library's entry (decode-tma.ts): the TMA loader, one kv head of H = Hv = 128 a block in RTH row tiles of
// SLICES warps, one producer warp, DECODE_WS_ROWGROUPS blocks a key range, boxes of DECODE_WS_GROUP rows'
// both halves (0: a box a half); K and V tensor maps beside DecodeParams (each 128 bytes, __grid_constant__),
// then the split counters (null: the combine kernel merges the splits).
#ifdef DECODE_WS_RTH
#ifndef DECODE_WS_MULTICAST
#define DECODE_WS_MULTICAST 0
#endif
using DecodeTmaConfig = WsConfig<128, 128, DECODE_FP16 != 0, 1, DECODE_WS_RTH, DECODE_WS_SLICES, DECODE_WS_KPW,
                                 DECODE_STAGES, false, 1, DECODE_WS_FAST != 0, 1, true, DECODE_WS_GROUP, 0,
                                 DECODE_WS_ROWGROUPS, DECODE_WS_MULTICAST != 0>;
#if DECODE_WS_MULTICAST
#define DECODE_TMA_CLUSTER __cluster_dims__(2, 1, 1)
#else
#define DECODE_TMA_CLUSTER
#endif
extern "C" __global__ void __launch_bounds__(DecodeTmaConfig::THREADS, 1) DECODE_TMA_CLUSTER
    attnlab_flash_decode_tma(const __grid_constant__ DecodeParams p, const __grid_constant__ TmaDesc kmap,
                             const __grid_constant__ TmaDesc vmap, int* split_counters) {
  flash_decode_ws<DecodeTmaConfig, DECODE_FP16 != 0>(p, &kmap, &vmap, split_counters);
}
extern "C" __global__ void __launch_bounds__(128) attnlab_flash_decode_combine(const __grid_constant__ DecodeParams p) {
  flash_decode_combine<128, DECODE_FP16 != 0>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C, bool FP16>
__global__ void __launch_bounds__(C::THREADS, C::MINB_) decode_ws_test(const __grid_constant__ DecodeParams p) {
  flash_decode_ws<C, FP16>(p);
}
// MQA N=32: 8 consumers (Q in registers or shared; the FAST softmax; 64-key tiles 6 deep), 12 (Q in shared),
// two blocks of 6 per SM; K=4 G=8. 13 warps (≤ 16 allocated) leave 128 registers a thread, 17 would leave 96.
template __global__ void decode_ws_test<WsConfig<128, 128, false, 1, 2, 4, 32, 3, false, 1>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_ws_test<WsConfig<128, 128, false, 1, 2, 4, 32, 3, true, 1, true>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_ws_test<WsConfig<128, 128, false, 1, 2, 4, 16, 6, false, 1, true>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_ws_test<WsConfig<128, 128, false, 1, 2, 6, 16, 4, true, 1, true>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_ws_test<WsConfig<128, 128, false, 1, 2, 3, 16, 4, true, 2, true>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_ws_test<WsConfig<64, 64, true, 4, 1, 2, 32, 3, false, 1, true>, true>(const __grid_constant__ DecodeParams);
// two producer warps; the TMA loader (one block per SM, and two of 4 consumers)
template __global__ void decode_ws_test<WsConfig<128, 128, false, 1, 2, 4, 32, 3, false, 1, true, 2>, false>(const __grid_constant__ DecodeParams);
template <class C, bool FP16>
__global__ void __launch_bounds__(C::THREADS, C::MINB_)
    decode_ws_tma_test(const __grid_constant__ DecodeParams p, const __grid_constant__ TmaDesc k,
                       const __grid_constant__ TmaDesc v) {
  flash_decode_ws<C, FP16>(p, &k, &v);
}
template __global__ void decode_ws_tma_test<WsConfig<128, 128, false, 1, 2, 4, 32, 3, false, 1, true, 1, true>, false>(
    const __grid_constant__ DecodeParams, const __grid_constant__ TmaDesc, const __grid_constant__ TmaDesc);
template __global__ void decode_ws_tma_test<WsConfig<128, 128, true, 1, 2, 2, 32, 3, false, 2, true, 1, true>, true>(
    const __grid_constant__ DecodeParams, const __grid_constant__ TmaDesc, const __grid_constant__ TmaDesc);
// the grouped boxes (decode_tma.cuh, GROUP = 8, 16), and row groups of one row tile with GROUP = 32
template __global__ void decode_ws_tma_test<WsConfig<128, 128, false, 1, 2, 4, 32, 3, false, 1, true, 1, true, 8>, false>(
    const __grid_constant__ DecodeParams, const __grid_constant__ TmaDesc, const __grid_constant__ TmaDesc);
template __global__ void decode_ws_tma_test<WsConfig<128, 128, false, 1, 2, 4, 32, 3, false, 1, true, 1, true, 16>, false>(
    const __grid_constant__ DecodeParams, const __grid_constant__ TmaDesc, const __grid_constant__ TmaDesc);
template __global__ void
decode_ws_tma_test<WsConfig<128, 128, true, 1, 1, 8, 16, 3, false, 1, true, 1, true, 32, 0, 2>, true>(
    const __grid_constant__ DecodeParams, const __grid_constant__ TmaDesc, const __grid_constant__ TmaDesc);
// row groups as a cluster with multicast copies, half boxes (dense) and groups of 16
template __global__ void
decode_ws_tma_test<WsConfig<128, 128, false, 1, 1, 8, 16, 3, false, 1, true, 1, true, 0, 0, 2, true>, false>(
    const __grid_constant__ DecodeParams, const __grid_constant__ TmaDesc, const __grid_constant__ TmaDesc);
template __global__ void
decode_ws_tma_test<WsConfig<128, 128, false, 1, 1, 8, 16, 3, false, 1, true, 1, true, 16, 0, 2, true>, false>(
    const __grid_constant__ DecodeParams, const __grid_constant__ TmaDesc, const __grid_constant__ TmaDesc);
#endif
#endif  // ATTNLAB_FLASH_DECODE_WS_CU
