// FlashAttention-2 class backward: dQ, dK, dV of softmax(Q·Kᵀ·scale)·V without materialising any
// (B,N,T,S) matrix (O(T) memory), in three or four launches of one module:
//   attnlab_flash_bwd_prep       D = rowsum(dO ∘ O), lse in base 2, dQ accumulator zeroed (bwd_rows.cuh)
//   attnlab_flash_bwd_dkdv       dK, dV per key block, dQ added to the float32 accumulator (bwd_dkdv.cuh)
//   attnlab_flash_bwd_dq_convert dQ = scale · accumulator in the input dtype (bwd_rows.cuh)
// or, deterministic: attnlab_flash_bwd_dkdv_only (the same loop without dQ) and attnlab_flash_bwd_dq
// (one block per query block, dQ in registers; bwd_dq.cuh) after the prep.
//
// Specialisation: the host defines FLASH_D (padded head dim), FLASH_FP16, FLASH_BWD_KEYS (keys per
// block of the dK/dV loop), FLASH_BWD_QUERIES (queries per step), FLASH_NW (its warps), and with a
// bias or a boolean mask FLASH_BIAS and FLASH_MASK (the forward's codes: P with the bias and the
// mask, dBias by float32 reductions into FlashBwdParams::dbias), and gets
// the entries above and attnlab_flash_bwd_{dkdv,dkdv_only,dq}_shared_bytes. The dQ pass has fixed
// tiles: 128 query rows over 8 warps, 64-key tiles, two K/V stages. -DATTNLAB_NVCC_TEST instead
// instantiates the tile table's configurations for nvcc checks.
#include "flash/bwd_dkdv.cuh"
#include "flash/bwd_entries.cuh"

// Roles swapped for the dK/dV loop: "BM" is the key block, "BN" the query step (bwd_dkdv.cuh).
template <int D, int KEYS, int QUERIES, int NW, bool FP16, int BIAS = 0, bool MASK = false>
using BwdKvConfig = FlashConfig<D, KEYS, QUERIES, NW, 2, FP16, BIAS, MASK>;

#ifdef FLASH_D
using KvC = BwdKvConfig<FLASH_D, FLASH_BWD_KEYS, FLASH_BWD_QUERIES, FLASH_NW, FLASH_FP16 != 0, FLASH_BIAS, FLASH_MASK != 0>;

extern "C" __global__ void __launch_bounds__(FLASH_NW * 32, 1)
    attnlab_flash_bwd_dkdv(const __grid_constant__ FlashParams p,
                           const __grid_constant__ FlashBwdParams x FLASH_BWD_MODS_PARAMS) {
  flash_bwd_dkdv<KvC, true>(p, x, FLASH_BWD_MODS_ARGS);
}
extern "C" __global__ void __launch_bounds__(FLASH_NW * 32, 1)
    attnlab_flash_bwd_dkdv_only(const __grid_constant__ FlashParams p,
                                const __grid_constant__ FlashBwdParams x FLASH_BWD_MODS_PARAMS) {
  flash_bwd_dkdv<KvC, false>(p, x, FLASH_BWD_MODS_ARGS);
}
// Shared memory per block of each main kernel, read back by the host (as the forward's).
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_shared_bytes = BwdKvLayout<KvC, true>::SHARED_BYTES;
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_only_shared_bytes = BwdKvLayout<KvC, false>::SHARED_BYTES;
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C, bool DQ>
__global__ void __launch_bounds__(C::THREADS, 1) flash_bwd_dkdv_test(const __grid_constant__ FlashParams p,
                                                                    const __grid_constant__ FlashBwdParams x) {
  flash_bwd_dkdv<C, DQ>(p, x, FlashMods{});
}
template <class C>
__global__ void __launch_bounds__(256) flash_bwd_dq_test(const __grid_constant__ FlashParams p,
                                                         const __grid_constant__ FlashBwdParams x) {
  flash_bwd_dq<C>(p, x, FlashMods{});
}
template <bool FP16>
__global__ void __launch_bounds__(256) flash_bwd_rows_test(const __grid_constant__ FlashParams p,
                                                           const __grid_constant__ FlashBwdParams x) {
  flash_bwd_prep<FP16>(p, x);
  flash_bwd_dq_convert<FP16>(p, x);
}
// The tile table's entries (src/backends/cuda/flash/backward-tiles.ts), both dtypes, with and without dQ.
template __global__ void flash_bwd_dkdv_test<BwdKvConfig<128, 128, 64, 8, false>, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void flash_bwd_dkdv_test<BwdKvConfig<128, 128, 64, 8, true>, false>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void flash_bwd_dkdv_test<BwdKvConfig<64, 128, 64, 8, false>, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void flash_bwd_dkdv_test<BwdKvConfig<96, 128, 64, 8, true>, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void flash_bwd_dq_test<BwdDqConfig<128, false>>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void flash_bwd_dq_test<BwdDqConfig<64, true>>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void flash_bwd_rows_test<false>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void flash_bwd_rows_test<true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
#endif
