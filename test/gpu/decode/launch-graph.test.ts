/**
 * The flash decode step's launches as one captured CUDA graph (src/backends/cuda/runtime/launch-graph.ts) on a
 * GPU: for dense and paged decode shapes (row-tile and heads kernels, split and not), the same call four times
 * on the same buffers — launched, captured, then graph-launched twice — gives outputs and log-sum-exps
 * bit-identical to ATTNLAB_LAUNCH_GRAPH=0's launches, and the graph was launched. The kernels' accuracy
 * against the float64 reference is flash.test.ts's: identical bits carry it over. Skips, saying why,
 * without a GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { launchGraphStats } from '../../../src/backends/cuda/runtime/launch-graph.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { reloadConfig } from '../../../src/config.js';
import { randomNormal } from '../../../src/tensor/random.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

interface Case {
  name: string;
  B: number;
  S: number;
  N: number;
  K: number;
  H: number;
  paged?: boolean;
  lengths?: number[];
}

const CASES: Case[] = [
  { name: 'B=1 S=4096 K=8 N=32 H=128 (the host-time shape)', B: 1, S: 4096, N: 32, K: 8, H: 128 },
  {
    name: 'B=4 S=1000 GQA 4:1 H=128, ragged lengths',
    B: 4,
    S: 1000,
    N: 8,
    K: 2,
    H: 128,
    lengths: [1000, 1, 0, 517],
  },
  { name: 'B=2 S=3000 MQA N=32 H=64', B: 2, S: 3000, N: 32, K: 1, H: 64 },
  { name: 'B=8 S=256 K=8 N=8 H=128 (one split)', B: 8, S: 256, N: 8, K: 8, H: 128 },
  {
    name: 'paged B=2 S=2048 K=4 N=16 H=128',
    B: 2,
    S: 2048,
    N: 16,
    K: 4,
    H: 128,
    paged: true,
    lengths: [2048, 1500],
  },
];

function bytes(t: Tensor | undefined): Buffer | null {
  if (!t) return null;
  const data = t.toHost().data;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

describe("a flash decode step's launches as one CUDA graph", { skip }, () => {
  for (const c of CASES) {
    it(`${c.name}: captured and graph-launched calls are bit-identical to launched ones`, () => {
      const q = randomNormal([c.B, 1, c.N, c.H], { seed: 1, dtype: 'bfloat16' }).to('cuda');
      let k: Tensor;
      let v: Tensor;
      const options: AttentionOptions = { implementation: 'flash', returnLogSumExp: true };
      if (c.paged) {
        const blockSize = 64;
        const perSeq = c.S / blockSize;
        k = randomNormal([c.B * perSeq, blockSize, c.K, c.H], { seed: 2, dtype: 'bfloat16' }).to('cuda');
        v = randomNormal([c.B * perSeq, blockSize, c.K, c.H], { seed: 3, dtype: 'bfloat16' }).to('cuda');
        // Sequence b's blocks in reverse order, so the table is no identity.
        options.blockTable = Array.from({ length: c.B }, (_, b) =>
          Array.from({ length: perSeq }, (_, m) => b * perSeq + (perSeq - 1 - m)),
        );
        options.keyValueSeqLengths = c.lengths ?? Array(c.B).fill(c.S);
        options.isCausal = true;
        options.causalAlignment = 'bottom_right';
      } else {
        k = randomNormal([c.B, c.S, c.K, c.H], { seed: 2, dtype: 'bfloat16' }).to('cuda');
        v = randomNormal([c.B, c.S, c.K, c.H], { seed: 3, dtype: 'bfloat16' }).to('cuda');
        if (c.lengths) options.keyValueSeqLengths = c.lengths;
      }
      const call = () => {
        const r = attention(q, k, v, options);
        const out = { output: bytes(r.output)!, lse: bytes(r.logSumExp), variant: r.variant };
        r.output.dispose();
        r.logSumExp?.dispose();
        return out;
      };
      process.env.ATTNLAB_LAUNCH_GRAPH = '0';
      reloadConfig();
      let plain: ReturnType<typeof call>;
      try {
        plain = call();
      } finally {
        delete process.env.ATTNLAB_LAUNCH_GRAPH;
        reloadConfig();
      }
      const before = launchGraphStats.graphLaunches;
      const runs = [call(), call(), call(), call()];
      const graphed = launchGraphStats.graphLaunches - before;
      if (/tma/.test(plain.variant))
        assert.equal(graphed, 0, `${plain.variant}: the TMA kernel launches plain`);
      else assert.equal(graphed, 3, `${plain.variant}: graph launches`);
      runs.forEach((r, i) => {
        assert.equal(r.variant, plain.variant);
        assert.ok(r.output.equals(plain.output), `call ${i + 1}: output differs (${plain.variant})`);
        if (plain.lse) assert.ok(r.lse?.equals(plain.lse), `call ${i + 1}: log-sum-exp differs`);
      });
      for (const t of [q, k, v]) t.dispose();
    });
  }
});
