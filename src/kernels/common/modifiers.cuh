// Score and mask modifiers and block masks (docs/internals/variants.md): what the flash kernels read
// from a modifier set's generated source, and the defaults that compile them out.
//
// A modifier set's generated source comes first in the program (KernelSpec.prelude: the host prepends
// it) and defines
//   ATTNLAB_SCORE_MOD, ATTNLAB_MASK_MOD, ATTNLAB_CAPTURE_GRADS, ATTNLAB_BLOCK_MASK      0 or 1
//   ATTNLAB_SCORE_MOD_NEEDS_SCORE   optional: 0 when attnlab_score_mod_backward never reads its `s`
//                                   (an additive modifier such as ALiBi or a relative bias): the
//                                   backward then skips recomputing the raw score, one Q·Kᵀ product
//                                   per tile
//   ATTNLAB_SCORE_MOD_FOLDED        optional: 1 when the set also defines attnlab_score_mod_folded,
//                                   the modifier with a constant factor of its input and of its output
//                                   taken out (src/variants/cuda.ts scoreScales): f(s) =
//                                   ATTNLAB_SCORE_MOD_OUT_SCALE · folded(s · ATTNLAB_SCORE_MOD_IN_SCALE),
//                                   OUT_SCALE > 0; the forward's tile pass (flash/mask.cuh) folds both
//                                   into multiplies it makes anyway
//   ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT optional: 1 when the source also defines
//                                   attnlab_score_mod_backward_from_output(y, g, …), the same gradient
//                                   from the modified score y = attnlab_score_mod(s, …) (softcap): the
//                                   Hopper backward then takes y from P and skips that product too
//   ATTNLAB_SCORE_MOD_READS_POSITIONS  optional: 0 when attnlab_score_mod reads no captured tensor at
//                                   an index that depends on q or kv without a bound (ALiBi's
//                                   slopes[h], softcap): the forward then evaluates it on every score
//                                   of a tile, rows and keys past the lengths included, with no test
// the structs below (each behind its ATTNLAB_*_STRUCT guard, so that either side may define them
// first; the generated source may also include this header instead) and the device functions
//   float attnlab_score_mod(float s, int b, int h, int q, int kv, const AttnlabCaptures& c);
//   bool  attnlab_mask_mod(int b, int h, int q, int kv, const AttnlabCaptures& c);
//   float attnlab_score_mod_backward(float s, float g, int b, int h, int q, int kv, const AttnlabCaptures& c);
// A block mask may also come as -DATTNLAB_BLOCK_MASK=1 (the flash variants pass it). Without any of
// them the kernels compile exactly as without this header: FlashMods is empty, every such function a constant.
#pragma once

#ifndef ATTNLAB_SCORE_MOD
#define ATTNLAB_SCORE_MOD 0
#endif
#ifndef ATTNLAB_MASK_MOD
#define ATTNLAB_MASK_MOD 0
#endif
#ifndef ATTNLAB_CAPTURE_GRADS
#define ATTNLAB_CAPTURE_GRADS 0
#endif
#ifndef ATTNLAB_SCORE_MOD_NEEDS_SCORE
#define ATTNLAB_SCORE_MOD_NEEDS_SCORE 1
#endif
#ifndef ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT
#define ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 0
#endif
#ifndef ATTNLAB_BLOCK_MASK
#define ATTNLAB_BLOCK_MASK 0
#endif
#ifndef ATTNLAB_SCORE_MOD_READS_POSITIONS
#define ATTNLAB_SCORE_MOD_READS_POSITIONS 1
#endif
#ifndef ATTNLAB_SCORE_MOD_FOLDED
#define ATTNLAB_SCORE_MOD_FOLDED 0
#endif
// Whether the kernels take the two extra by-value parameters (AttnlabCaptures, AttnlabBlockMask).
#define ATTNLAB_MODIFIERS (ATTNLAB_SCORE_MOD || ATTNLAB_MASK_MOD || ATTNLAB_BLOCK_MASK)

// Captured tensors: device pointers in the modifier set's `captures` order, element strides of the
// (up to 4) index expressions (0 = broadcast), float32 gradient buffers (backward) or null. 8 + 32 + 8
// eight-byte words: src/backends/cuda/flash/modifiers.ts writes it.
#ifndef ATTNLAB_CAPTURES_STRUCT
#define ATTNLAB_CAPTURES_STRUCT
struct AttnlabCaptures {
  const void* ptr[8];
  long long stride[8][4];
  float* grad[8];
};
#endif

// kinds[b·stride_b + h·stride_h + qb·n_kvblocks + kb]: 0 = empty (skip), 1 = partial, 2 = full (maskMod
// keeps every element; the built-in masks still apply per element). stride_b / stride_h are 0 when the
// mask was stored once for every batch / head.
#ifndef ATTNLAB_BLOCK_MASK_STRUCT
#define ATTNLAB_BLOCK_MASK_STRUCT
struct AttnlabBlockMask {
  const unsigned char* kinds;
  long long stride_b, stride_h;
  int block_q, block_kv, n_qblocks, n_kvblocks;
};
#endif

// Declared here, defined by the generated source after its #include of this header.
#if ATTNLAB_SCORE_MOD
__device__ __forceinline__ float attnlab_score_mod(float s, int b, int h, int q, int kv, const AttnlabCaptures& c);
__device__ __forceinline__ float attnlab_score_mod_backward(float s, float g, int b, int h, int q, int kv,
                                                            const AttnlabCaptures& c);
#if ATTNLAB_SCORE_MOD_FOLDED
__device__ __forceinline__ float attnlab_score_mod_folded(float s, int b, int h, int q, int kv, const AttnlabCaptures& c);
#endif
#endif
#if ATTNLAB_MASK_MOD
__device__ __forceinline__ bool attnlab_mask_mod(int b, int h, int q, int kv, const AttnlabCaptures& c);
#endif

#define ATTNLAB_TILE_EMPTY 0
#define ATTNLAB_TILE_PARTIAL 1
#define ATTNLAB_TILE_FULL 2

#if ATTNLAB_MODIFIERS
// The kernel's own two parameters, by address (both are __grid_constant__ kernel parameters).
struct FlashMods {
  const AttnlabCaptures* c;
  const AttnlabBlockMask* bm;
};
#else
struct FlashMods {};
#endif

// The classification of the tile rows [q0, q1] × keys [kv0, kv1] (inclusive, q1 ≥ q0, kv1 ≥ kv0) of
// (b, h): EMPTY when every block it overlaps is empty, FULL when every one is full, PARTIAL otherwise.
// Without a block mask: FULL when there is no mask modifier, PARTIAL (evaluate it per element) else.
// Every thread of a block asks for the same bytes: one broadcast load each, from L1.
__device__ __forceinline__ int tile_kind(const FlashMods& m, int b, int h, int q0, int q1, int kv0, int kv1) {
#if ATTNLAB_BLOCK_MASK
  const AttnlabBlockMask& bm = *m.bm;
  const unsigned char* base = bm.kinds + b * bm.stride_b + h * bm.stride_h;
  const int qb1 = q1 / bm.block_q < bm.n_qblocks ? q1 / bm.block_q : bm.n_qblocks - 1;
  const int kb1 = kv1 / bm.block_kv < bm.n_kvblocks ? kv1 / bm.block_kv : bm.n_kvblocks - 1;
  int lo = ATTNLAB_TILE_FULL, hi = ATTNLAB_TILE_EMPTY;
  for (int qb = q0 / bm.block_q; qb <= qb1; ++qb)
    for (int kb = kv0 / bm.block_kv; kb <= kb1; ++kb) {
      const int k = base[static_cast<long long>(qb) * bm.n_kvblocks + kb];
      lo = k < lo ? k : lo;
      hi = k > hi ? k : hi;
    }
  return hi == ATTNLAB_TILE_EMPTY ? ATTNLAB_TILE_EMPTY : lo == ATTNLAB_TILE_FULL ? ATTNLAB_TILE_FULL : ATTNLAB_TILE_PARTIAL;
#else
  return ATTNLAB_MASK_MOD ? ATTNLAB_TILE_PARTIAL : ATTNLAB_TILE_FULL;
#endif
}

// The modified score (natural-log units: scale·q·k + bias) of an in-range pair.
__device__ __forceinline__ float mod_score(const FlashMods& m, float s, int b, int h, int q, int kv) {
#if ATTNLAB_SCORE_MOD
  return attnlab_score_mod(s, b, h, q, kv, *m.c);
#else
  return s;
#endif
}

// The folded modifier (ATTNLAB_SCORE_MOD_FOLDED) of a score already multiplied by its input factor:
// the modified score divided by ATTNLAB_SCORE_MOD_OUT_SCALE.
__device__ __forceinline__ float mod_score_folded(const FlashMods& m, float s, int b, int h, int q, int kv) {
#if ATTNLAB_SCORE_MOD && ATTNLAB_SCORE_MOD_FOLDED
  return attnlab_score_mod_folded(s, b, h, q, kv, *m.c);
#else
  return mod_score(m, s, b, h, q, kv);
#endif
}

// Whether the mask modifier keeps an in-range pair of a PARTIAL tile.
__device__ __forceinline__ bool mod_keeps(const FlashMods& m, int b, int h, int q, int kv) {
#if ATTNLAB_MASK_MOD
  return attnlab_mask_mod(b, h, q, kv, *m.c);
#else
  return true;
#endif
}

// g · d(score_mod)/ds at the raw score s (and the captures' gradients, when the set has them).
__device__ __forceinline__ float mod_score_backward(const FlashMods& m, float s, float g, int b, int h, int q, int kv) {
#if ATTNLAB_SCORE_MOD
  return attnlab_score_mod_backward(s, g, b, h, q, kv, *m.c);
#else
  return g;
#endif
}
