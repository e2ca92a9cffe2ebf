// Pieces both backward main loops share: the softmax weights recomputed from the base-2
// log-sum-exp, dS = P ∘ (dP − D), and the final store of a float32 accumulator tile as 16-bit rows.
#pragma once
#include "flash/bwd_params.cuh"
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
