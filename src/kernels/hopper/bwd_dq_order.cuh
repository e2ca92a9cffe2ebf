// Deterministic dQ on the wgmma loops (FLASH_BWD_DETERMINISTIC): the same bulk reduce-adds into the
// float32 workspace (bwd_dq_accum.cuh), issued for each (b·N + n, query block) in one fixed order of
// key blocks, so every dQ element sums the same float32 terms in the same order on every run —
// FlashAttention-3's semaphore scheme. Without it the deterministic mode runs the dK/dV loop without
// dQ and then the mma.sync dQ pass, which recomputes P off the tensor-core loop (0.58× the loop with dQ
// at H=128 on an H100).
//
// A semaphore per (head, query block), an int after the workspace's floats, zeroed by prep, holds the
// place, in the order below, of the key block whose adds to that query block come next. Key block j,
// at its step for query block mb, waits (its adding lanes spin on an acquire load) until the
// semaphore holds its own place — unless it is the first block that adds to mb, which waits for
// nothing — issues its adds, and at the next step's barrier, its adding lanes having waited for their
// completion (not only for the read of the staging), one thread stores the next place with release.
//
// The order follows the blocks' arrival: key block j first reaches query block mb at its step
// mb − mb_lo(j). Without a causal mask or a window every block starts at mb_lo = 0, so the blocks go
// in ascending order and settle one step apart (after the first wave the grid launches each head's
// blocks one finishing block apart, which is that stagger). Under a causal mask mb_lo(j) grows by
// two query blocks a key block (128 keys, 64 queries), so block j + 1 reaches mb two of its steps
// before block j: they go in descending order, and the grid launches each head's key blocks last
// first (key_block_order's `reverse`) so that a block only ever waits on blocks launched before it —
// resident or finished, never one still queued behind it (no deadlock). Ascending order there would
// hold block j back ~2j steps before its first add (a wavefront down the diagonal).
//
// The key blocks that add to a query block are contiguous (key_block_range's ends are nondecreasing),
// so block j is the first of them exactly when its predecessor in the order does not add to mb: one
// key_block_range a step, and each place is stored by the block before it.
#pragma once
#include "flash/bwd_common.cuh"
#include "hopper/bwd_dq_accum.cuh"

// Descending key-block order wherever a key block's first query block grows with the block.
__device__ __forceinline__ bool dq_order_descending(const FlashParams& p) {
  return (p.flags & (FLASH_FLAG_CAUSAL | FLASH_FLAG_WINDOW)) != 0;
}

// The semaphore of (bn = b·N + n, query block mb): (B·N, t_pad / BMQ) ints after the workspace's
// (B·N, 2, t_pad, D/2) floats (flashBackwardDqWorkspaceBytes).
template <int D, int BMQ>
__device__ __forceinline__ int* dq_semaphore(const FlashParams& p, const FlashBwdParams& x, i64 bn, int mb) {
  int* first = reinterpret_cast<int*>(x.dq_accum + static_cast<i64>(p.B) * p.N * x.t_pad * D);
  return first + bn * (x.t_pad / BMQ) + mb;
}

// Key block kb's place in the order (0 for the first block launched of its head).
template <int BNK>
__device__ __forceinline__ int dq_place(const FlashParams& p, const KeyBlockWork& kb) {
  const int j = kb.kn0 / BNK;
  return dq_order_descending(p) ? gridDim.x - 1 - j : j;
}

// Whether key block kb, which adds to query block mb, is the first in the order to add to it.
template <int BNK, int BMQ>
__device__ __forceinline__ bool dq_first_adder(const FlashParams& p, const KeyBlockWork& kb, int place, int mb) {
  if (place == 0) return true;
  const int before = kb.kn0 + (dq_order_descending(p) ? BNK : -BNK);
  int mb_lo, blocks;
  key_block_range<BNK, BMQ>(p, kb.w, before, mb_lo, blocks);
  return blocks == 0 || mb < mb_lo || mb >= mb_lo + blocks;
}

// Until the semaphore holds `place`, then orders the async proxy's adds after that.
__device__ __forceinline__ void dq_wait_turn(const int* semaphore, int place) {
  int turn;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(turn) : "l"(semaphore) : "memory");
    if (turn == place) break;
    __nanosleep(32);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// After this thread's bulk adds completed (bulk_wait<0>): their global writes before the generic
// proxy's release, which a barrier then hands to dq_pass_turn's thread.
__device__ __forceinline__ void dq_adds_done() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// The next block in the order may add.
__device__ __forceinline__ void dq_pass_turn(int* semaphore, int place) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(semaphore), "r"(place + 1) : "memory");
}
