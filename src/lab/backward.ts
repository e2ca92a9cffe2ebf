/**
 * 11. Beyond the codelab: the forward and the backward pass of every backend, at the codelab's
 * default shape and at a long sequence. The backward row times `attentionVjp(…).backward(dO)` alone,
 * its residuals made before the timed calls (as jax.vjp's pullback); its flops count 2.5× the
 * forward's. A backend without a backward for the case gets an 'unsupported'
 * row with the reason, not a silent gap.
 */

import type { Implementation } from '../backends/problem.js';
import type { SweepGroup } from '../bench/run-bench.js';
import type { Pass, ResultRow } from '../results/schema.js';
import type { FloatDType } from '../tensor/dtype.js';
import type { LabContext } from './context.js';
import { measureGroups, printCharts } from './timing.js';

/** What the section times on each device: cuDNN takes bf16 (added only where section 6 ran it). */
function series(lab: LabContext): { dtype: FloatDType; impl: Implementation[] } {
  return lab.device === 'cuda'
    ? { dtype: 'bfloat16', impl: ['naive', 'flash', 'cudnn'] }
    : { dtype: 'float32', impl: ['reference', 'flash'] };
}

/** The sweep name of one shape's rows: one chart (forward and backward bars) per shape. */
export function backwardSweep(T: number): string {
  return `fwd-bwd T=${T}`;
}

export async function backwardSection(lab: LabContext): Promise<void> {
  lab.heading('11. Beyond the codelab: forward and backward per backend');
  const { B, N, H } = lab.sizes;
  const { dtype, impl } = series(lab);
  for (const T of [lab.sizes.T, lab.sizes.backwardSeq]) {
    const group: SweepGroup = {
      name: backwardSweep(T),
      spec: { batch: [B], seq: [T], heads: [N], headDim: [H], dtype: [dtype], causal: [false], impl },
    };
    const rows: ResultRow[] = [];
    for (const pass of ['forward', 'backward'] as Pass[]) {
      rows.push(
        ...(await measureGroups(lab, [group], `${pass} — B=${B}, T=S=${T}, N=${N}, H=${H}, ${dtype}`, {
          pass,
          // The float64 reference backward costs ~0.3 s a call on the CPU at T=256: a short warm-up.
          ...(lab.device === 'cpu' ? { warmup: 1 } : {}),
        })),
      );
    }
    printCharts(lab, rows);
    const ratios = impl
      .map((name) => {
        const ms = (pass: Pass) =>
          rows.find((r) => r.impl === name && (r.pass ?? 'forward') === pass && r.status === 'ok')?.timing?.ms
            .median;
        const [f, b] = [ms('forward'), ms('backward')];
        return f && b ? `${name} ${(b / f).toFixed(2)}×` : null;
      })
      .filter((x) => x !== null);
    if (ratios.length > 0) {
      lab.explain(
        `Backward / forward time at T=${T}: ${ratios.join(', ')} (2.5× the flops; FlashAttention's ` +
          'backward typically runs at ~0.85× its forward TFLOP/s, so ~3× the time).',
      );
    }
  }
}
