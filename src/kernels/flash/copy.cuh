// Global → shared tile loads with cp.async, 16 bytes (8 elements) per copy.
//
// Shared tiles have a row pitch of D + 8 elements instead of a swizzle: with D a multiple of 16 the
// pitch is an odd number of 16-byte units, so the 8 row addresses of one ldmatrix phase fall in 8
// different 16-byte bank groups for every head dim from 32 to 256 alike (an XOR swizzle needs at
// least 8 chunks per row, i.e. D ≥ 64, and a power-of-two chunk count). It costs 16 bytes per row:
// 6% of a D=128 tile.
#pragma once
#include "flash/mma.cuh"

template <int D>
struct SmemTile {
  static constexpr int PITCH = D + 8;  // elements
  static constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
};

// Copies rows [0, ROWS) of a tile whose row r starts at src + r·row_stride. Rows ≥ valid_rows and
// columns ≥ valid_cols (H or Hv inside the padded D) are zero-filled without reading global memory.
//
// When the block's threads cover whole rows (CHUNKS divides THREADS: D a power of two), each thread
// keeps one column and walks down the rows with one pointer increment per copy. The generic index
// arithmetic let the compiler hoist a 64-bit offset per copy out of the key loop: 32 registers at
// D=128, enough to make the 4-warp kernel spill.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(u32 dst, const u16* src, i64 row_stride, int valid_rows, int valid_cols) {
  constexpr int CHUNKS = SmemTile<D>::CHUNKS;
  constexpr int PITCH_BYTES = SmemTile<D>::PITCH * 2;
  if constexpr (THREADS % CHUNKS == 0) {
    constexpr int ROWS_PER_STEP = THREADS / CHUNKS;
    const int c = threadIdx.x % CHUNKS;
    const int r0 = threadIdx.x / CHUNKS;
    const bool col_ok = c * 8 < valid_cols;
    const u16* from = src + r0 * row_stride + c * 8;
    const i64 step = ROWS_PER_STEP * row_stride;
    u32 to = dst + r0 * PITCH_BYTES + c * 16;
#pragma unroll
    for (int it = 0; it < (ROWS + ROWS_PER_STEP - 1) / ROWS_PER_STEP; ++it) {
      const int r = r0 + it * ROWS_PER_STEP;
      const bool ok = col_ok && r < valid_rows;
      if (ROWS % ROWS_PER_STEP == 0 || r < ROWS) cp_async_16(to, ok ? from : src, ok ? 16 : 0);
      from += step;
      to += ROWS_PER_STEP * PITCH_BYTES;
    }
  } else {
    constexpr int TOTAL = ROWS * CHUNKS;
#pragma unroll
    for (int idx0 = 0; idx0 < TOTAL; idx0 += THREADS) {
      const int idx = idx0 + threadIdx.x;
      if (TOTAL % THREADS == 0 || idx < TOTAL) {
        const int r = idx / CHUNKS;
        const int c = idx % CHUNKS;
        const bool ok = r < valid_rows && c * 8 < valid_cols;
        cp_async_16(dst + r * PITCH_BYTES + c * 16, ok ? src + r * row_stride + c * 8 : src, ok ? 16 : 0);
      }
    }
  }
}
