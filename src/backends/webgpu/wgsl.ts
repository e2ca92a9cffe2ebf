/**
 * WGSL pieces the forward and combine kernels share: the Params struct, NaN and bfloat16 functions,
 * element loaders for each storage dtype, and the epilogue that writes an output row.
 */
import type { FloatDType } from '../../tensor/dtype.js';
import type { ForwardVariant } from './variant.js';

/** WGSL that reads element i of a buffer of `dtype` as f32. */
export function loader(name: string, buffer: string, dtype: FloatDType): string {
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

export function elementType(dtype: FloatDType): string {
  return dtype === 'float32' ? 'f32' : 'u32';
}

export const PARAMS_STRUCT = `struct Params {
  B: u32, T: u32, S: u32, N: u32,
  K: u32, bottom_right: u32, win_left: i32, win_right: i32,
  scale: f32, causal: u32, has_window: u32, splits: u32,
  bias_strides: vec4u,
  mask_strides: vec4u,
  paged: vec4u,
}`;

export const WGSL_FUNCTIONS = `
/** A NaN or infinity by its bits: a runtime value, since a constant one is a shader-creation error. */
fn make_nan(bits: u32) -> f32 { return bitcast<f32>(bits); }
fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_nan_or_pos_inf(x: f32) -> bool { let b = bitcast<u32>(x); return (b & 0x7fffffffu) > 0x7f800000u || b == 0x7f800000u; }
fn is_neg_inf(x: f32) -> bool { return bitcast<u32>(x) == 0xff800000u; }
/**
 * Two f32 as two f16 in a word, Inf and NaN included: pack2x16float's result is indeterminate for
 * a value outside f16's finite range (SwiftShader returns NaN for +inf).
 */
fn f16_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) { return 0x7e00u; }
  if (abs(x) >= 65520.0) { return ((b >> 16u) & 0x8000u) | 0x7c00u; }
  return pack2x16float(vec2f(x, 0.0)) & 0xffffu;
}
fn pack_f16(v: vec2f) -> u32 { return f16_bits(v.x) | (f16_bits(v.y) << 16u); }
fn bf16(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) { return 0x7fc0u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}`;

/**
 * WGSL that writes element h of the accumulator (`el('h')`) times inv, for h < HV, to the output
 * row starting at element o0.
 */
export function storeRow(v: ForwardVariant, el: (h: string) => string, count = 'HV'): string {
  return v.dtype === 'float32'
    ? `for (var h = 0u; h < ${count}; h++) { O[o0 + h] = ${el('h')} * inv; }`
    : v.dtype === 'float16'
      ? `for (var h = 0u; h < ${count}; h += 2u) { O[(o0 + h) >> 1u] = pack_f16(vec2f(${el('h')} * inv, ${el('h + 1u')} * inv)); }`
      : `for (var h = 0u; h < ${count}; h += 2u) { O[(o0 + h) >> 1u] = bf16(${el('h')} * inv) | (bf16(${el('h + 1u')} * inv) << 16u); }`;
}

/** A paged cache's token row: pool block table[b][j / blockSize] (a padding −1 reads block 0, never used). */
export const PAGED_ROW =
  'let block = u32(max(TABLE[b * P.paged.y + j / P.paged.x], 0)); return block * P.paged.x + j % P.paged.x;';

/** WGSL that reads 4 consecutive elements from element i (a multiple of 4) of a buffer of `dtype`. */
export function loader4(name: string, buffer: string, dtype: ForwardVariant['dtype']): string {
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
 * WGSL: the keys [lo, hi) query row i sees (src/backends/cpu/visibility.ts states the rule): none
 * past the row's sequence, the causal diagonal (bottom-right where P.bottom_right), the window.
 */
export const ROW_RANGE = `fn row_range(i: u32, t_len: i32, s_len: i32) -> vec2i {
  var lo = 0;
  var hi = 0;
  if (i < P.T && i32(i) < t_len) {
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
  return vec2i(lo, hi);
}`;
