// Tile scheduling: which (batch, head, query block) a thread block owns, which key tiles it visits,
// and which of those need per-element masking.
//
// Grid: x = query block counted from the end, y = b·N + n. The hardware dispatches blocks with x
// fastest, so the blocks in flight at any moment are the query blocks of a few heads: those read
// the same K and V, which then stay in L2 (at T=S=8192, H=128 one head's K+V is 4 MiB, all 64
// heads 256 MiB against 50 MiB of L2; with the head index fastest every block streams its K/V from
// HBM). Within a head the last query blocks come first: under a causal mask they are the
// longest, so the grid ends on short blocks instead of a few long ones running alone.
#pragma once
#include "flash/params.cuh"

struct TileWork {
  int b, n, kv_head;
  int m0;          // first query row of the block
  int t_len;       // valid query rows of batch b
  int s_len;       // valid keys of batch b
  int diag;        // key index of row 0's diagonal: 0 (top_left) or s_len − t_len (bottom_right)
  int m_last;      // last valid query row of the block
  int n_lo, n_hi;  // union over the block's rows of the visible keys [n_lo, n_hi)
};

__device__ __forceinline__ int clamp_len(const int* lens, int b, int full) {
  if (lens == nullptr) return full;
  const int len = lens[b];
  return len < 0 ? 0 : (len > full ? full : len);
}

// The work of query block `m_block` (rows m_block·BM …) of head `bh` = b·N + n. n_lo ≥ n_hi means no
// row of the block sees any key (or no row is valid).
template <int BM>
__device__ __forceinline__ TileWork schedule_tile_at(const FlashParams& p, int m_block, int bh) {
  TileWork w;
  w.b = bh / p.N;
  w.n = bh % p.N;
  w.kv_head = w.n / p.group;
  w.m0 = m_block * BM;
  w.t_len = clamp_len(p.q_lens, w.b, p.T);
  w.s_len = clamp_len(p.kv_lens, w.b, p.S);
  w.diag = (p.flags & FLASH_FLAG_BOTTOM_RIGHT) ? w.s_len - w.t_len : 0;
  w.m_last = imin(w.m0 + BM, w.t_len) - 1;
  // Causality and the window bound the keys by the block's first and last rows: row i sees
  // [i + diag − left, i + diag + right] ∩ (−∞, i + diag] ∩ [0, s_len).
  int hi = w.s_len;
  int lo = 0;
  if (p.flags & FLASH_FLAG_CAUSAL) hi = imin(hi, w.m_last + w.diag + 1);
  if (p.flags & FLASH_FLAG_WINDOW) {
    hi = imin(hi, w.m_last + w.diag + p.window_right + 1);
    lo = imax(lo, w.m0 + w.diag - p.window_left);
  }
  if (w.m0 > w.m_last) hi = lo;  // the whole block is past t_len: padding rows only
  w.n_lo = lo;
  w.n_hi = hi;
  return w;
}

// The block's work in the 2-D grid above (x: query block counted from the end, y: b·N + n).
template <int BM>
__device__ __forceinline__ TileWork schedule_tile(const FlashParams& p) {
  return schedule_tile_at<BM>(p, gridDim.x - 1 - blockIdx.x, blockIdx.y);
}

// Whether some (row, key) pair in the key tile [n0, n0 + BN) is invisible to some valid row of the
// block. Tiles strictly inside every row's range skip the per-element test: under a causal mask
// that is all but the diagonal tiles.
template <int BN>
__device__ __forceinline__ bool tile_needs_mask(const FlashParams& p, const TileWork& w, int n0) {
  const int n_end = n0 + BN - 1;
  if (n_end >= w.s_len) return true;
  if ((p.flags & FLASH_FLAG_CAUSAL) && n_end > w.m0 + w.diag) return true;
  if (p.flags & FLASH_FLAG_WINDOW) {
    if (n_end > w.m0 + w.diag + p.window_right) return true;
    if (n0 < w.m_last + w.diag - p.window_left) return true;
  }
  return false;
}

// The per-element rule, the same as keyRange() in src/backends/cpu/visibility.ts.
__device__ __forceinline__ bool key_visible(const FlashParams& p, const TileWork& w, int row, int key) {
  if (key >= w.s_len) return false;
  const int d = row + w.diag;
  if ((p.flags & FLASH_FLAG_CAUSAL) && key > d) return false;
  if ((p.flags & FLASH_FLAG_WINDOW) && (key < d - p.window_left || key > d + p.window_right)) return false;
  return true;
}
