/**
 * The wgmma backward loops (hopper/hopper_bwd.cu: all five products on wgmma, dQ by bulk reduce-adds into
 * its (B·N, D/64, t_pad, 64) workspace) against the float64 CPU reference, with the backward accuracy
 * rule (src/check/gradients.ts: each gradient's error ≤ 2× a plain same-precision implementation's +
 * a floor), on shapes that cross its tiles: T, S ∈ {128, 257, 1000} (whole, ragged and many 64-query
 * blocks and 128-key blocks), causal in both alignments, GQA/MQA (dK, dV summed over the group),
 * padding lengths, a window, H = 64 and 128 (one and two 64-column boxes), H = 32 and 96 on the 64-
 * and 128-column modules (zero-filled columns), bf16 and fp16, and the deterministic pass; each case
 * on both loops, named by ATTNLAB_FLASH_BWD_KERNEL: every thread loading (wgmma), and the producer
 * warpgroup (wgmma-ws, hopper/bwd_dkdv_sm90_ws.cuh). Every case asserts that the wgmma variant ran. Poisoned allocations (0xFF =
 * NaN) catch an unwritten element. Skips without a GPU, and on GPUs other than sm_90a.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attentionVjp } from '../../../src/api/backward.js';
import type { BackwardOptions } from '../../../src/backends/backward-problem.js';
import { cudaAvailable, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import type { AttentionCase } from '../../../src/check/cases.js';
import { buildInputs } from '../../../src/check/cases.js';
import {
  checkGradients,
  type GradientValues,
  gradientValues,
  plainLowPrecisionGradients,
  randomOutputGradient,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { reloadConfig } from '../../../src/config.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';

const cuda = cudaAvailable();
const arch = cuda.ok ? targetArch() : '';
const skip = !cuda.ok
  ? `no CUDA device: ${cuda.reason}`
  : arch !== 'sm_90a'
    ? `${arch}: the wgmma backward needs sm_90a`
    : false;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

interface WgmmaCase extends AttentionCase {
  dtype: FloatDType;
  deterministic?: boolean;
}

const CASES: readonly WgmmaCase[] = [
  { name: 'T=S=128 H=128', shape: { B: 2, T: 128, S: 128, N: 2, K: 2, H: 128 }, dtype: 'bfloat16' },
  {
    name: 'T=S=128 H=64 causal',
    shape: { B: 2, T: 128, S: 128, N: 2, K: 2, H: 64 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'T=257 S=257 H=128 causal',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 2, H: 128 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'T=257 S=1000 H=64 causal bottom-right',
    shape: { B: 1, T: 257, S: 1000, N: 2, K: 1, H: 64 },
    dtype: 'bfloat16',
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'T=1000 S=257 H=128 causal top-left',
    shape: { B: 1, T: 1000, S: 257, N: 1, K: 1, H: 128 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'T=1000 S=1000 H=128 fp16',
    shape: { B: 1, T: 1000, S: 1000, N: 1, K: 1, H: 128 },
    dtype: 'float16',
  },
  {
    name: 'GQA N=8 K=2 T=257 S=257 H=128 causal',
    shape: { B: 1, T: 257, S: 257, N: 8, K: 2, H: 128 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'MQA N=4 K=1 T=128 S=1000 H=64',
    shape: { B: 1, T: 128, S: 1000, N: 4, K: 1, H: 64 },
    dtype: 'float16',
  },
  {
    name: 'T=257 S=300 H=128 padding lengths, window [64,16]',
    shape: { B: 2, T: 257, S: 300, N: 2, K: 2, H: 128 },
    dtype: 'bfloat16',
    options: { querySeqLengths: [257, 130], keyValueSeqLengths: [300, 129], localWindowSize: [64, 16] },
  },
  {
    name: 'H=64 Hv=128 T=S=257',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 2, H: 64, Hv: 128 },
    dtype: 'bfloat16',
  },
  {
    name: 'H=96 T=S=257 causal (the 128-column module)',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 1, H: 96 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'H=32 T=128 S=257 (the 64-column module)',
    shape: { B: 2, T: 128, S: 257, N: 2, K: 2, H: 32 },
    dtype: 'float16',
  },
  {
    name: 'deterministic T=S=257 H=128 causal',
    shape: { B: 1, T: 257, S: 257, N: 4, K: 2, H: 128 },
    dtype: 'bfloat16',
    options: { isCausal: true },
    deterministic: true,
  },
  {
    name: 'deterministic T=S=1000 H=64',
    shape: { B: 1, T: 1000, S: 1000, N: 1, K: 1, H: 64 },
    dtype: 'float16',
    deterministic: true,
  },
];

/** The two wgmma loops: every thread loading (the default), and a producer warpgroup (wgmma-ws). */
const LOOPS = ['wgmma', 'wgmma-ws'] as const;

const summary: string[] = [];

describe('GPU flash backward · wgmma', { skip }, () => {
  before(() => {
    console.log(`# backward/hopper.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    setAllocationPoison(0xff);
  });
  after(() => {
    setAllocationPoison(null);
    console.log(summary.map((line) => `# ${line}`).join('\n'));
  });

  // The expected gradients of a case, computed once for both loops (the float64 oracle costs seconds).
  const expected = new Map<number, { reference: GradientValues; plain: GradientValues }>();
  CASES.forEach((c, index) => {
    for (const loop of LOOPS) {
      it(`${c.name} · ${c.dtype}${c.deterministic ? ' · deterministic' : ''} · ${loop}`, () => {
        const { q, k, v, options } = buildInputs(c, c.dtype, seed + 31 * index);
        const dO = randomOutputGradient(q, v, c.dtype, seed + 31 * index + 7);
        const inputs = { q, k, v, options, dO };
        const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
        const vjpOptions: BackwardOptions = {
          ...options,
          implementation: 'flash',
          deterministic: c.deterministic,
        };
        // Each loop by name: the default differs by head dim (HOPPER_BACKWARD_DEFAULTS).
        process.env.ATTNLAB_FLASH_BWD_KERNEL = loop;
        reloadConfig();
        const f = attentionVjp(cq, ck, cv, vjpOptions);
        let grads: ReturnType<typeof f.backward>;
        try {
          grads = f.backward(cdO);
        } finally {
          delete process.env.ATTNLAB_FLASH_BWD_KERNEL;
          reloadConfig();
        }
        try {
          assert.equal(grads.backend, 'flash');
          const pattern = loop === 'wgmma-ws' ? /\.wgmma\.ws(\.|$)/ : /\.wgmma(\.det)?$/;
          assert.match(grads.variant ?? '', pattern, `variant ${grads.variant}`);
          let want = expected.get(index);
          if (!want) {
            want = {
              reference: referenceGradients(inputs),
              plain: plainLowPrecisionGradients(inputs, c.dtype),
            };
            expected.set(index, want);
          }
          const reports = checkGradients(gradientValues(grads), want.reference, want.plain, c.dtype);
          summary.push(
            `${c.name} ${c.dtype}: ${reports
              .map((r) => `${r.gradient} ${r.error.toExponential(1)}/${r.bound.toExponential(1)}`)
              .join(' ')} ${grads.variant}`,
          );
          for (const r of reports) assert.ok(r.ok, `${c.name} (${grads.variant}) ${r.message}`);
        } finally {
          for (const t of [cq, ck, cv, cdO, f.output, f.logSumExp, grads.dQuery, grads.dKey, grads.dValue])
            t.dispose();
        }
      });
    }
  });
});
