// Split-KV attention for few queries over a long cache (FlashDecoding), dense, paged or packed.
//
// Decoding reads the whole K/V cache once per step and does almost no arithmetic per byte, so the
// kernel is built to keep bytes in flight, not tensor cores busy:
// - GQA packing: the G = N/K query heads that share a key/value head, times the T new tokens, are
//   the rows of m16 tiles, and up to RT = 4 such tiles share one block, so a cache row is read once
//   for all of them (K=8, N=32: 4 rows, one tile; K=1, N=32: 32 rows, two tiles in one block, where
//   one block per tile read every K/V byte twice);
// - split-KV: a block owns one (batch, kv head, row group) and one slice of the keys; the grid is
//   splits × row groups × B·K, the split count chosen by the host's wave model (decode-splits.ts),
//   and a second kernel combines the slices by their log-sum-exp;
// - inside the block the 4 warps share each 64-key tile (RT=1: 16 keys each, RT=4: all 64 keys of
//   one row tile each) and keep their own online softmax; tiles stream through shared memory in
//   STAGES stages (2–3 tiles, 32–64 KB in flight per block), by cp.async (or, opt-in on sm_90, bulk
//   copies: decode_load.cuh), and the partial rows are merged in shared memory at the end.
// A paged cache is read through its block table (key j of sequence b sits in pool slot
// table[b][j / blockSize]·blockSize + j % blockSize); a packed one through its offsets.
//
// The NaN rule (README): a NaN logit propagates (the running max is NaN-propagating, unlike fmaxf),
// a −inf logit is masked, and positions a row does not see never contribute — also in P·V, where a
// tensor-core product would turn 0·NaN into NaN: a warp whose 16 keys are not all visible to every
// row checks its V slice for NaN/Inf and, if there is one, does that slice's P·V in scalar code,
// skipping the pairs a row does not see (rare: NaN/Inf values at partly masked positions).
#include "decode/decode_warp.cuh"

constexpr int DEC_BN = 64;       // keys per tile
constexpr int DEC_WARPS = 4;
constexpr int DEC_THREADS = DEC_WARPS * 32;
constexpr int DEC_ROWS = 16;     // (token, head) rows of one m16 tile

// RT row tiles per block (1, 2 or 4): warp w takes row tile w % RT and keys KPW·(w / RT) … of each
// 64-key tile, so all 16·RT rows of a kv head (MQA N=32: 2 tiles) share one read of each K/V byte.
template <int D, int DV, bool FP16, int STAGES, int RT, bool BULK>
struct DecodeConfig {
  static constexpr int D_ = D, DV_ = DV, STAGES_ = STAGES, RT_ = RT;
  static constexpr bool BULK_ = BULK;
  static constexpr int ROWS = DEC_ROWS * RT;
  static constexpr int KPW = DEC_BN * RT / DEC_WARPS;  // keys per warp per tile: 16, 32, 64
  static constexpr int PITCH = D + 8;    // +16 bytes per row: ldmatrix's 8 row reads hit 8 bank groups
  static constexpr int PITCHV = DV + 8;
  static constexpr int BAR_BYTES = 64;   // STAGES ≤ 8 mbarriers of the bulk loader
  static constexpr int Q_BYTES = ROWS * PITCH * 2;
  static constexpr int K_BYTES = DEC_BN * PITCH * 2;
  static constexpr int V_BYTES = DEC_BN * PITCHV * 2;
  static constexpr int STAGE_BYTES = K_BYTES + V_BYTES;
  static constexpr int MERGE_BYTES = DEC_WARPS * DEC_ROWS * (DV + 2) * 4;
  static constexpr int LOOP_BYTES = STAGES * STAGE_BYTES;
  static constexpr int SMEM =
      BAR_BYTES + Q_BYTES + (LOOP_BYTES > MERGE_BYTES ? LOOP_BYTES : MERGE_BYTES);
  static constexpr int KT = D / 16;
  static constexpr int DT = DV / 8;
  static_assert(STAGES >= 2 && STAGES <= 8, "stages");
  static_assert(!BULK || DEC_THREADS == 2 * DEC_BN, "the bulk loader gives each thread one K or V row");
};

// ROWS × COLS 16-bit tile from rows given by row_offset(r) (or zeros where it is negative) into a
// padded shared tile; columns past `cols` are zero-filled.
template <int ROWS, int D, class RowOffset>
__device__ __forceinline__ void load_rows(u32 dst, const u16* base, int cols, RowOffset row_offset) {
  constexpr int CHUNKS = D / 8;
  constexpr int PITCH = D + 8;
#pragma unroll
  for (int c = threadIdx.x; c < ROWS * CHUNKS; c += DEC_THREADS) {
    const int r = c / CHUNKS, chunk = c % CHUNKS;
    const i64 off = row_offset(r);
    const bool ok = off >= 0 && chunk * 8 < cols;
    const u16* src = ok ? base + off + chunk * 8 : base;
    cp_async_16(dst + (r * PITCH + chunk * 8) * 2, src, ok ? 16 : 0);
  }
}

template <class C, bool FP16>
__device__ __forceinline__ void flash_decode(const DecodeParams& p) {
  constexpr int D = C::D_, DV = C::DV_, STAGES = C::STAGES_, RT = C::RT_, KPW = C::KPW;
  constexpr bool BULK = C::BULK_;
  extern __shared__ __align__(16) unsigned char smem[];
  const int split = blockIdx.x, tile = blockIdx.y;
  const int b = blockIdx.z / p.K, kh = blockIdx.z % p.K;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const int rt = warp % RT, slice = warp / RT;  // this warp's row tile and key slice
  const int G = p.group;

  const int Tb = p.q_offsets ? p.q_offsets[b + 1] - p.q_offsets[b] : (p.q_lens ? p.q_lens[b] : p.T);
  const int Sb = p.kv_offsets ? p.kv_offsets[b + 1] - p.kv_offsets[b] : (p.kv_lens ? p.kv_lens[b] : p.S);
  const int rows_b = Tb * G;
  const int r0 = tile * C::ROWS;
  if (r0 >= rows_b) return;  // rows past this batch's queries: nothing to write (padding is pre-zeroed)
  const int r_last = imin(r0 + C::ROWS, rows_b) - 1;
  const BlockKeys keys = block_keys<DEC_BN>(p, r0 / G, r_last / G, Tb, Sb, split);
  const int u_lo = keys.lo, u_hi = keys.hi, all_lo = keys.all_lo, all_hi = keys.all_hi;
  const int tile_lo = keys.tile_lo, tile_hi = keys.tile_hi;

  const u32 bars = smem_addr(smem);
  u16* sQ = reinterpret_cast<u16*>(smem + C::BAR_BYTES);
  unsigned char* loop = smem + C::BAR_BYTES + C::Q_BYTES;
  const u32 q_smem = smem_addr(sQ), loop_smem = smem_addr(loop);

  // Cache slot of key j: dense b·S + j, packed offset + j, paged table[b][j / bs]·bs + j % bs.
  const bool paged = p.block_table != nullptr;
  const int* table_row = paged ? p.block_table + (i64)b * p.max_blocks : nullptr;
  const i64 kv_base = p.kv_offsets ? (i64)p.kv_offsets[b] : (i64)b * p.S;
  const i64 k_head = (i64)kh * p.k_head, v_head = (i64)kh * p.v_head;
  auto slot_of = [&](int j) -> i64 {
    if (paged) return (i64)table_row[j / p.block_size] * p.block_size + j % p.block_size;
    return kv_base + j;
  };

  if constexpr (BULK) {
    if (threadIdx.x == 0)
      for (int s = 0; s < STAGES; ++s) dec_mbar_init(bars + s * 8, 1);
    // Head-dim padding columns (H < D) are never written by a row copy: zero them once.
    if (p.H < D || p.Hv < DV)
      for (int r = threadIdx.x; r < STAGES * DEC_BN; r += DEC_THREADS) {
        const u32 stage_base = loop_smem + (r / DEC_BN) * C::STAGE_BYTES;
        zero_row(stage_base + (r % DEC_BN) * C::PITCH * 2, p.H, D);
        zero_row(stage_base + C::K_BYTES + (r % DEC_BN) * C::PITCHV * 2, p.Hv, DV);
      }
    __syncthreads();  // barriers initialised before any copy arrives on them
  }

  // Q rows (t, g) → query head kh·G + g.
  load_rows<C::ROWS, D>(q_smem, p.q, p.H, [&](int r) -> i64 {
    const int rr = r0 + r;
    if (rr >= rows_b) return -1;
    return query_token(p, b, rr / G) * p.q_token + (i64)(kh * G + rr % G) * p.q_head;
  });

  // The bulk loader: thread t copies row t % 64 of K (t < 64) or of V; a paged row's table entry
  // is loaded one refill ahead (`page`), so the copy's address never waits on it.
  const int my_row = threadIdx.x % DEC_BN;
  const bool my_v = threadIdx.x >= DEC_BN;
  auto page_for = [&](int i) -> int {
    const int j = u_lo + i * DEC_BN + my_row;
    return (paged && i < tile_hi && j < u_hi) ? table_row[j / p.block_size] : 0;
  };
  auto bulk_stage = [&](int stage, int i, int page) {
    const int key0 = u_lo + i * DEC_BN, j = key0 + my_row;
    const u32 bar = bars + stage * 8;
    const u32 k_dst = loop_smem + stage * C::STAGE_BYTES;
    const u32 dst = my_v ? k_dst + C::K_BYTES + my_row * C::PITCHV * 2 : k_dst + my_row * C::PITCH * 2;
    if (threadIdx.x == 0) dec_mbar_arrive_expect_tx(bar, imin(DEC_BN, u_hi - key0) * (p.H + p.Hv) * 2);
    if (j < u_hi) {
      const i64 slot = paged ? (i64)page * p.block_size + j % p.block_size : kv_base + j;
      const u16* src = my_v ? p.v + slot * p.v_token + v_head : p.k + slot * p.k_token + k_head;
      bulk_row_copy(dst, src, (my_v ? p.Hv : p.H) * 2, bar);
    } else {
      zero_row(dst, 0, my_v ? DV : D);
      dec_fence_proxy_async();
    }
  };
  // The cp.async loader: one slot lookup per row for both K and V where their widths agree.
  auto async_stage = [&](int stage, int i) {
    const int key0 = u_lo + i * DEC_BN;
    const u32 k_dst = loop_smem + stage * C::STAGE_BYTES, v_dst = k_dst + C::K_BYTES;
    if constexpr (D == DV) {
      constexpr int CHUNKS = D / 8;
#pragma unroll
      for (int c = threadIdx.x; c < DEC_BN * CHUNKS; c += DEC_THREADS) {
        const int r = c / CHUNKS, chunk = c % CHUNKS, j = key0 + r;
        const bool row_ok = j < u_hi;
        const i64 slot = row_ok ? slot_of(j) : 0;
        const bool k_ok = row_ok && chunk * 8 < p.H, v_ok = row_ok && chunk * 8 < p.Hv;
        cp_async_16(k_dst + (r * C::PITCH + chunk * 8) * 2, k_ok ? p.k + slot * p.k_token + k_head + chunk * 8 : p.k,
                    k_ok ? 16 : 0);
        cp_async_16(v_dst + (r * C::PITCHV + chunk * 8) * 2, v_ok ? p.v + slot * p.v_token + v_head + chunk * 8 : p.v,
                    v_ok ? 16 : 0);
      }
    } else {
      load_rows<DEC_BN, D>(k_dst, p.k, p.H, [&](int r) -> i64 {
        const int j = key0 + r;
        return j < u_hi ? slot_of(j) * p.k_token + k_head : -1;
      });
      load_rows<DEC_BN, DV>(v_dst, p.v, p.Hv, [&](int r) -> i64 {
        const int j = key0 + r;
        return j < u_hi ? slot_of(j) * p.v_token + v_head : -1;
      });
    }
  };

  int page = 0;  // bulk + paged: the table entry of this thread's row in the next tile to load
  if constexpr (BULK) {
    cp_async_commit();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      if (tile_lo + s < tile_hi) bulk_stage(s, tile_lo + s, page_for(tile_lo + s));
    page = page_for(tile_lo + STAGES - 1);
    cp_async_wait<0>();
    __syncthreads();  // Q and the prologue's zero rows are visible to every warp
  } else {
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (tile_lo + s < tile_hi) async_stage(s, tile_lo + s);
      cp_async_commit();
    }
  }

  // This lane's two rows (g, g+8) of its row tile: visible range, or empty when the row is padding.
  int lo[2], hi[2];
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
  float o[C::DT][4];
  start_rows<C::DT>(p, r0 + rt * DEC_ROWS, rows_b, Tb, Sb, g, lo, hi, o);
  const u32 q_tile = q_smem + rt * DEC_ROWS * C::PITCH * 2;

  for (int i = tile_lo; i < tile_hi; ++i) {
    const int stage = (i - tile_lo) % STAGES;
    const int next = i + STAGES - 1;
    if constexpr (BULK) {
      __syncthreads();  // every warp is done with tile i − 1, whose stage is refilled next
      if (next < tile_hi) bulk_stage((next - tile_lo) % STAGES, next, page);
      page = page_for(next + 1);
      dec_mbar_wait(bars + stage * 8, ((i - tile_lo) / STAGES) & 1);
    } else {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // tile i (and Q) landed; every warp is done with the stage refilled next
      if (next < tile_hi) async_stage((next - tile_lo) % STAGES, next);
      cp_async_commit();
    }
    const u32 k_tile = loop_smem + stage * C::STAGE_BYTES, v_tile = k_tile + C::K_BYTES;
    const int key0 = u_lo + i * DEC_BN + slice * KPW;  // this warp's KPW keys

    float s[KPW / 8][4];
    // Q's fragments are re-read from shared memory each tile rather than held: 4·D/16 registers
    // saved (64 at D=256, where holding them spilled), for one ldmatrix per 2·KPW/16 mma.
    qk_tile<C::KT, KPW, C::PITCH, FP16>(s, k_tile, slice * KPW, lane, [&](int kk, u32 (&qa)[4]) {
      ldmatrix_x4(qa, q_tile + ((lane % 16) * C::PITCH + kk * 16 + (lane / 16) * 8) * 2);
    });
    online_softmax<KPW, C::DT>(s, o, m, l, key0, lo, hi, p.scale_log2, tq);
    pv_tile<C, FP16, KPW>(o, s, v_tile, key0, slice * KPW, all_lo, all_hi, lo, hi, lane);
  }
  if constexpr (!BULK) cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: the merge reuses them

  // Merge the partial rows of the 4 / RT warps of each row tile: m, l (quad-summed) and O through
  // shared memory, laid out per warp.
  const MergeSlots slots = merge_slots(loop, DEC_WARPS);
  stash_partial<C::DT>(slots, warp, m, l, o, lane);
  __syncthreads();

  constexpr int THREADS_PER_ROW = DEC_THREADS / C::ROWS;  // 8, 4 or 2
  constexpr int SLICES = DEC_WARPS / RT;                  // warps that share a row tile
  const int row = threadIdx.x / THREADS_PER_ROW, part = threadIdx.x % THREADS_PER_ROW;
  const int row_tile = row / DEC_ROWS, row16 = row % DEC_ROWS;
  const int rr = r0 + row;
  if (rr >= rows_b) return;
  auto at = [&](int w) { return (w * RT + row_tile) * DEC_ROWS + row16; };  // warp w·RT + row_tile
  write_merged_row<SLICES, DV, THREADS_PER_ROW, FP16>(p, slots, at, query_token(p, b, rr / G), kh * G + rr % G,
                                                      split, part);
}

#ifdef DECODE_D
extern "C" __global__ void __launch_bounds__(DEC_WARPS * 32)
    attnlab_flash_decode(const __grid_constant__ DecodeParams p) {
  flash_decode<DecodeConfig<DECODE_D, DECODE_DV, DECODE_FP16 != 0, DECODE_STAGES, DECODE_RT, DECODE_BULK != 0>,
               DECODE_FP16 != 0>(p);
}
extern "C" __global__ void __launch_bounds__(128) attnlab_flash_decode_combine(const __grid_constant__ DecodeParams p) {
  flash_decode_combine<DECODE_DV, DECODE_FP16 != 0>(p);
}
#endif

#ifdef ATTNLAB_NVCC_TEST
template <class C, bool FP16>
__global__ void __launch_bounds__(DEC_WARPS * 32) decode_test(const __grid_constant__ DecodeParams p) {
  flash_decode<C, FP16>(p);
}
template <int DV, bool FP16>
__global__ void __launch_bounds__(128) combine_test(const __grid_constant__ DecodeParams p) {
  flash_decode_combine<DV, FP16>(p);
}
template __global__ void decode_test<DecodeConfig<64, 64, false, 3, 4, false>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_test<DecodeConfig<128, 128, false, 3, 1, false>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_test<DecodeConfig<128, 128, true, 3, 2, false>, true>(const __grid_constant__ DecodeParams);
template __global__ void decode_test<DecodeConfig<128, 64, false, 3, 1, false>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_test<DecodeConfig<256, 256, false, 2, 1, false>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_test<DecodeConfig<128, 128, false, 3, 2, true>, false>(const __grid_constant__ DecodeParams);
template __global__ void decode_test<DecodeConfig<256, 256, true, 2, 2, true>, true>(const __grid_constant__ DecodeParams);
template __global__ void combine_test<128, false>(const __grid_constant__ DecodeParams);
#endif
