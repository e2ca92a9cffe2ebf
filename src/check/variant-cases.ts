/**
 * Cases of the correctness suite with score and mask modifiers (docs/guide/variants.md): every ready-made
 * modifier and a few written ones, beside padding, GQA, T ≠ S and the built-in masks, judged as every case
 * is, against the float64 reference evaluating the same modifiers. Captured tensors are made on the host;
 * the suite moves them to a backend's device with the inputs (suite.ts). Run by the CPU suites here and by
 * the GPU suite of the backends that take modifiers (test/gpu/variants/cases.test.ts).
 */
import { Tensor } from '../tensor/tensor.js';
import {
  alibi,
  and,
  causal,
  documentMask,
  not,
  or,
  prefixLm,
  relativeBias,
  sinks,
  slidingWindow,
  softcap,
} from '../variants/library.js';
import { maskMod, scoreMod } from '../variants/modifiers.js';
import type { AttentionCase } from './cases.js';

/** Document ids of B packed sequences of T tokens: documents of `sizes` tokens, repeated. */
function documents(B: number, T: number, sizes: readonly number[]): Tensor {
  const ids: number[] = [];
  for (let b = 0; b < B; b++) {
    let doc = 0;
    let left = sizes[b % sizes.length];
    for (let t = 0; t < T; t++) {
      if (left === 0) {
        doc++;
        left = sizes[(b + doc) % sizes.length];
      }
      ids.push(doc);
      left--;
    }
  }
  return Tensor.fromArray(ids, [B, T], 'int32');
}

const table = (N: number, D: number) =>
  Tensor.fromArray(
    Array.from({ length: N * (2 * D + 1) }, (_, i) => Math.sin(0.7 * i)),
    [N, 2 * D + 1],
    'float32',
  );

export const VARIANT_CASES: readonly AttentionCase[] = [
  {
    name: 'documentMask ∧ causal (maskMod), 3 documents per sequence',
    shape: { B: 2, T: 96, S: 96, N: 4, K: 2, H: 64 },
    options: { maskMod: and(documentMask(documents(2, 96, [40, 17, 39])), causal()) },
  },
  {
    name: 'alibi + causal, T<S top-left',
    shape: { B: 2, T: 48, S: 80, N: 4, K: 4, H: 64 },
    options: { scoreMod: alibi(4), isCausal: true },
  },
  {
    name: 'softcap 5 + a written mask',
    shape: { B: 1, T: 70, S: 70, N: 2, K: 1, H: 64 },
    options: { scoreMod: softcap(5), maskMod: maskMod('(kv + 2 * q) % 5 != 0 || kv == q') },
  },
  {
    name: 'relativeBias + prefixLm + padding',
    shape: { B: 2, T: 64, S: 64, N: 2, K: 2, H: 64 },
    options: {
      scoreMod: relativeBias(table(2, 8)),
      maskMod: prefixLm(Tensor.fromArray([5, 30], [2], 'int32')),
      querySeqLengths: [64, 41],
      keyValueSeqLengths: [50, 64],
    },
  },
  {
    name: 'sliding window ∨ sinks (maskMod)',
    shape: { B: 1, T: 100, S: 100, N: 2, K: 2, H: 64 },
    options: { maskMod: or(slidingWindow(12, 0), sinks(4)) },
  },
  {
    name: 'a written scoreMod + not(causal): rows that see nothing',
    shape: { B: 1, T: 40, S: 40, N: 2, K: 2, H: 64 },
    options: { scoreMod: scoreMod('score * 0.5 + float(kv - q) / 16.0'), maskMod: not(causal()) },
  },
];
