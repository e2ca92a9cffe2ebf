/**
 * Hand-written modifier sets in the shape the variants code generator emits (src/kernels/common/
 * modifiers.cuh: the ATTNLAB_* macros, then the device functions over AttnlabCaptures), each with
 * its elementwise float64 meaning for the reference (modifier-reference.ts). The GPU suite
 * (test/gpu/variants/flash.test.ts) runs them through the flash kernels and the nvcc compile checks
 * (test/kernels/flash-modifiers-compile.test.ts) build them for sm_90a and sm_80.
 */
import { createHash } from 'node:crypto';
import { Tensor } from '../../src/tensor/tensor.js';
import type { BlockMask, CompiledModifiers } from '../../src/variants/types.js';

export interface CaseShape {
  readonly B: number;
  readonly T: number;
  readonly S: number;
  readonly N: number;
}

/** A captured tensor on the host (the GPU suite moves it to the device). */
export interface HostCapture {
  readonly name: string;
  readonly tensor: Tensor;
  readonly dtype: 'int32' | 'float32';
  readonly needsGrad: boolean;
}

export interface ModifierCase {
  readonly name: string;
  readonly source: string;
  readonly key: string;
  readonly hasScoreMod: boolean;
  readonly hasMaskMod: boolean;
  readonly captures: readonly HostCapture[];
  /** Whether the suite also passes a block mask built from `mask` (128×128 blocks). */
  readonly blockMask: boolean;
  score?(s: number, b: number, h: number, q: number, kv: number): number;
  /** d score / d s. */
  scoreGrad?(s: number, b: number, h: number, q: number, kv: number): number;
  mask?(b: number, h: number, q: number, kv: number): boolean;
  /** Adds g · d score / d capture into the captures' float64 gradients. */
  captureGrad?(g: number, b: number, h: number, q: number, kv: number, grads: Float64Array[]): void;
}

interface SourceParts {
  score?: string;
  scoreGrad?: string;
  mask?: string;
  needsScore?: boolean;
  /** attnlab_score_mod_backward_from_output's body (y: the modified score): ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 1. */
  scoreGradFromOutput?: string;
  /** false: the score function reads no capture at an unbounded index of q or kv (ATTNLAB_SCORE_MOD_READS_POSITIONS 0). */
  readsPositions?: boolean;
  captureGrads?: boolean;
}

/** The generated-source shape: macros, the header, the three functions (absent ones left out). */
export function modifierSource(parts: SourceParts): string {
  const lines = [
    `#define ATTNLAB_SCORE_MOD ${parts.score ? 1 : 0}`,
    `#define ATTNLAB_MASK_MOD ${parts.mask ? 1 : 0}`,
    `#define ATTNLAB_CAPTURE_GRADS ${parts.captureGrads ? 1 : 0}`,
    `#define ATTNLAB_SCORE_MOD_NEEDS_SCORE ${parts.needsScore === false ? 0 : 1}`,
    `#define ATTNLAB_SCORE_MOD_READS_POSITIONS ${parts.readsPositions === false ? 0 : 1}`,
    `#define ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT ${parts.scoreGradFromOutput ? 1 : 0}`,
    '#include "common/modifiers.cuh"',
  ];
  const signature = 'int b, int h, int q, int kv, const AttnlabCaptures& c';
  if (parts.score) {
    lines.push(
      `__device__ __forceinline__ float attnlab_score_mod(float s, ${signature}) { ${parts.score} }`,
      `__device__ __forceinline__ float attnlab_score_mod_backward(float s, float g, ${signature}) { ${parts.scoreGrad} }`,
    );
    if (parts.scoreGradFromOutput)
      lines.push(
        `__device__ __forceinline__ float attnlab_score_mod_backward_from_output(float y, float g, ${signature}) { ${parts.scoreGradFromOutput} }`,
      );
  }
  if (parts.mask)
    lines.push(`__device__ __forceinline__ bool attnlab_mask_mod(${signature}) { ${parts.mask} }`);
  return `${lines.join('\n')}\n`;
}

function made(
  name: string,
  parts: SourceParts,
  rest: Omit<ModifierCase, 'name' | 'source' | 'key' | 'hasScoreMod' | 'hasMaskMod'>,
): ModifierCase {
  const source = modifierSource(parts);
  const key = createHash('sha256').update(source).digest('hex').slice(0, 16);
  return { name, source, key, hasScoreMod: !!parts.score, hasMaskMod: !!parts.mask, ...rest };
}

const INT = 'static_cast<const int*>';
/** A C++ float literal of x (`30` alone would be an int, and `30f` no literal at all). */
const f32 = (x: number) => `${Number.isInteger(x) ? x.toFixed(1) : String(x)}f`;
const FLOAT = 'static_cast<const float*>';

/** Key kv is seen by query q (top-left causal): kv ≤ q. */
export function causalCase(): ModifierCase {
  return made(
    'causal as maskMod',
    { mask: 'return kv <= q;' },
    {
      captures: [],
      blockMask: false,
      mask: (_b, _h, q, kv) => kv <= q,
    },
  );
}

/** Causal sliding window of `w` keys behind the diagonal: q − w ≤ kv ≤ q; with a block mask. */
export function slidingWindowCase(w: number): ModifierCase {
  return made(
    `sliding window ${w}`,
    { mask: `return kv <= q && q - kv <= ${w};` },
    {
      captures: [],
      blockMask: true,
      mask: (_b, _h, q, kv) => kv <= q && q - kv <= w,
    },
  );
}

/**
 * Packed documents: int32 docIds (B, T) with `docs` documents of random lengths per sequence; a
 * query sees the earlier keys of its own document (T = S). With a block mask stored once per batch
 * (Nm = 1) when `blocks`.
 */
export function documentCase(shape: CaseShape, docs: number, seed: number, blocks: boolean): ModifierCase {
  const ids = new Int32Array(shape.B * shape.T);
  let state = seed >>> 0;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
  for (let b = 0; b < shape.B; b++) {
    const cuts = Array.from({ length: docs - 1 }, () => 1 + Math.floor(next() * (shape.T - 1))).sort(
      (x, y) => x - y,
    );
    let doc = 0;
    for (let t = 0; t < shape.T; t++) {
      while (doc < cuts.length && t >= cuts[doc]) doc++;
      ids[b * shape.T + t] = doc;
    }
  }
  const docIds = Tensor.fromArray(ids, [shape.B, shape.T], 'int32');
  return made(
    `document mask (${docs} documents)${blocks ? ' + block mask' : ''}`,
    {
      mask: `const int* d = ${INT}(c.ptr[0]); return kv <= q && d[b * c.stride[0][0] + q * c.stride[0][1]] == d[b * c.stride[0][0] + kv * c.stride[0][1]];`,
    },
    {
      captures: [{ name: 'docIds', tensor: docIds, dtype: 'int32', needsGrad: false }],
      blockMask: blocks,
      mask: (b, _h, q, kv) => kv <= q && ids[b * shape.T + q] === ids[b * shape.T + kv],
    },
  );
}

/**
 * Causal inside bands of `rows` query rows, every other band seeing no key at all (q / rows odd):
 * query blocks without a key tile between blocks with many; with a block mask.
 */
export function bandsCase(rows: number): ModifierCase {
  return made(
    `causal in even bands of ${rows} rows`,
    { mask: `return kv <= q && (q / ${rows}) % 2 == 0;` },
    {
      captures: [],
      blockMask: true,
      mask: (_b, _h, q, kv) => kv <= q && Math.floor(q / rows) % 2 === 0,
    },
  );
}

/** ALiBi with causal masking: s + slope[h] · (kv − q), slopes 2^(−8(h+1)/N). */
export function alibiCase(shape: CaseShape): ModifierCase {
  const slopes = Float32Array.from({ length: shape.N }, (_, h) => 2 ** ((-8 * (h + 1)) / shape.N));
  return made(
    'ALiBi (causal)',
    {
      score: `return s + ${FLOAT}(c.ptr[0])[h * c.stride[0][0]] * static_cast<float>(kv - q);`,
      scoreGrad: 'return g;',
      needsScore: false,
      readsPositions: false,
      mask: 'return kv <= q;',
    },
    {
      captures: [
        {
          name: 'slopes',
          tensor: Tensor.fromArray(slopes, [shape.N], 'float32'),
          dtype: 'float32',
          needsGrad: false,
        },
      ],
      blockMask: false,
      score: (s, _b, h, q, kv) => s + slopes[h] * (kv - q),
      scoreGrad: () => 1,
      mask: (_b, _h, q, kv) => kv <= q,
    },
  );
}

/** Logit soft-capping (Gemma 2): cap · tanh(s / cap). */
export function softcapCase(cap: number): ModifierCase {
  return made(
    `softcap ${cap}`,
    {
      score: `return ${f32(cap)} * tanhf(s * ${f32(1 / cap)});`,
      scoreGrad: `const float t = tanhf(s * ${f32(1 / cap)}); return g * (1.f - t * t);`,
      // The same gradient from y = cap · tanh(s / cap): the Hopper backward takes y from P.
      scoreGradFromOutput: `const float t = y * ${f32(1 / cap)}; return g * (1.f - t * t);`,
      readsPositions: false,
    },
    {
      captures: [],
      blockMask: false,
      score: (s) => cap * Math.tanh(s / cap),
      scoreGrad: (s) => 1 - Math.tanh(s / cap) ** 2,
    },
  );
}

/**
 * A learned relative-position bias: s + table[h, q − kv + S − 1], table float32 (N, T + S − 1), with
 * its gradient (float32 atomics into c.grad[0]).
 */
export function relativeBiasCase(shape: CaseShape, seed: number): ModifierCase {
  const width = shape.T + shape.S - 1;
  const values = Float32Array.from({ length: shape.N * width }, (_, i) => Math.sin(0.37 * i + seed) * 0.8);
  const at = `h * c.stride[0][0] + (q - kv + ${shape.S - 1}) * c.stride[0][1]`;
  return made(
    'relative bias (learned table)',
    {
      score: `return s + ${FLOAT}(c.ptr[0])[${at}];`,
      scoreGrad: `if (c.grad[0] != nullptr) atomicAdd(c.grad[0] + ${at}, g); return g;`,
      needsScore: false,
      captureGrads: true,
    },
    {
      captures: [
        {
          name: 'table',
          tensor: Tensor.fromArray(values, [shape.N, width], 'float32'),
          dtype: 'float32',
          needsGrad: true,
        },
      ],
      blockMask: false,
      score: (s, _b, h, q, kv) => s + values[h * width + q - kv + shape.S - 1],
      scoreGrad: () => 1,
      captureGrad: (g, _b, h, q, kv, grads) => {
        grads[0][h * width + q - kv + shape.S - 1] += g;
      },
    },
  );
}

/**
 * The block kinds of `mask` (0 empty, 1 partial, 2 full) over (Bm, Nm, ceil(T/bq), ceil(S/bkv)),
 * evaluated element by element; Bm = B and Nm = `perHead ? N : 1`.
 */
export function blockKinds(
  mask: NonNullable<ModifierCase['mask']>,
  shape: CaseShape,
  perHead: boolean,
  bq = 128,
  bkv = 128,
): { kinds: Uint8Array; Bm: number; Nm: number; blockQ: number; blockKV: number } {
  const Nm = perHead ? shape.N : 1;
  const nq = Math.ceil(shape.T / bq);
  const nkv = Math.ceil(shape.S / bkv);
  const kinds = new Uint8Array(shape.B * Nm * nq * nkv);
  for (let b = 0; b < shape.B; b++)
    for (let h = 0; h < Nm; h++)
      for (let i = 0; i < nq; i++)
        for (let j = 0; j < nkv; j++) {
          let kept = 0;
          let all = 0;
          for (let q = i * bq; q < Math.min(shape.T, (i + 1) * bq); q++)
            for (let kv = j * bkv; kv < Math.min(shape.S, (j + 1) * bkv); kv++) {
              all++;
              if (mask(b, h, q, kv)) kept++;
            }
          kinds[((b * Nm + h) * nq + i) * nkv + j] = kept === 0 ? 0 : kept === all ? 2 : 1;
        }
  return { kinds, Bm: shape.B, Nm, blockQ: bq, blockKV: bkv };
}

/** Row-major element strides of `shape` (0 on size-1 dims), padded to 4: how the sources index captures. */
function rowMajor(shape: readonly number[]): [number, number, number, number] {
  const strides: [number, number, number, number] = [0, 0, 0, 0];
  let step = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    strides[d] = shape[d] === 1 ? 0 : step;
    step *= shape[d];
  }
  return strides;
}

/** The case as the problem carries it (CompiledModifiers), with `captures` (the host ones, or moved). */
export function compiledModifiers(
  m: ModifierCase,
  captures: readonly HostCapture[] = m.captures,
): CompiledModifiers {
  return {
    key: m.key,
    maskKey: m.hasMaskMod ? m.key : '',
    cudaSource: m.source,
    captures: captures.map((c) => ({ ...c, strides: rowMajor(c.tensor.shape) })),
    hasScoreMod: m.hasScoreMod,
    hasMaskMod: m.hasMaskMod,
    hasCaptureGrads: captures.some((c) => c.needsGrad),
    label: m.name,
  };
}

/** A BlockMask over `kinds` (a [Bm, Nm, qBlocks, kvBlocks] one-byte tensor) for a (B, N, T, S) call. */
export function blockMaskFrom(
  k: { Bm: number; Nm: number; blockQ: number; blockKV: number },
  shape: CaseShape,
  kinds: Tensor,
  maskKey: string,
): BlockMask {
  return {
    B: shape.B,
    N: shape.N,
    T: shape.T,
    S: shape.S,
    blockQ: k.blockQ,
    blockKV: k.blockKV,
    Bm: k.Bm,
    Nm: k.Nm,
    qBlocks: Math.ceil(shape.T / k.blockQ),
    kvBlocks: Math.ceil(shape.S / k.blockKV),
    kinds,
    maskKey,
    device: kinds.device,
  };
}
