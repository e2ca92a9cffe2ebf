/**
 * What the gradient NaN repair (src/backends/cuda/ops/gradient-nan-repair.ts) costs the cudnn
 * backward, which it follows on every call:
 *
 * - small: B=4, T=S=128, N=8, H=64 bf16 causal, where the host decides: wall µs per call over bursts of
 *   back-to-back calls (one sync per burst, median of the bursts), the same validated problem run by
 *   the bare cudnn backward and by withGradientNanRepair(cudnn) (runPlanned: run, then the post-op), so the difference is the repair alone.
 * - big: B=4, T=S=8192, N=16, H=128 bf16 causal, CUDA events in alternating blocks: bare, wrapped, and
 *   the repair kernel alone on NaN-free gradients (3 × 128 MiB to scan).
 * - poisoned: B=2, T=S=2048, N=16, H=128 bf16 causal with one NaN query element (row 1000 of head 3):
 *   the wrapped call, where the repair recomputes the rows cuDNN made NaN beyond the rule's.
 *
 * Usage on the GPU: node --import tsx benchmarks/harnesses/gradient-nan-repair-cost.ts [small,big,poisoned]
 * (one JSON line per measurement, then a table).
 */
import { attention } from '../../src/api/attention.js';
import { validateBackward } from '../../src/api/validate-backward.js';
import { runPlanned } from '../../src/backends/backend.js';
import type { BackwardOutput, BackwardProblem } from '../../src/backends/backward-problem.js';
import { cudnnBackward } from '../../src/backends/cuda/cudnn/backward.js';
import { repairGradients, withGradientNanRepair } from '../../src/backends/cuda/ops/gradient-nan-repair.js';
import { synchronize } from '../../src/backends/cuda/runtime/context.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import { median } from '../../src/bench/stats.js';
import { Tensor } from '../../src/tensor/tensor.js';

const parts = new Set((process.argv[2] ?? 'small,big,poisoned').split(','));
const rows: { part: string; what: string; value: number; unit: string }[] = [];
const record = (part: string, what: string, value: number, unit: string) => {
  rows.push({ part, what, value, unit });
  console.log(JSON.stringify({ part, what, value, unit }));
};

/** Wall µs per call: `bursts` bursts of `calls` back-to-back calls, one sync each, median. */
function wallPerCall(fn: () => void, calls = 1000, bursts = 5): number {
  for (let i = 0; i < 100; i++) fn();
  synchronize();
  const perCall: number[] = [];
  for (let b = 0; b < bursts; b++) {
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) fn();
    synchronize();
    perCall.push(((performance.now() - t0) * 1000) / calls);
  }
  return median(perCall);
}

/** Medians (ms) of several calls timed in alternating blocks after one shared settle. */
function interleavedMs(fns: readonly (() => void)[], rounds = 6, iterations = 8): number[] {
  const end = performance.now() + 150;
  while (performance.now() < end) {
    for (const fn of fns) fn();
    synchronize();
  }
  const samples = fns.map(() => [] as number[]);
  for (let r = 0; r < rounds; r++) {
    for (const [i, fn] of fns.entries()) samples[i]!.push(timeOnStream(fn, { iterations, warmup: 1 }).median);
  }
  return samples.map((s) => median(s));
}

/** The backward problem of (x, x, x) causal with the cudnn forward's output and log-sum-exp. */
function backwardProblem(q: Tensor, kv: Tensor, dO: Tensor): BackwardProblem {
  const f = attention(q, kv, kv, { isCausal: true, implementation: 'cudnn', returnLogSumExp: true });
  return validateBackward(q, kv, kv, f.output, f.logSumExp as Tensor, dO, { isCausal: true });
}

const dispose = (r: BackwardOutput) => {
  for (const t of [r.dQuery, r.dKey, r.dValue, r.dBias]) t?.dispose();
};
const wrapped = withGradientNanRepair(cudnnBackward);
const bareRun = (p: BackwardProblem) => cudnnBackward.run(null, p);
const wrappedRun = (p: BackwardProblem) => runPlanned(wrapped, null, p);

if (parts.has('small')) {
  const [B, T, N, H] = [4, 128, 8, 64];
  const [q, kv, dO] = [0, 1, 2].map((s) => seededInput([B, T, N, H], s, 'bfloat16').to('cuda'));
  const p = backwardProblem(q, kv, dO);
  const bare = wallPerCall(() => dispose(bareRun(p)));
  const withRepair = wallPerCall(() => dispose(wrappedRun(p)));
  record('small', 'cudnn backward causal B=4 T=128 N=8 H=64: bare', bare, 'us/call');
  record('small', 'cudnn backward causal: with the repair', withRepair, 'us/call');
  record('small', "the repair's share", withRepair - bare, 'us/call');
}

if (parts.has('big')) {
  const [B, T, N, H] = [4, 8192, 16, 128];
  const x = seededInput([B, T, N, H], 1, 'bfloat16').to('cuda');
  const p = backwardProblem(x, x, x);
  const grads = bareRun(p);
  const [bare, withRepair, repair] = interleavedMs([
    () => dispose(bareRun(p)),
    () => dispose(wrappedRun(p)),
    () => repairGradients(p, grads),
  ]);
  const flops = (2.5 * 4 * B * N * T * T * H) / 2;
  record('big', 'cudnn backward causal B=4 T=8192 N=16 H=128: bare', bare, 'ms');
  record('big', 'cudnn backward causal: with the repair', withRepair, 'ms');
  record('big', 'cudnn backward causal: TFLOP/s bare', flops / (bare * 1e9), 'TFLOP/s');
  record('big', 'cudnn backward causal: TFLOP/s with the repair', flops / (withRepair * 1e9), 'TFLOP/s');
  record('big', 'repair kernel alone (NaN-free dQ, dK, dV: 384 MiB)', repair * 1000, 'us');
  record('big', "repair's share of the causal call", repair / bare, 'fraction');
  dispose(grads);
}

if (parts.has('poisoned')) {
  const [B, T, N, H] = [2, 2048, 16, 128];
  const values = seededInput([B, T, N, H], 3, 'bfloat16');
  const host = values.toFloat64Array();
  host[((0 * T + 1000) * N + 3) * H + 5] = Number.NaN;
  const q = Tensor.fromArray(host, [B, T, N, H], 'bfloat16').to('cuda');
  const [kv, dO] = [4, 5].map((s) => seededInput([B, T, N, H], s, 'bfloat16').to('cuda'));
  const p = backwardProblem(q, kv, dO);
  const [bare, withRepair] = interleavedMs([() => dispose(bareRun(p)), () => dispose(wrappedRun(p))], 3, 2);
  record('poisoned', 'cudnn backward causal B=2 T=2048 N=16 H=128, one NaN in Q: bare', bare, 'ms');
  record('poisoned', 'with the repair (rows cuDNN made NaN recomputed)', withRepair, 'ms');
}

console.log('\npart      what                                                          value');
for (const r of rows)
  console.log(`${r.part.padEnd(9)} ${r.what.padEnd(62)} ${r.value.toPrecision(4)} ${r.unit}`);
