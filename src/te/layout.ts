/**
 * TE's QKV layouts, turned into the (B,T,N,H) / (B,S,K,H) tensors dotProductAttention takes.
 *
 * TE names a layout by the memory order of its letters: b batch, s sequence, h heads, d head dim,
 * and 3 or 2 for Q/K/V packed along one axis. `transposeBatchSequence` swaps b and s (the sbhd
 * family, TE's default in its older JAX releases). Letters here follow attnlab's legend:
 *   bshd_bshd_bshd   q (B,T,N,H)      k (B,S,K,H)      v (B,S,K,Hv)
 *   bs3hd            qkv (B,T,3,N,H)  (needs T = S, K = N, Hv = H)
 *   bshd_bs2hd       q (B,T,N,H)      kv (B,S,2,K,H)   (needs Hv = H)
 * and the same with B and T (or S) swapped for the sbhd family.
 */
import { describeValue, suggest } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import { allocRaw } from '../tensor/dtype.js';
import { checkTensor, Tensor } from '../tensor/tensor.js';

export type QkvLayout = 'bshd_bshd_bshd' | 'bs3hd' | 'bshd_bs2hd';
/** The sbhd spellings, accepted as the same layouts with transposeBatchSequence. */
export type TransposedQkvLayout = 'sbhd_sbhd_sbhd' | 'sb3hd' | 'sbhd_sb2hd';

const TRANSPOSED: Record<TransposedQkvLayout, QkvLayout> = {
  sbhd_sbhd_sbhd: 'bshd_bshd_bshd',
  sb3hd: 'bs3hd',
  sbhd_sb2hd: 'bshd_bs2hd',
};
const QKV_FORMATS: Readonly<Record<string, string>> = { bshd: 'bshd_bshd_bshd', sbhd: 'sbhd_sbhd_sbhd' };
const LAYOUTS: readonly string[] = ['bshd_bshd_bshd', 'bs3hd', 'bshd_bs2hd', ...Object.keys(TRANSPOSED)];

/** A layout name and the transposeBatchSequence flag → the bs layout and whether inputs are sb. */
export function resolveLayout(
  name: unknown,
  transposeBatchSequence: boolean | undefined,
): { layout: QkvLayout; transposed: boolean } {
  if (typeof name !== 'string' || !LAYOUTS.includes(name)) {
    // TE's qkv_format names ('bshd', 'sbhd') mean the unpacked layouts.
    const hint = typeof name === 'string' ? suggest(name, LAYOUTS, QKV_FORMATS, 1) : undefined;
    throw new InvalidArgumentError(
      'qkvLayout',
      `one of ${LAYOUTS.join(', ')}`,
      `${describeValue(name)}${hint ? ` (did you mean '${hint}'?)` : ''}`,
    );
  }
  if (name in TRANSPOSED) {
    if (transposeBatchSequence === false) {
      throw new InvalidArgumentError(
        'transposeBatchSequence',
        `true or unset with the sequence-first layout '${name}'`,
        'false',
      );
    }
    return { layout: TRANSPOSED[name as TransposedQkvLayout], transposed: true };
  }
  return { layout: name as QkvLayout, transposed: transposeBatchSequence ?? false };
}

/**
 * Copies a 4-D strided view of `source` (element strides and offset over its flat storage) into a
 * new contiguous host tensor of `shape`. Raw values move unchanged, so every dtype copies exactly.
 */
function gather(
  source: Tensor,
  shape: readonly number[],
  strides: readonly number[],
  offset: number,
): Tensor {
  const host = source.toHost().data;
  const [d0, d1, d2, d3] = shape;
  const out = allocRaw(source.dtype, d0 * d1 * d2 * d3);
  let o = 0;
  for (let a = 0; a < d0; a++) {
    for (let b = 0; b < d1; b++) {
      for (let c = 0; c < d2; c++) {
        const base = offset + a * strides[0] + b * strides[1] + c * strides[2];
        for (let d = 0; d < d3; d++) out[o++] = host[base + d * strides[3]];
      }
    }
  }
  const result = Tensor.fromRaw(out, shape, source.dtype);
  return source.device === 'cuda' ? result.to('cuda') : result;
}

function checkRank(argument: string, tensor: Tensor, rank: number, letters: string): void {
  if (!(tensor instanceof Tensor))
    throw new InvalidArgumentError(argument, `a Tensor ${letters}`, describeValue(tensor));
  // Live and a Tensor itself, named as the caller passed it: a sequence-first or packed layout reads
  // it here, before attention() would check it (a disposed one was refused as 'tensor').
  checkTensor(argument, tensor);
  if (tensor.rank !== rank) {
    throw new InvalidArgumentError(
      argument,
      `rank ${rank} ${letters}`,
      `rank ${tensor.rank} [${tensor.shape.join(', ')}]`,
    );
  }
}

/**
 * One operand of a layout as a contiguous (B, L, heads, H) tensor. `packed` is the index along the
 * 3/2 axis (undefined for an unpacked operand); `transposed` reads (L, B, …) memory.
 */
function operand(tensor: Tensor, transposed: boolean, packed: number | undefined): Tensor {
  const dims = tensor.shape;
  const [outer, inner] = [dims[0], dims[1]];
  const [B, L] = transposed ? [inner, outer] : [outer, inner];
  const heads = dims[dims.length - 2];
  const H = dims[dims.length - 1];
  const parts = packed === undefined ? 1 : dims[2];
  const row = parts * heads * H; // elements per (outer, inner) position
  if (packed === undefined && !transposed) return tensor;
  const [strideB, strideL] = transposed ? [row, B * row] : [L * row, row];
  const offset = (packed ?? 0) * heads * H;
  return gather(tensor, [B, L, heads, H], [strideB, strideL, H, 1], offset);
}

/** Query, key and value of a TE layout as contiguous (B,T,N,H), (B,S,K,H), (B,S,K,Hv) tensors. */
export function splitQkv(
  layout: QkvLayout,
  transposed: boolean,
  query: Tensor,
  key: Tensor | null | undefined,
  value: Tensor | null | undefined,
): { query: Tensor; key: Tensor; value: Tensor } {
  const order = transposed ? 'T,B' : 'B,T';
  const kvOrder = transposed ? 'S,B' : 'B,S';
  const ignored = (argument: string, t: unknown) => {
    if (t !== undefined && t !== null) {
      throw new InvalidArgumentError(
        argument,
        `null or undefined with the packed layout ${layout}`,
        'a tensor',
      );
    }
  };
  if (layout === 'bs3hd') {
    checkRank('query (packed QKV)', query, 5, `(${order},3,N,H)`);
    if (query.shape[2] !== 3) {
      throw new InvalidArgumentError('query (packed QKV)', `(${order},3,N,H)`, `[${query.shape.join(', ')}]`);
    }
    ignored('key', key);
    ignored('value', value);
    return {
      query: operand(query, transposed, 0),
      key: operand(query, transposed, 1),
      value: operand(query, transposed, 2),
    };
  }
  checkRank('query', query, 4, `(${order},N,H)`);
  if (layout === 'bshd_bs2hd') {
    checkRank('key (packed KV)', key as Tensor, 5, `(${kvOrder},2,K,H)`);
    const kv = key as Tensor;
    if (kv.shape[2] !== 2) {
      throw new InvalidArgumentError('key (packed KV)', `(${kvOrder},2,K,H)`, `[${kv.shape.join(', ')}]`);
    }
    ignored('value', value);
    return {
      query: operand(query, transposed, undefined),
      key: operand(kv, transposed, 0),
      value: operand(kv, transposed, 1),
    };
  }
  checkRank('key', key as Tensor, 4, `(${kvOrder},K,H)`);
  checkRank('value', value as Tensor, 4, `(${kvOrder},K,Hv)`);
  return {
    query: operand(query, transposed, undefined),
    key: operand(key as Tensor, transposed, undefined),
    value: operand(value as Tensor, transposed, undefined),
  };
}

/** The (B,T,N,Hv) output in the caller's order: (T,B,N,Hv) for the sbhd family. */
export function outputInLayout(output: Tensor, transposed: boolean): Tensor {
  if (!transposed) return output;
  const [B, T, N, Hv] = output.shape;
  return gather(output, [T, B, N, Hv], [N * Hv, T * N * Hv, Hv, 1], 0);
}
