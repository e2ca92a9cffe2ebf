// How flash_decode.cu's K/V tiles reach shared memory: cp.async (sm_80+) or bulk copies (sm_90).
//
// Decoding does ~1 FLOP per byte, so a block's time per 64-key tile is the time to get its 32 KB
// (D=128) in and its instructions issued, not its arithmetic. Two loaders:
// - cp.async: every thread issues 16-byte copies; one cache-row lookup (block-table load, 64-bit
//   offset) per row serves both K and V. 64 rows × 16 chunks × 2 = 16 copies per thread per tile.
// - bulk (sm_90, H and Hv multiples of 8, 16-byte aligned rows; the default there, decode.ts): one
//   thread per row, one `cp.async.bulk` of the whole row (256 B at H=128) completing on the stage's
//   mbarrier: 1 copy per thread per tile, no per-thread tracking of outstanding copies, and the bytes
//   in flight are bounded by the stages alone. Rows past the key range are zero-filled by ordinary
//   stores (bulk copies cannot zero-fill), so stale shared memory never meets a zero softmax weight.
#pragma once
#include "flash/mma.cuh"

__device__ __forceinline__ void bulk_row_copy(u32 dst, const void* src, u32 bytes, u32 bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
#else
  __trap();  // the host picks the bulk loader only on sm_90 (decode.ts, decodeVariant)
#endif
}
__device__ __forceinline__ void dec_mbar_init(u32 bar, u32 count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival announcing `bytes` of bulk-copy transactions. Copies of other threads may complete
// before it (the tx-count may go transiently negative, PTX ISA "mbarrier tx-count"); the phase
// cannot complete until this arrival, the barrier's only one, has happened.
__device__ __forceinline__ void dec_mbar_arrive_expect_tx(u32 bar, u32 bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ bool dec_mbar_try_wait(u32 bar, u32 parity) {
  u32 done = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
#endif
  return done != 0;
}
// Waits for the phase of `parity` to complete. With -DDECODE_SPIN_LIMIT=n (the standalone harness,
// benchmarks/harnesses/decode-kernel.cu, and debug runs) a wait that fails n tries traps with a message, so a
// missing copy or a wrong byte count ends the launch with an error instead of hanging the GPU
// (each try suspends the thread for a hardware-chosen time, ~0.1–1 µs: n = 2^24 is seconds).
__device__ __forceinline__ void dec_mbar_wait(u32 bar, u32 parity) {
#ifdef DECODE_SPIN_LIMIT
  for (long long tries = 0; !dec_mbar_try_wait(bar, parity); ++tries) {
    if (tries == DECODE_SPIN_LIMIT) {
      printf("flash_decode: mbarrier wait (parity %u) of block (%d,%d,%d) thread %d never completed\n", parity,
             blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
      __trap();
    }
  }
#else
  while (!dec_mbar_try_wait(bar, parity)) {
  }
#endif
}
__device__ __forceinline__ void dec_mbar_arrive(u32 bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// dec_mbar_wait without its printf under DECODE_SPIN_LIMIT (the harness): at 128–168 registers the call's
// saved registers spilled 16–28 bytes (ptxas -v); a stalled wait still traps, and the harness names the
// variant and case whose launch failed.
__device__ __forceinline__ void ws_wait(u32 bar, u32 parity) {
#ifdef DECODE_SPIN_LIMIT
  for (long long tries = 0; !dec_mbar_try_wait(bar, parity); ++tries)
    if (tries == DECODE_SPIN_LIMIT) __trap();
#else
  dec_mbar_wait(bar, parity);
#endif
}
// Ordinary shared-memory stores that a later bulk copy may overwrite, or that readers take in
// turn with bulk-copied rows, are ordered with the async proxy by this.
__device__ __forceinline__ void dec_fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void st_shared_zero(u32 addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
}

// Shared-memory loads by 32-bit address (tiles whose layout is computed, decode_warp.cuh's layouts).
__device__ __forceinline__ u128 ld_shared_u128(u32 addr) {
  u128 x;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w) : "r"(addr));
  return x;
}
__device__ __forceinline__ u16 ld_shared_u16(u32 addr) {
  u16 x;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(x) : "r"(addr));
  return x;
}

// Columns [from, cols) of a shared 16-bit row set to zero, 16 bytes at a time (from: a multiple of 8).
__device__ __forceinline__ void zero_row(u32 row_addr, int from, int cols) {
  for (int c = from; c < cols; c += 8) st_shared_zero(row_addr + c * 2);
}
