// The naive path's backward kernels, between cuBLASLt's GEMMs (src/backends/cuda/naive/backward.ts):
//
// attnlab_softmax_backward — one block per score row (b, n, i). With the recomputed float32 scores
// (scale·Q·Kᵀ) and dP = dO·Vᵀ from cuBLASLt and the forward's saved log-sum-exp:
//     P  = exp(logit − lse)   (0 where the pair is not visible, or the row sees nothing)
//     D  = dO · O             (the row's Hv values; equals Σ P·dP)
//     dS = P · (dP − D)       (0 where P = 0, so a NaN dP of a hidden key does not leak in)
//   writes P (for dV = Pᵀ·dO) and dS (for dQ and dK) in the GEMMs' operand type PT, and dS in float32
//   over dP (in place, for the bias gradient). For PT = float, P overwrites the scores in place.
// attnlab_bias_grad — dBias summed over the dimensions the bias was broadcast on, one thread per
//   bias element, float32 accumulation.
// attnlab_group_sum — dK and dV per query head (float32, (B,S,N,D)) summed over each KV head's G
//   query heads and rounded once to the output type: (B,S,K,D).
#include "softmax_rows.cuh"

// Field order and types must match softmaxBackwardFields in src/backends/cuda/naive/softmax-backward.ts.
struct SoftmaxBackwardParams {
  const void* out;     // O (B,T,N,Hv) of IT
  const void* d_out;   // dO (B,T,N,Hv) of IT
  float* d_scores;     // (B,N,T,S): dP in, dS out
  void* d_scores_low;  // (B,N,T,S) of PT, or null when PT is float (d_scores is the GEMM operand)
  int Hv;
};

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

  const long long o_off = (((long long)b * p.T + i) * p.N + n) * g.Hv;
  const IT* o = static_cast<const IT*>(g.out) + o_off;
  const IT* d_o = static_cast<const IT*>(g.d_out) + o_off;
  float d = 0.f;
  for (int h = threadIdx.x; h < g.Hv; h += blockDim.x) d += to_float(d_o[h]) * to_float(o[h]);
  d = block_reduce<false>(d);
  const float lse = p.lse[((long long)b * p.T + i) * p.N + n];
  const bool empty = lse == negative_infinity();

  // Each element is read and written by the same thread, so the in-place writes are safe.
  for (int j = threadIdx.x; j < p.S; j += blockDim.x) {
    const float x = logit<BT>(p, row, b, n, i, j, lo, hi);
    const float prob = (empty || x == negative_infinity()) ? 0.f : expf(x - lse);
    const float ds = prob == 0.f ? 0.f : prob * (d_scores[j] - d);
    probs[j] = from_float<PT>(prob);
    d_scores[j] = ds;
    if (d_low) d_low[j] = from_float<PT>(ds);
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
// Representative variants for the nvcc compile test (test/cpu/kernels-compile.test.ts).
template __global__ void attnlab_softmax_backward<float, float, float>(const SoftmaxParams, const SoftmaxBackwardParams);
template __global__ void attnlab_softmax_backward<bf16_t, bf16_t, bf16_t>(const SoftmaxParams, const SoftmaxBackwardParams);
template __global__ void attnlab_softmax_backward<f16_t, f16_t, float>(const SoftmaxParams, const SoftmaxBackwardParams);
template __global__ void attnlab_bias_grad<float>(const BiasGradParams);
template __global__ void attnlab_bias_grad<bf16_t>(const BiasGradParams);
template __global__ void attnlab_group_sum<bf16_t>(const GroupSumParams);
template __global__ void attnlab_group_sum<float>(const GroupSumParams);
#endif
