/**
 * The WGSL of the split-KV combine kernel (split variants only; the launcher runs it after the
 * forward kernel in the same compute pass).
 */
import { COMBINE_ROWS, combineBindings, type ForwardVariant, MAX_SPLITS } from './variant.js';
import { elementType, PARAMS_STRUCT, storeRow, WGSL_FUNCTIONS } from './wgsl.js';

/**
 * The combine kernel of a split variant: one invocation per (b, t, n) row merges its splits'
 * (max, sum, accumulator) as FlashDecoding does: M = max m_s, L = Σ l_s·e^(m_s−M),
 * o = Σ acc_s·e^(m_s−M) / L, lse = M + log L. A NaN sum in any split makes the row NaN; no
 * visible key in any split leaves zeros and lse −inf.
 */
export function combineSource(v: ForwardVariant): string {
  const slots = combineBindings(v);
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  return `
const HV: u32 = ${v.Hv}u;
${PARAMS_STRUCT}
${at('params')} var<uniform> P: Params;
${at('part_o')} var<storage, read> PART_O: array<f32>;
${at('part_ml')} var<storage, read> PART_ML: array<f32>;
${at('o')} var<storage, read_write> O: array<${elementType(v.dtype)}>;
${v.lse ? `${at('lse')} var<storage, read_write> LSE: array<f32>;` : ''}
${v.packedQuery ? `${at('offsets')} var<storage, read> OFFS: array<i32>;` : ''}
${WGSL_FUNCTIONS}

@compute @workgroup_size(${COMBINE_ROWS})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(num_workgroups) groups: vec3u, @builtin(local_invocation_index) lid: u32) {
  let row = (wg.y * groups.x + wg.x) * ${COMBINE_ROWS}u + lid;
  if (row >= P.B * P.T * P.N) { return; }
  let base = row * P.splits;
  var m = -3.0e38;
  var nan_row = false;
  for (var s = 0u; s < P.splits; s++) {
    let l = PART_ML[(base + s) * 2u + 1u];
    if (is_nan(l)) { nan_row = true; } else if (l > 0.0) { m = max(m, PART_ML[(base + s) * 2u]); }
  }
  var factor: array<f32, ${MAX_SPLITS}>;
  var total = 0.0;
  for (var s = 0u; s < P.splits; s++) {
    let l = PART_ML[(base + s) * 2u + 1u];
    factor[s] = 0.0;
    if (!is_nan(l) && l > 0.0) { factor[s] = exp(PART_ML[(base + s) * 2u] - m); total += l * factor[s]; }
  }
  var acc: array<f32, ${v.Hv}>;
  for (var h = 0u; h < HV; h++) {
    var x = 0.0;
    for (var s = 0u; s < P.splits; s++) {
      if (factor[s] > 0.0) { x += PART_O[(base + s) * HV + h] * factor[s]; }
    }
    acc[h] = x;
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
    for (var h = 0u; h < HV; h++) { acc[h] = 1.0; }
    lse_value = inv;
  } else if (total > 0.0) {
    inv = 1.0 / total;
    lse_value = m + log(total);
  }
  ${storeRow(v, (h) => `acc[${h}]`)}
  ${v.lse ? 'LSE[out_row] = lse_value;' : ''}
}
`;
}
