// attnlab-min-arch: sm_90a
//
// The flash backward with its dK/dV loop on wgmma (hopper/bwd_dkdv_sm90.cuh): the same five entry
// points and launch parameters as flash/flash_bwd.cu, so the host swaps the module and nothing else
// but the dQ workspace's size (backward-variant.ts, flashBackwardDqWorkspaceBytes). The deterministic
// dQ pass is flash_bwd.cu's (flash/bwd_entries.cuh); the prep and the dQ conversion are those of the
// bulk-reduce workspace layout (hopper/bwd_dq_accum.cuh); attnlab_flash_bwd_dkdv and _dkdv_only are
// the wgmma loop with and without dQ, on 128-key blocks of 256 threads (two warpgroups of 64 keys),
// 64 queries per step.
//
// Specialisation: FLASH_D (64 or 128: the head dim H, Hv padded to it; 192 or 256: the 64-key loop of
// hopper/bwd_dkdv_wide_sm90.cuh, with FLASH_BWD_WIDE_PAIR its form with both dQ passes in flight, with
// FLASH_BWD_WIDE_HALVES dV and dK over a warpgroup's own queries issued before the exchange) and FLASH_FP16; with a bias or a
// boolean mask FLASH_BIAS and FLASH_MASK (the forward's codes; FLASH_MASK_ROWS=1 when the mask's rows
// may be read 16 bytes at a time: bwd_dkdv_sm90.cuh, load_mask_rows; FLASH_DBIAS_STORE=1 when no bias
// element is shared by two positions, so that dBias is stored, not added: dbias_store_tile), and with modifiers or a block mask their
// generated source before this file (common/modifiers.cuh): then the dK/dV entries and the dQ pass take
// AttnlabCaptures and AttnlabBlockMask after the two parameter structs, as flash_bwd.cu's. The loop with
// the producer warpgroup (FLASH_BWD_WS) takes none of them; FLASH_BWD_PINGPONG (1 or 2) splits its dQ by
// keys (hopper/bwd_dkdv_sm90_ws.cuh). FLASH_BWD_DETERMINISTIC: attnlab_flash_bwd_dkdv
// adds dQ in a fixed order of key blocks (hopper/bwd_dq_order.cuh) and prep zeroes its semaphores; not
// with a block mask, whose walk skips steps. -DATTNLAB_NVCC_TEST instantiates both dtypes instead.
#define FLASH_BWD_OWN_DQ_WORKSPACE 1
#include "flash/bwd_entries.cuh"
#include "hopper/bwd_dkdv_sm90.cuh"
#include "hopper/bwd_dkdv_sm90_ws.cuh"
#include "hopper/bwd_dkdv_wide_sm90.cuh"

#ifndef FLASH_BWD_DETERMINISTIC
#define FLASH_BWD_DETERMINISTIC 0
#endif

#if defined(FLASH_D) && FLASH_D > 128
// D = 192 and 256: the loop of hopper/bwd_dkdv_wide_sm90.cuh (64 keys a block, each warpgroup half of the
// columns), its dQ workspace's parts and conversion; prep's zeroing is layout-free. No bias, mask,
// modifiers, block mask or producer warpgroup (backward-variant.ts refuses them at these head dims).
#if ATTNLAB_MODIFIERS || FLASH_BIAS || FLASH_MASK || FLASH_BWD_WS
#error "the loop past a head dim of 128 takes no bias, mask, modifiers, block mask or producer warpgroup"
#endif
#ifndef FLASH_BWD_WIDE_PAIR
#define FLASH_BWD_WIDE_PAIR 0  // both dQ passes in flight (HopperBwdWideConfig::PAIR): ATTNLAB_FLASH_BWD_WIDE=pair
#endif
#ifndef FLASH_BWD_WIDE_HALVES
#define FLASH_BWD_WIDE_HALVES 0  // dV, dK over a warpgroup's own queries early (HopperBwdWideConfig::HALVES)
#endif
using WideC = HopperBwdWideConfig<FLASH_D, FLASH_FP16 != 0, FLASH_BWD_WIDE_PAIR != 0, FLASH_BWD_WIDE_HALVES != 0>;
constexpr bool kOrderedDq = FLASH_BWD_DETERMINISTIC != 0;
extern "C" __global__ void __launch_bounds__(256) attnlab_flash_bwd_prep(const __grid_constant__ FlashParams p,
                                                                        const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_prep<FLASH_D, FLASH_FP16 != 0, kOrderedDq>(p, x);
}
extern "C" __global__ void __launch_bounds__(256)
    attnlab_flash_bwd_dq_convert(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_wide_dq_convert<FLASH_D, FLASH_FP16 != 0>(p, x);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    attnlab_flash_bwd_dkdv(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_wide<WideC, true, kOrderedDq>(p, x);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    attnlab_flash_bwd_dkdv_only(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_wide<WideC, false>(p, x);
}
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_shared_bytes = hopper_bwd_wide_smem_bytes<WideC>();
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_only_shared_bytes = hopper_bwd_wide_smem_bytes<WideC>();
#elif defined(FLASH_D)
#ifndef FLASH_MASK_ROWS
#define FLASH_MASK_ROWS 0
#endif
#ifndef FLASH_DBIAS_STORE
#define FLASH_DBIAS_STORE 0
#endif
#if FLASH_BWD_DETERMINISTIC && ATTNLAB_BLOCK_MASK
#error "the ordered dQ adds need every key block to visit all its query blocks: a block mask skips steps"
#endif
using KvC = HopperBwdConfig<FLASH_D, FLASH_FP16 != 0, FLASH_BIAS, FLASH_MASK != 0, FLASH_MASK_ROWS != 0,
                           FLASH_DBIAS_STORE != 0>;
constexpr bool kOrderedDq = FLASH_BWD_DETERMINISTIC != 0;

extern "C" __global__ void __launch_bounds__(256) attnlab_flash_bwd_prep(const __grid_constant__ FlashParams p,
                                                                        const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_prep<FLASH_D, FLASH_FP16 != 0, kOrderedDq>(p, x);
}
extern "C" __global__ void __launch_bounds__(256)
    attnlab_flash_bwd_dq_convert(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dq_convert<FLASH_D, FLASH_FP16 != 0>(p, x);
}

#if FLASH_BWD_WS
#if ATTNLAB_MODIFIERS || FLASH_BIAS || FLASH_MASK
#error "the producer-warpgroup loop takes no bias, mask, modifiers or block mask (backward-variant.ts runs them on FLASH_BWD_WS=0)"
#endif
extern "C" __global__ void __launch_bounds__(HopperBwdWs::THREADS, 1)
    attnlab_flash_bwd_dkdv(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_ws<KvC, true, kOrderedDq>(p, x);
}
extern "C" __global__ void __launch_bounds__(HopperBwdWs::THREADS, 1)
    attnlab_flash_bwd_dkdv_only(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_ws<KvC, false>(p, x);
}
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_shared_bytes = hopper_bwd_ws_smem_bytes<KvC, true, kOrderedDq>();
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_only_shared_bytes = hopper_bwd_ws_smem_bytes<KvC, false>();
#else
extern "C" __global__ void __launch_bounds__(256, 1)
    attnlab_flash_bwd_dkdv(const __grid_constant__ FlashParams p,
                           const __grid_constant__ FlashBwdParams x FLASH_BWD_MODS_PARAMS) {
  hopper_bwd_dkdv<KvC, true, kOrderedDq>(p, x, FLASH_BWD_MODS_ARGS);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    attnlab_flash_bwd_dkdv_only(const __grid_constant__ FlashParams p,
                                const __grid_constant__ FlashBwdParams x FLASH_BWD_MODS_PARAMS) {
  hopper_bwd_dkdv<KvC, false>(p, x, FLASH_BWD_MODS_ARGS);
}
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_shared_bytes = hopper_bwd_smem_bytes<KvC, true>();
extern "C" __device__ unsigned attnlab_flash_bwd_dkdv_only_shared_bytes = hopper_bwd_smem_bytes<KvC, false>();
#endif
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C, bool DQ>
__global__ void __launch_bounds__(256, 1) hopper_bwd_dkdv_test(const __grid_constant__ FlashParams p,
                                                               const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv<C, DQ>(p, x);
}
template __global__ void hopper_bwd_dkdv_test<HopperBwdConfig<128, false>, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_test<HopperBwdConfig<128, true>, false>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_test<HopperBwdConfig<64, false>, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_test<HopperBwdConfig<64, true>, false>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template <class C, bool DQ>
__global__ void __launch_bounds__(HopperBwdWs::THREADS, 1)
    hopper_bwd_dkdv_ws_test(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_ws<C, DQ>(p, x);
}
template __global__ void hopper_bwd_dkdv_ws_test<HopperBwdConfig<128, false>, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_ws_test<HopperBwdConfig<64, true>, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
// dQ split by keys (FLASH_BWD_PINGPONG), with and without the warpgroups' turns.
template <class C, int PINGPONG>
__global__ void __launch_bounds__(HopperBwdWs::THREADS, 1)
    hopper_bwd_dkdv_pp_test(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_ws<C, true, false, PINGPONG>(p, x);
}
template __global__ void hopper_bwd_dkdv_pp_test<HopperBwdConfig<128, false>, 1>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_pp_test<HopperBwdConfig<128, true>, 2>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_pp_test<HopperBwdConfig<64, false>, 1>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
// The producer cleaning only flagged steps (FLASH_BWD_WS_FLAGGED), with dQ by halves and by keys.
template <class C, int PINGPONG>
__global__ void __launch_bounds__(HopperBwdWs::THREADS, 1)
    hopper_bwd_dkdv_flagged_test(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_ws<C, true, false, PINGPONG, true>(p, x);
}
template __global__ void hopper_bwd_dkdv_flagged_test<HopperBwdConfig<128, false>, 0>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_flagged_test<HopperBwdConfig<64, true>, 1>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template <class C>
__global__ void __launch_bounds__(256, 1) hopper_bwd_dkdv_det_test(const __grid_constant__ FlashParams p,
                                                                  const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv<C, true, true>(p, x);
}
template __global__ void hopper_bwd_dkdv_det_test<HopperBwdConfig<128, false>>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_det_test<HopperBwdConfig<64, true>>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template <class C>
__global__ void __launch_bounds__(HopperBwdWs::THREADS, 1)
    hopper_bwd_dkdv_ws_det_test(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_ws<C, true, true>(p, x);
}
template __global__ void hopper_bwd_dkdv_ws_det_test<HopperBwdConfig<64, false>>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template <class C, bool DQ, bool DET>
__global__ void __launch_bounds__(256, 1) hopper_bwd_dkdv_wide_test(const __grid_constant__ FlashParams p,
                                                                   const __grid_constant__ FlashBwdParams x) {
  hopper_bwd_dkdv_wide<C, DQ, DET>(p, x);
}
template __global__ void hopper_bwd_dkdv_wide_test<HopperBwdWideConfig<256, false>, true, false>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_wide_test<HopperBwdWideConfig<192, true>, true, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_wide_test<HopperBwdWideConfig<256, true, true>, true, true>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
template __global__ void hopper_bwd_dkdv_wide_test<HopperBwdWideConfig<192, false, true, true>, true, false>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams);
#endif
