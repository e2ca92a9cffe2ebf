// Global → shared tile loads with cp.async, 16 bytes (8 elements) per copy.
//
// Shared tiles have a row pitch of D + 8 elements instead of a swizzle: with D a multiple of 16 the
// pitch is an odd number of 16-byte units, so the 8 row addresses of one ldmatrix phase fall in 8
// different 16-byte bank groups for every head dim from 32 to 256 alike (an XOR swizzle needs at
// least 8 chunks per row, i.e. D ≥ 64, and a power-of-two chunk count). It costs 16 bytes per row:
// 6% of a D=128 tile.
#pragma once
#include "mma.cuh"

template <int D>
struct SmemTile {
  static constexpr int PITCH = D + 8;  // elements
  static constexpr int CHUNKS = D / 8;  // 16-byte chunks per row
};

// Copies rows [0, ROWS) of a tile whose row r starts at src + r·row_stride. Rows ≥ valid_rows and
// columns ≥ valid_cols (H or Hv inside the padded D) are zero-filled without reading global memory.
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(u32 dst, const u16* src, i64 row_stride, int valid_rows, int valid_cols) {
  constexpr int CHUNKS = SmemTile<D>::CHUNKS;
  constexpr int TOTAL = ROWS * CHUNKS;
#pragma unroll
  for (int idx0 = 0; idx0 < TOTAL; idx0 += THREADS) {
    const int idx = idx0 + threadIdx.x;
    if (TOTAL % THREADS == 0 || idx < TOTAL) {
      const int r = idx / CHUNKS;
      const int c = idx % CHUNKS;
      const bool ok = r < valid_rows && c * 8 < valid_cols;
      const u16* from = ok ? src + r * row_stride + c * 8 : src;
      cp_async_16(dst + (r * SmemTile<D>::PITCH + c * 8) * 2, from, ok ? 16 : 0);
    }
  }
}
