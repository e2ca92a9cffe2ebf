// FlashAttention-2 class forward kernel: one launch, softmax(Q·Kᵀ·scale + bias)·V without ever
// materialising the (B,N,T,S) scores.
//
// A block owns BM query rows of one (batch, head): its Q tile stays in shared memory, K and V tiles
// of BN keys stream through shared memory, and each of the NW warps owns 16·MI of the rows. Both
// matmuls run on tensor cores (mma.sync m16n8k16, bf16 or fp16 in, float32 accumulate); the
// softmax is online (softmax.cuh); O and the log-sum-exp are written once (epilogue.cuh).
//
// Overlap (FA2's): the load of V_j runs while Q·K_jᵀ and the softmax compute, and the load of
// K_{j−1} runs while P·V_j computes, so one buffer each for K and V keeps the tensor cores fed.
// Key tiles are visited from the last to the first: the first tile visited is the one cut by the
// causal diagonal or by the end of the keys, so the per-element mask runs on it and the following
// tiles take the mask-free path.
//
// Specialisation: the host defines FLASH_D (padded head dim, multiple of 16), FLASH_BM, FLASH_BN,
// FLASH_NW (warps), FLASH_FP16 (0 bf16, 1 fp16), FLASH_BIAS (0 none, 1 f32, 2 bf16, 3 f16) and
// FLASH_MASK, and gets the extern "C" entry attnlab_flash_fwd. Compiled alone with
// -DATTNLAB_NVCC_TEST, the file instead instantiates a spread of configurations for nvcc checks.
#include "flash/copy.cuh"
#include "flash/epilogue.cuh"
#include "flash/mask.cuh"
#include "flash/schedule.cuh"
#include "flash/softmax.cuh"

template <int D_, int BM_, int BN_, int NW_, bool FP16_, int BIAS_, bool MASK_>
struct FlashConfig {
  static constexpr int D = D_, BM = BM_, BN = BN_, NW = NW_, BIAS = BIAS_;
  static constexpr bool FP16 = FP16_, MASK = MASK_;
  static constexpr int THREADS = NW * 32;
  static constexpr int MI = BM / (16 * NW);  // 16-row m-tiles per warp
  static constexpr int NT = BN / 8;          // 8-key n-tiles of S
  static constexpr int DT = D / 8;           // 8-column n-tiles of O
  static constexpr int PITCH = SmemTile<D>::PITCH;
  static_assert(D % 16 == 0 && D >= 32 && D <= 256, "D: a multiple of 16 in [32, 256]");
  static_assert(BM % (16 * NW) == 0 && MI >= 1, "BM: a multiple of 16 rows per warp");
  static_assert(BN % 16 == 0, "BN: a multiple of 16 (one k-step of P·V)");
};

template <class C>
__device__ __forceinline__ void flash_fwd(const FlashParams& p) {
  extern __shared__ __align__(16) unsigned char smem[];
  u16* sQ = reinterpret_cast<u16*>(smem);
  const u32 q_smem = smem_addr(sQ);
  const u32 k_smem = q_smem + C::BM * C::PITCH * 2;
  const u32 v_smem = k_smem + C::BN * C::PITCH * 2;

  const TileWork w = schedule_tile<C::BM>(p);
  if (w.m0 >= p.T) return;
  if (w.n_lo >= w.n_hi) {
    store_empty_block<C::BM, C::THREADS>(p, w);
    return;
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row0 = w.m0 + warp * 16 * C::MI;  // first query row of this warp

  const u16* q = p.q + w.b * p.q_strides[0] + w.n * p.q_strides[2] + w.m0 * p.q_strides[1];
  const u16* k = p.k + w.b * p.k_strides[0] + w.kv_head * p.k_strides[2];
  const u16* v = p.v + w.b * p.v_strides[0] + w.kv_head * p.v_strides[2];

  const int block_lo = w.n_lo / C::BN;
  const int block_hi = (w.n_hi + C::BN - 1) / C::BN;  // exclusive

  load_tile<C::BM, C::D, C::THREADS>(q_smem, q, p.q_strides[1], w.t_len - w.m0, p.H);
  {
    const int n0 = (block_hi - 1) * C::BN;
    load_tile<C::BN, C::D, C::THREADS>(k_smem, k + n0 * p.k_strides[1], p.k_strides[1], w.s_len - n0, p.H);
  }
  cp_async_commit();

  float o[C::MI][C::DT][4];
#pragma unroll
  for (int i = 0; i < C::MI; ++i)
#pragma unroll
    for (int d = 0; d < C::DT; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[i][d][c] = 0.f;
  OnlineSoftmax<C::MI, C::NT, C::DT> softmax;
  softmax.init();

  // Per-lane ldmatrix row/column offsets (bytes), fixed for the whole loop.
  // A (Q): lanes 0–15 address rows 0–15 at column 0, lanes 16–31 the same rows at column 8.
  const u32 q_lane = q_smem + ((warp * 16 * C::MI + (lane & 15)) * C::PITCH + (lane >> 4) * 8) * 2;
  // B (K, not transposed): matrices (keys 0–7, d 0–7), (keys 0–7, d 8–15), (keys 8–15, d 0–7), (8–15, 8–15).
  const u32 k_lane = k_smem + (((lane & 7) + ((lane >> 4) << 3)) * C::PITCH + ((lane >> 3) & 1) * 8) * 2;
  // B (V, transposed): matrices (keys 0–7, d 0–7), (keys 8–15, d 0–7), (keys 0–7, d 8–15), (8–15, 8–15).
  const u32 v_lane = v_smem + (((lane & 7) + ((lane >> 3) & 1) * 8) * C::PITCH + (lane >> 4) * 8) * 2;

  for (int nb = block_hi - 1; nb >= block_lo; --nb) {
    const int n0 = nb * C::BN;
    cp_async_wait<0>();
    __syncthreads();  // K_nb (and Q) landed; every warp has finished P·V of the previous V tile
    load_tile<C::BN, C::D, C::THREADS>(v_smem, v + n0 * p.v_strides[1], p.v_strides[1], w.s_len - n0, p.Hv);
    cp_async_commit();

    float s[C::MI][C::NT][4];
#pragma unroll
    for (int i = 0; i < C::MI; ++i)
#pragma unroll
      for (int j = 0; j < C::NT; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[i][j][c] = 0.f;
#pragma unroll
    for (int kk = 0; kk < C::D / 16; ++kk) {
      u32 a[C::MI][4];
#pragma unroll
      for (int i = 0; i < C::MI; ++i) ldmatrix_x4(a[i], q_lane + (i * 16 * C::PITCH + kk * 16) * 2);
#pragma unroll
      for (int j = 0; j < C::NT; j += 2) {
        u32 b[4];
        ldmatrix_x4(b, k_lane + (j * 8 * C::PITCH + kk * 16) * 2);
#pragma unroll
        for (int i = 0; i < C::MI; ++i) {
          mma_16816<C::FP16>(s[i][j], a[i], b[0], b[1]);
          mma_16816<C::FP16>(s[i][j + 1], a[i], b[2], b[3]);
        }
      }
    }

    const float factor =
        scale_and_mask<C::MI, C::NT, C::BIAS, C::MASK>(s, p, w, row0, n0, lane, tile_needs_mask<C::BN>(p, w, n0));
    softmax.update(s, o, factor);

    cp_async_wait<0>();
    __syncthreads();  // V_nb landed; every warp has finished Q·Kᵀ of K_nb, so K's buffer is free
    if (nb > block_lo) {
      const int n_prev = n0 - C::BN;
      load_tile<C::BN, C::D, C::THREADS>(k_smem, k + n_prev * p.k_strides[1], p.k_strides[1], w.s_len - n_prev,
                                         p.H);
    }
    cp_async_commit();

#pragma unroll
    for (int kk = 0; kk < C::BN / 16; ++kk) {
      // The S accumulators of n-tiles 2kk and 2kk+1 are exactly the A fragment of rows × keys 16kk..16kk+15.
      u32 a[C::MI][4];
#pragma unroll
      for (int i = 0; i < C::MI; ++i) {
        a[i][0] = pack2<C::FP16>(s[i][2 * kk][0], s[i][2 * kk][1]);
        a[i][1] = pack2<C::FP16>(s[i][2 * kk][2], s[i][2 * kk][3]);
        a[i][2] = pack2<C::FP16>(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
        a[i][3] = pack2<C::FP16>(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
      }
#pragma unroll
      for (int d = 0; d < C::DT; d += 2) {
        u32 b[4];
        ldmatrix_x4_trans(b, v_lane + (kk * 16 * C::PITCH + d * 8) * 2);
#pragma unroll
        for (int i = 0; i < C::MI; ++i) {
          mma_16816<C::FP16>(o[i][d], a[i], b[0], b[1]);
          mma_16816<C::FP16>(o[i][d + 1], a[i], b[2], b[3]);
        }
      }
    }
  }

  float inv[C::MI][2], lse[C::MI][2];
  softmax.finish(inv, lse);
  // Each warp stages its output in its own Q rows, which only it has read.
  store_output<C::MI, C::DT, C::D, C::FP16>(p, w, o, inv, lse, sQ + warp * 16 * C::MI * C::PITCH, row0, lane);
}

#ifdef FLASH_D
extern "C" __global__ void __launch_bounds__(FLASH_NW * 32) attnlab_flash_fwd(const __grid_constant__ FlashParams p) {
  flash_fwd<FlashConfig<FLASH_D, FLASH_BM, FLASH_BN, FLASH_NW, FLASH_FP16 != 0, FLASH_BIAS, FLASH_MASK != 0>>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C>
__global__ void __launch_bounds__(C::THREADS) flash_fwd_test(const __grid_constant__ FlashParams p) {
  flash_fwd<C>(p);
}
// The tile table's entries (src/backends/cuda/flash/tiles.ts), fp16, and bias/mask variants.
template __global__ void flash_fwd_test<FlashConfig<32, 128, 64, 4, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<64, 128, 64, 4, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<128, 128, 64, 8, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<128, 128, 64, 8, true, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<256, 128, 64, 8, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<96, 128, 64, 8, false, 1, true>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<48, 128, 64, 4, true, 2, false>>(const __grid_constant__ FlashParams);
#endif
