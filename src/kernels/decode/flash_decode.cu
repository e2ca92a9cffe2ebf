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
#include "decode/decode_load.cuh"
#include "flash/mma.cuh"

struct DecodeParams {
  const u16* q;            // query rows: token index · q_token + head · q_head
  const u16* k;            // cache rows: (dense b·S + j | packed offset + j | paged slot) · k_token + kv head · k_head
  const u16* v;
  u16* o;                  // output rows, laid out as the query (token-major)
  float* lse;              // natural-log log-sum-exp per (token, head), or null
  float* o_part;           // [split][token·N + head][Dv] float32, normalised per split (splits > 1)
  float* lse_part;         // [split][token·N + head]
  const int* block_table;  // (B, max_blocks) pool blocks, or null when the cache is not paged
  const int* q_offsets;    // B+1 starts of a packed query, or null (token = b·T + t)
  const int* kv_offsets;   // B+1 starts of packed keys, or null
  const int* q_lens;       // valid query lengths (B), or null
  const int* kv_lens;      // valid key lengths (B), or null
  i64 q_token, q_head, k_token, k_head, v_token, v_head, o_token, o_head;
  int B, T, S, N, K, H, Hv, group;
  int block_size, max_blocks;
  int splits;
  int window_left, window_right;  // inclusive, clamped to 1<<29 for unbounded
  float scale_log2;
  int flags;                      // FLASH_FLAG_* of flash/params.cuh
  int rows_total;                 // tokens · N: the row count of o_part / lse_part
};
// 12 pointers, 8 strides, 16 four-byte fields: 96 + 64 + 64 = 224 bytes (marshalled in decode-params.ts).
static_assert(sizeof(DecodeParams) == 224, "DecodeParams layout changed: update decode-params.ts");

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

__device__ __forceinline__ float nan_max(float a, float b) {
  // fmaxf drops a NaN; the rule wants it to win.
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
}
__device__ __forceinline__ float quad_nan_max(float x) {
  x = nan_max(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return nan_max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Keys [lo, hi) that query t of a batch with Tb queries and Sb keys sees.
struct KeyRange {
  int lo, hi;
};
__device__ __forceinline__ KeyRange key_range(const DecodeParams& p, int t, int Tb, int Sb) {
  const int diag = t + ((p.flags & FLASH_FLAG_BOTTOM_RIGHT) ? Sb - Tb : 0);
  int lo = 0, hi = Sb;
  if (p.flags & FLASH_FLAG_CAUSAL) hi = imin(hi, diag + 1);
  if (p.flags & FLASH_FLAG_WINDOW) {
    lo = imax(lo, diag - p.window_left);
    hi = imin(hi, diag + p.window_right + 1);
  }
  // lo can pass Sb (a window that starts after the last key, as a ring step's shifted window [0, ∞)
  // does for queries past the keys): clamp it, or the block's union [lo(first), hi(last)) reaches past
  // the cache and the loader reads keys (and block-table entries) that do not exist.
  lo = imin(imax(lo, 0), Sb);
  return {lo, imax(hi, lo)};
}

__device__ __forceinline__ i64 query_token(const DecodeParams& p, int b, int t) {
  return p.q_offsets ? (i64)p.q_offsets[b] + t : (i64)b * p.T + t;
}

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

template <bool FP16>
__device__ __forceinline__ u16 to_bits(float x) {
  u16 r;
  if constexpr (FP16) {
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  } else {
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  }
  return r;
}

template <bool FP16>
__device__ __forceinline__ bool has_non_finite(u32 x) {
  const u32 e = FP16 ? 0x7c00u : 0x7f80u;
  return (x & e) == e || ((x >> 16) & e) == e;
}

// The rare P·V of 16 keys whose V holds NaN/Inf where some row does not see them: per visible
// (row, key) pair, in scalar code. `pt` is the warp's 16 × 16 tile of weights in the mma layout (lane
// (g, tq) holds rows g, g+8 and keys 8·nt + 2·tq, +1); the weight of (row, key kk) comes from lane
// 4·g + (kk % 8) / 2 by a shuffle, so no shared memory is needed (the 4 KB it took kept two blocks of
// two row tiles from fitting on one SM). The column loop is not unrolled (unrolled, 4 copies of
// 16 × 4 × 16 multiply-adds made RT=4 take ~30 s to compile); each column group's 4 sums reach the
// accumulator registers through an unrolled select, since registers take only compile-time indices.
template <class C, bool FP16>
__device__ __forceinline__ void scalar_pv(float (&o)[C::DT][4], const float (&pt)[2][4], const u16* sV,
                                          int chunk0, const int (&lo)[2], const int (&hi)[2], int g, int tq) {
#pragma unroll 1
  for (int d = 0; d < C::DT; ++d) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      const int j = chunk0 + kk, from = 4 * g + (kk % 8) / 2;
      const float w[2] = {__shfl_sync(0xffffffffu, pt[kk / 8][kk % 2], from),
                          __shfl_sync(0xffffffffu, pt[kk / 8][2 + kk % 2], from)};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int h = c / 2;
        if (j < lo[h] || j >= hi[h]) continue;
        const u16 bits = sV[kk * C::PITCHV + d * 8 + 2 * tq + (c % 2)];
        float x;
        if constexpr (FP16) {
          asm("cvt.f32.f16 %0, %1;\n" : "=f"(x) : "h"(bits));
        } else {
          x = __uint_as_float(static_cast<u32>(bits) << 16);
        }
        acc[c] = fmaf(w[h], x, acc[c]);
      }
    }
#pragma unroll
    for (int dd = 0; dd < C::DT; ++dd)
      if (dd == d)
#pragma unroll
        for (int c = 0; c < 4; ++c) o[dd][c] += acc[c];
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
  // Visible ranges grow with t, so the block's union is [lo(first row), hi(last row)) and the keys
  // every row sees are [lo(last row), hi(first row)).
  const KeyRange first = key_range(p, r0 / G, Tb, Sb), last = key_range(p, r_last / G, Tb, Sb);
  const int u_lo = first.lo, u_hi = imax(last.hi, u_lo);
  const int all_lo = last.lo, all_hi = first.hi;
  const int tiles = (u_hi - u_lo + DEC_BN - 1) / DEC_BN;
  const int per_split = (tiles + p.splits - 1) / p.splits;
  const int tile_lo = imin(split * per_split, tiles), tile_hi = imin(tile_lo + per_split, tiles);

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
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int rr = r0 + rt * DEC_ROWS + g + 8 * h;
    const KeyRange range = rr < rows_b ? key_range(p, rr / G, Tb, Sb) : KeyRange{0, 0};
    lo[h] = range.lo;
    hi[h] = range.hi;
  }
  float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.f, 0.f};
  float o[C::DT][4];
#pragma unroll
  for (int d = 0; d < C::DT; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[d][c] = 0.f;
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
#pragma unroll
    for (int nt = 0; nt < KPW / 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[nt][c] = 0.f;
    {
      const int key_row = slice * KPW + (lane / 16) * 8 + (lane % 8);
      const int col = ((lane / 8) % 2) * 8;
#pragma unroll
      for (int kk = 0; kk < C::KT; ++kk) {
        // Q's fragments are re-read from shared memory each tile rather than held: 4·D/16 registers
        // saved (64 at D=256, where holding them spilled), for one ldmatrix per 2·KPW/16 mma.
        u32 qa[4];
        ldmatrix_x4(qa, q_tile + ((lane % 16) * C::PITCH + kk * 16 + (lane / 16) * 8) * 2);
#pragma unroll
        for (int kc = 0; kc < KPW / 16; ++kc) {
          u32 kb[4];
          ldmatrix_x4(kb, k_tile + ((key_row + kc * 16) * C::PITCH + kk * 16 + col) * 2);
          mma_16816<FP16>(s[2 * kc], qa, kb[0], kb[1]);
          mma_16816<FP16>(s[2 * kc + 1], qa, kb[2], kb[3]);
        }
      }
    }
    // Scale into base 2 and mask what each row does not see.
    float mx[2] = {neg_inf(), neg_inf()};
#pragma unroll
    for (int nt = 0; nt < KPW / 8; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int h = c / 2, j = key0 + nt * 8 + 2 * tq + (c % 2);
        s[nt][c] = (j >= lo[h] && j < hi[h]) ? s[nt][c] * p.scale_log2 : neg_inf();
        mx[h] = nan_max(mx[h], s[nt][c]);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = nan_max(m[h], quad_nan_max(mx[h]));
      const float base = m_new == neg_inf() ? 0.f : m_new;
      const float alpha = fast_exp2(m[h] - base);  // 0 while the row had seen nothing
      m[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < KPW / 8; ++nt)
#pragma unroll
        for (int c = 2 * h; c < 2 * h + 2; ++c) {
          s[nt][c] = fast_exp2(s[nt][c] - base);
          sum += s[nt][c];
        }
      l[h] = l[h] * alpha + sum;
#pragma unroll
      for (int d = 0; d < C::DT; ++d) {
        o[d][2 * h] *= alpha;
        o[d][2 * h + 1] *= alpha;
      }
    }

#pragma unroll
    for (int kc = 0; kc < KPW / 16; ++kc) {
      const int chunk0 = key0 + kc * 16, chunk_row = slice * KPW + kc * 16;
      // 16 keys every row of the block sees entirely cannot be contaminated by masked values;
      // otherwise look for NaN/Inf in their V rows (rows 2 lanes each, 16 bytes at a time).
      bool use_scalar = false;
      if (!(chunk0 >= all_lo && chunk0 + 16 <= all_hi)) {
        bool bad = false;
        const u16* sV = reinterpret_cast<const u16*>(loop + stage * C::STAGE_BYTES + C::K_BYTES);
        const int row = chunk_row + lane / 2;
#pragma unroll
        for (int c = (lane % 2) * 8; c < DV; c += 16) {
          const u128 x = *reinterpret_cast<const u128*>(sV + row * C::PITCHV + c);
          bad |= has_non_finite<FP16>(x.x) | has_non_finite<FP16>(x.y) | has_non_finite<FP16>(x.z) |
                 has_non_finite<FP16>(x.w);
        }
        use_scalar = __any_sync(0xffffffffu, bad);
      }
      if (!use_scalar) {
        u32 a[4] = {pack2<FP16>(s[2 * kc][0], s[2 * kc][1]), pack2<FP16>(s[2 * kc][2], s[2 * kc][3]),
                    pack2<FP16>(s[2 * kc + 1][0], s[2 * kc + 1][1]), pack2<FP16>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
        const int v_row = chunk_row + (lane % 8) + ((lane / 8) % 2) * 8;
#pragma unroll
        for (int d = 0; d < C::DT; d += 2) {
          u32 vb[4];
          ldmatrix_x4_trans(vb, v_tile + (v_row * C::PITCHV + d * 8 + (lane / 16) * 8) * 2);
          mma_16816<FP16>(o[d], a, vb[0], vb[1]);
          mma_16816<FP16>(o[d + 1], a, vb[2], vb[3]);
        }
      } else {
        // Scalar P·V over the visible pairs only (weights by shuffles, V one row at a time).
        float pt[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) pt[nt][c] = s[2 * kc + nt][c];
        scalar_pv<C, FP16>(o, pt, reinterpret_cast<const u16*>(loop + stage * C::STAGE_BYTES + C::K_BYTES) +
                                      chunk_row * C::PITCHV, chunk0, lo, hi, g, tq);
      }
    }
  }
  if constexpr (!BULK) cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: the merge reuses them

  // Merge the partial rows of the 4 / RT warps of each row tile: m, l (quad-summed) and O through
  // shared memory, laid out per warp.
  float* eM = reinterpret_cast<float*>(loop);
  float* eL = eM + DEC_WARPS * DEC_ROWS;
  float* eO = eL + DEC_WARPS * DEC_ROWS;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (tq == 0) {
      eM[warp * DEC_ROWS + g + 8 * h] = m[h];
      eL[warp * DEC_ROWS + g + 8 * h] = l[h];
    }
  }
#pragma unroll
  for (int d = 0; d < C::DT; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      eO[(warp * DEC_ROWS + g + 8 * (c / 2)) * DV + d * 8 + 2 * tq + (c % 2)] = o[d][c];
  __syncthreads();

  constexpr float LN2 = 0.6931471805599453f;
  constexpr int THREADS_PER_ROW = DEC_THREADS / C::ROWS;  // 8, 4 or 2
  constexpr int SLICES = DEC_WARPS / RT;                  // warps that share a row tile
  const int row = threadIdx.x / THREADS_PER_ROW, part = threadIdx.x % THREADS_PER_ROW;
  const int row_tile = row / DEC_ROWS, row16 = row % DEC_ROWS;
  const int rr = r0 + row;
  if (rr >= rows_b) return;
  auto at = [&](int w) { return (w * RT + row_tile) * DEC_ROWS + row16; };  // warp w·RT + row_tile
  float M = neg_inf();
#pragma unroll
  for (int w = 0; w < SLICES; ++w) M = nan_max(M, eM[at(w)]);
  const float base = M == neg_inf() ? 0.f : M;
  float weight[SLICES], L = 0.f;
#pragma unroll
  for (int w = 0; w < SLICES; ++w) {
    weight[w] = fast_exp2(eM[at(w)] - base);
    L += eL[at(w)] * weight[w];
  }
  const bool empty = L == 0.f;  // false for NaN: a NaN row stays NaN
  const float inv = empty ? 0.f : 1.f / L;
  float log2l;
  asm("lg2.approx.f32 %0, %1;\n" : "=f"(log2l) : "f"(empty ? 1.f : L));
  const float lse = empty ? neg_inf() : (base + log2l) * LN2;
  const int t = rr / G, n = kh * G + rr % G;
  const i64 token = query_token(p, b, t);
  const i64 out_row = token * p.N + n;
  if (p.splits == 1) {
    u16* dst = p.o + token * p.o_token + (i64)n * p.o_head;
    for (int col = part * 2; col < p.Hv; col += THREADS_PER_ROW * 2) {
      float x0 = 0.f, x1 = 0.f;
#pragma unroll
      for (int w = 0; w < SLICES; ++w) {
        x0 += eO[at(w) * DV + col] * weight[w];
        x1 += eO[at(w) * DV + col + 1] * weight[w];
      }
      *reinterpret_cast<u32*>(dst + col) = pack2<FP16>(x0 * inv, x1 * inv);
    }
    if (p.lse && part == 0) p.lse[out_row] = lse;
  } else {
    float* dst = p.o_part + ((i64)split * p.rows_total + out_row) * DV;
    for (int col = part; col < p.Hv; col += THREADS_PER_ROW) {
      float x = 0.f;
#pragma unroll
      for (int w = 0; w < SLICES; ++w) x += eO[at(w) * DV + col] * weight[w];
      dst[col] = x * inv;
    }
    if (part == 0) p.lse_part[(i64)split * p.rows_total + out_row] = lse;
  }
}

// The combine: one warp per (token, head) row merges the splits' normalised rows by their
// log-sum-exp: lse = log Σ e^lse_s, O = Σ e^(lse_s − lse) · O_s. Padding rows of a dense query
// (t ≥ its length) are left as the host zeroed them. The lanes read the splits' lse in parallel
// (one split each, 32 at a time) and put their weights in shared memory; then each lane owns 4
// columns and reads one 16-byte chunk of every split's row, independent loads the compiler can keep
// in flight (the first version walked the splits three times one lse at a time, and once per
// column: ~0.6 µs per split at B=1, the sweep of bench/results/2026-12-01-s6-decode).
constexpr int DEC_MAX_SPLITS = 128;  // decode-splits.ts never asks for more
template <int DV, bool FP16>
__device__ __forceinline__ void flash_decode_combine(const DecodeParams& p) {
  __shared__ float weights[4][DEC_MAX_SPLITS];
  const int warp = threadIdx.x / 32, row = blockIdx.x * 4 + warp, lane = threadIdx.x % 32;
  if (row >= p.rows_total) return;
  if (!p.q_offsets) {
    const int token = row / p.N, b = token / p.T, t = token % p.T;
    if (t >= (p.q_lens ? p.q_lens[b] : p.T)) return;
  }
  const int splits = imin(p.splits, DEC_MAX_SPLITS);
  float M = neg_inf();
  for (int s = lane; s < splits; s += 32) M = nan_max(M, p.lse_part[(i64)s * p.rows_total + row]);
#pragma unroll
  for (int d = 16; d > 0; d /= 2) M = nan_max(M, __shfl_xor_sync(0xffffffffu, M, d));
  const float base = M == neg_inf() ? 0.f : M;
  float sum = 0.f;
  for (int s = lane; s < splits; s += 32) {
    // A split that saw nothing has weight 0 and O 0; one that saw a NaN carries it.
    const float w = __expf(p.lse_part[(i64)s * p.rows_total + row] - base);
    weights[warp][s] = w;
    sum += w;
  }
#pragma unroll
  for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  __syncwarp();
  const bool empty = sum == 0.f;
  const float inv = empty ? 0.f : 1.f / sum;
  u16* dst = p.o + (i64)(row / p.N) * p.o_token + (i64)(row % p.N) * p.o_head;
  for (int col = 4 * lane; col < p.Hv; col += 128) {
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = 0; s < splits; ++s) {
      const float w = weights[warp][s];
      const float4 y = *reinterpret_cast<const float4*>(p.o_part + ((i64)s * p.rows_total + row) * DV + col);
      x.x += w * y.x, x.y += w * y.y, x.z += w * y.z, x.w += w * y.w;
    }
    const float out[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (col + c < p.Hv) dst[col + c] = to_bits<FP16>(out[c] * inv);
  }
  if (p.lse && lane == 0) p.lse[row] = empty ? neg_inf() : base + __logf(sum);
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
