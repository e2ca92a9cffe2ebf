/**
 * The flash decode step's launches as one captured CUDA graph (src/backends/cuda/runtime/launch-graph.ts) on a
 * GPU: for dense and paged decode shapes (row-tile and heads kernels, split and not), the same call four times
 * on the same buffers — launched, captured, then graph-launched twice — gives outputs and log-sum-exps
 * bit-identical to ATTNLAB_LAUNCH_GRAPH=0's launches, and the graph was launched; a KVCache decode loop, whose
 * lengths are rewritten in place each step (the plan's one buffer) behind graph-launched steps, sees every new
 * token, and so does one whose appends run as graphs too (ATTNLAB_LAUNCH_GRAPH=all). The kernels' accuracy
 * against the float64 reference is flash.test.ts's: identical bits carry it over. Skips, saying why,
 * without a GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { KVCache } from '../../../src/api/kv-cache.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { launchGraphStats } from '../../../src/backends/cuda/runtime/launch-graph.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { reloadConfig } from '../../../src/config.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

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
  for (const all of [false, true])
    it(`a KVCache loop${all ? ', its appends as graphs too (ATTNLAB_LAUNCH_GRAPH=all)' : ''}: each graph-launched step sees the token appended just before it`, () => {
      if (all) {
        process.env.ATTNLAB_LAUNCH_GRAPH = 'all';
        reloadConfig();
      }
      try {
        // N=K=8 H=128, blocks of 16. Each step's new key is twice its query (q·k·scale ≈ 2·128/√128 ≈ 23 above
        // the old keys' ~0), so the new token takes nearly all the weight and the output is its value: a step that
        // read the lengths before the append's would miss it and return ~the mean of the old values (~0).
        const [N, H] = [8, 128];
        const cache = new KVCache({ numBlocks: 16, blockSize: 16, numKvHeads: N, headDim: H });
        const id = cache.addSequence();
        const small = (seed: number, rows: number) =>
          Tensor.fromRaw(
            Float32Array.from(randomNormal([1, rows, N, H], { seed }).toFloat64Array(), (x) => 0.1 * x),
            [1, rows, N, H],
            'float32',
          ).astype('bfloat16');
        const prefill = small(1, 40).to('cuda');
        cache.append([id], prefill, prefill);
        const before = launchGraphStats.graphLaunches;
        for (let step = 0; step < 40; step++) {
          const qHost = randomNormal([1, 1, N, H], { seed: 100 + step, dtype: 'bfloat16' });
          const q = qHost.to('cuda');
          const k = Tensor.fromRaw(
            Float32Array.from(qHost.toFloat64Array(), (x) => 2 * x),
            [1, 1, N, H],
            'float32',
          )
            .astype('bfloat16')
            .to('cuda');
          const vHost = randomNormal([1, 1, N, H], { seed: 500 + step, dtype: 'bfloat16' });
          const v = vHost.to('cuda');
          cache.append([id], k, v);
          const r = cache.attention(q, [id], { implementation: 'flash' });
          const got = r.output.toHost().toFloat64Array();
          const want = vHost.toFloat64Array();
          let worst = 0;
          for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
          assert.ok(worst < 0.08, `step ${step} (${40 + step + 1} tokens): |out − v_new| up to ${worst}`);
          // In the reverse order of their making: the pool hands each block to the next step's tensor made in
          // the same place (a free list is a stack; the four are one size), so the query's, key's, value's and
          // output's addresses — in the launches' signatures — stay the same step to step.
          for (const t of [r.output, v, k, q]) t.dispose();
        }
        // With the appends as graphs, each step is two graph launches.
        assert.ok(launchGraphStats.graphLaunches - before >= (all ? 60 : 30), 'most steps ran as a graph');
        prefill.dispose();
        cache.dispose();
      } finally {
        if (all) {
          delete process.env.ATTNLAB_LAUNCH_GRAPH;
          reloadConfig();
        }
      }
    });

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
