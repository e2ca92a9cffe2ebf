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
#include "hopper/sm90.cuh"

// With a block mask, an item's key tiles as bitmaps in shared memory (hopper_fwd.cu builds them once
// per item, before its loads): one bit per BN-key tile, bit nb of word nb / 32, in 1 + CONSUMERS maps
// of tile_words(S) words each: the tiles with a kept block over the item's rows (not EMPTY), then for
// each consumer the tiles FULL over its 64 rows (with blocks shorter than the item, blockQ = 64, a tile
// may be FULL for a consumer though PARTIAL over the item). The walk then costs a shared load and a
// bit scan per tile; reading the block kinds from global memory in every next() and kind() (four
// integer divisions and a dependent load per tile, a linear search over every EMPTY tile, and again
// by each role) made causal as a mask modifier slower than the dense kernel (4.01 against 3.38 ms,
// B=4 T=S=8192 N=16 H=128 on an H100).
template <class C>
__device__ __forceinline__ int tile_words(const FlashParams& p) {
  return ((p.S + C::BN - 1) / C::BN + 31) / 32;
}
// Where the bitmaps are: their shared address and the words of one map (tile_words).
struct TileBits {
  u32 addr;
  int words;
};

// The bitmaps of the block's `item`-th item: the dynamic grid keeps two sets, by the item's parity,
// so the producer classifies the next item while the consumers still read the current one's.
template <class C>
__device__ __forceinline__ TileBits item_bits(const TileBits& bits, int item) {
  return TileBits{bits.addr + (C::DYNAMIC ? static_cast<u32>(item & 1) * 4u * (1 + C::CONSUMERS) * bits.words : 0u),
                  bits.words};
}

// The rows [lo, hi] consumer c of item w holds (its 64, clamped to the item's last valid row).
template <class C>
__device__ __forceinline__ void consumer_rows(const TileWork& w, int c, int& lo, int& hi) {
  lo = imin(w.m0 + c * 64, w.m_last);
  hi = imin(w.m0 + c * 64 + 63, w.m_last);
}

// The words of item w's bitmaps covering tile word `word` (tiles 32·word … 32·word + 31): the kept map's
// in *kept, consumer c's FULL map's in full[c]. The whole warp calls it, a lane one tile (its kinds
// from global memory: tile_kind), a ballot per map; every lane gets the words.
template <class C>
__device__ __forceinline__ void classify_word(const FlashMods& m, const TileWork& w, int word, unsigned* kept_word,
                                              unsigned (&full_words)[C::CONSUMERS]) {
  const int lane = threadIdx.x % 32;
  const int lo = w.n_lo / C::BN, hi = (w.n_hi + C::BN - 1) / C::BN;
  const int nb = word * 32 + lane;
  // The item's rows are the union of its consumers' (clamped to m_last), so a tile is kept when some
  // consumer's kind is not EMPTY; the consumers' kinds are independent loads, issued together.
  bool kept = false;
  unsigned full = 0;  // bit c: FULL over consumer c's rows
  if (nb >= lo && nb < hi && w.n_lo < w.n_hi) {
    const int kv0 = nb * C::BN, kv1 = imin(kv0 + C::BN, w.s_len) - 1;
#pragma unroll
    for (int c = 0; c < C::CONSUMERS; ++c) {
      int r0, r1;
      consumer_rows<C>(w, c, r0, r1);
      const int kind = tile_kind(m, w.b, w.n, r0, r1, kv0, kv1);
      kept = kept || kind != ATTNLAB_TILE_EMPTY;
      if (kind == ATTNLAB_TILE_FULL) full |= 1u << c;
    }
  }
  *kept_word = __ballot_sync(0xffffffffu, kept);
#pragma unroll
  for (int c = 0; c < C::CONSUMERS; ++c) full_words[c] = __ballot_sync(0xffffffffu, (full >> c) & 1u);
}

// Stores word `word` of each of the item's maps at `bits` (one thread).
template <class C>
__device__ __forceinline__ void store_word(const TileBits& bits, int word, unsigned kept_word,
                                           const unsigned (&full_words)[C::CONSUMERS]) {
  st_shared_s32(bits.addr + 4 * word, static_cast<int>(kept_word));
#pragma unroll
  for (int c = 0; c < C::CONSUMERS; ++c)
    st_shared_s32(bits.addr + 4 * ((1 + c) * bits.words + word), static_cast<int>(full_words[c]));
}

// Writes item w's bitmaps at `bits` from the block mask: warp `warp` of `warps` takes words warp,
// warp + warps, … (classify_word, then lane 0 stores them: store_word). The caller orders the writes
// before the readers (__syncthreads). The 2-D grid's form; the dynamic grid's producer keeps the words
// in its lanes across its q_empty wait and falls back to this past 32 words a map.
template <class C>
__device__ __forceinline__ void classify_tiles(const FlashMods& m, const TileWork& w, const TileBits& bits, int warp,
                                               int warps) {
#if ATTNLAB_BLOCK_MASK
  for (int word = warp; word < bits.words; word += warps) {
    unsigned kept_word, full_words[C::CONSUMERS];
    classify_word<C>(m, w, word, &kept_word, full_words);
    if (threadIdx.x % 32 == 0) store_word<C>(bits, word, kept_word, full_words);
  }
#endif
}

// The key tiles of item w, visited last first: [lo, hi) from the built-in masks (schedule_tile_at),
// with a block mask only those its bitmaps (classify_tiles, at `bits`) keep. The producer and the
// consumers walk the same tiles in the same order: the K/V ring's stages and phases count the tiles
// visited. Without a block mask first() is hi − 1, next() a decrement and count() hi − lo.
template <class C>
struct KeyTiles {
  int lo, hi;
#if ATTNLAB_BLOCK_MASK
  TileBits bits;
#endif
  __device__ __forceinline__ KeyTiles(const FlashMods& mods, const TileWork& w, const TileBits& tile_bits = TileBits{})
      : lo(w.n_lo / C::BN), hi((w.n_hi + C::BN - 1) / C::BN)
#if ATTNLAB_BLOCK_MASK
      , bits(tile_bits)
#endif
  {
    (void)mods;
    (void)tile_bits;
  }
  // The block mask's kind of (visited) tile nb over consumer c's rows: FULL or PARTIAL; without a
  // block mask, what tile_kind says of every tile (PARTIAL with a mask modifier, else FULL).
  __device__ __forceinline__ int kind(int nb, int c) const {
#if ATTNLAB_BLOCK_MASK
    const u32 word = static_cast<u32>(ld_shared_s32(bits.addr + 4 * ((1 + c) * bits.words + nb / 32)));
    return (word >> (nb % 32)) & 1u ? ATTNLAB_TILE_FULL : ATTNLAB_TILE_PARTIAL;
#else
    (void)nb;
    (void)c;
    return tile_kind(FlashMods{}, 0, 0, 0, 0, 0, 0);
#endif
  }
  // The tile visited after nb (< lo when none is left): the highest kept tile below nb.
  __device__ __forceinline__ int next(int nb) const {
    --nb;
#if ATTNLAB_BLOCK_MASK
    if (nb < lo) return lo - 1;
    int word = nb / 32;
    u32 kept = static_cast<u32>(ld_shared_s32(bits.addr + 4 * word)) & (0xffffffffu >> (31 - nb % 32));
    while (kept == 0) {
      if (--word < lo / 32) return lo - 1;
      kept = static_cast<u32>(ld_shared_s32(bits.addr + 4 * word));
    }
    return word * 32 + 31 - __clz(kept);
#else
    return nb;
#endif
  }
  __device__ __forceinline__ int first() const { return next(hi); }
  // Whether item w has a key tile to visit.
  __device__ __forceinline__ static bool any(const FlashMods& m, const TileWork& w, const TileBits& tile_bits = TileBits{}) {
    if (!(w.n_lo < w.n_hi)) return false;
    if constexpr (ATTNLAB_BLOCK_MASK) {
      const KeyTiles tiles(m, w, tile_bits);
      return tiles.first() >= tiles.lo;
    }
    return true;
  }
  __device__ __forceinline__ int count() const {
#if ATTNLAB_BLOCK_MASK
    int visited = 0;
    for (int word = lo / 32; word <= (hi - 1) / 32; ++word) visited += __popc(static_cast<u32>(ld_shared_s32(bits.addr + 4 * word)));
    return visited;
#else
    return hi - lo;
#endif
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
