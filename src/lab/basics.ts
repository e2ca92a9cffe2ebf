/**
 * The lab's first sections, the codelab's 2–7: the device, the Q/K/V inputs, attention from
 * scratch, the fused kernel against it, cuDNN forced, and what the causal mask changes.
 */

import { attention } from '../api/attention.js';
import { BACKENDS } from '../backends/registry.js';
import { describeMachine } from '../bench/machine.js';
import { formatBytes } from '../errors.js';
import { randomNormal } from '../tensor/random.js';
import type { Tensor } from '../tensor/tensor.js';
import { allClose, maxAbsDiff, maxAbsDiffAtPosition, sci, shapeText } from './compare.js';
import type { LabContext } from './context.js';

/** The float32 inputs every basic section uses, on the lab's device and as host copies. */
export interface LabInputs {
  readonly host: readonly [Tensor, Tensor, Tensor];
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
}

/** 2. Which device the lab runs on, with versions; on a CPU-only machine, says what runs instead. */
export function gpuCheck(lab: LabContext, cudaReason: string | null): void {
  lab.heading('2. GPU check');
  const machine = describeMachine();
  const backends = BACKENDS.filter((b) => b.device === lab.device)
    .map((b) => b.name)
    .join(', ');
  if (machine.gpu) {
    const g = machine.gpu;
    lab.table(
      'Device',
      ['', 'Value'],
      [
        ['GPU', g.name],
        ['Compute capability', g.computeCapability],
        ['Memory', formatBytes(g.memoryBytes)],
        ['L2 cache', g.l2Bytes ? formatBytes(g.l2Bytes) : 'unknown'],
        ['Driver', g.driver ?? 'unknown'],
        ...Object.entries(machine.libraries).map(([k, v]) => [k, v]),
        ['attnlab backends on cuda', backends],
      ],
    );
    return;
  }
  lab.table(
    'Device',
    ['', 'Value'],
    [
      // The first clause names what is missing; the rest lists every path searched.
      ['GPU', `none: ${(cudaReason ?? 'CUDA is not available').split(';')[0]}`],
      ['CPU', machine.cpu],
      ['attnlab backends on cpu', backends],
    ],
  );
  lab.note(
    'No CUDA GPU here: the lab runs attnlab\'s CPU backends — "reference" (float64) as the attention ' +
      `from scratch and "flash" (tiled online softmax) as the fused one — at small sizes (B=${lab.sizes.B}, ` +
      `T=${lab.sizes.T}, N=${lab.sizes.N}, H=${lab.sizes.H}) that finish in seconds.`,
  );
}

/** 3. Q, K and V in the (B, T, N, H) layout jax.nn.dot_product_attention expects. */
export function createInputs(lab: LabContext): LabInputs {
  lab.heading('3. Create the test arrays Q, K and V');
  const { B, T, N, H } = lab.sizes;
  const host = [1, 2, 3].map((seed) => randomNormal([B, T, N, H], { seed, dtype: 'float32' })) as [
    Tensor,
    Tensor,
    Tensor,
  ];
  const [q, k, v] = host.map((t) => t.to(lab.device));
  lab.table(
    `Attention inputs on ${lab.device}`,
    ['Array', 'Shape', 'Dtype', 'Layout'],
    [
      ['Q (query)', shapeText(q.shape), q.dtype, '(B, T, N, H)'],
      ['K (key)', shapeText(k.shape), k.dtype, '(B, S, N, H)'],
      ['V (value)', shapeText(v.shape), v.dtype, '(B, S, N, H)'],
    ],
  );
  return { host, q, k, v };
}

/** 4. Attention from scratch: the naive backend (two matmuls and a softmax, the T×S matrix in memory). */
export function naiveSection(lab: LabContext, x: LabInputs): Tensor {
  lab.heading('4. Attention from scratch');
  const result = attention(x.q, x.k, x.v, { implementation: lab.naiveImpl });
  lab.table(
    'Naive attention',
    ['', 'Value'],
    [
      ['Output shape', shapeText(result.output.shape)],
      ['Output dtype', result.output.dtype],
      ['Backend (variant)', `${result.backend} (${result.variant})`],
    ],
  );
  return result.output;
}

/** 5. The kernel attention() picks by itself for the float32 inputs, against the naive output. */
export function fusedSection(lab: LabContext, x: LabInputs, naive: Tensor): void {
  lab.heading('5. Switch to the fused dotProductAttention');
  const fused = attention(x.q, x.k, x.v);
  lab.table(
    'Fused (implementation chosen by attnlab) vs naive',
    ['', 'Value'],
    [
      ['Backend chosen', `${fused.backend} (${fused.variant})`],
      ['Output shape', shapeText(fused.output.shape)],
      ['Output dtype', fused.output.dtype],
      ['Max |naive − fused|', sci(maxAbsDiff(naive, fused.output))],
      // jnp.allclose's rtol default (1e-5) with the codelab's atol.
      ['Outputs close (atol=1e-3)', String(allClose(naive, fused.output, 1e-5, 1e-3))],
    ],
  );
  fused.output.dispose();
}

/** 6. cuDNN forced, in bfloat16; where it cannot run the reason is printed and the lab goes on. */
export function cudnnSection(lab: LabContext, x: LabInputs): void {
  lab.heading('6. Force the cuDNN fused backend');
  const [q, k, v] = x.host.map((t) => t.astype('bfloat16').to(lab.device));
  try {
    let cudnn: Tensor;
    try {
      cudnn = attention(q, k, v, { implementation: 'cudnn' }).output;
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      lab.table('cuDNN fused attention — not available here', ['', 'Value'], [['Reason', reason]]);
      lab.explain("Continuing with attnlab's own kernels only.");
      return;
    }
    lab.hasCudnn = true;
    // The codelab compares cuDNN with XLA in bf16; attnlab's other bf16 kernel is flash.
    const flash = attention(q, k, v, { implementation: 'flash' }).output;
    lab.table(
      'cuDNN fused attention',
      ['', 'Value'],
      [
        ['Output shape', shapeText(cudnn.shape)],
        ['Output dtype', cudnn.dtype],
        ['Max |cuDNN − flash| (both bf16)', sci(maxAbsDiff(cudnn, flash))],
        ['Outputs close (rtol=1e-2, atol=1e-2)', String(allClose(cudnn, flash, 1e-2, 1e-2))],
      ],
    );
    cudnn.dispose();
    flash.dispose();
  } finally {
    for (const t of [q, k, v]) if (t.device === 'cuda') t.dispose();
  }
}

/** 7. The causal mask: position 0 loses every key but itself; the last position sees all either way. */
export function causalSection(lab: LabContext, x: LabInputs): void {
  lab.heading('7. Add causal masking');
  const causal = attention(x.q, x.k, x.v, { isCausal: true });
  const full = attention(x.q, x.k, x.v, { isCausal: false }).output;
  const last = lab.sizes.T - 1;
  lab.table(
    `Causal masking effect on the attention output (${causal.backend}, ${x.q.dtype})`,
    ['Position', 'Max diff (causal vs full)', 'Expected'],
    [
      [
        'First (t=0)',
        maxAbsDiffAtPosition(causal.output, full, 0).toFixed(4),
        'Large — causal restricts to self only',
      ],
      [
        `Last (t=T-1=${last})`,
        sci(maxAbsDiffAtPosition(causal.output, full, last)),
        '~0 — attends to all positions either way',
      ],
    ],
  );
  causal.output.dispose();
  full.dispose();
}
