/**
 * The Hopper forward (wgmma + TMA, sm_90a) with the library's score/mask modifiers against itself
 * without them, device time (CUDA events, median of 20 after 10 settling calls), B=4 T=S=8192 N=16
 * H=128 bf16 by default:
 *
 *   masks        causal-mask and documents below, in one process
 *   causal-mask  causal written as a mask modifier (maskMod('kv <= q'), which is not lowered to the
 *                built-in flag) with its block mask, against the built-in causal mask (goal ≥ 0.95×)
 *   documents    a document mask of 8 equal packed documents per sequence (and(documentMask(docIds),
 *                causal())) with its block mask, against dense causal (goal ≥ 5× faster)
 *   alibi        alibi(N) on the built-in causal mask, against causal (goal ≥ 0.9×)
 *   softcap      softcap(30), causal (unless --no-causal) and not, against the same without it (goal ≥ 0.9×)
 *
 *   node --import tsx benchmarks/harnesses/variants-hopper-speed.ts masks|causal-mask|documents|alibi|softcap [B T N H]
 *     [--once|--profile] [--three] [--no-causal] [--other-grid] [--repeat=N] [--docs=N]
 *
 * The block-mask parts also run their variant on the 64 × 64 one-consumer tile, two blocks an SM
 * (what ATTNLAB_BLOCK_MASK_TILE=64x64 asks the library for; the 128 × 128 tile where the library takes
 * that one), with the largest output difference from the library's beside the time (not 0: the keys
 * are summed in tiles of 64 instead of 128). --docs=N sets the documents per sequence (8 by default):
 * T/N rows each, so --docs=64 at T=8192 gives every 128-row item one key tile, a probe of an item's
 * fixed cost (the time less the tiles' work at the dense causal rate, over the items an SM runs). The
 * documents part also times a block mask of 64 × 64 blocks on the 64 × 64 tile (its maxDifference
 * against the library's tile given the same block mask).
 *
 * The block-mask parts (causal-mask, documents) also run their variant on the other grid (the 2-D grid
 * where the library takes the dynamic one, and the reverse), each such line with the largest output
 * difference from the library's (0: bit for bit) beside the time; --other-grid does the same for ALiBi
 * and softcap with causal. The library runs block masks on the 2-D grid (ATTNLAB_BLOCK_MASK_GRID=dynamic
 * is refused: racecheck hazards on an H100), so their other grid is the dynamic one. --repeat=N then launches the block-mask variant on the dynamic grid N more times back to
 * back and compares the output after every 50th launch and the last with the 2-D grid's, bit for bit
 * (a line with the launches, the differing elements and the wall time): a hang shows as the process's
 * timeout.
 *
 * --three also runs the causal mask, ALiBi and softcap on the 192 × 80 three-consumer tile the built-in
 * masks take at D=128 from T=8192 (the modifiers' rule keeps 128 × 128), each such line with the largest
 * output difference from the default beside the time. --once runs each case once, untimed (for ncu
 * --launch-skip/--launch-count and compute-sanitizer: the launches come in the order of the cases). One
 * part a process: each compiles a few kernels, which the disk cache keeps for the next.
 *
 * Prints one JSON line per measurement (ms, TFLOP/s over the pairs the masks keep, the variant that
 * ran) and one per ratio. benchmarks/harnesses/flex-attention-forward.py times PyTorch's
 * flex_attention on the same masks and modifiers.
 */
import { runAttention } from '../../src/api/attention.js';
import { createBlockMask } from '../../src/api/block-mask.js';
import { validateAttention } from '../../src/api/validate.js';
import { launchHopper } from '../../src/backends/cuda/flash/sm90/hopper.js';
import {
  type HopperVariant,
  hopperVariant,
  hopperVariantKey,
} from '../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { fillDevice32 } from '../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions, AttentionProblem } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import { reloadConfig } from '../../src/config.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { alibi, alibiSlopes, and, causal, documentMask, softcap } from '../../src/variants/library.js';
import { maskMod } from '../../src/variants/modifiers.js';

// --profile: the same as --once (the name the profiling commands use).
const once = process.argv.includes('--once') || process.argv.includes('--profile');
const three = process.argv.includes('--three');
const noCausal = process.argv.includes('--no-causal');
const otherGridToo = process.argv.includes('--other-grid');
const repeat = Number(process.argv.find((a) => a.startsWith('--repeat='))?.slice('--repeat='.length) ?? 0);
/**
 * The built-in masks' D=128 tile from T=8192: 192 rows (three consumer warpgroups) × 80 keys, on the
 * 2-D grid (a block mask on the dynamic grid runs two consumers: fwd_config.cuh).
 */
const THREE = { consumers: 3, blockN: 80, persistent: false } as const;
const args = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const part = args[0] ?? 'masks';
const [B, T, N, H] = args.length >= 5 ? args.slice(1, 5).map(Number) : [4, 8192, 16, 128];
const DOCS = Number(process.argv.find((a) => a.startsWith('--docs='))?.slice('--docs='.length) ?? 8);

process.env.ATTNLAB_FLASH_KERNEL = 'wgmma';
reloadConfig();

const [q, k, v] = [0, 1, 2].map((i) => seededInput([B, T, N, H], 31 + i, 'bfloat16').to('cuda'));

interface Timed {
  readonly ms: number | null;
  readonly tflops: number | null;
  readonly variant: string;
}

/** Median device ms of the forward with `options` on the flash backend; TFLOP/s over `pairs` kept (q, kv) pairs per head. */
function time(options: AttentionOptions, pairs: number): Timed {
  const p = validateAttention(q, k, v, { ...options, implementation: 'flash' }) as AttentionProblem;
  const first = runAttention(p);
  first.output.dispose();
  if (once) return { ms: null, tflops: null, variant: first.variant };
  const { median } = timeOnStream(() => runAttention(p).output.dispose(), { iterations: 20, warmup: 10 });
  return { ms: median, tflops: (4 * B * N * pairs * H) / (median * 1e-3) / 1e12, variant: first.variant };
}

/**
 * The problem with `options` on its Hopper variant changed by `change` (another tile), launched directly, against what the backend runs: the largest difference
 * of their outputs, and the time.
 */
function timeVariant(
  options: AttentionOptions,
  pairs: number,
  change: Partial<HopperVariant> | ((v: HopperVariant) => Partial<HopperVariant>),
): Timed & { readonly maxDifference: number } {
  const p = validateAttention(q, k, v, { ...options, implementation: 'flash' }) as AttentionProblem;
  const found = hopperVariant(p, 'sm_90a', 'wgmma', null);
  if ('reason' in found) throw new Error(`no Hopper variant: ${found.reason}`);
  const variant = { ...found.variant, ...(typeof change === 'function' ? change(found.variant) : change) };
  const o = Tensor.zeros([B, T, N, H], 'bfloat16').to('cuda');
  const pointers = {
    ...{ q: q.buffer.ptr, k: k.buffer.ptr, v: v.buffer.ptr, o: o.buffer.ptr },
    ...{ lse: 0n, bias: 0n, mask: 0n, qLens: 0n, kvLens: 0n },
  };
  const launch = () => launchHopper(p, variant, pointers);
  launch();
  const reference = runAttention(p).output;
  const [a, b] = [o.toFloat64Array(), reference.toFloat64Array()];
  let maxDifference = 0;
  for (let i = 0; i < a.length; i++) {
    const d = a[i] === b[i] || Object.is(a[i], b[i]) ? 0 : Math.abs(a[i] - b[i]);
    maxDifference = Number.isNaN(d) ? Number.POSITIVE_INFINITY : Math.max(maxDifference, d);
  }
  reference.dispose();
  let ms: number | null = null;
  if (!once) ms = timeOnStream(launch, { iterations: 20, warmup: 10 }).median;
  o.dispose();
  const tflops = ms === null ? null : (4 * B * N * pairs * H) / (ms * 1e-3) / 1e12;
  return { ms, tflops, variant: hopperVariantKey(variant), maxDifference };
}

const causalPairs = (T * (T + 1)) / 2;

/**
 * The other block-mask tile than the library's: 64 × 64 on one consumer (two blocks an SM) where it
 * runs 128 × 128, and the reverse.
 */
const otherTile = (found: HopperVariant): Partial<HopperVariant> =>
  found.consumers === 1
    ? { consumers: 2, blockN: 128, pingpong: true }
    : { consumers: 1, blockN: 64, pingpong: false };
const tileName = (v: HopperVariant) => (v.consumers === 1 ? '64 × 64 one-consumer tile' : '128 × 128 tile');

/** The other grid than the library's for a block mask: the 2-D grid where it takes the dynamic one. */
const otherGrid = (found: HopperVariant): Partial<HopperVariant> => ({
  persistent: found.persistent === 'dynamic' ? false : 'dynamic',
});

/**
 * --repeat: the variant for `options` on the dynamic grid launched `repeat` times back to back into one
 * output, compared bit for bit with the 2-D grid's output after every 50th launch and the last (each of
 * those into an output filled with NaNs first).
 */
function repeatLaunches(name: string, options: AttentionOptions): void {
  if (repeat <= 0) return;
  const p = validateAttention(q, k, v, { ...options, implementation: 'flash' }) as AttentionProblem;
  const found = hopperVariant(p, 'sm_90a', 'wgmma', null);
  if ('reason' in found) throw new Error(`no Hopper variant: ${found.reason}`);
  const dynamic = { ...found.variant, persistent: 'dynamic' as const };
  const outputs = [dynamic, { ...found.variant, persistent: false as const }].map((variant) => {
    const o = Tensor.zeros([B, T, N, H], 'bfloat16').to('cuda');
    const pointers = {
      ...{ q: q.buffer.ptr, k: k.buffer.ptr, v: v.buffer.ptr, o: o.buffer.ptr },
      ...{ lse: 0n, bias: 0n, mask: 0n, qLens: 0n, kvLens: 0n },
    };
    return { o, launch: () => launchHopper(p, variant, pointers) };
  });
  const [library, other] = outputs;
  other.launch();
  const want = other.o.toHost().data as Uint16Array;
  let differing = 0;
  let checks = 0;
  const start = performance.now();
  for (let i = 1; i <= repeat; i++) {
    const checked = i % 50 === 0 || i === repeat;
    // A checked launch writes over bf16 NaNs, so that an item it skipped cannot pass on an earlier one's output.
    if (checked) fillDevice32(library.o.buffer, 0x7fc07fc0);
    library.launch();
    if (checked) {
      const got = library.o.toHost().data as Uint16Array;
      for (let j = 0; j < got.length; j++) if (got[j] !== want[j]) differing++;
      checks++;
    }
  }
  const wallMs = performance.now() - start;
  report({
    case: `${name}, ${repeat} launches`,
    variant: hopperVariantKey(dynamic),
    checks,
    differing,
    wallMs,
  });
  for (const x of outputs) x.o.dispose();
}

/** The variant `options` run on with otherTile applied (the tile a timeVariant with otherTile times). */
function tileOf(options: AttentionOptions): HopperVariant {
  const p = validateAttention(q, k, v, { ...options, implementation: 'flash' }) as AttentionProblem;
  const found = hopperVariant(p, 'sm_90a', 'wgmma', null);
  if ('reason' in found) throw new Error(`no Hopper variant: ${found.reason}`);
  return { ...found.variant, ...otherTile(found.variant) };
}

function report(row: Record<string, unknown>): void {
  console.log(JSON.stringify({ B, T, N, H, ...row }));
}
const ratio = (base: Timed, other: Timed) =>
  base.ms !== null && other.ms !== null ? Number((base.ms / other.ms).toFixed(3)) : null;

// The built-in causal mask, the base of every part but softcap --no-causal.
const causalTime: Timed =
  part === 'softcap' && noCausal
    ? { ms: null, tflops: null, variant: '' }
    : time({ isCausal: true }, causalPairs);
if (causalTime.variant) report({ case: 'built-in causal', ...causalTime });
if (part === 'masks' || part === 'causal-mask') {
  // 'kv <= q' as an expression string: causal() alone would run as the built-in flag.
  const asMask = maskMod('kv <= q');
  const asMaskBlocks = createBlockMask(asMask, { B, N, T, S: T, device: 'cuda' });
  const a = time({ maskMod: asMask, blockMask: asMaskBlocks }, causalPairs);
  report({
    case: 'causal as maskMod + block mask',
    ...a,
    speedOverBuiltIn: ratio(causalTime, a),
    goal: 0.95,
  });
  const ag = timeVariant({ maskMod: asMask, blockMask: asMaskBlocks }, causalPairs, otherGrid);
  report({
    case: 'causal as maskMod + block mask, other grid',
    ...ag,
    speedOverBuiltIn: ratio(causalTime, ag),
  });
  const at = timeVariant({ maskMod: asMask, blockMask: asMaskBlocks }, causalPairs, otherTile);
  report({
    case: `causal as maskMod + block mask, ${tileName(tileOf({ maskMod: asMask, blockMask: asMaskBlocks }))}`,
    ...at,
    speedOverBuiltIn: ratio(causalTime, at),
  });
  if (three) {
    const a3 = timeVariant({ maskMod: asMask, blockMask: asMaskBlocks }, causalPairs, THREE);
    report({
      case: 'causal as maskMod + block mask, 192x80',
      ...a3,
      speedOverBuiltIn: ratio(causalTime, a3),
    });
  }
  repeatLaunches('causal as maskMod + block mask', { maskMod: asMask, blockMask: asMaskBlocks });
  asMaskBlocks.kinds.dispose();
}
if (part === 'masks' || part === 'documents') {
  // Equal documents: document d holds rows [d·T/8, (d + 1)·T/8), each sees its document's keys up to itself.
  const length = T / DOCS;
  const docIds = Tensor.fromArray(
    new Int32Array(B * T).map((_, i) => Math.floor((i % T) / length)),
    [B, T],
    'int32',
  ).to('cuda');
  const docs = and(documentMask(docIds), causal());
  const docBlocks = createBlockMask(docs, { B, N, T, S: T });
  const docPairs = DOCS * ((length * (length + 1)) / 2);
  const d = time({ maskMod: docs, blockMask: docBlocks }, docPairs);
  report({
    case: `document mask (${DOCS} equal documents) + block mask`,
    ...d,
    speedOverCausal: ratio(causalTime, d),
    goal: 5,
  });
  const dg = timeVariant({ maskMod: docs, blockMask: docBlocks }, docPairs, otherGrid);
  report({
    case: `document mask (${DOCS} equal documents) + block mask, other grid`,
    ...dg,
    speedOverCausal: ratio(causalTime, dg),
  });
  const dt = timeVariant({ maskMod: docs, blockMask: docBlocks }, docPairs, otherTile);
  report({
    case: `document mask (${DOCS} equal documents) + block mask, ${tileName(tileOf({ maskMod: docs, blockMask: docBlocks }))}`,
    ...dt,
    speedOverCausal: ratio(causalTime, dt),
  });
  // A block mask of 64 × 64 blocks on the 64 × 64 tile: the tile a diagonal 128 × 128 block splits
  // into is then EMPTY above the diagonal (not loaded) and FULL below it (no per-element mask).
  const docBlocks64 = createBlockMask(docs, { B, N, T, S: T, blockQ: 64, blockKV: 64 });
  const d64 = timeVariant({ maskMod: docs, blockMask: docBlocks64 }, docPairs, {
    consumers: 1,
    blockN: 64,
    pingpong: false,
  });
  report({
    case: `document mask (${DOCS} equal documents) + 64 × 64 block mask, 64 × 64 one-consumer tile`,
    ...d64,
    speedOverCausal: ratio(causalTime, d64),
  });
  docBlocks64.kinds.dispose();
  repeatLaunches(`document mask (${DOCS} equal documents) + block mask`, {
    maskMod: docs,
    blockMask: docBlocks,
  });
  for (const x of [docBlocks.kinds, docIds]) x.dispose();
}
if (part === 'alibi' || part === 'softcap') {
  if (part === 'alibi') {
    const slopes = alibiSlopes(N).to('cuda');
    const a = time({ scoreMod: alibi(slopes), isCausal: true }, causalPairs);
    report({ case: 'ALiBi + built-in causal', ...a, speedOverUnmodified: ratio(causalTime, a), goal: 0.9 });
    if (otherGridToo) {
      const ag = timeVariant({ scoreMod: alibi(slopes), isCausal: true }, causalPairs, otherGrid);
      report({
        case: 'ALiBi + built-in causal, other grid',
        ...ag,
        speedOverUnmodified: ratio(causalTime, ag),
      });
    }
    if (three) {
      const a3 = timeVariant({ scoreMod: alibi(slopes), isCausal: true }, causalPairs, THREE);
      report({ case: 'ALiBi + built-in causal, 192x80', ...a3, speedOverUnmodified: ratio(causalTime, a3) });
    }
    slopes.dispose();
  } else {
    const full = time({}, T * T);
    report({ case: 'no mask', ...full });
    const s = time({ scoreMod: softcap(30) }, T * T);
    report({ case: 'softcap 30', ...s, speedOverUnmodified: ratio(full, s), goal: 0.9 });
    if (three) {
      const s3 = timeVariant({ scoreMod: softcap(30) }, T * T, THREE);
      report({ case: 'softcap 30, 192x80', ...s3, speedOverUnmodified: ratio(full, s3) });
    }
    if (!noCausal) {
      const sc = time({ scoreMod: softcap(30), isCausal: true }, causalPairs);
      report({
        case: 'softcap 30 + built-in causal',
        ...sc,
        speedOverUnmodified: ratio(causalTime, sc),
        goal: 0.9,
      });
      if (otherGridToo) {
        const sg = timeVariant({ scoreMod: softcap(30), isCausal: true }, causalPairs, otherGrid);
        report({
          case: 'softcap 30 + built-in causal, other grid',
          ...sg,
          speedOverUnmodified: ratio(causalTime, sg),
        });
      }
    }
  }
}
for (const x of [q, k, v]) x.dispose();
