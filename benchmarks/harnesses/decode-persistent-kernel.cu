// The heads kernel (flash_decode_heads.cu) on a persistent grid: P = SMs × occupancy blocks split the
// whole job's tiles evenly (stream-K), so no SM idles and no block's pipeline drains at an item's end.
// MEASURED SLOWER (docs/internals/decode.md): dense 0.98–0.99×, paged 0.90–0.93×,
// K=1 0.48–0.51× of the heads kernel; so it lives here, in the harness only (benchmarks/harnesses/decode-kernel.cu),
// not in src/kernels, and the library never loads it.
// Why (benchmarks/results/h200/decode/2026-12-01-heads-kernel-cudnn-paged): at B·S = 1M every shape ran 128 blocks on 132 SMs
// (B=64 splits 2, B=8 splits 16, B=128 splits 1, paged K/HB = 2 × B=64) — 4 SMs idle, 3% of the
// machine — and one block reads ≤ 36 GB/s (splits = 1: 64 blocks 2283 GB/s, 8 blocks 289), under
// load 32.6–33; 4.3 TB/s needs 32.6 GB/s from each of 132 SMs. Experimental: the library does not
// load this file (decode.ts runs flash_decode_heads.cu); benchmarks/harnesses/decode-kernel.cu checks and times it.
// Built with the harness: nvcc … -I src/kernels benchmarks/harnesses/decode-kernel.cu (this file is included from there).
//
// Work: items i = b · (K / HB) + kv-head group, each of n_b tiles of TK keys (the item's visible keys
// [lo, hi) as in block_keys); global tile g = A_i + local tile. Block w takes tiles
// [⌊w·Tt/P⌋, ⌊(w+1)·Tt/P⌋); its loader runs STAGES − 1 tiles ahead across item boundaries. A block
// writes item i's partial (normalised O and lse, as a split of the heads kernel) to slot
// k = w − w_first(i); flash_decode_persist_combine merges an item's slots 0 … w_last − w_first.
// One warp per row tile (SLICES = 1): a warp's rows are final in its registers, no shared merge, so
// every byte of shared memory but the barriers is pipeline.
#include "decode/flash_decode_heads.cu"

struct DecodeItem {
  int lo, hi, all_lo, all_hi, tiles, Tb, Sb;
};
template <int TK>
__device__ __forceinline__ DecodeItem decode_item(const DecodeParams& p, int b) {
  const int Tb = p.q_offsets ? p.q_offsets[b + 1] - p.q_offsets[b] : (p.q_lens ? p.q_lens[b] : p.T);
  const int Sb = p.kv_offsets ? p.kv_offsets[b + 1] - p.kv_offsets[b] : (p.kv_lens ? p.kv_lens[b] : p.S);
  if (Tb == 0) return {0, 0, 0, 0, 0, Tb, Sb};
  const KeyRange first = key_range(p, 0, Tb, Sb), last = key_range(p, Tb - 1, Tb, Sb);
  const int lo = first.lo, hi = imax(last.hi, lo);
  return {lo, hi, last.lo, first.hi, (hi - lo + TK - 1) / TK, Tb, Sb};
}

// Σ over sequences b' < b_end of n_b' (the whole warp calls it; every lane gets the sum).
template <int TK>
__device__ __forceinline__ int tiles_before(const DecodeParams& p, int b_end, int lane) {
  int sum = 0;
  for (int base = 0; base < b_end; base += 32) {
    const int b = base + lane;
    sum += b < b_end ? decode_item<TK>(p, b).tiles : 0;
  }
#pragma unroll
  for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  return sum;
}
__device__ __forceinline__ int persist_start(int w, int P, int Tt) { return int((i64)w * Tt / P); }
// The block holding global tile g: the largest w with ⌊w·Tt/P⌋ ≤ g.
__device__ __forceinline__ int persist_block_of(int g, int P, int Tt) {
  return int(((i64)(g + 1) * P + Tt - 1) / Tt) - 1;
}

// A position in the tile order: item (b, grp) of n tiles starting at global tile A, local tile t.
struct PersistCursor {
  int b, grp, t, n, A;
  DecodeItem item;
};
// The cursor at global tile g < Tt (the whole warp calls it).
template <int TK>
__device__ __forceinline__ PersistCursor persist_locate(const DecodeParams& p, int groups, int g, int lane) {
  int running = 0;
  for (int base = 0; base < p.B; base += 32) {
    const int b = base + lane;
    const int mine = b < p.B ? decode_item<TK>(p, b).tiles * groups : 0;
    int incl = mine;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int x = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += x;
    }
    const int excl = running + incl - mine;
    const unsigned hit = __ballot_sync(0xffffffffu, mine > 0 && excl <= g && g < running + incl);
    if (hit) {
      const int src = __ffs(hit) - 1, start = __shfl_sync(0xffffffffu, excl, src), bb = base + src;
      const DecodeItem item = decode_item<TK>(p, bb);
      const int off = g - start;
      return {bb, off / item.tiles, off % item.tiles, item.tiles, start + (off / item.tiles) * item.tiles, item};
    }
    running += __shfl_sync(0xffffffffu, incl, 31);
  }
  return {p.B, 0, 0, 0, running, DecodeItem{}};  // unreachable for g < Tt
}
// One tile on; past an item's last tile, the next item with tiles (uniform across the block).
template <int TK>
__device__ __forceinline__ void persist_advance(const DecodeParams& p, int groups, PersistCursor& c) {
  if (++c.t < c.n) return;
  c.A += c.n, c.t = 0;
  if (++c.grp < groups) return;
  c.grp = 0;
  for (++c.b; c.b < p.B; ++c.b) {
    c.item = decode_item<TK>(p, c.b);
    if (c.item.tiles > 0) break;
  }
  c.n = c.b < p.B ? c.item.tiles : 0;
}

template <class C, bool FP16>
__device__ __forceinline__ void flash_decode_persist(const DecodeParams& p) {
  constexpr int D = C::D_, DV = C::DV_, HB = C::HB_, RTH = C::RTH_, STAGES = C::STAGES_, TK = C::TK;
  static_assert(C::SLICES_ == 1, "one warp per row tile: its rows are final in registers");
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const int hh = warp / RTH, rt = warp % RTH;
  const int G = p.group, groups = p.K / HB, P = p.splits, w = blockIdx.x;

  const int Tt = tiles_before<TK>(p, p.B, lane) * groups;
  const int g0 = persist_start(w, P, Tt), count = persist_start(w + 1, P, Tt) - g0;
  if (count <= 0) return;

  const u32 bars = smem_addr(smem);
  unsigned char* loop = smem + C::BAR_BYTES;
  const u32 loop_smem = smem_addr(loop);
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES; ++s) dec_mbar_init(bars + s * 8, 1);
  __syncthreads();

  const bool paged = p.block_table != nullptr;
  const bool loader = threadIdx.x < 2 * TK;
  const int my_row = threadIdx.x % TK;
  const bool my_v = threadIdx.x >= TK;
  PersistCursor ld = persist_locate<TK>(p, groups, g0, lane), cp = ld;
  auto kv_base = [&](int b) { return p.kv_offsets ? (i64)p.kv_offsets[b] : (i64)b * p.S; };
  i64 ld_base = kv_base(ld.b);
  int ld_b = ld.b;
  auto page_for = [&](const PersistCursor& c) -> int {
    const int j = c.item.lo + c.t * TK + my_row;
    return (paged && loader && c.b < p.B && j < c.item.hi) ? p.block_table[(i64)c.b * p.max_blocks + j / p.block_size]
                                                            : 0;
  };
  auto load_stage = [&](int stage, const PersistCursor& c, int page) {
    const int key0 = c.item.lo + c.t * TK, j = key0 + my_row, u_hi = c.item.hi;
    const u32 bar = bars + stage * 8;
    const u32 base = loop_smem + stage * C::STAGE_BYTES;
    if (threadIdx.x == 0) dec_mbar_arrive_expect_tx(bar, imin(TK, u_hi - key0) * HB * (p.H + p.Hv) * 2);
    if (!loader) return;
    if (c.b != ld_b) ld_b = c.b, ld_base = kv_base(c.b);
    const u32 dst = my_v ? base + C::K_BYTES + my_row * C::PITCHV * 2 : base + my_row * C::PITCH * 2;
    if (j < u_hi) {
      const i64 slot = paged ? (i64)page * p.block_size + j % p.block_size : ld_base + j;
      const u16* src = my_v ? p.v + slot * p.v_token + (i64)c.grp * HB * p.v_head
                            : p.k + slot * p.k_token + (i64)c.grp * HB * p.k_head;
      bulk_row_copy(dst, src, HB * (my_v ? DV : D) * 2, bar);
    } else {
      zero_row(dst, 0, HB * (my_v ? DV : D));
      dec_fence_proxy_async();
    }
  };

  int page = 0;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s)
    if (s < count) {
      load_stage(s, ld, page_for(ld));
      persist_advance<TK>(p, groups, ld);
    }
  if (STAGES - 1 < count) page = page_for(ld);

  // The compute side's item: Q fragments, row ranges, running softmax (reset at every item).
  u32 qa[C::KT][4];
  int lo[2], hi[2], rows_b = 0;
  float m[2], l[2], o[C::DT][4];
  auto begin_item = [&]() {
    const int kh = cp.grp * HB + hh;
    rows_b = cp.item.Tb * G;
    load_q_fragments<C::KT>(qa, p, cp.b, kh, G, rt * 16, rows_b, lane);
    m[0] = m[1] = neg_inf();
    l[0] = l[1] = 0.f;
    start_rows<C::DT>(p, rt * 16, rows_b, cp.item.Tb, cp.item.Sb, g, lo, hi, o);
  };
  // This warp's rows of the item, normalised, to slot w − w_first(item) (write_merged_row at SLICES = 1).
  auto end_item = [&]() {
    constexpr float LN2 = 0.6931471805599453f;
    const int k = w - persist_block_of(cp.A, P, Tt), kh = cp.grp * HB + hh;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float L = l[h];
      L += __shfl_xor_sync(0xffffffffu, L, 1);
      L += __shfl_xor_sync(0xffffffffu, L, 2);
      const int rr = rt * 16 + g + 8 * h;
      if (rr >= rows_b) continue;
      const float base = m[h] == neg_inf() ? 0.f : m[h];
      const float weight = fast_exp2(m[h] - base);
      L *= weight;
      const bool empty = L == 0.f;
      const float inv = empty ? 0.f : 1.f / L;
      float log2l;
      asm("lg2.approx.f32 %0, %1;\n" : "=f"(log2l) : "f"(empty ? 1.f : L));
      const i64 out_row = query_token(p, cp.b, rr / G) * p.N + kh * G + rr % G;
      const i64 at = (i64)k * p.rows_total + out_row;
      float* dst = p.o_part + at * DV;
#pragma unroll
      for (int d = 0; d < C::DT; ++d)
        *reinterpret_cast<float2*>(dst + d * 8 + 2 * tq) =
            make_float2(o[d][2 * h] * weight * inv, o[d][2 * h + 1] * weight * inv);
      if (tq == 0) p.lse_part[at] = empty ? neg_inf() : (base + log2l) * LN2;
    }
  };
  begin_item();

  for (int j = 0; j < count; ++j) {
    const int stage = j % STAGES;
    __syncthreads();  // every warp is done with tile j − 1, whose stage is refilled next
    if (j + STAGES - 1 < count) {
      load_stage((j + STAGES - 1) % STAGES, ld, page);
      persist_advance<TK>(p, groups, ld);
      page = j + STAGES < count ? page_for(ld) : 0;
    }
    dec_mbar_wait(bars + stage * 8, (j / STAGES) & 1);

    const u32 k_tile = loop_smem + stage * C::STAGE_BYTES + hh * D * 2;
    const u32 v_tile = loop_smem + stage * C::STAGE_BYTES + C::K_BYTES + hh * DV * 2;
    const int key0 = cp.item.lo + cp.t * TK;
    float s[TK / 8][4];
    qk_tile<C::KT, TK, C::PITCH, FP16>(s, k_tile, 0, lane, [&](int kk, u32 (&a)[4]) {
#pragma unroll
      for (int c = 0; c < 4; ++c) a[c] = qa[kk][c];
    });
    online_softmax<TK, C::DT>(s, o, m, l, key0, lo, hi, p.scale_log2, tq);
    pv_tile<C, FP16, TK>(o, s, v_tile, key0, 0, cp.item.all_lo, cp.item.all_hi, lo, hi, lane);

    if (cp.t + 1 == cp.n || j + 1 == count) end_item();
    if (j + 1 < count) {
      const int b_was = cp.b, grp_was = cp.grp;
      persist_advance<TK>(p, groups, cp);
      if (cp.b != b_was || cp.grp != grp_was) begin_item();
    }
  }
}

// One warp per (token, head) row: its item's slots 0 … w_last − w_first (a block with no tiles,
// possible when P > Tt, wrote nothing: skipped), merged by their log-sum-exp as flash_decode_combine.
constexpr int DEC_PERSIST_MAX_BLOCKS = 512;  // P ≤ this (the host checks)
template <int HB, int TK, int DV, bool FP16>
__device__ __forceinline__ void flash_decode_persist_combine(const DecodeParams& p) {
  __shared__ float weights[4][DEC_PERSIST_MAX_BLOCKS];
  const int warp = threadIdx.x / 32, row = blockIdx.x * 4 + warp, lane = threadIdx.x % 32;
  if (row >= p.rows_total) return;
  const int token = row / p.N, n = row % p.N;
  int b;
  if (!p.q_offsets) {
    b = token / p.T;
    if (token % p.T >= (p.q_lens ? p.q_lens[b] : p.T)) return;
  } else {
    int lo = 0, hi = p.B - 1;  // the last b with q_offsets[b] ≤ token
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.q_offsets[mid] <= token) lo = mid;
      else hi = mid - 1;
    }
    b = lo;
  }
  const int groups = p.K / HB, grp = n / p.group / HB, P = p.splits;
  const int Tt = tiles_before<TK>(p, p.B, lane) * groups;
  const int nb = decode_item<TK>(p, b).tiles;
  const int A = tiles_before<TK>(p, b, lane) * groups + grp * nb;
  const int wf = nb ? persist_block_of(A, P, Tt) : 0, count = nb ? persist_block_of(A + nb - 1, P, Tt) - wf + 1 : 0;
  combine_row<DV, FP16, true>(p, row, lane, weights[warp], count, [&](int s) {
    const bool live = persist_start(wf + s, P, Tt) < persist_start(wf + s + 1, P, Tt);
    return live ? p.lse_part[(i64)s * p.rows_total + row] : neg_inf();
  });
}
