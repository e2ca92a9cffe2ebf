// The registers of the backward step that head dims 192 and 256 need (docs/internals/backward.md, "Head dims
// past 128"): 64 keys a block, two warpgroups each owning half of the columns of dK, dV and dQ; Sᵀ and dPᵀ
// as m64n32 over the warpgroup's 32 keys; P and dS exchanged through shared memory; dV, dK from them as
// A operands in shared memory; dQ of the warpgroup's columns in two passes, staged and bulk-added. A
// skeleton for ptxas, not a kernel: no loads, masks, statistics or pipelining, and the descriptors' layout
// bits are not the real ones (their registers are). nvcc 13.0:
//   cd src/kernels && nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -I . \
//     -o /tmp/wide.cubin ../../benchmarks/harnesses/backward-wide-registers.cu
// prints 216 registers at D=192 and 252 at D=256, no spills; dQ's columns in one pass instead (D/4
// registers live beside dK and dV) spill 68 B at D=256.
#include "hopper/bwd_dkdv_sm90.cuh"

template <bool FP16>
__device__ __forceinline__ void wgmma_ss_n32(float (&d)[4][4], u64 a_desc, u64 b_desc, int accumulate) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %18, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16"
               " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0; }\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                 "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                 "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
               : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

template <bool FP16>
__device__ __forceinline__ void wgmma_ss_n48(float (&d)[6][4], u64 a_desc, u64 b_desc, int accumulate) {
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %26, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16"
               " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, %24, %25, p, 1, 1, 0, 1; }\n"
               : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
                 "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
                 "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),
                 "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3])
               : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

template <int D>
__device__ __forceinline__ void half_mma(float (&d)[D / 16][4], u64 a, u64 b, int acc) {
  if constexpr (D == 256) wgmma_ss_n128<false>(d, a, b, acc);
  else wgmma_ss_n96<false>(d, a, b, acc);
}

template <int D>
__global__ void __launch_bounds__(256, 1) wide_proto(const __grid_constant__ FlashParams p,
                                                     const __grid_constant__ FlashBwdParams x, int steps) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 base = (smem_addr(smem_raw) + 1023) & ~1023u;
  constexpr u32 KV = 64 * D * 2, QD = 64 * D * 2, PS = 64 * 64 * 2;
  const u32 k_s = base, v_s = k_s + KV, q_s = v_s + KV, do_s = q_s + QD, p_s = do_s + QD, ds_s = p_s + PS;
  const u32 stg = ds_s + PS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane & 3;
  const int wg = __shfl_sync(0xffffffffu, warp / 4, 0);
  float dk[D / 16][4], dv[D / 16][4];
#pragma unroll
  for (int j = 0; j < D / 16; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[j][c] = dv[j][c] = 0.f;
  const float* lse2 = reinterpret_cast<const float*>(smem_raw + (stg - base) + 64 * D * 4);
  for (int s = 0; s < steps; ++s) {
    float st[4][4], dpt[4][4];
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      wgmma_ss_n32<false>(st, sw128_at(sw128_lo(q_s, 16), (k / 4) * 8192 + (k % 4) * 32),
                          sw128_at(sw128_lo(k_s + wg * 32 * 128, 16), (k / 4) * 8192 + (k % 4) * 32), k > 0);
    wgmma_commit();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      wgmma_ss_n32<false>(dpt, sw128_at(sw128_lo(do_s, 16), (k / 4) * 8192 + (k % 4) * 32),
                          sw128_at(sw128_lo(v_s + wg * 32 * 128, 16), (k / 4) * 8192 + (k % 4) * 32), k > 0);
    wgmma_commit();
    wgmma_wait<1>();
    fence_accumulators(st);
    weights_all_visible(st, p.scale_log2, lse2 + s % 4, t);
    u32 pa[2][4];
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      pa[kk][0] = pack2<false>(st[2 * kk][0], st[2 * kk][1]);
      pa[kk][1] = pack2<false>(st[2 * kk][2], st[2 * kk][3]);
      pa[kk][2] = pack2<false>(st[2 * kk + 1][0], st[2 * kk + 1][1]);
      pa[kk][3] = pack2<false>(st[2 * kk + 1][2], st[2 * kk + 1][3]);
    }
    const u32 row = p_s + wg * 4096 + (lane & 7) * 128 + (((warp % 4) * 2 + (lane >> 4)) ^ (lane & 7)) * 16;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) stmatrix_x4_trans(row + kk * 1024, pa[kk]);
    wgmma_wait<0>();
    fence_accumulators(dpt);
    ds_rows(dpt, st, lse2 + 64 + s % 4, t);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      pa[kk][0] = pack2<false>(dpt[2 * kk][0], dpt[2 * kk][1]);
      pa[kk][1] = pack2<false>(dpt[2 * kk][2], dpt[2 * kk][3]);
      pa[kk][2] = pack2<false>(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]);
      pa[kk][3] = pack2<false>(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3]);
    }
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) stmatrix_x4_trans(row + (ds_s - p_s) + kk * 1024, pa[kk]);
    fence_proxy_async();
    __syncthreads();
    // dV, dK: m64 (keys) × n D/2 (this warpgroup's columns) × k 64 queries, A = Pᵀ / dSᵀ from shared memory.
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      half_mma<D>(dv, sw128_at(sw128_lo(p_s, 16), k * 2048), sw128_at(sw128_lo(do_s + wg * (D / 2) * 2, 1024), k * 2048), 1);
      half_mma<D>(dk, sw128_at(sw128_lo(ds_s, 16), k * 2048), sw128_at(sw128_lo(q_s + wg * (D / 2) * 2, 1024), k * 2048), 1);
    }
    wgmma_commit();
    // dQ of this warpgroup's D/2 columns in QP passes of 64 (D = 256) or 48 (D = 192) columns: 32 or 24 registers live.
    constexpr int QP = 2, QW = D / 2 / QP;
#pragma unroll
    for (int h = 0; h < QP; ++h) {
      float dq[QW / 8][4];
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const u64 a = sw128_at(sw128_lo(ds_s, 16), k * 32), b = sw128_at(sw128_lo(k_s + (wg * (D / 2) + h * QW) * 2, 1024), k * 2048);
        if constexpr (QW == 64) wgmma_ss_n64<false>(dq, a, b, k > 0);
        else wgmma_ss_n48<false>(dq, a, b, k > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(dq);
      const u32 at = stg + wg * 64 * QW * 4 + (warp % 4) * 16 * QW * 4 + (lane >> 2) * QW * 4 + t * 8;
      if (lane == 0 && h > 0) bulk_wait_read<0>();
      __syncwarp();
#pragma unroll
      for (int j = 0; j < QW / 8; ++j) {
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at + j * 32), "f"(dq[j][0]), "f"(dq[j][1]) : "memory");
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at + j * 32 + 8 * QW * 4), "f"(dq[j][2]), "f"(dq[j][3]) : "memory");
      }
      fence_proxy_async();
      __syncwarp();
      if (lane == 0) {
        bulk_reduce_add_f32(x.dq_accum + s * 64 * D + wg * 64 * (D / 2) + h * QW + (warp % 4) * 16 * QW,
                            stg + wg * 64 * QW * 4 + (warp % 4) * 16 * QW * 4, 16 * QW * 4);
        bulk_commit();
      }
    }
    fence_accumulators(dk);
    fence_accumulators(dv);
    if (lane == 0) bulk_wait_read<0>();
    __syncthreads();
  }
  const float(&dk3)[1][D / 16][4] = reinterpret_cast<const float(&)[1][D / 16][4]>(dk);
  const float(&dv3)[1][D / 16][4] = reinterpret_cast<const float(&)[1][D / 16][4]>(dv);
  store_tile<1, D / 16, false>(x.dk + wg * (D / 2), p.k_strides[1], dk3, x.scale, warp % 4 * 16, p.S, p.H, lane);
  store_tile<1, D / 16, false>(x.dv + wg * (D / 2), p.v_strides[1], dv3, 1.f, warp % 4 * 16, p.S, p.Hv, lane);
}
template __global__ void wide_proto<256>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams, int);
template __global__ void wide_proto<192>(const __grid_constant__ FlashParams, const __grid_constant__ FlashBwdParams, int);
