// Standalone check and timing of src/kernels/decode/flash_decode.cu, built by nvcc (no Node.js, no
// NVRTC), so that one device call can test the kernel in seconds and a stalled launch costs a timeout
// of its own, not the call:
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels -DDECODE_SPIN_LIMIT=16777216 \
//        -o harness benchmarks/harnesses/decode-kernel.cu
//   timeout -s KILL 20 ./harness check     # every loader × row-tile variant vs a float reference
//   compute-sanitizer --tool memcheck ./harness check quick
//   timeout -s KILL 60 ./harness bench [sweep]   # GB/s per shape, layout, loader (and every split count)
//   ncu ... ./harness bench one 64 16384 8 16 bulk  # one configuration: B S K blockSize (0: dense) loader
// It launches the kernel exactly as src/backends/cuda/flash/decode/decode.ts does (grid, shared memory,
// DecodeParams); DECODE_SPIN_LIMIT makes a bulk-loader wait that never completes trap with a message.
#include <cuda.h>  // CUtensorMap types (cuTensorMapEncodeTiled comes through the runtime, no -lcuda)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "decode/flash_decode.cu"
#include "decode/flash_decode_heads.cu"
#include "decode/flash_decode_ws.cu"  // the heads kernel with a producer warp (harness only)
#include "decode-persistent-kernel.cu"  // a persistent heads kernel (harness only; slower everywhere)
#include "decode-register-kernel.cu"    // K and V loaded into mma fragments (harness only; 0.52–0.94× the library)

template <class C>
__global__ void __launch_bounds__(DEC_THREADS) h_decode(const __grid_constant__ DecodeParams p) {
  flash_decode<C, false>(p);
}
template <class C>
__global__ void __launch_bounds__(C::THREADS) h_heads(const __grid_constant__ DecodeParams p) {
  flash_decode_heads<C, false>(p);
}
template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB_) h_ws(const __grid_constant__ DecodeParams p) {
  flash_decode_ws<C, false>(p);
}
template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB_)
    h_ws_tma(const __grid_constant__ DecodeParams p, const __grid_constant__ TmaDesc kmap,
             const __grid_constant__ TmaDesc vmap) {
  flash_decode_ws<C, false>(p, &kmap, &vmap);
}
template <class C>
__global__ void __launch_bounds__(C::THREADS, 1) h_persist(const __grid_constant__ DecodeParams p) {
  flash_decode_persist<C, false>(p);
}
template <int HB, int TK>
__global__ void __launch_bounds__(128) h_persist_combine(const __grid_constant__ DecodeParams p) {
  flash_decode_persist_combine<HB, TK, 128, false>(p);
}
template <class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB_) h_regs(const __grid_constant__ DecodeParams p) {
  flash_decode_regs<C>(p);
}
template <int DV>
__global__ void __launch_bounds__(128) h_combine(const __grid_constant__ DecodeParams p) {
  flash_decode_combine<DV, false>(p);
}

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e = (x);                                                                 \
    if (e != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(3);                                                                           \
    }                                                                                    \
  } while (0)

struct Variant {
  int d, dv, rt;
  bool bulk;
  void (*split)(DecodeParams);
  void (*combine)(DecodeParams);
  int smem;
  // flash_decode_heads.cu's kernel when hb > 0: hb kv heads per block, rt row tiles per head,
  // `slices` warps per row tile, tk keys per tile; 32·hb·rt·slices threads.
  int hb = 0, slices = 0, tk = 64, threads = DEC_THREADS, stages = 3;
  // flash_decode_persist.cu's kernel when persist > 0: a grid of `persist` blocks (SMs × occupancy)
  int persist = 0, per_sm = 0;
  // flash_decode_ws.cu's kernel (hb > 0): a producer warp beside hb·rt·slices consumers; Q from shared
  // memory (qsmem), `minb` blocks per SM asked of the launch bounds; per_sm from the occupancy API
  bool ws = false, qsmem = false, fast = false;  // fast: ws_softmax's FAST path
  int minb = 1, producers = 1;
  // TMA: `group` rows a box moves both halves of (a 5-D map; 0: a box a half), `loadonly`: the consumers
  // only wait and release the stages (the loader's ceiling; not checked: no output)
  int group = 0;
  int loadonly = 0;  // 2: nor Q before nor the merge after the loop (.lo2)
  int rowgroups = 1;  // blocks sharing a key range, each its rows (.r2): the grid's x is splits × rowgroups
  // the TMA loader (decode_tma.cuh): launched with K and V tensor maps (tma_maps)
  void (*split_tma)(DecodeParams, TmaDesc, TmaDesc) = nullptr;
  // flash_decode_regs.cu's kernel: a pair of warps a split, `stages` steps of 16 keys in flight, an L2 prefetch
  // `prefetch` steps past them (0: none), loads with the L2::256B hint (l2_256), K through shared memory (ksmem);
  // qsmem, minb and loadonly (its MODE: 1 no exchange, 2 loads alone) as above; split_general: the form with a
  // table lookup a key, for pages not of whole 16-key steps and windows
  bool regs = false, l2_256 = false, ksmem = false;
  int prefetch = 0;
  void (*split_general)(DecodeParams) = nullptr;
  const char* name() const {
    static char buf[64];
    if (regs) {
      char pf[16] = "";
      if (prefetch) snprintf(pf, sizeof pf, ".pf%d", prefetch);
      snprintf(buf, sizeof buf, "regs.d%d%s%s%s%s%s%s", stages, qsmem ? "q" : "", pf, l2_256 ? ".l2" : "",
               ksmem ? ".ks" : "", minb > 1 ? (minb == 6 ? ".b6" : ".b") : "",
               loadonly == 1 ? ".nx" : loadonly == 2 ? ".lo" : "");
      return buf;
    }
    if (!hb) return bulk ? "bulk" : "async";
    if (ws) {
      char p[8] = "";
      if (producers > 1) snprintf(p, sizeof p, ".p%d", producers);
      char g[16] = "";
      if (group) snprintf(g, sizeof g, group < 0 ? ".raw" : ".g%d", group);
      snprintf(buf, sizeof buf, "%s%d.%dx%d.s%d%s%s%s%s%s%s%s", split_tma ? "tma" : "ws", hb, slices, tk / slices,
               stages, qsmem ? "q" : "", fast ? "f" : "", minb > 1 ? ".b2" : "", p, g,
               rowgroups > 1 ? ".r2" : "",
               loadonly == 2 ? ".lo2" : loadonly ? ".lo" : "");
      return buf;
    }
    snprintf(buf, sizeof buf, "%s%d.%dx%d.s%d", persist ? "persist" : "heads", hb, slices, tk / slices, stages);
    return buf;
  }
};
template <int D, int DV, int RT, bool BULK>
Variant make() {
  using C = DecodeConfig<D, DV, false, 3, RT, BULK>;
  CHECK(cudaFuncSetAttribute(h_decode<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  return {D, DV, RT, BULK, h_decode<C>, h_combine<DV>, C::SMEM};
}
template <int HB, int RTH, int SLICES, int KPW, int STAGES = 3>
Variant make_heads() {
  using C = HeadsConfig<128, 128, false, HB, RTH, SLICES, KPW, STAGES>;
  CHECK(cudaFuncSetAttribute(h_heads<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  Variant v{128, 128, RTH, true, h_heads<C>, h_combine<128>, C::SMEM};
  v.hb = HB, v.slices = SLICES, v.tk = C::TK, v.threads = C::THREADS, v.stages = STAGES;
  return v;
}
// The producer-warp heads kernel: per_sm from the occupancy API with the whole carveout;
// PRODUCERS row-copy warps, or the TMA loader.
template <int HB, int RTH, int SLICES, int KPW, int STAGES, bool QSMEM, int MINB, bool FAST, int PRODUCERS = 1,
          bool TMA = false, int GROUP = 0, int LOADONLY = 0, int ROWGROUPS = 1>
Variant make_ws() {
  using C = WsConfig<128, 128, false, HB, RTH, SLICES, KPW, STAGES, QSMEM, MINB, FAST, PRODUCERS, TMA, GROUP, LOADONLY,
                     ROWGROUPS>;
  const void* fn;
  if constexpr (TMA) fn = (const void*)h_ws_tma<C>;
  else fn = (const void*)h_ws<C>;
  CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, C::THREADS, C::SMEM));
  Variant v{128, 128, RTH, true, nullptr, h_combine<128>, C::SMEM};
  v.hb = HB, v.slices = SLICES, v.tk = C::TK, v.threads = C::THREADS, v.stages = STAGES;
  v.ws = true, v.qsmem = QSMEM, v.fast = FAST, v.minb = MINB, v.per_sm = per_sm, v.producers = PRODUCERS;
  v.group = GROUP, v.loadonly = LOADONLY, v.rowgroups = ROWGROUPS, v.rt = RTH * ROWGROUPS;
  if constexpr (TMA) v.split_tma = h_ws_tma<C>;
  else v.split = h_ws<C>;
  return v;
}
// Whether the TMA loader takes problem (H, Hv, block size): one 128-wide kv head a block, and pages of
// a power of two ≥ 8 rows (whole boxes of 1024-byte swizzle atoms that tile TK-aligned tiles).
// Grouped boxes: pages of whole groups.
static bool tma_takes(int H, int Hv, int bs, int group = 0) {
  return H == 128 && Hv == 128 && (bs == 0 || (bs >= 8 && !(bs & (bs - 1)) && bs % std::max(group, 1) == 0));
}

// cuTensorMapEncodeTiled, found through the runtime (the harness links no libcuda).
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
// HARNESS_L2: the maps' L2 promotion (none, 64, 128, 256: the library's), to see what the L2 does with it.
static CUtensorMapL2promotion l2_promotion() {
  const char* e = getenv("HARNESS_L2");
  if (!e || !*e || !strcmp(e, "256")) return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  if (!strcmp(e, "128")) return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  if (!strcmp(e, "64")) return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
  return CU_TENSOR_MAP_L2_PROMOTION_NONE;
}
static EncodeTiled encoder() {
  static EncodeTiled fn = nullptr;
  if (fn) return fn;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void**)&fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !fn) {
    fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    exit(3);
  }
  return fn;
}
// decode_tma.cuh's map of a cache (K or V): dims {H, tokens, K, sequences or pool blocks}, box {64, boxr}.
static TmaDesc tma_map(const uint16_t* base, int H, int tokens, int K, long outer, long token_stride, long head_stride,
                       int boxr, bool raw = false) {
  CUtensorMap m;
  const cuuint64_t dims[4] = {cuuint64_t(H), cuuint64_t(tokens), cuuint64_t(K), cuuint64_t(outer)};
  const cuuint64_t strides[3] = {cuuint64_t(token_stride) * 2, cuuint64_t(head_stride) * 2,
                                 cuuint64_t(token_stride) * tokens * 2};
  const cuuint32_t box[4] = {raw ? 128u : 64u, cuuint32_t(boxr), 1, 1}, unit[4] = {1, 1, 1, 1};
  const CUresult r = encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void*)base, dims, strides, box, unit,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, raw ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
                               l2_promotion(), CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled: CUresult %d (tokens %d, outer %ld, box rows %d)\n", int(r), tokens, outer, boxr);
    exit(3);
  }
  TmaDesc d;
  memcpy(&d, &m, sizeof d);
  return d;
}
// The grouped map (group > 0): dims {64, tokens, 2 halves, K, outer} with the halves a dimension of
// stride 128 B inside the token stride, box {64, group, 2, 1, 1}: one copy, both halves of `group` rows.
static TmaDesc tma_group_map(const uint16_t* base, int tokens, int K, long outer, long token_stride,
                             long head_stride, int group) {
  CUtensorMap m;
  const cuuint64_t dims[5] = {64, cuuint64_t(tokens), 2, cuuint64_t(K), cuuint64_t(outer)};
  const cuuint64_t strides[4] = {cuuint64_t(token_stride) * 2, 128, cuuint64_t(head_stride) * 2,
                                 cuuint64_t(token_stride) * tokens * 2};
  const cuuint32_t box[5] = {64, cuuint32_t(group), 2, 1, 1}, unit[5] = {1, 1, 1, 1, 1};
  const CUresult r = encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, (void*)base, dims, strides, box, unit,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               l2_promotion(), CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled (grouped): CUresult %d (tokens %d, outer %ld, group %d)\n", int(r),
            tokens, outer, group);
    exit(3);
  }
  TmaDesc d;
  memcpy(&d, &m, sizeof d);
  return d;
}
// The maps of p's cache for a TK-key tile, built once per (pointers, shape): the pool of a paged cache has
// B · max_blocks blocks (upload's and bench's tables), a dense one B sequences of S.
static std::pair<TmaDesc, TmaDesc> tma_maps(const DecodeParams& p, int tk, int group = 0) {
  static std::map<std::tuple<const void*, const void*, int, int, int, int, int>, std::pair<TmaDesc, TmaDesc>> cache;
  const bool paged = p.block_table != nullptr;
  const int tokens = paged ? p.block_size : p.S;
  const int rows = paged ? std::min(p.block_size, tk) : tk;
  const int boxr = group ? -1000 * group : rows;  // the key tells the kinds apart (−1: raw rows)
  const long outer = paged ? long(p.B) * p.max_blocks : p.B;
  const auto key = std::make_tuple((const void*)p.k, (const void*)p.v, tokens, int(outer), p.K, boxr, p.H);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (group < 0)
    return cache[key] = {tma_map(p.k, p.H, tokens, p.K, outer, p.k_token, p.k_head, rows, true),
                         tma_map(p.v, p.Hv, tokens, p.K, outer, p.v_token, p.v_head, rows, true)};
  if (group)
    return cache[key] = {tma_group_map(p.k, tokens, p.K, outer, p.k_token, p.k_head, group),
                         tma_group_map(p.v, tokens, p.K, outer, p.v_token, p.v_head, group)};
  const std::pair<TmaDesc, TmaDesc> maps{tma_map(p.k, p.H, tokens, p.K, outer, p.k_token, p.k_head, boxr),
                                         tma_map(p.v, p.Hv, tokens, p.K, outer, p.v_token, p.v_head, boxr)};
  return cache[key] = maps;
}
// flash_decode_regs.cu's kernel: ≤ 32 rows a kv head (rt 2), blocks a SM from the occupancy API.
// The launch picks the WHOLE form where the problem allows it (split_general otherwise).
template <int DEPTH, int PF, bool L2_256, bool QSMEM, int MINB = 1, int MODE = 0, bool KSMEM = false>
Variant make_regs() {
  using C = RegsConfig<DEPTH, PF, L2_256, QSMEM, true, MINB, MODE, KSMEM>;
  using CG = RegsConfig<DEPTH, PF, L2_256, QSMEM, false, MINB, MODE, KSMEM>;
  CHECK(cudaFuncSetAttribute(h_regs<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  CHECK(cudaFuncSetAttribute(h_regs<CG>, cudaFuncAttributeMaxDynamicSharedMemorySize, CG::SMEM));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, h_regs<C>, C::THREADS, C::SMEM));
  Variant v{128, 128, 2, false, h_regs<C>, h_combine<128>, C::SMEM};
  v.split_general = h_regs<CG>, v.qsmem = QSMEM;
  v.regs = true, v.stages = DEPTH, v.prefetch = PF, v.l2_256 = L2_256, v.tk = REGS_KEYS, v.threads = C::THREADS;
  v.minb = MINB, v.loadonly = MODE, v.ksmem = KSMEM;
  v.per_sm = per_sm;
  return v;
}
// The persistent heads kernel, one warp per row tile: P = SMs × the blocks that fit on one.
template <int HB, int RTH, int STAGES>
Variant make_persist() {
  using C = HeadsConfig<128, 128, false, HB, RTH, 1, 16, STAGES>;
  CHECK(cudaFuncSetAttribute(h_persist<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
  // the whole carveout, as launchKernel asks: 2 blocks of ~100 KB (persist4 s3) or 3 of 70 KB share an SM
  CHECK(cudaFuncSetAttribute(h_persist<C>, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  int per_sm = 0, sms = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, h_persist<C>, C::THREADS, C::SMEM));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Variant v{128, 128, RTH, true, h_persist<C>, h_persist_combine<HB, C::TK>, C::SMEM};
  v.hb = HB, v.slices = 1, v.tk = C::TK, v.threads = C::THREADS, v.stages = STAGES;
  v.per_sm = per_sm, v.persist = std::min(sms * std::max(per_sm, 1), DEC_PERSIST_MAX_BLOCKS);
  return v;
}
static std::vector<Variant> all_variants() {
  return {make<128, 128, 1, false>(),     make<128, 128, 2, false>(),     make<128, 128, 4, false>(),
          make<128, 128, 1, true>(),      make<128, 128, 2, true>(),      make<128, 128, 4, true>(),
          make<80, 48, 1, true>(),        make<80, 48, 2, false>(),
          // the heads kernel as decode.ts chooses it (stage ≈ 64 KB: TK·HB = 128 at H = Hv = 128) …
          make_heads<8, 1, 1, 16>(),      make_heads<4, 1, 2, 16>(),      make_heads<2, 1, 4, 16>(),
          make_heads<1, 1, 8, 16>(),      make_heads<1, 2, 4, 32>(),      make_heads<1, 4, 2, 64>(),
          // … and alternatives for the bench: 4 warps of 4 heads (2 blocks per SM), smaller stages
          make_heads<4, 1, 1, 16>(),      make_heads<1, 2, 4, 16, 5>(),   make_heads<8, 1, 1, 16, 2>(),
          // … and the persistent grid (not the library's): 8 heads 2/3 stages (1 block/SM),
          // 4 heads 3 stages (2 blocks/SM) or 6 (one, ~166 KB in flight), MQA two row tiles 8 stages
          make_persist<8, 1, 3>(),        make_persist<8, 1, 2>(),        make_persist<4, 1, 3>(),
          make_persist<4, 1, 6>(),        make_persist<1, 2, 8>(),
          // … and the producer-warp kernel (docs/internals/decode.md), names ws<HB>.<SLICES>x<KPW>.s<STAGES>
          // [q: Q in shared][f: FAST softmax][.b2: two blocks per SM]: MQA like for like with heads1.4x32.s3, then
          // each change alone (f, q), 64-key tiles 6 deep, 12 consumers (Q in shared: 128 registers), two blocks
          // of 6 consumers per SM; K=4 (and K=8's 4-head blocks) like for like with heads4.2x16.s3, and f
          make_ws<1, 2, 4, 32, 3, false, 1, false>(), make_ws<1, 2, 4, 32, 3, false, 1, true>(),
          make_ws<1, 2, 4, 32, 3, true, 1, false>(),  make_ws<1, 2, 4, 16, 6, false, 1, true>(),
          make_ws<1, 2, 6, 16, 4, true, 1, true>(),   make_ws<1, 2, 3, 16, 4, true, 2, true>(),
          make_ws<4, 1, 2, 16, 3, false, 1, false>(), make_ws<4, 1, 2, 16, 3, false, 1, true>(),
          // … one producer warp's row copies the limit (0.33×): 2 and 4 producer warps
          // (.p2, .p4: is it the copies per warp?), then the TMA loader (decode_tma.cuh: 4 tensor copies a dense
          // tile, 32 at block 16): like for like with heads1.4x32.s3 and with FAST, 64-key tiles 6 deep, two
          // blocks of 4 consumers per SM
          make_ws<1, 2, 4, 32, 3, false, 1, true, 2>(), make_ws<1, 2, 4, 32, 3, false, 1, true, 4>(),
          make_ws<1, 2, 4, 32, 3, false, 1, false, 1, true>(), make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true>(),
          make_ws<1, 2, 4, 16, 6, false, 1, true, 1, true>(),  make_ws<1, 2, 2, 32, 3, false, 2, true, 1, true>(),
          // … one copy moves both 128-byte halves of `group` rows (.g<group>: a 2 KB … 8 KB stretch of
          // the cache a copy, in address order, where a half-box strides 256 B over 16 KB), and the loader's
          // ceiling with consumers that only release the stages (.lo)
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 8>(), make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 16>(),
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 32>(),
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 0, 1>(),
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 8, 1>(),
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 16, 1>(),
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, -1, 1>(),
          // … and the loader with neither Q before nor the merge after
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 0, 2>(),
          // … two blocks sharing a key range, each one row tile (16 of MQA's 32 heads): one split at
          // B=64 instead of two and their combine (5%: .lo2 at splits 2 read 4019 GB/s, at splits 1
          // 4140 = the copies alone). In a cluster, sharing the copies by multicast (since removed: 2.3
          // TB/s, lost); here each reads the range (the second read an L2 hit, if the L2 keeps up: `ceiling`'s
          // dup2), 8 warps of 16 keys and 4 of 32; idle consumers (.lo2)
          make_ws<1, 1, 8, 16, 3, false, 1, true, 1, true, 0, 0, 2>(),
          make_ws<1, 1, 4, 32, 3, false, 1, true, 1, true, 0, 0, 2>(),
          make_ws<1, 1, 8, 16, 3, false, 1, true, 1, true, 0, 2, 2>(),
          // … (dense r2 4031 GB/s where the library's two splits read 3774, but paged16 2046 and paged64
          // 3512: one CTA issues all 32 / 8 boxes of its sequence's tiles; at one split, 64 blocks, grouped boxes
          // of 16 rows read 3888 with idle consumers where half boxes read 2576): row groups with grouped boxes
          make_ws<1, 1, 8, 16, 3, false, 1, true, 1, true, 8, 0, 2>(),
          make_ws<1, 1, 8, 16, 3, false, 1, true, 1, true, 16, 0, 2>(),
          make_ws<1, 1, 8, 16, 3, false, 1, true, 1, true, 32, 0, 2>(),
          make_ws<1, 1, 8, 16, 3, false, 1, true, 1, true, 64, 0, 2>(),
          make_ws<1, 1, 8, 16, 3, false, 1, true, 1, true, 16, 2, 2>(),
          make_ws<1, 2, 4, 32, 3, false, 1, true, 1, true, 64>(),
          // … no stages at all, K and V loaded into the mma fragments by a pair of warps
          // (flash_decode_regs.cu): 2–4 steps of 16 keys in flight a warp, an L2 prefetch, the L2::256B hint
          // (q: Q's fragments in shared memory)
          make_regs<2, 0, false, false>(), make_regs<3, 0, false, false>(), make_regs<3, 0, false, true>(),
          make_regs<4, 0, false, true>(),  make_regs<3, 0, true, false>(),  make_regs<2, 8, false, false>(),
          // … registers capped for 6 pairs a SM (.b6), and timing-only forms without the exchange (.nx)
          // and with loads alone (.lo)
          make_regs<2, 0, false, true, 6>(), make_regs<3, 0, false, true, 1, 1>(),
          make_regs<3, 0, false, true, 1, 2>(), make_regs<4, 0, false, true, 1, 2>(), make_regs<2, 0, false, true, 6, 2>(),
          // … K in whole lines through a warp-private shared tile (.ks), and its loads alone
          make_regs<3, 0, false, true, 1, 0, true>(), make_regs<3, 0, false, false, 1, 0, true>(),
          make_regs<2, 0, false, true, 1, 0, true>(), make_regs<4, 0, false, true, 1, 0, true>(),
          make_regs<3, 0, false, true, 1, 2, true>()};
}
// all_variants() less those whose name starts with one of HARNESS_SKIP's comma-separated prefixes (a device
// call re-runs the check and bench without a variant whose launch failed: the context is gone after one).
static std::vector<Variant> variants() {
  std::vector<Variant> vs = all_variants(), kept;
  const char* skip = getenv("HARNESS_SKIP");
  for (const Variant& v : vs) {
    bool drop = false;
    for (const char* at = skip; at && *at;) {
      const char* end = strchr(at, ',');
      const size_t n = end ? size_t(end - at) : strlen(at);
      if (n && !strncmp(v.name(), at, n)) drop = true;
      at = end ? end + 1 : nullptr;
    }
    // HARNESS_ONLY: keep only names starting with one of its prefixes (a prefix ending in '=': that name
    // alone), and the heads/row-tile kernels the bench always times beside them
    if (const char* only = getenv("HARNESS_ONLY"); only && *only && (v.ws || v.regs)) {
      bool keep = false;
      for (const char* at = only; at && *at;) {
        const char* end = strchr(at, ',');
        const size_t n = end ? size_t(end - at) : strlen(at);
        if (n > 1 && at[n - 1] == '=') {
          if (strlen(v.name()) == n - 1 && !strncmp(v.name(), at, n - 1)) keep = true;
        } else if (n && !strncmp(v.name(), at, n)) keep = true;
        at = end ? end + 1 : nullptr;
      }
      drop = drop || !keep;
    }
    if (!drop) kept.push_back(v);
  }
  return kept;
}
// The heads variant decode.ts would pick for G rows per kv head (T = 1) and K kv heads.
static const Variant* natural_heads(const std::vector<Variant>& vs, int rows, int K) {
  const int rth = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
  int hb = 1;
  while (hb * 2 <= 8 / rth && K % (hb * 2) == 0) hb *= 2;
  for (auto& v : vs)
    if (!v.persist && !v.ws && v.hb == hb && v.rt == rth && v.slices == 8 / (hb * rth) && v.stages == 3) return &v;
  return nullptr;
}
static const Variant& pick(const std::vector<Variant>& vs, int d, int dv, int rt, bool bulk) {
  for (auto& v : vs)
    if (v.d == d && v.dv == dv && v.rt == rt && v.bulk == bulk) return v;
  fprintf(stderr, "no variant d%d dv%d rt%d bulk%d\n", d, dv, rt, bulk);
  exit(2);
}

static float bf2f(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

struct Problem {
  int B, T, S, N, K, H, Hv, bs;  // bs 0: dense
  std::vector<int> lens;          // key lengths (B)
  int window_left = -1;           // -1: none; else the window [left, ∞)
  bool causal = false;
  bool bottom_right = true;       // causal / window diagonal alignment
  bool nan_v = false;             // NaN in V at keys one row sees and another not (the scalar P·V path)
  int nan_k = -1;                 // ≥ 0: NaN in K at that key of sequence 0 (every kv head): NaN logits
};

// Launches as decode.ts does; returns the device time of `reps` launches' median (ms) when reps > 0.
struct Device {
  uint16_t *q, *k, *v, *o;
  float *lse, *opart, *lpart;
  int *table, *lens;
};

static DecodeParams params(const Problem& pr, const Device& d, int splits, int max_blocks) {
  DecodeParams p{};
  p.q = d.q, p.k = d.k, p.v = d.v, p.o = d.o, p.lse = d.lse, p.o_part = d.opart, p.lse_part = d.lpart;
  p.block_table = pr.bs ? d.table : nullptr;
  p.kv_lens = d.lens;
  p.q_token = pr.N * pr.H, p.q_head = pr.H, p.k_token = pr.K * pr.H, p.k_head = pr.H;
  p.v_token = pr.K * pr.Hv, p.v_head = pr.Hv, p.o_token = pr.N * pr.Hv, p.o_head = pr.Hv;
  p.B = pr.B, p.T = pr.T, p.S = pr.S, p.N = pr.N, p.K = pr.K, p.H = pr.H, p.Hv = pr.Hv, p.group = pr.N / pr.K;
  p.block_size = pr.bs, p.max_blocks = max_blocks, p.splits = splits;
  p.window_left = pr.window_left >= 0 ? pr.window_left : 1 << 29, p.window_right = 1 << 29;
  p.scale_log2 = 1.f / sqrtf(float(pr.H)) * 1.4426950408889634f;
  p.flags = (pr.causal ? FLASH_FLAG_CAUSAL : 0) | (pr.bottom_right ? FLASH_FLAG_BOTTOM_RIGHT : 0) | (pr.window_left >= 0 ? FLASH_FLAG_WINDOW : 0);
  p.rows_total = pr.B * pr.T * pr.N;
  return p;
}
// HARNESS_PDL=1: the TMA kernels and their combine launched as programmatic dependents (each may start
// while the one before finishes, and waits in griddepcontrol.wait for its writes)
static bool pdl() {
  static const int on = getenv("HARNESS_PDL") && atoi(getenv("HARNESS_PDL")) > 0;
  return on;
}
static void launch(const Variant& v, const DecodeParams& p, cudaStream_t s = 0) {
  if (v.regs) {
    const bool whole = p.block_size % REGS_KEYS == 0 && !(p.flags & FLASH_FLAG_WINDOW) && !p.kv_offsets;
    (whole ? v.split : v.split_general)<<<dim3(p.splits, 1, p.B * p.K), v.threads, v.smem, s>>>(p);
    if (p.splits > 1) v.combine<<<(p.rows_total + 3) / 4, 128, 0, s>>>(p);
    return;
  }
  if (v.persist) {  // p.splits is the grid (P); the combine always runs
    v.split<<<p.splits, v.threads, v.smem, s>>>(p);
    v.combine<<<(p.rows_total + 3) / 4, 128, 0, s>>>(p);
    return;
  }
  const int tiles = (p.T * p.group + 15) / 16, groups = (tiles + v.rt - 1) / v.rt;
  if (v.split_tma) {
    const auto maps = tma_maps(p, v.tk, v.group);
    const dim3 grid(p.splits * v.rowgroups, p.K / v.hb, p.B);
    if (pdl()) {
      cudaLaunchConfig_t cfg{};
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeProgrammaticStreamSerialization, attr.val.programmaticStreamSerializationAllowed = 1;
      cfg.gridDim = grid, cfg.blockDim = dim3(v.threads), cfg.dynamicSmemBytes = v.smem, cfg.stream = s;
      cfg.attrs = &attr, cfg.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&cfg, v.split_tma, p, maps.first, maps.second));
      if (p.splits > 1) {
        cfg.gridDim = dim3((p.rows_total + 3) / 4), cfg.blockDim = dim3(128), cfg.dynamicSmemBytes = 0;
        CHECK(cudaLaunchKernelEx(&cfg, v.combine, p));
      }
      return;
    }
    v.split_tma<<<grid, v.threads, v.smem, s>>>(p, maps.first, maps.second);
  } else if (v.hb)
    v.split<<<dim3(p.splits, p.K / v.hb, p.B), v.threads, v.smem, s>>>(p);
  else
    v.split<<<dim3(p.splits, groups, p.B * p.K), DEC_THREADS, v.smem, s>>>(p);
  if (p.splits > 1) v.combine<<<(p.rows_total + 3) / 4, 128, 0, s>>>(p);
}

// float reference: O and lse (natural log) per (b, t, n).
static void reference(const Problem& pr, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                      const std::vector<uint16_t>& v, std::vector<float>& o, std::vector<float>& lse) {
  const int G = pr.N / pr.K;
  o.assign(size_t(pr.B) * pr.T * pr.N * pr.Hv, 0.f);
  lse.assign(size_t(pr.B) * pr.T * pr.N, -INFINITY);
  const float scale = 1.f / sqrtf(float(pr.H));
  std::vector<double> s(pr.S);
  for (int b = 0; b < pr.B; ++b)
    for (int t = 0; t < pr.T; ++t)
      for (int n = 0; n < pr.N; ++n) {
        const int Sb = pr.lens[b], diag = t + (pr.bottom_right ? Sb - pr.T : 0);
        int lo = 0, hi = Sb;
        if (pr.causal) hi = std::min(hi, diag + 1);
        if (pr.window_left >= 0) lo = std::max(lo, diag - pr.window_left);
        lo = std::min(std::max(lo, 0), Sb);
        hi = std::max(hi, lo);
        if (hi <= lo) continue;
        const int kh = n / G;
        double m = -INFINITY;
        for (int j = lo; j < hi; ++j) {
          double acc = 0;
          for (int h = 0; h < pr.H; ++h)
            acc += double(bf2f(q[((size_t(b) * pr.T + t) * pr.N + n) * pr.H + h])) *
                   bf2f(k[((size_t(b) * pr.S + j) * pr.K + kh) * pr.H + h]);
          s[j] = acc * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int j = lo; j < hi; ++j) l += (s[j] = exp(s[j] - m));
        float* out = &o[((size_t(b) * pr.T + t) * pr.N + n) * pr.Hv];
        for (int j = lo; j < hi; ++j)
          for (int h = 0; h < pr.Hv; ++h)
            out[h] += float(s[j] / l * bf2f(v[((size_t(b) * pr.S + j) * pr.K + kh) * pr.Hv + h]));
        lse[(size_t(b) * pr.T + t) * pr.N + n] = float(m + log(l));
      }
}

// Dense (B, S, K, H) host data → the device layout of `pr` (dense, or a pool with a shuffled table);
// unused slots (past a length) hold NaN, so a kernel that reads them fails.
static Device upload(const Problem& pr, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                     const std::vector<uint16_t>& v, int splits, int& max_blocks, std::mt19937& rng) {
  Device d{};
  const size_t rows = size_t(pr.B) * pr.T * pr.N;
  max_blocks = pr.bs ? (pr.S + pr.bs - 1) / pr.bs : 0;
  const int slots_total = pr.bs ? pr.B * max_blocks * pr.bs : pr.B * pr.S;
  std::vector<uint16_t> kd(size_t(slots_total) * pr.K * pr.H, 0x7fc0), vd(size_t(slots_total) * pr.K * pr.Hv, 0x7fc0);
  std::vector<int> table(size_t(pr.B) * std::max(max_blocks, 1));
  std::vector<int> perm(pr.B * std::max(max_blocks, 1));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int b = 0; b < pr.B; ++b) {
    for (int i = 0; i < max_blocks; ++i) table[size_t(b) * max_blocks + i] = perm[size_t(b) * max_blocks + i];
    for (int j = 0; j < pr.lens[b]; ++j) {
      const size_t slot = pr.bs ? size_t(table[size_t(b) * max_blocks + j / pr.bs]) * pr.bs + j % pr.bs : size_t(b) * pr.S + j;
      memcpy(&kd[slot * pr.K * pr.H], &k[(size_t(b) * pr.S + j) * pr.K * pr.H], pr.K * pr.H * 2);
      memcpy(&vd[slot * pr.K * pr.Hv], &v[(size_t(b) * pr.S + j) * pr.K * pr.Hv], pr.K * pr.Hv * 2);
    }
  }
  auto put = [](void** dst, const void* src, size_t bytes) {
    CHECK(cudaMalloc(dst, std::max<size_t>(bytes, 16)));
    CHECK(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
  };
  put((void**)&d.q, q.data(), q.size() * 2);
  put((void**)&d.k, kd.data(), kd.size() * 2);
  put((void**)&d.v, vd.data(), vd.size() * 2);
  put((void**)&d.table, table.data(), table.size() * 4);
  put((void**)&d.lens, pr.lens.data(), pr.B * 4);
  CHECK(cudaMalloc(&d.o, rows * pr.Hv * 2 + 16));
  CHECK(cudaMemset(d.o, 0xff, rows * pr.Hv * 2));  // NaN: an element nobody writes fails
  CHECK(cudaMalloc(&d.lse, rows * 4 + 16));
  CHECK(cudaMalloc(&d.opart, size_t(splits) * rows * 128 * 4 + 16));
  CHECK(cudaMalloc(&d.lpart, size_t(splits) * rows * 4 + 16));
  return d;
}
static void release(Device& d) {
  for (void* x : {(void*)d.q, (void*)d.k, (void*)d.v, (void*)d.o, (void*)d.lse, (void*)d.opart, (void*)d.lpart,
                  (void*)d.table, (void*)d.lens})
    cudaFree(x);
}

static int check(bool quick, bool heads_only, int max_cases) {
  auto vs = variants();
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal;
  struct Case {
    const char* name;
    Problem pr;
  };
  std::vector<Case> cases = {
      {"GQA 4:1 ragged 1000/1/0/517", {4, 1, 1000, 8, 2, 128, 128, 0, {1000, 1, 0, 517}}},
      {"MQA N=32 S=3000", {2, 1, 3000, 32, 1, 128, 128, 0, {3000, 2963}}},
      {"MQA N=16 T=3 causal", {2, 3, 1500, 16, 1, 128, 128, 0, {1500, 1441}, -1, true}},
      {"K=8 N=32 S=4100", {3, 1, 4100, 32, 8, 128, 128, 0, {4100, 64, 65}}},
      {"K=8 ragged 0/2000/1/333", {4, 1, 2000, 32, 8, 128, 128, 0, {0, 2000, 1, 333}}},
      {"H=72 Hv=40", {2, 1, 700, 4, 2, 72, 40, 0, {700, 663}}},
      {"window 64 T=2", {2, 2, 500, 4, 1, 128, 128, 0, {500, 3}, 64, true}},
      {"window past the last key", {1, 12, 8, 4, 1, 128, 128, 0, {8}, 0, false, false}},
      {"NaN in V, window 10 T=2", {2, 2, 300, 8, 1, 128, 128, 0, {300, 250}, 10, true, true, true}},
      // NaN logits (FAST softmax drops them from the max; they must still reach l and O):
      // sequence 0's rows all see key 100 (tiles every row sees whole), and with a window only token 0
      // sees key len−12 of sequence 0
      {"NaN in K, MQA N=32", {2, 1, 700, 32, 1, 128, 128, 0, {700, 650}, -1, false, true, false, 100}},
      {"NaN in K, window 10 T=2", {2, 2, 300, 8, 1, 128, 128, 0, {300, 250}, 10, true, true, false, 288}},
  };
  int failures = 0, runs = 0;
  if (max_cases < int(cases.size())) cases.resize(max_cases);
  for (auto& c : cases)
    for (int bs : {0, 16, 64}) {
      if (quick && bs == 64) continue;
      Problem pr = c.pr;
      pr.bs = bs;
      const int G = pr.N / pr.K;
      std::vector<uint16_t> q(size_t(pr.B) * pr.T * pr.N * pr.H), k(size_t(pr.B) * pr.S * pr.K * pr.H),
          v(size_t(pr.B) * pr.S * pr.K * pr.Hv);
      for (auto* x : {&q, &k, &v})
        for (auto& e : *x) e = f2bf(normal(rng));
      if (pr.nan_v)  // token 1 alone sees key len−1, token 0 alone len−12, nobody keys 0…199
        for (int b = 0; b < pr.B; ++b)
          for (int kh = 0; kh < pr.K; ++kh) {
            auto at = [&](int j, int col) -> uint16_t& { return v[((size_t(b) * pr.S + j) * pr.K + kh) * pr.Hv + col]; };
            at(pr.lens[b] - 1, 3) = at(pr.lens[b] - 12, 7) = 0x7fc0;
            for (int j = 0; j < 200; ++j) at(j, 9) = 0x7fc0;
          }
      if (pr.nan_k >= 0)
        for (int kh = 0; kh < pr.K; ++kh) k[(size_t(pr.nan_k) * pr.K + kh) * pr.H] = 0x7fc0;  // b = 0
      std::vector<float> ro, rl;
      reference(pr, q, k, v, ro, rl);
      const int d = pr.H == 72 ? 80 : 128, dv = pr.Hv == 40 ? 48 : 128;
      const int tiles = (pr.T * G + 15) / 16, natural = tiles <= 1 ? 1 : tiles <= 2 ? 2 : 4;
      for (const Variant& var : vs) {
        if (var.d != d || var.dv != dv || var.rt < natural) continue;
        if (var.hb && (pr.K % var.hb || pr.H % 16 || pr.Hv % 16)) continue;
        if (var.split_tma && !tma_takes(pr.H, pr.Hv, bs, var.group)) continue;
        if (var.loadonly) continue;
        // the kept ws/tma/regs variants alone
        if (getenv("HARNESS_ONLY") && *getenv("HARNESS_ONLY") && !var.ws && !var.regs) continue;
        // the regs kernel: 128-wide heads, and no NaN/Inf in V where some rows see a key and others not
        if (var.regs && (pr.H != 128 || pr.Hv != 128 || pr.nan_v)) continue;
        if (heads_only && !var.hb) continue;
        // persistent: the grid instead (SMs × occupancy; 7 blocks, several per item; 300, past the tiles of
        // the small cases, so blocks with no tiles exist)
        const std::vector<int> grid_list = var.persist ? std::vector<int>{var.persist, 7, 300} : std::vector<int>{1, 3, 17};
        for (int splits : grid_list) {
          if (quick && splits != (var.persist ? 7 : 3)) continue;
          int max_blocks = 0;
          Device dev = upload(pr, q, k, v, splits, max_blocks, rng);
          const DecodeParams p = params(pr, dev, splits, max_blocks);
          launch(var, p);
          cudaError_t e = cudaDeviceSynchronize();
          ++runs;
          if (e != cudaSuccess) {
            printf("FAIL %-28s bs=%-2d rt=%d %s splits=%-2d: %s\n", c.name, bs, var.rt, var.name(), splits,
                   cudaGetErrorString(e));
            return 1 + failures;  // the context is gone
          }
          const size_t rows = size_t(pr.B) * pr.T * pr.N;
          std::vector<uint16_t> o(rows * pr.Hv);
          std::vector<float> lse(rows);
          CHECK(cudaMemcpy(o.data(), dev.o, o.size() * 2, cudaMemcpyDeviceToHost));
          CHECK(cudaMemcpy(lse.data(), dev.lse, rows * 4, cudaMemcpyDeviceToHost));
          double err = 0, lerr = 0;
          for (size_t i = 0; i < o.size(); ++i) {
            const float x = bf2f(o[i]);
            err = std::max(err, std::isnan(x) || std::isnan(ro[i]) ? (std::isnan(x) == std::isnan(ro[i]) ? 0.0 : INFINITY)
                                                           : double(fabsf(x - ro[i])));
          }
          for (size_t i = 0; i < rows; ++i)
            lerr = std::max(lerr, std::isnan(rl[i]) || std::isnan(lse[i])
                                      ? (std::isnan(rl[i]) == std::isnan(lse[i]) ? 0.0 : INFINITY)  // a NaN on one side only
                                  : std::isinf(rl[i]) ? (std::isinf(lse[i]) && lse[i] < 0 ? 0.0 : INFINITY)
                                                      : double(fabsf(lse[i] - rl[i])));
          const bool ok = err < 2e-2 && lerr < 1e-2;
          if (!ok) ++failures;
          printf("%s %-28s bs=%-2d rt=%d %-16s %s=%-2d max|dO|=%.2e max|dlse|=%.2e\n", ok ? "ok  " : "FAIL", c.name,
                 bs, var.rt, var.name(), var.persist ? "grid" : "splits", splits, err, lerr);
          release(dev);
        }
      }
    }
  printf("check: %d runs, %d failures\n", runs, failures);
  return failures ? 1 : 0;
}

// The split count decode-splits.ts picks (its wave model), to print beside the measured best.
static int model_splits(long blocks, int tiles, int slots) {
  const int candidates[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
  auto cost = [&](int s) {
    const long waves = (blocks * s + slots - 1) / slots;
    return double(waves) * ((tiles + s - 1) / s + 1) + (s > 1 ? 2 + 0.125 * s : 0);
  };
  double least = INFINITY;
  for (int s : candidates)
    if (s <= tiles) least = std::min(least, cost(s));
  for (int s : candidates)
    if (s <= tiles && cost(s) <= least * 1.02) return s;
  return 1;
}

__global__ void fill_random(uint16_t* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = to_bits<false>((float(h & 0xffff) / 65536.f - 0.5f) * 3.f);
  }
}

// The median of 20 launches of `launch_once` (ms), each between the events a and b.
template <class F>
static float median_ms(F launch_once, cudaEvent_t a, cudaEvent_t b) {
  std::vector<float> t;
  for (int r = 0; r < 20; ++r) {
    cudaEventRecord(a);
    launch_once();
    cudaEventRecord(b);
    CHECK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static int bench(int argc, char** argv) {
  const bool sweep = argc > 2 && !strcmp(argv[2], "sweep");
  // `bench one B S K blockSize bulk|async|heads|<heads variant name>`: that configuration alone (the model's split count), for ncu.
  const bool one = argc > 7 && !strcmp(argv[2], "one");
  auto vs = variants();
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int N = 32, H = 128;
  struct Shape {
    int B, S, K;
  };
  std::vector<Shape> shapes = {{64, 16384, 8}, {8, 131072, 8}, {128, 8192, 8}, {64, 16384, 4}, {64, 16384, 1},
                               {1, 2048, 8},   {1, 8192, 8},   {1, 32768, 8},  {16, 8192, 8},  {1, 131072, 8}};
  if (one) shapes = {{atoi(argv[3]), atoi(argv[4]), atoi(argv[5])}};
  if (const char* list = getenv("HARNESS_SHAPES"); list && *list && !one) {  // B:S:K,… instead of the shapes above
    shapes.clear();
    for (const char* at = list; at && *at;) {
      Shape sh{};
      if (sscanf(at, "%d:%d:%d", &sh.B, &sh.S, &sh.K) == 3) shapes.push_back(sh);
      at = strchr(at, ',');
      at = at ? at + 1 : nullptr;
    }
  }
  const int one_bs = one ? atoi(argv[6]) : -1;
  const char* one_loader = one ? argv[7] : "";
  const size_t max_elems = size_t(128) * 8192 * 8 * H;  // the largest B·S·K·H above: 1 Gi elements, 2 GiB
  uint16_t *k, *v, *q, *o;
  float *lse, *opart, *lpart;
  int *table, *lens;
  CHECK(cudaMalloc(&k, max_elems * 2));
  CHECK(cudaMalloc(&v, max_elems * 2));
  fill_random<<<4096, 256>>>(k, max_elems, 1);
  fill_random<<<4096, 256>>>(v, max_elems, 2);
  CHECK(cudaMalloc(&q, size_t(128) * N * H * 2));
  fill_random<<<64, 256>>>(q, size_t(128) * N * H, 3);
  CHECK(cudaMalloc(&o, size_t(128) * N * H * 2));
  CHECK(cudaMalloc(&lse, size_t(128) * N * 4));
  // partial rows: 128 splits, or a persistent grid's DEC_PERSIST_MAX_BLOCKS slots, of B ≤ 128 × N rows
  CHECK(cudaMalloc(&opart, size_t(DEC_PERSIST_MAX_BLOCKS) * 128 * N * H * 4));
  CHECK(cudaMalloc(&lpart, size_t(DEC_PERSIST_MAX_BLOCKS) * 128 * N * 4));
  CHECK(cudaMalloc(&table, size_t(max_elems / (16 * H)) * 4));
  CHECK(cudaMalloc(&lens, 128 * 4));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::mt19937 rng(7);
  for (auto& v : vs)  // the persistent grids and producer-warp variants: the blocks the occupancy API fits on one SM
    if (v.ws || v.regs) printf("# %s: %d blocks/SM, %d threads, %d B shared\n", v.name(), v.per_sm, v.threads, v.smem);
  for (auto& v : vs)
    if (v.persist) printf("# %s: %d blocks/SM, grid %d, %d B shared\n", v.name(), v.per_sm, v.persist, v.smem);
  printf("%-6s %-7s %-2s %-8s %-16s %-3s %-6s %-9s %-8s %-6s\n", "B", "S", "K", "layout", "kernel", "rt", "splits",
         "ms", "GB/s", "model");
  for (const Shape& sh : shapes) {
    std::vector<int> l(sh.B, sh.S);
    CHECK(cudaMemcpy(lens, l.data(), sh.B * 4, cudaMemcpyHostToDevice));
    const double bytes = 2.0 * (2.0 * sh.B * sh.S * sh.K * H + 2.0 * sh.B * N * H);
    const int G = N / sh.K, tiles = (G + 15) / 16, rt = tiles <= 1 ? 1 : tiles <= 2 ? 2 : 4;
    const long blocks = long(sh.B) * sh.K * ((tiles + rt - 1) / rt);
    bool settle = true;
    for (int bs : {0, 16, 64}) {
      if (one && bs != one_bs) continue;
      if (bs) {  // a shuffled table over as many blocks as the cache holds
        const int mb = sh.S / bs;
        std::vector<int> perm(size_t(sh.B) * mb);
        for (size_t i = 0; i < perm.size(); ++i) perm[i] = int(i);
        std::shuffle(perm.begin(), perm.end(), rng);
        CHECK(cudaMemcpy(table, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
      }
      // the row-tile kernel's two loaders, then the heads kernel as decode.ts picks it and its alternatives
      std::vector<const Variant*> cands = {&pick(vs, 128, 128, rt, true), &pick(vs, 128, 128, rt, false)};
      const Variant* nat = natural_heads(vs, G, sh.K);
      if (nat) cands.push_back(nat);
      for (auto& v : vs)  // 4 heads a block (2 KB… 1 KB rows), and the natural one's other stage counts
        if (v.hb && &v != nat && sh.K % v.hb == 0 && v.rt == rt && v.d == 128 &&
            (v.ws || (!v.persist && (v.hb == 4 || (nat && v.hb == nat->hb && v.slices == nat->slices)))))
          if (!v.split_tma || tma_takes(128, 128, bs, v.group)) cands.push_back(&v);
      if (rt <= 2)
        for (auto& v : vs)
          if (v.regs) cands.push_back(&v);
      for (const Variant* vp : cands) {
        const Variant& var = *vp;
        if (one && strcmp(one_loader, var.name()) && !(var.hb && vp == nat && !strcmp(one_loader, "heads"))) continue;
        const int per_sm = var.ws || var.regs ? std::max(1, var.per_sm)
                                  : std::max(1, std::min(int(prop.sharedMemPerMultiprocessor / (var.smem + 1024)),
                                                         int(prop.regsPerMultiprocessor / (var.threads * 176))));
        const long var_blocks = var.hb ? long(sh.B) * (sh.K / var.hb) * var.rowgroups : blocks;
        const int var_tiles = (sh.S + var.tk - 1) / var.tk;
        const int model = var.persist ? var.persist : model_splits(var_blocks, var_tiles, prop.multiProcessorCount * per_sm);
        std::vector<int> list = {model};
        if (const char* extra = getenv("HARNESS_SPLITS"); extra && (var.ws || var.regs))  // more split counts: ws/tma/regs
          for (const char* at = extra; at && *at;) {
            const int s = atoi(at);
            if (s > 0 && s != model && s <= var_tiles) list.push_back(s);
            at = strchr(at, ',');
            at = at ? at + 1 : nullptr;
          }
        if (var.ws && per_sm > 1) {  // and the count for one block per SM, to see what the second block adds
          const int one_per_sm = model_splits(var_blocks, var_tiles, prop.multiProcessorCount);
          if (one_per_sm != model) list.push_back(one_per_sm);
        }
        if (sweep && bs != 64 && vp == nat)  // every split count of the heads kernel (the row-tile one: s6)
          for (int s : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128})
            if (s != model && s <= var_tiles) list.push_back(s);
        for (int splits : list) {
          DecodeParams p{};
          p.q = q, p.k = k, p.v = v, p.o = o, p.lse = nullptr, p.o_part = opart, p.lse_part = lpart;
          p.block_table = bs ? table : nullptr, p.kv_lens = lens;
          p.q_token = N * H, p.q_head = H, p.k_token = sh.K * H, p.k_head = H, p.v_token = sh.K * H, p.v_head = H;
          p.o_token = N * H, p.o_head = H;
          p.B = sh.B, p.T = 1, p.S = sh.S, p.N = N, p.K = sh.K, p.H = H, p.Hv = H, p.group = G;
          p.block_size = bs, p.max_blocks = bs ? sh.S / bs : 0, p.splits = splits;
          p.window_left = p.window_right = 1 << 29;
          p.scale_log2 = 0.127517f, p.flags = 0, p.rows_total = sh.B * N;
          // the first configuration of a shape settles ~150 ms (the H200 under its power cap), every
          // one warms 5 launches; the median of 20
          cudaEventRecord(a);
          launch(var, p);
          cudaEventRecord(b);
          CHECK(cudaEventSynchronize(b));
          float one;
          cudaEventElapsedTime(&one, a, b);
          const int warm = settle ? std::max(5, int(150 / std::max(one, 0.01f))) : 5;
          settle = false;
          for (int i = 0; i < warm; ++i) launch(var, p);
          const float ms = median_ms([&]() { launch(var, p); }, a, b);
          printf("%-6d %-7d %-2d %-8s %-16s %-3d %-6d %-9.4f %-8.0f %s\n", sh.B, sh.S, sh.K,
                 bs ? (bs == 16 ? "paged16" : "paged64") : "dense", var.name(), rt, splits, ms,
                 bytes / (ms * 1e-3) / 1e9, splits == model ? "*" : "");
          fflush(stdout);
        }
      }
    }
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}

// `harness ceiling`: the K=1 loader alone, two ways of spreading the cache over the SMs and two copy
// engines (the TMA decode kernel's loader alone reads ≤ 3.96 TB/s at B=64 S=16k). One producer
// warp (lane 0 issues a tile's copies), one warp releasing each stage; 128-key tiles of K and V (64 KB a
// stage), 3 stages. splits > 0: grid (splits, 1, B) as the library (a block = a key range of one
// sequence); splits = 0: a persistent grid whose blocks each stream an equal run of the B·S/128 tiles in
// sequence order. BULK: one 32 KB cp.async.bulk per K or V tile (dense, unswizzled) instead of four TMA
// tensor copies of 128-byte half rows. CW: warps that wait for and release each stage (the kernel has 8,
// and its producer is the last warp, as here): does their polling slow the producer?
template <bool BULK, int CW = 1>
__global__ void __launch_bounds__(32 * (CW + 1), 1) h_ceiling(const __grid_constant__ DecodeParams p,
                                                   const __grid_constant__ TmaDesc kmap,
                                                   const __grid_constant__ TmaDesc vmap, int splits, int dup) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int TK = 128, STAGES = 3, HALF = TK * 128, KB = TK * 256, STAGE = 2 * KB;
  const u32 full = smem_addr(smem), empty = full + 64;
  const u32 loop = (full + 128 + 1023) & ~1023u;
  const int tps = (p.S + TK - 1) / TK;
  const long total = long(p.B) * tps;
  long g0, g1;
  if (splits) {
    const int per = (tps + splits - 1) / splits, b = blockIdx.z, x = blockIdx.x / dup;
    g0 = long(b) * tps + imin(x * per, tps), g1 = long(b) * tps + imin(x * per + per, tps);
  } else {
    g0 = total * blockIdx.x / gridDim.x, g1 = total * (blockIdx.x + 1) / gridDim.x;
  }
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES; ++s) dec_mbar_init(full + s * 8, 1), dec_mbar_init(empty + s * 8, CW);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (long g = g0; g < g1; ++g) {
    const int n = int(g - g0), stage = n % STAGES;
    const u32 bar = full + stage * 8, base = loop + stage * STAGE;
    if (warp == CW) {
      if (n >= STAGES) ws_wait(empty + stage * 8, (n / STAGES - 1) & 1);
      if (lane == 0) {
        const int b = int(g / tps), key0 = int(g % tps) * TK;
        dec_mbar_arrive_expect_tx(bar, 2 * KB);
        if (BULK) {
          bulk_row_copy(base, p.k + (long(b) * p.S + key0) * p.k_token, KB, bar);
          bulk_row_copy(base + KB, p.v + (long(b) * p.S + key0) * p.v_token, KB, bar);
        } else {
          for (int h = 0; h < 2; ++h) {
            tma_load_4d(base + h * HALF, &kmap, bar, h * 64, key0, 0, b);
            tma_load_4d(base + KB + h * HALF, &vmap, bar, h * 64, key0, 0, b);
          }
        }
      }
      __syncwarp();
    } else {
      ws_wait(bar, (n / STAGES) & 1);
      __syncwarp();
      if (lane == 0) dec_mbar_arrive(empty + stage * 8);
    }
  }
}

// Times h_ceiling at K=1 (dense, N=32 rows' worth of Q and O counted as the decode bench does) for
// HARNESS_SHAPES (B:S:1), library grids (splits 1, 2, 4) and persistent grids of 128, 132, 264 blocks.
static int ceiling() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int H = 128, N = 32;
  std::vector<std::pair<int, int>> shapes = {{64, 16384}, {128, 8192}, {8, 131072}};
  const size_t max_elems = size_t(128) * 8192 * H;
  uint16_t *k, *v;
  CHECK(cudaMalloc(&k, max_elems * 2));
  CHECK(cudaMalloc(&v, max_elems * 2));
  fill_random<<<4096, 256>>>(k, max_elems, 1);
  fill_random<<<4096, 256>>>(v, max_elems, 2);
  const int smem = 128 + 1024 + 3 * 65536;
  for (auto fn : {h_ceiling<false>, h_ceiling<true>, h_ceiling<false, 8>}) {
    CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  }
  const char* l2 = getenv("HARNESS_L2");
  printf("# ceiling: %d SMs, L2 promotion %s\n", prop.multiProcessorCount, l2 ? l2 : "256");
  printf("%-6s %-7s %-5s %-12s %-9s %-8s\n", "B", "S", "copy", "grid", "ms", "GB/s");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (const auto& shape : shapes) {
    const int B = shape.first, S = shape.second;
    DecodeParams p{};
    p.k = k, p.v = v, p.k_token = H, p.k_head = H, p.v_token = H, p.v_head = H;
    p.B = B, p.S = S, p.K = 1, p.H = H, p.Hv = H, p.N = N, p.T = 1;
    const auto maps = tma_maps(p, 128, 0);
    const double bytes = 2.0 * (2.0 * B * S * H + 2.0 * B * N * H);
    for (int copy = 0; copy < 3; ++copy)  // TMA, bulk, TMA with 8 releasing warps (tma8)
      for (int grid : {-1, -2, -4, 128, 132, 264, -1001, -1002}) {  // negative: library grid of that many splits
        // (−1000·dup − splits: each block read by dup blocks, adjacent in x: the row groups' second read)
        const int dup = grid < -1000 ? 2 : 1, sp = grid < -1000 ? -grid - 1000 : -grid;
        auto fn = copy == 1 ? h_ceiling<true> : copy == 2 ? h_ceiling<false, 8> : h_ceiling<false>;
        const int threads = copy == 2 ? 288 : 64;
        auto run = [&]() {
          if (grid < 0)
            fn<<<dim3(sp * dup, 1, B), threads, smem>>>(p, maps.first, maps.second, sp, dup);
          else
            fn<<<grid, threads, smem>>>(p, maps.first, maps.second, 0, 1);
        };
        for (int i = 0; i < 200; ++i) run();  // settle the clocks under the power cap
        const float ms = median_ms(run, a, b);
        char g[16];
        if (dup > 1)
          snprintf(g, sizeof g, "splits%d.dup%d", sp, dup);
        else
          snprintf(g, sizeof g, grid < 0 ? "splits%d" : "persist%d", grid < 0 ? sp : grid);
        printf("%-6d %-7d %-5s %-12s %-9.4f %-8.0f\n", B, S, copy == 1 ? "bulk" : copy == 2 ? "tma8" : "tma", g, ms,
               bytes / (ms * 1e-3) / 1e9);
        fflush(stdout);
      }
  }
  CHECK(cudaDeviceSynchronize());
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "check"))
    return check(argc > 2 && !strcmp(argv[2], "quick"), argc > 3 && !strcmp(argv[3], "heads"),
                 argc > 4 ? atoi(argv[4]) : 1 << 30);
  if (argc > 1 && !strcmp(argv[1], "bench")) return bench(argc, argv);
  if (argc > 1 && !strcmp(argv[1], "ceiling")) return ceiling();
  fprintf(stderr, "usage: harness check [quick [heads [cases]]] | bench [sweep | one B S K blockSize bulk|async|heads]\n");
  return 2;
}
