// Packed-document training: four documents of different lengths packed into one sequence, each token
// attending causally within its own document only (documentMask ∧ causal), a block mask letting the
// kernels skip the blocks between documents, and a learned relative-position bias trained beside the
// query. Checks that the packed output equals one call per document and that the loss falls:
// `node variants-documents.mjs`.
import {
  and,
  attention,
  attentionVjp,
  causal,
  createBlockMask,
  cudaAvailable,
  documentMask,
  randomNormal,
  relativeBias,
  Tensor,
  tidy,
} from 'attnlab';

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const dtype = device === 'cuda' ? 'bfloat16' : 'float32';
const lengths = [40, 24, 56, 8];
const [B, T, N, H] = [1, 128, 4, 32];
// docIds[b, t]: the document of each packed position.
const ids = lengths.flatMap((length, doc) => Array(length).fill(doc));
const docIds = Tensor.fromArray(ids, [B, T], 'int32').to(device);
const docs = and(documentMask(docIds), causal());
// Made once, reused at every step and layer: 0 empty, 1 partial, 2 full per 32×32 block.
const blockMask = createBlockMask(docs, { B, N, T, S: T, blockQ: 32, blockKV: 32 });

let q = randomNormal([B, T, N, H], { seed: 0, dtype }).to(device);
const k = randomNormal([B, T, N, H], { seed: 1, dtype }).to(device);
const v = randomNormal([B, T, N, H], { seed: 2, dtype }).to(device);

// The packed call equals one causal call per document.
const packed = attention(q, k, v, { maskMod: docs, blockMask }).output.toFloat64Array();
const rows = (/** @type {Tensor} */ t, /** @type {number} */ start, /** @type {number} */ length) =>
  Tensor.fromArray(
    t.toFloat64Array().slice(start * N * H, (start + length) * N * H),
    [B, length, N, H],
    dtype,
  ).to(device);
let start = 0;
let maxDifference = 0;
for (const length of lengths) {
  const alone = attention(rows(q, start, length), rows(k, start, length), rows(v, start, length), {
    isCausal: true,
  });
  const values = alone.output.toFloat64Array();
  for (let i = 0; i < values.length; i++)
    maxDifference = Math.max(maxDifference, Math.abs(values[i] - packed[start * N * H + i]));
  start += length;
}
const tolerance = dtype === 'bfloat16' ? 2e-2 : 1e-5;
if (!(maxDifference <= tolerance))
  throw new Error(`packed and per-document outputs differ by ${maxDifference}`);

// Training steps: loss = ½ Σ (out − target)²; SGD on the query and on the relative-bias table.
let table = Tensor.zeros([N, 2 * 16 + 1], 'float32').to(device);
const target = randomNormal([B, T, N, H], { seed: 3, dtype: 'float64' }).toFloat64Array();
/** @type {number[]} */
const losses = [];
for (let step = 0; step < 6; step++) {
  const next = tidy(() => {
    const forward = attentionVjp(q, k, v, { maskMod: docs, blockMask, scoreMod: relativeBias(table) });
    const grad = forward.output.toFloat64Array().map((o, i) => o - target[i]);
    losses.push(grad.reduce((sum, g) => sum + 0.5 * g * g, 0));
    const { dQuery, dCaptures } = forward.backward(
      Tensor.fromArray(grad, forward.output.shape, dtype).to(device),
    );
    const sgd = (
      /** @type {Tensor} */ x,
      /** @type {Tensor} */ dx,
      /** @type {'float32' | 'bfloat16'} */ type,
      /** @type {number} */ learningRate,
    ) => {
      const g = dx.toFloat64Array();
      return Tensor.fromArray(
        x.toFloat64Array().map((value, i) => value - learningRate * g[i]),
        x.shape,
        type,
      ).to(device);
    };
    if (!dCaptures?.table) throw new Error('relativeBias returns the gradient of its table');
    // The table's entries each sum the gradients of many (q, kv) pairs: a smaller step.
    return [sgd(q, dQuery, dtype, 0.1), sgd(table, dCaptures.table, 'float32', 0.002)];
  });
  q.dispose();
  table.dispose();
  [q, table] = next;
}
console.log(
  `packed documents on ${device}: per-document difference ${maxDifference.toExponential(2)}; loss per step:`,
  losses.map((l) => l.toFixed(3)).join(' → '),
);
if (!(losses[losses.length - 1] < losses[0])) throw new Error('the loss did not fall');
