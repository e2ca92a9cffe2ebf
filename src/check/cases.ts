/**
 * The correctness cases, written once and run for every backend that supports each (suite.ts: the
 * CPU tests, test/gpu/*, and `attnlab check`), and for every operation: the forward suite, the
 * gradient suite (gradients.ts) and decode checks take the same list. A case is data: a shape,
 * options and the shapes of a bias and a mask, so a new case is one line in a list below.
 *
 * - CASES: small hand-picked cases, each for one feature (GQA, causal in both alignments, bias
 *   broadcasts, masks, padding, windows, T=1, odd lengths, head dims); fast enough for the CPU.
 * - LONG_CASES: several tiles long (multi-tile causal, windows with padding, odd head dims, H ≠ Hv,
 *   a float32 bias beside 16-bit inputs), which the GPU backends run; too slow in JS for every CPU run.
 * - randomCases (random-cases.ts): seeded random configurations on top of both.
 *
 * Each case builds fresh random inputs from a seed (buildInputs); the GPU suites pass a new seed per
 * run and print it.
 */
import type { AttentionOptions, ProblemSize } from '../backends/problem.js';
import type { FloatDType } from '../tensor/dtype.js';
import { Random, randomNormal } from '../tensor/random.js';
import { Tensor } from '../tensor/tensor.js';

export interface Shape extends ProblemSize {
  readonly Hv?: number;
}

export interface AttentionCase {
  name: string;
  shape: Shape;
  /** Options apart from implementation; bias/mask tensors are made by `build`. */
  options?: Omit<AttentionOptions, 'bias' | 'mask' | 'implementation'>;
  /** Shape of an additive bias (broadcastable to (B,N,T,S)), if any. */
  biasShape?: [number, number, number, number];
  /** The bias's dtype when it is not the inputs' (e.g. a float32 bias beside bfloat16 inputs). */
  biasDType?: FloatDType;
  /**
   * Shape of a boolean mask, if any; about 30% of pairs are dropped and row 0 of each (b, n) is fully
   * masked (the "row sees nothing → zeros" rule; a mask with one query row masks every row).
   */
  maskShape?: [number, number, number, number];
  /** A mask pattern instead of the random one: whether (query t, key s) is kept, for every (b, n). */
  maskKeep?: (t: number, s: number) => boolean;
}

const base: Shape = { B: 2, T: 64, S: 64, N: 4, K: 4, H: 64 };

export const CASES: readonly AttentionCase[] = [
  { name: 'MHA', shape: base },
  { name: 'GQA N=8 K=2', shape: { ...base, N: 8, K: 2 } },
  { name: 'MQA N=8 K=1', shape: { ...base, N: 8, K: 1 } },
  { name: 'causal T<S top-left', shape: { ...base, T: 48, S: 80 }, options: { isCausal: true } },
  { name: 'causal T>S top-left', shape: { ...base, T: 80, S: 48 }, options: { isCausal: true } },
  {
    name: 'causal T<S bottom-right',
    shape: { ...base, T: 48, S: 80 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'causal T>S bottom-right (first rows see nothing)',
    shape: { ...base, T: 80, S: 48 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  { name: 'bias (1,N,T,S)', shape: base, biasShape: [1, 4, 64, 64] },
  { name: 'bias (B,1,1,S)', shape: base, biasShape: [2, 1, 1, 64] },
  {
    name: 'bias full (B,N,T,S) + causal',
    shape: base,
    biasShape: [2, 4, 64, 64],
    options: { isCausal: true },
  },
  { name: 'mask (B,1,T,S) with a fully masked row', shape: base, maskShape: [2, 1, 64, 64] },
  {
    name: 'padding lengths',
    shape: { ...base, T: 72, S: 90 },
    options: { querySeqLengths: [72, 33], keyValueSeqLengths: [85, 7] },
  },
  {
    name: 'padding + causal bottom-right + GQA',
    shape: { ...base, T: 72, S: 90, N: 4, K: 2 },
    options: {
      querySeqLengths: [50, 72],
      keyValueSeqLengths: [90, 60],
      isCausal: true,
      causalAlignment: 'bottom_right',
    },
  },
  { name: 'window 8', shape: base, options: { localWindowSize: 8 } },
  { name: 'window [16,0] causal', shape: base, options: { localWindowSize: [16, 0], isCausal: true } },
  { name: 'window [4,9]', shape: { ...base, T: 40, S: 70 }, options: { localWindowSize: [4, 9] } },
  { name: 'T=1', shape: { ...base, T: 1, S: 37 } },
  { name: 'T=1 causal (sees key 0 only)', shape: { ...base, T: 1, S: 37 }, options: { isCausal: true } },
  { name: 'T=113 S=203', shape: { ...base, B: 1, T: 113, S: 203, N: 2, K: 1 } },
  {
    name: 'T=113 S=203 causal',
    shape: { ...base, B: 1, T: 113, S: 203, N: 2, K: 2 },
    options: { isCausal: true },
  },
  { name: 'H=32', shape: { ...base, H: 32 } },
  { name: 'H=96', shape: { ...base, H: 96, T: 33, S: 47 } },
  { name: 'H=128', shape: { ...base, H: 128 } },
  { name: 'H=256', shape: { ...base, B: 1, H: 256, T: 40, S: 50 } },
  { name: 'scale 0.3', shape: base, options: { scale: 0.3 } },
];

/** Cases several tiles long, from the GPU suites of each backend; every backend that takes them runs them. */
export const LONG_CASES: readonly AttentionCase[] = [
  {
    name: 'T=S=1000 causal (tiles skipped, diagonal masked)',
    shape: { B: 1, T: 1000, S: 1000, N: 1, K: 1, H: 32 },
    options: { isCausal: true },
  },
  { name: 'T=1000 S=203', shape: { B: 1, T: 1000, S: 203, N: 2, K: 1, H: 32 } },
  {
    name: 'T=300 S=330 window [64,0] bottom-right + padding',
    shape: { B: 2, T: 300, S: 330, N: 2, K: 1, H: 64 },
    options: {
      localWindowSize: [64, 0],
      causalAlignment: 'bottom_right',
      querySeqLengths: [300, 257],
      keyValueSeqLengths: [330, 280],
    },
  },
  {
    name: 'T=260 S=400 window [100,30]',
    shape: { B: 1, T: 260, S: 400, N: 2, K: 2, H: 64 },
    options: { localWindowSize: [100, 30] },
  },
  {
    name: 'GQA N=8 K=2 causal T=200 S=333',
    shape: { B: 1, T: 200, S: 333, N: 8, K: 2, H: 64 },
    options: { isCausal: true },
  },
  { name: 'H=40 (padded to 48)', shape: { B: 2, T: 70, S: 90, N: 2, K: 2, H: 40 } },
  { name: 'H=64 Hv=32', shape: { B: 1, T: 50, S: 77, N: 2, K: 1, H: 64, Hv: 32 } },
  { name: 'H=64 Hv=32 GQA', shape: { B: 2, T: 50, S: 77, N: 4, K: 2, H: 64, Hv: 32 } },
  { name: 'H=72 (ld not a multiple of 16 bytes in f16)', shape: { B: 2, T: 33, S: 41, N: 3, K: 3, H: 72 } },
  { name: 'H=200 causal', shape: { B: 1, T: 150, S: 150, N: 1, K: 1, H: 200 }, options: { isCausal: true } },
  {
    name: 'H=256 causal GQA',
    shape: { B: 1, T: 200, S: 200, N: 4, K: 2, H: 256 },
    options: { isCausal: true },
  },
  // Three 64-column boxes (the Hopper kernel's D=192) and key/value head dims of different box counts
  // (its Dk=192, Dv=128 after padding); both have > 64 GQA-packed rows per kv head (no decode kernel).
  {
    name: 'H=192 causal GQA',
    shape: { B: 1, T: 200, S: 260, N: 4, K: 2, H: 192 },
    options: { isCausal: true },
  },
  {
    name: 'H=160 Hv=96 padding + window',
    shape: { B: 2, T: 150, S: 180, N: 2, K: 1, H: 160, Hv: 96 },
    options: { localWindowSize: [60, 10], querySeqLengths: [150, 101], keyValueSeqLengths: [180, 77] },
  },
  { name: 'T=1 S=203 decode step', shape: { B: 3, T: 1, S: 203, N: 4, K: 1, H: 128 } },
  {
    name: 'T=300 S=1100 causal bottom-right MQA',
    shape: { B: 1, T: 300, S: 1100, N: 4, K: 1, H: 64 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'T=S=384 causal (several tiles)',
    shape: { B: 1, T: 384, S: 384, N: 2, K: 1, H: 128 },
    options: { isCausal: true },
  },
  {
    name: 'T=200 S=384 bottom-right causal',
    shape: { B: 1, T: 200, S: 384, N: 2, K: 2, H: 64 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'padding T=200 S=250 MQA (no mask ops in cuDNN 9.15+ unified)',
    shape: { B: 3, T: 200, S: 250, N: 4, K: 1, H: 64 },
    options: { querySeqLengths: [200, 1, 77], keyValueSeqLengths: [9, 250, 130] },
  },
  {
    name: 'bias (B,N,T,S) T=150 S=300',
    shape: { B: 2, T: 150, S: 300, N: 2, K: 2, H: 64 },
    biasShape: [2, 2, 150, 300],
  },
  {
    name: 'bias broadcast over B,N (1,1,T,S) + causal',
    shape: { B: 2, T: 130, S: 140, N: 2, K: 2, H: 64 },
    biasShape: [1, 1, 130, 140],
    options: { isCausal: true },
  },
  {
    name: 'float32 bias (B,N,T,S) + causal',
    shape: base,
    biasShape: [2, 4, 64, 64],
    biasDType: 'float32',
    options: { isCausal: true },
  },
  // Boolean masks (cuDNN converts them to a bias on the device); row 0 of each mask sees nothing.
  {
    name: 'mask (1,1,T,S) causal T=S=200',
    shape: { B: 2, T: 200, S: 200, N: 2, K: 1, H: 64 },
    maskShape: [1, 1, 200, 200],
    options: { isCausal: true },
  },
  {
    name: 'mask (B,N,T,S) + padding',
    shape: { B: 2, T: 130, S: 260, N: 2, K: 2, H: 128 },
    maskShape: [2, 2, 130, 260],
    options: { querySeqLengths: [130, 61], keyValueSeqLengths: [200, 260] },
  },
  {
    name: 'mask (B,1,T,S) + bias (1,N,T,S)',
    shape: { B: 2, T: 150, S: 300, N: 2, K: 2, H: 64 },
    maskShape: [2, 1, 150, 300],
    biasShape: [1, 2, 150, 300],
  },
  {
    name: 'mask (1,1,1,S): every row masked',
    shape: { B: 1, T: 40, S: 70, N: 2, K: 2, H: 64 },
    maskShape: [1, 1, 1, 70],
  },
  {
    name: 'mask (B,1,T,1) + causal + window',
    shape: { B: 2, T: 96, S: 96, N: 2, K: 2, H: 64 },
    maskShape: [2, 1, 96, 1],
    options: { isCausal: true, localWindowSize: [20, 0] },
  },
  // A bottom-right right bound beside a mask or bias (cuDNN applies it in the bias conversion).
  {
    name: 'bias (B,1,T,S) + bottom-right window [6,1] + padding',
    shape: { B: 2, T: 100, S: 160, N: 2, K: 2, H: 64 },
    biasShape: [2, 1, 100, 160],
    options: {
      localWindowSize: [6, 1],
      causalAlignment: 'bottom_right',
      querySeqLengths: [100, 70],
      keyValueSeqLengths: [40, 160],
    },
  },
  {
    name: 'mask + bottom-right causal T<S',
    shape: { B: 1, T: 48, S: 80, N: 2, K: 2, H: 64 },
    maskShape: [1, 1, 48, 80],
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    // Whole key tiles are masked before the row's first visible key: the running max starts at
    // cuDNN's fill value (or −inf) and must rescale away.
    name: 'mask dropping the first 256 keys of even rows',
    shape: { B: 1, T: 128, S: 384, N: 2, K: 2, H: 64 },
    maskShape: [1, 1, 128, 384],
    maskKeep: (t, s) => t % 2 === 1 || s >= 256,
  },
  // Biases broadcast over T or S (cuDNN expands them on the device).
  { name: 'bias (B,N,T,1)', shape: { B: 2, T: 70, S: 90, N: 2, K: 2, H: 64 }, biasShape: [2, 2, 70, 1] },
  {
    name: 'bias (1,1,1,S) causal',
    shape: { B: 2, T: 200, S: 200, N: 2, K: 2, H: 64 },
    biasShape: [1, 1, 1, 200],
    options: { isCausal: true },
  },
  // T > S: the last rows see nothing.
  {
    name: 'window [5,0] T>S (last rows see nothing)',
    shape: { B: 2, T: 80, S: 48, N: 2, K: 2, H: 64 },
    options: { localWindowSize: [5, 0] },
  },
  {
    name: 'window [3,2] bottom-right T>S',
    shape: { B: 2, T: 80, S: 48, N: 2, K: 1, H: 64 },
    options: { localWindowSize: [3, 2], causalAlignment: 'bottom_right' },
  },
  {
    name: 'S_b = 0 in one batch',
    shape: { B: 2, T: 64, S: 64, N: 2, K: 2, H: 64 },
    options: { querySeqLengths: [64, 30], keyValueSeqLengths: [64, 0] },
  },
  {
    name: 'bias (1,1,T,S) + mask (1,N,1,S) + window',
    shape: { B: 2, T: 40, S: 60, N: 2, K: 2, H: 32 },
    biasShape: [1, 1, 40, 60],
    maskShape: [1, 2, 1, 60],
    options: { localWindowSize: [10, 5] },
  },
];

/** Inputs for a case, built on the CPU from a seed and converted to `dtype`. */
export function buildInputs(c: AttentionCase, dtype: FloatDType, seed: number) {
  const { B, T, S, N, K, H } = c.shape;
  const Hv = c.shape.Hv ?? H;
  const q = randomNormal([B, T, N, H], { seed, dtype });
  const k = randomNormal([B, S, K, H], { seed: seed + 1, dtype });
  const v = randomNormal([B, S, K, Hv], { seed: seed + 2, dtype });
  const options: AttentionOptions = { ...c.options };
  if (c.biasShape) {
    options.bias = randomNormal(c.biasShape, { seed: seed + 3, dtype: c.biasDType ?? dtype, std: 2 });
  }
  if (c.maskShape) {
    const rng = new Random(seed + 4);
    const [mb, mn, mt, ms] = c.maskShape;
    const values = new Uint8Array(mb * mn * mt * ms);
    for (let i = 0; i < values.length; i++) values[i] = rng.nextFloat() < 0.3 ? 0 : 1;
    // Row t=0 of every (b, n) sees nothing: exercises the "empty row → zeros" rule.
    for (let x = 0; x < mb * mn; x++) values.fill(0, x * mt * ms, x * mt * ms + ms);
    if (c.maskKeep) {
      for (let i = 0; i < values.length; i++) values[i] = c.maskKeep(Math.floor(i / ms) % mt, i % ms) ? 1 : 0;
    }
    options.mask = Tensor.fromRaw(values, c.maskShape, 'bool');
  }
  return { q, k, v, options };
}
