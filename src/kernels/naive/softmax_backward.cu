// The naive path's backward kernels, between cuBLASLt's GEMMs (src/backends/cuda/naive/backward.ts):
//
// attnlab_softmax_backward — one block per score row (b, n, i). With the recomputed float32 scores
// (scale·Q·Kᵀ) and dP = dO·Vᵀ from cuBLASLt, the row's softmax is recomputed from the scores (max,
// then the sum), not taken from the forward's float32 log-sum-exp: at lse ≈ 5 its rounding alone
// moves every P of the row by up to 2.4e-7 relative, the same way, which the GEMMs' sums over T rows
// do not average out. In float64 for float32 inputs (float32 for 16-bit ones, RowAcc), per pair,
// with e_j = exp(logit_j − max):
//     P  = e_j / Σ e                (0 where the pair is not visible, or the row sees nothing)
//     D  = Σ e_j·dP_j / Σ e         (= rowsum(dO∘O) of the exact output, not of the rounded one)
//     dS = P · (dP − D)             (0 where P = 0, so a NaN dP of a hidden key does not leak in)
//   D sums over the pairs the forward's weighted sum takes: a −inf logit is masked, an underflowed
//   weight still counts (0·NaN is NaN), so D is NaN exactly when the forward output row holds a NaN.
//   A NaN row (a NaN or +inf logit: the forward output is NaN) has P = dS = NaN at every pair that
//   lengths, causality, the window and the boolean mask leave it, −inf logits included; the rest 0.
//   Writes P (for dV = Pᵀ·dO) and dS (for dQ and dK) in the GEMMs' operand type PT, and dS in float32
//   over dP (in place, for the bias gradient). For PT = float, P overwrites the scores in place.
// attnlab_zero_non_finite — a copy of Q, K or dO with its non-finite elements set to 0, for the
//   weight-gradient GEMMs: a non-finite element already reaches its own row's dS (NaN or zero there),
//   and inside a GEMM it would also meet the zero weights of pairs its row does not see (0·NaN).
// attnlab_non_finite_dv — puts each non-finite dO element back into dV (per query head, float32) at
//   the keys of nonzero weight, which the zeroed copy left out: P·dO exactly, as the reference adds it.
// attnlab_bias_grad — dBias summed over the dimensions the bias was broadcast on, one thread per
//   bias element, float32 accumulation.
// attnlab_group_sum — dK and dV per query head (float32, (B,S,N,D)) summed over each KV head's G
//   query heads and rounded once to the output type: (B,S,K,D).
#include "naive/softmax_rows.cuh"

// Field order and types must match softmaxBackwardFields in src/backends/cuda/naive/softmax-backward.ts.
struct SoftmaxBackwardParams {
  float* d_scores;     // (B,N,T,S): dP in, dS out
  void* d_scores_low;  // (B,N,T,S) of PT, or null when PT is float (d_scores is the GEMM operand)
};

// Not isfinite(): the same bit test in every kernel file, NVRTC or nvcc.
__device__ __forceinline__ bool finite_float(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// block_reduce's float64 sum (blockDim.x a multiple of 32); every thread gets the result.
__device__ double block_sum_double(double v) {
  __shared__ double partial[32];
  __shared__ double result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum_double(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0;
    w = warp_sum_double(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

// The row sums' type: float64 for float32 inputs (their gradients must be within 2× of a correctly
// rounded float32 computation), float32 for 16-bit ones (16 more bits than the inputs, at float speed:
// float64 exp at ~1e9 scores would add ~2.5 ms to a ~10 ms naive backward on an H100).
template <typename IT>
struct RowAcc {
  using type = float;
};
template <>
struct RowAcc<float> {
  using type = double;
};
__device__ __forceinline__ float acc_exp(float x) { return expf(x); }
__device__ __forceinline__ double acc_exp(double x) { return exp(x); }
__device__ __forceinline__ float block_sum(float v) { return block_reduce<false>(v); }
__device__ __forceinline__ double block_sum(double v) { return block_sum_double(v); }
__device__ __forceinline__ float quiet_nan(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double quiet_nan(double) { return __longlong_as_double(0x7ff8000000000000LL); }

// Whether lengths, causality, the window (the range [lo, hi)) and the boolean mask leave pair (i, j).
__device__ __forceinline__ bool pair_kept(const SoftmaxParams& p, int b, int n, int i, int j, int lo, int hi) {
  if (j < lo || j >= hi) return false;
  return !p.mask || p.mask[b * p.mask_s0 + n * p.mask_s1 + i * p.mask_s2 + j * p.mask_s3];
}

template <typename IT, typename PT, typename BT>
__global__ void attnlab_softmax_backward(const SoftmaxParams p, const SoftmaxBackwardParams g) {
  const int i = blockIdx.x, n = blockIdx.y, b = blockIdx.z;
  const long long row_index = ((long long)b * p.N + n) * p.T + i;
  const float* row = p.scores + row_index * p.S;
  PT* probs = static_cast<PT*>(p.probs) + row_index * p.S;
  float* d_scores = g.d_scores + row_index * p.S;
  PT* d_low = g.d_scores_low ? static_cast<PT*>(g.d_scores_low) + row_index * p.S : nullptr;
  int lo, hi;
  key_range(p, b, i, lo, hi);

  float m = negative_infinity();
  for (int j = threadIdx.x; j < p.S; j += blockDim.x) m = max_nan(m, logit<BT>(p, row, b, n, i, j, lo, hi));
  m = block_reduce<true>(m);
  const bool empty = m == negative_infinity();
  const bool nan_row = !(m < __int_as_float(0x7f800000));  // NaN or +inf
  using Acc = typename RowAcc<IT>::type;
  Acc sum = 0, weighted = 0;
  if (!empty && !nan_row) {
    for (int j = threadIdx.x; j < p.S; j += blockDim.x) {
      const float x = logit<BT>(p, row, b, n, i, j, lo, hi);
      if (x == negative_infinity()) continue;
      const Acc e = acc_exp((Acc)x - (Acc)m);
      sum += e;
      weighted += e * (Acc)d_scores[j];
    }
  }
  sum = block_sum(sum);
  const Acc d = block_sum(weighted) / sum;

  // Each element is read and written by the same thread, so the in-place writes are safe.
  for (int j = threadIdx.x; j < p.S; j += blockDim.x) {
    const float x = logit<BT>(p, row, b, n, i, j, lo, hi);
    Acc prob = 0;
    if (nan_row) prob = pair_kept(p, b, n, i, j, lo, hi) ? quiet_nan(Acc(0)) : Acc(0);
    else if (!empty && x != negative_infinity()) prob = acc_exp((Acc)x - (Acc)m) / sum;
    const float ds = prob == 0 ? 0.f : (float)(prob * ((Acc)d_scores[j] - d));
    probs[j] = from_float<PT>((float)prob);
    d_scores[j] = ds;
    if (d_low) d_low[j] = from_float<PT>(ds);
  }
}

// Field order and types must match nonFiniteFields in src/backends/cuda/naive/softmax-backward.ts.
struct NonFiniteParams {
  const void* in;   // of IT
  void* out;        // of IT, the same count
  long long count;
};

template <typename IT>
__global__ void attnlab_zero_non_finite(const NonFiniteParams p) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.count) return;
  const IT x = static_cast<const IT*>(p.in)[e];
  static_cast<IT*>(p.out)[e] = finite_float(to_float(x)) ? x : from_float<IT>(0.f);
}

// Field order and types must match nonFiniteDvFields in src/backends/cuda/naive/softmax-backward.ts.
struct NonFiniteDvParams {
  const void* probs;  // P (B,N,T,S) of PT
  const void* d_out;  // dO (B,T,N,Hv) of IT
  float* dv_heads;    // dV per query head (B,S,N,Hv)
  int N, T, S, Hv;
};

// One block per query row (b, n, i), one thread per column h; only a non-finite dO element loops
// over the keys. The additions are atomic across rows, and their result is order-free: what they add
// is non-finite (±inf or NaN), which absorbs any finite sum, and inf + −inf is NaN in any order.
template <typename IT, typename PT>
__global__ void attnlab_non_finite_dv(const NonFiniteDvParams p) {
  const int i = blockIdx.x, n = blockIdx.y, b = blockIdx.z;
  const long long row_index = ((long long)b * p.N + n) * p.T + i;
  const PT* probs = static_cast<const PT*>(p.probs) + row_index * p.S;
  const IT* d_o = static_cast<const IT*>(p.d_out) + (((long long)b * p.T + i) * p.N + n) * p.Hv;
  for (int h = threadIdx.x; h < p.Hv; h += blockDim.x) {
    const float x = to_float(d_o[h]);
    if (finite_float(x)) continue;
    for (int j = 0; j < p.S; j++) {
      const float prob = to_float(probs[j]);
      if (prob != 0.f) atomicAdd(p.dv_heads + (((long long)b * p.S + j) * p.N + n) * p.Hv + h, prob * x);
    }
  }
}

// Field order and types must match biasGradFields in src/backends/cuda/naive/softmax-backward.ts.
struct BiasGradParams {
  const float* d_scores;  // dS (B,N,T,S)
  void* d_bias;           // of BT, the bias's own dims (each 1 or the full size), contiguous
  int B, N, T, S;
  int bias_B, bias_N, bias_T, bias_S;
};

template <typename BT>
__global__ void attnlab_bias_grad(const BiasGradParams p) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long total = (long long)p.bias_B * p.bias_N * p.bias_T * p.bias_S;
  if (e >= total) return;
  const int s0 = (int)(e % p.bias_S);
  const int t0 = (int)((e / p.bias_S) % p.bias_T);
  const int n0 = (int)((e / ((long long)p.bias_S * p.bias_T)) % p.bias_N);
  const int b0 = (int)(e / ((long long)p.bias_S * p.bias_T * p.bias_N));
  // A dimension of size 1 in the bias was broadcast: sum over all of it; else take the one index.
  const int b_lo = p.bias_B == 1 ? 0 : b0, b_hi = p.bias_B == 1 ? p.B : b0 + 1;
  const int n_lo = p.bias_N == 1 ? 0 : n0, n_hi = p.bias_N == 1 ? p.N : n0 + 1;
  const int t_lo = p.bias_T == 1 ? 0 : t0, t_hi = p.bias_T == 1 ? p.T : t0 + 1;
  const int s_lo = p.bias_S == 1 ? 0 : s0, s_hi = p.bias_S == 1 ? p.S : s0 + 1;
  float acc = 0.f;
  for (int b = b_lo; b < b_hi; b++)
    for (int n = n_lo; n < n_hi; n++)
      for (int t = t_lo; t < t_hi; t++) {
        const float* row = p.d_scores + (((long long)b * p.N + n) * p.T + t) * p.S;
        for (int s = s_lo; s < s_hi; s++) acc += row[s];
      }
  static_cast<BT*>(p.d_bias)[e] = from_float<BT>(acc);
}

// Field order and types must match groupSumFields in src/backends/cuda/naive/softmax-backward.ts.
struct GroupSumParams {
  const float* in;  // (rows, K·G, D): per query head
  void* out;        // (rows, K, D) of OT
  long long rows;   // B·S
  int K, G, D;
};

template <typename OT>
__global__ void attnlab_group_sum(const GroupSumParams p) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.rows * p.K * p.D) return;
  const int d = (int)(e % p.D);
  const int kh = (int)((e / p.D) % p.K);
  const long long r = e / ((long long)p.D * p.K);
  const float* in = p.in + (r * p.K * p.G + (long long)kh * p.G) * p.D + d;
  float acc = 0.f;
  for (int g = 0; g < p.G; g++) acc += in[(long long)g * p.D];
  static_cast<OT*>(p.out)[e] = from_float<OT>(acc);
}

#ifdef ATTNLAB_NVCC_TEST
// Representative variants for the nvcc compile test (test/kernels/kernels-compile.test.ts).
template __global__ void attnlab_softmax_backward<float, float, float>(const SoftmaxParams, const SoftmaxBackwardParams);
template __global__ void attnlab_softmax_backward<bf16_t, bf16_t, bf16_t>(const SoftmaxParams, const SoftmaxBackwardParams);
template __global__ void attnlab_softmax_backward<f16_t, f16_t, float>(const SoftmaxParams, const SoftmaxBackwardParams);
template __global__ void attnlab_zero_non_finite<float>(const NonFiniteParams);
template __global__ void attnlab_zero_non_finite<bf16_t>(const NonFiniteParams);
template __global__ void attnlab_non_finite_dv<float, float>(const NonFiniteDvParams);
template __global__ void attnlab_non_finite_dv<f16_t, f16_t>(const NonFiniteDvParams);
template __global__ void attnlab_bias_grad<float>(const BiasGradParams);
template __global__ void attnlab_bias_grad<bf16_t>(const BiasGradParams);
template __global__ void attnlab_group_sum<bf16_t>(const GroupSumParams);
template __global__ void attnlab_group_sum<float>(const GroupSumParams);
#endif
