/**
 * The device time of calls with the host's time taken out: each sample enqueues a one-thread kernel that
 * keeps the stream busy (src/kernels/bench/gpu_spin.cu) and, behind it, `batch` calls between one event
 * pair; the calls' kernels then run back to back once the spin ends, whatever the host took to enqueue
 * them. Why: a decode step at B=1 reads 1–17 MB in 5–25 µs of GPU time, and the host's 15–40 µs per call
 * (benchmarks/results/h200/decode/2026-12-02-tma-kernel-every-k) decide the time of a call timed any other way, ours
 * and PyTorch's alike. What this measures is the kernels; what a caller waits is the larger of the two.
 *
 * A sample counts only if the host finished enqueuing before the spin ended (the spin's own event pair
 * says how long it ran); the spin grows until it does.
 */

import { loadKernels } from '../backends/cuda/runtime/compile.js';
import { launchKernel } from '../backends/cuda/runtime/launch.js';
import { AttnlabError, InvalidArgumentError } from '../errors.js';
import { CudaEventTimer } from './cuda-timer.js';
import { summarize } from './stats.js';

const SPIN = 'attnlab_gpu_spin';
/** 0.1 s: a batch whose host needs longer is not a host-hidden measurement anyone wants. */
const MAX_SPIN_US = 100_000;

/** Keeps attnlab's stream busy for `microseconds` of GPU time (one thread, the GPU's global timer). */
export function spinGpu(microseconds: number): void {
  const fn = loadKernels({ file: 'bench/gpu_spin.cu', kernels: [SPIN] }).functions.get(SPIN)!;
  const nanoseconds = BigInt(Math.ceil(microseconds * 1000));
  launchKernel(fn, { grid: [1, 1, 1], block: [1, 1, 1] }, [{ type: 'u64', value: nanoseconds }]);
}

export interface HiddenHostTiming {
  /** Median device ms of one call, from samples of `batch` calls run back to back behind a spin. */
  readonly deviceMs: number;
  /** Median host ms to enqueue one call (the same samples). */
  readonly hostMs: number;
}

/**
 * Times `call` (which only enqueues work on attnlab's stream and returns something to dispose) as the
 * header says: `samples` samples of `batch` calls, after `warmup` untimed calls.
 */
export function timeHostHidden(
  call: () => { dispose(): void },
  options: { samples: number; batch: number; warmup?: number },
): HiddenHostTiming {
  const { samples, batch, warmup = 20 } = options;
  for (const [name, value] of [
    ['samples', samples],
    ['batch', batch],
  ] as const)
    if (!Number.isInteger(value) || value < 1)
      throw new InvalidArgumentError(name, 'an integer ≥ 1', String(value));
  for (let i = 0; i < warmup; i++) call().dispose();
  const spin = new CudaEventTimer(1);
  const calls = new CudaEventTimer(1);
  let spinUs = 1000;
  let longest = 0;
  const device: number[] = [];
  const host: number[] = [];
  try {
    // A sample whose host outlasted its spin is dropped and the spin doubled, up to MAX_SPIN_US.
    for (let tries = 0; device.length < samples && tries < samples + 100 && spinUs <= MAX_SPIN_US; tries++) {
      const started = performance.now();
      longest = Math.max(longest, spinUs);
      spin.time(() => spinGpu(spinUs));
      calls.time(() => {
        for (let i = 0; i < batch; i++) call().dispose();
      });
      const hostMs = performance.now() - started;
      const [spinMs] = spin.read();
      const [callsMs] = calls.read();
      if (hostMs < spinMs) {
        device.push(callsMs / batch);
        host.push(hostMs / batch);
      } else spinUs *= 2;
    }
  } finally {
    spin.dispose();
    calls.dispose();
  }
  if (device.length < samples)
    throw new AttnlabError(
      `timeHostHidden: ${device.length} of ${samples} samples had their ${batch} calls enqueued within the spin (the longest ${longest} µs)`,
    );
  return { deviceMs: summarize(device).median, hostMs: summarize(host).median };
}
