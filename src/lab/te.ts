/**
 * The codelab's section 10: the TransformerEngine-style module (src/te/) against attnlab's kernels
 * over sequence lengths, and the FP8 path.
 */
import { cudaAvailable, getCudaContext } from '../backends/cuda/runtime/context.js';
import { measureAttnlabCase } from '../bench/measure.js';
import type { BenchCase } from '../bench/sweep.js';
import { chartsFor } from '../report/charts.js';
import { renderChartText } from '../report/results-terminal.js';
import { wrapText } from '../report/terminal.js';
import type { ResultRow } from '../results/schema.js';
import { autocast } from '../te/autocast.js';
import { DotProductAttention } from '../te/module.js';
import { DelayedScaling } from '../te/recipe.js';
import { randomNormal } from '../tensor/random.js';
import type { Tensor } from '../tensor/tensor.js';
import { maxAbsDiff, sci, shapeText } from './compare.js';
import type { LabContext } from './context.js';

/** 10a. TE's DotProductAttention (bf16, causal, its default) against attnlab's fused kernels over T. */
export async function teSweep(lab: LabContext): Promise<void> {
  lab.heading('10a. The TransformerEngine-style module over sequence lengths');
  const { B, N, H } = lab.sizes;
  const seqs = lab.sizes.teSeq;
  const module = new DotProductAttention({
    headDim: H,
    numAttentionHeads: N,
    numGqaGroups: N,
    attnMaskType: 'causal',
  });
  const rows: ResultRow[] = [];
  for (const T of seqs) {
    const c: BenchCase = { B, T, S: T, N, K: N, H, dtype: 'bfloat16', causal: true, impl: 'flash' };
    const measure = lab.measure('te');
    rows.push(measureAttnlabCase(c, measure));
    if (lab.hasCudnn) rows.push(measureAttnlabCase({ ...c, impl: 'cudnn' }, measure));
    rows.push(
      measureAttnlabCase(c, {
        ...measure,
        impl: 'te',
        label: 'attnlab te bf16 causal',
        call: (q, k, v) => module.apply(q, k, v, { deterministic: true }),
      }),
    );
  }
  lab.timed(`TE-style module sweep — B=${B}, N=${N}, H=${H}, bf16, causal`, rows);
  for (const chart of chartsFor([{ name: 'lab', results: { rows } }])) {
    if (chart.id.endsWith('-ms')) lab.say(renderChartText(chart, { color: lab.options.color }));
  }
}

const AUTOCAST_SNIPPET = [
  'The FP8 path uses autocast, as TransformerEngine does:',
  '',
  "  const recipe = new DelayedScaling({ margin: 0, fp8Format: 'HYBRID', amaxHistoryLen: 1024, amaxComputeAlgo: 'max' });",
  '  const out = autocast({ enabled: true, recipe }, () => attn.forward(q, k, v, { deterministic: true }));',
];

/** 10b. FP8 under autocast on a Hopper-class GPU; elsewhere the codelab's message and the call site. */
export async function fp8Section(lab: LabContext): Promise<void> {
  lab.heading('10b. Inspect the FP8 path');
  const cuda = cudaAvailable();
  const properties = cuda.ok ? getCudaContext().properties : null;
  const gpuName = properties?.name ?? 'none (CPU only)';
  if (!properties || properties.computeCapability.major < 9) {
    lab.table(
      'FP8 attention — not available on this GPU',
      ['', 'Value'],
      [
        ['GPU', gpuName],
        ['FP8 support', 'No detected support; requires Hopper/Blackwell-class GPU'],
      ],
    );
    lab.say(AUTOCAST_SNIPPET.join('\n'));
    return;
  }
  const small = { ...lab.sizes, T: lab.sizes.fp8Seq };
  const shapes = lab.sizes.fp8Large ? [small, lab.sizes.fp8Large] : [small];
  const rows: ResultRow[] = [];
  for (const [i, shape] of shapes.entries()) rows.push(...(await timeFp8(lab, shape, gpuName, i === 0)));
  lab.timed('TE module bf16 vs FP8 autocast, causal', rows);
  lab.explain(fp8Verdict(rows));
}

interface Fp8Shape {
  readonly B: number;
  readonly T: number;
  readonly N: number;
  readonly H: number;
}

const recipe = () =>
  new DelayedScaling({ margin: 0, fp8Format: 'HYBRID', amaxHistoryLen: 1024, amaxComputeAlgo: 'max' });

/** The module in bf16 and under FP8 autocast at one shape; the first shape also prints what ran. */
async function timeFp8(
  lab: LabContext,
  shape: Fp8Shape,
  gpuName: string,
  describe: boolean,
): Promise<ResultRow[]> {
  const { B, T, N, H } = shape;
  const module = new DotProductAttention({ headDim: H, numAttentionHeads: N, attnMaskType: 'causal' });
  const fp8Recipe = recipe();
  const fp8Call = (a: Tensor, b: Tensor, c: Tensor) =>
    autocast({ enabled: true, recipe: fp8Recipe }, () => module.apply(a, b, c, { deterministic: true }));
  if (describe) {
    const [q, k, v] = [1, 2, 3].map((i) =>
      randomNormal([B, T, N, H], { seed: 9000 + i, dtype: 'bfloat16' }).to('cuda'),
    );
    const bf16 = module.apply(q, k, v, { deterministic: true });
    // Delayed scaling quantises with scales from earlier steps; the first step has none (scale 1).
    fp8Call(q, k, v).output.dispose();
    fp8Call(q, k, v).output.dispose();
    const fp8 = fp8Call(q, k, v);
    lab.table(
      'FP8 attention with the TE-style module',
      ['', 'Value'],
      [
        ['GPU', gpuName],
        ['Input dtype', q.dtype],
        ['bf16 output dtype', bf16.output.dtype],
        ['FP8 autocast output dtype', fp8.output.dtype],
        ['Output shape', shapeText(fp8.output.shape)],
        ['Precision / backend that ran', `${fp8.precision} / ${fp8.backend} (${fp8.variant})`],
        ['Max |TE bf16 − TE FP8 autocast|', sci(maxAbsDiff(bf16.output, fp8.output))],
      ],
    );
    for (const t of [q, k, v, bf16.output, fp8.output]) t.dispose();
  }
  const c: BenchCase = { B, T, S: T, N, K: N, H, dtype: 'bfloat16', causal: true, impl: 'cudnn' };
  const measure = lab.measure('fp8');
  return [
    measureAttnlabCase(c, {
      ...measure,
      impl: 'te',
      label: 'te bf16 causal',
      call: (a, b, d) => module.apply(a, b, d, { deterministic: true }),
    }),
    measureAttnlabCase(c, { ...measure, impl: 'te-fp8', label: 'te fp8 autocast causal', call: fp8Call }),
  ];
}

/**
 * What the FP8 rows say, from their medians. FP8 runs the two GEMMs faster but adds fixed work per
 * call: a quantise pass over Q, K and V, a dequantise pass over O and the delayed-scaling
 * bookkeeping (amax history, scales). Small shapes are bound by that fixed work — the host time per
 * call shows it — and large ones by the GEMMs.
 */
export function fp8Verdict(rows: readonly ResultRow[]): string {
  const lines: string[] = [];
  for (let i = 0; i + 1 < rows.length; i += 2) {
    const [bf16, fp8] = [rows[i]!, rows[i + 1]!];
    const shape = `B=${bf16.B} T=${bf16.T} N=${bf16.N} H=${bf16.H}`;
    const a = bf16.timing?.ms.median;
    const b = fp8.timing?.ms.median;
    if (a === undefined || b === undefined) {
      lines.push(`${shape}: no comparison (${fp8.reason ?? bf16.reason ?? 'a row has no timing'}).`);
      continue;
    }
    const ms = (x: number) => `${x.toPrecision(3)} ms`;
    const host = (r: ResultRow) => (r.timing?.hostMs ? ms(r.timing.hostMs.median) : 'not measured');
    lines.push(
      a >= b
        ? `${shape}: FP8 autocast ${(a / b).toFixed(2)}× as fast as bf16 (${ms(b)} vs ${ms(a)}): the GEMMs set the time and FP8 runs them faster.`
        : `${shape}: FP8 autocast takes ${(b / a).toFixed(2)}× the bf16 time (${ms(b)} vs ${ms(a)}): at this size the fixed work FP8 adds per call (quantise and dequantise passes, amax and scale bookkeeping; host time ${host(fp8)} vs ${host(bf16)} a call) outweighs its faster GEMMs.`,
    );
  }
  return wrapText(lines.join('\n'));
}
