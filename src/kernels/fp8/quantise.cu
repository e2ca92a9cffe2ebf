// FP8 quantisation around cuDNN's FP8 attention: bf16 Q/K/V → e4m3 with per-tensor scales and amax
// (one launch for all three), the current-scaling scale computation, and e4m3 O → bf16.
//
// Every scale and amax lives in one small device block (the "scalar block"), one float per 16-byte
// slot because cuDNN's graph declares each scalar tensor with BYTE_ALIGNMENT 16. Slots 0–7 are the
// tensors of cuDNN's FP8 graph; 8–13 belong to these kernels. Keeping them on the device lets a
// step run without the host in the loop until the amax values are read back at its end.
//
// Arithmetic matches src/backends/cpu/fp8-quantise.ts bit for bit: x·scale as a float32 product, then one
// round-to-nearest-even to e4m3 with saturation (cvt.rn.satfinite, sm_89+); dequantising is
// decode(x8)·(1/scale) in float32, then one round-to-nearest-even to bf16.
//
// attnlab-min-arch: sm_89

#define SLOT(i) ((i) * 4)
#define DESCALE_Q 0
#define DESCALE_K 1
#define DESCALE_V 2
#define DESCALE_S 3
#define SCALE_S 4
#define SCALE_O 5
#define AMAX_S 6
#define AMAX_O 7
#define SCALE_Q 8   // SCALE_Q + z for z = 0, 1, 2 (Q, K, V)
#define AMAX_Q 11   // AMAX_Q + z
// A step split into batch chunks (src/backends/cuda/fp8/run.ts) has one block per chunk, back to
// back: each chunk's cuDNN graph writes its own amax_s and amax_o. The scales are the same in all.
#define BLOCK_FLOATS SLOT(14)

#define THREADS 256

#include "fp8/fp8_codec.cuh"

// Delayed scaling with its state on the device, as TE keeps its fp8_metas: `state` holds the five
// scales (Q, K, V, S, O at floats 0–4) and, from float STATE_RINGS on, one ring of `len` amax values
// per tensor. A ring holds the same values as TE's rolled history (src/te/recipe.ts) in another
// order, which neither 'max' nor 'most_recent' can tell apart; src/backends/cuda/fp8/state.ts
// converts between the two. Nothing here waits for the host.
#define STATE_RINGS 8
#define FLOAT_MAX 3.402823466e38f

// One thread: the step's scales and descales into each of the `chunks` blocks, with the caps of
// Fp8State.delayedScales (scale_s ≤ fp8_max, scale_o ≤ scale_v), and the amax slots zeroed for this
// step's atomics. The descales are 1/scale rounded once from double, as the host computes them.
extern "C" __global__ void attnlab_fp8_delayed_block(const float* __restrict__ state, float* __restrict__ blocks,
                                                     float fp8_max, int chunks) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const float scale_q = state[0], scale_k = state[1], scale_v = state[2];
  const float scale_s = fminf(state[3], fp8_max), scale_o = fminf(state[4], scale_v);
  for (int c = 0; c < chunks; c++) {
    float* block = blocks + c * BLOCK_FLOATS;
    block[SLOT(SCALE_Q)] = scale_q;
    block[SLOT(SCALE_Q + 1)] = scale_k;
    block[SLOT(SCALE_Q + 2)] = scale_v;
    block[SLOT(SCALE_S)] = scale_s;
    block[SLOT(SCALE_O)] = scale_o;
    block[SLOT(DESCALE_Q)] = (float)(1.0 / (double)scale_q);
    block[SLOT(DESCALE_K)] = (float)(1.0 / (double)scale_k);
    block[SLOT(DESCALE_V)] = (float)(1.0 / (double)scale_v);
    block[SLOT(DESCALE_S)] = (float)(1.0 / (double)scale_s);
    for (int z = 0; z < 3; z++) block[SLOT(AMAX_Q + z)] = 0.0f;
    block[SLOT(AMAX_S)] = 0.0f;
    block[SLOT(AMAX_O)] = 0.0f;
  }
}

// One block per tensor (blockIdx.x: Q, K, V, S, O): this step's amax into ring slot step % len (Q,
// K, V from the first block, where every chunk's quantise recorded them; S and O the largest over the
// chunks' blocks), the amax of the ring ('max') or of this step ('most_recent'), and TE's scale rule
// in double as the host does it: (fp8_max / amax) / 2^margin rounded once to float, the old scale
// kept when amax is zero or not finite or the scale overflows.
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_delayed_update(
    float* __restrict__ state, const float* __restrict__ blocks, int chunks, int len, long long step,
    int most_recent, int margin, float fp8_max) {
  const int t = blockIdx.x;
  const int slot = SLOT(t < 3 ? AMAX_Q + t : (t == 3 ? AMAX_S : AMAX_O));
  float amax = blocks[slot];
  if (t >= 3)
    for (int c = 1; c < chunks; c++) amax = fmaxf(amax, blocks[c * BLOCK_FLOATS + slot]);
  float* ring = state + STATE_RINGS + (long long)t * len;
  if (threadIdx.x == 0) ring[step % len] = amax;
  __syncthreads();
  float m = 0.0f;
  if (most_recent) {
    m = amax;
  } else {
    for (int i = threadIdx.x; i < len; i += THREADS) m = fmaxf(m, ring[i]);
    __shared__ float warp_max[THREADS / 32];
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    m = 0.0f;
    for (int w = 0; w < THREADS / 32; w++) m = fmaxf(m, warp_max[w]);
  }
  if (threadIdx.x == 0 && m > 0.0f && m <= FLOAT_MAX) {
    double power = 1.0;
    for (int i = 0; i < margin; i++) power *= 2.0;
    const float scale = (float)((double)fp8_max / (double)m / power);
    if (scale <= FLOAT_MAX) state[t] = scale;
  }
}

// Each thread keeps UNROLL independent 16-byte loads in flight per step: one load per thread left
// the H200 short of memory parallelism (4.0 of its 4.3 TB/s copy rate for this kernel).
#define UNROLL 2

// blockIdx.y picks the tensor (0 Q, 1 K, 2 V). Records amax in block[AMAX_Q + z]; unless amax_only,
// also writes x·scale as e4m3 with scale = block[SCALE_Q + z]. Sizes are in groups of VEC elements.
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_quantise3(
    const uint4* __restrict__ q, const uint4* __restrict__ k, const uint4* __restrict__ v,
    uint2* __restrict__ q8, uint2* __restrict__ k8, uint2* __restrict__ v8,
    long long q_groups, long long kv_groups, float* __restrict__ block, int amax_only) {
  const int z = blockIdx.y;
  const uint4* in = z == 0 ? q : (z == 1 ? k : v);
  uint2* out = z == 0 ? q8 : (z == 1 ? k8 : v8);
  const long long groups = z == 0 ? q_groups : kv_groups;
  const float scale = block[SLOT(SCALE_Q + z)];
  const long long stride = (long long)gridDim.x * THREADS;
  float amax = 0.0f;
  for (long long g = (long long)blockIdx.x * THREADS + threadIdx.x; g < groups; g += UNROLL * stride) {
    uint4 raw[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) raw[u] = g + u * stride < groups ? in[g + u * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      const uint2 packed = quantise8(raw[u], scale, amax, false);
      if (!amax_only && g + u * stride < groups) out[g + u * stride] = packed;
    }
  }
  block_amax(amax, block + SLOT(AMAX_Q + z));
}

// Current scaling, one thread: scales from this step's amax of Q, K, V (fp8_max / amax, 1 when amax
// is 0 or not finite), scale_s = fp8_max because P ≤ 1, scale_o = scale_v because |O| ≤ max|V|;
// written into each of the `chunks` blocks (the amax was recorded in the first).
extern "C" __global__ void attnlab_fp8_current_scales(float* blocks, float fp8_max, int chunks) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float scales[3];
  for (int z = 0; z < 3; z++) {
    const float amax = blocks[SLOT(AMAX_Q + z)];
    // amax ≤ FLT_MAX is false for NaN and infinity alike (no math header needed under NVRTC).
    scales[z] = (amax > 0.0f && amax <= 3.402823466e38f) ? fp8_max / amax : 1.0f;
  }
  for (int c = 0; c < chunks; c++) {
    float* block = blocks + c * BLOCK_FLOATS;
    for (int z = 0; z < 3; z++) {
      block[SLOT(SCALE_Q + z)] = scales[z];
      block[SLOT(DESCALE_Q + z)] = 1.0f / scales[z];
    }
    block[SLOT(SCALE_S)] = fp8_max;
    block[SLOT(DESCALE_S)] = 1.0f / fp8_max;
    block[SLOT(SCALE_O)] = scales[2];
  }
}

// O8 (e4m3) → bf16: decode(x8)·(1/scale_o), the float32 product rounded once to bf16. Four 8-byte
// loads in flight per thread and step (one left the kernel at 2.8 TB/s on the H200).
#define DEQUANTISE_UNROLL 4
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_dequantise(
    const uint2* __restrict__ in, uint4* __restrict__ out, long long groups, const float* __restrict__ block) {
  const float inverse = 1.0f / block[SLOT(SCALE_O)];
  const long long stride = (long long)gridDim.x * THREADS;
  for (long long g = (long long)blockIdx.x * THREADS + threadIdx.x; g < groups; g += DEQUANTISE_UNROLL * stride) {
    uint2 raw[DEQUANTISE_UNROLL];
#pragma unroll
    for (int u = 0; u < DEQUANTISE_UNROLL; u++) raw[u] = g + u * stride < groups ? in[g + u * stride] : make_uint2(0, 0);
#pragma unroll
    for (int u = 0; u < DEQUANTISE_UNROLL; u++)
      if (g + u * stride < groups) out[g + u * stride] = dequantise8(raw[u], inverse, false);
  }
}

// After the NaN repair (src/backends/cuda/ops/nan-repair.ts, enqueued on the bf16 O of a step whose
// problem hides keys from some rows) recomputed the elements a masked key's NaN value had made NaN —
// cuDNN's P8·V8 multiplies it by its weight 0 — the FP8 codes follow: an O8 code that is NaN where
// the repaired O is not becomes e4m3(O·scale_o), and O becomes that code dequantised, so O stays
// exactly O8 dequantised everywhere, as dequantise8 computes it. Without NaN codes: one read of O8,
// 16 codes per load and REQUANTISE_UNROLL loads in flight per thread, tested on their bits.
#define REQUANTISE_UNROLL 4

// Nonzero where some byte of `w` is an e4m3fn NaN (S.1111.111): its low 7 bits plus 1 carry into bit 7.
__device__ __forceinline__ unsigned nan_codes(unsigned w) { return ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u; }

__device__ __noinline__ void requantise16(uint4* o8, unsigned short* out, long long g, float scale, float inverse) {
  uint4 raw = o8[g];
  unsigned char* codes = reinterpret_cast<unsigned char*>(&raw);
  bool changed = false;
  for (int e = 0; e < 16; e++) {
    if ((codes[e] & 0x7fu) != 0x7fu) continue;
    const float repaired = bf16_bits_to_float(out[g * 16 + e]);
    if (repaired != repaired) continue;  // a NaN the row sees: it stays
    const unsigned short code = e4m3x2(repaired * scale, 0.0f) & 0xffu;
    float x, unused;
    e4m3x2_to_float2(code, x, unused);
    codes[e] = (unsigned char)code;
    out[g * 16 + e] = (unsigned short)(bf16x2(x * inverse, 0.0f) & 0xffffu);
    changed = true;
  }
  if (changed) o8[g] = raw;
}

// `groups` counts 16 elements (FP8 head dims are multiples of 16).
extern "C" __global__ void __launch_bounds__(THREADS) attnlab_fp8_requantise_repaired(
    uint4* __restrict__ o8, unsigned short* __restrict__ out, long long groups, const float* __restrict__ block) {
  const float scale = block[SLOT(SCALE_O)];
  const float inverse = 1.0f / scale;
  const long long stride = (long long)gridDim.x * THREADS;
  for (long long g = (long long)blockIdx.x * THREADS + threadIdx.x; g < groups; g += REQUANTISE_UNROLL * stride) {
    uint4 raw[REQUANTISE_UNROLL];
#pragma unroll
    for (int u = 0; u < REQUANTISE_UNROLL; u++) raw[u] = g + u * stride < groups ? o8[g + u * stride] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < REQUANTISE_UNROLL; u++) {
      const uint4 r = raw[u];
      if (nan_codes(r.x) | nan_codes(r.y) | nan_codes(r.z) | nan_codes(r.w)) requantise16(o8, out, g + u * stride, scale, inverse);
    }
  }
}
