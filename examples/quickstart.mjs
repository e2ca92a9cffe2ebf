// Attention on the GPU when there is one, on the CPU otherwise: `node quickstart.mjs`.
import { attention, cudaAvailable, randomNormal } from 'attnlab';

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const dtype = device === 'cuda' ? 'bfloat16' : 'float32';

// query (B, T, N, H), key (B, S, K, H), value (B, S, K, Hv): B=2, T=S=128, N=K=8, H=Hv=64
const q = randomNormal([2, 128, 8, 64], { seed: 0, dtype }).to(device);
const k = randomNormal([2, 128, 8, 64], { seed: 1, dtype }).to(device);
const v = randomNormal([2, 128, 8, 64], { seed: 2, dtype }).to(device);

const result = attention(q, k, v); // softmax(Q·Kᵀ / √H)·V, as jax.nn.dot_product_attention
const first = Array.from(result.output.toFloat64Array().slice(0, 4), (x) => x.toFixed(4));
console.log(`${result.backend} on ${result.device}: output (${result.output.shape}) ${result.output.dtype}`);
console.log(`first values: ${first.join(' ')}`);

for (const t of [q, k, v, result.output]) t.dispose(); // GPU memory back now, not at garbage collection
