// Hopper (sm_90a) primitives as inline PTX: mbarriers, TMA tile loads, wgmma fences and shared-memory
// matrix descriptors, register reallocation and named barriers. No CUDA header, as everywhere in
// src/kernels (NVRTC compiles with no include path).
#pragma once
#include "flash/params.cuh"

typedef unsigned long long u64;

// A CUtensorMap as cuTensorMapEncodeTiled writes it: 128 opaque bytes, 64-byte aligned. The kernel
// takes it inside its __grid_constant__ parameter struct and hands its (param-space, generic)
// address to cp.async.bulk.tensor.
struct __align__(64) TmaDesc {
  u64 opaque[16];
};

// ---- mbarriers (shared::cta, 8 bytes each) ----
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialisations visible to the async proxy (the TMA unit) before first use.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` of TMA transactions for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, and
// waiting on parity 1 returns at once (the phase "before" it counts as complete): producers start
// on the empty barriers with parity 1.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA: one box of a 4-D tensor map into shared memory, completing on `bar` ----
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaDesc* map, u32 bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// ---- the same of a 5-D map (decode's grouped boxes: both 128-byte halves of a group of token rows) ----
__device__ __forceinline__ void tma_load_5d(u32 dst, const TmaDesc* map, u32 bar, int c0, int c1, int c2, int c3,
                                            int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6, %7}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}
// The same two loads multicast: the box lands at `dst` in every CTA of the cluster named in `ctas` (a bit a
// CTA rank), each completing `bytes` on the mbarrier at `bar` in that CTA (the same CTA-relative offsets).
__device__ __forceinline__ void tma_load_4d_multicast(u32 dst, const TmaDesc* map, u32 bar, u16 ctas, int c0, int c1,
                                                      int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%4, %5, %6, %7}], [%2], %3;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "h"(ctas), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d_multicast(u32 dst, const TmaDesc* map, u32 bar, u16 ctas, int c0, int c1,
                                                      int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%4, %5, %6, %7, %8}], [%2], %3;\n" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "h"(ctas), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// ---- thread-block clusters (sm_90; files that also build for sm_80, as decode's, call them only there) ----
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SM90_CLUSTER_ASM(...) asm volatile(__VA_ARGS__)
#else
#define SM90_CLUSTER_ASM(...) __trap()
#endif
// The cluster-wide barrier in two halves: every thread of every CTA arrives (release: its earlier memory
// operations, remote ones included, are visible to the cluster), and waits (acquire) until all have.
__device__ __forceinline__ void cluster_arrive() { SM90_CLUSTER_ASM("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { SM90_CLUSTER_ASM("barrier.cluster.wait.acquire;\n" ::: "memory"); }
// One arrival on the mbarrier at CTA-relative address `bar` of cluster CTA `cta`, with the arrive's default
// semantics (release at CTA scope, as CUTLASS's ClusterBarrier::arrive): what it orders is this thread's reads
// of its own shared memory before another CTA's TMA writes there, which the barrier's completion carries.
__device__ __forceinline__ void mbar_arrive_cluster(u32 bar, u32 cta) {
  SM90_CLUSTER_ASM(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}

// ---- wgmma ordering ----
// Before the first wgmma of a group: orders earlier register writes (accumulators, A fragments) of
// this warpgroup before the asynchronous multiply reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across a wgmma wait (the asm above
// reads and writes the registers behind its back only through its operand list).
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[N][4]) {
#pragma unroll
  for (int j = 0; j < N; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) asm volatile("" : "+f"(d[j][c])::"memory");
}
// Ordinary shared-memory stores that wgmma or TMA read (or overwrite) next need this in each
// writing thread before the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- shared-memory matrix descriptor, 128-byte swizzle ----
// Bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
// 62-63 layout (1 = 128B swizzle). The tiles are TMA boxes of 64 16-bit columns (128 bytes) per row,
// swizzled in 8-row atoms of 1024 bytes, so:
//  K-major operand (Q, K; the reduction dim is contiguous): SBO = 1024 (next 8 rows), LBO unused
//    (1); a k-step of 16 elements inside the 128-byte row moves the start address by 32 bytes.
//  MN-major operand (V for P·V; N = head dim contiguous): LBO = the byte stride between 64-column
//    boxes, SBO = 1024 (next 8 keys); a k-step of 16 keys moves the start by 16 rows = 2048 bytes.
// Every box starts on a 1024-byte boundary (the swizzle pattern is taken from address bits 7-9).
__device__ __forceinline__ u64 sw128_desc(u32 addr, u32 leading_bytes, u32 stride_bytes) {
  return static_cast<u64>((addr & 0x3FFFF) >> 4) | (static_cast<u64>(leading_bytes >> 4) << 16) |
         (static_cast<u64>(stride_bytes >> 4) << 32) | (1ull << 62);
}

// ---- warp specialisation ----
// setmaxnreg moves registers between warpgroups; it needs a register cap at entry
// (__launch_bounds__(threads, 1)) and is executed by every warp of a warpgroup.
template <int REGS>
__device__ __forceinline__ void regs_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void regs_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
// bar.sync on a named barrier (0 is __syncthreads'): `threads` of the block, a multiple of 32.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void st_shared_zero16(u32 addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
}
// A 32-bit shared-memory word (the dynamic grid's item slot: hopper_fwd.cu).
__device__ __forceinline__ void st_shared_s32(u32 addr, int x) {
  asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(addr), "r"(x) : "memory");
}
__device__ __forceinline__ int ld_shared_s32(u32 addr) {
  int x;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(x) : "r"(addr) : "memory");
  return x;
}
