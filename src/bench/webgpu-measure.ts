/**
 * `attnlab bench --impl webgpu`: one case on the webgpu backend, forward or (--pass) backward. WebGPU has no events a host can
 * wait on synchronously, so a call is timed by the wall clock from its submit to the queue's
 * onSubmittedWorkDone (method 'performance-now'), median of the timed calls after a warm-up; the
 * error against the float64 oracle is checked on the first call's output, read back with mapAsync.
 */
import { attention } from '../api/attention.js';
import { initWebgpu, webgpuFinish } from '../backends/webgpu/runtime.js';
import { UnsupportedError } from '../errors.js';
import type { ResultRow } from '../results/schema.js';
import type { Tensor } from '../tensor/tensor.js';
import { maxErrorAgainstOracle } from './accuracy.js';
import {
  attnlabLabel,
  DEFAULT_MEASURE,
  failure,
  finish,
  hostInputs,
  type MeasureOptions,
  seededInput,
  shapeOf,
} from './measure.js';
import { backwardCall, rowFlops } from './pass-call.js';
import { summarize } from './stats.js';
import type { BenchCase } from './sweep.js';

export async function measureWebgpuCase(
  c: BenchCase,
  options: Partial<MeasureOptions> = {},
): Promise<ResultRow> {
  const o = { ...DEFAULT_MEASURE, ...options };
  const base = {
    sweep: o.sweep,
    source: 'attnlab' as const,
    impl: o.impl ?? c.impl,
    label: o.label ?? attnlabLabel(c, o.pass),
    ...shapeOf(c),
    ...(o.pass !== 'forward' ? { pass: o.pass } : {}),
    flops: rowFlops({ ...c, pass: o.pass }),
  };
  const onDevice: Tensor[] = [];
  // A backward set is [q, k, v, dO], timed as for CUDA (pass-call.ts): residuals once, then backward(dO).
  const gradients = o.pass !== 'forward' ? backwardCall(c, o.pass) : null;
  try {
    if (c.blockSize)
      throw new UnsupportedError('bench', 'a paged cache on webgpu (time it with scripts/webgpu-timing.ts)');
    try {
      await initWebgpu();
    } catch (error) {
      throw new UnsupportedError(
        'webgpu',
        `not available: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
    const host = hostInputs(c, o.seed);
    const dO = gradients ? [seededInput([c.B, c.T, c.N, c.H], o.seed * 3 + 7, c.dtype)] : [];
    onDevice.push(...[...host, ...dO].map((t) => t.to('webgpu')));
    const call = () =>
      gradients
        ? gradients.call(onDevice)
        : attention(onDevice[0], onDevice[1], onDevice[2], { implementation: 'webgpu', isCausal: c.causal });
    const t0 = performance.now();
    const first = call();
    await webgpuFinish();
    const firstCallMs = performance.now() - t0;
    let maxError: number | null = null;
    let errorCheck: ResultRow['errorCheck'] = 'none';
    // The backward's error is the gradient suite's (test/unit/backends/webgpu/backward.test.ts).
    if (o.checkError && !gradients) {
      const raw = (t: Tensor) => ({ data: t.data, dtype: t.dtype });
      const [q, k, v] = host.map(raw);
      const check = maxErrorAgainstOracle(
        { ...c, scale: 1 / Math.sqrt(c.H) },
        q,
        k,
        v,
        raw(await first.output.toHostAsync()),
      );
      maxError = Number.isNaN(check.maxError) ? null : check.maxError;
      errorCheck = check.full ? 'full' : 'sampled';
    }
    first.output.dispose();
    const time = async () => {
      const s0 = performance.now();
      const { output } = call();
      await webgpuFinish();
      output.dispose();
      return performance.now() - s0;
    };
    const warm: number[] = [];
    for (let i = 0; i < o.warmup; i++) warm.push(await time());
    const perCall = warm.length > 0 ? Math.min(...warm) : firstCallMs;
    const repeats = Math.max(
      o.minRepeats,
      Math.min(o.repeats, Math.floor(o.budgetMs / Math.max(perCall, 1e-3))),
    );
    const samples: number[] = [];
    for (let i = 0; i < repeats; i++) samples.push(await time());
    return finish(
      base,
      c,
      o,
      { method: 'performance-now', ms: summarize(samples), firstCallMs, warmup: o.warmup, inputCopies: 1 },
      {
        peakMemoryBytes: null,
        maxError,
        errorCheck,
        variant: first.variant,
        ...(maxError === null && errorCheck !== 'none' ? { reason: 'the output holds NaN' } : {}),
      },
    );
  } catch (error) {
    return { ...base, ...failure(error, 'webgpu') };
  } finally {
    gradients?.dispose();
    for (const t of onDevice) t.dispose();
  }
}
