/**
 * The part of `attnlab lab --help` that depends on the machine: which device the lab will run on
 * and the sizes each section will use there, read from the same table the lab runs
 * (codelabSizes), so the help cannot drift from what runs. Section numbers are the lab's headings
 * and docs/guide/cli.md's.
 */

import { cudaAvailable, getCudaContext } from '../backends/cuda/runtime/context.js';
import { codelabSeries, codelabSizes } from '../bench/presets.js';
import { formatBytes } from '../errors.js';

function shapeOf(shape: { B: number; T: number; N: number; H: number } | null): string {
  return shape ? `B=${shape.B}, T=${shape.T}, N=${shape.N}, H=${shape.H}` : '—';
}

/** 16, 32, …, 256 for a doubling list; the list itself when short. */
function range(values: readonly number[]): string {
  if (values.length <= 3) return values.join(', ');
  return `${values[0]}, ${values[1]}, …, ${values[values.length - 1]}`;
}

export function labSizesHelp(): string {
  const cuda = cudaAvailable();
  const device = cuda.ok ? 'cuda' : 'cpu';
  const full = codelabSizes(device, true);
  const quick = codelabSizes(device, false);
  const { B, T, N, H } = full;
  const series = codelabSeries(device)
    .map((s) => `${s.impl.join(', ')} in ${s.dtype}`)
    .join('; ');
  let where: string;
  if (cuda.ok) {
    const p = getCudaContext().properties;
    where = `On this machine (${p.name}, ${formatBytes(p.totalMemoryBytes)}, sm ${p.computeCapability.major}.${p.computeCapability.minor}) the lab runs on the GPU:`;
  } else {
    where =
      `On this machine (no CUDA GPU: ${cuda.reason.split(';')[0]}) the lab runs the CPU backends —\n` +
      "'reference' plays the naive implementation, 'flash' the fused one — at small sizes:";
  }
  const fp8 =
    device === 'cuda'
      ? `FP8 vs bf16 at T=${full.fp8Seq} (T=${quick.fp8Seq} with --quick) and at ${shapeOf(full.fp8Large)} on sm_90 or newer`
      : 'FP8 needs an sm_90 GPU (the section says so)';
  const lines = [
    where,
    '  2      GPU check: the device, its memory and libraries',
    `  3-7    Q, K, V of (B, T, N, H) = (${B}, ${T}, ${N}, ${H}), float32; naive, fused, cuDNN (bf16), causal`,
    `  8a     timing at B=${B}, T=${T}, N=${N}, H=${H}: ${series}`,
    `  8b     sequence sweep T = ${range(full.seq)} (to ${quick.seq.at(-1)} with --quick), B=${B}`,
    `  8c     batch sweep B = ${range(full.batch)} (to ${quick.batch.at(-1)} with --quick) at T=${full.batchSeq}`,
    `  9a     MHA, GQA, MQA (K = 8, 2, 1 of N=8, H=64); timed at B=${B}, T=${full.headsSeq}`,
    `  9b     decode step for K = 8, 2, 1 at B=${full.decode.B}, S=${full.decode.S}, N=${full.decode.N}, H=${full.decode.H}: ms, cache bytes, GB/s`,
    `  10a    TE-style module, bf16 causal, over T = ${range(full.teSeq)}`,
    `  10b    ${fp8}`,
    `  11     forward and backward per backend at T=${T} and T=${full.backwardSeq} (T=${quick.backwardSeq} with --quick), B=${B}`,
    ...(device === 'cuda'
      ? ['Sizes whose naive (B,N,T,S) scores cannot fit in free memory are skipped, each saying so.']
      : []),
    '',
    'Writes attnlab-out/lab-<date>-<time>/lab.json and lab.html (the report with charts) unless',
    '--out names another folder or --no-report is given; the last lines name the files.',
    '',
    'Example:',
    '  attnlab lab --quick --out attnlab-out/mine',
  ];
  return lines.join('\n');
}
