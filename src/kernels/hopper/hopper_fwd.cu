// attnlab-min-arch: sm_90a
//
// Hopper forward kernel (sm_90a): softmax(Q·Kᵀ·scale)·V with wgmma, TMA and warp specialisation.
// docs/internals/hopper-forward.md has the design and the measurements behind it. The pieces:
//   fwd_config.cuh     a variant's named knobs (HopperConfig) and its shared memory
//   fwd_params.cuh     the kernel parameter (tensor maps, FlashParams, the work counter)
//   fwd_scheduler.cuh  the work items (query block × head) and the dynamic grid's order
//   fwd_mainloop.cuh   the producer's loads and a consumer's main loop on one item
//   fwd_epilogue.cuh   O and the log-sum-exp from the accumulators
//   tiles.cuh          the wgmma chains, the mbarrier ring, the fragments; softmax.cuh the online softmax
//   gen/               generated: the wgmma wrappers (wgmma.py) and the library's variants
//                      (gen/fwd_variants.cuh, from hopper-variant.ts)
// This file is the entry: the block's setup and its roles over its items.
//
// One block owns 64·consumers query rows (128 or 192) of one (batch, head) and runs consumers + 1
// warpgroups: warpgroup 0, the producer, keeps 24 registers (setmaxnreg) and has one thread issue
// the TMA loads of Q once and of the K and V tiles into a ring of stages, each completing on an
// mbarrier ("full") and refilled after every consumer released it ("empty"); the consumers (240 or
// 160 registers) run S = Q·Kᵀ from shared memory, the online softmax in registers and O += P·V with
// P from registers, FlashAttention-3's overlap inside a warpgroup and ping-pong between them.
//
// Shared memory: Q (BM × DK), then STAGES K tiles (BN × DK), STAGES V tiles (BN × DV), each a row of
// boxes of 64 columns (128 bytes) with the 128-byte swizzle, then the mbarriers. Keys are visited
// last tile first, as the mma.sync kernel does (schedule.cuh), so the masked tiles come first.
//
// Padding: TMA fills rows past T or S with zeros. Keys in [kv_len, S) of a batch are real memory:
// their logits are masked to −inf, and their V rows are zeroed in shared memory before P·V, since
// 0 · NaN would otherwise leak a padded NaN into every row.
//
// Head dims: H rounds up to key_dim, Hv to value_dim (each 64, 128, 192 or 256: whole boxes of 64
// columns, any pair the tiles fit, e.g. 192/128); TMA reads the columns past them as zeros (nothing
// added to Q·Kᵀ, zero output columns that are not stored).
//
// NaN rule: a NaN output element of a finite row can only be a hidden key's NaN/Inf value times its
// weight 0 inside P·V (causal diagonal, window edge, mask, −inf bias); the epilogue recomputes such
// elements over the visible keys (flash/recompute.cuh), at one compare per element otherwise.
//
// Specialisation: the HOPPER_* macros (hopperDefines in src/backends/cuda/flash/sm90/hopper-variant.ts,
// one per HopperConfig field) define the extern "C" entry attnlab_hopper_fwd; the dynamic grid also
// needs HopperParams::work_counter, which src/backends/cuda/flash/sm90/hopper.ts zeroes and passes. With
// -DATTNLAB_NVCC_TEST the file instantiates the library's variants (gen/fwd_variants.cuh) instead.
#include "hopper/fwd_mainloop.cuh"
#include "hopper/fwd_scheduler.cuh"

// The dynamic grid (dynamic_grid). Block p runs item p first; the producer then takes
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
// The K/V ring's position advances by the item's tiles on both sides. The
// ping-pong turns: the last consumer opens consumer 0's first turn before the first item, every
// item's last turn opens the next one's, and consumer 0 takes the one left open before it leaves,
// so every named barrier is balanced at exit without knowing which item is a block's last.
//
// With a block mask the producer's first warp stays and keeps two sets of tile bitmaps, one per item
// parity (item_bits). For item j it reads the block mask's kinds of the item's key tiles into
// registers (classify_word: lane i keeps word i of each map) before its q_empty wait, so those global
// loads run under the consumers' last tiles of item j − 1; after the wait lane 0 stores the words
// (shuffled from their lanes) into set j & 1, writes the slot and loads as above (S past 32 words a map, 32·32·BN keys, has
// no room in a lane: the warp classifies after the wait, classify_tiles). Why nobody reads a set while
// it is written: the producer writes set j & 1 after the q_empty phase of item j − 1 completed, i.e.
// after all 4·CONSUMERS consumer warps arrived in item j − 1 (each warp arrives once an item, and
// none can reach item j before the producer's q_full of item j); a consumer warp reads set j & 1 only
// inside item j (after q_full: any, count, next, kind) and set (j − 2) & 1, the same set, only inside
// item j − 2, which it finished before it entered item j − 1. The producer itself reads set j & 1
// (lane 0's walk) only while producing item j, before it writes set (j + 1) & 1. Only the words of
// the item's tile range [lo, hi) are written: every reader stays inside them (KeyTiles), and the
// kept bits outside [lo, hi) within those words are 0. The mbarriers and the K/V ring are the same
// as without a block mask: both sides count the kept tiles (KeyTiles::count) from the same set.
template <class C>
__device__ __forceinline__ void produce_dynamic_masked(const HopperParams& hp, const FlashMods& m, u32 sq, u32 sk,
                                                       u32 sv, const Barriers& bar, const TileBits& bits, int items,
                                                       int qblocks, int section) {
  const FlashParams& p = hp.f;
  const int lane = threadIdx.x % 32;
  const bool in_lanes = bits.words <= 32;
  int index = static_cast<int>(blockIdx.x);
  int ring = 0;
  for (int item = 0;; ++item) {
    const bool end = index >= items;
    const TileWork w = dynamic_tile<C>(p, end ? 0 : index, qblocks, section);
    const bool keys = !end && w.n_lo < w.n_hi;
    const int word_lo = w.n_lo / C::BN / 32, word_hi = ((w.n_hi + C::BN - 1) / C::BN - 1) / 32;
    unsigned kept_mine = 0, full_mine[C::CONSUMERS];
#pragma unroll
    for (int c = 0; c < C::CONSUMERS; ++c) full_mine[c] = 0;
    if (keys && in_lanes) {
      for (int word = word_lo; word <= word_hi; ++word) {
        unsigned kept_word, full_words[C::CONSUMERS];
        classify_word<C>(m, w, word, &kept_word, full_words);
        if (lane == word) {
          kept_mine = kept_word;
#pragma unroll
          for (int c = 0; c < C::CONSUMERS; ++c) full_mine[c] = full_words[c];
        }
      }
    }
    mbar_wait(bar.q_empty(), (item & 1) ^ 1);
    const TileBits b = item_bits<C>(bits, item);
    if (keys) {
      if (in_lanes) {
        // Lane 0 stores every word (shuffled from the lane that keeps it), as classify_tiles does, so the
        // bitmaps are its own writes when its arrival on q_full releases them to the consumers.
        for (int word = word_lo; word <= word_hi; ++word) {
          unsigned full_words[C::CONSUMERS];
#pragma unroll
          for (int c = 0; c < C::CONSUMERS; ++c) full_words[c] = __shfl_sync(0xffffffffu, full_mine[c], word);
          const unsigned kept_word = __shfl_sync(0xffffffffu, kept_mine, word);
          if (lane == 0) store_word<C>(b, word, kept_word, full_words);
        }
      } else {
        classify_tiles<C>(m, w, b, 0, 1);
      }
    }
    __syncwarp();
    if (lane == 0) {
      st_shared_s32(bar.item_slot(), index);
      if (keys && KeyTiles<C>::any(m, w, b)) {
        const KeyTiles<C> tiles(m, w, b);
        produce<C>(hp, w, sq, sk, sv, bar, tiles, ItemSlot{ring, item, false, false});
        ring += tiles.count();
      } else {
        mbar_arrive(bar.q_full());
      }
      if (!end) index = static_cast<int>(gridDim.x) + atomicAdd(hp.work_counter, 1);
    }
    if (end) return;
    index = __shfl_sync(0xffffffffu, index, 0);
  }
}

template <class C>
__device__ __forceinline__ void run_dynamic(const HopperParams& hp, const FlashMods& m, u32 sq, u32 sk, u32 sv,
                                            const Barriers& bar, const TileBits& bits) {
  const FlashParams& p = hp.f;
  const int qblocks = (p.T + C::BM - 1) / C::BM;
  const int items = qblocks * p.B * p.N;
  const int section = dynamic_section<C>(hp, qblocks);
  const int warpgroup = threadIdx.x / 128;
  if (ATTNLAB_BLOCK_MASK && warpgroup == 0) {
    regs_decrease<C::PRODUCER_REGS>();
    if (threadIdx.x < 32) produce_dynamic_masked<C>(hp, m, sq, sk, sv, bar, bits, items, qblocks, section);
    return;
  }
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
      if (KeyTiles<C>::any(m, w)) {
        const KeyTiles<C> tiles(m, w);
        produce<C>(hp, w, sq, sk, sv, bar, tiles, ItemSlot{ring, item, false, false});
        ring += tiles.count();
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
    if (KeyTiles<C>::any(m, w, item_bits<C>(bits, item))) {
      const KeyTiles<C> tiles(m, w, item_bits<C>(bits, item));
      consume<C>(p, m, w, sq, sk, sv, bar, tiles, consumer, ItemSlot{ring, item, false, false});
      ring += tiles.count();
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
__device__ __forceinline__ void hopper_fwd(const HopperParams& hp, const FlashMods& m) {
  const FlashParams& p = hp.f;
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 sq = (smem_addr(smem) + 1023) & ~1023u;
  const u32 sk = sq + C::Q_BYTES;
  const u32 sv = sk + C::STAGES * C::K_BYTES;
  const Barriers bar{sv + C::STAGES * C::V_BYTES, C::STAGES};
  const int warpgroup = threadIdx.x / 128;
  // With a block mask, the item's tile bitmaps (fwd_scheduler.cuh) after the barriers and the item slot.
  const TileBits bits{bar.base + 8 * (2 + 4 * C::STAGES + (C::DYNAMIC ? 1 : 0)), tile_words<C>(p)};
  // Whether the item has a key tile to visit (one the built-in masks and the block mask leave).
  auto has_keys = [&](const TileWork& w) { return KeyTiles<C>::any(m, w, bits); };
  // The 2-D grid's one item: blocks with nothing to load leave before the barriers exist. With a
  // block mask every warp first classifies a share of the item's key tiles (a tile per lane).
  if constexpr (!C::DYNAMIC) {
    const TileWork w = schedule_tile<C::BM>(p);
    if (w.m0 >= p.T) return;
    if constexpr (ATTNLAB_BLOCK_MASK) {
      if (w.n_lo < w.n_hi) {
        classify_tiles<C>(m, w, bits, threadIdx.x / 32, C::THREADS / 32);
        __syncthreads();
      }
    }
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
    run_dynamic<C>(hp, m, sq, sk, sv, bar, bits);
    return;
  }
  // Each role takes the item again after the barrier rather than keeping it in registers across the
  // setup (the consumers' branch for an item without keys is not taken here: such blocks left above),
  // and is one branch with its own call: setmaxnreg holds only when the roles share no code.
  auto with_item = [&](auto&& run, auto&& empty) {
    const TileWork w = schedule_tile<C::BM>(p);
    if (!has_keys(w)) {
      empty(w);
      return;
    }
    run(w, KeyTiles<C>(m, w, bits), ItemSlot{0, 0, true, true});
  };
  if (warpgroup == 0) {
    regs_decrease<C::PRODUCER_REGS>();
    if (threadIdx.x == 0)
      with_item([&](const TileWork& w, const KeyTiles<C>& tiles, const ItemSlot& slot) { produce<C>(hp, w, sq, sk, sv, bar, tiles, slot); },
                [](const TileWork&) {});
  } else {
    regs_increase<C::CONSUMER_REGS>();
    with_item(
        [&](const TileWork& w, const KeyTiles<C>& tiles, const ItemSlot& slot) { consume<C>(p, m, w, sq, sk, sv, bar, tiles, warpgroup - 1, slot); },
        [&](const TileWork& w) { store_empty_block<C::BM, 128 * C::CONSUMERS>(p, w, threadIdx.x - 128); });
  }
}

#ifdef HOPPER_KEY_DIM
// The variant the host asked for, field by field (hopperDefines).
struct HopperFwdVariant {
  static constexpr int key_dim = HOPPER_KEY_DIM, value_dim = HOPPER_VALUE_DIM;
  static constexpr int block_n = HOPPER_BLOCK_N, stages = HOPPER_STAGES, consumers = HOPPER_CONSUMERS;
  static constexpr bool fp16 = HOPPER_FP16 != 0;
  static constexpr int bias = HOPPER_BIAS;
  static constexpr bool mask = HOPPER_MASK != 0;
  static constexpr bool pingpong = HOPPER_PINGPONG != 0, late_wait = HOPPER_LATE_WAIT != 0;
  static constexpr bool desc_step = HOPPER_DESC_STEP != 0, dynamic_grid = HOPPER_DYNAMIC_GRID != 0;
  static constexpr int rescale_slack = HOPPER_RESCALE_SLACK;
};
#if ATTNLAB_MODIFIERS
// With modifiers or a block mask (common/modifiers.cuh): the captured tensors and the block mask
// follow HopperParams, each by value.
extern "C" __global__ void __launch_bounds__(128 * (HOPPER_CONSUMERS + 1), HOPPER_CONSUMERS == 1 ? 2 : 1)
    attnlab_hopper_fwd(const __grid_constant__ HopperParams p, const __grid_constant__ AttnlabCaptures c,
                       const __grid_constant__ AttnlabBlockMask bm) {
  hopper_fwd<HopperConfig<HopperFwdVariant>>(p, FlashMods{&c, &bm});
}
#else
extern "C" __global__ void __launch_bounds__(128 * (HOPPER_CONSUMERS + 1), HOPPER_CONSUMERS == 1 ? 2 : 1)
    attnlab_hopper_fwd(const __grid_constant__ HopperParams p) {
  hopper_fwd<HopperConfig<HopperFwdVariant>>(p, FlashMods{});
}
#endif
#endif

#ifdef ATTNLAB_NVCC_TEST
#include "hopper/gen/fwd_variants.cuh"
template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS) hopper_fwd_test(const __grid_constant__ HopperParams p) {
  hopper_fwd<C>(p, FlashMods{});
}
#define HOPPER_FWD_TEST(V) template __global__ void hopper_fwd_test<HopperConfig<V>>(const __grid_constant__ HopperParams);
HOPPER_FWD_VARIANTS(HOPPER_FWD_TEST)
#endif
