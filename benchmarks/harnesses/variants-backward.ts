/**
 * The flash backend's variants against what they replace, device time (CUDA events, median of 5
 * after a warm-up) and the backward's peak memory above its inputs. Every call goes through the public
 * API (attentionVjp with implementation 'flash', modifiers from src/variants/library.ts, block masks from
 * createBlockMask), so the loops are the ones a user gets: on sm_90a the wgmma backward (the variant
 * column says which ran).
 *
 *   dense   the fused flash backward with a dense bias (1,N,T,S) bf16 (dBias) and with a boolean mask
 *           (B,1,T,S), against naive's (the (B,N,T,S) scores, P, dP, dS materialised) and against the
 *           ceiling: the unmasked flash backward at the same shape plus a bare read of B·N·T·S mask bytes
 *           at ATTNLAB_READ_GBPS (GB/s, the plain-load rate of benchmarks/harnesses/hbm-read-ceiling.cu
 *           on the same GPU; without it the ceiling row gives the bytes only). Naive runs at the largest T
 *           of T, T/2, T/4 that fits; flash runs there too, so the ratio is at one T.
 *   masks   8 equal packed documents per sequence (documentMask ∧ causal, + its block mask) and causal
 *           written as a mask expression ('kv <= q', + its block mask) against the built-in causal mask.
 *   scores  ALiBi (alibi(N), causal as a mask expression + block mask) against the built-in causal mask,
 *           soft-capping 30 against the plain kernel, with and without causal.
 *
 *   node --import tsx benchmarks/harnesses/variants-backward.ts dense|masks|scores [B T N H]   (default 4 8192 16 128)
 *
 * The masks and scores cases are those of benchmarks/harnesses/flex-attention-backward.py (PyTorch's
 * flex_attention on the same GPU). Prints one JSON line per measurement and a summary table. Bias and
 * mask values are constant fills on the device (values do not change the kernels' work; a 1 G-element
 * host fill would take longer than the run).
 */
import { attentionBackward, attentionVjp } from '../../src/api/backward.js';
import { createBlockMask } from '../../src/api/block-mask.js';
import { synchronize } from '../../src/backends/cuda/runtime/context.js';
import {
  allocDevice,
  fillDevice32,
  memoryStats,
  resetPeakMemory,
} from '../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { alibi, alibiSlopes, and, documentMask, softcap } from '../../src/variants/library.js';
import { type MaskMod, maskMod } from '../../src/variants/modifiers.js';

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
  const cases: Array<[string, (t: number) => AttentionOptions, number]> = [
    ['bias (1,N,T,S) bf16', (t) => ({ bias: filled([1, N, t, t], 'bfloat16', 0x3c003c00) }), 2],
    // 0x01000101: three of every four keys kept.
    ['mask (B,1,T,S) bool', (t) => ({ mask: filled([B, 1, t, t], 'bool', 0x01000101) }), 1],
  ];
  // The ceiling's first term: the unmasked flash backward at the same shape.
  const plain = backwardOf('flash', T, {});
  report({ case: 'unmasked', impl: 'flash', B, T, N, H, ...plain });
  const readGBps = Number(process.env.ATTNLAB_READ_GBPS ?? 0);
  for (const [name, make, bytesPerScore] of cases) {
    const options = make(T);
    const flash = backwardOf('flash', T, options);
    dispose(options.bias, options.mask);
    report({ case: name, impl: 'flash', B, T, N, H, ...flash });
    // The masked backward can do no better than the unmasked one plus reading its operand once per
    // (b, n, t, s) pair.
    const operandBytes = B * N * T * T * bytesPerScore;
    const readMs = readGBps > 0 ? operandBytes / (readGBps * 1e6) : null;
    report({
      case: name,
      ceiling: 'unmasked backward + a bare read of B·N·T·S operand elements',
      unmaskedMs: plain.ms,
      operandBytes,
      readGBps: readGBps || null,
      ...(readMs !== null
        ? {
            ceilingMs: Number((plain.ms + readMs).toFixed(3)),
            ofCeiling: Number(((plain.ms + readMs) / flash.ms).toFixed(3)),
          }
        : {}),
    });
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
  forwardVariant: string;
  backwardVariant: string;
}

/** Forward and backward of the flash backend through attentionVjp, device ms each. */
function timed(options: AttentionOptions): Timed {
  const [q, k, v, dO] = inputs(T);
  try {
    const all: AttentionOptions = { ...options, implementation: 'flash' };
    const f = attentionVjp(q, k, v, all);
    const fwd = timeOnStream(
      () => {
        const r = attentionVjp(q, k, v, all);
        dispose(r.output, r.logSumExp);
      },
      { iterations: ITERATIONS, warmup: 1 },
    );
    let backwardVariant = '';
    const bwd = timeOnStream(
      () => {
        const g = f.backward(dO);
        backwardVariant = g.variant;
        dispose(g.dQuery, g.dKey, g.dValue, ...Object.values(g.dCaptures ?? {}));
      },
      { iterations: ITERATIONS, warmup: 1 },
    );
    dispose(f.output, f.logSumExp);
    return { forwardMs: fwd.median, backwardMs: bwd.median, forwardVariant: f.variant, backwardVariant };
  } finally {
    dispose(q, k, v, dO);
  }
}

/** How many times faster `a` runs than `base`, forward and backward. */
const speed = (a: Timed, base: Timed) => ({
  forward: Number((base.forwardMs / a.forwardMs).toFixed(2)),
  backward: Number((base.backwardMs / a.backwardMs).toFixed(2)),
});

/** `masks`: documents and causal-as-expression against causal; `scores`: ALiBi and softcap against plain. */
function mods(which: 'masks' | 'scores'): void {
  const causalExpr = maskMod('kv <= q');
  const blocks = (m: MaskMod) => createBlockMask(m, { B, N, T, S: T, device: 'cuda' });
  const causal = timed({ isCausal: true });
  report({ case: 'built-in causal', ...causal });
  if (which === 'masks') {
    // 8 equal documents per sequence, as the flex harness's.
    const length = T / 8;
    const ids = Tensor.fromArray(
      Int32Array.from({ length: B * T }, (_, i) => Math.floor((i % T) / length)),
      [B, T],
      'int32',
    ).to('cuda');
    const doc = and(documentMask(ids), causalExpr);
    const docMask = blocks(doc);
    const d = timed({ maskMod: doc, blockMask: docMask });
    report({
      case: 'document mask, 8 equal docs, causal + block mask',
      ...d,
      speedOverCausal: speed(d, causal),
    });
    const c = timed({ maskMod: causalExpr, blockMask: blocks(causalExpr) });
    report({ case: "causal as maskMod 'kv <= q' + block mask", ...c, speedOverBuiltIn: speed(c, causal) });
    docMask.kinds.dispose();
    ids.dispose();
    return;
  }
  const full = timed({});
  report({ case: 'plain', ...full });
  const slopes = alibiSlopes(N).to('cuda');
  const a = timed({ scoreMod: alibi(slopes), maskMod: causalExpr, blockMask: blocks(causalExpr) });
  report({ case: 'ALiBi, causal as maskMod + block mask', ...a, speedOverBuiltInCausal: speed(a, causal) });
  const cap = timed({ scoreMod: softcap(30) });
  report({ case: 'softcap 30', ...cap, speedOverPlain: speed(cap, full) });
  const capCausal = timed({ scoreMod: softcap(30), isCausal: true });
  report({ case: 'softcap 30, causal', ...capCausal, speedOverBuiltInCausal: speed(capCausal, causal) });
  slopes.dispose();
}

/**
 * `backward`: the flash backward alone (attentionBackward), one line a case as soon as it is timed, every
 * case on the output and log-sum-exp of one plain forward (the backward's work does not depend on their
 * values, and one forward module is all it compiles): unmasked, the (B,1,T,S) mask, the (1,N,T,S) bias,
 * built-in causal, 8 equal documents (∧ causal, block mask), causal as 'kv <= q' (block mask), ALiBi (causal
 * expression, block mask), softcap 30, a (B,N,T,S) bf16 bias (8; its dBias stored by default, ATTNLAB_FLASH_BWD_DBIAS=add adds it). For a
 * time-capped call on a cold kernel cache.
 */
function backwardOnly(): void {
  const [q, k, v, dO] = inputs(T);
  const f = attentionVjp(q, k, v, { implementation: 'flash' });
  const causalExpr = maskMod('kv <= q');
  const blocks = (m: MaskMod) => createBlockMask(m, { B, N, T, S: T, device: 'cuda' });
  const length = T / 8;
  const ids = Tensor.fromArray(
    Int32Array.from({ length: B * T }, (_, i) => Math.floor((i % T) / length)),
    [B, T],
    'int32',
  ).to('cuda');
  const doc = and(documentMask(ids), causalExpr);
  const slopes = alibiSlopes(N).to('cuda');
  const cases: Array<[string, () => AttentionOptions]> = [
    ['unmasked', () => ({})],
    ['mask (B,1,T,S) bool', () => ({ mask: filled([B, 1, T, T], 'bool', 0x01000101) })],
    ['bias (1,N,T,S) bf16', () => ({ bias: filled([1, N, T, T], 'bfloat16', 0x3c003c00) })],
    ['built-in causal', () => ({ isCausal: true })],
    ['document mask, 8 equal docs, causal + block mask', () => ({ maskMod: doc, blockMask: blocks(doc) })],
    [
      "causal as maskMod 'kv <= q' + block mask",
      () => ({ maskMod: causalExpr, blockMask: blocks(causalExpr) }),
    ],
    [
      'ALiBi, causal as maskMod + block mask',
      () => ({ scoreMod: alibi(slopes), maskMod: causalExpr, blockMask: blocks(causalExpr) }),
    ],
    ['softcap 30', () => ({ scoreMod: softcap(30) })],
    // No element shared by two positions: by default dBias stored once an element in bf16 (variant
    // '.dbias-store'); float32 reductions with ATTNLAB_FLASH_BWD_DBIAS=add.
    ['bias (B,N,T,S) bf16', () => ({ bias: filled([B, N, T, T], 'bfloat16', 0x3c003c00) })],
  ];
  const picked = process.env.ATTNLAB_HARNESS_CASES?.trim();
  const only = picked ? picked.split(',').map(Number) : null;
  cases.forEach(([name, make], index) => {
    if (only && !only.includes(index)) return;
    const options: AttentionOptions = { ...make(), implementation: 'flash' };
    let variant = '';
    const run = () => {
      const g = attentionBackward(q, k, v, f.output, f.logSumExp as Tensor, dO, options);
      variant = g.variant;
      return [g.dQuery, g.dKey, g.dValue, g.dBias];
    };
    const m = measureBackward(run);
    report({ case: name, impl: 'flash', pass: 'backward', B, T, N, H, ...m, variant });
    dispose(options.bias, options.mask, options.blockMask?.kinds);
  });
}

console.log(`# variants-backward ${part} B=${B} T=${T} N=${N} H=${H}`);
if (part === 'dense') dense();
else if (part === 'masks' || part === 'scores') mods(part);
else if (part === 'backward') backwardOnly();
else throw new Error(`part: dense, masks, scores or backward, got ${part}`);
console.table(rows);
