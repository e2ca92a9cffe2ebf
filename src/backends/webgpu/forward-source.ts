/**
 * The WGSL of the forward kernel, specialised by its variant: FlashAttention's tiled online
 * softmax with one invocation per query row. A workgroup takes ROWS query rows of one (b, n) and
 * walks the key tiles any of its rows can see; each tile of BC keys (K and V, converted to f32) is
 * loaded once into workgroup memory and read by every row.
 *
 * Storage: float32 is array<f32>; float16 and bfloat16 are two values to an array<u32> word,
 * converted with unpack2x16float / a 16-bit shift (core WGSL, so they need no shader-f16); the
 * arithmetic is f32. A bool mask is four bytes to a word.
 *
 * The NaN rules are explicit, not left to the GPU's max(): WGSL lets an implementation assume no
 * NaN or infinity, and Vulkan's FMax returns either operand for a NaN. A NaN or +inf logit makes
 * the row NaN; a −inf logit is a masked key; a row that sees no key outputs zeros with lse −inf.
 */
import { bindings, type ForwardVariant } from './variant.js';
import {
  elementType,
  loader,
  loader4,
  PAGED_ROW,
  PARAMS_STRUCT,
  ROW_RANGE,
  storeRow,
  WGSL_FUNCTIONS,
} from './wgsl.js';

export function forwardSource(v: ForwardVariant): string {
  const slots = bindings(v);
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  const t = elementType(v.dtype);
  const decl = [
    `${at('params')} var<uniform> P: Params;`,
    `${at('q')} var<storage, read> Q: array<${t}>;`,
    `${at('k')} var<storage, read> Kb: array<${t}>;`,
    `${at('v')} var<storage, read> Vb: array<${t}>;`,
    v.split ? '' : `${at('o')} var<storage, read_write> O: array<${t}>;`,
    v.lse && !v.split ? `${at('lse')} var<storage, read_write> LSE: array<f32>;` : '',
    v.split ? `${at('part_o')} var<storage, read_write> PART_O: array<f32>;` : '',
    v.split ? `${at('part_ml')} var<storage, read_write> PART_ML: array<f32>;` : '',
    v.bias ? `${at('bias')} var<storage, read> BIAS: array<${elementType(v.bias)}>;` : '',
    v.mask ? `${at('mask')} var<storage, read> MASK: array<u32>;` : '',
    v.lengths ? `${at('lengths')} var<storage, read> LENS: array<i32>;` : '',
    v.paged ? `${at('table')} var<storage, read> TABLE: array<i32>;` : '',
    v.packedQuery || v.packedKv ? `${at('offsets')} var<storage, read> OFFS: array<i32>;` : '',
  ].filter(Boolean);
  const W = v.vec;
  const VT = W === 4 ? 'vec4f' : 'f32';
  const el = (h: string) => (W === 4 ? `acc[(${h}) / 4u][(${h}) % 4u]` : `acc[${h}]`);
  const load = (name: string, buffer: string) =>
    W === 4 ? loader4(name, buffer, v.dtype) : loader(name, buffer, v.dtype);
  const L = v.lanes;
  return `${L === 2 ? 'enable subgroups;\n' : ''}
const H: u32 = ${v.H}u;
const HV: u32 = ${v.Hv}u;
const ROWS: u32 = ${v.rows}u;
/** Invocations per query row, and each one's share of H and Hv in registers and of Hv in elements. */
const LANES: u32 = ${L}u;
const BC: u32 = ${v.bc}u;
/** Values per register (vec4f or f32), and H and HV in registers. */
const W: u32 = ${W}u;
const HW: u32 = ${v.H / W}u;
const HVW: u32 = ${v.Hv / W}u;
const HWL: u32 = ${v.H / W / L}u;
const HVWL: u32 = ${v.Hv / W / L}u;
const HVL: u32 = ${v.Hv / L}u;

${PARAMS_STRUCT}

${decl.join('\n')}

var<workgroup> k_tile: array<${VT}, ${(v.bc * v.H) / W}>;
var<workgroup> v_tile: array<${VT}, ${(v.bc * v.Hv) / W}>;
var<workgroup> block_lo: atomic<i32>;
var<workgroup> block_hi: atomic<i32>;
var<workgroup> range_lo: i32;
var<workgroup> range_hi: i32;

${load('load_q', 'Q')}
${load('load_k', 'Kb')}
${load('load_v', 'Vb')}
${v.bias ? loader('load_bias', 'BIAS', v.bias) : ''}

${WGSL_FUNCTIONS}
${ROW_RANGE}

/** The row of key/value token j of sequence b: through the block table for a paged cache. */
fn kv_row(b: u32, j: u32) -> u32 {
  ${v.paged ? PAGED_ROW : v.packedKv ? 'return u32(OFFS[P.B + 1u + b]) + j;' : 'return b * P.S + j;'}
}

/** The row of query (and output) i of sequence b: from its offset for a packed query. */
fn q_row(b: u32, i: u32) -> u32 {
  ${v.packedQuery ? 'return u32(OFFS[b]) + i;' : 'return b * P.T + i;'}
}

@compute @workgroup_size(${v.rows * L})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let lane = lid % LANES;
  let b = wg.z / P.splits;
  let split = wg.z % P.splits;
  let n = wg.y;
  let i = wg.x * ROWS + lid / LANES;
  let kh = n / (P.N / P.K);
  ${v.lengths ? 'let t_len = LENS[b]; let s_len = LENS[P.B + b];' : 'let t_len = i32(P.T); let s_len = i32(P.S);'}
  let row_valid = i < P.T && i32(i) < t_len;
  let span = row_range(i, t_len, s_len);
  let lo = span.x;
  let hi = span.y;
  if (lid == 0u) { atomicStore(&block_lo, i32(P.S)); atomicStore(&block_hi, 0); }
  workgroupBarrier();
  if (lo < hi) { atomicMin(&block_lo, lo); atomicMax(&block_hi, hi); }
  workgroupBarrier();
  // The tile loop holds barriers, so its bounds must be workgroup-uniform values.
  if (lid == 0u) { range_lo = atomicLoad(&block_lo); range_hi = atomicLoad(&block_hi); }
  var first = workgroupUniformLoad(&range_lo);
  var last = workgroupUniformLoad(&range_hi);
  ${
    v.split
      ? `// This workgroup's chunk of keys: S cut into P.splits chunks of whole tiles.
  let chunk = i32(((P.S + P.splits - 1u) / P.splits + BC - 1u) / BC * BC);
  first = max(first, i32(split) * chunk);
  last = min(last, i32(split + 1u) * chunk);`
      : ''
  }

  var q: array<${VT}, ${v.H / W / L}>;
  var acc: array<${VT}, ${v.Hv / W / L}>;
  var s: array<f32, ${v.bc}>;
  let q0 = (q_row(b, min(i, P.T - 1u)) * P.N + n) * H;
  for (var h = 0u; h < HWL; h++) { q[h] = load_q(q0 + (lane * HWL + h) * W) * P.scale; }
  for (var h = 0u; h < HVWL; h++) { acc[h] = ${VT}(0.0); }
  var row_max = 0.0;
  var row_sum = 0.0;
  var seen = false;
  var nan_row = false;
  ${v.bias ? 'let bias_row = b * P.bias_strides.x + n * P.bias_strides.y + i * P.bias_strides.z;' : ''}
  ${v.mask ? 'let mask_row = b * P.mask_strides.x + n * P.mask_strides.y + i * P.mask_strides.z;' : ''}

  var j0 = (first / i32(BC)) * i32(BC);
  loop {
    if (j0 >= last) { break; }
    // Load the tile: BC keys of K and V as f32 (keys past S read as zero and are never visible).
    for (var e = lid; e < BC * HW; e += ROWS * LANES) {
      let j = u32(j0) + e / HW;
      if (j < P.S) { k_tile[e] = load_k((kv_row(b, j) * P.K + kh) * H + (e % HW) * W); } else { k_tile[e] = ${VT}(0.0); }
    }
    for (var e = lid; e < BC * HVW; e += ROWS * LANES) {
      let j = u32(j0) + e / HVW;
      if (j < P.S) { v_tile[e] = load_v((kv_row(b, j) * P.K + kh) * HV + (e % HVW) * W); } else { v_tile[e] = ${VT}(0.0); }
    }
    workgroupBarrier();
    ${
      L === 2
        ? `// Every key's score, half from each lane: the shuffle runs on the whole subgroup, outside
    // the per-row branches below.
    var dots: array<f32, ${v.bc}>;
    for (var c = 0u; c < BC; c++) {
      var half_dot = 0.0;
      for (var h = 0u; h < HWL; h++) { half_dot += ${W === 4 ? 'dot(q[h], k_tile[c * HW + lane * HWL + h])' : 'q[h] * k_tile[c * HW + lane * HWL + h]'}; }
      dots[c] = half_dot + subgroupShuffleXor(half_dot, 1u);
    }`
        : ''
    }
    var tile_max = 0.0;
    var tile_any = false;
    for (var c = 0u; c < BC; c++) {
      let j = j0 + i32(c);
      var visible = j >= lo && j < hi;
      ${v.mask ? `if (visible) { let m = mask_row + u32(j) * P.mask_strides.w; visible = ((MASK[m >> 2u] >> ((m & 3u) * 8u)) & 0xffu) != 0u; }` : ''}
      var x = 0.0;
      if (visible) {
        ${L === 2 ? 'x = dots[c];' : `for (var h = 0u; h < HW; h++) { x += ${W === 4 ? 'dot(q[h], k_tile[c * HW + h])' : 'q[h] * k_tile[c * HW + h]'}; }`}
        ${v.bias ? 'x += load_bias(bias_row + u32(j) * P.bias_strides.w);' : ''}
        if (is_nan_or_pos_inf(x)) { nan_row = true; visible = false; }
        else if (is_neg_inf(x)) { visible = false; }
      }
      if (visible) {
        tile_max = select(x, max(tile_max, x), tile_any);
        tile_any = true;
      }
      s[c] = x;
      // A key that is not visible is marked by a NaN in s, which the loop below skips.
      if (!visible) { s[c] = make_nan(0x7fc00000u); }
    }
    if (tile_any) {
      let new_max = select(tile_max, max(row_max, tile_max), seen);
      let correction = select(0.0, exp(row_max - new_max), seen);
      row_sum *= correction;
      for (var h = 0u; h < HVWL; h++) { acc[h] *= correction; }
      for (var c = 0u; c < BC; c++) {
        if ((bitcast<u32>(s[c]) & 0x7fffffffu) > 0x7f800000u) { continue; }
        let w = exp(s[c] - new_max);
        row_sum += w;
        for (var h = 0u; h < HVWL; h++) { acc[h] += w * v_tile[c * HVW + lane * HVWL + h]; }
      }
      row_max = new_max;
      seen = true;
    }
    workgroupBarrier();
    j0 += i32(BC);
  }

  if (i >= P.T) { return; }
  ${
    v.split
      ? `let part = ((b * P.T + i) * P.N + n) * P.splits + split;
  for (var h = 0u; h < HVL; h++) { PART_O[part * HV + lane * HVL + h] = ${el('h')}; }
  if (lane == 0u) {
    PART_ML[part * 2u] = select(-3.0e38, row_max, seen);
    PART_ML[part * 2u + 1u] = select(select(0.0, row_sum, seen), make_nan(0x7fc00000u), nan_row);
  }`
      : `${v.packedQuery ? 'if (i32(i) >= t_len) { return; } // a packed query has no row here' : ''}
  let o0 = (q_row(b, i) * P.N + n) * HV + lane * HVL;
  var inv = 0.0;
  var lse_value = make_nan(0xff800000u);
  if (nan_row) {
    inv = make_nan(0x7fc00000u);
    for (var h = 0u; h < HVWL; h++) { acc[h] = ${VT}(1.0); }
    lse_value = inv;
  } else if (seen && row_sum > 0.0) {
    inv = 1.0 / row_sum;
    lse_value = row_max + log(row_sum);
  }
  ${storeRow(v, el, 'HVL')}
  ${v.lse ? 'if (lane == 0u) { LSE[q_row(b, i) * P.N + n] = lse_value; }' : ''}`
  }
}
`;
}
