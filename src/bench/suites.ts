/**
 * The benchmark suites as data: each names what it times (the sweep groups, one pass), which peer
 * implementations stand beside it, and a shorter list for a quick run. `attnlab bench --suite NAME`
 * runs one and files the results under benchmarks/results/<gpu>/<suite>/ (results/suite-path.ts);
 * docs/benchmarks.md cites those files.
 *
 * Sizes are the GPU's: a suite other than `codelab` times shapes that take a CPU hours, so on a
 * machine without CUDA it runs only with sizes given on the command line (overrides.ts in the CLI).
 */

import { type Pass, PEER_IMPLS } from '../results/schema.js';
import type { PeerName } from './peers.js';
import { codelabSweeps, doubling } from './presets.js';
import type { SweepGroup } from './run-bench.js';
import type { SweepSpec } from './sweep.js';

export interface BenchSuite {
  readonly name: string;
  /** One line for `--suite list`. */
  readonly summary: string;
  /** What every row of the suite times. */
  readonly pass: Pass;
  /** The suite needs CUDA at its own sizes (every suite but the codelab's). */
  readonly gpuSizes: boolean;
  /** The implementations each peer runs beside the suite (a subset of what the peer offers). */
  readonly peerImpls: Readonly<Record<PeerName, readonly string[]>>;
  /** The groups in measuring order, for the device the run is on. */
  readonly groups: (device: 'cuda' | 'cpu') => SweepGroup[];
  /** A shorter list of the same groups (`--quick`): the suite's headline shapes. */
  readonly quick: (device: 'cuda' | 'cpu') => SweepGroup[];
}

/** The shape of the headline tables: B=4, T=S=8192, N=16, bf16 (4·4·16·8192²·128 = 2.2 TFLOP at H=128). */
const TABLE = {
  batch: [4],
  seq: [8192],
  heads: [16],
  dtype: ['bfloat16'],
} as const satisfies Partial<SweepSpec>;
const BOTH_MASKS: readonly boolean[] = [false, true];
/** The GPU backends a suite compares; `auto` picks one of them, so its rows would repeat one. */
const GPU_IMPLS = ['flash', 'cudnn'] as const;

function headDimTable(headDims: readonly number[]): SweepGroup {
  return {
    name: 'head dims',
    spec: { ...TABLE, headDim: headDims, causal: BOTH_MASKS, impl: GPU_IMPLS },
  };
}

/**
 * T from 1k to 32k at a constant B·T = 32k tokens (B=32 at T=1k … B=1 at T=32k): the work per call
 * grows with T while the tokens stay put, so the curve shows where each kernel reaches its speed.
 */
function seqSweep(seqs: readonly number[]): SweepGroup[] {
  return seqs.map((T) => ({
    name: 'T sweep at constant B·T',
    spec: {
      batch: [32768 / T],
      seq: [T],
      heads: [16],
      headDim: [128],
      dtype: ['bfloat16'],
      causal: BOTH_MASKS,
      impl: GPU_IMPLS,
    },
  }));
}

/** One query token against B·S = 1M cached tokens: (B, S) pairs from many short contexts to few long ones. */
const DECODE_SHAPES: readonly { B: number; S: number }[] = [
  { B: 128, S: 8192 },
  { B: 64, S: 16384 },
  { B: 8, S: 131072 },
];
/** Paged caches in blocks of 16 tokens (vLLM's default) and 64. */
const DECODE_BLOCKS: readonly number[] = [16, 64];

function decodeGroups(kvHeads: readonly number[], shapes: readonly { B: number; S: number }[]): SweepGroup[] {
  const groups: SweepGroup[] = [];
  for (const K of kvHeads) {
    for (const { B, S } of shapes) {
      const spec: SweepSpec = {
        batch: [B],
        seq: [1],
        kvSeq: [S],
        heads: [32],
        kvHeads: [K],
        headDim: [128],
        dtype: ['bfloat16'],
        causal: [false],
        impl: GPU_IMPLS,
      };
      const name = `decode K=${K}`;
      groups.push({ name, spec }, { name, spec: { ...spec, blockSize: DECODE_BLOCKS } });
    }
  }
  return groups;
}

function fp8Groups(): SweepGroup[] {
  const spec: SweepSpec = { ...TABLE, headDim: [128], causal: BOTH_MASKS, impl: ['cudnn'] };
  const name = 'TE module bf16 vs FP8';
  return [
    { name, spec },
    { name, spec, module: 'te' },
    { name, spec, module: 'te-fp8' },
  ];
}

/** Every suite, in the order `--suite list` prints them. */
export const SUITES: readonly BenchSuite[] = [
  {
    name: 'forward',
    summary:
      'the forward pass: the head-dim table (H=64/128/192/256 at B=4 T=S=8192 N=16 bf16) and the T sweep 1k…32k at B·T=32k (H=128), causal and not, flash and cudnn',
    pass: 'forward',
    gpuSizes: true,
    peerImpls: { torch: ['flash', 'cudnn'], jax: ['cudnn'] },
    groups: () => [headDimTable([64, 128, 192, 256]), ...seqSweep(doubling(1024, 32768))],
    quick: () => [headDimTable([64, 128, 192, 256])],
  },
  {
    name: 'backward',
    summary:
      'the backward pass alone (residuals made beforehand; TFLOP/s count 2.5× the forward): H=64/128 at B=4 T=S=8192 N=16 bf16, causal and not',
    pass: 'backward',
    gpuSizes: true,
    peerImpls: { torch: ['flash', 'cudnn'], jax: ['cudnn'] },
    groups: () => [headDimTable([64, 128])],
    quick: () => [headDimTable([128])],
  },
  {
    name: 'decode',
    summary:
      'decode steps: one query token over B·S = 1M cached tokens (B=128 S=8k, B=64 S=16k, B=8 S=128k), K=8/4/1, N=32 H=128 bf16, dense and paged (blocks of 16 and 64); rows in GB/s',
    pass: 'forward',
    gpuSizes: true,
    peerImpls: { torch: ['flash', 'cudnn', 'efficient'], jax: ['cudnn'] },
    groups: () => decodeGroups([8, 4, 1], DECODE_SHAPES),
    quick: () => decodeGroups([8, 1], [{ B: 64, S: 16384 }]),
  },
  {
    name: 'fp8',
    summary:
      'the TE-style module in bf16 and under FP8 autocast (delayed scaling, HYBRID) beside bf16 cudnn, B=4 T=S=8192 N=16 H=128, causal and not (sm_90 GPUs)',
    pass: 'forward',
    gpuSizes: true,
    peerImpls: { torch: ['cudnn'], jax: ['cudnn'] },
    groups: fp8Groups,
    quick: fp8Groups,
  },
  {
    name: 'codelab',
    summary:
      "the codelab's shapes: its default shape (B=4 T=128 N=8 H=64), sequence sweep 64…1024 and batch sweep 1…16, float32 and bf16 (small sizes on a CPU)",
    pass: 'forward',
    gpuSizes: false,
    peerImpls: PEER_IMPLS,
    groups: (device) => codelabSweeps(device, false),
    quick: (device) => codelabSweeps(device, false).filter((g) => g.name === 'default'),
  },
];

/** The suite of this name, or undefined. */
export function findSuite(name: string): BenchSuite | undefined {
  return SUITES.find((s) => s.name === name);
}

/** The suites as `--suite list` prints them: one name and summary per line. */
export function suiteListing(): string {
  const width = Math.max(...SUITES.map((s) => s.name.length));
  return SUITES.map((s) => `${s.name.padEnd(width)}  ${s.summary}`).join('\n');
}

/** Values given beside --suite, each replacing that dimension in every group of the suite. */
export type SuiteOverrides = Partial<SweepSpec>;

/**
 * The suite's groups on this device, whole or quick, with any overrides applied. Groups that the
 * overrides make identical are measured once (overriding --seq turns the T sweep's six groups into one).
 */
export function resolveSuite(
  suite: BenchSuite,
  options: { device: 'cuda' | 'cpu'; quick?: boolean; overrides?: SuiteOverrides },
): SweepGroup[] {
  const groups = (options.quick ? suite.quick : suite.groups)(options.device);
  const overrides = Object.fromEntries(
    Object.entries(options.overrides ?? {}).filter(([, value]) => value !== undefined),
  );
  const seen = new Set<string>();
  const resolved: SweepGroup[] = [];
  for (const group of groups) {
    const spec: SweepSpec = { ...group.spec, ...overrides };
    const key = JSON.stringify([group.name, group.module ?? null, spec]);
    if (seen.has(key)) continue;
    seen.add(key);
    resolved.push({ ...group, spec });
  }
  return resolved;
}
