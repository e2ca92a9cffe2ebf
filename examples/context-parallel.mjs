// Ring attention (context parallelism): the sequence split over 4 ranks, key/value shards passed round
// the ring, partial results merged by their log-sum-exp. A loopback group runs the 4 ranks on one
// device (RingGroup.nccl(4) puts one on each of 4 GPUs): `node context-parallel.mjs`.
import {
  attention,
  contextParallelAttention,
  cudaAvailable,
  gatherSequence,
  RingGroup,
  randomNormal,
  shardSequence,
} from 'attnlab';

const device = cudaAvailable().ok ? 'cuda' : 'cpu';
const dtype = device === 'cuda' ? 'bfloat16' : 'float32';
const [B, T, N, K, H, P] = [1, 256, 4, 2, 64, 4];
const q = randomNormal([B, T, N, H], { seed: 0, dtype }).to(device);
const k = randomNormal([B, T, K, H], { seed: 1, dtype }).to(device);
const v = randomNormal([B, T, K, H], { seed: 2, dtype }).to(device);

const group = RingGroup.loopback(P);
// Load-balanced for causal masks: 2P chunks, rank r holds chunks r and 2P−1−r; (B, T/P, N, H) each.
const [qs, ks, vs] = [q, k, v].map((t) => shardSequence(t, P));
const { outputs } = contextParallelAttention(qs, ks, vs, { group, isCausal: true });
const ring = gatherSequence(outputs).toFloat64Array(); // back in sequence order: (B, T, N, H)
group.destroy();

const whole = attention(q, k, v, { isCausal: true }).output.toFloat64Array();
let maxDifference = 0;
for (let i = 0; i < whole.length; i++) maxDifference = Math.max(maxDifference, Math.abs(ring[i] - whole[i]));
console.log(
  `${P} ranks on ${device}: ring against one call, max |difference| ${maxDifference.toExponential(2)}`,
);
if (!(maxDifference < (dtype === 'float32' ? 1e-5 : 2e-2))) throw new Error(`difference ${maxDifference}`);
