/**
 * The WGSL of the tiled forward kernel: a query tile per workgroup, the scores and the output
 * computed as small register blocks (a GEMM's micro-tiles) instead of one query row per invocation.
 *
 * A workgroup of WG=128 invocations takes BR=32 query rows of one (b, n); their scaled q stays in
 * workgroup memory for the whole key loop. Per tile of BC keys, four phases, each ended by a
 * barrier:
 *   1. K's tile (BC keys, f32) into workgroup memory;
 *   2. scores: each invocation computes SR=2 rows × SC keys of S = q·kᵀ (vec4 dot products: every
 *      16-byte q and k read feeds 2·SC or SR·4 multiply-adds), applies bias, mask and the NaN rules,
 *      and writes them to the score tile;
 *   3. the online softmax, one invocation a row (every fourth, so each warp takes 8 rows): the
 *      tile's max, p = e^(s − m_new) over the scores, the running sum, and the correction
 *      e^(m_old − m_new) for phase 4; V's tile is loaded into K's buffer meanwhile;
 *   4. O += P·V: each invocation holds OR rows × OC columns of the output accumulator in registers
 *      (4 × 8 at Hv=128: two V vec4 reads and four p reads feed 32 multiply-adds), after scaling
 *      them by the correction.
 * The softmax bookkeeping is done once per score, not once per output column as in the row kernel.
 * Four barriers a tile, not five with the softmax spread over 4 invocations a row: SwiftShader
 * compiles each barrier as a coroutine suspension, and the five-barrier kernel took 27 s to build.
 *
 * Workgroup rows are padded by one vec4 (QS, KS): the 8 invocations of a quarter-warp read 8
 * consecutive keys of one h, which without the pad are 512 bytes apart at H=128 and fall in one bank.
 *
 * Storage, dtypes and the NaN rules are those of forward-source.ts: a NaN or +inf logit makes the
 * row NaN; −inf is a masked key; a row that sees no key outputs zeros with lse −inf.
 */
import { bindings, type ForwardVariant } from './variant.js';
import { elementType, loader, loader4, PAGED_ROW, PARAMS_STRUCT, ROW_RANGE, WGSL_FUNCTIONS } from './wgsl.js';

/** Invocations per workgroup, query rows per workgroup, score rows per invocation. */
export const TILED_WG = 128;
export const TILED_ROWS = 32;
const SR = 2;
/** Invocations per row: every TPR-th one runs a row's softmax (TILED_WG / TILED_ROWS). */
const TPR = TILED_WG / TILED_ROWS;
/** Invocations along the keys in the score phase: TILED_WG / (TILED_ROWS / SR). */
const KG = TILED_WG / (TILED_ROWS / SR);

/** The output block of one invocation: OR rows × OC columns, or null where Hv does not divide. */
export function outputBlock(Hv: number): { rows: number; cols: number } | null {
  for (const cols of [8, 4]) {
    if (Hv % cols !== 0) continue;
    const colGroups = Hv / cols;
    if (TILED_WG % colGroups !== 0) continue;
    const rowGroups = TILED_WG / colGroups;
    if (rowGroups > TILED_ROWS || TILED_ROWS % rowGroups !== 0) continue;
    return { rows: TILED_ROWS / rowGroups, cols };
  }
  return null;
}

/** Workgroup bytes the tiled kernel takes with tiles of `bc` keys. */
export function tiledStorageBytes(H: number, Hv: number, bc: number): number {
  const qs = H / 4 + 1;
  const kv = Math.max(qs, Hv / 4);
  return TILED_ROWS * qs * 16 + bc * kv * 16 + TILED_ROWS * (bc + 1) * 4 + TILED_ROWS * 6 * 4 + 16;
}

/** WGSL that writes vec4f `x` to output elements [e, e+4) of O. */
function store4(v: ForwardVariant): string {
  switch (v.dtype) {
    case 'float32':
      return 'fn store4(e: u32, x: vec4f) { O[e] = x.x; O[e + 1u] = x.y; O[e + 2u] = x.z; O[e + 3u] = x.w; }';
    case 'float16':
      return 'fn store4(e: u32, x: vec4f) { O[e >> 1u] = pack_f16(x.xy); O[(e >> 1u) + 1u] = pack_f16(x.zw); }';
    case 'bfloat16':
      return 'fn store4(e: u32, x: vec4f) { O[e >> 1u] = bf16(x.x) | (bf16(x.y) << 16u); O[(e >> 1u) + 1u] = bf16(x.z) | (bf16(x.w) << 16u); }';
  }
}

/**
 * Phase 3, the online softmax of each row. With subgroups (lanes 4) the row's TPR=4 adjacent
 * invocations take every fourth key each and combine their max, flags and sums through
 * subgroupShuffleXor (a subgroup has at least 4 invocations: WebgpuInfo.subgroups); without, the
 * first of the four takes the whole row while the others wait (32 of 128 invocations busy).
 * Every invocation of a row ends with the row's max m, sum l and flags in registers.
 */
function softmaxPhase(v: ForwardVariant): string {
  if (v.lanes === 4) {
    return `// 3. The online softmax, the row's 4 adjacent invocations on every fourth key each;
    // V's tile goes into K's buffer meanwhile.
    {
      var tmax = make_nan(0xff800000u);
      var tflags = 0u;
      for (var k = 0u; k < BC / TPR; k++) {
        let x = s_tile[m_r * SS + part + TPR * k];
        if (is_pos_inf(x)) { tflags |= 2u; }
        else if (!is_nan(x)) { tmax = max(tmax, x); tflags |= 1u; }
      }
      tmax = max(tmax, subgroupShuffleXor(tmax, 1u));
      tmax = max(tmax, subgroupShuffleXor(tmax, 2u));
      tflags |= subgroupShuffleXor(tflags, 1u);
      tflags |= subgroupShuffleXor(tflags, 2u);
      let seen = (flags & 1u) != 0u;
      var m_new = m;
      if ((tflags & 1u) != 0u) { m_new = select(tmax, max(m, tmax), seen); }
      var psum = 0.0;
      for (var k = 0u; k < BC / TPR; k++) {
        let idx = m_r * SS + part + TPR * k;
        let x = s_tile[idx];
        var w = make_nan(0x80000000u);
        if (!is_nan_or_pos_inf(x)) { w = exp(x - m_new); }
        s_tile[idx] = w;
        psum += w;
      }
      psum += subgroupShuffleXor(psum, 1u);
      psum += subgroupShuffleXor(psum, 2u);
      let corr = select(1.0, exp(m - m_new), seen && (tflags & 1u) != 0u);
      if (part == 0u) { row_corr[m_r] = corr; }
      l = l * corr + psum;
      m = m_new;
      flags |= tflags;
    }`;
  }
  return `// 3. The online softmax of each row, by one invocation a row (spread over the warps: lid = TPR·r)
    // holding the row's max, sum and flags in registers; V's tile goes into K's buffer meanwhile.
    if (part == 0u) {
      var tmax = 0.0;
      var tflags = 0u;
      for (var c = 0u; c < BC; c++) {
        let x = s_tile[m_r * SS + c];
        if (is_nan(x)) { continue; }
        if (is_pos_inf(x)) { tflags |= 2u; continue; }
        tmax = select(x, max(tmax, x), (tflags & 1u) != 0u);
        tflags |= 1u;
      }
      let seen = (flags & 1u) != 0u;
      var m_new = m;
      if ((tflags & 1u) != 0u) { m_new = select(tmax, max(m, tmax), seen); }
      var psum = 0.0;
      for (var c = 0u; c < BC; c++) {
        let x = s_tile[m_r * SS + c];
        var w = make_nan(0x80000000u);
        if (!is_nan_or_pos_inf(x)) { w = exp(x - m_new); }
        s_tile[m_r * SS + c] = w;
        psum += w;
      }
      let corr = select(1.0, exp(m - m_new), seen && (tflags & 1u) != 0u);
      row_corr[m_r] = corr;
      l = l * corr + psum;
      m = m_new;
      flags |= tflags;
    }`;
}

export function tiledSource(v: ForwardVariant): string {
  const block = outputBlock(v.Hv);
  if (!block || v.H % 4 !== 0) throw new Error(`no tiled layout for H=${v.H} Hv=${v.Hv}`);
  const slots = bindings(v);
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  const t = elementType(v.dtype);
  const decl = [
    `${at('params')} var<uniform> P: Params;`,
    `${at('q')} var<storage, read> Q: array<${t}>;`,
    `${at('k')} var<storage, read> Kb: array<${t}>;`,
    `${at('v')} var<storage, read> Vb: array<${t}>;`,
    `${at('o')} var<storage, read_write> O: array<${t}>;`,
    v.lse ? `${at('lse')} var<storage, read_write> LSE: array<f32>;` : '',
    v.bias ? `${at('bias')} var<storage, read> BIAS: array<${elementType(v.bias)}>;` : '',
    v.mask ? `${at('mask')} var<storage, read> MASK: array<u32>;` : '',
    v.lengths ? `${at('lengths')} var<storage, read> LENS: array<i32>;` : '',
    v.paged ? `${at('table')} var<storage, read> TABLE: array<i32>;` : '',
    v.packedQuery || v.packedKv ? `${at('offsets')} var<storage, read> OFFS: array<i32>;` : '',
  ].filter(Boolean);
  const oc4 = block.cols / 4;
  const ct = v.Hv / block.cols;
  return `${v.lanes === 4 ? 'enable subgroups;\n' : ''}
const H: u32 = ${v.H}u;
const HV: u32 = ${v.Hv}u;
const H4: u32 = ${v.H / 4}u;
const HV4: u32 = ${v.Hv / 4}u;
const QS: u32 = ${v.H / 4 + 1}u;
const KS: u32 = ${v.H / 4 + 1}u;
const BR: u32 = ${TILED_ROWS}u;
const BC: u32 = ${v.bc}u;
/** The score tile's row stride: BC + 1, so the softmax phase's 8 rows a warp fall in distinct banks. */
const SS: u32 = ${v.bc + 1}u;
const WG: u32 = ${TILED_WG}u;
const SR: u32 = ${SR}u;
const KG: u32 = ${KG}u;
const SC: u32 = ${v.bc / KG}u;
const TPR: u32 = ${TPR}u;
const OR: u32 = ${block.rows}u;
const OC4: u32 = ${oc4}u;
const CT: u32 = ${ct}u;

${PARAMS_STRUCT}

${decl.join('\n')}

var<workgroup> q_tile: array<vec4f, ${TILED_ROWS * (v.H / 4 + 1)}>;
var<workgroup> kv_tile: array<vec4f, ${v.bc * Math.max(v.H / 4 + 1, v.Hv / 4)}>;
var<workgroup> s_tile: array<f32, ${TILED_ROWS * (v.bc + 1)}>;
/** Per row: this tile's correction e^(m_old − m_new); after the loop, the max, sum and flags. */
var<workgroup> row_corr: array<f32, ${TILED_ROWS}>;
var<workgroup> row_m: array<f32, ${TILED_ROWS}>;
var<workgroup> row_l: array<f32, ${TILED_ROWS}>;
var<workgroup> row_flags: array<u32, ${TILED_ROWS}>;
var<workgroup> row_lo: array<i32, ${TILED_ROWS}>;
var<workgroup> row_hi: array<i32, ${TILED_ROWS}>;
var<workgroup> block_lo: atomic<i32>;
var<workgroup> block_hi: atomic<i32>;
var<workgroup> range_lo: i32;
var<workgroup> range_hi: i32;

${loader4('load_q', 'Q', v.dtype)}
${loader4('load_k', 'Kb', v.dtype)}
${loader4('load_v', 'Vb', v.dtype)}
${v.bias ? loader('load_bias', 'BIAS', v.bias) : ''}

${WGSL_FUNCTIONS}
${ROW_RANGE}
fn is_pos_inf(x: f32) -> bool { return bitcast<u32>(x) == 0x7f800000u; }
${store4(v)}

fn kv_row(b: u32, j: u32) -> u32 {
  ${v.paged ? PAGED_ROW : v.packedKv ? 'return u32(OFFS[P.B + 1u + b]) + j;' : 'return b * P.S + j;'}
}

fn q_row(b: u32, i: u32) -> u32 {
  ${v.packedQuery ? 'return u32(OFFS[b]) + i;' : 'return b * P.T + i;'}
}

@compute @workgroup_size(${TILED_WG})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let b = wg.z;
  let n = wg.y;
  let i0 = wg.x * BR;
  let kh = n / (P.N / P.K);
  ${v.lengths ? 'let t_len = LENS[b]; let s_len = LENS[P.B + b];' : 'let t_len = i32(P.T); let s_len = i32(P.S);'}
  if (lid == 0u) { atomicStore(&block_lo, i32(P.S)); atomicStore(&block_hi, 0); }
  workgroupBarrier();
  if (lid < BR) {
    let span = row_range(i0 + lid, t_len, s_len);
    let lo = span.x;
    let hi = span.y;
    row_lo[lid] = lo;
    row_hi[lid] = hi;
    if (lo < hi) { atomicMin(&block_lo, lo); atomicMax(&block_hi, hi); }
  }
  for (var e = lid; e < BR * H4; e += WG) {
    let r = e / H4;
    let i = i0 + r;
    var x = vec4f(0.0);
    if (i < P.T && i32(i) < t_len) { x = load_q((q_row(b, i) * P.N + n) * H + (e % H4) * 4u) * P.scale; }
    q_tile[r * QS + e % H4] = x;
  }
  workgroupBarrier();
  if (lid == 0u) { range_lo = atomicLoad(&block_lo); range_hi = atomicLoad(&block_hi); }
  let first = workgroupUniformLoad(&range_lo);
  let last = workgroupUniformLoad(&range_hi);

  // The score phase's block: rows s_r0 + a (a < SR), keys skg + KG·c (c < SC).
  let s_r0 = (lid / KG) * SR;
  let skg = lid % KG;
  // The softmax phase's row (invocation TPR·r owns row r) and its running max, sum and flags
  // (bit 0: a visible key seen; bit 1: a NaN or +inf logit seen).
  let m_r = lid / TPR;
  let part = lid % TPR;
  var m = 0.0;
  var l = 0.0;
  var flags = 0u;
  // The output block: rows o_r0 + a (a < OR), vec4 columns ocg + CT·c (c < OC4).
  let o_r0 = (lid / CT) * OR;
  let ocg = lid % CT;
  var acc: array<vec4f, ${block.rows * oc4}>;
  for (var x = 0u; x < OR * OC4; x++) { acc[x] = vec4f(0.0); }
  ${v.bias ? 'let bias_base = b * P.bias_strides.x + n * P.bias_strides.y;' : ''}
  ${v.mask ? 'let mask_base = b * P.mask_strides.x + n * P.mask_strides.y;' : ''}

  var j0 = (first / i32(BC)) * i32(BC);
  loop {
    if (j0 >= last) { break; }
    // 1. K's tile (keys past S read as zero and are never visible).
    for (var e = lid; e < BC * H4; e += WG) {
      let j = u32(j0) + e / H4;
      var x = vec4f(0.0);
      if (j < P.S) { x = load_k((kv_row(b, j) * P.K + kh) * H + (e % H4) * 4u); }
      kv_tile[(e / H4) * KS + e % H4] = x;
    }
    workgroupBarrier();
    // 2. Scores. A key that is not visible is stored as NaN, a NaN or +inf logit as +inf.
    var sc: array<f32, ${SR * (v.bc / KG)}>;
    for (var x = 0u; x < SR * SC; x++) { sc[x] = 0.0; }
    for (var h = 0u; h < H4; h++) {
      let q0 = q_tile[s_r0 * QS + h];
      let q1 = q_tile[(s_r0 + 1u) * QS + h];
      for (var c = 0u; c < SC; c++) {
        let kc = kv_tile[(skg + KG * c) * KS + h];
        sc[c] += dot(q0, kc);
        sc[SC + c] += dot(q1, kc);
      }
    }
    for (var a = 0u; a < SR; a++) {
      let r = s_r0 + a;
      let lo = row_lo[r];
      let hi = row_hi[r];
      for (var c = 0u; c < SC; c++) {
        let key = skg + KG * c;
        let j = j0 + i32(key);
        var visible = j >= lo && j < hi;
        ${v.mask ? `if (visible) { let m = mask_base + (i0 + r) * P.mask_strides.z + u32(j) * P.mask_strides.w; visible = ((MASK[m >> 2u] >> ((m & 3u) * 8u)) & 0xffu) != 0u; }` : ''}
        var x = sc[a * SC + c];
        ${v.bias ? 'if (visible) { x += load_bias(bias_base + (i0 + r) * P.bias_strides.z + u32(j) * P.bias_strides.w); }' : ''}
        if (visible && is_nan_or_pos_inf(x)) { x = make_nan(0x7f800000u); }
        else if (!visible || is_neg_inf(x)) { x = make_nan(0x7fc00000u); }
        s_tile[r * SS + key] = x;
      }
    }
    workgroupBarrier();
    ${softmaxPhase(v)}
    for (var e = lid; e < BC * HV4; e += WG) {
      let j = u32(j0) + e / HV4;
      var x = vec4f(0.0);
      if (j < P.S) { x = load_v((kv_row(b, j) * P.K + kh) * HV + (e % HV4) * 4u); }
      kv_tile[e] = x;
    }
    workgroupBarrier();
    // 4. O = O·correction + P·V.
    for (var a = 0u; a < OR; a++) {
      let corr = row_corr[o_r0 + a];
      for (var c = 0u; c < OC4; c++) { acc[a * OC4 + c] *= corr; }
    }
    for (var key = 0u; key < BC; key++) {
      var vv: array<vec4f, ${oc4}>;
      for (var c = 0u; c < OC4; c++) { vv[c] = kv_tile[key * HV4 + ocg + CT * c]; }
      for (var a = 0u; a < OR; a++) {
        let w = s_tile[(o_r0 + a) * SS + key];
        // A key the row does not see is −0 and adds nothing, not 0·NaN (a NaN value behind the
        // causal diagonal stays out of earlier rows); a visible key whose weight underflowed is
        // +0 and does add 0·NaN, as the reference does.
        if (bitcast<u32>(w) != 0x80000000u) {
          for (var c = 0u; c < OC4; c++) { acc[a * OC4 + c] += w * vv[c]; }
        }
      }
    }
    workgroupBarrier();
    j0 += i32(BC);
  }
  if (part == 0u) { row_m[m_r] = m; row_l[m_r] = l; row_flags[m_r] = flags; }
  workgroupBarrier();

  for (var a = 0u; a < OR; a++) {
    let r = o_r0 + a;
    let i = i0 + r;
    if (i >= P.T) { continue; }
    ${v.packedQuery ? 'if (i32(i) >= t_len) { continue; } // a packed query has no row here' : ''}
    let flags = row_flags[r];
    let l = row_l[r];
    var inv = 0.0;
    var lse_value = make_nan(0xff800000u);
    var nan_row = false;
    if ((flags & 2u) != 0u) {
      nan_row = true;
      inv = make_nan(0x7fc00000u);
      lse_value = inv;
    } else if ((flags & 1u) != 0u && l > 0.0) {
      inv = 1.0 / l;
      lse_value = row_m[r] + log(l);
    }
    let o0 = (q_row(b, i) * P.N + n) * HV;
    for (var c = 0u; c < OC4; c++) {
      var x = acc[a * OC4 + c] * inv;
      if (nan_row) { x = vec4f(inv); }
      store4(o0 + (ocg + CT * c) * 4u, x);
    }
    ${v.lse ? 'if (ocg == 0u) { LSE[q_row(b, i) * P.N + n] = lse_value; }' : ''}
  }
}
`;
}
