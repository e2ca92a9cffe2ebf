// The backward's entry points that do not depend on the dK/dV loop's kind: the prep, the
// deterministic dQ pass and the dQ conversion, shared by flash_bwd.cu (mma.sync dK/dV loop) and
// hopper/hopper_bwd.cu (wgmma dK/dV loop), which add attnlab_flash_bwd_dkdv{,_only}. Defined when the
// host specialises the module (FLASH_D, FLASH_FP16).
#pragma once
#include "flash/bwd_dq.cuh"
#include "flash/bwd_rows.cuh"

// The dQ pass has fixed tiles: 128 query rows over 8 warps, 64-key tiles, two K/V stages.
template <int D, bool FP16>
using BwdDqConfig = FlashConfig<D, 128, 64, 8, 2, FP16, 0, false>;

#ifdef FLASH_D
using DqC = BwdDqConfig<FLASH_D, FLASH_FP16 != 0>;

// The Hopper module lays the dQ workspace out for its bulk reduces and defines its own prep (which
// also flags rows with a non-finite Q in their lse2) and dq_convert: hopper/bwd_dq_accum.cuh.
#ifndef FLASH_BWD_OWN_DQ_WORKSPACE
extern "C" __global__ void __launch_bounds__(256) attnlab_flash_bwd_prep(const __grid_constant__ FlashParams p,
                                                                        const __grid_constant__ FlashBwdParams x) {
  flash_bwd_prep<FLASH_FP16 != 0, false>(p, x);
}
extern "C" __global__ void __launch_bounds__(256)
    attnlab_flash_bwd_dq_convert(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  flash_bwd_dq_convert<FLASH_FP16 != 0>(p, x);
}
#endif
extern "C" __global__ void __launch_bounds__(256) attnlab_flash_bwd_dq(const __grid_constant__ FlashParams p,
                                                                      const __grid_constant__ FlashBwdParams x) {
  flash_bwd_dq<DqC>(p, x);
}
extern "C" __device__ unsigned attnlab_flash_bwd_dq_shared_bytes = BwdDqLayout<DqC>::SHARED_BYTES;
#endif
