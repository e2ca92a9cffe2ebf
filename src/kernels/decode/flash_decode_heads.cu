// Split-KV decoding that reads whole token rows: one block serves HB kv heads of a sequence (all of
// them up to 8), so each key's K (and V) row of those heads — HB·H contiguous elements in every
// layout (dense (B, S, K, H), paged (numBlocks, blockSize, K, H), packed (totalS, K, H)) — arrives
// by one bulk copy (2 KB at K=8, H=128) instead of HB copies of 256 B issued by HB blocks on
// different SMs at different times (flash_decode.cu). ncu of that kernel on a paged cache (block 16,
// K=8) showed L2 92% busy and DRAM 75%: its per-head 256-byte rows interleave in every page.
// Here a page's 16 tokens × 8 heads = 32 KB of K is requested by one SM within one tile.
//
// Layout of the work:
// - grid (splits, K / HB, B); 32·HB·RTH·SLICES threads: warp w serves row tile (head hh, tile rt)
//   = w % (HB·RTH) and key slice w / (HB·RTH) of each TK-key tile (TK = SLICES·KPW);
// - a tile's K and V rows land in shared memory one token row each, padded by 16 bytes (pitch
//   HB·H + 8 elements: ldmatrix's 8 rows then hit 8 bank groups), on one mbarrier per stage;
// - each warp holds its 16 query rows' Q fragments in registers (read once from global memory), and
//   keeps its own online softmax; the SLICES warps of a row tile merge in shared memory at the end,
//   and splits > 1 are combined by flash_decode_combine (decode_common.cuh) in a second launch.
// H and Hv are multiples of 16 and at most 128 (decode.ts keeps other head dims on flash_decode.cu).
// The NaN rule is flash_decode.cu's (the scalar P·V where V holds NaN/Inf at keys a row does not see).
#ifndef ATTNLAB_FLASH_DECODE_HEADS_CU  // benchmarks/harnesses/decode-persistent-kernel.cu includes this file too
#define ATTNLAB_FLASH_DECODE_HEADS_CU
#include "decode/decode_warp.cuh"

template <int D, int DV, bool FP16, int HB, int RTH, int SLICES, int KPW, int STAGES>
struct HeadsConfig {
  static constexpr int D_ = D, DV_ = DV, HB_ = HB, RTH_ = RTH, SLICES_ = SLICES, KPW_ = KPW, STAGES_ = STAGES;
  static constexpr int TILES = HB * RTH;          // row tiles per block
  static constexpr int WARPS = TILES * SLICES;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int TK = KPW * SLICES;         // keys per tile
  static constexpr int PITCH = HB * D + 8;        // elements per K token row in shared memory
  static constexpr int PITCHV = HB * DV + 8;
  static constexpr int BAR_BYTES = 64;            // STAGES ≤ 8 mbarriers
  static constexpr int K_BYTES = TK * PITCH * 2;
  static constexpr int V_BYTES = TK * PITCHV * 2;
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int LOOP_BYTES = STAGES * STAGE_BYTES;
  static constexpr int MERGE_BYTES = WARPS * 16 * (DV + 2) * 4;
  static constexpr int SMEM = BAR_BYTES + (LOOP_BYTES > MERGE_BYTES ? LOOP_BYTES : MERGE_BYTES);
  static constexpr int KT = D / 16;
  static constexpr int DT = DV / 8;
  static_assert(D % 16 == 0 && DV % 16 == 0 && D <= 128 && DV <= 128, "head dims: multiples of 16, ≤ 128");
  static_assert(KPW % 16 == 0 && KPW <= 64, "keys per warp: 16, 32, 48 or 64");
  static_assert(2 * TK <= THREADS, "one thread per K or V token row of a tile");
  static_assert(STAGES >= 2 && STAGES <= 8 && WARPS <= 16, "stages, warps");
};

template <class C, bool FP16>
__device__ __forceinline__ void flash_decode_heads(const DecodeParams& p) {
  constexpr int D = C::D_, DV = C::DV_, HB = C::HB_, RTH = C::RTH_, KPW = C::KPW_, STAGES = C::STAGES_;
  constexpr int TK = C::TK, TILES = C::TILES, SLICES = C::SLICES_;
  extern __shared__ __align__(16) unsigned char smem[];
  const int split = blockIdx.x, kh0 = blockIdx.y * HB, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const int tile_id = warp % TILES, slice = warp / TILES;
  const int hh = tile_id / RTH, rt = tile_id % RTH, kh = kh0 + hh;
  const int G = p.group;

  const int Tb = p.q_offsets ? p.q_offsets[b + 1] - p.q_offsets[b] : (p.q_lens ? p.q_lens[b] : p.T);
  const int Sb = p.kv_offsets ? p.kv_offsets[b + 1] - p.kv_offsets[b] : (p.kv_lens ? p.kv_lens[b] : p.S);
  const int rows_b = Tb * G;  // rows per kv head
  if (rows_b == 0) return;     // no queries: nothing to write (a dense query's padding is pre-zeroed)
  // Every row of the block belongs to a token t in [0, Tb).
  const BlockKeys keys = block_keys<TK>(p, 0, Tb - 1, Tb, Sb, split);
  const int u_lo = keys.lo, u_hi = keys.hi, all_lo = keys.all_lo, all_hi = keys.all_hi;
  const int tile_lo = keys.tile_lo, tile_hi = keys.tile_hi;

  const u32 bars = smem_addr(smem);
  unsigned char* loop = smem + C::BAR_BYTES;
  const u32 loop_smem = smem_addr(loop);

  const bool paged = p.block_table != nullptr;
  const int* table_row = paged ? p.block_table + (i64)b * p.max_blocks : nullptr;
  const i64 kv_base = p.kv_offsets ? (i64)p.kv_offsets[b] : (i64)b * p.S;
  const i64 k_head0 = (i64)kh0 * p.k_head, v_head0 = (i64)kh0 * p.v_head;

  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES; ++s) dec_mbar_init(bars + s * 8, 1);
  __syncthreads();  // barriers initialised before any copy arrives on them

  // The loader: thread t < 2·TK copies token row t % TK of K (t < TK) or of V, HB heads at once; a
  // paged row's table entry is loaded one refill ahead (`page`), so the copy's address never waits.
  const bool loader = threadIdx.x < 2 * TK;
  const int my_row = threadIdx.x % TK;
  const bool my_v = threadIdx.x >= TK;
  auto page_for = [&](int i) -> int {
    const int j = u_lo + i * TK + my_row;
    return (paged && loader && i < tile_hi && j < u_hi) ? table_row[j / p.block_size] : 0;
  };
  auto load_stage = [&](int stage, int i, int page) {
    const int key0 = u_lo + i * TK, j = key0 + my_row;
    const u32 bar = bars + stage * 8;
    const u32 base = loop_smem + stage * C::STAGE_BYTES;
    if (threadIdx.x == 0) dec_mbar_arrive_expect_tx(bar, imin(TK, u_hi - key0) * HB * (p.H + p.Hv) * 2);
    if (!loader) return;
    const u32 dst = my_v ? base + C::K_BYTES + my_row * C::PITCHV * 2 : base + my_row * C::PITCH * 2;
    if (j < u_hi) {
      const i64 slot = paged ? (i64)page * p.block_size + j % p.block_size : kv_base + j;
      const u16* src = my_v ? p.v + slot * p.v_token + v_head0 : p.k + slot * p.k_token + k_head0;
      bulk_row_copy(dst, src, HB * (my_v ? DV : D) * 2, bar);
    } else {
      // Keys past the range: zeros, so no stale shared memory (possibly NaN) meets a zero weight.
      zero_row(dst, 0, HB * (my_v ? DV : D));
      dec_fence_proxy_async();
    }
  };

  int page = 0;  // paged: the table entry of this thread's row in the next tile to load
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s)
    if (tile_lo + s < tile_hi) load_stage(s, tile_lo + s, page_for(tile_lo + s));
  page = page_for(tile_lo + STAGES - 1);

  // Q fragments of this warp's 16 rows (rt·16 + g, +8 of kv head kh), from global memory once.
  u32 qa[C::KT][4];
  load_q_fragments<C::KT>(qa, p, b, kh, G, rt * 16, rows_b, lane);

  // This lane's two rows: visible range, or empty when the row is padding.
  int lo[2], hi[2];
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
  float o[C::DT][4];
  start_rows<C::DT>(p, rt * 16, rows_b, Tb, Sb, g, lo, hi, o);

  for (int i = tile_lo; i < tile_hi; ++i) {
    const int stage = (i - tile_lo) % STAGES;
    const int next = i + STAGES - 1;
    __syncthreads();  // every warp is done with tile i − 1, whose stage is refilled next
    if (next < tile_hi) load_stage((next - tile_lo) % STAGES, next, page);
    page = page_for(next + 1);
    dec_mbar_wait(bars + stage * 8, ((i - tile_lo) / STAGES) & 1);

    const u32 k_tile = loop_smem + stage * C::STAGE_BYTES + hh * D * 2;
    const u32 v_tile = loop_smem + stage * C::STAGE_BYTES + C::K_BYTES + hh * DV * 2;
    const int key0 = u_lo + i * TK + slice * KPW;  // this warp's KPW keys

    float s[KPW / 8][4];
    qk_tile<C::KT, KPW, C::PITCH, FP16>(s, k_tile, slice * KPW, lane, [&](int kk, u32 (&a)[4]) {
#pragma unroll
      for (int c = 0; c < 4; ++c) a[c] = qa[kk][c];
    });
    online_softmax<KPW, C::DT>(s, o, m, l, key0, lo, hi, p.scale_log2, tq);
    pv_tile<C, FP16, KPW>(o, s, v_tile, key0, slice * KPW, all_lo, all_hi, lo, hi, lane);
  }
  __syncthreads();  // every warp is done with the stages: the merge reuses them

  // Merge the SLICES warps of each row tile (m, l quad-summed, O) through shared memory.
  const MergeSlots slots = merge_slots(loop, C::WARPS);
  stash_partial<C::DT>(slots, warp, m, l, o, lane);
  __syncthreads();

  constexpr int THREADS_PER_ROW = C::THREADS / (TILES * 16);  // 2·SLICES
  const int row = threadIdx.x / THREADS_PER_ROW, part = threadIdx.x % THREADS_PER_ROW;
  const int row_tile = row / 16, row16 = row % 16;
  const int rr = (row_tile % RTH) * 16 + row16;  // row within its kv head
  if (rr >= rows_b) return;
  auto at = [&](int w) { return (w * TILES + row_tile) * 16 + row16; };  // warp w·TILES + row_tile
  write_merged_row<SLICES, DV, THREADS_PER_ROW, FP16>(p, slots, at, query_token(p, b, rr / G),
                                                      (kh0 + row_tile / RTH) * G + rr % G, split, part);
}

#ifdef DECODE_HEADS_D
using DecodeHeadsConfig = HeadsConfig<DECODE_HEADS_D, DECODE_HEADS_DV, DECODE_FP16 != 0, DECODE_HEADS_HB,
                                      DECODE_HEADS_RTH, DECODE_HEADS_SLICES, DECODE_HEADS_KPW, DECODE_STAGES>;
extern "C" __global__ void __launch_bounds__(DecodeHeadsConfig::THREADS)
    attnlab_flash_decode_heads(const __grid_constant__ DecodeParams p) {
  flash_decode_heads<DecodeHeadsConfig, DECODE_FP16 != 0>(p);
}
extern "C" __global__ void __launch_bounds__(128) attnlab_flash_decode_combine(const __grid_constant__ DecodeParams p) {
  flash_decode_combine<DECODE_HEADS_DV, DECODE_FP16 != 0>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C, bool FP16>
__global__ void __launch_bounds__(C::THREADS) decode_heads_test(const __grid_constant__ DecodeParams p) {
  flash_decode_heads<C, FP16>(p);
}
// K=8 G=4, K=4 G=8, MQA N=32 (two row tiles), fp16 at H=64.
template __global__ void decode_heads_test<HeadsConfig<128, 128, false, 8, 1, 1, 16, 3>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_heads_test<HeadsConfig<128, 128, false, 4, 1, 2, 16, 3>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_heads_test<HeadsConfig<128, 128, false, 1, 2, 4, 32, 3>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_heads_test<HeadsConfig<64, 64, true, 8, 1, 1, 32, 3>, true>(const __grid_constant__ DecodeParams);
#endif
#endif  // ATTNLAB_FLASH_DECODE_HEADS_CU
