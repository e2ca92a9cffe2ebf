// The Hopper forward's epilogue: a consumer warpgroup's 64 rows of O, normalised, straight from the
// wgmma accumulators to global memory, and the rows' log-sum-exp.
#pragma once
#include "flash/epilogue.cuh"
#include "flash/recompute.cuh"
#include "hopper/fwd_config.cuh"

// Writes the consumer's rows: O·(1/l) (zeros for rows past the batch's length or that saw no key)
// and the log-sum-exp. Straight from the accumulators: per 8 columns a quad writes 16 bytes of a
// row; at T=8192 the output is < 1% of the kernel's traffic-free time.
template <class C>
__device__ __forceinline__ void store_rows(const FlashParams& p, const FlashMods& m, const TileWork& w,
                                           const float (&o)[C::DT][4], const float (&inv)[2], const float (&lse)[2],
                                           int row0, int lane) {
  u16* out = p.o + w.b * p.o_strides[0] + w.n * p.o_strides[2];
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= p.T) continue;
    // A select, not a multiply by 0: an empty or padding row is 0 whatever its accumulator holds.
    const bool write = row < w.t_len && inv[h] != 0.f;
    const bool finite_row = write && inv[h] == inv[h];  // inv is NaN for a NaN row
    u16* dst = out + row * p.o_strides[1] + 2 * t;
#pragma unroll
    for (int d = 0; d < C::DT; ++d) {
      if (8 * d >= p.Hv) break;  // columns past Hv (D rounds Hv up to 64) are TMA's zeros, not output
      float x[2] = {o[d][2 * h] * inv[h], o[d][2 * h + 1] * inv[h]};
      // A NaN element of a finite row can only be a hidden key's NaN/Inf value times its weight 0
      // inside P·V (the causal diagonal tile, a mask or a mask modifier): recompute it over the keys
      // the row sees (flash/recompute.cuh, which applies the modifiers too). On finite inputs this is one compare per element, never taken.
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (finite_row && x[e] != x[e]) x[e] = recompute_element<C::FP16 ? 1 : 0, C::BIAS, C::MASK>(p, w.b, w.n, row, 8 * d + 2 * t + e, m);
      *reinterpret_cast<u32*>(dst + 8 * d) = write ? pack2<C::FP16>(x[0], x[1]) : 0u;
    }
    if (p.lse != nullptr && t == 0) p.lse[(static_cast<i64>(w.b) * p.T + row) * p.N + w.n] = row < w.t_len ? lse[h] : neg_inf();
  }
}
