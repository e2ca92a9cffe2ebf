// What reading alone reaches on this GPU, by the bytes one call reads: the ceiling a decode kernel's GB/s
// sits under at issue 16's sizes (a K=1 cache of 1M tokens, H=128, bf16, is 512 MiB of K and V).
//
// Why: K=1 paged decode at 1M tokens reads 3.9 (block 16) to 4.1 (block 64) TB/s and dense 4.26, against
// issue 16's goal of 4.3; each call carries ~8–14 µs of fixed time (launch gap, ramp, tail), and the kernel's
// TMA loader alone (the library's copies and grid, no arithmetic) reads 4.14–4.23 TB/s at that size.
// This asks the same of the simplest readers there are, so the goal can be set against what the GPU does:
//   ldg    every thread streams 16-byte loads (ld.global.nc.L1::no_allocate), grid-stride, 8 in flight a thread;
//   bulk   one thread a CTA keeps STAGES stages of 64 KiB in flight with cp.async.bulk copies of CHUNK bytes
//          (the TMA engine, as the decode kernel's producer: 4 KiB is a 16-row page of K or V at H=128 bf16,
//          16 KiB a 64-row page), chunks in an order: `in order`; `random` (a pool handed out at random, as
//          decode-bench's shuffled tables); `random in 2M` (shuffled only inside each 2 MiB: what the GPU's
//          large pages and their TLB see as in order); `kvcache 64` (sequence s's page j is pool block j·64 + s,
//          what KVCache's free list gives 64 sequences that grow a token at a time);
//   ldg 4K the plain loads over 4 KiB chunks in the same orders (a warp a chunk, 8 loads a lane in flight);
//   lsu 4K the bulk reader's stages (3 × 64 KiB a CTA, one CTA a SM) filled by W warps of 16-byte cp.async
//          (the load/store path, as ldg) instead of the TMA engine, each thread's copies completing on the stage's
//          mbarrier (cp.async.mbarrier.arrive.noinc): what a decode loader on that path could read.
// Each launch reads the whole buffer once; 20 launches back to back between two CUDA events (as decode-bench),
// median of 15 such windows after 3 warm ones; GB/s = bytes / (time / 20). A least-squares line through the sizes
// gives each reader's fixed µs a launch and its marginal rate.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling benchmarks/harnesses/hbm-read-ceiling.cu
//   /tmp/read-ceiling [MiB ...]        (default: 128 256 512 1024 2048 4096)
//   /tmp/read-ceiling --in-flight      (scattered 4 KiB chunks against the bytes in flight a SM: in_flight below)
//   /tmp/read-ceiling --hybrid         (the TMA engine and plain loads at once, each a share of the chunks: hybrid)
//   /tmp/read-ceiling --staged         (stages filled through registers by producer warps, and partly by TMA: staged)
//   /tmp/read-ceiling --dynamic        (the bulk reader's stages handed out statically or claimed from a counter)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// A value no sum of this buffer's words reaches in practice: the write that keeps the loads alive.
constexpr unsigned MAGIC = 0x9e3779b9u;

__global__ void __launch_bounds__(512) read_ldg(const uint4* __restrict__ src, size_t n, unsigned* sink) {
  constexpr int UNROLL = 8;
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(src + i + u * stride));
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == MAGIC) *sink = acc;
}

// A warp a 4 KiB chunk (lane ℓ: 16 bytes at ℓ + 32u, u < 8, all in flight), chunks warp, warp + warps, …
__global__ void __launch_bounds__(512) read_ldg_chunks(const unsigned char* __restrict__ src,
                                                       const int* __restrict__ order, long long chunks, unsigned* sink) {
  constexpr int PER_LANE = 4096 / 512;
  const int lane = threadIdx.x % 32;
  const long long warps = (long long)gridDim.x * blockDim.x / 32;
  unsigned acc = 0;
  for (long long c = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; c < chunks; c += warps) {
    const uint4* chunk = reinterpret_cast<const uint4*>(src + (size_t)order[c] * 4096);
    uint4 v[PER_LANE];
#pragma unroll
    for (int u = 0; u < PER_LANE; ++u)
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(chunk + lane + 32 * u));
#pragma unroll
    for (int u = 0; u < PER_LANE; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == MAGIC) *sink = acc;
}

constexpr int STAGES = 3;
constexpr unsigned STAGE_BYTES = 64u << 10;

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Until the barrier at `bar` has completed the phase of parity `phase`.
__device__ __forceinline__ void wait_phase(unsigned bar, unsigned phase) {
  asm volatile("{\n .reg .pred p;\n W%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W%=;\n}" ::"r"(bar),
               "r"(phase)
               : "memory");
}

// The readers' ring of STAGES stages over loads lo … hi − 1: the first STAGES issued, then each waited for, read
// (`read(stage)`, one word into the sum that keeps the loads alive) and refilled with the load STAGES ahead.
template <int STAGES, class Issue, class Read>
__device__ __forceinline__ unsigned stage_ring(long long lo, long long hi, const unsigned long long* full, Issue issue,
                                               Read read) {
  for (long long l = lo; l < hi && l < lo + STAGES; ++l) issue(l, int(l - lo));
  unsigned acc = 0;
  for (long long l = lo; l < hi; ++l) {
    const int s = int((l - lo) % STAGES);
    wait_phase(smem_u32(&full[s]), unsigned((l - lo) / STAGES) & 1u);
    acc ^= read(s);
    if (l + STAGES < hi) issue(l + STAGES, s);
  }
  return acc;
}

// One thread: stage s of load i holds chunks i·per_stage … of this CTA's range; `order` (or null: in order)
// maps a logical chunk to the one read. Waits stage s's barrier, reads one word of it, refills it.
template <int STAGES = ::STAGES, unsigned STAGE_BYTES = ::STAGE_BYTES>
__global__ void __launch_bounds__(32) read_bulk(const unsigned char* __restrict__ src, const int* __restrict__ order,
                                                 long long chunks, unsigned chunk_bytes, unsigned* sink,
                                                 unsigned long long* times = nullptr) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  if (threadIdx.x != 0) return;
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const int per_stage = STAGE_BYTES / chunk_bytes;
  const long long loads_total = (chunks + per_stage - 1) / per_stage;
  const long long lo = loads_total * blockIdx.x / gridDim.x, hi = loads_total * (blockIdx.x + 1) / gridDim.x;
  for (int s = 0; s < STAGES; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto issue = [&](long long load, int s) {
    const long long c0 = load * per_stage;
    const int n = int(chunks - c0 < per_stage ? chunks - c0 : per_stage);
    const unsigned bar = smem_u32(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n * chunk_bytes) : "memory");
    for (int j = 0; j < n; ++j) {
      const long long c = order ? order[c0 + j] : c0 + j;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_u32(smem + s * STAGE_BYTES + j * chunk_bytes)),
                   "l"(src + c * chunk_bytes), "r"(chunk_bytes), "r"(bar)
                   : "memory");
    }
  };
  const unsigned acc = stage_ring<STAGES>(lo, hi, full, issue, [&](int s) {
    const unsigned word = *reinterpret_cast<volatile unsigned*>(smem + s * STAGE_BYTES);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the read above before the copies that refill
    return word;
  });
  if (acc == MAGIC) *sink = acc;
  if (times) {  // this CTA's start and end (%globaltimer, ns): the tail's spread (`--dynamic`)
    unsigned long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    times[blockIdx.x] = t0, times[gridDim.x + blockIdx.x] = t1;
  }
}

// W warps: stage s of load l holds chunks l·16 … (4 KiB each) of this CTA's share, thread t copying the 16-byte
// pieces t, t + 32W, … of the stage; each thread waits the stage, reads one of its own pieces, refills it.
__global__ void __launch_bounds__(256) read_lsu(const unsigned char* __restrict__ src, const int* __restrict__ order,
                                                long long chunks, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  constexpr int PER_STAGE = STAGE_BYTES / 4096, PIECES = STAGE_BYTES / 16;
  const long long loads_total = (chunks + PER_STAGE - 1) / PER_STAGE;
  const long long lo = loads_total * blockIdx.x / gridDim.x, hi = loads_total * (blockIdx.x + 1) / gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&full[s])), "r"(blockDim.x));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](long long load, int s) {
    const long long c0 = load * PER_STAGE;
    for (int q = threadIdx.x; q < PIECES; q += blockDim.x) {
      const long long c = c0 + q / 256;
      if (c < chunks) {
        const unsigned char* from = src + (size_t)(order ? order[c] : c) * 4096 + (q % 256) * 16;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(smem + s * STAGE_BYTES + q * 16)),
                     "l"(from)
                     : "memory");
      }
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(&full[s])) : "memory");
  };
  const unsigned acc = stage_ring<STAGES>(lo, hi, full, issue, [&](int s) {
    return *reinterpret_cast<volatile unsigned*>(smem + s * STAGE_BYTES + threadIdx.x * 16);
  });
  if (acc == MAGIC) *sink = acc;
}

// The bulk reader with dynamic scheduling: CTAs claim stages (loads of 64 KiB: 16 chunks) from a counter, one at a
// time, the next claim's atomic issued as soon as the last claim is used (its latency hides behind the wait), so a CTA
// the memory system serves faster reads more of the buffer and every CTA ends within about a stage of the others.
// `ctr`: {next load, CTAs done}, both zero before a launch; the last CTA to finish sets them back to zero for the next
// launch in the stream. `times` (or null): each CTA's start and end (%globaltimer, ns) for the tail's spread.
template <int STAGES = ::STAGES, unsigned STAGE_BYTES = ::STAGE_BYTES>
__global__ void __launch_bounds__(32) read_bulk_dynamic(const unsigned char* __restrict__ src,
                                                         const int* __restrict__ order, long long chunks,
                                                         unsigned chunk_bytes, unsigned* sink, unsigned* ctr,
                                                         unsigned long long* times) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[STAGES];
  if (threadIdx.x != 0) return;
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const int per_stage = STAGE_BYTES / chunk_bytes;
  const unsigned loads_total = unsigned((chunks + per_stage - 1) / per_stage);
  for (int s = 0; s < STAGES; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&full[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto issue = [&](long long load, int s) {
    const long long c0 = load * per_stage;
    const int n = int(chunks - c0 < per_stage ? chunks - c0 : per_stage);
    const unsigned bar = smem_u32(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n * chunk_bytes) : "memory");
    for (int j = 0; j < n; ++j) {
      const long long c = order ? order[c0 + j] : c0 + j;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_u32(smem + s * STAGE_BYTES + j * chunk_bytes)),
                   "l"(src + c * chunk_bytes), "r"(chunk_bytes), "r"(bar)
                   : "memory");
    }
  };
  long long issued = 0;
  unsigned next = atomicAdd(ctr, 1u);
  while (issued < STAGES && next < loads_total) {
    issue(next, int(issued));
    ++issued;
    next = atomicAdd(ctr, 1u);
  }
  unsigned acc = 0;
  for (long long n = 0; n < issued; ++n) {
    const int s = int(n % STAGES);
    wait_phase(smem_u32(&full[s]), unsigned(n / STAGES) & 1u);
    acc ^= *reinterpret_cast<volatile unsigned*>(smem + s * STAGE_BYTES);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (next < loads_total) {
      issue(next, s);
      ++issued;
      next = atomicAdd(ctr, 1u);
    }
  }
  if (acc == MAGIC) *sink = acc;
  unsigned long long t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  if (times) times[blockIdx.x] = t0, times[gridDim.x + blockIdx.x] = t1;
  __threadfence();
  if (atomicAdd(ctr + 1, 1u) == gridDim.x - 1) {  // every CTA has made its last claim: reset for the next launch
    atomicExch(ctr, 0u);
    atomicExch(ctr + 1, 0u);
  }
}

struct Timing {
  float median_ms, spread;
};

template <class Launch>
Timing time_windows(Launch launch) {
  constexpr int CALLS = 20, WINDOWS = 15, WARM = 3;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int w = 0; w < WARM + WINDOWS; ++w) {
    CHECK(cudaEventRecord(a));
    for (int c = 0; c < CALLS; ++c) launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (w >= WARM) ms.push_back(t / CALLS);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return {ms[ms.size() / 2], (ms.back() - ms.front()) / ms[ms.size() / 2]};
}

enum class Order { InOrder, Random, Random2M, KvCache64 };
const char* order_name(Order o) {
  switch (o) {
    case Order::InOrder: return "in order";
    case Order::Random: return "random";
    case Order::Random2M: return "random in 2M";
    case Order::KvCache64: return "kvcache 64";
  }
  return "?";
}

// The chunk each logical chunk reads, for `chunks` chunks of `chunk_bytes` (Order's comment at the top).
std::vector<int> make_order(Order o, long long chunks, unsigned chunk_bytes, std::mt19937& rng) {
  std::vector<int> order(chunks);
  std::iota(order.begin(), order.end(), 0);
  if (o == Order::Random) std::shuffle(order.begin(), order.end(), rng);
  if (o == Order::Random2M) {
    const long long window = (2 << 20) / chunk_bytes;
    for (long long w = 0; w < chunks; w += window)
      std::shuffle(order.begin() + w, order.begin() + std::min(chunks, w + window), rng);
  }
  if (o == Order::KvCache64) {
    const long long per_seq = chunks / 64;
    for (long long c = 0; c < per_seq * 64; ++c) order[c] = int((c % per_seq) * 64 + c / per_seq);
  }
  return order;
}

struct Row {
  std::string reader;
  double mib, us, gbs;
};

// `--in-flight`: scattered 4 KiB chunks against the bytes a SM keeps in flight, at 512 MiB and 1 GiB: the bulk reader
// with its 192 KiB as 3 × 64, 6 × 32 or 12 × 16 KiB stages (a stage is refilled only when all of it has landed, so
// finer stages keep more of it in flight) and 13 × 16 KiB (208 KiB), and plain loads from 1–4 blocks of 512 a SM
// (64–256 KiB in flight). Why: one run read scattered 4 KiB pages at 4.44 TB/s with plain loads (256
// KiB in flight a SM) and 3.98 with the bulk reader (≤ 192 KiB): if the bytes in flight are what costs, a decode
// kernel's finer stages would recover some of it.
// One row: the reader, the bytes a launch reads, its median µs and GB/s and the windows' spread; returns the GB/s.
double print_row(const std::string& reader, double mib, Timing t) {
  const double us = t.median_ms * 1e3, gbs = mib * 1048576.0 / (us * 1e-6) / 1e9;
  std::printf("%-34s %7.0f MiB %9.1f us %7.0f GB/s  (spread %.1f%%)\n", reader.c_str(), mib, us, gbs, 100 * t.spread);
  std::fflush(stdout);
  return gbs;
}

// `body(mib, chunks, ord, order, tag)` for 4 KiB chunks of 512 MiB and 1 GiB, in order and random (make_order with
// `rng`): `order` the device table (the identity in order), `ord` the same or null in order (the bulk reader's and
// read_staged's convention), `tag` the order's name for the rows.
template <class Body>
void each_chunk_order(std::mt19937& rng, Body body) {
  for (double mib : {512.0, 1024.0}) {
    const long long chunks = (long long)(mib * 1048576.0) / 4096;
    int* order;
    CHECK(cudaMalloc(&order, chunks * sizeof(int)));
    for (Order o : {Order::InOrder, Order::Random}) {
      const std::vector<int> host = make_order(o, chunks, 4096, rng);
      CHECK(cudaMemcpy(order, host.data(), chunks * sizeof(int), cudaMemcpyHostToDevice));
      body(mib, chunks, o == Order::InOrder ? nullptr : (const int*)order, (const int*)order,
           std::string(" ") + order_name(o));
    }
    CHECK(cudaFree(order));
  }
}

template <int ST, unsigned SB>
void time_bulk(const char* name, const unsigned char* buf, const int* order, long long chunks, int ctas, unsigned* sink,
               double mib) {
  CHECK(cudaFuncSetAttribute((read_bulk<ST, SB>), cudaFuncAttributeMaxDynamicSharedMemorySize, ST * SB));
  print_row(name, mib, time_windows([&] { read_bulk<ST, SB><<<ctas, 32, ST * SB>>>(buf, order, chunks, 4096, sink); }));
}

int in_flight(const unsigned char* buf, unsigned* sink, int sms) {
  std::mt19937 rng(17);
  each_chunk_order(rng, [&](double mib, long long chunks, const int* ord, const int* order, const std::string& tag) {
    time_bulk<3, 65536>(("bulk 3x64K" + tag).c_str(), buf, ord, chunks, 128, sink, mib);
    time_bulk<6, 32768>(("bulk 6x32K" + tag).c_str(), buf, ord, chunks, 128, sink, mib);
    time_bulk<12, 16384>(("bulk 12x16K" + tag).c_str(), buf, ord, chunks, 128, sink, mib);
    time_bulk<13, 16384>(("bulk 13x16K" + tag).c_str(), buf, ord, chunks, 128, sink, mib);
    for (int per_sm = 1; per_sm <= 4; ++per_sm)
      print_row("ldg " + std::to_string(per_sm * 64) + "K in flight" + tag, mib,
                time_windows([&] { read_ldg_chunks<<<sms * per_sm, 512>>>(buf, order, chunks, sink); }));
  });
  return 0;
}

// `--hybrid`: scattered 4 KiB chunks of 512 MiB read by the bulk reader (one CTA a SM, 3 × 64 KiB) and the plain
// loads (1 or 2 blocks of 512 a SM: 64 / 128 KiB in flight) at the same time, on two streams, the bulk reader taking
// the first share f of the chunks. Why: the TMA engine reads scattered 4 KiB pages at ~3.95 TB/s and
// plain loads at 4.31–4.42, but a decode kernel whose warps load K and V into registers could not keep enough in
// flight beside its accumulators (calls 1–3: ≤ 3.3 TB/s loads alone). If the two paths add up, a kernel that copies
// part of each step by TMA into shared memory and loads the rest into registers is the next step.
int hybrid(const unsigned char* buf, unsigned* sink, int sms) {
  constexpr double MIB = 512;
  const long long chunks = (long long)(MIB * 1048576.0) / 4096;
  std::mt19937 rng(18);
  const std::vector<int> host = make_order(Order::Random, chunks, 4096, rng);
  int* order;
  CHECK(cudaMalloc(&order, chunks * sizeof(int)));
  CHECK(cudaMemcpy(order, host.data(), chunks * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaFuncSetAttribute((read_bulk<STAGES, STAGE_BYTES>), cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * STAGE_BYTES));
  cudaStream_t bulk_stream, ldg_stream;  // blocking streams: the timing events on the legacy stream wait for both
  CHECK(cudaStreamCreate(&bulk_stream));
  CHECK(cudaStreamCreate(&ldg_stream));
  for (int per_sm : {1, 2})
    for (double share : {0.0, 0.25, 0.375, 0.5, 0.75, 1.0}) {
      const long long tma_chunks = (long long)(chunks * share);
      char name[64];
      std::snprintf(name, sizeof name, "hybrid tma %.3f + ldg %dK", share, per_sm * 64);
      print_row(name, MIB, time_windows([&] {
                  if (tma_chunks > 0)
                    read_bulk<STAGES, STAGE_BYTES><<<sms, 32, STAGES * STAGE_BYTES, bulk_stream>>>(buf, order, tma_chunks,
                                                                                                4096, sink);
                  if (tma_chunks < chunks)
                    read_ldg_chunks<<<sms * per_sm, 512, 0, ldg_stream>>>(buf, order + tma_chunks, chunks - tma_chunks,
                                                                           sink);
                }));
    }
  CHECK(cudaStreamDestroy(bulk_stream));
  CHECK(cudaStreamDestroy(ldg_stream));
  CHECK(cudaFree(order));
  return 0;
}

// Register-staged stages: the bulk reader's ring (3 × 64 KiB a CTA, one CTA a SM, 16 chunks of 4 KiB a stage) filled
// by P producer warps that load their chunks into registers (ld.global.nc, as ldg) and store them into the stage, and
// by the TMA engine for the first T chunks of each stage (one thread's cp.async.bulk, as read_bulk); C consumer warps
// wait each stage's `full`, read a word and release it on `empty`, as a decode kernel's consumers would. Each
// producer warp holds CPW chunks a stage and two stages in registers (the next stage's loads are in flight while it
// waits for a free stage and stores this one): CPW · 2 · 4 KiB a warp; or, !DB, one (a stage's loads issued only once
// the last one's are stored): CPW · 4 KiB.
template <int P, int C, int T, int CPW, bool DB = true>
__global__ void __launch_bounds__((P + C) * 32, 1)
    read_staged(const unsigned char* __restrict__ src, const int* __restrict__ order, long long chunks, unsigned* sink) {
  static_assert(P * CPW + T == 16, "a stage is 16 chunks: T by TMA, P · CPW by the producer warps");
  constexpr int PER_STAGE = 16, N = CPW * 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const long long loads_total = (chunks + PER_STAGE - 1) / PER_STAGE;
  const long long lo = loads_total * blockIdx.x / gridDim.x, hi = loads_total * (blockIdx.x + 1) / gridDim.x;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&full[s])), "r"(P * 32 + (T > 0 ? 1 : 0)));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(&empty[s])), "r"(C));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp < P) {
    auto load = [&](long long l, uint4 (&r)[N]) {
#pragma unroll
      for (int i = 0; i < CPW; ++i) {
        const long long c = l * PER_STAGE + T + warp + P * i;
        if (c < chunks) {
          const uint4* chunk = reinterpret_cast<const uint4*>(src + (size_t)(order ? order[c] : c) * 4096);
#pragma unroll
          for (int u = 0; u < 8; ++u)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(r[i * 8 + u].x), "=r"(r[i * 8 + u].y), "=r"(r[i * 8 + u].z), "=r"(r[i * 8 + u].w)
                         : "l"(chunk + lane + 32 * u));
        }
      }
    };
    auto store = [&](long long l, const uint4 (&r)[N]) {
      const int s = int((l - lo) % STAGES);
      if (l - lo >= STAGES) wait_phase(smem_u32(&empty[s]), unsigned((l - lo) / STAGES - 1) & 1u);
      if (T > 0 && threadIdx.x == 0) {
        const long long c0 = l * PER_STAGE;
        const int n = int(chunks - c0 < T ? chunks - c0 : T);
        const unsigned bar = smem_u32(&full[s]);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"((n > 0 ? n : 0) * 4096)
                     : "memory");
        for (int j = 0; j < n; ++j)
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 4096, [%2];" ::"r"(
                           smem_u32(smem + s * STAGE_BYTES + j * 4096)),
                       "l"(src + (size_t)(order ? order[c0 + j] : c0 + j) * 4096), "r"(bar)
                       : "memory");
      }
#pragma unroll
      for (int i = 0; i < CPW; ++i) {
        const int j = T + warp + P * i;
        if (l * PER_STAGE + j < chunks)
#pragma unroll
          for (int u = 0; u < 8; ++u)
            asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};" ::"r"(
                             smem_u32(smem + s * STAGE_BYTES + j * 4096 + (lane + 32 * u) * 16)),
                         "r"(r[i * 8 + u].x), "r"(r[i * 8 + u].y), "r"(r[i * 8 + u].z), "r"(r[i * 8 + u].w)
                         : "memory");
      }
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(&full[s])) : "memory");
    };
    uint4 a[N], b[N];
    if constexpr (!DB)
      for (long long l = lo; l < hi; ++l) {
        load(l, a);
        store(l, a);
      }
    if (DB && lo < hi) load(lo, a);
    for (long long l = lo; DB && l < hi; l += 2) {
      if (l + 1 < hi) load(l + 1, b);
      store(l, a);
      if (l + 1 >= hi) break;
      if (l + 2 < hi) load(l + 2, a);
      store(l + 1, b);
    }
  } else {
    unsigned acc = 0;
    for (long long l = lo; l < hi; ++l) {
      const int s = int((l - lo) % STAGES);
      wait_phase(smem_u32(&full[s]), unsigned((l - lo) / STAGES) & 1u);
      acc ^= *reinterpret_cast<volatile unsigned*>(smem + s * STAGE_BYTES + (lane % 16) * 4096 + (warp % 8) * 512);
      __syncwarp();
      if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(&empty[s])) : "memory");
    }
    if (acc == MAGIC) *sink = acc;
  }
}

template <int P, int C, int T, int CPW, bool DB = true>
void time_staged(const unsigned char* buf, const int* order, long long chunks, int sms, unsigned* sink, double mib,
                 const std::string& tag) {
  CHECK(cudaFuncSetAttribute((read_staged<P, C, T, CPW, DB>), cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * STAGE_BYTES));
  char name[64];
  std::snprintf(name, sizeof name, "staged p%d c%d tma%d%s%s", P, C, T, DB ? "" : " single", tag.c_str());
  print_row(name, mib, time_windows([&] {
              read_staged<P, C, T, CPW, DB><<<sms, (P + C) * 32, STAGES * STAGE_BYTES>>>(buf, order, chunks, sink);
            }));
}

// `--staged`: scattered and ordered 4 KiB chunks at 512 MiB and 1 GiB through register-staged stages (read_staged),
// beside the bulk reader and the plain loads. Why: plain loads read scattered 4 KiB pages at 4.31–4.47
// TB/s and the TMA engine at 3.9–4.0, but every loader into shared memory measured so far (TMA, cp.async) reads like
// the TMA engine; loads into registers stored into the stage by producer warps were not tried. If they read like plain
// loads, a decode kernel's producer can be such warps with the consumers unchanged. Measured (benchmarks/results/
// 2026-12-03-register-filled-stages, 512 MiB random): 4189–4201 GB/s at best (8 warps + TMA 8, 12 + TMA 4) against 3888 for
// the bulk reader and 4238 / 4340 for plain loads with 64 / 128 KiB in flight; the decode kernel built that way read
// 0.52–0.94× of the library's and was removed.
int staged(const unsigned char* buf, unsigned* sink, int sms) {
  std::mt19937 rng(19);
  each_chunk_order(rng, [&](double mib, long long chunks, const int* ord, const int* order, const std::string& tag) {
    time_bulk<3, 65536>(("bulk 3x64K" + tag).c_str(), buf, ord, chunks, 128, sink, mib);
    for (int per_sm = 1; per_sm <= 2; ++per_sm)
      print_row("ldg " + std::to_string(per_sm * 64) + "K in flight" + tag, mib,
                time_windows([&] { read_ldg_chunks<<<sms * per_sm, 512>>>(buf, order, chunks, sink); }));
    time_staged<8, 4, 0, 2>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<16, 4, 0, 1>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<4, 4, 8, 2>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<8, 4, 8, 1>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<6, 4, 4, 2>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<12, 4, 4, 1>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<4, 4, 12, 1>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<8, 4, 0, 2, false>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<16, 4, 0, 1, false>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<4, 4, 8, 2, false>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<8, 4, 8, 1, false>(buf, ord, chunks, sms, sink, mib, tag);
    time_staged<8, 4, 0, 2>(buf, ord, chunks, 128, sink, mib, tag + " 128");
  });
  return 0;
}

// Fixed time and marginal rate of each reader: t = t0 + bytes / rate over every size it ran at (least squares).
void print_fits(const std::vector<Row>& rows) {
  std::printf("\n# reader: fixed us a launch, marginal GB/s (least squares over the sizes); GB/s at 512 MiB\n");
  std::vector<std::string> readers;
  for (const Row& r : rows)
    if (std::find(readers.begin(), readers.end(), r.reader) == readers.end()) readers.push_back(r.reader);
  for (const std::string& name : readers) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0, at512 = 0;
    for (const Row& r : rows)
      if (r.reader == name) {
        const double x = r.mib * 1048576.0 / 1e9;  // GB
        sx += x, sy += r.us, sxx += x * x, sxy += x * r.us, n += 1;
        if (r.mib == 512) at512 = r.gbs;
      }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), t0 = (sy - slope * sx) / n;
    std::printf("%-34s %6.1f us %7.0f GB/s   %7.0f GB/s\n", name.c_str(), t0, 1e6 / slope, at512);
  }
}

// `--dynamic`: the bulk reader (3 × 64 KiB stages a CTA, one CTA a SM) with its stages handed out statically (each CTA
// a fixed share of the buffer: read_bulk, 128 CTAs or one a SM; or 8 CTAs a SM, the block scheduler handing out the
// shares) or claimed from a counter (read_bulk_dynamic), over 4 and 16 KiB chunks in order and random at 512 MiB, 1 and
// 2 GiB, with each reader's fixed time and marginal rate; at 512 MiB, one launch of each with every CTA's start and end.
// Why: scattered 4 KiB chunks cost the static bulk reader ~10 µs of fixed time a launch against ~4 in
// order, with a marginal rate of 4.45 TB/s. If the fixed part is the tail (CTAs whose random
// pages the memory system serves slower end later, and the last few cannot keep HBM busy), a reader that balances its
// CTAs dynamically reads 512 MiB of scattered pages near 4.3 TB/s, and a decode kernel of that form (persistent CTAs
// claiming key ranges) is the next step for issue 16's K=1 goal; if not, the TMA engine's rate is what bounds it.
int dynamic_schedule(const unsigned char* buf, unsigned* sink, int sms) {
  unsigned* ctr;
  unsigned long long* times;
  CHECK(cudaMalloc(&ctr, 2 * sizeof(unsigned)));
  CHECK(cudaMemset(ctr, 0, 2 * sizeof(unsigned)));
  CHECK(cudaMalloc(&times, 2 * 8 * 4096 * sizeof(unsigned long long)));
  CHECK(cudaFuncSetAttribute((read_bulk<STAGES, STAGE_BYTES>), cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * STAGE_BYTES));
  CHECK(cudaFuncSetAttribute((read_bulk_dynamic<STAGES, STAGE_BYTES>), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             STAGES * STAGE_BYTES));
  // One launch with `times`: how long its CTAs ran and when they ended after the first one started.
  auto tail = [&](const std::string& name, int ctas, auto launch) {
    launch(times);
    CHECK(cudaDeviceSynchronize());
    std::vector<unsigned long long> t(2 * ctas);
    CHECK(cudaMemcpy(t.data(), times, t.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    const unsigned long long first = *std::min_element(t.begin(), t.begin() + ctas);
    std::vector<double> ends(ctas);
    double busy = 0;
    for (int c = 0; c < ctas; ++c) ends[c] = (t[ctas + c] - first) / 1e3, busy += (t[ctas + c] - t[c]) / 1e3 / ctas;
    std::sort(ends.begin(), ends.end());
    std::printf("  tail %-30s CTAs busy %.1f us on average; ends after the first start: first %.1f, median %.1f, "
                "last %.1f us\n",
                name.c_str(), busy, ends.front(), ends[ctas / 2], ends.back());
  };
  std::vector<Row> rows;
  std::mt19937 rng(21);
  for (unsigned chunk : {4096u, 16384u})
    for (double mib : {512.0, 1024.0, 2048.0}) {
      const long long chunks = (long long)(mib * 1048576.0) / chunk;
      int* order;
      CHECK(cudaMalloc(&order, chunks * sizeof(int)));
      for (Order o : {Order::InOrder, Order::Random}) {
        const std::vector<int> host = make_order(o, chunks, chunk, rng);
        CHECK(cudaMemcpy(order, host.data(), chunks * sizeof(int), cudaMemcpyHostToDevice));
        const int* ord = o == Order::InOrder ? nullptr : order;
        const std::string tag = " " + std::to_string(chunk >> 10) + "K " + order_name(o);
        auto add = [&](const std::string& reader, Timing t) {
          rows.push_back({reader, mib, t.median_ms * 1e3, print_row(reader, mib, t)});
        };
        for (int ctas : {128, sms, 8 * sms}) {
          auto launch = [&](unsigned long long* tm) {
            read_bulk<STAGES, STAGE_BYTES><<<ctas, 32, STAGES * STAGE_BYTES>>>(buf, ord, chunks, chunk, sink, tm);
          };
          const std::string name = "static " + std::to_string(ctas) + tag;
          add(name, time_windows([&] { launch(nullptr); }));
          if (mib == 512.0) tail(name, ctas, launch);
        }
        for (int ctas : {128, sms}) {
          auto launch = [&](unsigned long long* tm) {
            read_bulk_dynamic<STAGES, STAGE_BYTES><<<ctas, 32, STAGES * STAGE_BYTES>>>(buf, ord, chunks, chunk, sink, ctr,
                                                                                      tm);
          };
          const std::string name = "dynamic " + std::to_string(ctas) + tag;
          add(name, time_windows([&] { launch(nullptr); }));
          if (mib == 512.0) tail(name, ctas, launch);
        }
      }
      CHECK(cudaFree(order));
    }
  print_fits(rows);
  CHECK(cudaFree(ctr));
  CHECK(cudaFree(times));
  return 0;
}

int main(int argc, char** argv) {
  const bool flight = argc > 1 && std::string(argv[1]) == "--in-flight";
  const bool mixed = argc > 1 && std::string(argv[1]) == "--hybrid";
  const bool stage = argc > 1 && std::string(argv[1]) == "--staged";
  const bool dynamic = argc > 1 && std::string(argv[1]) == "--dynamic";
  std::vector<double> sizes_mib;
  for (int i = flight || mixed || stage || dynamic ? 2 : 1; i < argc; ++i) sizes_mib.push_back(std::atof(argv[i]));
  if (sizes_mib.empty()) sizes_mib = {128, 256, 512, 1024, 2048, 4096};
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("# %s, %d SMs, L2 %d MiB\n", prop.name, sms, prop.l2CacheSize >> 20);
  const size_t max_bytes =
      dynamic ? size_t(2048) << 20 : flight || mixed || stage ? size_t(1024) << 20 : size_t(*std::max_element(sizes_mib.begin(), sizes_mib.end()) * 1048576.0);
  unsigned char* buf;
  unsigned* sink;
  CHECK(cudaMalloc(&buf, max_bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 0x5a, max_bytes));
  if (flight) return in_flight(buf, sink, sms);
  if (mixed) return hybrid(buf, sink, sms);
  if (stage) return staged(buf, sink, sms);
  if (dynamic) return dynamic_schedule(buf, sink, sms);
  CHECK(cudaFuncSetAttribute((read_bulk<STAGES, STAGE_BYTES>), cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * STAGE_BYTES));
  CHECK(cudaFuncSetAttribute(read_lsu, cudaFuncAttributeMaxDynamicSharedMemorySize, STAGES * STAGE_BYTES));
  // Each size, chunk size and order has its own table of chunk indices (make_order), inside the size's bytes.
  std::vector<Row> rows;
  std::mt19937 rng(16);
  for (double mib : sizes_mib) {
    const size_t bytes = size_t(mib * 1048576.0);
    auto add = [&](const std::string& reader, Timing t) {
      rows.push_back({reader, mib, t.median_ms * 1e3, print_row(reader, mib, t)});
    };
    for (int per_sm : {2, 4}) {
      const int blocks = sms * per_sm;
      add("ldg " + std::to_string(per_sm) + "x512/SM", time_windows([&] {
            read_ldg<<<blocks, 512>>>(reinterpret_cast<const uint4*>(buf), bytes / 16, sink);
          }));
    }
    for (unsigned chunk : {4096u, 16384u, 65536u}) {
      const long long chunks = bytes / chunk;
      int* order;
      CHECK(cudaMalloc(&order, chunks * sizeof(int)));
      for (Order o : {Order::InOrder, Order::Random, Order::Random2M, Order::KvCache64}) {
        if (chunk == 65536u && o != Order::InOrder) continue;
        if (chunk == 16384u && o == Order::KvCache64) continue;
        const std::vector<int> host = make_order(o, chunks, chunk, rng);
        CHECK(cudaMemcpy(order, host.data(), chunks * sizeof(int), cudaMemcpyHostToDevice));
        for (int ctas : {128, sms}) {
          const std::string name = "bulk " + std::to_string(chunk >> 10) + "K " + order_name(o) + " " +
                                   std::to_string(ctas);
          add(name, time_windows([&] {
                read_bulk<STAGES, STAGE_BYTES><<<ctas, 32, STAGES * STAGE_BYTES>>>(buf, o == Order::InOrder ? nullptr : order, chunks, chunk,
                                                             sink);
              }));
        }
        if (chunk == 4096u) {
          add(std::string("ldg 4K ") + order_name(o), time_windows([&] {
                read_ldg_chunks<<<sms * 4, 512>>>(buf, order, chunks, sink);
              }));
          for (int warps : {4, 8})
            add("lsu 4K " + std::string(order_name(o)) + " " + std::to_string(warps) + "w", time_windows([&] {
                  read_lsu<<<sms, warps * 32, STAGES * STAGE_BYTES>>>(buf, o == Order::InOrder ? nullptr : order,
                                                                     chunks, sink);
                }));
        }
      }
      CHECK(cudaFree(order));
    }
  }
  print_fits(rows);
  CHECK(cudaFree(buf));
  return 0;
}
