/**
 * The flash backend's variants against what they replace, device time (CUDA events, median of 5
 * after a warm-up) and the backward's peak memory above its inputs:
 *
 *   dense   the fused flash backward with a dense bias (1,N,T,S) bf16 (dBias) and with a boolean mask
 *           (B,1,T,S), against naive's (the (B,N,T,S) scores, P, dP, dS materialised). Naive runs at
 *           the largest T of T, T/2, T/4 that fits; flash runs there too, so the ratio is at one T.
 *   masks, scores   forward and backward with modifiers on the mma.sync kernels: a document mask of 8 packed
 *           documents per sequence (+ its block mask) against dense causal, ALiBi (causal as a mask
 *           modifier) and soft-capping against the plain kernels (causal / not), and causal written
 *           as a mask modifier; every mask modifier with its block mask (128×128).
 *
 *   node --import tsx benchmarks/harnesses/variants-backward.ts dense|masks|scores [B T N H]   (default 4 8192 16 128)
 *
 * Prints one JSON line per measurement and a summary table. The modifier sets are the hand-written
 * ones of test/support/modifier-cases.ts (the generator's shape). Bias and mask values are
 * constant fills on the device (values do not change the kernels' work; a 1 G-element host fill
 * would take longer than the run).
 */
import { attentionVjp } from '../../src/api/backward.js';
import { validateAttention } from '../../src/api/validate.js';
import { validateBackward } from '../../src/api/validate-backward.js';
import { planFor } from '../../src/backends/backend.js';
import type { BackwardProblem } from '../../src/backends/backward-problem.js';
import { cudaFlashBackend } from '../../src/backends/cuda/flash/backend.js';
import { cudaFlashBackward } from '../../src/backends/cuda/flash/sm80/backward.js';
import { synchronize } from '../../src/backends/cuda/runtime/context.js';
import {
  allocDevice,
  fillDevice32,
  memoryStats,
  resetPeakMemory,
} from '../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions, AttentionProblem } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import { reloadConfig } from '../../src/config.js';
import { Tensor } from '../../src/tensor/tensor.js';
import type { BlockMask } from '../../src/variants/types.js';
import {
  alibiCase,
  blockKinds,
  blockMaskFrom,
  causalCase,
  compiledModifiers,
  documentCase,
  type ModifierCase,
  softcapCase,
} from '../../test/support/modifier-cases.js';

const args = process.argv.slice(2);
const part = args[0] ?? 'dense';
const [B, T, N, H] = args.length >= 5 ? args.slice(1, 5).map(Number) : [4, 8192, 16, 128];
const ITERATIONS = 5;
const rows: Array<Record<string, unknown>> = [];

function report(row: Record<string, unknown>): void {
  rows.push(row);
  console.log(JSON.stringify(row));
}

const inputs = (t: number) => {
  const shape = [B, t, N, H] as const;
  return [0, 1, 2, 3].map((i) => seededInput(shape, 31 + i, 'bfloat16').to('cuda'));
};
const dispose = (...ts: Array<Tensor | undefined>) => {
  for (const t of ts) t?.dispose();
};

/** A device tensor filled with one 32-bit word. */
function filled(shape: number[], dtype: 'bfloat16' | 'bool', word: number): Tensor {
  const bytes = shape.reduce((a, b) => a * b, 1) * (dtype === 'bool' ? 1 : 2);
  const buffer = allocDevice(bytes);
  fillDevice32(buffer, word, Math.ceil(bytes / 4));
  return Tensor.fromDeviceBuffer(buffer, shape, dtype);
}

/** Median device ms of one backward, and its peak memory above what was allocated before it. */
function measureBackward(run: () => Array<Tensor | undefined>): { ms: number; peakBytes: number } {
  synchronize();
  resetPeakMemory();
  const before = memoryStats().currentBytes;
  dispose(...run());
  synchronize();
  const peakBytes = memoryStats().peakBytes - before;
  const { median } = timeOnStream(() => dispose(...run()), { iterations: ITERATIONS, warmup: 1 });
  return { ms: median, peakBytes };
}

function backwardOf(impl: 'flash' | 'naive', t: number, options: AttentionOptions) {
  const [q, k, v, dO] = inputs(t);
  try {
    const f = attentionVjp(q, k, v, { ...options, implementation: impl });
    const first = f.backward(dO);
    const variant = first.variant;
    dispose(first.dQuery, first.dKey, first.dValue, first.dBias);
    const m = measureBackward(() => {
      const g = f.backward(dO);
      return [g.dQuery, g.dKey, g.dValue, g.dBias];
    });
    dispose(f.output, f.logSumExp);
    return { ...m, variant };
  } finally {
    dispose(q, k, v, dO);
  }
}

function dense(): void {
  const cases: Array<[string, (t: number) => AttentionOptions]> = [
    ['bias (1,N,T,S) bf16', (t) => ({ bias: filled([1, N, t, t], 'bfloat16', 0x3c003c00) })],
    // 0x01000101: three of every four keys kept.
    ['mask (B,1,T,S) bool', (t) => ({ mask: filled([B, 1, t, t], 'bool', 0x01000101) })],
  ];
  for (const [name, make] of cases) {
    const options = make(T);
    const flash = backwardOf('flash', T, options);
    dispose(options.bias, options.mask);
    report({ case: name, impl: 'flash', B, T, N, H, ...flash });
    for (const t of [T, T / 2, T / 4]) {
      const o = make(t);
      try {
        const naive = backwardOf('naive', t, o);
        report({ case: name, impl: 'naive', B, T: t, N, H, ...naive });
        const same = t === T ? flash : backwardOf('flash', t, o);
        if (t !== T) report({ case: name, impl: 'flash', B, T: t, N, H, ...same });
        report({
          case: name,
          T: t,
          speedup: Number((naive.ms / same.ms).toFixed(2)),
          peakRatio: Number((naive.peakBytes / same.peakBytes).toFixed(1)),
        });
        break;
      } catch (error) {
        report({ case: name, impl: 'naive', T: t, failed: String((error as Error).message).slice(0, 160) });
      } finally {
        dispose(o.bias, o.mask);
      }
    }
  }
}

interface Timed {
  forwardMs: number;
  backwardMs: number;
  variant: string;
}

/** Forward and backward of the flash backend on a problem carrying a modifier set (and block mask). */
function modified(m: ModifierCase, blocks: boolean): Timed {
  const shape = { B, T, S: T, N };
  const captures = m.captures.map((c) => ({ ...c, tensor: c.tensor.to('cuda') }));
  const modifiers = compiledModifiers(m, captures);
  let kinds: Tensor | null = null;
  let blockMask: BlockMask | undefined;
  if (blocks && m.mask) {
    const host = blockKinds(m.mask, shape, false);
    const dims = [host.Bm, host.Nm, Math.ceil(T / host.blockQ), Math.ceil(T / host.blockKV)];
    kinds = Tensor.fromRaw(host.kinds, dims, 'bool').to('cuda');
    blockMask = blockMaskFrom(host, shape, kinds, m.key);
  }
  const [q, k, v, dO] = inputs(T);
  try {
    const p = {
      ...validateAttention(q, k, v, { returnLogSumExp: true }),
      modifiers,
      blockMask,
    } as AttentionProblem;
    // Each call plans and runs, as attention() does.
    const forward = () => {
      const plan = planFor(cudaFlashBackend, p);
      if (!plan.ok) throw new Error(plan.reason);
      return cudaFlashBackend.run(plan.plan, p);
    };
    const out = forward();
    const fwd = timeOnStream(
      () => {
        const o = forward();
        dispose(o.output, o.logSumExp);
      },
      { iterations: ITERATIONS, warmup: 1 },
    );
    const pb = {
      ...validateBackward(q, k, v, out.output, out.logSumExp as Tensor, dO, {}),
      modifiers,
      blockMask,
    } as BackwardProblem;
    const bwd = timeOnStream(
      () => {
        const plan = planFor(cudaFlashBackward, pb);
        if (!plan.ok) throw new Error(plan.reason);
        const g = cudaFlashBackward.run(plan.plan, pb);
        dispose(g.dQuery, g.dKey, g.dValue, ...Object.values(g.dCaptures ?? {}));
      },
      { iterations: ITERATIONS, warmup: 1 },
    );
    dispose(out.output, out.logSumExp);
    return { forwardMs: fwd.median, backwardMs: bwd.median, variant: out.variant };
  } finally {
    dispose(q, k, v, dO, ...captures.map((c) => c.tensor));
    kinds?.dispose();
  }
}

/** Forward and backward of the plain flash kernels (causal or not), through the public API. */
function plain(causal: boolean): Timed {
  const [q, k, v, dO] = inputs(T);
  try {
    const options: AttentionOptions = { implementation: 'flash', isCausal: causal };
    const f = attentionVjp(q, k, v, options);
    const fwd = timeOnStream(
      () => {
        const r = attentionVjp(q, k, v, options);
        dispose(r.output, r.logSumExp);
      },
      { iterations: ITERATIONS, warmup: 1 },
    );
    const bwd = timeOnStream(
      () => {
        const g = f.backward(dO);
        dispose(g.dQuery, g.dKey, g.dValue);
      },
      { iterations: ITERATIONS, warmup: 1 },
    );
    dispose(f.output, f.logSumExp);
    return { forwardMs: fwd.median, backwardMs: bwd.median, variant: f.variant };
  } finally {
    dispose(q, k, v, dO);
  }
}

/** `masks`: document mask and causal-as-maskMod against causal; `scores`: ALiBi and softcap against plain. */
function mods(which: 'masks' | 'scores'): void {
  const shape = { B, T, S: T, N };
  // Both kernels on mma.sync, as the modifiers run: the ratios compare like with like.
  process.env.ATTNLAB_FLASH_KERNEL = 'mma';
  process.env.ATTNLAB_FLASH_BWD_KERNEL = 'mma';
  reloadConfig();
  const ratio = (a: Timed, b: Timed) => ({
    forward: Number((b.forwardMs / a.forwardMs).toFixed(2)),
    backward: Number((b.backwardMs / a.backwardMs).toFixed(2)),
  });
  const causal = plain(true);
  report({ case: 'plain causal (mma.sync)', ...causal });
  if (which === 'masks') {
    const doc = modified(documentCase(shape, 8, 5, true), true);
    report({ case: 'document mask, 8 docs + block mask', ...doc, speedOverCausal: ratio(doc, causal) });
    const asMask = modified(causalCase(), true);
    report({ case: 'causal as maskMod + block mask', ...asMask, speedOverBuiltIn: ratio(asMask, causal) });
    return;
  }
  const full = plain(false);
  report({ case: 'plain (mma.sync)', ...full });
  const alibi = modified(alibiCase(shape), true);
  report({
    case: 'ALiBi (causal maskMod + block mask)',
    ...alibi,
    speedOverPlainCausal: ratio(alibi, causal),
  });
  const cap = modified(softcapCase(30), false);
  report({ case: 'softcap 30', ...cap, speedOverPlain: ratio(cap, full) });
}

console.log(`# variants-backward ${part} B=${B} T=${T} N=${N} H=${H}`);
if (part === 'dense') dense();
else if (part === 'masks' || part === 'scores') mods(part);
else throw new Error(`part: dense, masks or scores, got ${part}`);
console.table(rows);
