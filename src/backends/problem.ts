/**
 * The public options of dotProductAttention and the validated problem every backend receives.
 *
 * Letter legend (used in docs, names and errors alike): B batch, T query length, S key/value length,
 * N query heads, K key/value heads (N % K == 0), H head dim of Q and K, Hv head dim of V.
 */

import { checkBoolean, checkInteger, checkKeys, checkOptionsObject } from '../arguments.js';
import type { FloatDType } from '../tensor/dtype.js';
import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';
import type { MaskMod, ScoreMod } from '../variants/modifiers.js';
import type { BlockMask, CompiledModifiers } from '../variants/types.js';

/**
 * Backends by name. `reference` and `flash` run on the CPU; `naive`, `flash` and `cudnn` on CUDA;
 * `webgpu` on a WebGPU device.
 */
export type Implementation = 'reference' | 'naive' | 'flash' | 'cudnn' | 'webgpu';
export const IMPLEMENTATIONS: readonly Implementation[] = ['reference', 'naive', 'flash', 'cudnn', 'webgpu'];

/**
 * Where the causal diagonal (and a local window) sits when T ≠ S.
 * - `top_left` (JAX, PyTorch): query i sees keys j ≤ i.
 * - `bottom_right` (FlashAttention, TransformerEngine `causal_bottom_right`): query i sees keys
 *   j ≤ i + (S_b − T_b), with S_b and T_b the valid lengths of batch b, so the last query sees the last key.
 */
export type CausalAlignment = 'top_left' | 'bottom_right';

/** How float32 matrix products run on the GPU: true float32, or TF32 tensor cores (10-bit mantissa). */
export type Float32Precision = 'highest' | 'tf32';

export interface AttentionOptions {
  /** Added to the scaled logits: softmax(Q·Kᵀ·scale + bias). Rank 4, broadcastable to (B,N,T,S). */
  bias?: Tensor;
  /** Boolean, rank 4, broadcastable to (B,N,T,S); true keeps a (query, key) pair. */
  mask?: Tensor;
  /** Multiplies Q·Kᵀ; default 1/sqrt(H). */
  scale?: number;
  /** Masks keys after the query's diagonal (see causalAlignment). */
  isCausal?: boolean;
  /** Diagonal alignment for isCausal and localWindowSize when T ≠ S; default 'top_left'. */
  causalAlignment?: CausalAlignment;
  /** Valid query length of each batch (B values: an array, or an int32 Tensor of rank 1); rows at or past it output zeros. */
  querySeqLengths?: ArrayLike<number> | Tensor;
  /** Valid key/value length of each batch (B values); keys at or past it are masked. */
  keyValueSeqLengths?: ArrayLike<number> | Tensor;
  /** Query i sees keys in [i − left, i + right] (inclusive); a number w means [w, w]. */
  localWindowSize?: number | readonly [number, number];
  /** A backend by name, or undefined for the best available. A named backend never falls back. */
  implementation?: Implementation;
  /** float32 inputs on the GPU: 'highest' (default, true float32) or 'tf32'. */
  float32Precision?: Float32Precision;
  /** Also return the log-sum-exp of each row's logits, shape (B,T,N) float32 (−inf for an empty row). */
  returnLogSumExp?: boolean;
  /**
   * Paged KV cache: key/value are pools (numBlocks, blockSize, K, H|Hv) and this (B, maxBlocksPerSeq)
   * int32 table maps each sequence's logical blocks to pool blocks; keyValueSeqLengths is required.
   */
  blockTable?: Tensor | ArrayLike<ArrayLike<number>>;
  /** Packed query (totalT, N, H): B+1 cumulative starts of each sequence's queries. */
  querySeqOffsets?: ArrayLike<number> | Tensor;
  /** Packed key/value (totalS, K, H|Hv): B+1 cumulative starts of each sequence's keys. */
  keyValueSeqOffsets?: ArrayLike<number> | Tensor;
  /**
   * Changes each score before masking and softmax: scoreMod('score + slopes[h] * (kv - q)', { slopes }),
   * or a ready-made one (docs/guide/variants.md). An expression string is taken as scoreMod(string).
   */
  scoreMod?: ScoreMod | string;
  /** Keeps a position where true, on top of the other masks: maskMod('kv <= q'), or an expression string. */
  maskMod?: MaskMod | string;
  /** createBlockMask(maskMod, …) of this call's maskMod and sizes: the kernels skip its empty blocks. */
  blockMask?: BlockMask;
}

/** A rank-4 operand broadcast to (B,N,T,S): element (b,n,t,s) is at b·strides[0] + … + s·strides[3]. */
export interface BroadcastOperand {
  readonly tensor: Tensor;
  /** Element strides with 0 on broadcast dimensions. */
  readonly strides: readonly [number, number, number, number];
}

/**
 * The sizes of one attention problem, named as everywhere in attnlab: batch B, query length T,
 * key/value length S, query heads N, key/value heads K (N for MHA, 1 for MQA), head dim H.
 */
export interface ProblemSize {
  readonly B: number;
  readonly T: number;
  readonly S: number;
  readonly N: number;
  readonly K: number;
  readonly H: number;
}

/** A paged KV cache's table and pool sizes (validated by api/kv-layout.ts). */
export interface PagedKv {
  /** (B, maxBlocksPerSeq) pool block indices, row-major, on the host. */
  readonly blockTable: Int32Array;
  readonly maxBlocksPerSeq: number;
  readonly blockSize: number;
  readonly numBlocks: number;
}

export interface PackedSeqs {
  /** B+1 cumulative query starts; null when the query is dense (B, T, N, H). */
  readonly querySeqOffsets: Int32Array | null;
  /** B+1 cumulative key/value starts; null when key and value are dense or paged. */
  readonly keyValueSeqOffsets: Int32Array | null;
}

/** Everything a backend needs, validated once; backends trust it. */
export interface AttentionProblem extends ProblemSize {
  readonly Hv: number;
  readonly dtype: FloatDType;
  readonly device: Device;
  /** (B,T,N,H), (B,S,K,H), (B,S,K,Hv): unbatched inputs are reshaped here, storage shared. */
  readonly query: Tensor;
  readonly key: Tensor;
  readonly value: Tensor;
  readonly bias: BroadcastOperand | null;
  readonly mask: BroadcastOperand | null;
  readonly scale: number;
  readonly causal: boolean;
  readonly alignment: CausalAlignment;
  /** Inclusive window bounds; Infinity means unbounded. Null when no window was asked for. */
  readonly window: { readonly left: number; readonly right: number } | null;
  readonly querySeqLengths: Int32Array | null;
  readonly keyValueSeqLengths: Int32Array | null;
  readonly returnLogSumExp: boolean;
  readonly float32Precision: Float32Precision;
  /** False when the caller passed (T,N,H): the output drops its batch dimension again. */
  readonly batched: boolean;
  /** A paged key/value cache (key and value are its pools), or null for dense key/value. */
  readonly paged: PagedKv | null;
  /**
   * Packed sequences, or null. A packed query gives a packed output (totalT, N, Hv) and log-sum-exp
   * (totalT, N); querySeqLengths/keyValueSeqLengths then hold the lengths the offsets define.
   */
  readonly packed: PackedSeqs | null;
  readonly implementation: Implementation | undefined;
  /**
   * The score and mask modifiers compiled for this call (src/variants/), or absent. A backend that does not
   * declare 'modifiers' in its layouts is refused them by the registry, with the reason.
   */
  readonly modifiers?: CompiledModifiers;
  /** The block mask of the maskMod (its B, N, T, S and maskKey checked against this call), or absent. */
  readonly blockMask?: BlockMask;
}

/** What a backend returns: output (B,T,N,Hv) in the query dtype, log-sum-exp (B,T,N) float32. */
export interface BackendOutput {
  readonly output: Tensor;
  readonly logSumExp?: Tensor;
  /** The kernel variant that ran (its variant key), for results and tests. */
  readonly variant: string;
}

/** The result of `attention()`: the output, and which backend and kernel produced it. */
export interface AttentionResult {
  readonly output: Tensor;
  readonly logSumExp?: Tensor;
  readonly backend: Implementation;
  readonly device: Device;
  readonly variant: string;
}

/** Floating-point work of one forward attention: 4·B·N·T·S·H (two matmuls), halved when causal. */
export function attentionFlops(
  p: Omit<ProblemSize, 'K'> & { readonly causal?: boolean; readonly K?: number },
): number {
  const problem = checkOptionsObject<typeof p>('problem', p, 'an object { B, T, S, N, H, K?, causal? }');
  // A misspelt key (is_causal, causal_) would count a causal problem's work twice, unsaid.
  checkKeys('problem', problem, FLOPS_KEYS, { is_causal: 'causal', isCausal: 'causal' });
  for (const letter of ['B', 'T', 'S', 'N', 'H'] as const) {
    checkInteger(letter, problem[letter], 1, Number.MAX_SAFE_INTEGER, 'a positive integer');
  }
  if (problem.K !== undefined) checkInteger('K', problem.K, 1, Number.MAX_SAFE_INTEGER, 'a positive integer');
  checkBoolean('causal', problem.causal, false);
  return problemFlops(problem);
}

/** attentionFlops' keys: K (kv heads) does not change the work, but a problem's sizes may carry it. */
const FLOPS_KEYS = ['B', 'T', 'S', 'N', 'K', 'H', 'causal'];

/** attentionFlops without its checks, for a problem or a results row the library made (more keys than B…H). */
export function problemFlops(
  p: Pick<ProblemSize, 'B' | 'T' | 'S' | 'N' | 'H'> & { readonly causal?: boolean },
): number {
  const flops = 4 * p.B * p.N * p.T * p.S * p.H;
  return p.causal ? flops / 2 : flops;
}

/**
 * Key/value tokens a problem's cache holds: the sum of its per-sequence lengths where given, else B·S.
 * The decode rules (decode-heads.ts, decode-tma.ts) and the measured decode table compare caches by it.
 */
export function cachedTokens(p: Pick<AttentionProblem, 'B' | 'S' | 'keyValueSeqLengths'>): number {
  return p.keyValueSeqLengths ? p.keyValueSeqLengths.reduce((a, l) => a + l, 0) : p.B * p.S;
}

/**
 * The sizes and flags of a problem that the per-shape caches (kept plans, kept launches) compare to find
 * a repeated call's work again without building a key string (a key of the whole problem is ~0.3–1 KB of
 * strings and ~1 µs a call): dtype, B, T, S, N, K, H, Hv, the causal mask and its alignment, the window,
 * the scale and whether the log-sum-exp is returned. A cache that depends on more keeps those beside.
 */
export interface ShapeFields {
  readonly dtype: string;
  readonly sizes: readonly [number, number, number, number, number, number, number];
  readonly causal: boolean;
  readonly alignment: CausalAlignment;
  readonly left: number;
  readonly right: number;
  readonly scale: number;
  readonly lse: boolean;
}

/** `p`'s ShapeFields (a window's sides −1 when there is none). */
export function shapeFields(p: AttentionProblem): ShapeFields {
  return {
    dtype: p.dtype,
    sizes: [p.B, p.T, p.S, p.N, p.K, p.H, p.Hv],
    causal: p.causal,
    alignment: p.alignment,
    left: p.window ? p.window.left : -1,
    right: p.window ? p.window.right : -1,
    scale: p.scale,
    lse: p.returnLogSumExp,
  };
}

/** Whether `p` has the fields `f`, compared one by one (nothing is allocated). */
export function sameShapeFields(f: ShapeFields, p: AttentionProblem): boolean {
  const z = f.sizes;
  return (
    f.dtype === p.dtype &&
    z[0] === p.B &&
    z[1] === p.T &&
    z[2] === p.S &&
    z[3] === p.N &&
    z[4] === p.K &&
    z[5] === p.H &&
    z[6] === p.Hv &&
    f.causal === p.causal &&
    f.alignment === p.alignment &&
    f.left === (p.window ? p.window.left : -1) &&
    f.right === (p.window ? p.window.right : -1) &&
    Object.is(f.scale, p.scale) &&
    f.lse === p.returnLogSumExp
  );
}
