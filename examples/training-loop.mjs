// A training-style loop: forward with its residuals kept (attentionVjp), a squared-error loss, the
// backward, and plain SGD on the query. The loss falls step by step: `node training-loop.mjs`.
import { attentionVjp, cudaAvailable, randomNormal, Tensor, tidy } from 'attnlab';

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const dtype = device === 'cuda' ? 'bfloat16' : 'float32';
const [B, T, N, H] = [1, 64, 4, 32];

let q = randomNormal([B, T, N, H], { seed: 0, dtype }).to(device);
const k = randomNormal([B, T, N, H], { seed: 1, dtype }).to(device);
const v = randomNormal([B, T, N, H], { seed: 2, dtype }).to(device);
const target = randomNormal([B, T, N, H], { seed: 3, dtype: 'float64' }).toFloat64Array();
const learningRate = 0.3;

/** @type {number[]} */
const losses = [];
for (let step = 0; step < 8; step++) {
  // tidy frees every tensor made inside when the step ends, except the one it returns.
  const next = tidy(() => {
    const forward = attentionVjp(q, k, v, { isCausal: true }); // forward, residuals kept
    const out = forward.output.toFloat64Array();
    // loss = ½ Σ (out − target)², so ∂loss/∂out = out − target
    const grad = out.map((o, i) => o - target[i]);
    losses.push(grad.reduce((sum, g) => sum + 0.5 * g * g, 0));
    const dOutput = Tensor.fromArray(grad, forward.output.shape, dtype).to(device);
    const { dQuery } = forward.backward(dOutput); // dQuery, dKey, dValue in the inputs' shapes
    const g = dQuery.toFloat64Array();
    const updated = q.toFloat64Array().map((x, i) => x - learningRate * g[i]);
    return Tensor.fromArray(updated, q.shape, dtype).to(device); // SGD on Q
  });
  q.dispose();
  q = next;
}
console.log(`backward on ${device}; loss per step:`, losses.map((l) => l.toFixed(3)).join(' → '));
if (!(losses[losses.length - 1] < losses[0])) throw new Error('the loss did not fall');
