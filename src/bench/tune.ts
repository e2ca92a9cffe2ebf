/**
 * `attnlab tune`'s work: for each shape class of TUNE_CASES, the backends that support the case are
 * timed on this GPU (tuning-registry.ts: one untimed call, then CUDA-event-timed calls within the
 * class's budget, the median decides) and the order is written to this GPU's calibrated table in
 * the cache folder, which `auto` follows first from then on, in every process.
 *
 * The cases are the shapes the benchmarks measure and a codelab-sized call: the headline forward
 * (B=4, T=S=8192, N=16) at H = 64/128/256, causal and not, the T sweep at B·T = 32k where cuDNN and
 * flash trade places on Hopper (1k–4k), the same shapes for the backward, and decode steps on dense
 * caches at the sizes of the decode benchmark (N=32, H=128; K = 8, 4 and 1 holding 1M cached tokens;
 * B=1 with 32k and 4k).
 */

import { validateAttention } from '../api/validate.js';
import { validateBackward } from '../api/validate-backward.js';
import { planFor, runPlanned } from '../backends/backend.js';
import { BACKWARD_BACKENDS } from '../backends/backward-registry.js';
import type { CalibratedEntry, TunedOperation } from '../backends/calibrated-dispatch-table.js';
import { synchronize } from '../backends/cuda/runtime/context.js';
import type { BackendOutput } from '../backends/problem.js';
import { BACKENDS, calibrationCandidates } from '../backends/registry.js';
import {
  calibrateOnDevice,
  reloadCalibration,
  resetCalibration,
  saveCurrentCalibration,
} from '../backends/tuning-registry.js';
import type { Tensor } from '../tensor/tensor.js';
import { seededInput } from './measure.js';

/** One case to calibrate: sizes in the letter legend, bf16. */
export interface TuneCase {
  readonly operation: TunedOperation;
  readonly B: number;
  readonly T: number;
  readonly S: number;
  readonly N: number;
  readonly K: number;
  readonly H: number;
  readonly causal: boolean;
}

const forward = (B: number, T: number, N: number, H: number, causal: boolean): TuneCase => ({
  operation: 'forward',
  B,
  T,
  S: T,
  N,
  K: N,
  H,
  causal,
});
const backward = (c: TuneCase): TuneCase => ({ ...c, operation: 'backward' });
const decode = (B: number, S: number, K: number): TuneCase => ({
  operation: 'decode',
  B,
  T: 1,
  S,
  N: 32,
  K,
  H: 128,
  causal: false,
});

const HEADLINE = [64, 128, 256].flatMap((H) =>
  [false, true].map((causal) => forward(4, 8192, 16, H, causal)),
);
const T_SWEEP = [1024, 2048, 4096].flatMap((T) =>
  [false, true].map((causal) => forward(32768 / T, T, 16, 128, causal)),
);

/** The shape classes `attnlab tune` calibrates, forward, backward and decode (`--quick`: QUICK_CASES). */
export const TUNE_CASES: readonly TuneCase[] = [
  ...HEADLINE,
  ...T_SWEEP,
  forward(4, 128, 8, 64, false),
  forward(4, 128, 8, 64, true),
  ...[64, 128].flatMap((H) => [false, true].map((causal) => backward(forward(4, 8192, 16, H, causal)))),
  ...[1024, 4096].map((T) => backward(forward(32768 / T, T, 16, 128, true))),
  decode(64, 16384, 8),
  decode(64, 16384, 1),
  decode(8, 131072, 8),
  decode(128, 8192, 4),
  decode(1, 32768, 8),
  decode(1, 4096, 8),
];

/** The headline shapes at H=128 and the two decode steps of the table: a minute's run. */
export const QUICK_CASES: readonly TuneCase[] = TUNE_CASES.filter(
  (c) =>
    (c.operation === 'forward' && c.T === 8192 && c.H === 128) ||
    (c.operation === 'backward' && c.T === 8192 && c.H === 128 && c.causal) ||
    (c.operation === 'decode' && ((c.B === 64 && c.K === 1) || (c.B === 8 && c.K === 8))),
);

/** One calibrated case, as `attnlab tune` prints it. */
export interface TunedCase {
  readonly case: TuneCase;
  readonly shapeClass: string;
  readonly entry: CalibratedEntry | null;
  /** Why nothing was timed (fewer than two backends take it, or an input could not be made). */
  readonly note?: string;
}

export interface TuneOptions {
  readonly cases: readonly TuneCase[];
  /** Wall time per shape class, in ms. */
  readonly budgetMs: number;
  /** Drop the entries already in the file first. */
  readonly reset?: boolean;
  /** Called after each case (progress). */
  readonly onCase?: (done: TunedCase, index: number, total: number) => void;
}

/** Calibrates `options.cases` on the current GPU and saves the table; returns each case and the file. */
export function runTune(options: TuneOptions): { readonly file: string; readonly cases: TunedCase[] } {
  if (options.reset) resetCalibration();
  else reloadCalibration();
  const done: TunedCase[] = [];
  options.cases.forEach((c, index) => {
    const tuned = tuneCase(c, options.budgetMs);
    done.push(tuned);
    options.onCase?.(tuned, index, options.cases.length);
  });
  return { file: saveCurrentCalibration(), cases: done };
}

function tuneCase(c: TuneCase, budgetMs: number): TunedCase {
  const made: Tensor[] = [];
  const input = (len: number, heads: number, seed: number) => {
    const host = seededInput([c.B, len, heads, c.H], seed, 'bfloat16');
    const t = host.to('cuda');
    made.push(t);
    return t;
  };
  try {
    const q = input(c.T, c.N, 1);
    const k = input(c.S, c.K, 2);
    const v = input(c.S, c.K, 3);
    const options = { isCausal: c.causal };
    const forwardProblem = validateAttention(q, k, v, options);
    if (c.operation !== 'backward')
      return timed(c, forwardProblem, calibrationCandidates(forwardProblem, BACKENDS), budgetMs);
    // The backward's residuals from one forward (any backend: each keeps the same log-sum-exp).
    const withLse = { ...forwardProblem, returnLogSumExp: true };
    let out: BackendOutput | null = null;
    for (const b of BACKENDS) {
      const found = b.device === 'cuda' ? planFor(b, withLse) : null;
      if (!found?.ok) continue;
      out = runPlanned(b, found.plan, withLse);
      break;
    }
    if (!out) return { case: c, shapeClass: '', entry: null, note: 'no forward backend takes it' };
    made.push(out.output, ...(out.logSumExp ? [out.logSumExp] : []));
    const dOut = input(c.T, c.N, 4);
    const p = validateBackward(q, k, v, out.output, out.logSumExp, dOut, options);
    return timed(c, p, calibrationCandidates(p, BACKWARD_BACKENDS), budgetMs);
  } finally {
    synchronize();
    for (const t of made) t.dispose();
  }
}

function timed(
  c: TuneCase,
  p: Parameters<typeof calibrateOnDevice>[1],
  candidates: ReturnType<typeof calibrationCandidates>,
  budgetMs: number,
): TunedCase {
  if (candidates.length < 2) {
    const names = candidates.map((x) => x.name).join(', ') || 'none';
    return { case: c, shapeClass: '', entry: null, note: `nothing to choose: only ${names} takes it` };
  }
  // Saved after each class: a run cut short keeps the classes it finished.
  const { shapeClass, entry } = calibrateOnDevice(c.operation, p, candidates, budgetMs);
  return { case: c, shapeClass, entry };
}
