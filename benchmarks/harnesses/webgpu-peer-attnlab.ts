/**
 * attnlab's side of the peer harnesses (webgpu-peer-ort.ts, webgpu-peer-jaxjs.ts): the webgpu
 * forward on the peer's inputs, its output (the peer's is compared with it), its time with the
 * inputs resident on the device and with the copies a peer's call makes (inputs uploaded, output
 * read back), each the median of `reps` after a warm-up.
 */
import { attention } from '../../src/api/attention.js';
import { webgpuContext } from '../../src/backends/webgpu/runtime.js';
import type { Tensor } from '../../src/tensor/tensor.js';

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** The largest |a[i] − b[i]| (NaN where either is NaN and the other is not). */
export function maxDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < b.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

export async function attnlabBeside(
  host: readonly Tensor[],
  causal: boolean,
  reps: number,
): Promise<{ variant: string; output: Float64Array; ms: number; msWithCopies: number }> {
  const { device } = webgpuContext();
  const [q, k, v] = host.map((t) => t.to('webgpu'));
  const first = attention(q, k, v, { isCausal: causal, implementation: 'webgpu' });
  const output = await first.output.toFloat64ArrayAsync();
  first.output.dispose();
  const resident: number[] = [];
  for (let r = 0; r <= reps; r++) {
    const start = performance.now();
    const out = attention(q, k, v, { isCausal: causal, implementation: 'webgpu' });
    await device.queue.onSubmittedWorkDone();
    if (r > 0) resident.push(performance.now() - start);
    out.output.dispose();
  }
  for (const t of [q, k, v]) t.dispose();
  const copies: number[] = [];
  for (let r = 0; r < reps; r++) {
    const start = performance.now();
    const [cq, ck, cv] = host.map((t) => t.to('webgpu'));
    const out = attention(cq, ck, cv, { isCausal: causal, implementation: 'webgpu' });
    await out.output.toFloat64ArrayAsync();
    copies.push(performance.now() - start);
    for (const t of [cq, ck, cv, out.output]) t.dispose();
  }
  return { variant: first.variant, output, ms: median(resident), msWithCopies: median(copies) };
}
