/**
 * Plain words for the sweeps the lab and the codelab presets name: a chart's title and the "what
 * this shows" line under it. Sweep ids (`seq`, `fwd-bwd T=64`) stay in the results files, where
 * they group rows; a reader sees these instead.
 */

interface SweepText {
  readonly title: string;
  readonly shows: string;
}

const TEXT: Readonly<Record<string, SweepText>> = {
  default: {
    title: 'Every implementation at the default shape',
    shows:
      'Time per call of each implementation on one small problem. At this size fixed costs (launch, ' +
      'dispatch, memory allocation) weigh as much as arithmetic, so the gaps are smaller than in the sweeps.',
  },
  seq: {
    title: 'Sequence length sweep',
    shows:
      'Attention does ~4·B·N·T²·H flops: time grows with the square of T once fixed costs are paid. ' +
      'The naive path also writes the T×S score matrix to memory, so it falls behind the fused kernels as T grows.',
  },
  batch: {
    title: 'Batch size sweep',
    shows:
      'Work grows linearly with B. A GPU runs small batches for almost the same time (it is not yet full); ' +
      'throughput rises until the batch fills the device.',
  },
  heads: {
    title: 'MHA, GQA and MQA: time by KV heads',
    shows:
      'Prefill time barely moves with the number of KV heads K: the flops depend on the N query heads. ' +
      'What K changes is the KV-cache size (table above) and the decode step below.',
  },
  decode: {
    title: 'One decode step by KV heads',
    shows:
      'A decode step reads the whole KV cache once for one new token (~2 flops per byte), so where it is ' +
      'bound by memory its time follows the cache bytes: fewer KV heads, fewer bytes, a faster step.',
  },
  te: {
    title: 'TransformerEngine-style module against the fused kernels',
    shows:
      'The module adds its own checks and layout handling around the same kernels; the gap to the plain ' +
      'kernel is that overhead, which matters at small T and fades as T grows.',
  },
  fp8: {
    title: 'FP8 against bf16',
    shows:
      'FP8 halves the bytes of Q, K and V and doubles the tensor-core rate, but adds quantisation passes: ' +
      'it wins where the matrix products, not those passes, set the time.',
  },
};

/** What a throughput or bandwidth chart shows, whatever the sweep. */
const MEASURE_SHOWS: Readonly<Record<'tflops' | 'bandwidth', string>> = {
  tflops:
    'Throughput is the flops done per second (causal counts the visible half): a rising line means the ' +
    'device is used better as the problem grows; a flat one, that time grows exactly with the work.',
  bandwidth:
    'Bytes of the KV cache (and Q, O) read per second: how close a step comes to reading as fast as ' +
    "the memory allows (an H100's HBM3 peaks near 3.35 TB/s, an H200's HBM3e near 4.8 TB/s).",
};

/** What a chart shows: the sweep's text for time charts, the measure's for throughput and bandwidth. */
export function chartShows(chart: { readonly sweep: string; readonly measure?: string }): string {
  if (chart.measure === 'tflops' || chart.measure === 'bandwidth') return MEASURE_SHOWS[chart.measure];
  return sweepShows(chart.sweep);
}

/** A backward-section sweep id: `fwd-bwd T=64`. */
const FWD_BWD = /^fwd-bwd T=(\d+)$/;

/** The chart title for a sweep id: plain words, never the id itself when the id is known. */
export function sweepTitle(sweep: string): string {
  const known = TEXT[sweep];
  if (known) return known.title;
  const fb = FWD_BWD.exec(sweep);
  if (fb) return `Forward and backward pass at T=${fb[1]}`;
  return sweep;
}

/** What a chart of this sweep shows, in a sentence or two; '' for a sweep the lab does not know. */
export function sweepShows(sweep: string): string {
  const known = TEXT[sweep];
  if (known) return known.shows;
  if (FWD_BWD.test(sweep)) {
    return (
      'The backward pass does 2.5× the forward flops (five matrix products to two) and rereads the ' +
      'inputs, so it takes about 2–3× the forward time on every backend.'
    );
  }
  return '';
}

/**
 * The CPU's reason why fused is not faster there, shown beside its timings (the lab's section 8a,
 * the notebook's sweeps).
 */
export const CPU_FUSED_NOTE =
  'on the CPU, "reference" (from scratch) and "flash" (fused) do the same float64 arithmetic on one core, ' +
  'and at these sizes the T×S score matrix (64 KiB per head at T = 128) stays in the CPU caches, so not ' +
  'writing it saves little. On a GPU the fused kernel keeps its tiles in on-chip memory and runs the ' +
  'products on tensor cores, while the naive one writes the whole matrix to memory and reads it back.';
