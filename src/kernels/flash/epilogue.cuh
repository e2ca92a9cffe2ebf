// Epilogue: normalise the output accumulator once, write O through shared memory as 16-byte rows
// (the accumulator layout would give 4-byte scattered stores), and write the log-sum-exp.
// Rows past the batch's valid query length, and rows that saw no key, get zeros and −inf. A NaN
// output element of a row whose softmax is finite can only come from a masked key's NaN or Inf value
// times its weight 0 in P·V: it is recomputed over the visible keys (recompute.cuh).
#pragma once
#include "flash/copy.cuh"
#include "flash/recompute.cuh"
#include "flash/schedule.cuh"

// stage: this warp's 16·MI rows of shared memory (pitch D + 8), free once its Q is no longer read.
template <int MI, int DT, int D, bool FP16, int BIAS, bool MASK>
__device__ __forceinline__ void store_output(const FlashParams& p, const TileWork& w, float (&o)[MI][DT][4],
                                             const float (&inv)[MI][2], const float (&lse)[MI][2], u16* stage,
                                             int row0, int lane, const FlashMods& m = FlashMods{}) {
  constexpr int PITCH = SmemTile<D>::PITCH;
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int local = i * 16 + g + h * 8;
      const int row = row0 + local;
      // Selects, not multiplies by 0: a padding row, or a row that saw no key (inv 0), must come out
      // 0 whatever its accumulator holds (0 · NaN from a masked key's NaN value is NaN).
      const bool valid = row < w.t_len && inv[i][h] != 0.f;
      const bool finite_row = valid && inv[i][h] == inv[i][h];  // inv is NaN for a NaN row
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          x[e] = o[i][d][2 * h + e] * inv[i][h];
          const int col = d * 8 + 2 * t + e;
          if (finite_row && x[e] != x[e] && col < p.Hv) {
            x[e] = recompute_element<FP16 ? 1 : 0, BIAS, MASK>(p, w.b, w.n, row, col, m);
          }
        }
        *reinterpret_cast<u32*>(stage + local * PITCH + d * 8 + 2 * t) = valid ? pack2<FP16>(x[0], x[1]) : 0u;
      }
      if (p.lse != nullptr && t == 0 && row < p.T) {
        p.lse[(static_cast<i64>(w.b) * p.T + row) * p.N + w.n] = row < w.t_len ? lse[i][h] : neg_inf();
      }
    }
  }
  __syncwarp();
  constexpr int CHUNKS = SmemTile<D>::CHUNKS;
  u16* out = p.o + w.b * p.o_strides[0] + w.n * p.o_strides[2];
#pragma unroll
  for (int idx = lane; idx < 16 * MI * CHUNKS; idx += 32) {
    const int r = idx / CHUNKS;
    const int c = idx % CHUNKS;
    const int row = row0 + r;
    if (row < p.T && c * 8 < p.Hv) {
      *reinterpret_cast<u128*>(out + row * p.o_strides[1] + c * 8) =
          *reinterpret_cast<const u128*>(stage + r * PITCH + c * 8);
    }
  }
}

// A block none of whose rows sees a key: zeros and −inf without touching Q, K or V. THREADS threads
// share it, `thread` the caller's index among them (a subset of the block may do it: the Hopper
// kernel's persistent grid leaves its producer out).
template <int BM, int THREADS>
__device__ __forceinline__ void store_empty_block(const FlashParams& p, const TileWork& w, int thread = threadIdx.x) {
  u16* out = p.o + w.b * p.o_strides[0] + w.n * p.o_strides[2];
  const int chunks = p.Hv / 8;
  const int rows = imin(BM, p.T - w.m0);
  for (int idx = thread; idx < rows * chunks; idx += THREADS) {
    const int row = w.m0 + idx / chunks;
    *reinterpret_cast<u128*>(out + row * p.o_strides[1] + (idx % chunks) * 8) = u128{0, 0, 0, 0};
  }
  if (p.lse != nullptr) {
    for (int r = thread; r < rows; r += THREADS) {
      p.lse[(static_cast<i64>(w.b) * p.T + w.m0 + r) * p.N + w.n] = neg_inf();
    }
  }
}
