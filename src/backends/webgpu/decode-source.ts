/**
 * The WGSL of the decode kernel: a few query rows (a decode or speculative step) against a long
 * cache, reading K and V at the memory's pace. The row kernel gives each query row its own
 * workgroup and reads a key's H values through one invocation; here a workgroup takes every query
 * row that shares one KV head (the G = N/K heads of GQA times T rows, up to R of them) and one
 * chunk of the keys (split-KV; combineSource merges the chunks), and each key row is read by LK
 * adjacent invocations of a subgroup, 16 bytes each, in one coalesced request (LK = 16 at H = 128
 * float16 on 32-wide subgroups: a 256-byte row a load).
 *
 * The workgroup is 4 subgroups of SG invocations (SG the adapter's one subgroup size), so NG =
 * 4·SG/LK key groups; group g takes keys g, g + NG, … of the chunk. For each key the group
 * computes the R scores (a partial dot per invocation, summed across the group by
 * subgroupShuffleXor), updates each row's running max, sum and accumulator slice (rescaled only
 * when the max grows), and adds p·v. At the end the groups of a subgroup merge through shuffles,
 * the 4 subgroups through workgroup memory, and the workgroup writes its chunk's (max, sum,
 * accumulator) per row for the combine.
 *
 * Rules: keys outside a row's visible range are skipped (causal, windows, lengths); a NaN or +inf
 * logit makes the row NaN; −inf is a masked key; a visible key's non-finite value reaches the row
 * through p·v as in the reference. Bias, boolean masks and packed queries run on the row kernel.
 */
import type { ForwardVariant } from './variant.js';
import { PAGED_ROW, PARAMS_STRUCT, WGSL_FUNCTIONS } from './wgsl.js';

export type { DecodeShape } from './variant.js';

/** Subgroups a workgroup. */
export const DECODE_SUBGROUPS = 4;
/** Query rows a workgroup holds in registers (q and an accumulator slice each): 8 at the most. */
export const DECODE_MAX_ROWS = 8;

/** Elements a 16-byte load: 8 of a 2-byte dtype, 4 of float32. */
export function unitElements(dtype: ForwardVariant['dtype']): number {
  return dtype === 'float32' ? 4 : 8;
}

/**
 * Invocations a key row for head dims H, Hv: the largest power of two up to the subgroup size that
 * divides both rows' 16-byte units, or null where a row is not whole units.
 */
export function lanesPerKey(
  H: number,
  Hv: number,
  dtype: ForwardVariant['dtype'],
  sg: number,
): number | null {
  const e = unitElements(dtype);
  if (H % e !== 0 || Hv % e !== 0) return null;
  let lk = 1;
  while (lk * 2 <= sg && (H / e) % (lk * 2) === 0 && (Hv / e) % (lk * 2) === 0) lk *= 2;
  return lk;
}

/** The most products a key the decode kernel writes out with constant indices (R·UK·E). */
const UNROLL_BUDGET = 64;

const range = (n: number) => Array.from({ length: n }, (_, i) => i);

/** Whether the decode kernel's key loop is written out with constant indices (R·UK·E ≤ UNROLL_BUDGET). */
export function decodeUnrolls(
  H: number,
  Hv: number,
  dtype: ForwardVariant['dtype'],
  lk: number,
  rows: number,
): boolean {
  const e = unitElements(dtype);
  return rows * (H / e / lk) * e <= UNROLL_BUDGET && rows * (Hv / e / lk) * e <= UNROLL_BUDGET;
}

/** Workgroup bytes of the merge: each subgroup's rows' accumulators, maxima, sums and flags. */
export function decodeStorageBytes(Hv: number, rows: number): number {
  return DECODE_SUBGROUPS * rows * (Hv + 3) * 4;
}

export function decodeSource(v: ForwardVariant): string {
  const d = v.decode;
  if (!d) throw new Error('the decode kernel needs a variant with a decode shape');
  const E = unitElements(v.dtype);
  const UK = v.H / E / d.lk;
  const UV = v.Hv / E / d.lk;
  const R = d.rows;
  const WG = DECODE_SUBGROUPS * d.sg;
  const NG = WG / d.lk;
  const unit = v.dtype === 'float32' ? 'vec4f' : 'vec4u';
  const slots = [
    'params',
    'q',
    'k',
    'v',
    'part_o',
    'part_ml',
    ...(v.lengths ? ['lengths'] : []),
    ...(v.paged ? ['table'] : []),
    ...(v.packedKv ? ['offsets'] : []),
  ];
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  // One 16-byte unit as E f32 values.
  const widen =
    v.dtype === 'float32'
      ? 'fn widen(x: vec4f) -> array<f32, 4> { return array<f32, 4>(x.x, x.y, x.z, x.w); }'
      : v.dtype === 'float16'
        ? `fn widen(x: vec4u) -> array<f32, 8> {
  let a = unpack2x16float(x.x); let b = unpack2x16float(x.y); let c = unpack2x16float(x.z); let d = unpack2x16float(x.w);
  return array<f32, 8>(a.x, a.y, b.x, b.y, c.x, c.y, d.x, d.y);
}`
        : `fn widen(x: vec4u) -> array<f32, 8> {
  return array<f32, 8>(bitcast<f32>(x.x << 16u), bitcast<f32>(x.x & 0xffff0000u), bitcast<f32>(x.y << 16u), bitcast<f32>(x.y & 0xffff0000u),
    bitcast<f32>(x.z << 16u), bitcast<f32>(x.z & 0xffff0000u), bitcast<f32>(x.w << 16u), bitcast<f32>(x.w & 0xffff0000u));
}`;
  const xorsGroup: number[] = [];
  for (let x = 1; x < d.lk; x *= 2) xorsGroup.push(x);
  const xorsMerge: number[] = [];
  for (let x = d.lk; x < d.sg; x *= 2) xorsMerge.push(x);
  // The key loop's arithmetic with every private-array index a constant where it is small enough
  // (R·UK·E ≤ UNROLL_BUDGET products a key: 32 at H=128 float16 on NVIDIA), so the arrays stay in
  // registers; loops beyond it (SwiftShader's 4-wide subgroups give 4 units a lane at H=128).
  const unroll = decodeUnrolls(v.H, v.Hv, v.dtype, d.lk, R);
  const loads = (flat: boolean, to = '') =>
    flat
      ? [
          ...range(UK).map((u) => `kn${to}[${u}] = Kb[row * ${v.H / E}u + ${u}u * LK + lane];`),
          ...range(UV).map((u) => `vn${to}[${u}] = Vb[row * ${v.Hv / E}u + ${u}u * LK + lane];`),
        ].join(' ')
      : `for (var u = 0u; u < UK; u++) { kn${to}[u] = Kb[row * ${v.H / E}u + u * LK + lane]; }
      for (var u = 0u; u < UV; u++) { vn${to}[u] = Vb[row * ${v.Hv / E}u + u * LK + lane]; }`;
  const shuffles = xorsGroup.map((x) => `s += subgroupShuffleXor(s, ${x}u);`).join(' ');
  // Row r's online-softmax update from its score s; `rescale` multiplies its accumulator by corr.
  const update = (r: string, rescale: string) => `p[${r}] = make_nan(0x80000000u);
      if (j >= lo[${r}] && j < hi[${r}]) {
        if (is_nan_or_pos_inf(s)) { flags[${r}] |= 2u; }
        else if (!is_neg_inf(s)) {
          if ((flags[${r}] & 1u) == 0u) { m[${r}] = s; flags[${r}] |= 1u; }
          else if (s > m[${r}]) {
            let corr = exp(m[${r}] - s);
            l[${r}] *= corr;
            ${rescale}
            m[${r}] = s;
          }
          p[${r}] = exp(s - m[${r}]);
          l[${r}] += p[${r}];
          adds = true;
        }
      }`;
  const keyStep = (flat: boolean) => {
    if (!flat) {
      return `var p: array<f32, ${R}>;
    var adds = false;
    for (var r = 0u; r < R; r++) {
      var s = 0.0;
      for (var u = 0u; u < UK; u++) {
        let k = widen(kx[u]);
        for (var e = 0u; e < E; e++) { s += q[r][u * E + e] * k[e]; }
      }
      ${shuffles}
      ${update('r', 'for (var e = 0u; e < UV * E; e++) { acc[r][e] *= corr; }')}
    }
    if (adds) {
      for (var u = 0u; u < UV; u++) {
        let x = widen(vx[u]);
        for (var r = 0u; r < R; r++) {
          // −0: the key is not visible to row r (or masked) and adds nothing, not 0·NaN.
          if (bitcast<u32>(p[r]) != 0x80000000u) {
            for (var e = 0u; e < E; e++) { acc[r][u * E + e] += p[r] * x[e]; }
          }
        }
      }
    }`;
    }
    const ks = range(UK)
      .map((u) => `let k${u} = widen(kx[${u}]);`)
      .join(' ');
    const rows = range(R).map((r) => {
      const dot = range(UK)
        .flatMap((u) => range(E).map((e) => `s = fma(q[${r}][${u * E + e}], k${u}[${e}], s);`))
        .join(' ');
      const rescale = range(UV * E)
        .map((e) => `acc[${r}][${e}] *= corr;`)
        .join(' ');
      return `{
      var s = 0.0;
      ${dot}
      ${shuffles}
      ${update(String(r), rescale)}
    }`;
    });
    const xs = range(UV)
      .map((u) => `let x${u} = widen(vx[${u}]);`)
      .join(' ');
    const adds = range(R)
      .map(
        (r) =>
          `if (bitcast<u32>(p[${r}]) != 0x80000000u) { ${range(UV)
            .flatMap((u) =>
              range(E).map(
                (e) => `acc[${r}][${u * E + e}] = fma(p[${r}], x${u}[${e}], acc[${r}][${u * E + e}]);`,
              ),
            )
            .join(' ')} }`,
      )
      .join('\n      ');
    return `var p: array<f32, ${R}>;
    var adds = false;
    ${ks}
    ${rows.join('\n    ')}
    if (adds) {
      // −0: the key is not visible to the row (or masked) and adds nothing, not 0·NaN.
      ${xs}
      ${adds}
    }`;
  };
  // Two keys a pass (d.pairs, unrolled code only): both keys' scores first, their dot products and
  // shuffle chains interleaved, then each key's softmax update and p·v in key order.
  const keyPair = () => {
    const ks = range(UK)
      .map((u) => `let k${u} = widen(kx[${u}]); let kb${u} = widen(kx2[${u}]);`)
      .join(' ');
    const scores = range(R).map((r) => {
      const dot = range(UK)
        .flatMap((u) =>
          range(E).map(
            (e) =>
              `s = fma(q[${r}][${u * E + e}], k${u}[${e}], s); t = fma(q[${r}][${u * E + e}], kb${u}[${e}], t);`,
          ),
        )
        .join(' ');
      const shuffles2 = xorsGroup
        .map((x) => `s += subgroupShuffleXor(s, ${x}u); t += subgroupShuffleXor(t, ${x}u);`)
        .join(' ');
      return `{ var s = 0.0; var t = 0.0; ${dot} ${shuffles2} sa[${r}] = s; sb[${r}] = t; }`;
    });
    const key = (sv: string, vv: string) => {
      const rows = range(R).map((r) => {
        const rescale = range(UV * E)
          .map((e) => `acc[${r}][${e}] *= corr;`)
          .join(' ');
        return `{
        let s = ${sv}[${r}];
        ${update(String(r), rescale)}
      }`;
      });
      const xs = range(UV)
        .map((u) => `let x${u} = widen(${vv}[${u}]);`)
        .join(' ');
      const adds = range(R)
        .map(
          (r) =>
            `if (bitcast<u32>(p[${r}]) != 0x80000000u) { ${range(UV)
              .flatMap((u) =>
                range(E).map(
                  (e) => `acc[${r}][${u * E + e}] = fma(p[${r}], x${u}[${e}], acc[${r}][${u * E + e}]);`,
                ),
              )
              .join(' ')} }`,
        )
        .join('\n        ');
      return `var p: array<f32, ${R}>;
      var adds = false;
      ${rows.join('\n      ')}
      if (adds) {
        ${xs}
        ${adds}
      }`;
    };
    return `var sa: array<f32, ${R}>;
    var sb: array<f32, ${R}>;
    ${ks}
    ${scores.join('\n    ')}
    {
      ${key('sa', 'vx')}
    }
    {
      // The second key (past \`last\` it is not visible to any row and adds nothing).
      let j = j2;
      ${key('sb', 'vx2')}
    }`;
  };
  const pairs = d.pairs === true && unroll;
  const keyLoop = pairs
    ? `var j = first + i32(group);
  var kn: array<${unit}, ${UK}>;
  var vn: array<${unit}, ${UV}>;
  var kn2: array<${unit}, ${UK}>;
  var vn2: array<${unit}, ${UV}>;
  if (j < last) {
    let row = kv_row(b, u32(j)) * P.K + kh;
    ${loads(true)}
  }
  if (j + i32(NG) < last) {
    let row = kv_row(b, u32(j + i32(NG))) * P.K + kh;
    ${loads(true, '2')}
  }
  loop {
    if (j >= last) { break; }
    var kx = kn;
    var vx = vn;
    var kx2 = kn2;
    var vx2 = vn2;
    let j2 = j + i32(NG);
    if (j + 2 * i32(NG) < last) {
      let row = kv_row(b, u32(j + 2 * i32(NG))) * P.K + kh;
      ${loads(true)}
    }
    if (j + 3 * i32(NG) < last) {
      let row = kv_row(b, u32(j + 3 * i32(NG))) * P.K + kh;
      ${loads(true, '2')}
    }
    ${keyPair()}
    j += 2 * i32(NG);
  }`
    : `var j = first + i32(group);
  var kn: array<${unit}, ${UK}>;
  var vn: array<${unit}, ${UV}>;
  if (j < last) {
    let row = kv_row(b, u32(j)) * P.K + kh;
    ${loads(unroll)}
  }
  loop {
    if (j >= last) { break; }
    var kx = kn;
    var vx = vn;
    if (j + i32(NG) < last) {
      let row = kv_row(b, u32(j + i32(NG))) * P.K + kh;
      ${loads(unroll)}
    }
    ${keyStep(unroll)}
    j += i32(NG);
  }`;
  return `diagnostic(off, subgroup_uniformity);
enable subgroups;

const UK: u32 = ${UK}u;
const UV: u32 = ${UV}u;
const E: u32 = ${E}u;
const LK: u32 = ${d.lk}u;
const NG: u32 = ${NG}u;
const R: u32 = ${R}u;
const HV: u32 = ${v.Hv}u;

${PARAMS_STRUCT}

${at('params')} var<uniform> P: Params;
${at('q')} var<storage, read> Q: array<${unit}>;
${at('k')} var<storage, read> Kb: array<${unit}>;
${at('v')} var<storage, read> Vb: array<${unit}>;
${at('part_o')} var<storage, read_write> PART_O: array<f32>;
${at('part_ml')} var<storage, read_write> PART_ML: array<f32>;
${v.lengths ? `${at('lengths')} var<storage, read> LENS: array<i32>;` : ''}
${v.paged ? `${at('table')} var<storage, read> TABLE: array<i32>;` : ''}
${v.packedKv ? `${at('offsets')} var<storage, read> OFFS: array<i32>;` : ''}

/** Per subgroup and row: the merged accumulator, max, sum and flags. */
var<workgroup> w_acc: array<f32, ${DECODE_SUBGROUPS * R * v.Hv}>;
var<workgroup> w_m: array<f32, ${DECODE_SUBGROUPS * R}>;
var<workgroup> w_l: array<f32, ${DECODE_SUBGROUPS * R}>;
var<workgroup> w_flags: array<u32, ${DECODE_SUBGROUPS * R}>;

${WGSL_FUNCTIONS}
${widen}

fn kv_row(b: u32, j: u32) -> u32 {
  ${v.paged ? PAGED_ROW : v.packedKv ? 'return u32(OFFS[P.B + 1u + b]) + j;' : 'return b * P.S + j;'}
}

@compute @workgroup_size(${WG})
fn main(@builtin(workgroup_id) wg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let b = wg.z / P.splits;
  let split = wg.z % P.splits;
  let kh = wg.y;
  let G = P.N / P.K;
  let lane = lid % LK;
  let group = lid / LK;
  let sub = lid / ${d.sg}u;
  ${v.lengths ? 'let t_len = LENS[b]; let s_len = LENS[P.B + b];' : 'let t_len = i32(P.T); let s_len = i32(P.S);'}
  // This workgroup's chunk of keys.
  let chunk = (P.S + P.splits - 1u) / P.splits;
  let chunk_lo = i32(split * chunk);
  let chunk_hi = i32(min(P.S, (split + 1u) * chunk));

  // Rows ρ = wg.x·R + r: query row t = ρ / G of head n = kh·G + ρ % G. Per row: the visible keys
  // [lo, hi) within the chunk, q's slice (units lane, lane + LK, …), and the running state.
  var lo: array<i32, ${R}>;
  var hi: array<i32, ${R}>;
  var q: array<array<f32, ${UK * E}>, ${R}>;
  var acc: array<array<f32, ${UV * E}>, ${R}>;
  var m: array<f32, ${R}>;
  var l: array<f32, ${R}>;
  var flags: array<u32, ${R}>;
  var first = chunk_hi;
  var last = chunk_lo;
  for (var r = 0u; r < R; r++) {
    let rho = wg.x * R + r;
    let t = rho / G;
    let n = kh * G + rho % G;
    var row_lo = 0;
    var row_hi = 0;
    if (t < P.T && i32(t) < t_len) {
      row_hi = s_len;
      var diagonal = i32(t);
      if (P.bottom_right != 0u) { diagonal += s_len - t_len; }
      if (P.causal != 0u) { row_hi = min(row_hi, diagonal + 1); }
      if (P.has_window != 0u) {
        row_lo = max(row_lo, diagonal - P.win_left);
        row_hi = min(row_hi, diagonal + P.win_right + 1);
      }
      row_lo = max(row_lo, chunk_lo);
      row_hi = min(row_hi, chunk_hi);
    }
    lo[r] = row_lo;
    hi[r] = row_hi;
    if (row_lo < row_hi) { first = min(first, row_lo); last = max(last, row_hi); }
    let q_at = ((b * P.T + min(t, P.T - 1u)) * P.N + min(n, P.N - 1u)) * (${v.H / E}u);
    for (var u = 0u; u < UK; u++) {
      let x = widen(Q[q_at + u * LK + lane]);
      for (var e = 0u; e < E; e++) { q[r][u * E + e] = x[e] * P.scale; }
    }
    for (var e = 0u; e < UV * E; e++) { acc[r][e] = 0.0; }
    m[r] = 0.0;
    l[r] = 0.0;
    flags[r] = 0u;
  }

  // Group g takes keys first + g, first + g + NG, …: LK invocations read each key row, 16 bytes each.
  // The next key's K and V are loaded before this key's arithmetic, so a key's loads are in flight
  // while the one before is scored.
  ${keyLoop}

  // The groups of a subgroup merge through shuffles (the same lane of each group holds the same
  // elements), then subgroup 0..3's results meet in workgroup memory.
  for (var r = 0u; r < R; r++) {
    ${xorsMerge
      .map(
        (x) => `{
      let om = subgroupShuffleXor(m[r], ${x}u);
      let ol = subgroupShuffleXor(l[r], ${x}u);
      let ofl = subgroupShuffleXor(flags[r], ${x}u);
      let mine = (flags[r] & 1u) != 0u;
      let theirs = (ofl & 1u) != 0u;
      var mm = m[r];
      if (theirs && (!mine || om > mm)) { mm = om; }
      let a = select(0.0, exp(m[r] - mm), mine);
      let c = select(0.0, exp(om - mm), theirs);
      for (var e = 0u; e < UV * E; e++) {
        let oa = subgroupShuffleXor(acc[r][e], ${x}u);
        acc[r][e] = select(0.0, acc[r][e] * a, mine) + select(0.0, oa * c, theirs);
      }
      l[r] = select(0.0, l[r] * a, mine) + select(0.0, ol * c, theirs);
      m[r] = mm;
      flags[r] |= ofl;
    }`,
      )
      .join('\n    ')}
    if (lid % ${d.sg}u < LK) {
      let at = sub * R + r;
      for (var u = 0u; u < UV; u++) {
        for (var e = 0u; e < E; e++) { w_acc[at * HV + (u * LK + lane) * E + e] = acc[r][u * E + e]; }
      }
      if (lane == 0u) { w_m[at] = m[r]; w_l[at] = l[r]; w_flags[at] = flags[r]; }
    }
  }
  workgroupBarrier();
  // Row r's merged chunk: its maximum over the subgroups that saw a key, then each element.
  for (var x = lid; x < R * (HV + 1u); x += ${WG}u) {
    let r = x / (HV + 1u);
    let h = x % (HV + 1u);
    let rho = wg.x * R + r;
    let t = rho / G;
    if (t >= P.T) { continue; }
    let n = kh * G + rho % G;
    var mm = -3.0e38;
    var fl = 0u;
    for (var s = 0u; s < ${DECODE_SUBGROUPS}u; s++) {
      let f = w_flags[s * R + r];
      fl |= f;
      if ((f & 1u) != 0u) { mm = max(mm, w_m[s * R + r]); }
    }
    var sum = 0.0;
    for (var s = 0u; s < ${DECODE_SUBGROUPS}u; s++) {
      let at = s * R + r;
      if ((w_flags[at] & 1u) != 0u) {
        let c = exp(w_m[at] - mm);
        sum += select(c * w_acc[at * HV + min(h, HV - 1u)], c * w_l[at], h == HV);
      }
    }
    let part = ((b * P.T + t) * P.N + n) * P.splits + split;
    if (h < HV) { PART_O[part * HV + h] = sum; }
    else {
      PART_ML[part * 2u] = mm;
      PART_ML[part * 2u + 1u] = select(select(0.0, sum, (fl & 1u) != 0u), make_nan(0x7fc00000u), (fl & 2u) != 0u);
    }
  }
}
`;
}
