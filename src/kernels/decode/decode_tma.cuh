// The TMA loader of flash_decode_ws.cu (sm_90; one kv head of H = Hv = 128 per block): a tile of TK
// keys of K (and of V) arrives as a handful of tensor copies instead of TK row copies.
//
// Why: one producer warp issuing a 128-key tile's 256 whole-row bulk copies (8 a lane, serialised)
// took ~68 clocks a copy, and ws1.4x32.s3f read 996 GB/s where heads1.4x32.s3 (256 threads, one copy
// each) read 2982 (device call 1, bench/decode/s9-plan.md). A tensor copy moves a box of 64 columns ×
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
// CTA reads it any more. (Session 16, call 3: a producer forwarding its own consumers' release to the other CTA,
// one remote arrival a tile instead of 8, read the same GB/s within 0.3%; the simpler protocol stays.)
// One tile's boxes: BOXR rows a box, BOXES boxes a half (or a group), COPIES copies of K (and V, where KV).
template <int TK, int GROUP, bool KV>
struct TmaTile {
  int boxr, boxes, copies;
  __device__ __forceinline__ explicit TmaTile(const DecodeParams& p) {
    boxr = GROUP > 0 ? GROUP : p.block_table ? imin(p.block_size, TK) : TK;
    boxes = TK / boxr;
    copies = (GROUP ? 1 : 2) * (KV ? 2 : 1) * boxes;
  }
};

// The pool blocks of tile i's boxes this lane copies (copies lane and lane + 32; 0 where none or dense).
template <int TK, int GROUP, bool KV>
__device__ __forceinline__ void tma_pages(const DecodeParams& p, const TmaTile<TK, GROUP, KV>& t, const int* table_row,
                                          const BlockKeys& keys, int i, int lane, int (&pg)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int c = lane + 32 * r, kb = keys.lo + i * TK + (c % t.boxes) * t.boxr;
    pg[r] = (table_row && c < t.copies && i < keys.tile_hi && kb < keys.hi) ? table_row[kb / p.block_size] : 0;
  }
}

// Tile i's copies into the stage at `base`, on `bar`: lane 0 arms the barrier with their bytes (an arrival), then
// each lane issues its copies (tma_produce's comment says which). KV = false: K's copies alone.
template <int TK, int K_BYTES, int GROUP, bool MULTICAST, bool KV>
__device__ __forceinline__ void tma_issue(const DecodeParams& p, const TmaDesc* kmap, const TmaDesc* vmap,
                                          const TmaTile<TK, GROUP, KV>& t, const BlockKeys& keys, int i, int b, int kh,
                                          u32 base, u32 bar, const int (&pg)[2], int lane, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool paged = p.block_table != nullptr;
  const int boxr = t.boxr, boxes = t.boxes;
  const int key0 = keys.lo + i * TK;
  const int valid = paged ? imin(boxes, (keys.hi - key0 + boxr - 1) / boxr) : boxes;  // boxes with keys
  // K (and V): boxr rows × 256 B a box
  if (lane == 0) dec_mbar_arrive_expect_tx(bar, valid * boxr * 128 * (KV ? 4 : 2));
  __syncwarp();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int c = lane + 32 * r, box = c % boxes;
    if (c >= t.copies || box >= valid || (MULTICAST && c % 2 != rank)) continue;
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
#else
  __trap();  // the host runs the TMA loader only on sm_90
#endif
}

template <int TK, int STAGES, int K_BYTES, int STAGE_BYTES, int GROUP = 0, bool MULTICAST = false>
__device__ __forceinline__ void tma_produce(const DecodeParams& p, const TmaDesc* kmap, const TmaDesc* vmap,
                                            const BlockKeys& keys, int b, int kh, u32 loop_smem, u32 full,
                                            u32 empty, int lane, int rank = 0) {
  static_assert(!MULTICAST || GROUP >= 0, "multicast: the boxes consumers read");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int* table_row = p.block_table ? p.block_table + (i64)b * p.max_blocks : nullptr;
  const TmaTile<TK, GROUP, true> t(p);
  if (lane == 0) {
    tma_prefetch_desc(kmap);
    tma_prefetch_desc(vmap);
  }
  int pg[2];
  tma_pages(p, t, table_row, keys, keys.tile_lo, lane, pg);
  for (int i = keys.tile_lo; i < keys.tile_hi; ++i) {
    const int n = i - keys.tile_lo, stage = n % STAGES;
    int next[2];
    tma_pages(p, t, table_row, keys, i + 1, lane, next);
    if (n >= STAGES) ws_wait(empty + stage * 8, (n / STAGES - 1) & 1);
    tma_issue<TK, K_BYTES, GROUP, MULTICAST, true>(p, kmap, vmap, t, keys, i, b, kh, loop_smem + stage * STAGE_BYTES,
                                                   full + stage * 8, pg, lane, rank);
    pg[0] = next[0], pg[1] = next[1];
  }
#else
  __trap();  // the host runs the TMA loader only on sm_90
#endif
}

// K by tensor copies (producer warp 0, tma_issue's KV = false) and V through registers (STAGED): W producer warps each
// load TK / W of a tile's V rows with 16-byte plain loads (lane ℓ: row pw·TK/W + ℓ/16 + 2u, columns (ℓ % 16)·8 …,
// two whole 256-byte rows a warp-load) before they wait for the stage, then store them into V's swizzled layout LV
// and arrive on `full` (every producer thread, and warp 0's armed arrival for K's bytes). Rows past the range load
// the range's last row instead (no branch a load) and are not stored: they keep stale shared memory, as pages past
// the range do under the tensor copies (the consumers mask both, tma_produce's comment at the top).
// Why (bench/results/2026-12-03-s19-decode, call 1, read-ceiling --staged): scattered 4 KiB pages of 512 MiB through
// shared-memory stages read 3888 GB/s by the TMA engine alone and 4189–4201 with half of each stage's pages through
// 8 warps' registers (plain loads alone, no stages: 4238–4340); a 16-row page of V is one such 4 KiB chunk.
// PAGED: pages of a power-of-two block size (the TMA loader's), so a row's page and its row in it are a shift and a
// mask: call 4 found the first form's two runtime divisions a load (~1,800 instructions a tile and warp) holding
// it to 1.3 TB/s.
template <bool PAGED, int TK, int STAGES, int K_BYTES, int STAGE_BYTES, int GROUP, int W, class LV>
__device__ __forceinline__ void staged_produce_as(const DecodeParams& p, const TmaDesc* kmap, const BlockKeys& keys,
                                                  int b, int kh, u32 loop_smem, u32 full, u32 empty, int pw, int lane) {
  constexpr int ROWS = TK / W, LOADS = ROWS / 2;  // a warp's V rows a tile; a lane's loads (two rows a warp-load)
  static_assert(TK % (2 * W) == 0, "whole row pairs a warp");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int* table_row = PAGED ? p.block_table + (i64)b * p.max_blocks : nullptr;
  const TmaTile<TK, GROUP, false> t(p);
  if (pw == 0 && lane == 0) tma_prefetch_desc(kmap);
  const int bs_log2 = PAGED ? 31 - __clz(p.block_size) : 0, in_page = PAGED ? p.block_size - 1 : 0;
  const i64 page_elems = PAGED ? (i64)p.block_size * p.v_token : 0;
  // this lane's 16 bytes of row 0 of K=kh's V: dense, sequence b's (the TMA loader takes no packed keys)
  const u16* v_lane = p.v + (i64)kh * p.v_head + (PAGED ? 0 : (i64)b * p.S * p.v_token) + (lane % 16) * 8;
  const int row0 = pw * ROWS + lane / 16, last = keys.hi - 1;
  auto v_pages = [&](int i, int (&pg)[LOADS]) {
#pragma unroll
    for (int u = 0; u < LOADS; ++u)
      pg[u] = PAGED && i < keys.tile_hi ? table_row[imin(keys.lo + i * TK + row0 + 2 * u, last) >> bs_log2] : 0;
  };
  int kpg[2], vpg[LOADS];
  if (pw == 0) tma_pages(p, t, table_row, keys, keys.tile_lo, lane, kpg);
  v_pages(keys.tile_lo, vpg);
  for (int i = keys.tile_lo; i < keys.tile_hi; ++i) {
    const int n = i - keys.tile_lo, stage = n % STAGES, key0 = keys.lo + i * TK;
    u128 x[LOADS];
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const int j = imin(key0 + row0 + 2 * u, last);
      const i64 at = PAGED ? vpg[u] * page_elems + (i64)(j & in_page) * p.v_token : (i64)j * p.v_token;
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(x[u].x), "=r"(x[u].y), "=r"(x[u].z), "=r"(x[u].w)
                   : "l"(v_lane + at));
    }
    int knext[2], vnext[LOADS];
    if (pw == 0) tma_pages(p, t, table_row, keys, i + 1, lane, knext);
    v_pages(i + 1, vnext);  // in flight with the loads
    if (n >= STAGES) ws_wait(empty + stage * 8, (n / STAGES - 1) & 1);
    const u32 base = loop_smem + stage * STAGE_BYTES, bar = full + stage * 8;
    if (pw == 0) tma_issue<TK, K_BYTES, GROUP, false, false>(p, kmap, kmap, t, keys, i, b, kh, base, bar, kpg, lane, 0);
#pragma unroll
    for (int u = 0; u < LOADS; ++u) {
      const int row = row0 + 2 * u;
      if (key0 + row <= last)
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(LV::at(base + K_BYTES, row, (lane % 16) * 8)),
                     "r"(x[u].x), "r"(x[u].y), "r"(x[u].z), "r"(x[u].w)
                     : "memory");
    }
    dec_mbar_arrive(bar);  // releases this thread's stores to the consumers that wait on `full`
    if (pw == 0) kpg[0] = knext[0], kpg[1] = knext[1];
#pragma unroll
    for (int u = 0; u < LOADS; ++u) vpg[u] = vnext[u];
  }
#else
  __trap();  // the host runs the TMA loader only on sm_90
#endif
}
template <int TK, int STAGES, int K_BYTES, int STAGE_BYTES, int GROUP, int W, class LV>
__device__ __forceinline__ void staged_produce(const DecodeParams& p, const TmaDesc* kmap, const BlockKeys& keys, int b,
                                               int kh, u32 loop_smem, u32 full, u32 empty, int pw, int lane) {
  if (p.block_table)
    staged_produce_as<true, TK, STAGES, K_BYTES, STAGE_BYTES, GROUP, W, LV>(p, kmap, keys, b, kh, loop_smem, full,
                                                                            empty, pw, lane);
  else
    staged_produce_as<false, TK, STAGES, K_BYTES, STAGE_BYTES, GROUP, W, LV>(p, kmap, keys, b, kh, loop_smem, full,
                                                                             empty, pw, lane);
}
