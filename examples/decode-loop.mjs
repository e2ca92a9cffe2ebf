// A decode loop over a paged KV cache: each step appends one token's key and value per sequence and
// attends from one new query token over everything cached. The first and last steps are checked
// against the dense call they stand for: `node decode-loop.mjs`.
import { attention, cudaAvailable, KVCache, randomNormal, Tensor, tidy } from 'attnlab';

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const [B, N, K, H, steps] = [2, 8, 2, 64, 48];

// Pools of 64 blocks of 16 tokens; blocks go to a sequence as it grows, back to the pool when freed.
const cache = new KVCache({ numBlocks: 64, blockSize: 16, numKvHeads: K, headDim: H, device }); // bfloat16
const ids = [cache.addSequence(), cache.addSequence()];
/** @type {Float64Array[]} */
const keys = [];
/** @type {Float64Array[]} */
const values = [];

// The same step as one dense call over all (B, S, K, H) keys and values so far, in float64.
/** @param {import('attnlab').Tensor} q @param {import('attnlab').Tensor} output */
function checkAgainstDense(q, output) {
  const S = keys.length;
  const dense = (/** @type {Float64Array[]} */ rows) => {
    const out = new Float64Array(B * S * K * H);
    rows.forEach((row, s) => {
      for (let b = 0; b < B; b++) out.set(row.subarray(b * K * H, (b + 1) * K * H), (b * S + s) * K * H);
    });
    return Tensor.fromArray(out, [B, S, K, H], 'float64');
  };
  const exact = attention(q.astype('float64'), dense(keys), dense(values), { implementation: 'reference' });
  const want = exact.output.toFloat64Array();
  const got = output.toFloat64Array();
  let maxError = 0;
  for (let i = 0; i < want.length; i++) maxError = Math.max(maxError, Math.abs(want[i] - got[i]));
  console.log(`step ${S} against the dense float64 call: max |error| ${maxError.toExponential(2)}`);
  if (!(maxError < 2e-2)) throw new Error(`error ${maxError} too large`);
}

for (let step = 0; step < steps; step++) {
  const k = randomNormal([B, 1, K, H], { seed: 3 * step, dtype: 'bfloat16' }); // (B, 1, K, H)
  const v = randomNormal([B, 1, K, H], { seed: 3 * step + 1, dtype: 'bfloat16' });
  const q = randomNormal([B, 1, N, H], { seed: 3 * step + 2, dtype: 'bfloat16' }); // (B, 1, N, H)
  keys.push(k.toFloat64Array());
  values.push(v.toFloat64Array());
  tidy(() => {
    cache.append(ids, k.to(device), v.to(device)); // one token per sequence, copied into the pools
    const { output } = cache.attention(q.to(device), ids); // (B, 1, N, H): causal, bottom-right over the cache
    if (step === 0 || step === steps - 1) checkAgainstDense(q, output);
  }); // frees what the step made on the device
}
console.log(`${steps} steps on ${device}: ${cache.sequenceLength(ids[0])} tokens cached per sequence`);

cache.freeSequence(ids[0]); // its blocks go back to the pool
cache.dispose();
