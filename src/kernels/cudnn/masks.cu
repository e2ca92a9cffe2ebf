// The two device passes around cuDNN's fused attention that let it take what its graph cannot
// express (src/backends/cuda/cudnn/masks.ts launches them, on attnlab's stream, with no host wait):
//
// 1. attnlab_cudnn_bias_from_mask, before cuDNN: a boolean mask and/or a bias broadcast over T or S
//    become one additive bias of shape (D0, D1, T, S) in the inputs' 16-bit dtype: the bias value
//    (or 0) where the mask keeps a pair, `fill` where it does not. Bias and output are moved as raw
//    16-bit words, so the kept values are bit-exact and one kernel serves float16 and bfloat16.
//    `fill` is finite (−2^100 in bfloat16, −65504 in float16), not −inf: a key tile whose entries
//    are all masked then gives the running max a finite value, which the first visible key rescales
//    away exactly (exp(−2^100 − m) is 0 in float32), where −inf − (−inf) would be NaN; and it stays
//    finite when an engine multiplies logits by log2(e) (JAX's −0.7·max of bfloat16 would not).
//
// 2. attnlab_cudnn_empty_rows, after cuDNN: the rule for a query row that sees no key (outside
//    its sequence length, its causal/window range, or masked everywhere in it) is zeros in O and
//    −inf in the log-sum-exp. cuDNN writes some finite average there (a masked row), NaN (S_b = 0)
//    or zeros; this pass finds those rows and writes the rule's values. One warp per (b, t, n) row;
//    a visible row costs a few loads (the scan stops at the first kept key).

typedef long long i64;

#define THREADS 256
#define WARPS (THREADS / 32)

// One block per row (d0, d1, t) of the output bias; threads stride over s. Strides in elements,
// 0 on broadcast dimensions; a null mask keeps everything, a null bias adds 0. With `fold_right`,
// the bottom-right bound j ≤ t + S_b − T_b + right is applied here too (cuDNN's graph takes no bias
// beside it); d0 is then the batch whenever sequence lengths are given.
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_cudnn_bias_from_mask(
    unsigned short *out, i64 D1, i64 T, i64 S, const unsigned char *mask, i64 m0, i64 m1, i64 m2,
    i64 m3, const unsigned short *bias, i64 b0, i64 b1, i64 b2, i64 b3, unsigned fill,
    int fold_right, i64 right, const int *seq_q, const int *seq_kv) {
  const i64 row = blockIdx.x;
  const i64 t = row % T;
  const i64 d1 = (row / T) % D1;
  const i64 d0 = row / (T * D1);
  unsigned short *dst = out + row * S;
  const unsigned char *mrow = mask ? mask + d0 * m0 + d1 * m1 + t * m2 : nullptr;
  const unsigned short *brow = bias ? bias + d0 * b0 + d1 * b1 + t * b2 : nullptr;
  i64 last = S - 1;  // the last key this row keeps
  if (fold_right) {
    const i64 Tb = seq_q ? seq_q[d0] : T;
    const i64 Sb = seq_kv ? seq_kv[d0] : S;
    last = t + Sb - Tb + right;
  }
  for (i64 s = threadIdx.x; s < S; s += THREADS) {
    const bool keep = s <= last && (!mrow || mrow[s * m3] != 0);
    dst[s] = keep ? (brow ? brow[s * b3] : (unsigned short)0) : (unsigned short)fill;
  }
}

struct EmptyRowParams {
  unsigned short *o;  // (B, T, N, Hv), contiguous
  float *lse;         // null when no log-sum-exp is returned
  i64 lse_b, lse_t, lse_n;
  const int *seq_q;   // null: every row of every batch is valid
  const int *seq_kv;  // null: every key of every batch is valid
  const unsigned char *mask;  // null: no boolean mask
  i64 m0, m1, m2, m3;
  i64 B, T, S, N, Hv;
  i64 right, left;    // inclusive bounds j ≤ i + d + right, j ≥ i + d − left
  int has_right, has_left, bottom_right;
};

extern "C" __global__ void __launch_bounds__(THREADS) attnlab_cudnn_empty_rows(EmptyRowParams p) {
  const int lane = threadIdx.x & 31;
  const i64 row = (i64)blockIdx.x * WARPS + (threadIdx.x >> 5);  // (b·T + t)·N + n
  if (row >= p.B * p.T * p.N) return;
  const i64 n = row % p.N;
  const i64 t = (row / p.N) % p.T;
  const i64 b = row / (p.N * p.T);
  const i64 Tb = p.seq_q ? p.seq_q[b] : p.T;
  const i64 Sb = p.seq_kv ? p.seq_kv[b] : p.S;
  const i64 d = p.bottom_right ? Sb - Tb : 0;
  i64 lo = p.has_left ? t + d - p.left : 0;
  i64 hi = p.has_right ? t + d + p.right : Sb - 1;
  lo = lo < 0 ? 0 : lo;
  hi = hi > Sb - 1 ? Sb - 1 : hi;
  bool sees = t < Tb && lo <= hi;
  if (sees && p.mask) {
    const unsigned char *m = p.mask + b * p.m0 + n * p.m1 + t * p.m2;
    bool any = false;
    for (i64 s0 = lo; s0 <= hi && !any; s0 += 32) {
      const i64 s = s0 + lane;
      any = __any_sync(0xffffffffu, s <= hi && m[s * p.m3] != 0);
    }
    sees = any;
  }
  if (sees) return;
  unsigned short *o = p.o + row * p.Hv;
  for (i64 h = lane; h < p.Hv; h += 32) o[h] = 0;
  if (lane == 0 && p.lse) p.lse[b * p.lse_b + t * p.lse_t + n * p.lse_n] = -__int_as_float(0x7f800000);
}
