// The backward's entry points that do not depend on the dK/dV loop's kind: the prep, the
// deterministic dQ pass and the dQ conversion, shared by flash_bwd.cu (mma.sync dK/dV loop) and
// hopper/hopper_bwd.cu (wgmma dK/dV loop), which add attnlab_flash_bwd_dkdv{,_only}. Defined when the
// host specialises the module (FLASH_D, FLASH_FP16).
#pragma once
#include "flash/bwd_dq.cuh"
#include "flash/bwd_rows.cuh"

// The dQ pass has fixed tiles: 128 query rows over 8 warps, 64-key tiles, two K/V stages.
template <int D, bool FP16, int BIAS = 0, bool MASK = false>
using BwdDqConfig = FlashConfig<D, 128, 64, 8, 2, FP16, BIAS, MASK>;

// The bias element type (FLASH_BIAS: 0 none, 1 f32, 2 bf16, 3 f16) and the boolean mask, as the forward's.
#ifndef FLASH_BIAS
#define FLASH_BIAS 0
#endif
#ifndef FLASH_MASK
#define FLASH_MASK 0
#endif

// With modifiers or a block mask every entry takes AttnlabCaptures and AttnlabBlockMask after the two
// parameter structs (common/modifiers.cuh); MODS_PARAMS / MODS_ARGS spell them once.
#if ATTNLAB_MODIFIERS
#define FLASH_BWD_MODS_PARAMS \
  , const __grid_constant__ AttnlabCaptures c, const __grid_constant__ AttnlabBlockMask bm
#define FLASH_BWD_MODS_ARGS FlashMods{&c, &bm}
#else
#define FLASH_BWD_MODS_PARAMS
#define FLASH_BWD_MODS_ARGS FlashMods{}
#endif

// The Hopper module flags rows with a non-finite Q in their lse2 (bwd_rows.cuh); the mma.sync one does not.
#ifndef FLASH_BWD_PREP_FLAGS_Q
#define FLASH_BWD_PREP_FLAGS_Q 0
#endif

#ifdef FLASH_D
using DqC = BwdDqConfig<FLASH_D, FLASH_FP16 != 0, FLASH_BIAS, FLASH_MASK != 0>;

extern "C" __global__ void __launch_bounds__(256) attnlab_flash_bwd_prep(const __grid_constant__ FlashParams p,
                                                                        const __grid_constant__ FlashBwdParams x) {
  flash_bwd_prep<FLASH_FP16 != 0, FLASH_BWD_PREP_FLAGS_Q != 0>(p, x);
}
extern "C" __global__ void __launch_bounds__(256) attnlab_flash_bwd_dq(const __grid_constant__ FlashParams p,
                                                                      const __grid_constant__ FlashBwdParams x
                                                                          FLASH_BWD_MODS_PARAMS) {
  flash_bwd_dq<DqC>(p, x, FLASH_BWD_MODS_ARGS);
}
extern "C" __global__ void __launch_bounds__(256)
    attnlab_flash_bwd_dq_convert(const __grid_constant__ FlashParams p, const __grid_constant__ FlashBwdParams x) {
  flash_bwd_dq_convert<FLASH_FP16 != 0>(p, x);
}
// dBias in the bias's 16-bit dtype (fp16 ≠ 0: float16, else bfloat16) from its float32 accumulator,
// rounded once; a float32 bias takes the accumulator as it is.
extern "C" __global__ void __launch_bounds__(256)
    attnlab_flash_bwd_dbias_convert(const float* from, u16* to, long long count, int fp16) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 i = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    to[i] = fp16 ? round16<true>(from[i]) : round16<false>(from[i]);
  }
}
extern "C" __device__ unsigned attnlab_flash_bwd_dq_shared_bytes = BwdDqLayout<DqC>::SHARED_BYTES;
#endif
