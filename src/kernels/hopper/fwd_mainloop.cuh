// The Hopper forward's two roles on one work item (a query block of one head; hopper_fwd.cu walks
// the items): the producer's TMA loads of Q once and of the K/V tiles into the ring, and a consumer
// warpgroup's main loop over them, S = Q·Kᵀ, the online softmax and O += P·V, overlapped inside the
// warpgroup and ping-ponged between warpgroups (docs/internals/hopper-forward.md).
#pragma once
#include "flash/mask.cuh"
#include "hopper/fwd_epilogue.cuh"
#include "hopper/fwd_params.cuh"
#include "hopper/fwd_scheduler.cuh"
#include "hopper/softmax.cuh"
#include "hopper/tiles.cuh"

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
                                        const Barriers& bar, const KeyTiles<C>& tiles, const ItemSlot& slot) {
  // The dynamic grid's producer waits for Q to be free before it writes the item slot (run_dynamic).
  mbar_arrive_expect_tx(bar.q_full(), C::Q_BYTES);
#pragma unroll
  for (int c = 0; c < C::BOXES; ++c) tma_load_4d(sq + c * C::Q_BOX, &hp.tm_q, bar.q_full(), c * 64, w.m0, w.n, w.b);
  int it = slot.ring;
  for (int nb = tiles.first(); nb >= tiles.lo; nb = tiles.next(nb), ++it) {
    const int s = it % C::STAGES;
    const u32 phase = (it / C::STAGES) & 1;
    const u32 k_dst = sk + s * C::K_BYTES, v_dst = sv + s * C::V_BYTES;
    mbar_wait(bar.k_empty(s), phase ^ 1);
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
__device__ __forceinline__ void consume(const FlashParams& p, const FlashMods& m, const TileWork& w, u32 sq, u32 sk,
                                        u32 sv, const Barriers& bar, const KeyTiles<C>& key_tiles, int consumer,
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
    const int n0 = nb * C::BN;
    float (&s3)[1][C::NT][4] = reinterpret_cast<float (&)[1][C::NT][4]>(s);
    float factor;
    if constexpr (ATTNLAB_MODIFIERS)
      factor = scale_and_mask<1, C::NT, C::BIAS, C::MASK>(s3, p, w, row0, n0, lane, tile_needs_mask<C::BN>(p, w, n0),
                                                          m, key_tiles.kind(nb, consumer));
    else
      factor = scale_and_mask<1, C::NT, C::BIAS, C::MASK>(s3, p, w, row0, n0, lane, tile_needs_mask<C::BN>(p, w, n0));
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
    if constexpr (C::DYNAMIC) release(bar.q_empty());
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
  const int tiles = key_tiles.count();
  int nb = key_tiles.first();  // the tile of turn `it`
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
  softmax_tile(nb);
  to_a_fragments<C>(pa, s);
  for (int it = 1; it < tiles; ++it) {
    const int st = stage(it), prev = stage(it - 1);
    int prev_nb;
    if constexpr (ATTNLAB_BLOCK_MASK) {
      prev_nb = nb;
      nb = key_tiles.next(nb);
    } else {
      nb = key_tiles.hi - 1 - it;
      prev_nb = nb + 1;
    }
    wait_values(it - 1, prev_nb);
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
  wait_values(tiles - 1, ATTNLAB_BLOCK_MASK ? nb : key_tiles.lo);
  turn_begin();
  fence_operands();
  pv_issue<C>(o, pa, sv + last * C::V_BYTES);
  wgmma_commit();
  turn_end(true);
  wgmma_wait<0>();
  fence_accumulators(o);
  keep_fragments(pa);
  release(bar.v_empty(last));
  float inv[2], lse[2];
  softmax.finish(inv, lse);
  store_rows<C>(p, m, w, o, inv, lse, row0, lane);
}
