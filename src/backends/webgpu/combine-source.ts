/**
 * The WGSL of the split-KV combine kernel (split variants only; the launcher runs it after the
 * forward kernel in the same compute pass).
 */
import { COMBINE_WG, combineBindings, type ForwardVariant } from './variant.js';
import { elementType, PARAMS_STRUCT, WGSL_FUNCTIONS } from './wgsl.js';

/**
 * The combine kernel of a split variant: one workgroup of COMBINE_WG invocations per (b, t, n) row,
 * each invocation a set of output columns, merges the row's splits' (max, sum, accumulator) as
 * FlashDecoding does: M = max m_s, L = Σ l_s·e^(m_s−M), o = Σ acc_s·e^(m_s−M) / L, lse = M + log L.
 * The invocations of a row read one split's accumulator together (coalesced: a row of one
 * invocation each read 4 bytes every Hv·splits·4 bytes). A NaN sum in any split makes the row NaN;
 * no visible key in any split leaves zeros and lse −inf.
 */
export function combineSource(v: ForwardVariant): string {
  const slots = combineBindings(v);
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  const pairs = v.dtype !== 'float32';
  const store = pairs
    ? v.dtype === 'float16'
      ? 'O[(o0 + h) >> 1u] = pack_f16(vec2f(x0, x1) * inv);'
      : 'O[(o0 + h) >> 1u] = bf16(x0 * inv) | (bf16(x1 * inv) << 16u);'
    : 'O[o0 + h] = x0 * inv;';
  return `
const HV: u32 = ${v.Hv}u;
const WG: u32 = ${COMBINE_WG}u;
${PARAMS_STRUCT}
${at('params')} var<uniform> P: Params;
${at('part_o')} var<storage, read> PART_O: array<f32>;
${at('part_ml')} var<storage, read> PART_ML: array<f32>;
${at('o')} var<storage, read_write> O: array<${elementType(v.dtype)}>;
${v.lse ? `${at('lse')} var<storage, read_write> LSE: array<f32>;` : ''}
${v.packedQuery ? `${at('offsets')} var<storage, read> OFFS: array<i32>;` : ''}
${WGSL_FUNCTIONS}

@compute @workgroup_size(${COMBINE_WG})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(num_workgroups) groups: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = wg.y * groups.x + wg.x;
  if (row >= P.B * P.T * P.N) { return; }
  let base = row * P.splits;
  var m = -3.0e38;
  var nan_row = false;
  for (var s = 0u; s < P.splits; s++) {
    let l = PART_ML[(base + s) * 2u + 1u];
    if (is_nan(l)) { nan_row = true; } else if (l > 0.0) { m = max(m, PART_ML[(base + s) * 2u]); }
  }
  var total = 0.0;
  for (var s = 0u; s < P.splits; s++) {
    let l = PART_ML[(base + s) * 2u + 1u];
    if (!is_nan(l) && l > 0.0) { total += l * exp(PART_ML[(base + s) * 2u] - m); }
  }
  ${
    v.packedQuery
      ? `// Packed query: logical row (b, i, n) is output row (OFFS[b] + i, n), for i below b's length.
  let b = row / (P.T * P.N);
  let i = (row / P.N) % P.T;
  if (i32(i) >= OFFS[b + 1u] - OFFS[b]) { return; }
  let out_row = (u32(OFFS[b]) + i) * P.N + row % P.N;`
      : 'let out_row = row;'
  }
  let o0 = out_row * HV;
  var inv = 0.0;
  var lse_value = make_nan(0xff800000u);
  if (nan_row) {
    inv = make_nan(0x7fc00000u);
    lse_value = inv;
  } else if (total > 0.0) {
    inv = 1.0 / total;
    lse_value = m + log(total);
  }
  for (var h = lid * ${pairs ? 2 : 1}u; h < HV; h += WG * ${pairs ? 2 : 1}u) {
    var x0 = 0.0;
    ${pairs ? 'var x1 = 0.0;' : ''}
    for (var s = 0u; s < P.splits; s++) {
      let l = PART_ML[(base + s) * 2u + 1u];
      if (!is_nan(l) && l > 0.0) {
        let f = exp(PART_ML[(base + s) * 2u] - m);
        x0 += PART_O[(base + s) * HV + h] * f;
        ${pairs ? 'x1 += PART_O[(base + s) * HV + h + 1u] * f;' : ''}
      }
    }
    if (nan_row) { x0 = 1.0; ${pairs ? 'x1 = 1.0;' : ''} }
    ${store}
  }
  ${v.lse ? 'if (lid == 0u) { LSE[out_row] = lse_value; }' : ''}
}
`;
}
