// attnlab is an ES module; from CommonJS, require() loads it on Node ≥ 20.19 (and ≥ 22.12), where
// require(esm) is on by default. On older Node, use `await import('attnlab')`: `node commonjs.cjs`.
const { cudaAvailable, dotProductAttention, randomNormal } = require('attnlab');

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const dtype = device === 'cuda' ? 'float16' : 'float32';
const q = randomNormal([1, 32, 4, 16], { seed: 0, dtype }).to(device); // (B, T, N, H)
const k = randomNormal([1, 32, 4, 16], { seed: 1, dtype }).to(device); // (B, S, K, H)
const v = randomNormal([1, 32, 4, 16], { seed: 2, dtype }).to(device); // (B, S, K, Hv)

const output = dotProductAttention(q, k, v, { isCausal: true }); // (B, T, N, Hv)
console.log(`CommonJS: output (${output.shape}) ${output.dtype} on ${output.device}`);
