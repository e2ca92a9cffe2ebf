// attnlab-min-arch: sm_90a
//
// Hopper forward kernel (sm_90a): softmax(Q·Kᵀ·scale)·V with wgmma, TMA and warp specialisation.
//
// One block owns 64·CONSUMERS query rows (128 or 192) of one (batch, head) and runs CONSUMERS + 1
// warpgroups:
//   warpgroup 0, the producer: one thread issues TMA loads (cp.async.bulk.tensor) of the Q tile once
//     and of the K and V tiles into a ring of STAGES buffers; each load completes on an mbarrier
//     ("full"), and a buffer is refilled only after every consumer released it ("empty"). It keeps
//     24 registers (setmaxnreg), so the consumers get 240 (two) or 160 (three).
//   warpgroups 1…CONSUMERS, the consumers: 64 query rows each. S = Q·Kᵀ is one wgmma chain with A
//     and B from shared memory; the online softmax runs on the accumulators in registers; P
//     (bf16/fp16, still in registers) times V is a second wgmma chain with A from registers.
// OVERLAP = 1 (FlashAttention-3's intra-warpgroup pipelining): Q·K_{j+1}ᵀ is issued before P_j·V_j,
// so the tensor cores multiply while the softmax of the next tile runs; O's rescale waits for P·V.
// PINGPONG = 1 (FlashAttention-3's inter-warpgroup schedule): the consumers issue those GEMMs in
// turn, ordered by named barriers, so while one warpgroup's multiplies hold the tensor cores the
// others run their softmax, instead of all of them contending for the tensor cores at once and
// then all waiting on the exponentials together.
//
// Shared memory: Q (BM × DK), then STAGES K tiles (BN × DK), STAGES V tiles (BN × DV), each a row of boxes of
// 64 columns (128 bytes) with the 128-byte swizzle, then the mbarriers. Keys are visited last tile
// first, as the mma.sync kernel does (schedule.cuh), so the masked tiles come first.
//
// Padding: TMA fills rows past T or S with zeros. Keys in [kv_len, S) of a batch are real memory:
// their logits are masked to −inf, and their V rows are zeroed in shared memory before P·V, since
// 0 · NaN would otherwise leak a padded NaN into every row.
//
// Head dims: H rounds up to HOPPER_DK, Hv to HOPPER_DV (each 64, 128, 192 or 256: whole boxes of 64
// columns, any pair the tiles fit, e.g. 192/128); TMA reads the columns past them as zeros (nothing
// added to Q·Kᵀ, zero output columns that are not stored).
//
// NaN rule: a NaN output element of a finite row can only be a hidden key's NaN/Inf value times its
// weight 0 inside P·V (causal diagonal, window edge, mask, −inf bias); the epilogue recomputes such
// elements over the visible keys (flash/recompute.cuh), at one compare per element otherwise.
//
// Specialisation: HOPPER_DK, HOPPER_DV, HOPPER_BN, HOPPER_STAGES, HOPPER_FP16, HOPPER_OVERLAP, HOPPER_BIAS (the
// bias element code, 0 none), HOPPER_MASK, HOPPER_CONSUMERS, HOPPER_PINGPONG, HOPPER_LATEWAIT,
// HOPPER_DESCSTEP, HOPPER_GROUPED, HOPPER_PERSISTENT and HOPPER_SLACK (tiles.cuh says what the last
// five do; 0 when not defined; GROUPED and PERSISTENT take a 1-D grid; PERSISTENT=2, the dynamic
// grid, also needs HopperParams::work_counter: src/backends/cuda/flash/sm90/hopper.ts zeroes and passes it) define the extern
// "C" entry attnlab_hopper_fwd. With -DATTNLAB_NVCC_TEST the file
// instantiates the table's variants instead.
#include "hopper/tiles.cuh"

struct HopperParams {
  TmaDesc tm_q;  // (H, T, N, B) boxes of 64 × BM rows
  TmaDesc tm_k;  // (H, S, K, B) boxes of 64 × BN rows
  TmaDesc tm_v;  // (Hv, S, K, B) boxes of 64 × BN rows
  FlashParams f;
  // The dynamic persistent grid's work counter (HopperConfig PERSISTENT = 2 only; null otherwise):
  // one device int, 0 at launch (the caller zeroes it before every launch, e.g. cuMemsetD32Async on
  // the launch stream), counting the items handed out after each block's first. It sits in the tail
  // padding (byte 664, the first word after FlashParams), so the struct keeps its size and the
  // library, which writes zeros there, is unchanged.
  int* work_counter;
  // The dynamic grid's section of query heads (dynamic_section) when > 0, else its rule: for the
  // harness's sweeps; byte 672, still in the tail padding.
  int dynamic_section;
};
// 3 tensor maps (128 bytes each) + FlashParams (280) + the counter, rounded up to the maps' 64-byte alignment.
static_assert(sizeof(HopperParams) == 704, "HopperParams layout changed: update src/backends/cuda/flash/sm90/hopper.ts");

// Where one work item (a query block of one head) sits among a block's items: the K/V ring and
// the Q barriers run on from item to item in the persistent grid; one item per block otherwise.
struct ItemSlot {
  int ring;    // K/V tiles the block loaded before this item (stage and phase of its first tile)
  int item;    // the block's items with keys before this one (the phase of q_full and q_empty)
  bool first;  // the block's first item with keys: the last consumer opens the first turn
  bool last;   // its last: the last consumer's last turn opens nothing
};

template <class C>
__device__ __forceinline__ void produce(const HopperParams& hp, const TileWork& w, u32 sq, u32 sk, u32 sv,
                                        const Barriers& bar, int block_lo, int block_hi, const ItemSlot& slot) {
  // The consumers free Q after their last Q·Kᵀ of the previous item (a fresh barrier passes parity 1);
  // the dynamic grid's producer waits before it writes the item slot (run_dynamic).
  if constexpr (C::PERSISTENT && !C::DYNAMIC) mbar_wait(bar.q_empty(), (slot.item & 1) ^ 1);
  mbar_arrive_expect_tx(bar.q_full(), C::Q_BYTES);
#pragma unroll
  for (int c = 0; c < C::BOXES; ++c) tma_load_4d(sq + c * C::Q_BOX, &hp.tm_q, bar.q_full(), c * 64, w.m0, w.n, w.b);
  int it = slot.ring;
  for (int nb = block_hi - 1; nb >= block_lo; --nb, ++it) {
    const int s = it % C::STAGES;
    const u32 phase = (it / C::STAGES) & 1;
    const u32 k_dst = sk + s * C::K_BYTES, v_dst = sv + s * C::V_BYTES;
    mbar_wait(bar.k_empty(s), phase ^ 1);
    if (C::PROBE == 2 && it >= C::STAGES) {  // probe: no traffic after the first round
      mbar_arrive(bar.k_full(s));
      mbar_wait(bar.v_empty(s), phase ^ 1);
      mbar_arrive(bar.v_full(s));
      continue;
    }
    mbar_arrive_expect_tx(bar.k_full(s), C::K_BYTES);
#pragma unroll
    for (int c = 0; c < C::BOXES; ++c)
      tma_load_4d(k_dst + c * C::KV_BOX, &hp.tm_k, bar.k_full(s), c * 64, nb * C::BN, w.kv_head, w.b);
    mbar_wait(bar.v_empty(s), phase ^ 1);
    mbar_arrive_expect_tx(bar.v_full(s), C::V_BYTES);
#pragma unroll
    for (int c = 0; c < C::V_BOXES; ++c)
      tma_load_4d(v_dst + c * C::KV_BOX, &hp.tm_v, bar.v_full(s), c * 64, nb * C::BN, w.kv_head, w.b);
  }
}

template <class C>
__device__ __forceinline__ void consume(const FlashParams& p, const TileWork& w, u32 sq, u32 sk, u32 sv,
                                        const Barriers& bar, int block_lo, int block_hi, int consumer,
                                        const ItemSlot& slot) {
  const int thread = threadIdx.x % 128;
  const int lane = thread % 32;
  const int row0 = w.m0 + consumer * 64 + (thread / 32) * 16;  // first row of this warp
  // This warpgroup's 64 rows in each Q box. With DESC_STEP the consumer index goes through a
  // shuffle so the compiler knows it is warp-uniform: the descriptors then live in uniform registers,
  // where wgmma reads them, without a move per step.
  const u32 q_rows = sq + (C::DESC_STEP ? __shfl_sync(0xffffffffu, consumer, 0) : consumer) * 64 * 128;
  float o[C::DT][4];
#pragma unroll
  for (int d = 0; d < C::DT; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
  RowSoftmax<C::NT, C::SLACK> softmax;
  softmax.init();
  float alpha[2];
  float s[C::NT][4];
  u32 pa[C::BN / 16][4];

  // Logits of tile nb into base-2 weights (s overwritten); returns whether O must be rescaled.
  auto softmax_tile = [&](int nb) {
    if constexpr (C::PROBE == 1) return false;
    const int n0 = nb * C::BN;
    float (&s3)[1][C::NT][4] = reinterpret_cast<float (&)[1][C::NT][4]>(s);
    const float factor = scale_and_mask<1, C::NT, C::BIAS, C::MASK>(s3, p, w, row0, n0, lane, tile_needs_mask<C::BN>(p, w, n0));
    return softmax.update(s, factor, alpha);
  };
  auto release = [&](u32 empty) {
    if (lane == 0) mbar_arrive(empty);
  };
  // Stage and phase of the item's tile `it` in the ring.
  auto stage = [&](int it) { return (slot.ring + it) % C::STAGES; };
  auto phase = [&](int it) { return static_cast<u32>(((slot.ring + it) / C::STAGES) & 1); };
  // Q can be refilled for the next item once this warp's last Q·Kᵀ has read it.
  auto release_q = [&]() {
    if constexpr (C::PERSISTENT) release(bar.q_empty());
  };
  auto wait_values = [&](int it, int nb) {
    const int st = stage(it);
    mbar_wait(bar.v_full(st), phase(it));
    if (p.kv_lens != nullptr) zero_padded_values<C>(p, w, sv + st * C::V_BYTES, nb * C::BN, consumer * 128 + thread);
  };

  // The register writes to O (rescale) and P must stay before wgmma.fence: pinning them with empty
  // volatile asms keeps the compiler from sinking them past it (ptxas would then add a second
  // warpgroup.arrive, C7519).
  auto fence_operands = [&]() {
    fence_accumulators(o);
    keep_fragments(pa);
    wgmma_fence();
  };

  mbar_wait(bar.q_full(), slot.item & 1);
  const int tiles = block_hi - block_lo;
  if constexpr (!C::OVERLAP) {
    for (int it = 0; it < tiles; ++it) {
      const int nb = block_hi - 1 - it, st = stage(it);
      mbar_wait(bar.k_full(st), phase(it));
      fence_operands();
      qk_issue<C>(s, q_rows, sk + st * C::K_BYTES);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(s);
      release(bar.k_empty(st));
      if (it == tiles - 1) release_q();
      if (softmax_tile(nb)) RowSoftmax<C::NT, C::SLACK>::rescale(o, alpha);
      to_a_fragments<C>(pa, s);
      wait_values(it, nb);
      fence_operands();
      pv_issue<C>(o, pa, sv + st * C::V_BYTES);
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(o);
      keep_fragments(pa);
      release(bar.v_empty(st));
    }
  } else {
    // Ping-pong turns: consumer c issues its GEMMs after bar.sync on barrier 2 + c and then lets the
    // next consumer go (bar.arrive on its barrier; each barrier counts the 128 threads that sync
    // plus the 128 that arrive). Every consumer takes tiles + 1 turns (S_0; S_it with P_{it−1}·V_{it−1};
    // the last P·V). The last consumer opens consumer 0's first turn of the block's first item and
    // skips its own last arrive of its last item, so no barrier is left half-arrived at exit; between
    // items of the persistent grid that arrive opens consumer 0's first turn of the next item. Waits
    // on V (and the padded-row zeroing, which meets every consumer at barrier 1) happen outside a
    // turn, or the turns would deadlock.
    auto turn_begin = [&]() {
      if constexpr (C::PINGPONG) named_barrier_sync(2 + consumer, 256);
    };
    auto turn_end = [&](bool last_turn) {
      if constexpr (C::PINGPONG) {
        if (!(last_turn && slot.last && consumer == C::CONSUMERS - 1))
          named_barrier_arrive(2 + (consumer + 1) % C::CONSUMERS, 256);
      }
    };
    if constexpr (C::PINGPONG) {
      if (slot.first && consumer == C::CONSUMERS - 1) named_barrier_arrive(2, 256);
    }
    // Prologue: S_0 and its softmax (O is still 0: no rescale needed).
    mbar_wait(bar.k_full(stage(0)), phase(0));
    turn_begin();
    wgmma_fence();
    qk_issue<C>(s, q_rows, sk + stage(0) * C::K_BYTES);
    wgmma_commit();
    turn_end(false);
    wgmma_wait<0>();
    fence_accumulators(s);
    release(bar.k_empty(stage(0)));
    if (tiles == 1) release_q();
    softmax_tile(block_hi - 1);
    to_a_fragments<C>(pa, s);
    for (int it = 1; it < tiles; ++it) {
      const int nb = block_hi - 1 - it, st = stage(it), prev = stage(it - 1);
      wait_values(it - 1, nb + 1);
      mbar_wait(bar.k_full(st), phase(it));
      turn_begin();
      fence_operands();  // the zeroing branch above may have moved O or P between registers
      qk_issue<C>(s, q_rows, sk + st * C::K_BYTES);  // S_it = Q·K_itᵀ
      wgmma_commit();
      pv_issue<C>(o, pa, sv + prev * C::V_BYTES);  // O += P_{it−1}·V_{it−1}
      wgmma_commit();
      turn_end(false);
      wgmma_wait<1>();  // S_it is ready; P·V may still run
      fence_accumulators(s);
      release(bar.k_empty(st));
      if (it == tiles - 1) release_q();
      const bool moved = softmax_tile(nb);
      // P_{it−1}·V_{it−1} done: O and P's registers are free, V's stage can be refilled.
      auto finish_tile = [&]() {
        fence_accumulators(o);
        keep_fragments(pa);
        release(bar.v_empty(prev));
        if (moved) RowSoftmax<C::NT, C::SLACK>::rescale(o, alpha);
        to_a_fragments<C>(pa, s);
      };
      if constexpr (C::LATE_WAIT) {
        // A branch on a block-uniform value (wgmma.wait_group must be the same instruction for the
        // whole warpgroup) ends the softmax's basic block, so the wait cannot be scheduled above it.
        if (it & 1) {
          wgmma_wait_all_odd();
          finish_tile();
        } else {
          wgmma_wait<0>();
          finish_tile();
        }
      } else {
        wgmma_wait<0>();
        finish_tile();
      }
    }
    const int last = stage(tiles - 1);
    wait_values(tiles - 1, block_lo);
    turn_begin();
    fence_operands();
    pv_issue<C>(o, pa, sv + last * C::V_BYTES);
    wgmma_commit();
    turn_end(true);
    wgmma_wait<0>();
    fence_accumulators(o);
    keep_fragments(pa);
    release(bar.v_empty(last));
  }
  float inv[2], lse[2];
  softmax.finish(inv, lse);
  store_rows<C>(p, w, o, inv, lse, row0, lane);
}

// GROUPED's block order. The 2-D grid runs each head's query blocks longest first, head after head,
// so under a causal mask a head's longest block can start when only that head's shorter blocks are
// left to run beside it: at T=8192 (64 blocks of 128 rows) it runs ~48 tiles alone on its SM. Here
// the grid is 1-D and walks groups of heads, each group longest block first across its heads
// (the longest of every head, then the second longest, …): the last blocks of the grid are short
// ones. A group is as many query heads as have K and V in ~24 MiB (4·S·D bytes per KV head, shared
// by p.group query heads), so the K/V that the blocks in flight read stay in the 50 MB L2 as they
// do with the 2-D grid (where the blocks in flight belong to one or two heads).
//
// Item i of an order in sections of `group` consecutive query heads (b·N + n), each section walked
// longest block first across its heads (the last query block of every head, then the one before, …).
template <class C>
__device__ __forceinline__ TileWork sectioned_tile(const FlashParams& p, int i, int qblocks, int group) {
  const int heads = p.B * p.N;
  const int g = i / (group * qblocks), r = i - g * group * qblocks;
  const int in_group = imin(group, heads - g * group);
  return schedule_tile_at<C::BM>(p, qblocks - 1 - r / in_group, g * group + r % in_group);
}
// Query heads whose K and V (2·S·(D + DV) bytes per KV head, shared by p.group query heads) fit in
// `bytes`, at least one KV head's.
template <class C>
__device__ __forceinline__ int heads_in_bytes(const FlashParams& p, long long bytes) {
  const long long kv_bytes = 2ll * p.S * (C::D + C::DV);
  const int fit = imax(1, static_cast<int>(bytes / (kv_bytes > 0 ? kv_bytes : 1)));  // KV heads
  return imin(p.B * p.N, imin(fit, p.B * p.N) * p.group);
}
template <class C>
__device__ __forceinline__ TileWork hopper_tile(const FlashParams& p) {
  if constexpr (!C::GROUPED) return schedule_tile<C::BM>(p);
  const int qblocks = (p.T + C::BM - 1) / C::BM;
  return sectioned_tile<C>(p, blockIdx.x, qblocks, heads_in_bytes<C>(p, 24ll << 20));
}

// Item i of the dynamic grid's order: heads / section sections of consecutive query heads, as equal
// as they can be (the first heads % sections hold one head more), each walked longest block first
// across its heads. Not sectioned_tile's partial last section: a last section of one head runs its
// longest block alone at the end (the schedule model, benchmarks/harnesses/hopper-schedule-model.py: 192x80 at
// T=8192 causal, sections of 7 heads over 64 leave one, 7.5% idle against 1.4% balanced).
template <class C>
__device__ __forceinline__ TileWork dynamic_tile(const FlashParams& p, int i, int qblocks, int section) {
  const int heads = p.B * p.N;
  const int sections = imax(1, heads / section);
  const int base = heads / sections, extra = heads - base * sections;  // heads per section, larger ones
  const int in_larger = extra * (base + 1) * qblocks;                  // items of the larger sections
  const int size = i < in_larger ? base + 1 : base;
  const int j = i < in_larger ? i : i - in_larger;
  const int g = j / (size * qblocks), r = j - g * size * qblocks;
  const int head0 = i < in_larger ? g * size : extra * (base + 1) + g * base;
  return schedule_tile_at<C::BM>(p, qblocks - 1 - r / size, head0 + r % size);
}

// The dynamic grid's section of heads (dynamic_tile). Without a causal mask every item of a head
// has the same work: one head per section, the 2-D grid's order (the blocks in flight share one or
// two heads' K/V in L2, which GROUPED's six heads of 24 MiB did not: −6…−8%). Causal:
// the longest items of a section go first, and a section must hold enough work after its longest
// items that the other blocks are still busy when those end: with P blocks and q query blocks per
// head (q…1 tiles of keys, ~q²/2 per head) the g heads' work after the first g items, ~g·q²/2,
// must cover (P − g)·q, so g ≥ ~2P/q (T=8192, BM=128: 5 heads of 64 blocks at P=132). Otherwise as
// many heads as have K/V in 16 MiB (a third of the 50 MB L2; T=8192 D=128: 4 heads, T=1024: 32).
// T=8192 D=128 on 192x80 tiles (43 blocks per head): 7 heads, 28 MiB; on 128x128 (64): 5, 20 MiB.
// The balance term is capped at 32 MiB of K/V (D=256 at T=8192 would ask for 5 heads, 40 MiB).
template <class C>
__device__ __forceinline__ int dynamic_section(const HopperParams& hp, int qblocks) {
  const FlashParams& p = hp.f;
  if (hp.dynamic_section > 0) return imin(p.B * p.N, hp.dynamic_section);
  if (!(p.flags & FLASH_FLAG_CAUSAL)) return 1;
  const int balance = (2 * static_cast<int>(gridDim.x) + qblocks - 1) / qblocks;
  const int balance_heads = imin((balance + p.group - 1) / p.group * p.group, heads_in_bytes<C>(p, 32ll << 20));
  return imin(p.B * p.N, imax(heads_in_bytes<C>(p, 16ll << 20), balance_heads));
}

// The dynamic persistent grid (PERSISTENT = 2). Block p runs item p first; the producer then takes
// gridDim.x + atomicAdd(work_counter, 1) after issuing the last K/V tile of each item (two stages
// before the consumers finish it, so the atomic's ~1 µs round trip hides under their last tiles;
// taking it this late rather than at the item's start keeps the hand-out close to greedy).
// Every item, with keys or not, and the end (an index ≥ items) pass one phase of the Q barriers:
//   producer: wait q_empty (the consumers are done with Q and with the slot's last index), write the
//             index into the slot, then arrive on q_full with Q's bytes and load Q, K, V (an item with
//             keys), or arrive without bytes (an item without keys, or the end);
//   consumers: wait q_full, read the slot (lane 0, shuffled to the warp: lane 0's q_empty arrival
//             then orders its read before the producer's next write), and run the item (q_empty
//             after the last Q·Kᵀ), or write its zeros and arrive on q_empty, or leave.
// The K/V ring's position advances by the item's tiles on both sides, as in the static walk. The
// ping-pong turns: the last consumer opens consumer 0's first turn before the first item, every
// item's last turn opens the next one's, and consumer 0 takes the one left open before it leaves,
// so every named barrier is balanced at exit without knowing which item is a block's last.
template <class C>
__device__ __forceinline__ void run_dynamic(const HopperParams& hp, u32 sq, u32 sk, u32 sv, const Barriers& bar) {
  const FlashParams& p = hp.f;
  const int qblocks = (p.T + C::BM - 1) / C::BM;
  const int items = qblocks * p.B * p.N;
  const int section = dynamic_section<C>(hp, qblocks);
  auto range = [&](const TileWork& w, int& lo, int& hi) {
    lo = w.n_lo / C::BN;
    hi = (w.n_hi + C::BN - 1) / C::BN;
  };
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    regs_decrease<C::PRODUCER_REGS>();
    if (threadIdx.x != 0) return;
    int index = static_cast<int>(blockIdx.x);
    int ring = 0;
    for (int item = 0;; ++item) {
      mbar_wait(bar.q_empty(), (item & 1) ^ 1);
      st_shared_s32(bar.item_slot(), index);
      if (index >= items) {
        mbar_arrive(bar.q_full());
        return;
      }
      const TileWork w = dynamic_tile<C>(p, index, qblocks, section);
      if (w.n_lo < w.n_hi) {
        int lo, hi;
        range(w, lo, hi);
        produce<C>(hp, w, sq, sk, sv, bar, lo, hi, ItemSlot{ring, item, false, false});
        ring += hi - lo;
      } else {
        mbar_arrive(bar.q_full());
      }
      index = static_cast<int>(gridDim.x) + atomicAdd(hp.work_counter, 1);
    }
  }
  regs_increase<C::CONSUMER_REGS>();
  const int consumer = warpgroup - 1;
  if constexpr (C::PINGPONG) {
    if (consumer == C::CONSUMERS - 1) named_barrier_arrive(2, 256);
  }
  int ring = 0;
  for (int item = 0;; ++item) {
    mbar_wait(bar.q_full(), item & 1);
    int index = 0;
    if (threadIdx.x % 32 == 0) index = ld_shared_s32(bar.item_slot());
    index = __shfl_sync(0xffffffffu, index, 0);
    if (index >= items) break;
    const TileWork w = dynamic_tile<C>(p, index, qblocks, section);
    if (w.n_lo < w.n_hi) {
      int lo, hi;
      range(w, lo, hi);
      consume<C>(p, w, sq, sk, sv, bar, lo, hi, consumer, ItemSlot{ring, item, false, false});
      ring += hi - lo;
    } else {
      store_empty_block<C::BM, 128 * C::CONSUMERS>(p, w, threadIdx.x - 128);
      if (threadIdx.x % 32 == 0) mbar_arrive(bar.q_empty());
    }
  }
  if constexpr (C::PINGPONG) {
    if (consumer == 0) named_barrier_sync(2, 256);
  }
}

template <class C>
__device__ __forceinline__ void hopper_fwd(const HopperParams& hp) {
  const FlashParams& p = hp.f;
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 sq = (smem_addr(smem) + 1023) & ~1023u;
  const u32 sk = sq + C::Q_BYTES;
  const u32 sv = sk + C::STAGES * C::K_BYTES;
  const Barriers bar{sv + C::STAGES * C::V_BYTES, C::STAGES};
  const int warpgroup = threadIdx.x / 128;
  // The work items: query block m of head b·N + n, counted as the 2-D grid dispatches them (query
  // blocks of a head last first, then the next head). One per block, or with PERSISTENT every
  // gridDim.x-th from blockIdx.x (gridDim.x ≈ the SM count): one block per SM keeps its pipeline
  // and registers from item to item, and the producer loads the next item's Q and first K/V tiles
  // while the consumers finish the last P·V and store O (at T=1024 an item is only 8 key tiles).
  const int qblocks = (p.T + C::BM - 1) / C::BM;
  const int items = C::PERSISTENT ? qblocks * p.B * p.N : 1;
  const int step = C::PERSISTENT ? static_cast<int>(gridDim.x) : 1;
  auto work = [&](int i) {
    if constexpr (C::PERSISTENT) return schedule_tile_at<C::BM>(p, qblocks - 1 - i % qblocks, i / qblocks);
    else return hopper_tile<C>(p);
  };
  auto has_keys = [&](const TileWork& w) { return w.n_lo < w.n_hi; };
  const int first = C::PERSISTENT ? static_cast<int>(blockIdx.x) : 0;
  if (!C::PERSISTENT) {  // one item: blocks with nothing to load leave before the barriers exist
    const TileWork w = work(0);
    if (w.m0 >= p.T) return;
    if (!has_keys(w)) {
      store_empty_block<C::BM, C::THREADS>(p, w);
      return;
    }
  }
  if (threadIdx.x == 0) {
    mbar_init(bar.q_full(), 1);
    mbar_init(bar.q_empty(), 4 * C::CONSUMERS);  // one arrival per consumer warp
    for (int s = 0; s < C::STAGES; ++s) {
      mbar_init(bar.k_full(s), 1);
      mbar_init(bar.v_full(s), 1);
      mbar_init(bar.k_empty(s), 4 * C::CONSUMERS);  // one arrival per consumer warp
      mbar_init(bar.v_empty(s), 4 * C::CONSUMERS);
    }
    mbar_fence_init();
    tma_prefetch_desc(&hp.tm_q);
    tma_prefetch_desc(&hp.tm_k);
    tma_prefetch_desc(&hp.tm_v);
  }
  __syncthreads();
  if constexpr (C::DYNAMIC) {
    run_dynamic<C>(hp, sq, sk, sv, bar);
    return;
  }
  // Both roles walk the same items; the items without keys are the consumers' alone (zeros, −inf).
  // Each role is one branch with its own loop: setmaxnreg holds only when the roles do not share code.
  auto for_each_item = [&](auto&& run, auto&& empty) {
    ItemSlot slot{0, 0, true, true};
    for (int i = first; i < items; i += step) {
      const TileWork w = work(i);
      if (!has_keys(w)) {  // persistent only (checked above otherwise)
        empty(w);
        continue;
      }
      slot.last = true;
      for (int j = i + step; j < items && slot.last; j += step) slot.last = !has_keys(work(j));
      const int block_lo = w.n_lo / C::BN;
      const int block_hi = (w.n_hi + C::BN - 1) / C::BN;
      run(w, block_lo, block_hi, slot);
      slot.ring += block_hi - block_lo;
      ++slot.item;
      slot.first = false;
    }
  };
  if (warpgroup == 0) {
    regs_decrease<C::PRODUCER_REGS>();
    if (threadIdx.x == 0)
      for_each_item([&](const TileWork& w, int lo, int hi, const ItemSlot& slot) { produce<C>(hp, w, sq, sk, sv, bar, lo, hi, slot); },
                    [](const TileWork&) {});
  } else {
    regs_increase<C::CONSUMER_REGS>();
    for_each_item(
        [&](const TileWork& w, int lo, int hi, const ItemSlot& slot) { consume<C>(p, w, sq, sk, sv, bar, lo, hi, warpgroup - 1, slot); },
        [&](const TileWork& w) { store_empty_block<C::BM, 128 * C::CONSUMERS>(p, w, threadIdx.x - 128); });
  }
}

#ifdef HOPPER_DK
#ifndef HOPPER_LATEWAIT
#define HOPPER_LATEWAIT 0
#endif
#ifndef HOPPER_DESCSTEP
#define HOPPER_DESCSTEP 0
#endif
#ifndef HOPPER_GROUPED
#define HOPPER_GROUPED 0
#endif
#ifndef HOPPER_PERSISTENT
#define HOPPER_PERSISTENT 0
#endif
#ifndef HOPPER_SLACK
#define HOPPER_SLACK 0
#endif
extern "C" __global__ void __launch_bounds__(128 * (HOPPER_CONSUMERS + 1), 1)
    attnlab_hopper_fwd(const __grid_constant__ HopperParams p) {
  hopper_fwd<HopperConfig<HOPPER_DK, HOPPER_BN, HOPPER_STAGES, HOPPER_FP16 != 0, HOPPER_OVERLAP != 0, HOPPER_BIAS,
                          HOPPER_MASK != 0, HOPPER_CONSUMERS, HOPPER_PINGPONG != 0, HOPPER_LATEWAIT != 0,
                          HOPPER_DESCSTEP != 0, HOPPER_GROUPED != 0, HOPPER_PERSISTENT, 0, HOPPER_SLACK,
                          HOPPER_DV>>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) hopper_fwd_test(const __grid_constant__ HopperParams p) {
  hopper_fwd<C>(p);
}
template __global__ void hopper_fwd_test<HopperConfig<64, 128, 2, false, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, true, false>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<256, 80, 2, false, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true, 1, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<256, 80, 2, true, true, 2, false>>(const __grid_constant__ HopperParams);
// The library's table (hopper-variant.ts): ping-pong, three consumers at D=64, the late P·V
// wait and stepped descriptors, the rescale slack.
template __global__ void hopper_fwd_test<HopperConfig<64, 128, 2, false, true, 0, false, 3, true, true, true, false, false, 0, 8>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, true, true, 1, true, 2, true, true, true, false, false, 0, 8>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<256, 80, 2, false, true, 3, false, 2, true, true, true, false, false, 0, 8>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true, 0, false, 2, true, true, true>>(const __grid_constant__ HopperParams);
// The grouped and the persistent grids (measured in the harness; hopper-variant.ts SCHEDULE).
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true, 0, false, 2, true, true, true, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true, 1, true, 2, true, true, true, false, true>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<64, 128, 2, true, true, 0, false, 3, true, true, true, false, true>>(const __grid_constant__ HopperParams);
// The dynamic persistent grid (harness only): the library's D=128 tiles.
template __global__ void hopper_fwd_test<HopperConfig<128, 80, 2, false, true, 0, false, 3, true, true, true, false, 2, 0, 8>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, true, true, 1, true, 2, true, true, true, false, 2, 0, 8>>(const __grid_constant__ HopperParams);
// Head dims (hopper-variant.ts hopperTiles): D=192 at BN=112, and key/value dims of
// different box counts (192/128, 128/64, 256/128 at BN=96, 64/256 at BN=80), with and without bias/mask.
template __global__ void hopper_fwd_test<HopperConfig<192, 112, 2, false, true, 0, false, 2, true, true, true, false, false, 0, 8>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<192, 128, 2, true, true, 1, true, 2, true, true, true, false, false, 0, 8, 128>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<128, 128, 2, false, true, 0, false, 2, true, true, true, false, false, 0, 8, 64>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<256, 96, 2, false, true, 2, false, 2, true, true, true, false, false, 0, 8, 128>>(const __grid_constant__ HopperParams);
template __global__ void hopper_fwd_test<HopperConfig<64, 80, 2, false, true, 0, true, 2, true, true, true, false, false, 0, 8, 256>>(const __grid_constant__ HopperParams);
#endif
