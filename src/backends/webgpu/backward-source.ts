/**
 * The WGSL of the backward pass, three kernels in one compute pass (FlashAttention-2's split: one
 * kernel owns each gradient, so no two invocations add into the same element and every sum has a
 * fixed order — the backward is deterministic):
 *
 *   dq     one invocation per query row (b, i, n): D = Σ dO∘O and c = 1 / Σ e^(s − lse), then
 *          over the keys it sees p = c·e^(s − lse), dp = dO·v, ds = p·(dp − D), dQ += scale·ds·k;
 *          writes (D, c) for dkdv and, with a bias, ds to a (B,N,T,S) scratch;
 *   dkdv   one invocation per key (b, j, kh): over the G = N/K query heads and the rows that see j,
 *          dV += p·dO and dK += scale·ds·q (the GQA sum);
 *   dbias  one invocation per word of dBias: the scratch summed over the dimensions the bias was
 *          broadcast on.
 *
 * The rules are the reference backward's (src/backends/cpu/row-gradients.ts): a row that sees no
 * key (lse −inf) gives nothing; in a NaN row (lse NaN) every key it sees, −inf logits included,
 * takes the NaN; elsewhere a −inf logit or a weight that underflows to 0 adds nothing.
 */
import type { BackwardVariant } from './backward-plan.js';
import { elementType, loader, PARAMS_STRUCT, WGSL_FUNCTIONS } from './wgsl.js';

/** Invocations per workgroup of every backward kernel. */
export const BACKWARD_WG = 64;

/** The bindings of each kernel, in binding order. */
export function backwardBindings(v: BackwardVariant, kernel: 'dq' | 'dkdv' | 'dbias'): string[] {
  if (kernel === 'dbias') return ['params', 'bias_shape', 'ds', 'dbias'];
  const common = ['params', 'q', 'k', 'v', 'do', 'lse'];
  const extra = [...(v.bias ? ['bias'] : []), ...(v.mask ? ['mask'] : []), ...(v.lengths ? ['lengths'] : [])];
  return kernel === 'dq'
    ? [...common, 'o', 'dq', 'd', ...(v.bias ? ['ds'] : []), ...extra]
    : [...common, 'd', 'dk', 'dv', ...extra];
}

/** WGSL that stores f32 `x` at element e of a buffer of `dtype` written by one invocation per pair. */
function storeRow(
  name: string,
  buffer: string,
  dtype: BackwardVariant['dtype'],
  count: string,
  array: string,
) {
  switch (dtype) {
    case 'float32':
      return `for (var h = 0u; h < ${count}; h++) { ${buffer}[${name} + h] = ${array}[h]; }`;
    case 'float16':
      return `for (var h = 0u; h < ${count}; h += 2u) { ${buffer}[(${name} + h) >> 1u] = pack2x16float(vec2f(${array}[h], ${array}[h + 1u])); }`;
    case 'bfloat16':
      return `for (var h = 0u; h < ${count}; h += 2u) { ${buffer}[(${name} + h) >> 1u] = bf16(${array}[h]) | (bf16(${array}[h + 1u]) << 16u); }`;
  }
}

function header(v: BackwardVariant, kernel: 'dq' | 'dkdv'): string {
  const slots = backwardBindings(v, kernel);
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  const t = elementType(v.dtype);
  const decl = [
    `${at('params')} var<uniform> P: Params;`,
    `${at('q')} var<storage, read> Q: array<${t}>;`,
    `${at('k')} var<storage, read> Kb: array<${t}>;`,
    `${at('v')} var<storage, read> Vb: array<${t}>;`,
    `${at('do')} var<storage, read> DO: array<${t}>;`,
    `${at('lse')} var<storage, read> LSE: array<f32>;`,
    kernel === 'dq' ? `${at('o')} var<storage, read> Ob: array<${elementType(v.output)}>;` : '',
    kernel === 'dq' ? `${at('dq')} var<storage, read_write> DQ: array<${t}>;` : '',
    kernel === 'dq'
      ? `${at('d')} var<storage, read_write> DROW: array<f32>;`
      : `${at('d')} var<storage, read> DROW: array<f32>;`,
    kernel === 'dq' && v.bias ? `${at('ds')} var<storage, read_write> DS: array<f32>;` : '',
    kernel === 'dkdv' ? `${at('dk')} var<storage, read_write> DK: array<${t}>;` : '',
    kernel === 'dkdv' ? `${at('dv')} var<storage, read_write> DV: array<${t}>;` : '',
    v.bias ? `${at('bias')} var<storage, read> BIAS: array<${elementType(v.bias)}>;` : '',
    v.mask ? `${at('mask')} var<storage, read> MASK: array<u32>;` : '',
    v.lengths ? `${at('lengths')} var<storage, read> LENS: array<i32>;` : '',
  ].filter(Boolean);
  return `
const H: u32 = ${v.H}u;
const HV: u32 = ${v.Hv}u;
${PARAMS_STRUCT}
${decl.join('\n')}
${loader('load_q', 'Q', v.dtype)}
${loader('load_k', 'Kb', v.dtype)}
${loader('load_v', 'Vb', v.dtype)}
${loader('load_do', 'DO', v.dtype)}
${kernel === 'dq' ? loader('load_o', 'Ob', v.output) : ''}
${v.bias ? loader('load_bias', 'BIAS', v.bias) : ''}
${WGSL_FUNCTIONS}

fn lengths(b: u32) -> vec2i {
  ${v.lengths ? 'return vec2i(LENS[b], LENS[P.B + b]);' : 'return vec2i(i32(P.T), i32(P.S));'}
}

/** Keys [lo, hi) row i of sequence b sees (src/backends/cpu/visibility.ts states the rule). */
fn key_range(b: u32, i: u32) -> vec2i {
  let len = lengths(b);
  if (i >= P.T || i32(i) >= len.x) { return vec2i(0, 0); }
  var lo = 0;
  var hi = len.y;
  var diagonal = i32(i);
  if (P.bottom_right != 0u) { diagonal += len.y - len.x; }
  if (P.causal != 0u) { hi = min(hi, diagonal + 1); }
  if (P.has_window != 0u) {
    lo = max(lo, diagonal - P.win_left);
    hi = min(hi, diagonal + P.win_right + 1);
  }
  return vec2i(max(lo, 0), max(hi, 0));
}

/**
 * Kahan's compensated sum += x: the logit, dp and D sums over H or Hv terms carry one rounding,
 * not H of them (with plain sums float32 dQ ran 1.4× the bound of 2× the plain error).
 */
fn kahan(sum: ptr<function, f32>, carry: ptr<function, f32>, x: f32) {
  let y = x - *carry;
  let t = *sum + y;
  *carry = (t - *sum) - y;
  *sum = t;
}

/** Whether the boolean mask keeps (b, n, i, j) (always, without a mask). */
fn kept(b: u32, n: u32, i: u32, j: u32) -> bool {
  ${
    v.mask
      ? 'let m = b * P.mask_strides.x + n * P.mask_strides.y + i * P.mask_strides.z + j * P.mask_strides.w;\n  return ((MASK[m >> 2u] >> ((m & 3u) * 8u)) & 0xffu) != 0u;'
      : 'return true;'
  }
}

/** The logit scale·q·k + bias of (b, n, i, j), from q already scaled. */
fn bias_at(b: u32, n: u32, i: u32, j: u32) -> f32 {
  ${v.bias ? 'return load_bias(b * P.bias_strides.x + n * P.bias_strides.y + i * P.bias_strides.z + j * P.bias_strides.w);' : 'return 0.0;'}
}
`;
}

export function dqSource(v: BackwardVariant): string {
  return `${header(v, 'dq')}
@compute @workgroup_size(${BACKWARD_WG})
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let i = gid.x;
  let n = gid.y;
  let b = gid.z;
  if (i >= P.T) { return; }
  let kh = n / (P.N / P.K);
  let row = (b * P.T + i) * P.N + n;
  var q: array<f32, ${v.H}>;
  var dO: array<f32, ${v.Hv}>;
  var dq: array<f32, ${v.H}>;
  var D = 0.0;
  for (var h = 0u; h < H; h++) { q[h] = load_q(row * H + h) * P.scale; dq[h] = 0.0; }
  var D_c = 0.0;
  for (var h = 0u; h < HV; h++) {
    dO[h] = load_do(row * HV + h);
    kahan(&D, &D_c, dO[h] * load_o(row * HV + h));
  }
  let lse = LSE[row];
  let range = key_range(b, i);
  var c = 1.0;
  // A row that sees nothing (lse −inf) gives zero gradients.
  if (range.x < range.y && !is_neg_inf(lse)) {
    let nan_row = is_nan_or_pos_inf(lse);
    // c = 1 / Σ e^(s − lse): the float32 lse is off by up to half its unit in the last place
    // (2.4e-7 at lse ≈ 4), which scales every weight of the row alike; c takes it out, as the
    // plain backward's softmax (weights rounded once, 6e-8) has no such term.
    if (!nan_row) {
      var l = 0.0;
      for (var jj = range.x; jj < range.y; jj++) {
        let j = u32(jj);
        if (!kept(b, n, i, j)) { continue; }
        let kv = (b * P.S + j) * P.K + kh;
        var s = 0.0;
        var sc = 0.0;
        for (var h = 0u; h < H; h++) { kahan(&s, &sc, q[h] * load_k(kv * H + h)); }
        s += bias_at(b, n, i, j);
        if (!is_neg_inf(s)) { l += exp(s - lse); }
      }
      if (l > 0.0) { c = 1.0 / l; }
    }
    for (var jj = range.x; jj < range.y; jj++) {
      let j = u32(jj);
      if (!kept(b, n, i, j)) { continue; }
      let kv = (b * P.S + j) * P.K + kh;
      var s = 0.0;
      var sc = 0.0;
      for (var h = 0u; h < H; h++) { kahan(&s, &sc, q[h] * load_k(kv * H + h)); }
      s += bias_at(b, n, i, j);
      if (!nan_row && is_neg_inf(s)) { continue; }
      // A NaN row's weights are NaN at every key it sees: set, since exp(NaN) is +inf on SwiftShader.
      let p = select(exp(s - lse) * c, make_nan(0x7fc00000u), nan_row);
      if (!nan_row && p == 0.0) { continue; }
      var dp = 0.0;
      var dpc = 0.0;
      for (var h = 0u; h < HV; h++) { kahan(&dp, &dpc, dO[h] * load_v(kv * HV + h)); }
      let ds = p * (dp - D);
      ${v.bias ? 'DS[((b * P.N + n) * P.T + i) * P.S + j] = ds;' : ''}
      let g = ds * P.scale;
      for (var h = 0u; h < H; h++) { dq[h] += g * load_k(kv * H + h); }
    }
  }
  DROW[2u * row] = D;
  DROW[2u * row + 1u] = c;
  let o0 = row * H;
  ${storeRow('o0', 'DQ', v.dtype, 'H', 'dq')}
}
`;
}

export function dkdvSource(v: BackwardVariant): string {
  return `${header(v, 'dkdv')}
@compute @workgroup_size(${BACKWARD_WG})
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let j = gid.x;
  let kh = gid.y;
  let b = gid.z;
  if (j >= P.S) { return; }
  let kv = (b * P.S + j) * P.K + kh;
  let group = P.N / P.K;
  var k: array<f32, ${v.H}>;
  var vv: array<f32, ${v.Hv}>;
  var dk: array<f32, ${v.H}>;
  var dv: array<f32, ${v.Hv}>;
  for (var h = 0u; h < H; h++) { k[h] = load_k(kv * H + h); dk[h] = 0.0; }
  for (var h = 0u; h < HV; h++) { vv[h] = load_v(kv * HV + h); dv[h] = 0.0; }
  let len = lengths(b);
  let rows = u32(max(min(len.x, i32(P.T)), 0));
  if (i32(j) < len.y) {
    for (var g = 0u; g < group; g++) {
      let n = kh * group + g;
      for (var i = 0u; i < rows; i++) {
        let range = key_range(b, i);
        if (i32(j) < range.x || i32(j) >= range.y || !kept(b, n, i, j)) { continue; }
        let row = (b * P.T + i) * P.N + n;
        let lse = LSE[row];
        if (is_neg_inf(lse)) { continue; }
        let nan_row = is_nan_or_pos_inf(lse);
        var s = 0.0;
        var sc = 0.0;
        for (var h = 0u; h < H; h++) { kahan(&s, &sc, load_q(row * H + h) * P.scale * k[h]); }
        s += bias_at(b, n, i, j);
        if (!nan_row && is_neg_inf(s)) { continue; }
        let p = select(exp(s - lse) * DROW[2u * row + 1u], make_nan(0x7fc00000u), nan_row);
        if (!nan_row && p == 0.0) { continue; }
        var dp = 0.0;
        var dpc = 0.0;
        for (var h = 0u; h < HV; h++) {
          let d_o = load_do(row * HV + h);
          kahan(&dp, &dpc, d_o * vv[h]);
          dv[h] += p * d_o;
        }
        let gs = p * (dp - DROW[2u * row]) * P.scale;
        for (var h = 0u; h < H; h++) { dk[h] += gs * load_q(row * H + h); }
      }
    }
  }
  let k0 = kv * H;
  ${storeRow('k0', 'DK', v.dtype, 'H', 'dk')}
  let v0 = kv * HV;
  ${storeRow('v0', 'DV', v.dtype, 'HV', 'dv')}
}
`;
}

/**
 * dBias: one invocation per word (two elements for a 16-bit bias). Element e of the bias, of shape
 * BIAS_SHAPE (each dimension 1 or the problem's B, N, T, S), sums the scratch over every index its
 * broadcast dimensions take.
 */
export function dbiasSource(v: BackwardVariant): string {
  const bias = v.bias as NonNullable<BackwardVariant['bias']>;
  const slots = backwardBindings(v, 'dbias');
  const at = (name: string) => `@group(0) @binding(${slots.indexOf(name)})`;
  const perWord = bias === 'float32' ? 1 : 2;
  return `
${PARAMS_STRUCT}
${at('params')} var<uniform> P: Params;
${at('bias_shape')} var<uniform> BIAS_SHAPE: vec4u;
${at('ds')} var<storage, read> DS: array<f32>;
${at('dbias')} var<storage, read_write> DBIAS: array<${elementType(bias)}>;
${WGSL_FUNCTIONS}

fn total(e: u32) -> f32 {
  let shape = BIAS_SHAPE;
  let count = shape.x * shape.y * shape.z * shape.w;
  if (e >= count) { return 0.0; }
  let c = vec4u(e / (shape.y * shape.z * shape.w), (e / (shape.z * shape.w)) % shape.y, (e / shape.w) % shape.z, e % shape.w);
  let full = vec4u(P.B, P.N, P.T, P.S);
  // A broadcast dimension (size 1 where the problem's is larger) runs over all its values.
  let lo = select(c, vec4u(0u), shape < full);
  let hi = select(c + 1u, full, shape < full);
  var sum = 0.0;
  for (var b = lo.x; b < hi.x; b++) {
    for (var n = lo.y; n < hi.y; n++) {
      for (var i = lo.z; i < hi.z; i++) {
        for (var j = lo.w; j < hi.w; j++) { sum += DS[((b * P.N + n) * P.T + i) * P.S + j]; }
      }
    }
  }
  return sum;
}

@compute @workgroup_size(${BACKWARD_WG})
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let w = gid.y * groups.x * ${BACKWARD_WG}u + gid.x;
  let shape = BIAS_SHAPE;
  if (w * ${perWord}u >= shape.x * shape.y * shape.z * shape.w) { return; }
  ${
    bias === 'float32'
      ? 'DBIAS[w] = total(w);'
      : bias === 'float16'
        ? 'DBIAS[w] = pack2x16float(vec2f(total(2u * w), total(2u * w + 1u)));'
        : 'DBIAS[w] = bf16(total(2u * w)) | (bf16(total(2u * w + 1u)) << 16u);'
  }
}
`;
}
