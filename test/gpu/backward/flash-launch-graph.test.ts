/**
 * The flash backward's launches as one captured CUDA graph on a GPU (src/backends/cuda/flash/sm80/backward.ts
 * through runtime/launch-graph.ts under ATTNLAB_LAUNCH_GRAPH=all; unset or =1 launches them one by one): the prep,
 * the dK/dV loop and the dQ conversion (or the dQ pass), captured from attnlab's stream. For MHA and GQA,
 * causal and not, padding lengths, bf16 and fp16, the same call four times on the same buffers — launched,
 * captured, then graph-launched twice — gives gradients identical to the plain launches': bit for bit in
 * deterministic mode, and dK, dV bit for bit with dQ within its float32 atomic adds' rounding otherwise; the
 * graph was launched. A call with another dOutput after the graph gives that dOutput's plain gradients. The
 * accuracy against the float64 reference is flash.test.ts's: identical bits carry it over. Skips, saying
 * why, without a GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionBackward } from '../../../src/api/backward.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { launchGraphStats } from '../../../src/backends/cuda/runtime/launch-graph.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import type { Tensor } from '../../../src/tensor/tensor.js';
import { withLaunchGraph } from '../../support/launch-graph-env.js';

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
  options: AttentionOptions;
}

const CASES: Case[] = [
  {
    name: 'B=4 T=128 N=8 H=64 bf16, causal (the host-time shape)',
    ...{ B: 4, T: 128, S: 128, N: 8, K: 8, H: 64, dtype: 'bfloat16' },
    options: { isCausal: true },
  },
  {
    name: 'B=2 T=200 S=200 N=4 H=128 bf16',
    ...{ B: 2, T: 200, S: 200, N: 4, K: 4, H: 128, dtype: 'bfloat16' },
    options: {},
  },
  {
    name: 'B=3 T=100 S=260 GQA 4:1 H=64 fp16, bottom-right causal, padding lengths',
    ...{ B: 3, T: 100, S: 260, N: 8, K: 2, H: 64, dtype: 'float16' },
    options: {
      isCausal: true,
      causalAlignment: 'bottom_right',
      querySeqLengths: [100, 37, 1],
      keyValueSeqLengths: [260, 90, 5],
    },
  },
];

function host(t: Tensor): Float64Array {
  return Float64Array.from(t.toHost().astype('float64').data as Float64Array);
}

function bits(t: Tensor): Buffer {
  const data = t.toHost().data;
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}

describe("the flash backward's launches as one CUDA graph", { skip }, () => {
  for (const c of CASES)
    for (const deterministic of [true, false])
      it(`${c.name}, deterministic ${deterministic}: captured and graph-launched calls match the launched ones`, () => {
        const q = randomNormal([c.B, c.T, c.N, c.H], { seed: 1, dtype: c.dtype }).to('cuda');
        const k = randomNormal([c.B, c.S, c.K, c.H], { seed: 2, dtype: c.dtype }).to('cuda');
        const v = randomNormal([c.B, c.S, c.K, c.H], { seed: 3, dtype: c.dtype }).to('cuda');
        const f = attention(q, k, v, { ...c.options, implementation: 'flash', returnLogSumExp: true });
        const dOut = randomNormal([c.B, c.T, c.N, c.H], { seed: 4, dtype: c.dtype }).to('cuda');
        const dOut2 = randomNormal([c.B, c.T, c.N, c.H], { seed: 5, dtype: c.dtype }).to('cuda');
        const call = (d: Tensor) => {
          const r = attentionBackward(q, k, v, f.output, f.logSumExp as Tensor, d, {
            ...c.options,
            implementation: 'flash',
            deterministic,
          });
          const out = {
            dQ: bits(r.dQuery),
            dK: bits(r.dKey),
            dV: bits(r.dValue),
            q: host(r.dQuery),
            variant: r.variant,
          };
          // Freed in their order: the next call's gradients get the same pool blocks back.
          for (const t of [r.dQuery, r.dKey, r.dValue]) t.dispose();
          return out;
        };
        const plain = withLaunchGraph('1', () => call(dOut));
        const before = launchGraphStats.graphLaunches;
        const runs = withLaunchGraph('all', () => [call(dOut), call(dOut), call(dOut), call(dOut)]);
        const graphed = launchGraphStats.graphLaunches - before;
        assert.ok(graphed >= 2, `${plain.variant}: ${graphed} graph launches of 4 calls`);
        let scale = 0;
        for (const x of plain.q) scale = Math.max(scale, Math.abs(x));
        runs.forEach((r, i) => {
          assert.equal(r.variant, plain.variant);
          assert.ok(r.dK.equals(plain.dK), `call ${i + 1}: dK differs (${plain.variant})`);
          assert.ok(r.dV.equals(plain.dV), `call ${i + 1}: dV differs (${plain.variant})`);
          if (deterministic) assert.ok(r.dQ.equals(plain.dQ), `call ${i + 1}: dQ differs (${plain.variant})`);
          else {
            // Atomic float32 adds in another order: within a few 16-bit roundings of the largest element.
            let worst = 0;
            for (let j = 0; j < r.q.length; j++) worst = Math.max(worst, Math.abs(r.q[j] - plain.q[j]));
            assert.ok(worst <= 2 ** -6 * scale, `call ${i + 1}: dQ differs by ${worst} (largest ${scale})`);
          }
        });
        const other = withLaunchGraph('all', () => call(dOut2));
        const otherPlain = withLaunchGraph('1', () => call(dOut2));
        assert.ok(!other.dV.equals(plain.dV), 'another dOutput gives another dV');
        assert.ok(other.dV.equals(otherPlain.dV), "the other dOutput's plain dV");
        assert.ok(other.dK.equals(otherPlain.dK), "the other dOutput's plain dK");
        for (const t of [q, k, v, f.output, f.logSumExp as Tensor, dOut, dOut2]) t.dispose();
      });
});
