// Context-parallel attention's merge (src/backends/cuda/ring/ops.ts): each block call of the ring
// gives a partial output o' and log-sum-exp l' for some rows; the rank's accumulator (o, l), float32,
// becomes (o·e^(l−m) + o'·e^(l'−m)) / (e^(l−m) + e^(l'−m)) and m + log(e^(l−m) + e^(l'−m)), m = max.
// Two launches per merge: the outputs first (every element reads the old l), then l itself.
// RING_ELEM selects the partial output's type: 0 bfloat16, 1 float16, 2 float32.
#include "common/dtypes.cuh"

#ifndef RING_ELEM
#define RING_ELEM 0
#endif
#if RING_ELEM == 0
typedef bf16_t ring_elem;
#elif RING_ELEM == 1
typedef f16_t ring_elem;
#else
typedef float ring_elem;
#endif

struct RingMergeParams {
  float *acc_out;        // (B, T, N, Hv)
  float *acc_lse;        // (B, T, N)
  const ring_elem *part_out;  // (nb, rows, N, Hv)
  const float *part_lse;      // (nb, rows, N)
  long long part_rows_total;  // nb · rows · N
  int b0;
  int rows;
  int T;
  int N;
  int Hv;
  int row_start;
};

// Index of the accumulator row (b, t, n) that partial row r (of nb·rows·N) lands on.
__device__ __forceinline__ long long acc_row(const RingMergeParams &p, long long r) {
  const long long n = r % p.N;
  const long long i = (r / p.N) % p.rows;
  const long long b = r / ((long long)p.N * p.rows);
  return ((p.b0 + b) * p.T + p.row_start + i) * p.N + n;
}

extern "C" __global__ void attnlab_ring_merge_out(RingMergeParams p) {
  const long long total = p.part_rows_total * p.Hv;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / p.Hv;
    const float lp = p.part_lse[r];
    if (lp == negative_infinity()) continue;  // this block's row saw no key: it adds nothing
    const long long row = acc_row(p, r);
    const float la = p.acc_lse[row];
    float *o = p.acc_out + row * p.Hv + (e % p.Hv);
    if (lp != lp || la != la) {
      *o = __int_as_float(0x7fc00000);
      continue;
    }
    const float m = fmaxf(la, lp);
    const float a = expf(la - m);
    const float b = expf(lp - m);
    // An empty accumulator (l = −inf) holds zeros and a = 0: 0·0 stays 0.
    *o = (*o * a + to_float(p.part_out[e]) * b) / (a + b);
  }
}

extern "C" __global__ void attnlab_ring_merge_lse(RingMergeParams p) {
  for (long long r = blockIdx.x * (long long)blockDim.x + threadIdx.x; r < p.part_rows_total;
       r += (long long)gridDim.x * blockDim.x) {
    const float lp = p.part_lse[r];
    if (lp == negative_infinity()) continue;
    const long long row = acc_row(p, r);
    const float la = p.acc_lse[row];
    if (lp != lp || la != la) {
      p.acc_lse[row] = __int_as_float(0x7fc00000);
      continue;
    }
    const float m = fmaxf(la, lp);
    p.acc_lse[row] = m + logf(expf(la - m) + expf(lp - m));
  }
}

// The float32 accumulator as the output's type.
extern "C" __global__ void attnlab_ring_finish(const float *acc, ring_elem *out, long long count) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    out[e] = from_float<ring_elem>(acc[e]);
  }
}
