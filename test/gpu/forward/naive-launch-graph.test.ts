/**
 * The naive backend's launches as one captured CUDA graph on a GPU (src/backends/cuda/naive/backend.ts through
 * runtime/launch-graph.ts, opt-in: ATTNLAB_LAUNCH_GRAPH=all): the cuBLASLt matmuls per batch entry and the
 * softmax, captured from attnlab's stream. For MHA and GQA, causal and not, float32 in place and 16-bit with a separate probability buffer, a
 * bias, a mask, a window and padding lengths, the same call four times on the same buffers — launched,
 * captured, then graph-launched twice — gives outputs and log-sum-exps bit-identical to ATTNLAB_LAUNCH_GRAPH=0's
 * launches, and the graph was launched; a call with another scale after the graph gives the other scale's
 * plain result. The accuracy against the float64 reference is naive.test.ts's: identical bits carry it over.
 * Skips, saying why, without a GPU.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { launchGraphStats } from '../../../src/backends/cuda/runtime/launch-graph.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { reloadConfig } from '../../../src/config.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

interface Case {
  name: string;
  B: number;
  T: number;
  S: number;
  N: number;
  K: number;
  H: number;
  dtype: FloatDType;
  options: (t: { B: number; T: number; S: number; N: number }) => AttentionOptions;
}

const CASES: Case[] = [
  {
    name: 'B=4 T=128 N=8 H=64 bf16 (the host-time shape)',
    ...{ B: 4, T: 128, S: 128, N: 8, K: 8, H: 64, dtype: 'bfloat16' },
    options: () => ({}),
  },
  {
    name: 'the same, causal',
    ...{ B: 4, T: 128, S: 128, N: 8, K: 8, H: 64, dtype: 'bfloat16' },
    options: () => ({ isCausal: true }),
  },
  {
    name: 'B=3 T=100 S=260 GQA 4:1 H=128 fp16, bottom-right causal, padding lengths',
    ...{ B: 3, T: 100, S: 260, N: 8, K: 2, H: 128, dtype: 'float16' },
    options: () => ({
      isCausal: true,
      causalAlignment: 'bottom_right',
      querySeqLengths: [100, 37, 1],
      keyValueSeqLengths: [260, 90, 0],
    }),
  },
  {
    name: 'B=2 T=64 S=96 MQA N=4 H=32 float32, a (B,N,T,S) bias and a window',
    ...{ B: 2, T: 64, S: 96, N: 4, K: 1, H: 32, dtype: 'float32' },
    options: ({ B, T, S, N }) => ({
      bias: randomNormal([B, N, T, S], { seed: 7, dtype: 'float32' }).to('cuda'),
      localWindowSize: [16, 8],
    }),
  },
  {
    name: 'B=2 T=50 S=70 N=2 H=64 bf16, a (1,1,T,S) mask',
    ...{ B: 2, T: 50, S: 70, N: 2, K: 2, H: 64, dtype: 'bfloat16' },
    options: ({ T, S }) => ({
      mask: Tensor.fromRaw(
        Uint8Array.from({ length: T * S }, (_, i) => ((i * 7) % 5 === 0 ? 0 : 1)),
        [1, 1, T, S],
        'bool',
      ).to('cuda'),
    }),
  },
];

function bytes(t: Tensor | undefined): Buffer | null {
  if (!t) return null;
  const data = t.toHost().data;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

describe("naive's launches as one CUDA graph", { skip }, () => {
  before(() => {
    process.env.ATTNLAB_LAUNCH_GRAPH = 'all';
    reloadConfig();
  });
  after(() => {
    delete process.env.ATTNLAB_LAUNCH_GRAPH;
    reloadConfig();
  });
  for (const c of CASES) {
    it(`${c.name}: captured and graph-launched calls are bit-identical to launched ones`, () => {
      const q = randomNormal([c.B, c.T, c.N, c.H], { seed: 1, dtype: c.dtype }).to('cuda');
      const k = randomNormal([c.B, c.S, c.K, c.H], { seed: 2, dtype: c.dtype }).to('cuda');
      const v = randomNormal([c.B, c.S, c.K, c.H], { seed: 3, dtype: c.dtype }).to('cuda');
      const options: AttentionOptions = {
        ...c.options(c),
        implementation: 'naive',
        returnLogSumExp: true,
      };
      const call = (scale?: number) => {
        const r = attention(q, k, v, scale === undefined ? options : { ...options, scale });
        const out = { output: bytes(r.output)!, lse: bytes(r.logSumExp), variant: r.variant };
        r.output.dispose();
        r.logSumExp?.dispose();
        return out;
      };
      const plainly = (scale?: number) => {
        process.env.ATTNLAB_LAUNCH_GRAPH = '0';
        reloadConfig();
        try {
          return call(scale);
        } finally {
          process.env.ATTNLAB_LAUNCH_GRAPH = 'all';
          reloadConfig();
        }
      };
      const plain = plainly();
      const before = launchGraphStats.graphLaunches;
      const runs = [call(), call(), call(), call()];
      const graphed = launchGraphStats.graphLaunches - before;
      assert.ok(graphed >= 2, `${plain.variant}: ${graphed} graph launches of 4 calls`);
      runs.forEach((r, i) => {
        assert.equal(r.variant, plain.variant);
        assert.ok(r.output.equals(plain.output), `call ${i + 1}: output differs (${plain.variant})`);
        assert.ok(plain.lse && r.lse?.equals(plain.lse), `call ${i + 1}: log-sum-exp differs`);
      });
      const rescaled = call(0.05);
      assert.ok(!rescaled.output.equals(plain.output), 'another scale gives another output');
      assert.ok(rescaled.output.equals(plainly(0.05).output), "the other scale's plain result");
      const o = options as { bias?: Tensor; mask?: Tensor };
      for (const t of [q, k, v, o.bias, o.mask]) t?.dispose();
    });
  }
});
