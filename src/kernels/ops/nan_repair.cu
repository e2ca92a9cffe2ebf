// NaN repair after a backend whose P·V we do not control (naive: cuBLASLt; cudnn: cuDNN's fused
// kernel; the FP8 path: cuDNN's FP8 graph): every output element that is NaN is recomputed over the
// keys its row sees (recompute.cuh), and so is a NaN log-sum-exp, so a masked or padded key's NaN or
// Inf value — multiplied there by its weight 0, which is NaN — never reaches a row that does not see
// it. A NaN the row does see (a NaN or +inf logit, a visible NaN value) is NaN again after the
// recompute.
//
// Cost without NaN: one flat read of O (contiguous (B,T,N,Hv)), REPAIR_UNROLL 16-byte loads in flight
// per thread, each tested for NaN on its integer bits; an element's (b, i, n, h) is worked out only
// where a NaN is found (decoding (b, i, n) with 64-bit divisions for every 16 bytes reads O at 1.5 TB/s
// on the H200, 87 µs for 128 MiB, benchmarks/results/h200/forward/2026-12-01-cudnn-vs-peers-nan-repair). With
// NaN: ~2·S·H FMAs per NaN element.
//
// Specialisation: REPAIR_ELEM (0 bf16, 1 fp16, 2 f32: the dtype of Q, K, V and O), FLASH_BIAS and
// FLASH_MASK as for the flash kernels. Entry: attnlab_nan_repair, over FlashParams (o = the output).
#include "flash/recompute.cuh"

#define REPAIR_UNROLL 4

// Whether any element of 16 bytes of O is NaN: exponent all ones and a nonzero mantissa, on the bits.
template <int ELEM>
__device__ __forceinline__ bool any_nan(const u128 c) {
  const u32 w[4] = {c.x, c.y, c.z, c.w};
  bool nan = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (ELEM == 2) {
      nan |= (w[i] & 0x7fffffffu) > 0x7f800000u;
    } else {
      constexpr u32 INF = ELEM == 0 ? 0x7f80u : 0x7c00u;  // bf16, f16
      nan |= (w[i] & 0x7fffu) > INF || ((w[i] >> 16) & 0x7fffu) > INF;
    }
  }
  return nan;
}

// Element e of the contiguous (B,T,N,Hv) output, recomputed where it is NaN. Not inlined: the cold path.
template <int ELEM, int BIAS, bool MASK>
__device__ __noinline__ void repair_element(const FlashParams& p, i64 e) {
  const float x = load_elem<ELEM>(p.o, e);
  if (x == x) return;
  const int col = static_cast<int>(e % p.Hv);
  const i64 row_index = e / p.Hv;  // (b, i, n) in BTN order
  const int n = static_cast<int>(row_index % p.N);
  const int i = static_cast<int>((row_index / p.N) % p.T);
  const int b = static_cast<int>(row_index / (static_cast<i64>(p.N) * p.T));
  store_elem<ELEM>(p.o, e, recompute_element<ELEM, BIAS, MASK>(p, b, n, i, col));
}

template <int ELEM, int BIAS, bool MASK>
__device__ __forceinline__ void nan_repair(const FlashParams& p) {
  constexpr int LANES = ELEM == 2 ? 4 : 8;  // elements per 16 bytes
  const i64 total = static_cast<i64>(p.B) * p.T * p.N * p.Hv;
  const i64 chunks = total / LANES;
  const u128* o = reinterpret_cast<const u128*>(p.o);
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  const i64 first = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (i64 c = first; c < chunks; c += REPAIR_UNROLL * stride) {
    u128 v[REPAIR_UNROLL];
#pragma unroll
    for (int u = 0; u < REPAIR_UNROLL; ++u) v[u] = c + u * stride < chunks ? o[c + u * stride] : u128{0, 0, 0, 0};
#pragma unroll
    for (int u = 0; u < REPAIR_UNROLL; ++u) {
      if (!any_nan<ELEM>(v[u])) continue;  // past the end it holds zeros: never NaN
      for (int e = 0; e < LANES; ++e) repair_element<ELEM, BIAS, MASK>(p, (c + u * stride) * LANES + e);
    }
  }
  // The elements after the last whole 16 bytes, when B·T·N·Hv is not a multiple of LANES.
  for (i64 e = chunks * LANES + first; e < total; e += stride) repair_element<ELEM, BIAS, MASK>(p, e);
  // The log-sum-exp (B,T,N contiguous), when asked for: a NaN one recomputed over the row's keys.
  if (p.lse) {
    const i64 rows = static_cast<i64>(p.B) * p.T * p.N;
    for (i64 r = first; r < rows; r += stride) {
      float* lse = p.lse + r;
      if (*lse == *lse) continue;
      const int n = static_cast<int>(r % p.N);
      const int i = static_cast<int>((r / p.N) % p.T);
      const int b = static_cast<int>(r / (static_cast<i64>(p.N) * p.T));
      *lse = recompute_lse<ELEM, BIAS, MASK>(p, b, n, i);
    }
  }
}

#ifdef REPAIR_ELEM
extern "C" __global__ void __launch_bounds__(256) attnlab_nan_repair(const __grid_constant__ FlashParams p) {
  nan_repair<REPAIR_ELEM, FLASH_BIAS, FLASH_MASK != 0>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <int ELEM, int BIAS, bool MASK>
__global__ void __launch_bounds__(256) nan_repair_test(const __grid_constant__ FlashParams p) {
  nan_repair<ELEM, BIAS, MASK>(p);
}
template __global__ void nan_repair_test<0, 0, false>(const __grid_constant__ FlashParams);
template __global__ void nan_repair_test<1, 3, true>(const __grid_constant__ FlashParams);
template __global__ void nan_repair_test<2, 1, false>(const __grid_constant__ FlashParams);
template __global__ void nan_repair_test<2, 2, true>(const __grid_constant__ FlashParams);
#endif
