// The TMA loader of flash_decode_ws.cu (sm_90; one kv head of H = Hv = 128 per block): a tile of TK
// keys of K (and of V) arrives as a handful of tensor copies instead of TK row copies.
//
// Why: one producer warp issuing a 128-key tile's 256 whole-row bulk copies (8 a lane, serialised)
// took ~68 clocks a copy, and ws1.4x32.s3f read 996 GB/s where heads1.4x32.s3 (256 threads, one copy
// each) read 2982 (docs/internals/decode.md). A tensor copy moves a box of 64 columns ×
// BOXR token rows: dense, the tile's TK rows at once (4 copies a tile: K and V × two 64-column halves);
// paged, one page's rows (block 16: 32 copies, one per lane; block 64: 8), BOXR = min(block, TK).
//
// The maps (built by the host, tma_map_dims): 4-D, innermost first: H (128 elements, contiguous), token
// (S dense, blockSize paged; stride k_token), kv head (stride k_head), sequence or pool block (stride
// S·k_token or blockSize·k_token); box {64, BOXR, 1, 1} with the 128-byte swizzle. A stage holds K's
// two halves [0,64) and [64,128) of TK rows × 128 B each (Sw128Layout<TK>), then V's.
//
// Tiles start at multiples of TK (tma_block_keys), so a paged tile covers whole pages (TK % BOXR == 0
// and blockSize % BOXR == 0: the host runs this loader only for power-of-two blocks ≥ 8). Rows the
// copies do not write (pages past the range) hold stale shared memory, rows past a sequence inside a
// copied box hold whatever the cache holds there (dense rows ≥ S come as zeros): no zero-fill. They
// are safe as the consumers treat them: logits of keys a row does not see are replaced by −inf
// (a select, so NaN there never enters), and a 16-key chunk that some row does not see whole is
// checked for NaN/Inf in V before the tensor-core P·V (pv_tile_at's scalar path multiplies only the
// visible pairs), so a zero weight never meets a non-finite value.
#pragma once
#include "decode/decode_warp.cuh"
#include "hopper/sm90.cuh"

// block_keys' range of a block for the TMA loader: the first tile starts at lo rounded down to a
// multiple of TK (keys before lo are masked), split `split` of `splits` takes its share of the tiles.
template <int TK>
__device__ __forceinline__ BlockKeys tma_block_keys(BlockKeys k, int splits, int split) {
  const int lo = k.hi > k.lo ? k.lo - k.lo % TK : k.lo;
  const int tiles = (k.hi - lo + TK - 1) / TK;
  const int per_split = (tiles + splits - 1) / splits;
  const int tile_lo = imin(split * per_split, tiles);
  return {lo, k.hi, k.all_lo, k.all_hi, tile_lo, imin(tile_lo + per_split, tiles)};
}

// The producer warp: per tile, wait the stage's `empty` barrier (after the first STAGES tiles), arm
// `full` with the bytes of the boxes it copies, and issue them. GROUP = 0: copy c (lane c, c + 32) is box
// c % B, half (c / B) % 2, of K (c < 2B) or V, where B = TK / BOXR boxes a half (a 4-D map, box {64, BOXR}).
// GROUP > 0: copy c is group c % B of K (c < B) or V, B = TK / GROUP, both halves of its GROUP rows in one
// box {64, GROUP, 2} of a 5-D map (halves as a dimension of stride 128 B, Sw128Layout<GROUP>). The next
// tile's table entries are loaded before the wait. GROUP < 0 (the harness's loader-only measurement, no
// consumer reads them): whole 256-byte rows unswizzled, box {128, BOXR} of the 4-D map, K and V a box each.
//
// MULTICAST (row groups as a cluster of two CTAs, flash_decode_ws.cu): both CTAs read the same tiles, so each
// producer issues the copies of its parity (c % 2 == `rank`) to both CTAs at once, and arms its own `full`
// with the whole stage's bytes (half come from the other CTA's copies; the phase cannot complete before this
// producer's arrival, the barrier's only one, whatever order the bytes come in). Its `empty` counts both
// CTAs' consumers (every consumer warp arrives on both CTAs' `empty`): a stage is refilled only when neither
// CTA reads it any more. (A producer forwarding its own consumers' release to the other CTA,
// one remote arrival a tile instead of 8, read the same GB/s within 0.3%; the simpler protocol stays.)
template <int TK, int STAGES, int K_BYTES, int STAGE_BYTES, int GROUP = 0, bool MULTICAST = false>
__device__ __forceinline__ void tma_produce(const DecodeParams& p, const TmaDesc* kmap, const TmaDesc* vmap,
                                            const BlockKeys& keys, int b, int kh, u32 loop_smem, u32 full,
                                            u32 empty, int lane, int rank = 0) {
  static_assert(!MULTICAST || GROUP >= 0, "multicast: the boxes consumers read");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool paged = p.block_table != nullptr;
  const int* table_row = paged ? p.block_table + (i64)b * p.max_blocks : nullptr;
  const int boxr = GROUP > 0 ? GROUP : paged ? imin(p.block_size, TK) : TK, boxes = TK / boxr;
  const int copies = (GROUP ? 2 : 4) * boxes;
  if (lane == 0) {
    tma_prefetch_desc(kmap);
    tma_prefetch_desc(vmap);
  }
  auto pages_of = [&](int i, int (&pg)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int c = lane + 32 * r, kb = keys.lo + i * TK + (c % boxes) * boxr;
      pg[r] = (paged && c < copies && i < keys.tile_hi && kb < keys.hi) ? table_row[kb / p.block_size] : 0;
    }
  };
  int pg[2];
  pages_of(keys.tile_lo, pg);
  for (int i = keys.tile_lo; i < keys.tile_hi; ++i) {
    const int n = i - keys.tile_lo, stage = n % STAGES;
    int next[2];
    pages_of(i + 1, next);
    if (n >= STAGES) ws_wait(empty + stage * 8, (n / STAGES - 1) & 1);
    const int key0 = keys.lo + i * TK;
    const int valid = paged ? imin(boxes, (keys.hi - key0 + boxr - 1) / boxr) : boxes;  // boxes with keys
    const u32 base = loop_smem + stage * STAGE_BYTES, bar = full + stage * 8;
    if (lane == 0) dec_mbar_arrive_expect_tx(bar, valid * boxr * 128 * 4);  // K and V: boxr rows × 256 B a box
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int c = lane + 32 * r, box = c % boxes;
      if (c >= copies || box >= valid || (MULTICAST && c % 2 != rank)) continue;
      const int kb = key0 + box * boxr;
      if constexpr (GROUP < 0) {
        const bool v = c >= boxes;
        const u32 dst = base + (v ? K_BYTES : 0) + box * boxr * 256;
        if (paged)
          tma_load_4d(dst, v ? vmap : kmap, bar, 0, kb % p.block_size, kh, pg[r]);
        else
          tma_load_4d(dst, v ? vmap : kmap, bar, 0, kb, kh, b);
      } else if constexpr (GROUP > 0) {
        const bool v = c >= boxes;
        const u32 dst = base + (v ? K_BYTES : 0) + box * GROUP * 256;
        const TmaDesc* map = v ? vmap : kmap;
        const int c1 = paged ? kb % p.block_size : kb, c4 = paged ? pg[r] : b;
        if constexpr (MULTICAST)
          tma_load_5d_multicast(dst, map, bar, 0b11, 0, c1, 0, kh, c4);
        else
          tma_load_5d(dst, map, bar, 0, c1, 0, kh, c4);
      } else {
        const bool v = c >= 2 * boxes;
        const int half = (c / boxes) % 2;
        const u32 dst = base + (v ? K_BYTES : 0) + half * (TK * 128) + box * boxr * 128;
        const TmaDesc* map = v ? vmap : kmap;
        const int c1 = paged ? kb % p.block_size : kb, c3 = paged ? pg[r] : b;
        if constexpr (MULTICAST)
          tma_load_4d_multicast(dst, map, bar, 0b11, half * 64, c1, kh, c3);
        else
          tma_load_4d(dst, map, bar, half * 64, c1, kh, c3);
      }
    }
    pg[0] = next[0], pg[1] = next[1];
  }
#else
  __trap();  // the host runs the TMA loader only on sm_90
#endif
}
