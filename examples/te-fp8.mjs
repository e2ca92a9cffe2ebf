// TransformerEngine's DotProductAttention module: bf16, then FP8 under autocast with TE's delayed
// scaling. FP8 runs through cuDNN on a Hopper GPU (sm_90) and as an exact emulation of the same graph
// on the CPU; on another GPU `fallback: true` runs bf16 and says so: `node te-fp8.mjs`.
import { autocast, cudaAvailable, DelayedScaling, DotProductAttention, randomNormal } from 'attnlab';

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const [B, T, N, K, H] = [2, 128, 8, 2, 128];
const q = randomNormal([B, T, N, H], { seed: 0, dtype: 'bfloat16' }).to(device);
const k = randomNormal([B, T, K, H], { seed: 1, dtype: 'bfloat16' }).to(device);
const v = randomNormal([B, T, K, H], { seed: 2, dtype: 'bfloat16' }).to(device);

// TE's names and defaults: attnMaskType 'causal', qkvLayout 'bshd_bshd_bshd', scale 1/√H.
const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, numGqaGroups: K });
const bf16 = attn.apply(q, k, v);
console.log(`bf16 on ${device}: ${bf16.backend}, output (${bf16.output.shape})`);

const recipe = new DelayedScaling({ fp8Format: 'HYBRID', amaxHistoryLen: 16, amaxComputeAlgo: 'max' });
const exact = bf16.output.toFloat64Array();
for (let step = 0; step < 3; step++) {
  // The first step quantises with scale 1; later steps take their scales from the recorded amax history.
  const fp8 = autocast({ enabled: true, recipe, fallback: true }, () => attn.apply(q, k, v));
  const got = fp8.output.toFloat64Array();
  let num = 0;
  let den = 0;
  for (let i = 0; i < exact.length; i++) {
    num += (got[i] - exact[i]) ** 2;
    den += exact[i] ** 2;
  }
  const relative = Math.sqrt(num / den);
  console.log(
    `step ${step}: ${fp8.precision} on ${fp8.backend}, relative difference from bf16 ${relative.toFixed(4)}`,
  );
  if (!(relative < 0.2)) throw new Error(`FP8 output ${relative} from bf16`);
  fp8.output.dispose();
}
