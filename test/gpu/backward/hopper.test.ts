/**
 * The wgmma backward loops (hopper/hopper_bwd.cu: all five products on wgmma, dQ by bulk reduce-adds into
 * its (B·N, D/64, t_pad, 64) workspace) against the float64 CPU reference, with the backward accuracy
 * rule (src/check/gradients.ts: each gradient's error ≤ 2× a plain same-precision implementation's +
 * a floor), on shapes that cross its tiles: T, S ∈ {128, 257, 1000} (whole, ragged and many 64-query
 * blocks and 128-key blocks), causal in both alignments, GQA/MQA (dK, dV summed over the group),
 * padding lengths, a window, H = 64 and 128 (one and two 64-column boxes), H = 32 and 96 on the 64-
 * and 128-column modules (zero-filled columns), bf16 and fp16, and the deterministic pass; each case
 * on both loops, named by ATTNLAB_FLASH_BWD_KERNEL: every thread loading (wgmma), and the producer
 * warpgroup (wgmma-ws, hopper/bwd_dkdv_sm90_ws.cuh), and the oracle cases also on wgmma-ws with dQ split
 * by keys (`pingpong`, ATTNLAB_FLASH_BWD_PINGPONG=1). Every case asserts that the wgmma variant ran. Poisoned allocations (0xFF =
 * NaN) catch an unwritten element. Deterministic mode (the dQ adds in a fixed order of key blocks,
 * hopper/bwd_dq_order.cuh) is bitwise identical over 20 runs on shapes that take both orders and more
 * key blocks of one head than an H100 has SMs (blocks queued behind waiting ones). Skips without a
 * GPU, and on GPUs other than sm_90a.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attentionBackward, attentionVjp } from '../../../src/api/backward.js';
import type { BackwardOptions } from '../../../src/backends/backward-problem.js';
import { cudaAvailable, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import type { ProblemSize } from '../../../src/backends/problem.js';
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
import type { Tensor } from '../../../src/tensor/tensor.js';

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
  {
    name: 'deterministic T=257 S=1000 H=128 causal bottom-right',
    shape: { B: 1, T: 257, S: 1000, N: 2, K: 1, H: 128 },
    dtype: 'bfloat16',
    options: { isCausal: true, causalAlignment: 'bottom_right' },
    deterministic: true,
  },
  {
    name: 'deterministic T=257 S=300 H=64 padding lengths, window [64,16]',
    shape: { B: 2, T: 257, S: 300, N: 2, K: 2, H: 64 },
    dtype: 'bfloat16',
    options: { querySeqLengths: [257, 130], keyValueSeqLengths: [300, 129], localWindowSize: [64, 16] },
    deterministic: true,
  },
];

/**
 * Deterministic shapes checked for repeatability, not against the oracle: both key-block orders
 * (ascending without a mask, descending under causal or a window), a head whose key blocks outnumber
 * the SMs (313 and 160 blocks: the grid queues some behind blocks that wait for their turn), T > S
 * bottom-right (rows that see no key), padding lengths that leave key blocks without work.
 */
const REPEAT_CASES: readonly (WgmmaCase & { shape: ProblemSize })[] = [
  {
    name: 'GQA N=4 K=2 T=S=1000 H=128 causal',
    shape: { B: 1, T: 1000, S: 1000, N: 4, K: 2, H: 128 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'T=300 S=2000 H=64 padding lengths, window [200,50]',
    shape: { B: 2, T: 300, S: 2000, N: 2, K: 2, H: 64 },
    dtype: 'float16',
    options: { querySeqLengths: [300, 170], keyValueSeqLengths: [2000, 900], localWindowSize: [200, 50] },
  },
  {
    name: 'T=128 S=40000 H=128 (313 key blocks)',
    shape: { B: 1, T: 128, S: 40000, N: 1, K: 1, H: 128 },
    dtype: 'bfloat16',
  },
  {
    name: 'T=S=20480 H=64 causal bottom-right (160 key blocks)',
    shape: { B: 1, T: 20480, S: 20480, N: 1, K: 1, H: 64 },
    dtype: 'bfloat16',
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'T=2000 S=700 H=128 causal bottom-right',
    shape: { B: 1, T: 2000, S: 700, N: 2, K: 2, H: 128 },
    dtype: 'bfloat16',
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
];
const REPEATS = 20;

/** The two wgmma loops: every thread loading (the default), and a producer warpgroup (wgmma-ws). */
const LOOPS = ['wgmma', 'wgmma-ws'] as const;
/**
 * `wgmma` and `wgmma-ws` run each loop as shipped (the bank-spreading dQ staging and the early row statistics;
 * wgmma-ws's producer cleaning only flagged steps, and at D=64 dQ split by keys with the warpgroups taking
 * turns). The oracle cases also run the loops without those switches (`plain-wgmma`, `plain-ws`: each =0) and
 * `pingpong`, the warpgroups' turns at every head dim (ATTNLAB_FLASH_BWD_PINGPONG=1; deterministic cases keep
 * the halves).
 */
const ORACLE_LOOPS = [...LOOPS, 'plain-wgmma', 'plain-ws', 'pingpong'] as const;
type Loop = (typeof ORACLE_LOOPS)[number];

const SWITCHES_OFF = {
  ATTNLAB_FLASH_BWD_WS_FLAGGED: '0',
  ATTNLAB_FLASH_BWD_DQ_SWIZZLE: '0',
  ATTNLAB_FLASH_BWD_STATS_EARLY: '0',
  ATTNLAB_FLASH_BWD_PINGPONG: '0',
};
const LOOP_VARIABLES: Record<Loop, Record<string, string>> = {
  wgmma: { ATTNLAB_FLASH_BWD_KERNEL: 'wgmma' },
  'wgmma-ws': { ATTNLAB_FLASH_BWD_KERNEL: 'wgmma-ws' },
  'plain-wgmma': { ATTNLAB_FLASH_BWD_KERNEL: 'wgmma', ...SWITCHES_OFF },
  'plain-ws': { ATTNLAB_FLASH_BWD_KERNEL: 'wgmma-ws', ...SWITCHES_OFF },
  pingpong: { ATTNLAB_FLASH_BWD_KERNEL: 'wgmma-ws', ATTNLAB_FLASH_BWD_PINGPONG: '1' },
};
const VARIABLES = [...new Set(Object.values(LOOP_VARIABLES).flatMap((vars) => Object.keys(vars)))];

/** The variables that name `loop`; `undefined` unsets them. */
function setLoop(loop: Loop | undefined): void {
  for (const name of VARIABLES) delete process.env[name];
  if (loop !== undefined) Object.assign(process.env, LOOP_VARIABLES[loop]);
  reloadConfig();
}

/** The variant a loop runs (the ping-pong keeps dQ's halves where deterministic; wgmma-ws has it at D=64). */
function variantPattern(loop: Loop, deterministic: boolean): RegExp {
  const det = deterministic ? '\\.det' : '';
  const pp = deterministic ? '' : '\\.pp';
  const name = {
    wgmma: '\\.wgmma\\.early\\.dqswz',
    'wgmma-ws': `\\.wgmma\\.ws(${pp})?\\.flagged\\.early\\.dqswz`,
    'plain-wgmma': '\\.wgmma',
    'plain-ws': '\\.wgmma\\.ws',
    pingpong: `\\.wgmma\\.ws${pp}\\.flagged\\.early\\.dqswz`,
  }[loop];
  return new RegExp(`${name}${det}$`);
}

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
    for (const loop of ORACLE_LOOPS) {
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
        setLoop(loop);
        const f = attentionVjp(cq, ck, cv, vjpOptions);
        let grads: ReturnType<typeof f.backward>;
        try {
          grads = f.backward(cdO);
        } finally {
          setLoop(undefined);
        }
        try {
          assert.equal(grads.backend, 'flash');
          const pattern = variantPattern(loop, c.deterministic === true);
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

const bits = (t: Tensor) => Buffer.from((t.toHost().data as Uint16Array).buffer);

/** `fn` with ATTNLAB_FLASH_BWD_KERNEL naming `loop`. */
function withLoop<T>(loop: string, fn: () => T): T {
  process.env.ATTNLAB_FLASH_BWD_KERNEL = loop;
  reloadConfig();
  try {
    return fn();
  } finally {
    delete process.env.ATTNLAB_FLASH_BWD_KERNEL;
    reloadConfig();
  }
}

describe(`GPU flash backward · wgmma · deterministic, bitwise identical over ${REPEATS} runs`, {
  skip,
}, () => {
  before(() => setAllocationPoison(0xff));
  after(() => setAllocationPoison(null));

  REPEAT_CASES.forEach((c, index) => {
    for (const loop of LOOPS) {
      it(`repeat · ${c.name} · ${c.dtype} · ${loop}`, () => {
        const { q, k, v, options } = buildInputs(c, c.dtype, seed + 97 * index);
        const dO = randomOutputGradient(q, v, c.dtype, seed + 97 * index + 7);
        const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
        const vjpOptions: BackwardOptions = { ...options, implementation: 'flash' };
        const f = attentionVjp(cq, ck, cv, { ...vjpOptions, deterministic: true });
        const owned: Tensor[] = [cq, ck, cv, cdO, f.output, f.logSumExp];
        try {
          const runs = withLoop(loop, () => {
            const out = [];
            for (let r = 0; r < REPEATS; r++) {
              const g = f.backward(cdO);
              owned.push(g.dQuery, g.dKey, g.dValue);
              out.push(g);
            }
            return out;
          });
          const atomic = withLoop(loop, () =>
            attentionBackward(cq, ck, cv, f.output, f.logSumExp, cdO, vjpOptions),
          );
          owned.push(atomic.dQuery, atomic.dKey, atomic.dValue);
          assert.match(runs[0].variant ?? '', variantPattern(loop, true), `variant ${runs[0].variant}`);
          assert.doesNotMatch(atomic.variant ?? '', /\.det$/);
          const first = {
            dQuery: bits(runs[0].dQuery),
            dKey: bits(runs[0].dKey),
            dValue: bits(runs[0].dValue),
          };
          runs.forEach((g, r) => {
            for (const key of ['dQuery', 'dKey', 'dValue'] as const)
              assert.ok(bits(g[key]).equals(first[key]), `run ${r}: ${key} differs from run 0`);
          });
          // dK and dV come from the same loop either way; dQ differs by the order of its float32 sums only.
          assert.ok(first.dKey.equals(bits(atomic.dKey)) && first.dValue.equals(bits(atomic.dValue)));
          const x = runs[0].dQuery.toFloat64Array();
          const y = atomic.dQuery.toFloat64Array();
          let worst = 0;
          let largest = 0;
          for (let i = 0; i < x.length; i++) {
            assert.ok(Number.isFinite(x[i]), `dQ[${i}] = ${x[i]}`);
            worst = Math.max(worst, Math.abs(x[i] - y[i]));
            largest = Math.max(largest, Math.abs(x[i]));
          }
          assert.ok(worst <= 2 ** -7 * largest, `max |det − atomic| ${worst} against max |dQ| ${largest}`);
        } finally {
          for (const t of owned) t.dispose();
        }
      });
    }
  });
});
