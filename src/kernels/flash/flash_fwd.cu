// FlashAttention-2 class forward kernel: one launch, softmax(Q·Kᵀ·scale + bias)·V without ever
// materialising the (B,N,T,S) scores.
//
// A block owns BM query rows of one (batch, head): its Q tile stays in shared memory, K and V tiles
// of BN keys stream through shared memory, and each of the NW warps owns 16·MI of the rows. Both
// matmuls run on tensor cores (mainloop.cuh: mma.sync m16n8k16, bf16 or fp16 in, float32
// accumulate); the softmax is online (softmax.cuh); O and the log-sum-exp are written once
// (epilogue.cuh). Key tiles are visited from the last to the first: the first tile visited is the
// one cut by the causal diagonal or by the end of the keys, so the per-element mask runs on it and
// the following tiles take the mask-free path.
//
// Pipeline, STAGES = 1 (FA2's overlap): one K and one V buffer; V_j loads while Q·K_jᵀ and the
// softmax compute, K_{j−1} while P·V_j computes. STAGES = 2: two K+V buffers; tile j−1 loads while
// all of tile j computes, with one barrier pair per tile.
//
// Modifiers (common/modifiers.cuh): a score modifier is applied to every in-range score, a mask
// modifier per element on the tiles a block mask calls PARTIAL (on every tile without one), and a
// block mask's EMPTY tiles are never visited: the key loop walks only the non-empty tiles, last to
// first, and the loads ahead of it fetch the next non-empty ones. A block whose tiles are all empty
// writes zeros and −inf like a block that sees no key. The kernel then takes AttnlabCaptures and
// AttnlabBlockMask after FlashParams.
//
// Specialisation: the host defines FLASH_D (padded head dim, multiple of 16), FLASH_BM, FLASH_BN,
// FLASH_NW (warps), FLASH_STAGES, FLASH_FP16 (0 bf16, 1 fp16), FLASH_BIAS (0 none, 1 f32, 2 bf16,
// 3 f16) and FLASH_MASK, and gets the extern "C" entry attnlab_flash_fwd and the variable
// attnlab_flash_fwd_shared_bytes (its dynamic shared memory per block). Compiled alone with
// -DATTNLAB_NVCC_TEST, the file instead instantiates a spread of configurations for nvcc checks.
#include "flash/epilogue.cuh"
#include "flash/mainloop.cuh"
#include "flash/mask.cuh"
#include "flash/schedule.cuh"
#include "flash/softmax.cuh"

template <class C>
__device__ __forceinline__ void flash_fwd(const FlashParams& p, const FlashMods& m) {
  extern __shared__ __align__(16) unsigned char smem[];
  u16* sQ = reinterpret_cast<u16*>(smem);
  const u32 q_smem = smem_addr(sQ);
  // STAGES=1: Q | K | V. STAGES=2: Q | K0 | V0 | K1 | V1.
  const u32 k_smem = q_smem + C::BM * C::PITCH * 2;
  const u32 v_smem = k_smem + C::KV_TILE_BYTES;
  constexpr u32 STAGE_BYTES = 2 * C::KV_TILE_BYTES;

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
  const i64 ks = p.k_strides[1], vs = p.v_strides[1];
  auto load_k = [&](u32 dst, int n0) { load_tile<C::BN, C::D, C::THREADS>(dst, k + n0 * ks, ks, w.s_len - n0, p.H); };
  auto load_v = [&](u32 dst, int n0) { load_tile<C::BN, C::D, C::THREADS>(dst, v + n0 * vs, vs, w.s_len - n0, p.Hv); };

  const int block_lo = w.n_lo / C::BN;
  const int block_hi = (w.n_hi + C::BN - 1) / C::BN;  // exclusive
  // The tile's classification (common/modifiers.cuh) and the next tile the loop visits after nb:
  // nb − 1 without a block mask, else the next lower non-empty one (block_lo − 1 when none is left).
  auto kind_of = [&](int nb) {
    return tile_kind(m, w.b, w.n, w.m0, w.m_last, nb * C::BN, imin(nb * C::BN + C::BN, w.s_len) - 1);
  };
  auto next_tile = [&](int nb) {
    --nb;
    if constexpr (ATTNLAB_BLOCK_MASK) {
      while (nb >= block_lo && kind_of(nb) == ATTNLAB_TILE_EMPTY) --nb;
    }
    return nb;
  };
  const int first = next_tile(block_hi);
  if (ATTNLAB_BLOCK_MASK && first < block_lo) {
    store_empty_block<C::BM, C::THREADS>(p, w);
    return;
  }

  load_tile<C::BM, C::D, C::THREADS>(q_smem, q, p.q_strides[1], w.t_len - w.m0, p.H);
  load_k(k_smem, first * C::BN);
  int ahead = first;  // STAGES=2: the tile in the other buffer pair (< block_lo when none)
  if constexpr (C::STAGES == 2) {
    load_v(v_smem, first * C::BN);
    cp_async_commit();
    ahead = next_tile(first);
    if (ahead >= block_lo) {
      load_k(k_smem + STAGE_BYTES, ahead * C::BN);
      load_v(v_smem + STAGE_BYTES, ahead * C::BN);
    }
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
  const LaneAddresses lanes = lane_addresses<C>(q_smem, k_smem, v_smem, warp, lane);

  u32 stage = 0;  // byte offset of the current K/V buffer pair (STAGES=2)
  for (int nb = first; nb >= block_lo;) {
    const int n0 = nb * C::BN;
    const int after = C::STAGES == 1 ? next_tile(nb) : ahead;  // the tile visited after this one
    float s[C::MI][C::NT][4];
    if constexpr (C::STAGES == 1) {
      cp_async_wait<0>();
      __syncthreads();  // K_nb (and Q) landed; every warp has finished P·V of the previous V tile
      load_v(v_smem, n0);
      cp_async_commit();
      qk_tile<C>(s, lanes.q, lanes.k);
    } else {
      cp_async_wait<1>();  // tile nb landed; tile nb−1 may still be in flight
      __syncthreads();
      qk_tile<C>(s, lanes.q, lanes.k + stage);
    }
    const float factor = scale_and_mask<C::MI, C::NT, C::BIAS, C::MASK>(
        s, p, w, row0, n0, lane, tile_needs_mask<C::BN>(p, w, n0), m, ATTNLAB_MODIFIERS ? kind_of(nb) : ATTNLAB_TILE_FULL);
    softmax.update(s, o, factor);
    if constexpr (C::STAGES == 1) {
      cp_async_wait<0>();
      __syncthreads();  // V_nb landed; every warp has finished Q·Kᵀ of K_nb, so K's buffer is free
      if (after >= block_lo) load_k(k_smem, after * C::BN);
      cp_async_commit();
      pv_tile<C>(o, s, lanes.v);
    } else {
      pv_tile<C>(o, s, lanes.v + stage);
      __syncthreads();  // every warp is done with this buffer pair: refill it with the tile after `after`
      ahead = after >= block_lo ? next_tile(after) : block_lo - 1;
      if (ahead >= block_lo) {
        load_k(k_smem + stage, ahead * C::BN);
        load_v(v_smem + stage, ahead * C::BN);
      }
      cp_async_commit();
      stage ^= STAGE_BYTES;
    }
    nb = after;
  }

  float inv[C::MI][2], lse[C::MI][2];
  softmax.finish(inv, lse);
  // Each warp stages its output in its own Q rows, which only it has read.
  store_output<C::MI, C::DT, C::D, C::FP16, C::BIAS, C::MASK>(p, w, o, inv, lse, sQ + warp * 16 * C::MI * C::PITCH, row0, lane, m);
}

#ifdef FLASH_D
using FlashVariantConfig =
    FlashConfig<FLASH_D, FLASH_BM, FLASH_BN, FLASH_NW, FLASH_STAGES, FLASH_FP16 != 0, FLASH_BIAS, FLASH_MASK != 0>;
#if ATTNLAB_MODIFIERS
extern "C" __global__ void __launch_bounds__(FLASH_NW * 32)
    attnlab_flash_fwd(const __grid_constant__ FlashParams p, const __grid_constant__ AttnlabCaptures c,
                      const __grid_constant__ AttnlabBlockMask bm) {
  flash_fwd<FlashVariantConfig>(p, FlashMods{&c, &bm});
}
#else
extern "C" __global__ void __launch_bounds__(FLASH_NW * 32) attnlab_flash_fwd(const __grid_constant__ FlashParams p) {
  flash_fwd<FlashVariantConfig>(p, FlashMods{});
}
#endif
// The shared memory this variant's blocks use, for the host to read from the loaded module
// (cuModuleGetGlobal): a test compares it with what the launcher asks for.
extern "C" __device__ unsigned attnlab_flash_fwd_shared_bytes = FlashVariantConfig::SHARED_BYTES;
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C>
__global__ void __launch_bounds__(C::THREADS) flash_fwd_test(const __grid_constant__ FlashParams p) {
  flash_fwd<C>(p, FlashMods{});
}
// The tile table's entries (src/backends/cuda/flash/sm80/tiles.ts), fp16, two-stage, and bias/mask variants.
template __global__ void flash_fwd_test<FlashConfig<64, 128, 64, 4, 1, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<128, 128, 64, 4, 1, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<128, 128, 64, 4, 2, true, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<256, 128, 128, 8, 1, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<256, 128, 64, 8, 2, false, 0, false>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<96, 128, 64, 4, 1, false, 1, true>>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_test<FlashConfig<48, 128, 64, 4, 2, true, 2, false>>(const __grid_constant__ FlashParams);
#endif
