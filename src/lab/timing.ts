/**
 * The lab's measured sections, the codelab's 8 and 9a: timing at the default shape, the sequence and
 * batch sweeps, and the MHA/GQA/MQA shapes with the KV-cache bytes each needs per token (9b, the
 * decode step by KV heads, is decode.ts).
 */
import { attention } from '../api/attention.js';
import { memoryShortfall } from '../bench/fit.js';
import type { MeasureOptions } from '../bench/measure.js';
import { codelabSweeps } from '../bench/presets.js';
import { terminalProgress } from '../bench/progress.js';
import { runSweeps, type SweepGroup } from '../bench/run-bench.js';
import type { BenchCase } from '../bench/sweep.js';
import { chartsFor } from '../report/charts.js';
import { recordedGpuLab } from '../report/recorded.js';
import { renderChartText } from '../report/results-terminal.js';
import { CPU_FUSED_NOTE } from '../report/sweep-text.js';
import type { ResultRow } from '../results/schema.js';
import { itemSize } from '../tensor/dtype.js';
import { randomNormal } from '../tensor/random.js';
import { shapeText } from './compare.js';
import type { LabContext } from './context.js';

/**
 * Measures the groups, prints the rows, and returns them. cuDNN rows only where section 6 ran cuDNN.
 * `measure` overrides the lab's settings (e.g. the pass to time).
 */
export async function measureGroups(
  lab: LabContext,
  groups: SweepGroup[],
  title: string,
  measure: Partial<MeasureOptions> = {},
): Promise<ResultRow[]> {
  const kept = groups
    .map((g) => ({
      ...g,
      spec: { ...g.spec, impl: g.spec.impl.filter((i) => i !== 'cudnn' || lab.hasCudnn) },
    }))
    .filter((g) => g.spec.impl.length > 0);
  const run = await runSweeps(kept, {
    measure: { ...lab.measure(kept[0]?.name ?? 'lab'), ...measure },
    resolvedCeiling: lab.ceiling,
    skip: memoryShortfall,
    progress: terminalProgress(),
    // A stop signal ends the sweep after its running case (long CPU cases run in a worker, so it is heard).
    signal: lab.options.signal,
  });
  lab.timed(title, run.rows);
  return run.rows;
}

/** Each sweep's charts as text (the HTML report draws them as line charts). */
export function printCharts(lab: LabContext, rows: ResultRow[]): void {
  for (const chart of chartsFor([{ name: 'lab', results: { rows } }])) {
    if (chart.id.endsWith('-ms')) lab.say(renderChartText(chart, { color: lab.options.color }));
  }
}

/** 8a. Every implementation at the default shape, with a bar chart of median time. */
export async function defaultTiming(lab: LabContext): Promise<void> {
  const { B, T, N, H } = lab.sizes;
  lab.heading('8a. Time the variants at the default shape');
  const groups = codelabSweeps(lab.device, !lab.options.quick).filter((g) => g.name === 'default');
  // The webgpu backend beside the others where an adapter exists (Dawn's webgpu package in Node: any
  // GPU's Vulkan, Metal or D3D12 driver); elsewhere its row says "not available" and why.
  const last = groups[groups.length - 1];
  if (last) groups.push({ name: 'default', spec: { ...last.spec, impl: ['webgpu'] } });
  const rows = await measureGroups(lab, groups, `Attention timing — B=${B}, T=${T}, N=${N}, H=${H}`);
  const ok = rows.filter((r) => r.timing);
  lab.bars(
    'Attention latency (median ms per call)',
    ok.map((r) => ({ label: r.label, value: r.timing!.ms.median })),
    'ms',
  );
  if (lab.device === 'cuda') {
    lab.explain(
      'At this size every path is dominated by launch and dispatch overhead, not arithmetic: compare ' +
        'the "host ms" column (time to enqueue a call) with the device time.',
    );
  } else {
    const recorded = recordedGpuLab();
    const beside = recorded
      ? ` The report shows a recorded run of this lab on ${recorded.label} beside these numbers.`
      : '';
    lab.explain(`Why fused is not faster here: ${CPU_FUSED_NOTE}${beside}`);
  }
}

/** 8b and 8c. Sequence length 64…16384 (where memory allows) and batch 1…16 at T=256. */
export async function sweeps(lab: LabContext): Promise<void> {
  const { B, N, H, batchSeq } = lab.sizes;
  const all = codelabSweeps(lab.device, !lab.options.quick);
  lab.heading('8b. Sweep the sequence length');
  const seq = await measureGroups(
    lab,
    all.filter((g) => g.name === 'seq'),
    `Sequence-length sweep — B=${B}, N=${N}, H=${H}`,
  );
  printCharts(lab, seq);
  lab.heading('8c. Sweep the batch size');
  const batch = await measureGroups(
    lab,
    all.filter((g) => g.name === 'batch'),
    `Batch-size sweep — T=${batchSeq}, N=${N}, H=${H}`,
  );
  printCharts(lab, batch);
}

/**
 * 9a. MHA, GQA and MQA: the same output shape from 8, 2 and 1 KV heads, and what each saves in the KV
 * cache. Returns the timed (prefill) rows, which 9b sets beside the decode step.
 */
export async function headsSection(lab: LabContext): Promise<ResultRow[]> {
  lab.heading('9a. Compare MHA, GQA and MQA');
  const [B, T, N, H] = [2, 64, 8, 64];
  const q = randomNormal([B, T, N, H], { seed: 42, dtype: 'float32' }).to(lab.device);
  const patterns = [
    ['MHA', 8],
    ['GQA', 2],
    ['MQA', 1],
  ] as const;
  const rows = patterns.map(([name, K]) => {
    const k = randomNormal([B, T, K, H], { seed: 43 + K, dtype: 'float32' }).to(lab.device);
    const v = randomNormal([B, T, K, H], { seed: 53 + K, dtype: 'float32' }).to(lab.device);
    const out = attention(q, k, v).output;
    // K and V, each K heads × H values, per token and per layer.
    const perToken = (dtype: 'float32' | 'bfloat16') => 2 * K * H * itemSize(dtype);
    const kvBytes = `${perToken('float32')} / ${perToken('bfloat16')}`;
    const row = [name, ...[q, k, v, out].map((t) => shapeText(t.shape)), kvBytes];
    for (const t of [k, v, out]) t.dispose();
    return row;
  });
  q.dispose();
  lab.table(
    'Multi-head attention variants — all produce the same output shape',
    ['Pattern', 'Q shape', 'K shape', 'V shape', 'Output shape', 'KV B/token f32/bf16'],
    rows,
    'KV-cache bytes per token and layer = 2 (K and V) × K heads × H × bytes per value: GQA with K=2 ' +
      "keeps a quarter of MHA's cache, MQA an eighth, with nothing downstream of attention changed.",
  );
  const timedT = lab.sizes.headsSeq;
  const dtype = lab.device === 'cuda' ? 'bfloat16' : 'float32';
  const impl: BenchCase['impl'][] = lab.device === 'cuda' && lab.hasCudnn ? ['flash', 'cudnn'] : ['flash'];
  const spec = {
    batch: [lab.sizes.B],
    seq: [timedT],
    heads: [N],
    kvHeads: [8, 2, 1],
    headDim: [H],
    dtype: [dtype as 'float32' | 'bfloat16'],
    causal: [false],
    impl,
  };
  const timed = await measureGroups(
    lab,
    [{ name: 'heads', spec }],
    `Time by KV heads — B=${lab.sizes.B}, T=${timedT}, N=${N}, H=${H}`,
  );
  printCharts(lab, timed);
  return timed;
}
