// The launch parameters of the flash attention forward kernel, passed by value.
//
// The layout is mirrored byte for byte by src/backends/cuda/flash/params.ts (marshalFlashParams):
// all 8-byte fields first, then the 4-byte ones, so that every field sits at its natural alignment
// and the offsets are plain running sums on both sides. test/kernels/kernel-params-layout.test.ts
// compiles this header and compares every offset, size and kind with the marshalling.
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned char u8;
typedef long long i64;

// Own min/max and 16-byte vector: NVRTC compiles these files without any CUDA header, so nothing
// here depends on which functions it happens to declare implicitly.
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
struct __align__(16) u128 {
  u32 x, y, z, w;
};

struct FlashParams {
  const u16* q;         // (B,T,N,H) in the input dtype
  const u16* k;         // (B,S,K,H)
  const u16* v;         // (B,S,K,Hv)
  u16* o;               // (B,T,N,Hv), same dtype as q
  float* lse;           // (B,T,N) natural-log log-sum-exp, or null when not asked for
  const void* bias;     // additive bias, element (b,n,t,s) at dot(bias_strides, (b,n,t,s)); null if none
  const u8* mask;       // boolean mask (nonzero keeps the pair), strides as for the bias; null if none
  const int* q_lens;    // int32[B] valid query lengths, or null (all T)
  const int* kv_lens;   // int32[B] valid key lengths, or null (all S)
  // Element strides: batch, row (one step of T or S), head. The last dim is contiguous.
  i64 q_strides[3];
  i64 k_strides[3];
  i64 v_strides[3];
  i64 o_strides[3];
  i64 bias_strides[4];  // 0 on broadcast dimensions
  i64 mask_strides[4];
  int B, T, S, N, K, H, Hv;
  int group;            // N / K: query heads per key/value head (GQA); kv head = n / group
  int window_left;      // inclusive window bounds, clamped to 1<<29 for "unbounded"
  int window_right;
  float scale_log2;     // scale · log2(e): the softmax runs in base 2 (ex2.approx is one MUFU op)
  int flags;            // FLASH_FLAG_* below
};

#define FLASH_FLAG_CAUSAL 1
#define FLASH_FLAG_BOTTOM_RIGHT 2
#define FLASH_FLAG_WINDOW 4
