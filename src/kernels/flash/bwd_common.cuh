// Pieces both backward main loops share: the softmax weights recomputed from the base-2
// log-sum-exp, dS = P ∘ (dP − D), and the final store of a float32 accumulator tile as 16-bit rows.
#pragma once
#include "flash/bwd_params.cuh"
#include "flash/copy.cuh"
#include "flash/mma.cuh"
#include "flash/schedule.cuh"

// One 16-bit value, rounded to nearest even (the transposed dS tile is stored element by element).
template <bool FP16>
__device__ __forceinline__ u16 round16(float x) {
  if constexpr (FP16) {
    return from_float<f16_t>(x).bits;
  } else {
    return from_float<bf16_t>(x).bits;
  }
}

// P = 2^(s·scale·log2e − lse2) for the raw Q·Kᵀ value s. `visible` is the per-element rule
// (causal, window, key padding); it is a select, not a −inf logit, so that a NaN log-sum-exp (a
// NaN row) stays inside the keys that row sees, as in the forward.
__device__ __forceinline__ float recompute_p(float s, float scale_log2, float lse2, bool visible) {
  const float pr = fast_exp2(fmaf(s, scale_log2, -lse2));
  return visible ? pr : 0.f;
}

// Writes rows [row0, row0 + 16·MI) × columns [0, cols) of a warp's accumulator tile, times `scale`,
// to a (rows × cols) matrix of row stride `stride` (elements) at `out`; rows ≥ rows_end are skipped.
// Each lane stores 2 adjacent elements per 4-byte write: the tile is written once per block.
template <int MI, int DT, bool FP16>
__device__ __forceinline__ void store_tile(u16* out, i64 stride, const float (&acc)[MI][DT][4], float scale,
                                           int row0, int rows_end, int cols, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + i * 16 + g + 8 * h;
      if (row >= rows_end) continue;
#pragma unroll
      for (int d = 0; d < DT; ++d) {
        const int col = d * 8 + 2 * t;
        if (col < cols) {
          *reinterpret_cast<u32*>(out + row * stride + col) =
              pack2<FP16>(acc[i][d][2 * h] * scale, acc[i][d][2 * h + 1] * scale);
        }
      }
    }
}

// Adds a warp's 16×(8·NTILES) float32 tile to `base` (row stride `stride` floats) with reductions
// (red, no return value), rows ≥ rows_end and columns ≥ cols skipped. Hopper adds two adjacent
// floats per instruction (red.global.add.v2.f32, PTX 8.1, sm_90), halving the atomic traffic.
template <int NTILES>
__device__ __forceinline__ void atomic_add_tile(float* base, i64 stride, const float (&acc)[NTILES][4], int row0,
                                                int col0, int rows_end, int cols, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= rows_end) continue;
    float* at = base + row * stride;
#pragma unroll
    for (int d = 0; d < NTILES; ++d) {
      const int col = col0 + d * 8 + 2 * t;
      if (col >= cols) continue;
#if __CUDA_ARCH__ >= 900
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(at + col), "f"(acc[d][2 * h]),
                   "f"(acc[d][2 * h + 1])
                   : "memory");
#else
      asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(at + col), "f"(acc[d][2 * h]) : "memory");
      asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(at + col + 1), "f"(acc[d][2 * h + 1]) : "memory");
#endif
    }
  }
}

// Whether a 16-bit element is ±inf or NaN: all exponent bits set (bf16 0x7f80, fp16 0x7c00).
template <bool FP16>
__device__ __forceinline__ bool non_finite16(u32 h) {
  constexpr u32 EXP = FP16 ? 0x7c00u : 0x7f80u;
  return (h & EXP) == EXP;
}

// Zeroes the non-finite elements of the tile chunks this thread itself copied with load_tile<ROWS,
// D, THREADS> (same thread → chunk mapping), once its copies have landed (cp_async_wait) and before
// the barrier that publishes the tile. An operand's NaN must not meet a zero weight inside a tensor-
// core product (0·NaN = NaN): K's in dQ += dS·K for rows that do not see the key, Q's in dK += dSᵀ·Q
// for keys that do not see the row. The NaN still reaches every gradient the reference gives it:
// a row that sees a non-finite key or query element has a NaN log-sum-exp (the forward's rule), so
// its P and dS are NaN for every key it sees, and NaN · 0 is NaN.
template <int ROWS, int D, int THREADS, bool FP16>
__device__ __forceinline__ void zero_non_finite(unsigned char* tile) {
  constexpr int CHUNKS = SmemTile<D>::CHUNKS;
  constexpr int PITCH_BYTES = SmemTile<D>::PITCH * 2;
  auto fix = [&](int r, int c) {
    u128* at = reinterpret_cast<u128*>(tile + r * PITCH_BYTES + c * 16);
    u32 w[4] = {at->x, at->y, at->z, at->w};
    bool any = false;
#pragma unroll
    for (int i = 0; i < 4; ++i) any |= non_finite16<FP16>(w[i]) || non_finite16<FP16>(w[i] >> 16);
    if (!any) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (non_finite16<FP16>(w[i])) w[i] &= 0xffff0000u;
      if (non_finite16<FP16>(w[i] >> 16)) w[i] &= 0x0000ffffu;
    }
    *at = u128{w[0], w[1], w[2], w[3]};
  };
  if constexpr (THREADS % CHUNKS == 0) {
    constexpr int ROWS_PER_STEP = THREADS / CHUNKS;
#pragma unroll
    for (int r = threadIdx.x / CHUNKS; r < ROWS; r += ROWS_PER_STEP) fix(r, threadIdx.x % CHUNKS);
  } else {
    for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += THREADS) fix(idx / CHUNKS, idx % CHUNKS);
  }
}
