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
import type { FloatDType } from '../../tensor/dtype.js';

export interface ForwardVariant {
  readonly dtype: 'float32' | 'float16' | 'bfloat16';
  readonly H: number;
  readonly Hv: number;
  /** Query rows per workgroup (one invocation each). */
  readonly rows: number;
  /** Keys per tile in workgroup memory. */
  readonly bc: number;
  readonly bias: 'float32' | 'float16' | 'bfloat16' | null;
  readonly mask: boolean;
  readonly causal: boolean;
  readonly window: boolean;
  readonly lengths: boolean;
  readonly lse: boolean;
  /**
   * Split-KV: the keys are cut into Params.splits chunks, each workgroup writes its chunk's
   * unnormalised accumulator, max and sum to scratch, and combineSource's kernel merges them. For
   * few query rows (decode) it is what gives the GPU enough workgroups.
   */
  readonly split: boolean;
  /**
   * Values per register: 4 (vec4f q, K/V tiles and accumulator: one 16-byte workgroup load and a
   * dot() per 4 products) where H and Hv are multiples of 4, else 1.
   */
  readonly vec: 4 | 1;
  /** Key and value are pools read through a block table (Params.paged: block size, table width). */
  readonly paged: boolean;
  /**
   * Invocations per query row: 2 with subgroups (each holds half of q and of the accumulator, and
   * a score is its half-dot plus its partner's through subgroupShuffleXor: 2·H/2·4 bytes of
   * registers instead of 2·H·4, which at H=128 no longer spills past 255 registers), else 1.
   */
  readonly lanes: 1 | 2;
  /** Packed sequences: the query (and output) rows, and the key/value rows, start at OFFS entries. */
  readonly packedQuery: boolean;
  readonly packedKv: boolean;
}

/** The variant key: it names the kernel in results and keys the pipeline cache. */
export function variantKey(v: ForwardVariant): string {
  const flags = [
    v.causal ? 'causal' : '',
    v.window ? 'window' : '',
    v.lengths ? 'lengths' : '',
    v.bias ? `bias-${v.bias}` : '',
    v.mask ? 'mask' : '',
    v.lse ? 'lse' : '',
    v.split ? 'split' : '',
    v.vec === 4 ? 'v4' : '',
    v.paged ? 'paged' : '',
    v.packedQuery ? 'packedq' : '',
    v.packedKv ? 'packedkv' : '',
  ].filter(Boolean);
  return `webgpu-flash-${v.lanes === 2 ? 'subgroups' : 'plain'}-${v.dtype}-h${v.H}-hv${v.Hv}-r${v.rows}-c${v.bc}${flags.length ? `-${flags.join('-')}` : ''}`;
}

/** WGSL that reads element i of a buffer of `dtype` as f32. */
function loader(name: string, buffer: string, dtype: FloatDType): string {
  switch (dtype) {
    case 'float32':
      return `fn ${name}(i: u32) -> f32 { return ${buffer}[i]; }`;
    case 'float16':
      return `fn ${name}(i: u32) -> f32 { return unpack2x16float(${buffer}[i >> 1u])[i & 1u]; }`;
    case 'bfloat16':
      return `fn ${name}(i: u32) -> f32 { return bitcast<f32>(((${buffer}[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu) << 16u); }`;
    default:
      throw new Error(`no WGSL loader for ${dtype}`);
  }
}

function elementType(dtype: FloatDType): string {
  return dtype === 'float32' ? 'f32' : 'u32';
}

/** The binding numbers, in the order the launcher binds them. */
export function bindings(v: ForwardVariant): string[] {
  const outputs = v.split ? ['part_o', 'part_ml'] : ['o', ...(v.lse ? ['lse'] : [])];
  return [
    'params',
    'q',
    'k',
    'v',
    ...outputs,
    ...(v.bias ? ['bias'] : []),
    ...(v.mask ? ['mask'] : []),
    ...(v.lengths ? ['lengths'] : []),
    ...(v.paged ? ['table'] : []),
    ...(v.packedQuery || v.packedKv ? ['offsets'] : []),
  ];
}

/** The combine kernel's bindings (split variants only). */
export function combineBindings(v: ForwardVariant): string[] {
  return [
    'params',
    'part_o',
    'part_ml',
    'o',
    ...(v.lse ? ['lse'] : []),
    ...(v.packedQuery ? ['offsets'] : []),
  ];
}

/** Rows per workgroup of the combine kernel, and the most splits it merges (its private array). */
export const COMBINE_ROWS = 64;
export const MAX_SPLITS = 64;

const PARAMS_STRUCT = `struct Params {
  B: u32, T: u32, S: u32, N: u32,
  K: u32, bottom_right: u32, win_left: i32, win_right: i32,
  scale: f32, causal: u32, has_window: u32, splits: u32,
  bias_strides: vec4u,
  mask_strides: vec4u,
  paged: vec4u,
}`;

const HELPERS = `
/** A NaN or infinity by its bits: a runtime value, since a constant one is a shader-creation error. */
fn make_nan(bits: u32) -> f32 { return bitcast<f32>(bits); }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_nan_or_pos_inf(x: f32) -> bool { let b = bitcast<u32>(x); return (b & 0x7fffffffu) > 0x7f800000u || b == 0x7f800000u; }
fn is_neg_inf(x: f32) -> bool { return bitcast<u32>(x) == 0xff800000u; }
fn bf16(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) { return 0x7fc0u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}`;

/**
 * WGSL that writes element h of the accumulator (`el('h')`) times inv, for h < HV, to the output
 * row starting at element o0.
 */
function storeRow(v: ForwardVariant, el: (h: string) => string, count = 'HV'): string {
  return v.dtype === 'float32'
    ? `for (var h = 0u; h < ${count}; h++) { O[o0 + h] = ${el('h')} * inv; }`
    : v.dtype === 'float16'
      ? `for (var h = 0u; h < ${count}; h += 2u) { O[(o0 + h) >> 1u] = pack2x16float(vec2f(${el('h')} * inv, ${el('h + 1u')} * inv)); }`
      : `for (var h = 0u; h < ${count}; h += 2u) { O[(o0 + h) >> 1u] = bf16(${el('h')} * inv) | (bf16(${el('h + 1u')} * inv) << 16u); }`;
}

/** A paged cache's token row: pool block table[b][j / blockSize] (a padding −1 reads block 0, never used). */
const PAGED_ROW =
  'let block = u32(max(TABLE[b * P.paged.y + j / P.paged.x], 0)); return block * P.paged.x + j % P.paged.x;';

/** WGSL that reads 4 consecutive elements from element i (a multiple of 4) of a buffer of `dtype`. */
function loader4(name: string, buffer: string, dtype: ForwardVariant['dtype']): string {
  switch (dtype) {
    case 'float32':
      return `fn ${name}(i: u32) -> vec4f { return vec4f(${buffer}[i], ${buffer}[i + 1u], ${buffer}[i + 2u], ${buffer}[i + 3u]); }`;
    case 'float16':
      return `fn ${name}(i: u32) -> vec4f { return vec4f(unpack2x16float(${buffer}[i >> 1u]), unpack2x16float(${buffer}[(i >> 1u) + 1u])); }`;
    case 'bfloat16':
      return (
        `fn ${name}(i: u32) -> vec4f { let a = ${buffer}[i >> 1u]; let b = ${buffer}[(i >> 1u) + 1u]; ` +
        'return vec4f(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xffff0000u), bitcast<f32>(b << 16u), bitcast<f32>(b & 0xffff0000u)); }'
      );
  }
}

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
${HELPERS}

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

${HELPERS}

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
  // Keys [lo, hi) this row may see (src/backends/cpu/visibility.ts states the rule).
  var lo = 0;
  var hi = 0;
  let row_valid = i < P.T && i32(i) < t_len;
  if (row_valid) {
    hi = s_len;
    var diagonal = i32(i);
    if (P.bottom_right != 0u) { diagonal += s_len - t_len; }
    if (P.causal != 0u) { hi = min(hi, diagonal + 1); }
    if (P.has_window != 0u) {
      lo = max(lo, diagonal - P.win_left);
      hi = min(hi, diagonal + P.win_right + 1);
    }
    lo = max(lo, 0);
    hi = max(hi, 0);
  }
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
