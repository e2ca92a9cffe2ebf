// The masked softmax of the naive attention path: one block per score row (b, n, i), over the
// float32 scores that cuBLASLt wrote (already multiplied by `scale`), writing the probabilities in
// the dtype of the second matmul and, when asked, the row's log-sum-exp.
//
// Visibility is exactly the CPU reference's (src/backends/cpu/visibility.ts): rows at or past the
// batch's query length and keys at or past its key length are out; the diagonal sits at
// i + (bottom_right ? Sb − Tb : 0); causal keeps keys up to it, a window [left, right] around it; a
// boolean mask removes single pairs and the bias is added (a −inf bias removes them too). A row that
// sees nothing gets probabilities 0 (so its output is 0) and log-sum-exp −inf.
//
// CACHE_ROW keeps the row's logits in shared memory between the three passes (max, sum, write), so
// the scores are read from global memory once: S·4 bytes per block, 16 KiB at S = 4096. Rows too long
// for shared memory take CACHE_ROW = false and read the scores three times instead.
//
// Kernels are templates over the probability type PT (float, f16_t, bf16_t), the bias type BT and
// CACHE_ROW; the host loads them by name expression, e.g. attnlab_softmax<bf16_t, float, true>.
#include "common/dtypes.cuh"

// Field order and types must match SOFTMAX_FIELDS in src/backends/cuda/naive/softmax.ts.
struct SoftmaxParams {
  const float* scores;             // (B,N,T,S), scaled
  void* probs;                     // (B,N,T,S) of PT; may alias scores when PT is float
  float* lse;                      // (B,T,N) or null
  const void* bias;                // of BT, element (b,n,i,j) at b·bias_s0 + n·bias_s1 + i·bias_s2 + j·bias_s3
  const unsigned char* mask;       // bool, same indexing with mask_s*; nonzero keeps
  const int* q_lengths;            // (B) or null
  const int* kv_lengths;           // (B) or null
  long long bias_s0, bias_s1, bias_s2, bias_s3;
  long long mask_s0, mask_s1, mask_s2, mask_s3;
  int B, N, T, S;
  int window_left, window_right;   // inclusive bounds around the diagonal, when has_window
  int causal, bottom_right, has_window;
};

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Reduces across the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
template <bool MAX>
__device__ float block_reduce(float v) {
  __shared__ float partial[32];
  __shared__ float result;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = MAX ? warp_max(v) : warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    float w = lane < warps ? partial[lane] : (MAX ? negative_infinity() : 0.f);
    w = MAX ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

// Keys [lo, hi) that lengths, causality and the window leave to row i of batch b.
__device__ __forceinline__ void key_range(const SoftmaxParams& p, int b, int i, int& lo, int& hi) {
  const int q_len = p.q_lengths ? p.q_lengths[b] : p.T;
  const int kv_len = p.kv_lengths ? p.kv_lengths[b] : p.S;
  lo = 0;
  hi = 0;
  if (i >= q_len) return;
  const long long diagonal = (long long)i + (p.bottom_right ? kv_len - q_len : 0);
  long long l = 0, h = kv_len;
  if (p.causal) h = h < diagonal + 1 ? h : diagonal + 1;
  if (p.has_window) {
    const long long wl = diagonal - p.window_left, wh = diagonal + p.window_right + 1;
    l = l > wl ? l : wl;
    h = h < wh ? h : wh;
  }
  lo = (int)(l > 0 ? l : 0);
  hi = (int)(h > 0 ? h : 0);
}

template <typename BT>
__device__ __forceinline__ float logit(const SoftmaxParams& p, const float* row, int b, int n, int i, int j, int lo,
                                       int hi) {
  if (j < lo || j >= hi) return negative_infinity();
  if (p.mask && !p.mask[b * p.mask_s0 + n * p.mask_s1 + i * p.mask_s2 + j * p.mask_s3]) return negative_infinity();
  float x = row[j];
  if (p.bias) x += to_float(static_cast<const BT*>(p.bias)[b * p.bias_s0 + n * p.bias_s1 + i * p.bias_s2 + j * p.bias_s3]);
  return x;
}

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
    m = fmaxf(m, x);
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
// Representative variants for the nvcc compile test (test/cpu/kernels-compile.test.ts).
template __global__ void attnlab_softmax<float, float, true>(const SoftmaxParams);
template __global__ void attnlab_softmax<float, float, false>(const SoftmaxParams);
template __global__ void attnlab_softmax<f16_t, f16_t, true>(const SoftmaxParams);
template __global__ void attnlab_softmax<bf16_t, bf16_t, true>(const SoftmaxParams);
template __global__ void attnlab_softmax<bf16_t, float, false>(const SoftmaxParams);
#endif
