// The float32 forward kernel: the same algorithm and the same visibility rules as flash_fwd.cu
// (schedule.cuh), computed with float32 FMAs instead of tensor cores, so float32 inputs get true
// float32 products ('highest') rather than TF32's 10-bit mantissas.
//
// Work split: a block owns BM = 4·NW query rows (4 per warp) and streams K/V tiles of 32 keys.
// For Q·Kᵀ a lane owns one key of the tile and computes its dot product with the warp's 4 rows
// (K row pitch D+1 floats: the 32 lanes read 32 different rows at one column without bank
// conflicts, and each K value read serves 4 rows). For P·V a lane owns D/32 output columns and
// takes each key's weight from that key's lane by shuffle. Softmax is online, in base 2, with the
// same empty-row rule: a row that sees no key outputs zeros and log-sum-exp −inf, and the same NaN
// rule (softmax.cuh): the max propagates NaN, a NaN or +inf logit makes the row NaN, and a key whose
// logit is −inf is skipped in P·V, so a masked key's NaN value never reaches the row (its weight 0
// times NaN would be NaN). The skip is warp-uniform: one ballot per row and tile.
//
// Specialisation: FLASH_D (max(H, Hv) rounded up to 32), FLASH_NW, FLASH_BIAS, FLASH_MASK; the entry
// is attnlab_flash_fwd_f32, its shared memory per block attnlab_flash_fwd_f32_shared_bytes.
#include "flash/mma.cuh"
#include "flash/schedule.cuh"

// Shared memory of one block: Q [BM][D], K [BN][D+1], V [BN][D] floats. The host reads SHARED_BYTES
// back (attnlab_flash_fwd_f32_shared_bytes) instead of trusting its own formula.
template <int D, int NW>
struct F32Layout {
  static constexpr int ROWS = 4;        // query rows per warp
  static constexpr int BM = ROWS * NW;  // query rows per block
  static constexpr int BN = 32;         // keys per tile: one per lane
  static constexpr int KP = D + 1;      // K pitch in floats
  static constexpr unsigned SHARED_BYTES = (BM * D + BN * KP + BN * D) * 4;
};

template <int D, int NW, int BIAS, bool MASK>
__device__ __forceinline__ void flash_fwd_f32(const FlashParams& p) {
  using L = F32Layout<D, NW>;
  constexpr int ROWS = L::ROWS, BM = L::BM, BN = L::BN, KP = L::KP;
  constexpr int COLS = D / 32;      // output columns per lane
  static_assert(D % 32 == 0 && D >= 32 && D <= 256, "D: a multiple of 32 in [32, 256]");
  extern __shared__ __align__(16) float smem_f[];
  float* sQ = smem_f;               // [BM][D]
  float* sK = sQ + BM * D;          // [BN][D+1]
  float* sV = sK + BN * KP;         // [BN][D]

  const TileWork w = schedule_tile<BM>(p);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const float* q = reinterpret_cast<const float*>(p.q) + w.b * p.q_strides[0] + w.n * p.q_strides[2];
  const float* k = reinterpret_cast<const float*>(p.k) + w.b * p.k_strides[0] + w.kv_head * p.k_strides[2];
  const float* v = reinterpret_cast<const float*>(p.v) + w.b * p.v_strides[0] + w.kv_head * p.v_strides[2];
  float* out = reinterpret_cast<float*>(p.o) + w.b * p.o_strides[0] + w.n * p.o_strides[2];

  // Q rows past t_len and columns past H are zeros: they never reach a valid output.
  for (int idx = threadIdx.x; idx < BM * D; idx += NW * 32) {
    const int r = idx / D, c = idx % D, row = w.m0 + r;
    sQ[idx] = (row < w.t_len && c < p.H) ? q[row * p.q_strides[1] + c] : 0.f;
  }

  float o[ROWS][COLS];
  float row_max[ROWS], lane_sum[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    row_max[r] = neg_inf();
    lane_sum[r] = 0.f;
#pragma unroll
    for (int c = 0; c < COLS; ++c) o[r][c] = 0.f;
  }
  const int row0 = w.m0 + warp * ROWS;
  const i64 bias_head = BIAS ? w.b * p.bias_strides[0] + w.n * p.bias_strides[1] : 0;
  const i64 mask_head = MASK ? w.b * p.mask_strides[0] + w.n * p.mask_strides[1] : 0;
  constexpr float LOG2E = 1.4426950408889634f;

  const int block_lo = w.n_lo / BN;
  const int block_hi = w.n_lo < w.n_hi ? (w.n_hi + BN - 1) / BN : block_lo;  // empty range: no tiles
  for (int nb = block_lo; nb < block_hi; ++nb) {
    const int n0 = nb * BN;
    __syncthreads();  // the previous tile is no longer read
    for (int idx = threadIdx.x; idx < BN * D; idx += NW * 32) {
      const int j = idx / D, c = idx % D, key = n0 + j;
      const bool in = key < w.s_len;
      sK[j * KP + c] = (in && c < p.H) ? k[key * p.k_strides[1] + c] : 0.f;
      sV[idx] = (in && c < p.Hv) ? v[key * p.v_strides[1] + c] : 0.f;
    }
    __syncthreads();

    float s[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) s[r] = 0.f;
#pragma unroll 8
    for (int c = 0; c < D; ++c) {
      const float kc = sK[lane * KP + c];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) s[r] = fmaf(sQ[(warp * ROWS + r) * D + c], kc, s[r]);
    }
    const bool boundary = tile_needs_mask<BN>(p, w, n0);
    const int key = n0 + lane;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int row = row0 + r;
      float x = s[r] * p.scale_log2;
      const bool in_range = row < w.t_len && key < w.s_len;
      if constexpr (BIAS != 0) {
        if (in_range) x += LOG2E * load_bias<BIAS>(p.bias, bias_head + row * p.bias_strides[2] + key * p.bias_strides[3]);
      }
      if constexpr (MASK) {
        if (in_range && p.mask[mask_head + row * p.mask_strides[2] + key * p.mask_strides[3]] == 0) x = neg_inf();
      }
      if (boundary && !key_visible(p, w, row, key)) x = neg_inf();
      float mx = x;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      mx = max_nan(mx, row_max[r]);
      const u32 masked = __ballot_sync(0xffffffffu, x == neg_inf());
      const float base = mx == neg_inf() ? 0.f : mx;
      const float alpha = row_max[r] == mx ? 1.f : fast_exp2(row_max[r] - base);
      row_max[r] = mx;
      const float weight = fast_exp2(x - base);
      lane_sum[r] = lane_sum[r] * alpha + weight;
#pragma unroll
      for (int c = 0; c < COLS; ++c) o[r][c] *= alpha;
#pragma unroll 8
      for (int j = 0; j < BN; ++j) {
        const float pj = __shfl_sync(0xffffffffu, weight, j);
        if (((masked >> j) & 1u) == 0) {
#pragma unroll
          for (int c = 0; c < COLS; ++c) o[r][c] = fmaf(pj, sV[j * D + c * 32 + lane], o[r][c]);
        }
      }
    }
  }

  constexpr float LN2 = 0.6931471805599453f;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int row = row0 + r;
    float l = lane_sum[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
    if (row >= p.T) continue;
    const bool valid = row < w.t_len && l != 0.f;  // l is NaN for a NaN row, 0 for an empty one
    const float inv = valid ? 1.f / l : 0.f;
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      const int col = c * 32 + lane;
      if (col < p.Hv) out[row * p.o_strides[1] + col] = valid ? o[r][c] * inv : 0.f;
    }
    if (p.lse != nullptr && lane == 0) {
      float log2l;
      asm("lg2.approx.f32 %0, %1;\n" : "=f"(log2l) : "f"(valid ? l : 1.f));
      p.lse[(static_cast<i64>(w.b) * p.T + row) * p.N + w.n] = valid ? (row_max[r] + log2l) * LN2 : neg_inf();
    }
  }
}

#ifdef FLASH_D
extern "C" __global__ void __launch_bounds__(FLASH_NW * 32)
    attnlab_flash_fwd_f32(const __grid_constant__ FlashParams p) {
  flash_fwd_f32<FLASH_D, FLASH_NW, FLASH_BIAS, FLASH_MASK != 0>(p);
}
// Read by the host from the loaded module (cuModuleGetGlobal), as for flash_fwd.cu.
extern "C" __device__ unsigned attnlab_flash_fwd_f32_shared_bytes = F32Layout<FLASH_D, FLASH_NW>::SHARED_BYTES;
#endif

#ifdef ATTNLAB_NVCC_TEST
template <int D, int NW, int BIAS, bool MASK>
__global__ void __launch_bounds__(NW * 32) flash_fwd_f32_test(const __grid_constant__ FlashParams p) {
  flash_fwd_f32<D, NW, BIAS, MASK>(p);
}
template __global__ void flash_fwd_f32_test<32, 8, 0, false>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_f32_test<128, 8, 0, false>(const __grid_constant__ FlashParams);
template __global__ void flash_fwd_f32_test<256, 8, 1, true>(const __grid_constant__ FlashParams);
#endif
