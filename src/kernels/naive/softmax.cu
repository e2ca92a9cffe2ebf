// The masked softmax of the naive attention path: one block per score row (b, n, i), over the
// float32 scores that cuBLASLt wrote (already multiplied by `scale`), writing the probabilities in
// the dtype of the second matmul and, when asked, the row's log-sum-exp.
//
// Which keys a row sees, and the SoftmaxParams struct: softmax_rows.cuh (shared with the backward).
// A row that sees nothing gets probabilities 0 (so its output is 0) and log-sum-exp −inf. The max
// propagates NaN (max_nan): a NaN or +inf logit gives the row NaN probabilities and a NaN
// log-sum-exp, as IEEE arithmetic does. A masked key's NaN value still meets its probability 0 in
// cuBLASLt's P·V; the NaN repair that follows (ops/nan_repair.cu) takes it out.
//
// CACHE_ROW keeps the row's logits in shared memory between the three passes (max, sum, write), so
// the scores are read from global memory once: S·4 bytes per block, 16 KiB at S = 4096. Rows too long
// for shared memory take CACHE_ROW = false and read the scores three times instead.
//
// Kernels are templates over the probability type PT (float, f16_t, bf16_t), the bias type BT and
// CACHE_ROW; the host loads them by name expression, e.g. attnlab_softmax<bf16_t, float, true>.
#include "naive/softmax_rows.cuh"

template <typename PT, typename BT, bool CACHE_ROW>
__global__ void attnlab_softmax(const SoftmaxParams p) {
  extern __shared__ float cached[];
  const int i = blockIdx.x, n = blockIdx.y, b = blockIdx.z;
  const long long row_index = ((long long)b * p.N + n) * p.T + i;
  const float* row = p.scores + row_index * p.S;
  PT* out = static_cast<PT*>(p.probs) + row_index * p.S;
  int lo, hi;
  key_range(p, b, i, lo, hi);

  float m = negative_infinity();
  for (int j = threadIdx.x; j < p.S; j += blockDim.x) {
    const float x = logit<BT>(p, row, b, n, i, j, lo, hi);
    if (CACHE_ROW) cached[j] = x;
    m = max_nan(m, x);
  }
  m = block_reduce<true>(m);
  const bool empty = m == negative_infinity();

  float sum = 0.f;
  if (!empty) {
    for (int j = threadIdx.x; j < p.S; j += blockDim.x) {
      const float x = CACHE_ROW ? cached[j] : logit<BT>(p, row, b, n, i, j, lo, hi);
      sum += expf(x - m);  // expf(−inf) = 0 for the masked keys
    }
  }
  sum = block_reduce<false>(sum);

  const float inverse = empty ? 0.f : 1.f / sum;
  // In place (PT = float, probs == scores) each element is read and written by the same thread.
  for (int j = threadIdx.x; j < p.S; j += blockDim.x) {
    const float x = CACHE_ROW ? cached[j] : logit<BT>(p, row, b, n, i, j, lo, hi);
    out[j] = from_float<PT>(empty ? 0.f : expf(x - m) * inverse);
  }
  if (p.lse && threadIdx.x == 0) {
    p.lse[((long long)b * p.T + i) * p.N + n] = empty ? negative_infinity() : m + logf(sum);
  }
}

#ifdef ATTNLAB_NVCC_TEST
// Representative variants for the nvcc compile test (test/kernels/kernels-compile.test.ts).
template __global__ void attnlab_softmax<float, float, true>(const SoftmaxParams);
template __global__ void attnlab_softmax<float, float, false>(const SoftmaxParams);
template __global__ void attnlab_softmax<f16_t, f16_t, true>(const SoftmaxParams);
template __global__ void attnlab_softmax<bf16_t, bf16_t, true>(const SoftmaxParams);
template __global__ void attnlab_softmax<bf16_t, float, false>(const SoftmaxParams);
#endif
