// Tensor-core and async-copy primitives for sm_80+, as inline PTX.
//
// Inline PTX instead of cuda_bf16.h / mma.h: NVRTC then needs no include path at all, and the
// fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16") are spelled out where they are used.
// Lane roles: g = lane / 4 ("groupID"), t = lane % 4 ("threadID_in_group").
#pragma once
#include "common/dtypes.cuh"
#include "flash/params.cuh"

// 32-bit shared-window address of a generic pointer into shared memory (what ldmatrix/cp.async take).
__device__ __forceinline__ u32 smem_addr(const void* ptr) {
  u32 addr;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(ptr));
  return addr;
}

// 16-byte global → shared copy that bypasses L1 (.cg). src_bytes = 0 writes 16 zero bytes and reads
// nothing: out-of-range rows and padded head-dim columns become zeros, so no stale shared memory
// (possibly NaN) ever meets a zero softmax weight.
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// Four 8×8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, and each lane receives
// row g, columns 2t, 2t+1 of each matrix in r[i].
__device__ __forceinline__ void ldmatrix_x4(u32 r[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The transposed form: each lane receives rows 2t, 2t+1 of column g — the B operand of P·V read
// straight from V's row-major tile.
__device__ __forceinline__ void ldmatrix_x4_trans(u32 r[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A·B + D with A 16×16 (row), B 16×8 (col), float32 accumulators.
// A regs: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B regs: k rows 2t.. and 2t+8.. of
// column g; C/D: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
template <bool FP16>
__device__ __forceinline__ void mma_16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
  if constexpr (FP16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats → one register of two 16-bit values, round to nearest even; `lo` lands at the lower
// address (the lower column), which is what the A fragment of the next mma expects.
template <bool FP16>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (FP16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// 2^x in one MUFU instruction; ex2.approx(−inf) = +0, which the masked logits rely on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Decoders for the three bias dtypes (0 none, 1 float32, 2 bfloat16, 3 float16).
template <int BIAS>
__device__ __forceinline__ float load_bias(const void* base, i64 offset) {
  if constexpr (BIAS == 1) {
    return static_cast<const float*>(base)[offset];
  } else if constexpr (BIAS == 2) {
    return __uint_as_float(static_cast<u32>(static_cast<const u16*>(base)[offset]) << 16);
  } else {
    float f;
    const u16 h = static_cast<const u16*>(base)[offset];
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
  }
}
