// Grouped-query attention (8 query heads share 2 key/value heads) under a causal mask, checked
// against the float64 reference: `node gqa-causal.mjs`.
import { attention, cudaAvailable, randomNormal } from 'attnlab';

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const dtype = device === 'cuda' ? 'bfloat16' : 'float32';
const [B, T, N, K, H] = [2, 256, 8, 2, 64];

const q = randomNormal([B, T, N, H], { seed: 0, dtype }); // (B, T, N, H)
const k = randomNormal([B, T, K, H], { seed: 1, dtype }); // (B, S, K, H): GQA, N % K == 0
const v = randomNormal([B, T, K, H], { seed: 2, dtype }); // (B, S, K, Hv)

// Query i sees keys j ≤ i; the second batch holds 200 valid keys, the rest is padding.
const options = { isCausal: true, keyValueSeqLengths: [T, 200], returnLogSumExp: true };
const fast = attention(q.to(device), k.to(device), v.to(device), options);
const exact = attention(q.astype('float64'), k.astype('float64'), v.astype('float64'), {
  ...options,
  implementation: 'reference',
});

const got = fast.output.toFloat64Array();
const want = exact.output.toFloat64Array();
let maxError = 0;
for (let i = 0; i < want.length; i++) maxError = Math.max(maxError, Math.abs(got[i] - want[i]));
console.log(`${fast.backend} (${fast.variant}) on ${fast.device}, ${dtype}`);
console.log(`output (${fast.output.shape}), log-sum-exp (${fast.logSumExp?.shape})`);
console.log(`max |error| against the float64 reference: ${maxError.toExponential(2)}`);
if (!(maxError < (dtype === 'float32' ? 1e-4 : 3e-2))) throw new Error(`error ${maxError} too large`);
