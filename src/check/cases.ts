/**
 * The correctness matrix, written once and run for every backend (CPU tests and test/gpu/*).
 * Each case builds fresh random inputs from a seed; GPU suites pass a new seed per run.
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
  /** Shape of a boolean mask, if any; about 30% of pairs are dropped and row 0 fully masked. */
  maskShape?: [number, number, number, number];
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

/** Inputs for a case, built on the CPU from a seed and converted to `dtype`. */
export function buildInputs(c: AttentionCase, dtype: FloatDType, seed: number) {
  const { B, T, S, N, K, H } = c.shape;
  const Hv = c.shape.Hv ?? H;
  const q = randomNormal([B, T, N, H], { seed, dtype });
  const k = randomNormal([B, S, K, H], { seed: seed + 1, dtype });
  const v = randomNormal([B, S, K, Hv], { seed: seed + 2, dtype });
  const options: AttentionOptions = { ...c.options };
  if (c.biasShape) options.bias = randomNormal(c.biasShape, { seed: seed + 3, dtype, std: 2 });
  if (c.maskShape) {
    const rng = new Random(seed + 4);
    const [mb, mn, mt, ms] = c.maskShape;
    const values = new Uint8Array(mb * mn * mt * ms);
    for (let i = 0; i < values.length; i++) values[i] = rng.nextFloat() < 0.3 ? 0 : 1;
    // Row t=0 of every (b, n) sees nothing: exercises the "empty row → zeros" rule.
    for (let x = 0; x < mb * mn; x++) values.fill(0, x * mt * ms, x * mt * ms + ms);
    options.mask = Tensor.fromRaw(values, c.maskShape, 'bool');
  }
  return { q, k, v, options };
}
