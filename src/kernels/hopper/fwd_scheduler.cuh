// The Hopper forward's work items and their order. An item is one query block of one head (b·N + n).
//   2-D grid (one item per block): x = query block counted from the end, y = b·N + n, as the mma.sync
//     kernel (flash/schedule.cuh): the blocks in flight are a few heads' query blocks, longest first.
//   dynamic grid (dynamic_grid): about one block per SM; block p runs item p, then whatever a global
//     counter hands it, in the order dynamic_tile gives (hopper_fwd.cu run_dynamic).
//   key tiles (KeyTiles): an item's tiles of BN keys, last first, within the bounds the built-in masks
//     give (causal, window, lengths); with a block mask, only those it does not call EMPTY.
#pragma once
#include "common/modifiers.cuh"
#include "flash/schedule.cuh"
#include "hopper/fwd_config.cuh"
#include "hopper/fwd_params.cuh"

// The key tiles of item w, visited last first: [lo, hi) from the built-in masks (schedule_tile_at),
// skipping the tiles a block mask calls EMPTY over the item's rows (tile_kind: every block the tile
// overlaps is empty). The producer and the consumers walk the same tiles in the same order: the K/V
// ring's stages and phases count the tiles visited. Without a block mask first() is hi − 1, next()
// a decrement and count() hi − lo.
template <class C>
struct KeyTiles {
  int lo, hi;
#if ATTNLAB_BLOCK_MASK
  FlashMods m;
  int b, n, m0, m_last, s_len;
#endif
  __device__ __forceinline__ KeyTiles(const FlashMods& mods, const TileWork& w)
      : lo(w.n_lo / C::BN), hi((w.n_hi + C::BN - 1) / C::BN)
#if ATTNLAB_BLOCK_MASK
      , m(mods), b(w.b), n(w.n), m0(w.m0), m_last(w.m_last), s_len(w.s_len)
#endif
  {
  }
  // The block mask's kind of tile nb over rows [q0, q1] (the item's, or one consumer's); without a
  // block mask, what tile_kind says of every tile (PARTIAL with a mask modifier, else FULL).
  __device__ __forceinline__ int kind(int nb, int q0, int q1) const {
#if ATTNLAB_BLOCK_MASK
    return tile_kind(m, b, n, q0, q1, nb * C::BN, imin(nb * C::BN + C::BN, s_len) - 1);
#else
    return tile_kind(FlashMods{}, 0, 0, q0, q1, 0, 0);
#endif
  }
  __device__ __forceinline__ bool skipped(int nb) const {
#if ATTNLAB_BLOCK_MASK
    return kind(nb, m0, m_last) == ATTNLAB_TILE_EMPTY;
#else
    return false;
#endif
  }
  // The tile visited after nb (< lo when none is left).
  __device__ __forceinline__ int next(int nb) const {
    --nb;
    if constexpr (ATTNLAB_BLOCK_MASK)
      while (nb >= lo && skipped(nb)) --nb;
    return nb;
  }
  __device__ __forceinline__ int first() const { return next(hi); }
  // Whether item w has a key tile to visit.
  __device__ __forceinline__ static bool any(const FlashMods& m, const TileWork& w) {
    if (!(w.n_lo < w.n_hi)) return false;
    if constexpr (ATTNLAB_BLOCK_MASK) {
      const KeyTiles tiles(m, w);
      return tiles.first() >= tiles.lo;
    }
    return true;
  }
  __device__ __forceinline__ int count() const {
    if constexpr (!ATTNLAB_BLOCK_MASK) return hi - lo;
    int visited = 0;
    for (int nb = lo; nb < hi; ++nb) visited += skipped(nb) ? 0 : 1;
    return visited;
  }
};

// Query heads whose K and V (2·S·(D + DV) bytes per KV head, shared by p.group query heads) fit in
// `bytes`, at least one KV head's.
template <class C>
__device__ __forceinline__ int heads_in_bytes(const FlashParams& p, long long bytes) {
  const long long kv_bytes = 2ll * p.S * (C::D + C::DV);
  const int fit = imax(1, static_cast<int>(bytes / (kv_bytes > 0 ? kv_bytes : 1)));  // KV heads
  return imin(p.B * p.N, imin(fit, p.B * p.N) * p.group);
}
// Item i of the dynamic grid's order: heads / section sections of consecutive query heads, as equal
// as they can be (the first heads % sections hold one head more), each walked longest block first
// across its heads. No partial last section: a last section of one head would run its longest
// block alone at the end (the schedule model, benchmarks/harnesses/hopper-schedule-model.py: 192x80 at
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
// two heads' K/V in L2, which sections of six heads over 24 MiB did not: −6…−8%). Causal:
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
