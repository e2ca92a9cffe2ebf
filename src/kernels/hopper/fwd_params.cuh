// The Hopper forward's kernel parameter: the tensor maps of Q, K and V, the flash kernels' FlashParams
// unchanged (the scheduling and masking rules are the mma.sync kernel's own), and the dynamic grid's
// work counter. src/backends/cuda/flash/sm90/hopper.ts marshals it (HOPPER_PARAMS_BYTES);
// test/kernels/hopper-compile.test.ts compares the two layouts.
#pragma once
#include "flash/params.cuh"
#include "hopper/sm90.cuh"

struct HopperParams {
  TmaDesc tm_q;  // (H, T, N, B) boxes of 64 × BM rows
  TmaDesc tm_k;  // (H, S, K, B) boxes of 64 × BN rows
  TmaDesc tm_v;  // (Hv, S, K, B) boxes of 64 × BN rows
  FlashParams f;
  // The dynamic grid's work counter (dynamic_grid variants only; null otherwise):
  // one device int, 0 at launch (the caller zeroes it before every launch, e.g. cuMemsetD32Async on
  // the launch stream), counting the items handed out after each block's first. It sits in the tail
  // padding (byte 664, the first word after FlashParams), so the struct keeps its size and the
  // library, which writes zeros there, is unchanged.
  int* work_counter;
  // The dynamic grid's section of query heads (dynamic_section) when > 0, else its rule: for the
  // harness's sweeps; byte 672, still in the tail padding.
  int dynamic_section;
};
// 3 tensor maps (128 bytes each) + FlashParams (280) + the counter, rounded up to the maps' 64-byte alignment.
static_assert(sizeof(HopperParams) == 704, "HopperParams layout changed: update src/backends/cuda/flash/sm90/hopper.ts");
