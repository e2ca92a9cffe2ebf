// Standalone check-and-time harness for the Hopper kernel (src/kernels/hopper/hopper_fwd.cu), so that
// one device call can test many shapes and variants without Node.js. A measurement tool, not a test:
// the library's own GPU suite (test/gpu/) checks the backend against the float64 oracle.
//
// Build (here or on the device):
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels -Xptxas -v \
//        -o benchmarks/harnesses/hopper-forward-kernel.cu benchmarks/harnesses/hopper-forward-kernel.cu
// (no -lcuda: the one driver call, cuTensorMapEncodeTiled, comes through the runtime's entry-point
// query, so it builds on a machine without a GPU and the binary travels to the device.)
// Run: harness check     — every library variant of gen/fwd_variants.cuh with H = Hv and no bias or mask
//                         against a float32 GPU reference, and the dynamic-grid ones bit for bit
//                         against their twin on the 2-D grid;
//      harness sanitize  — small cases of the same, for compute-sanitizer;
//      harness time      — B=4, T=S=8192, N=16 timings of each, causal and not (settled);
//      harness schedules — the library's D=64/128/256 variants beside each with one schedule knob off
//                          (pingpong, late_wait, desc_step, rescale_slack), interleaved three times;
//      harness profile   — one launch of each, for ncu; `none` loads and exits.
// Every check draws fresh random inputs, poisons the outputs first (0xFF bytes: NaN), and compares
// ‖out − ref‖/‖ref‖, NaN positions and the log-sum-exp; each case runs twice and must be bit-identical.
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hopper/hopper_fwd.cu"

#define CK(x)                                                                             \
  do {                                                                                    \
    CUresult r_ = (x);                                                                    \
    if (r_ != CUDA_SUCCESS) {                                                             \
      fprintf(stderr, "%s:%d %s -> CUresult %d\n", __FILE__, __LINE__, #x, (int)r_);      \
      exit(2);                                                                            \
    }                                                                                     \
  } while (0)
#define RT(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)

template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) hopper_kernel(const __grid_constant__ HopperParams p) {
  hopper_fwd<C>(p, FlashMods{});
}

// ---- inputs ----
__device__ __forceinline__ float hash_normal(unsigned long long i, unsigned seed) {
  unsigned long long x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29; x *= 0x94D049BB133111EBull; x ^= x >> 32;
  const float u1 = ((x & 0xFFFFFF) + 1) / 16777217.f, u2 = ((x >> 24) & 0xFFFFFF) / 16777216.f;
  return sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
}
__device__ __forceinline__ u16 to16(float f, bool fp16) {
  if (fp16) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float from16(u16 h, bool fp16) {
  if (fp16) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
  return __uint_as_float(static_cast<u32>(h) << 16);
}
__global__ void fill(u16* x, size_t n, unsigned seed, float stddev, bool fp16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = to16(hash_normal(i, seed) * stddev, fp16);
}

// ---- reference: one thread per (b, t, n) row, float32, IEEE NaN semantics over the visible keys ----
__global__ void reference(const u16* q, const u16* k, const u16* v, float* o, float* lse, int B, int T, int S, int N,
                          int K, int D, const int* qlens, const int* kvlens, int causal, int bottom_right, float scale,
                          bool fp16) {
  const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (idx >= (long long)B * T * N) return;
  const int n = idx % N, t = (idx / N) % T, b = idx / ((long long)N * T);
  const int kh = n / (N / K);
  const int tl = qlens ? min(max(qlens[b], 0), T) : T, sl = kvlens ? min(max(kvlens[b], 0), S) : S;
  const int diag = bottom_right ? sl - tl : 0;
  float* orow = o + idx * D;
  const u16* qr = q + idx * D;
  int hi = sl;
  if (causal) hi = min(hi, t + diag + 1);
  if (t >= tl || hi <= 0) {
    for (int d = 0; d < D; ++d) orow[d] = 0.f;
    lse[idx] = -INFINITY;
    return;
  }
  float m = -INFINITY;
  bool nan = false;
  for (int j = 0; j < hi; ++j) {
    const u16* kr = k + (((long long)b * S + j) * K + kh) * D;
    float x = 0.f;
    for (int d = 0; d < D; ++d) x += from16(qr[d], fp16) * from16(kr[d], fp16);
    x *= scale;
    if (x != x) nan = true;
    m = fmaxf(m, x);
  }
  if (nan) m = NAN;
  float l = 0.f;
  for (int d = 0; d < D; ++d) orow[d] = 0.f;
  for (int j = 0; j < hi; ++j) {
    const u16* kr = k + (((long long)b * S + j) * K + kh) * D;
    const u16* vr = v + (((long long)b * S + j) * K + kh) * D;
    float x = 0.f;
    for (int d = 0; d < D; ++d) x += from16(qr[d], fp16) * from16(kr[d], fp16);
    x *= scale;
    const float pw = (m == -INFINITY) ? 0.f : expf(x - m);
    l += pw;
    for (int d = 0; d < D; ++d) orow[d] += pw * from16(vr[d], fp16);
  }
  if (l == 0.f) {
    for (int d = 0; d < D; ++d) orow[d] = 0.f;
    lse[idx] = -INFINITY;
    return;
  }
  for (int d = 0; d < D; ++d) orow[d] /= l;
  lse[idx] = m + logf(l);
}

// ---- tensor maps ----
// cuTensorMapEncodeTiled through the runtime's driver entry point, so the harness links without
// libcuda (none on a build machine without a GPU; the runtime loads the driver at run time).
using EncodeTiled = decltype(&cuTensorMapEncodeTiled);
static EncodeTiled encode_tiled() {
  static EncodeTiled fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult status;
    RT(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn), 12000,
                                        cudaEnableDefault, &status));
    if (status != cudaDriverEntryPointSuccess || !fn) { fprintf(stderr, "no cuTensorMapEncodeTiled\n"); exit(2); }
  }
  return fn;
}
static void encode(TmaDesc* out, const void* base, int D, int rows, int heads, int B, int box_rows, bool fp16) {
  const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)B};
  const cuuint64_t strides[3] = {(cuuint64_t)heads * D * 2, (cuuint64_t)D * 2, (cuuint64_t)rows * heads * D * 2};
  const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  CK(encode_tiled()(reinterpret_cast<CUtensorMap*>(out),
                            fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                            const_cast<void*>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
}

struct Problem {
  int B, T, S, N, K, D;
  int causal, bottom_right;
  bool fp16;
  std::vector<int> qlens, kvlens;  // empty: full
  const char* nan_case;            // null, "qrow", "qinf", "padkv"
  // Standard deviation of Q and K (V stays 1): 4 gives logits of std ~16, so that a row's max jumps
  // by far more than the rescale slack between tiles (SLACK variants).
  float qk_std = 1.f;
};

struct Buffers {
  u16 *q, *k, *v, *o, *o2;
  float *lse, *lse2, *ref, *ref_lse;
  int *ql, *kl;
};

// The dynamic grid's block count when > 0 (at most the SM count): the checks set it small.
static int g_grid_cap = 0;
// The dynamic grid's section of query heads when > 0 (HopperParams::dynamic_section), else its rule.
static int g_section = 0;

template <class C>
struct Runner {
  static const char* name() {
    static char buf[112];
    char slack[16] = "";
    if (C::SLACK) snprintf(slack, sizeof slack, ".slack%d", C::SLACK);
    snprintf(buf, sizeof buf, "wgmma.d%d.%dx%dx%dwg.s%d%s%s%s%s%s%s", C::D, C::BM, C::BN, C::CONSUMERS + 1,
             C::STAGES, C::PINGPONG ? ".pingpong" : "", C::LATE_WAIT ? ".latewait" : "",
             C::DESC_STEP ? ".descstep" : "", C::DYNAMIC ? ".dynamic" : "", slack, C::FP16 ? ".f16" : ".bf16");
    return buf;
  }
  static void launch(const Problem& pr, const Buffers& bf, u16* o, float* lse, cudaStream_t st) {
    HopperParams hp;
    memset(&hp, 0, sizeof hp);
    encode(&hp.tm_q, bf.q, pr.D, pr.T, pr.N, pr.B, C::BM, pr.fp16);
    encode(&hp.tm_k, bf.k, pr.D, pr.S, pr.K, pr.B, C::BN, pr.fp16);
    encode(&hp.tm_v, bf.v, pr.D, pr.S, pr.K, pr.B, C::BN, pr.fp16);
    FlashParams& f = hp.f;
    f.q = bf.q; f.k = bf.k; f.v = bf.v; f.o = o; f.lse = lse; f.bias = nullptr; f.mask = nullptr;
    f.q_lens = pr.qlens.empty() ? nullptr : bf.ql;
    f.kv_lens = pr.kvlens.empty() ? nullptr : bf.kl;
    const long long D = pr.D;
    const long long qs[3] = {(long long)pr.T * pr.N * D, pr.N * D, D}, ks[3] = {(long long)pr.S * pr.K * D, pr.K * D, D};
    for (int i = 0; i < 3; ++i) { f.q_strides[i] = qs[i]; f.o_strides[i] = qs[i]; f.k_strides[i] = ks[i]; f.v_strides[i] = ks[i]; }
    for (int i = 0; i < 4; ++i) f.bias_strides[i] = f.mask_strides[i] = 0;
    f.B = pr.B; f.T = pr.T; f.S = pr.S; f.N = pr.N; f.K = pr.K; f.H = pr.D; f.Hv = pr.D;
    f.group = pr.N / pr.K; f.window_left = f.window_right = 1 << 29;
    f.scale_log2 = (1.f / sqrtf((float)pr.D)) * 1.4426950408889634f;
    f.flags = (pr.causal ? FLASH_FLAG_CAUSAL : 0) | (pr.bottom_right ? FLASH_FLAG_BOTTOM_RIGHT : 0);
    const u32 smem = hopper_smem_bytes<C>();
    static bool once = false;
    if (!once) {
      RT(cudaFuncSetAttribute(hopper_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      once = true;
    }
    const int qblocks = (pr.T + C::BM - 1) / C::BM;
    static int sms = 0;
    if (!sms) RT(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    // The dynamic grid: one block per SM, or g_grid_cap blocks where a check asks for fewer (many
    // items per block on small cases).
    const int blocks = std::min(qblocks * pr.B * pr.N, g_grid_cap > 0 ? std::min(sms, g_grid_cap) : sms);
    dim3 grid = C::DYNAMIC ? dim3(blocks) : dim3(qblocks, pr.B * pr.N);
    if constexpr (C::DYNAMIC) {
      // The work counter: one int per variant, zeroed on the launch stream before every launch
      // (what the library would do per call: cuMemsetD32Async, ~2 µs of a separate node, timed here).
      static int* counter = nullptr;
      if (!counter) RT(cudaMalloc(&counter, sizeof(int)));
      RT(cudaMemsetAsync(counter, 0, sizeof(int), st));
      hp.work_counter = counter;
      hp.dynamic_section = g_section;
    }
    hopper_kernel<C><<<grid, C::THREADS, smem, st>>>(hp);
    RT(cudaGetLastError());
  }
};

static Buffers alloc(const Problem& pr) {
  Buffers b;
  const size_t nq = (size_t)pr.B * pr.T * pr.N * pr.D, nk = (size_t)pr.B * pr.S * pr.K * pr.D;
  RT(cudaMalloc(&b.q, nq * 2)); RT(cudaMalloc(&b.o, nq * 2)); RT(cudaMalloc(&b.o2, nq * 2));
  RT(cudaMalloc(&b.k, nk * 2)); RT(cudaMalloc(&b.v, nk * 2));
  RT(cudaMalloc(&b.lse, (size_t)pr.B * pr.T * pr.N * 4)); RT(cudaMalloc(&b.lse2, (size_t)pr.B * pr.T * pr.N * 4));
  b.ref = nullptr; b.ref_lse = nullptr;
  RT(cudaMalloc(&b.ql, 4 * pr.B + 4)); RT(cudaMalloc(&b.kl, 4 * pr.B + 4));
  if (!pr.qlens.empty()) RT(cudaMemcpy(b.ql, pr.qlens.data(), 4 * pr.B, cudaMemcpyHostToDevice));
  if (!pr.kvlens.empty()) RT(cudaMemcpy(b.kl, pr.kvlens.data(), 4 * pr.B, cudaMemcpyHostToDevice));
  return b;
}
static void release(Buffers& b) {
  cudaFree(b.q); cudaFree(b.k); cudaFree(b.v); cudaFree(b.o); cudaFree(b.o2); cudaFree(b.lse); cudaFree(b.lse2);
  if (b.ref) cudaFree(b.ref);
  if (b.ref_lse) cudaFree(b.ref_lse);
  cudaFree(b.ql); cudaFree(b.kl);
}

static unsigned g_seed = 1;
static void fill_inputs(const Problem& pr, Buffers& b) {
  const size_t nq = (size_t)pr.B * pr.T * pr.N * pr.D, nk = (size_t)pr.B * pr.S * pr.K * pr.D;
  fill<<<1024, 256>>>(b.q, nq, g_seed++, pr.qk_std, pr.fp16);
  fill<<<1024, 256>>>(b.k, nk, g_seed++, pr.qk_std, pr.fp16);
  fill<<<1024, 256>>>(b.v, nk, g_seed++, 1.f, pr.fp16);
  RT(cudaDeviceSynchronize());
  const u16 nan16 = pr.fp16 ? 0x7E00 : 0x7FC0, inf16 = pr.fp16 ? 0x7C00 : 0x7F80;
  if (pr.nan_case && !strcmp(pr.nan_case, "qrow")) {  // NaN in one element of query row (b=0, t=5, n=0)
    RT(cudaMemcpy(b.q + (size_t)5 * pr.N * pr.D + 3, &nan16, 2, cudaMemcpyHostToDevice));
  }
  if (pr.nan_case && !strcmp(pr.nan_case, "qinf")) {  // +Inf in query row (b=0, t=7, n=1)
    RT(cudaMemcpy(b.q + ((size_t)7 * pr.N + 1) * pr.D + 2, &inf16, 2, cudaMemcpyHostToDevice));
  }
  if (pr.nan_case && !strcmp(pr.nan_case, "padkv")) {  // NaN in every padded K and V row of batch 0
    std::vector<u16> row((size_t)pr.K * pr.D, nan16);
    for (int j = pr.kvlens[0]; j < pr.S; ++j) {
      RT(cudaMemcpy(b.k + (size_t)j * pr.K * pr.D, row.data(), row.size() * 2, cudaMemcpyHostToDevice));
      RT(cudaMemcpy(b.v + (size_t)j * pr.K * pr.D, row.data(), row.size() * 2, cudaMemcpyHostToDevice));
    }
  }
}

static int g_failures = 0;

template <class C>
static void check(const Problem& pr, FILE* log) {
  Buffers b = alloc(pr);
  fill_inputs(pr, b);
  const size_t rows = (size_t)pr.B * pr.T * pr.N, nq = rows * pr.D;
  RT(cudaMalloc(&b.ref, nq * 4)); RT(cudaMalloc(&b.ref_lse, rows * 4));
  reference<<<(rows + 127) / 128, 128>>>(b.q, b.k, b.v, b.ref, b.ref_lse, pr.B, pr.T, pr.S, pr.N, pr.K, pr.D,
                                         pr.qlens.empty() ? nullptr : b.ql, pr.kvlens.empty() ? nullptr : b.kl,
                                         pr.causal, pr.bottom_right, 1.f / sqrtf((float)pr.D), pr.fp16);
  RT(cudaGetLastError());
  RT(cudaMemset(b.o, 0xFF, nq * 2)); RT(cudaMemset(b.lse, 0xFF, rows * 4));
  RT(cudaMemset(b.o2, 0xFF, nq * 2)); RT(cudaMemset(b.lse2, 0xFF, rows * 4));
  Runner<C>::launch(pr, b, b.o, b.lse, 0);
  Runner<C>::launch(pr, b, b.o2, b.lse2, 0);
  RT(cudaDeviceSynchronize());
  std::vector<u16> o(nq), o2(nq);
  std::vector<float> ref(nq), lse(rows), lse2(rows), rlse(rows);
  RT(cudaMemcpy(o.data(), b.o, nq * 2, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(o2.data(), b.o2, nq * 2, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(ref.data(), b.ref, nq * 4, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(lse.data(), b.lse, rows * 4, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(lse2.data(), b.lse2, rows * 4, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(rlse.data(), b.ref_lse, rows * 4, cudaMemcpyDeviceToHost));
  const bool identical = !memcmp(o.data(), o2.data(), nq * 2) && !memcmp(lse.data(), lse2.data(), rows * 4);
  double num = 0, den = 0, lse_err = 0;
  size_t nan_mismatch = 0, lse_mismatch = 0;
  auto f32 = [&](u16 h) {
    if (pr.fp16) {
      const int e = (h >> 10) & 31, m = h & 1023, s = h >> 15;
      float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
      return s ? -v : v;
    }
    u32 x = (u32)h << 16; float f; memcpy(&f, &x, 4); return f;
  };
  for (size_t i = 0; i < nq; ++i) {
    const float x = f32(o[i]), r = ref[i];
    if (std::isnan(x) != std::isnan(r)) { ++nan_mismatch; continue; }
    if (std::isnan(r)) continue;
    num += (double)(x - r) * (x - r);
    den += (double)r * r;
  }
  for (size_t i = 0; i < rows; ++i) {
    const float x = lse[i], r = rlse[i];
    if (std::isnan(x) != std::isnan(r) || (std::isinf(r) != std::isinf(x))) { ++lse_mismatch; continue; }
    if (std::isfinite(r)) lse_err = std::max(lse_err, (double)fabsf(x - r));
  }
  const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  const bool ok = identical && nan_mismatch == 0 && lse_mismatch == 0 && rel < 1e-2 && lse_err < 2e-2;
  if (!ok) ++g_failures;
  char lens[64] = "";
  if (!pr.kvlens.empty()) snprintf(lens, sizeof lens, " q_lens[0]=%d kv_lens[0]=%d", pr.qlens.empty() ? pr.T : pr.qlens[0], pr.kvlens[0]);
  fprintf(log, "%s %-40s B=%d T=%d S=%d N=%d K=%d causal=%d%s%s%s rel=%.2e lse=%.2e nan_mis=%zu lse_mis=%zu ident=%d\n",
          ok ? "PASS" : "FAIL", Runner<C>::name(), pr.B, pr.T, pr.S, pr.N, pr.K, pr.causal,
          pr.bottom_right ? "(br)" : "", lens, pr.nan_case ? pr.nan_case : "", rel, lse_err, nan_mismatch,
          lse_mismatch, identical);
  fflush(log);
  release(b);
}

// The schedules change the order of instructions, not the arithmetic: their outputs and
// log-sum-exps must equal the base variant's bit for bit (on the same inputs).
template <class C, class Base>
static void identical(const Problem& pr, FILE* log) {
  Buffers b = alloc(pr);
  fill_inputs(pr, b);
  const size_t rows = (size_t)pr.B * pr.T * pr.N, nq = rows * pr.D;
  RT(cudaMemset(b.o, 0xFF, nq * 2)); RT(cudaMemset(b.lse, 0xFF, rows * 4));
  RT(cudaMemset(b.o2, 0x7F, nq * 2)); RT(cudaMemset(b.lse2, 0x7F, rows * 4));
  Runner<C>::launch(pr, b, b.o, b.lse, 0);
  Runner<Base>::launch(pr, b, b.o2, b.lse2, 0);
  RT(cudaDeviceSynchronize());
  std::vector<u16> o(nq), o2(nq);
  std::vector<float> lse(rows), lse2(rows);
  RT(cudaMemcpy(o.data(), b.o, nq * 2, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(o2.data(), b.o2, nq * 2, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(lse.data(), b.lse, rows * 4, cudaMemcpyDeviceToHost));
  RT(cudaMemcpy(lse2.data(), b.lse2, rows * 4, cudaMemcpyDeviceToHost));
  const bool ok = !memcmp(o.data(), o2.data(), nq * 2) && !memcmp(lse.data(), lse2.data(), rows * 4);
  if (!ok) ++g_failures;
  fprintf(log, "%s %-44s == %s B=%d T=%d S=%d N=%d K=%d causal=%d%s\n", ok ? "SAME" : "DIFF", Runner<C>::name(),
          Runner<Base>::name(), pr.B, pr.T, pr.S, pr.N, pr.K, pr.causal, pr.nan_case ? pr.nan_case : "");
  fflush(log);
  release(b);
}

template <class C>
static void time_case(int D, int causal, FILE* log, int B = 4, int T = 8192, int settle_ms = 0) {
  Problem pr{B, T, T, 16, 16, D, causal, 0, C::FP16, {}, {}, nullptr};
  Buffers b = alloc(pr);
  fill_inputs(pr, b);
  cudaEvent_t e0, e1;
  RT(cudaEventCreate(&e0)); RT(cudaEventCreate(&e1));
  // Settle: ~150 ms of back-to-back calls first, so that every variant is timed under the power cap
  // (the library's bench settles 300 ms; the first harness runs did not, and read up to 7% high).
  // With settle_ms, back-to-back launches for that long, whatever one takes
  // (40 launches at T=1024 B=32 are only ~20 ms).
  if (settle_ms > 0) {
    RT(cudaEventRecord(e0));
    for (float el = 0.f; el < settle_ms;) {
      for (int i = 0; i < 10; ++i) Runner<C>::launch(pr, b, b.o, b.lse, 0);
      RT(cudaEventRecord(e1));
      RT(cudaEventSynchronize(e1));
      RT(cudaEventElapsedTime(&el, e0, e1));
    }
  } else {
    for (int i = 0; i < (causal ? 70 : 40); ++i) Runner<C>::launch(pr, b, b.o, b.lse, 0);
  }
  std::vector<float> ms;
  for (int i = 0; i < 15; ++i) {
    RT(cudaEventRecord(e0));
    Runner<C>::launch(pr, b, b.o, b.lse, 0);
    RT(cudaEventRecord(e1));
    RT(cudaEventSynchronize(e1));
    float t; RT(cudaEventElapsedTime(&t, e0, e1)); ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 4.0 * pr.B * pr.N * (double)pr.T * pr.S * D / (causal ? 2 : 1);
  fprintf(log, "TIME %-44s H=%d B=%d T=%d causal=%d median=%.3f ms min=%.3f  %.1f TFLOP/s\n", Runner<C>::name(), D,
          B, T, causal, ms[ms.size() / 2], ms[0], flops / (ms[ms.size() / 2] * 1e-3) / 1e12);
  fflush(log);
  release(b);
}

// One launch of the headline shape, for a profiler: `ncu --clock-control none -k regex:hopper_kernel ...`
// sees every variant of the profile mode once.
template <class C>
static void profile_case(int causal) {
  Problem pr{4, 8192, 8192, 16, 16, C::D, causal, 0, C::FP16, {}, {}, nullptr};
  Buffers b = alloc(pr);
  fill_inputs(pr, b);
  Runner<C>::launch(pr, b, b.o, b.lse, 0);
  RT(cudaDeviceSynchronize());
  printf("PROFILED %s causal=%d\n", Runner<C>::name(), causal);
  release(b);
}

template <class C>
static void check_all(FILE* log, bool quick) {
  const int D = C::D;
  const bool f16 = C::FP16;
  std::vector<Problem> cases = {
      {2, 512, 512, 4, 4, D, 0, 0, f16, {}, {}, nullptr},
      {2, 512, 512, 4, 4, D, 1, 0, f16, {}, {}, nullptr},
      {1, 300, 700, 4, 2, D, 1, 1, f16, {}, {}, nullptr},      // GQA, bottom-right, ragged tiles
      {1, 700, 300, 4, 1, D, 1, 0, f16, {}, {}, nullptr},      // MQA, top-left: rows past S see all
      {1, 700, 300, 2, 1, D, 1, 1, f16, {}, {}, nullptr},      // bottom-right, T > S: rows see nothing
      {2, 333, 517, 4, 2, D, 0, 0, f16, {301, 17}, {517, 250}, nullptr},
      {2, 256, 640, 2, 2, D, 1, 1, f16, {200, 256}, {333, 0}, nullptr},  // a batch with no keys
      {2, 256, 384, 2, 2, D, 0, 0, f16, {}, {250, 129}, "padkv"},        // NaN in padded K/V stays out
      {1, 256, 256, 2, 2, D, 0, 0, f16, {}, {}, "qrow"},
      {1, 256, 256, 2, 2, D, 1, 0, f16, {}, {}, "qinf"},
      {1, 1, 1, 1, 1, D, 0, 0, f16, {}, {}, nullptr},
      {1, 129, 65, 3, 1, D, 0, 0, f16, {}, {}, nullptr},
  };
  if (!quick) cases.push_back({1, 2048, 2048, 2, 2, D, 1, 0, f16, {}, {}, nullptr});
  for (auto& pr : cases) check<C>(pr, log);
}

// The library's variants (gen/fwd_variants.cuh, generated from hopper-variant.ts's table) and named
// changes of one: a variant is a struct of named fields, so a change is a struct that derives from
// it and shadows one field.
#include "hopper/gen/fwd_variants.cuh"
template <class V> struct NoPingpong : V { static constexpr bool pingpong = false; };
template <class V> struct NoLateWait : V { static constexpr bool late_wait = false; };
template <class V> struct NoDescStep : V { static constexpr bool desc_step = false; };
template <class V> struct NoSlack : V { static constexpr int rescale_slack = 0; };
template <class V> struct OnDynamicGrid : V { static constexpr bool dynamic_grid = true; };
template <class V> struct On2dGrid : V { static constexpr bool dynamic_grid = false; };
// The harness's inputs: H = Hv, no bias, no mask.
template <class V> constexpr bool plain() { return V::key_dim == V::value_dim && V::bias == 0 && !V::mask; }

// The check cases of check_all, each compared bit for bit against the base variant.
template <class C, class Base>
static void identical_all(FILE* log) {
  const int D = C::D;
  const bool f16 = C::FP16;
  std::vector<Problem> cases = {
      {2, 512, 512, 4, 4, D, 0, 0, f16, {}, {}, nullptr},
      {2, 512, 512, 4, 4, D, 1, 0, f16, {}, {}, nullptr},
      {1, 300, 700, 4, 2, D, 1, 1, f16, {}, {}, nullptr},
      {2, 256, 640, 2, 2, D, 1, 1, f16, {200, 256}, {333, 0}, nullptr},
      {2, 256, 384, 2, 2, D, 0, 0, f16, {}, {250, 129}, "padkv"},
      {1, 256, 256, 2, 2, D, 1, 0, f16, {}, {}, "qinf"},
      {2, 4096, 4096, 4, 2, D, 1, 0, f16, {}, {}, nullptr},
      {1, 4096, 4096, 4, 4, D, 0, 0, f16, {}, {}, nullptr},
  };
  for (auto& pr : cases) identical<C, Base>(pr, log);
}

// Per library variant: `check` against the oracle (and a dynamic-grid variant bit for bit against
// its twin on the 2-D grid, on many items per block), `sanitize` small cases, `time` and `profile`.
template <class V>
static void each(const std::string& mode, FILE* log) {
  if constexpr (plain<V>()) {
    using C = HopperConfig<V>;
    if (mode == "check") {
      check_all<C>(log, false);
      if constexpr (V::dynamic_grid) {
        identical_all<C, HopperConfig<On2dGrid<V>>>(log);
        g_grid_cap = 7;  // many items per block: empty (T > S bottom-right), short and long causal
        Problem many{8, 1500, 1100, 8, 2, V::key_dim, 1, 1, V::fp16, {}, {}, nullptr};
        Problem ragged{6, 900, 1000, 8, 4, V::key_dim, 1, 0, V::fp16, {900, 17, 0, 500, 899, 1}, {1000, 5, 0, 999, 64, 1000}, nullptr};
        check<C>(many, log); check<C>(ragged, log);
        identical<C, HopperConfig<On2dGrid<V>>>(many, log); identical<C, HopperConfig<On2dGrid<V>>>(ragged, log);
        g_grid_cap = 0;
      }
    }
    if (mode == "sanitize") {
      g_grid_cap = 5;
      Problem a{1, 300, 700, 4, 2, V::key_dim, 1, 1, V::fp16, {}, {}, nullptr};
      Problem c{2, 256, 640, 2, 2, V::key_dim, 1, 1, V::fp16, {200, 256}, {333, 0}, nullptr};
      Problem e{2, 256, 640, 2, 2, V::key_dim, 0, 0, V::fp16, {200, 256}, {333, 100}, nullptr};
      check<C>(a, log); check<C>(c, log); check<C>(e, log);
      g_grid_cap = 0;
    }
    if (mode == "time")
      for (int causal = 0; causal < 2; ++causal) time_case<C>(V::key_dim, causal, log);
    if (mode == "profile")
      for (int causal = 0; causal < 2; ++causal) profile_case<C>(causal);
  }
}

// A library variant beside itself with each schedule knob off, interleaved.
template <class V>
static void schedules(FILE* log) {
  for (int causal = 0; causal < 2; ++causal)
    for (int rep = 0; rep < 3; ++rep) {
      time_case<HopperConfig<V>>(V::key_dim, causal, log);
      time_case<HopperConfig<NoPingpong<V>>>(V::key_dim, causal, log);
      time_case<HopperConfig<NoLateWait<V>>>(V::key_dim, causal, log);
      time_case<HopperConfig<NoDescStep<V>>>(V::key_dim, causal, log);
      time_case<HopperConfig<NoSlack<V>>>(V::key_dim, causal, log);
    }
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  RT(cudaFree(0));
  FILE* log = stdout;
  if (mode == "none") return 0;
  if (mode == "schedules") {
    schedules<hopper_fwd_bf16_d64_192x128x4wg_pp_lw_ds_sl8>(log);
    schedules<hopper_fwd_bf16_d128_192x80x4wg_pp_lw_ds_sl8>(log);
    schedules<hopper_fwd_bf16_d256_128x80x3wg_pp_lw_ds_sl8>(log);
    return 0;
  }
#define HOPPER_HARNESS_EACH(V) each<V>(mode, log);
  HOPPER_FWD_VARIANTS(HOPPER_HARNESS_EACH)
  if (mode == "check" || mode == "sanitize") printf("CHECK failures: %d\n", g_failures);
  return g_failures ? 1 : 0;
}
