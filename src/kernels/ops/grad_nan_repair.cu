// NaN repair of gradients after a backward whose GEMMs multiply weight-0 pairs (cuDNN's fused
// backward): every row of dQ, dK, dV holding a NaN or ±inf element, and every such dBias element, is
// recomputed by the NaN rule for gradients (docs/guide/gradient-accuracy.md, "NaN and Inf"), the
// rule the CPU reference (src/backends/cpu/row-gradients.ts), naive and flash follow:
//
//   P = exp(logit − lse) over the pairs the row sees (lengths, causality, window, boolean mask);
//   a row whose log-sum-exp is NaN or +inf (a NaN or +inf logit) is a NaN row: P is NaN at every
//   pair it sees, −inf logits included; a row whose log-sum-exp is −inf sees nothing: no term.
//   D = dO·O (NaN exactly when the forward output row holds a NaN); pairs of weight 0 add nothing:
//   dS = P·(dP − D), dV_j += P·dO, dQ += scale·dS·k_j, dK_j += scale·dS·q, dBias += dS.
//
// Why rows with a non-finite element are the ones to redo: with finite inputs cuDNN computes the
// rule's numbers. A NaN or Inf input reaches a gradient element through IEEE products and sums,
// and those keep it non-finite; cuDNN only adds non-finite values (0·NaN, 0·Inf of pairs of weight
// 0, NaN from the masked side of a tile) to elements the rule keeps finite, or the wrong kind of
// non-finite (NaN for +inf). So recomputing the non-finite rows gives the rule's gradients, and the
// rows the rule makes NaN come out NaN again.
//
// Cost without NaN or Inf in the gradients: one flat read of dQ, dK, dV (and dBias), 16 bytes a lane,
// REPAIR_UNROLL loads in flight, each tested for a non-finite element on its integer bits; no host
// read-back. With them, a warp redoes each such row over the pairs it sees (lanes split the head
// dim): about (2·H + Hv) FMAs per pair for a dQ or dK row, H + Hv for a dV row: a path only
// poisoned inputs take.
//
// Specialisation: REPAIR_ELEM (0 bf16, 1 fp16, 2 f32: Q, K, V, dO and the gradients), REPAIR_O_ELEM
// (the output O, which may be float32), FLASH_BIAS and FLASH_MASK as for the flash kernels.
// Entry: attnlab_grad_nan_repair(FlashParams, GradRepairParams).
#include "ops/grad_repair_params.cuh"
#include "flash/recompute.cuh"

#define REPAIR_UNROLL 4
// Head dims up to 256 (cuDNN's limit): 8 accumulators a lane.
#define REPAIR_PER_LANE 8

constexpr u32 FULL_WARP = 0xffffffffu;

// Whether any element of 16 bytes is NaN or ±inf: its exponent all ones, on the bits.
template <int ELEM>
__device__ __forceinline__ bool any_non_finite(const u128 c) {
  const u32 w[4] = {c.x, c.y, c.z, c.w};
  bool bad = false;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (ELEM == 2) {
      bad |= (w[i] & 0x7f800000u) == 0x7f800000u;
    } else {
      constexpr u32 EXP = ELEM == 0 ? 0x7f80u : 0x7c00u;  // bf16, f16
      bad |= (w[i] & EXP) == EXP || ((w[i] >> 16) & EXP) == EXP;
    }
  }
  return bad;
}

// The index of the lowest set bit of x (nonzero), in PTX: nothing here depends on NVRTC declaring __ffs.
__device__ __forceinline__ int lowest_bit(u32 x) {
  u32 at;
  asm("bfind.u32 %0, %1;\n" : "=r"(at) : "r"(x & (0u - x)));
  return static_cast<int>(at);
}

__device__ __forceinline__ bool finite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(FULL_WARP, x, o);
  return x;
}

// a[ao + h] · b[bo + h] summed over h < len, the lanes taking every 32nd h; every lane gets the sum.
template <int EA, int EB>
__device__ __forceinline__ float warp_dot(const u16* a, i64 ao, const u16* b, i64 bo, int len, int lane) {
  float s = 0.f;
  for (int h = lane; h < len; h += 32) s = fmaf(load_elem<EA>(a, ao + h), load_elem<EB>(b, bo + h), s);
  return warp_sum(s);
}

// Whether row `row` of head w.n sees key `key`: lengths, causality, the window and the boolean mask.
template <bool MASK>
__device__ __forceinline__ bool pair_open(const FlashParams& p, const TileWork& w, int row, int key) {
  if (row >= w.t_len || !key_visible(p, w, row, key)) return false;
  if constexpr (MASK) {
    const i64 at = w.b * p.mask_strides[0] + w.n * p.mask_strides[1] + row * p.mask_strides[2] + key * p.mask_strides[3];
    if (p.mask[at] == 0) return false;
  }
  return true;
}

// The row's terms: its log-sum-exp in base 2 and D = dO·O. `live` false: the row sees nothing.
struct RowTerms {
  bool live;
  bool nan_row;  // the log-sum-exp is NaN or +inf: P is NaN at every pair the row sees
  float lse2;
  float d;
};

template <int ELEM, int OELEM>
__device__ __forceinline__ RowTerms row_terms(const FlashParams& p, const GradRepairParams& g, int b, int n, int row,
                                              int lane) {
  constexpr float LOG2E = 1.4426950408889634f;
  const float lse = p.lse[(static_cast<i64>(b) * p.T + row) * p.N + n];
  RowTerms r;
  r.live = lse != neg_inf();
  r.nan_row = !(lse < -neg_inf());
  r.lse2 = lse * LOG2E;
  r.d = 0.f;
  if (r.live) {
    const i64 o = b * p.o_strides[0] + row * p.o_strides[1] + n * p.o_strides[2];
    r.d = warp_dot<ELEM, OELEM>(g.d_o, o, p.o, o, p.Hv, lane);
  }
  return r;
}

// P of an open pair (row, key) of head w.n: NaN in a NaN row, else exp(logit − lse).
template <int ELEM, int BIAS>
__device__ __forceinline__ float pair_weight(const FlashParams& p, const TileWork& w, const RowTerms& r, int row,
                                             int key, int lane) {
  constexpr float LOG2E = 1.4426950408889634f;
  if (r.nan_row) return __int_as_float(0x7fffffff);
  const i64 q = w.b * p.q_strides[0] + row * p.q_strides[1] + w.n * p.q_strides[2];
  const i64 k = w.b * p.k_strides[0] + key * p.k_strides[1] + w.kv_head * p.k_strides[2];
  float x = warp_dot<ELEM, ELEM>(p.q, q, p.k, k, p.H, lane) * p.scale_log2;
  if constexpr (BIAS != 0) {
    const i64 at = w.b * p.bias_strides[0] + w.n * p.bias_strides[1] + row * p.bias_strides[2] + key * p.bias_strides[3];
    x += LOG2E * load_bias<BIAS>(p.bias, at);
  }
  return fast_exp2(x - r.lse2);
}

// dP = dO_row · v_key for head w.n.
template <int ELEM>
__device__ __forceinline__ float pair_dp(const FlashParams& p, const GradRepairParams& g, const TileWork& w, int row,
                                         int key, int lane) {
  const i64 o = w.b * p.o_strides[0] + row * p.o_strides[1] + w.n * p.o_strides[2];
  const i64 v = w.b * p.v_strides[0] + key * p.v_strides[1] + w.kv_head * p.v_strides[2];
  return warp_dot<ELEM, ELEM>(g.d_o, o, p.v, v, p.Hv, lane);
}

template <int ELEM>
__device__ __forceinline__ void store_row(u16* base, i64 row, int len, const float (&acc)[REPAIR_PER_LANE], int lane) {
#pragma unroll
  for (int c = 0; c < REPAIR_PER_LANE; ++c) {
    const int h = lane + 32 * c;
    if (h < len) store_elem<ELEM>(base, row * len + h, acc[c]);
  }
}

// dQ row r = (b, i, n): scale · Σ_j dS_j · k_j over the keys the row sees.
template <int ELEM, int OELEM, int BIAS, bool MASK>
__device__ __noinline__ void repair_dq_row(const FlashParams& p, const GradRepairParams& g, i64 r, int lane) {
  const int n = static_cast<int>(r % p.N);
  const int i = static_cast<int>((r / p.N) % p.T);
  const int b = static_cast<int>(r / (static_cast<i64>(p.N) * p.T));
  const TileWork w = row_work(p, b, n);
  float acc[REPAIR_PER_LANE] = {};
  if (i < w.t_len) {
    const RowTerms t = row_terms<ELEM, OELEM>(p, g, b, n, i, lane);
    for (int key = 0; t.live && key < w.s_len; ++key) {
      if (!pair_open<MASK>(p, w, i, key)) continue;
      const float P = pair_weight<ELEM, BIAS>(p, w, t, i, key, lane);
      if (P == 0.f) continue;  // weight 0: nothing, whatever dP or K hold
      const float ds = g.scale * (P * (pair_dp<ELEM>(p, g, w, i, key, lane) - t.d));
      const i64 k = w.b * p.k_strides[0] + key * p.k_strides[1] + w.kv_head * p.k_strides[2];
#pragma unroll
      for (int c = 0; c < REPAIR_PER_LANE; ++c) {
        const int h = lane + 32 * c;
        if (h < p.H) acc[c] = fmaf(ds, load_elem<ELEM>(p.k, k + h), acc[c]);
      }
    }
  }
  store_row<ELEM>(g.dq, r, p.H, acc, lane);
}

// dK (DK) or dV row r = (b, j, kh): summed over the group's query heads and the rows that see key j.
template <int ELEM, int OELEM, int BIAS, bool MASK, bool DK>
__device__ __noinline__ void repair_kv_row(const FlashParams& p, const GradRepairParams& g, i64 r, int lane) {
  const int kh = static_cast<int>(r % p.K);
  const int j = static_cast<int>((r / p.K) % p.S);
  const int b = static_cast<int>(r / (static_cast<i64>(p.K) * p.S));
  float acc[REPAIR_PER_LANE] = {};
  for (int gi = 0; gi < p.group; ++gi) {
    const TileWork w = row_work(p, b, kh * p.group + gi);
    if (j >= w.s_len) break;  // a padded key: zero gradients
    for (int i = 0; i < w.t_len; ++i) {
      if (!pair_open<MASK>(p, w, i, j)) continue;
      const RowTerms t = row_terms<ELEM, OELEM>(p, g, b, w.n, i, lane);
      if (!t.live) continue;
      const float P = pair_weight<ELEM, BIAS>(p, w, t, i, j, lane);
      if (P == 0.f) continue;
      const i64 o = w.b * p.o_strides[0] + i * p.o_strides[1] + w.n * p.o_strides[2];
      if constexpr (DK) {
        const float ds = g.scale * (P * (pair_dp<ELEM>(p, g, w, i, j, lane) - t.d));
        const i64 q = w.b * p.q_strides[0] + i * p.q_strides[1] + w.n * p.q_strides[2];
#pragma unroll
        for (int c = 0; c < REPAIR_PER_LANE; ++c) {
          const int h = lane + 32 * c;
          if (h < p.H) acc[c] = fmaf(ds, load_elem<ELEM>(p.q, q + h), acc[c]);
        }
      } else {
#pragma unroll
        for (int c = 0; c < REPAIR_PER_LANE; ++c) {
          const int h = lane + 32 * c;
          if (h < p.Hv) acc[c] = fmaf(P, load_elem<ELEM>(g.d_o, o + h), acc[c]);
        }
      }
    }
  }
  if constexpr (DK) {
    store_row<ELEM>(g.dk, r, p.H, acc, lane);
  } else {
    store_row<ELEM>(g.dv, r, p.Hv, acc, lane);
  }
}

// dBias element e of the bias's own (contiguous) shape: Σ dS over the dimensions it broadcasts on.
template <int ELEM, int OELEM, int BIAS, bool MASK>
__device__ __noinline__ void repair_dbias(const FlashParams& p, const GradRepairParams& g, i64 e, int lane) {
  const int* d = g.dbias_dims;
  const int s = static_cast<int>(e % d[3]);
  const int t = static_cast<int>((e / d[3]) % d[2]);
  const int nb = static_cast<int>((e / (static_cast<i64>(d[3]) * d[2])) % d[1]);
  const int bb = static_cast<int>(e / (static_cast<i64>(d[3]) * d[2] * d[1]));
  // One index where the bias has the dimension, all of them where it broadcasts.
  const int b0 = d[0] == 1 ? 0 : bb, b1 = d[0] == 1 ? p.B : bb + 1;
  const int n0 = d[1] == 1 ? 0 : nb, n1 = d[1] == 1 ? p.N : nb + 1;
  const int i0 = d[2] == 1 ? 0 : t, i1 = d[2] == 1 ? p.T : t + 1;
  const int j0 = d[3] == 1 ? 0 : s, j1 = d[3] == 1 ? p.S : s + 1;
  float sum = 0.f;
  for (int b = b0; b < b1; ++b) {
    for (int n = n0; n < n1; ++n) {
      const TileWork w = row_work(p, b, n);
      for (int i = i0; i < imin(i1, w.t_len); ++i) {
        const RowTerms rt = row_terms<ELEM, OELEM>(p, g, b, n, i, lane);
        if (!rt.live) continue;
        for (int j = j0; j < j1; ++j) {
          if (!pair_open<MASK>(p, w, i, j)) continue;
          const float P = pair_weight<ELEM, BIAS>(p, w, rt, i, j, lane);
          if (P == 0.f) continue;
          sum += P * (pair_dp<ELEM>(p, g, w, i, j, lane) - rt.d);
        }
      }
    }
  }
  if (lane == 0) store_elem<ELEM>(static_cast<u16*>(g.dbias), e, sum);
}

// Which gradient a scan covers.
enum Grad { GRAD_DQ = 0, GRAD_DK = 1, GRAD_DV = 2, GRAD_DBIAS = 3 };

template <int ELEM, int OELEM, int BIAS, bool MASK>
__device__ __forceinline__ void repair_row(const FlashParams& p, const GradRepairParams& g, int which, i64 row,
                                           int lane) {
  if (which == GRAD_DQ) repair_dq_row<ELEM, OELEM, BIAS, MASK>(p, g, row, lane);
  else if (which == GRAD_DK) repair_kv_row<ELEM, OELEM, BIAS, MASK, true>(p, g, row, lane);
  else if (which == GRAD_DV) repair_kv_row<ELEM, OELEM, BIAS, MASK, false>(p, g, row, lane);
  else repair_dbias<ELEM, OELEM, BIAS, MASK>(p, g, row, lane);
}

// One gradient tensor (contiguous, `count` elements in rows of `len`): each lane tests 16 bytes at a
// time; the warp redoes, together, the row of each element found NaN or ±inf. The loop bounds are
// the same for every lane of a warp, so the shuffles inside the repair see the whole warp. Rows come
// in increasing order within a warp, so `last` keeps a row from being redone for each of its 16-byte
// pieces. Two warps may redo one row that straddles their ranges: both write the same numbers, as
// the repair reads only inputs.
template <int ELEM, int OELEM, int BIAS, bool MASK>
__device__ __forceinline__ void scan(const FlashParams& p, const GradRepairParams& g, int which, const u16* base,
                                     i64 count, int len, i64 warp, i64 warps, int lane) {
  constexpr int LANES = ELEM == 2 ? 4 : 8;  // elements per 16 bytes
  const i64 chunks = count / LANES;
  const u128* pieces = reinterpret_cast<const u128*>(base);
  i64 last = -1;
  for (i64 first = warp * 32 * REPAIR_UNROLL; first < chunks; first += warps * 32 * REPAIR_UNROLL) {
    u128 v[REPAIR_UNROLL];
#pragma unroll
    for (int u = 0; u < REPAIR_UNROLL; ++u) {
      const i64 c = first + u * 32 + lane;
      v[u] = c < chunks ? pieces[c] : u128{0, 0, 0, 0};
    }
#pragma unroll
    for (int u = 0; u < REPAIR_UNROLL; ++u) {
      u32 found = __ballot_sync(FULL_WARP, any_non_finite<ELEM>(v[u]));  // past the end: zeros, finite
      while (found != 0) {
        const i64 c = first + u * 32 + lowest_bit(found);
        found &= found - 1;
        for (int e = 0; e < LANES; ++e) {
          const i64 at = c * LANES + e;
          const i64 row = at / len;
          if (row != last && !finite(load_elem<ELEM>(base, at))) {
            repair_row<ELEM, OELEM, BIAS, MASK>(p, g, which, row, lane);
            last = row;
          }
        }
      }
    }
  }
  // The elements after the last whole 16 bytes, one per warp.
  for (i64 at = chunks * LANES + warp; at < count; at += warps) {
    if (!finite(load_elem<ELEM>(base, at))) repair_row<ELEM, OELEM, BIAS, MASK>(p, g, which, at / len, lane);
  }
}

template <int ELEM, int OELEM, int BIAS, bool MASK>
__device__ __forceinline__ void grad_nan_repair(const FlashParams& p, const GradRepairParams& g) {
  const int lane = threadIdx.x & 31;
  const i64 warps = static_cast<i64>(gridDim.x) * (blockDim.x >> 5);
  const i64 warp = static_cast<i64>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const i64 q_rows = static_cast<i64>(p.B) * p.T * p.N;
  const i64 kv_rows = static_cast<i64>(p.B) * p.S * p.K;
  scan<ELEM, OELEM, BIAS, MASK>(p, g, GRAD_DQ, g.dq, q_rows * p.H, p.H, warp, warps, lane);
  scan<ELEM, OELEM, BIAS, MASK>(p, g, GRAD_DK, g.dk, kv_rows * p.H, p.H, warp, warps, lane);
  scan<ELEM, OELEM, BIAS, MASK>(p, g, GRAD_DV, g.dv, kv_rows * p.Hv, p.Hv, warp, warps, lane);
  if (g.dbias != nullptr) {
    const i64 count = static_cast<i64>(g.dbias_dims[0]) * g.dbias_dims[1] * g.dbias_dims[2] * g.dbias_dims[3];
    scan<ELEM, OELEM, BIAS, MASK>(p, g, GRAD_DBIAS, static_cast<const u16*>(g.dbias), count, 1, warp, warps, lane);
  }
}

#ifdef REPAIR_ELEM
extern "C" __global__ void __launch_bounds__(256)
    attnlab_grad_nan_repair(const __grid_constant__ FlashParams p, const __grid_constant__ GradRepairParams g) {
  grad_nan_repair<REPAIR_ELEM, REPAIR_O_ELEM, FLASH_BIAS, FLASH_MASK != 0>(p, g);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <int ELEM, int OELEM, int BIAS, bool MASK>
__global__ void __launch_bounds__(256)
    grad_nan_repair_test(const __grid_constant__ FlashParams p, const __grid_constant__ GradRepairParams g) {
  grad_nan_repair<ELEM, OELEM, BIAS, MASK>(p, g);
}
template __global__ void grad_nan_repair_test<0, 0, 0, false>(const __grid_constant__ FlashParams,
                                                               const __grid_constant__ GradRepairParams);
template __global__ void grad_nan_repair_test<0, 2, 2, false>(const __grid_constant__ FlashParams,
                                                              const __grid_constant__ GradRepairParams);
template __global__ void grad_nan_repair_test<1, 1, 3, true>(const __grid_constant__ FlashParams,
                                                             const __grid_constant__ GradRepairParams);
template __global__ void grad_nan_repair_test<2, 2, 1, true>(const __grid_constant__ FlashParams,
                                                             const __grid_constant__ GradRepairParams);
#endif
