// NaN repair after a backend whose P·V we do not control (naive: cuBLASLt; cudnn: cuDNN's fused
// kernel): every output element that is NaN is recomputed over the keys its row sees
// (recompute.cuh), and so is a NaN log-sum-exp, so a masked or padded key's NaN or Inf value — multiplied there by its weight 0,
// which is NaN — never reaches a row that does not see it. A NaN the row does see (a NaN or +inf
// logit, a visible NaN value) is NaN again after the recompute.
//
// Cost without NaN: one read of O, 16 bytes per thread (at B=4, T=8192, N=16, Hv=128 in bf16,
// 128 MiB: ~30 µs at the H200's 4.8 TB/s). With NaN: ~2·S·H FMAs per NaN element.
//
// Specialisation: REPAIR_ELEM (0 bf16, 1 fp16, 2 f32: the dtype of Q, K, V and O), REPAIR_VEC
// (elements per thread: 8, or 4 for f32, when Hv is a multiple of it; else 1), FLASH_BIAS and
// FLASH_MASK as for the flash kernels. Entry: attnlab_nan_repair, over FlashParams (o = the output).
#include "flash/recompute.cuh"

template <int ELEM, int VEC, int BIAS, bool MASK>
__device__ __forceinline__ void nan_repair(const FlashParams& p) {
  const i64 per_row = p.Hv / VEC;
  const i64 total = static_cast<i64>(p.B) * p.T * p.N * per_row;
  for (i64 idx = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<i64>(gridDim.x) * blockDim.x) {
    const int col0 = static_cast<int>(idx % per_row) * VEC;
    const i64 row_index = idx / per_row;  // (b, i, n) in BTN order
    const int n = static_cast<int>(row_index % p.N);
    const int i = static_cast<int>((row_index / p.N) % p.T);
    const int b = static_cast<int>(row_index / (static_cast<i64>(p.N) * p.T));
    const i64 at = b * p.o_strides[0] + i * p.o_strides[1] + n * p.o_strides[2] + col0;
    float x[VEC];
    if constexpr (VEC > 1) {
      const u128 chunk = *reinterpret_cast<const u128*>(p.o + (ELEM == 2 ? 2 * at : at));
      const u16* h = reinterpret_cast<const u16*>(&chunk);
#pragma unroll
      for (int e = 0; e < VEC; ++e) x[e] = load_elem<ELEM>(h, e);
    } else {
      x[0] = load_elem<ELEM>(p.o, at);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if (x[e] == x[e]) continue;
      store_elem<ELEM>(p.o, at + e, recompute_element<ELEM, BIAS, MASK>(p, b, n, i, col0 + e));
    }
    // The row's log-sum-exp (B,T,N contiguous), when asked for, by its first column's thread.
    if (p.lse && col0 == 0) {
      float* lse = p.lse + row_index;
      if (*lse != *lse) *lse = recompute_lse<ELEM, BIAS, MASK>(p, b, n, i);
    }
  }
}

#ifdef REPAIR_ELEM
extern "C" __global__ void __launch_bounds__(256) attnlab_nan_repair(const __grid_constant__ FlashParams p) {
  nan_repair<REPAIR_ELEM, REPAIR_VEC, FLASH_BIAS, FLASH_MASK != 0>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <int ELEM, int VEC, int BIAS, bool MASK>
__global__ void __launch_bounds__(256) nan_repair_test(const __grid_constant__ FlashParams p) {
  nan_repair<ELEM, VEC, BIAS, MASK>(p);
}
template __global__ void nan_repair_test<0, 8, 0, false>(const __grid_constant__ FlashParams);
template __global__ void nan_repair_test<1, 8, 3, true>(const __grid_constant__ FlashParams);
template __global__ void nan_repair_test<2, 4, 1, false>(const __grid_constant__ FlashParams);
template __global__ void nan_repair_test<2, 1, 2, true>(const __grid_constant__ FlashParams);
#endif
