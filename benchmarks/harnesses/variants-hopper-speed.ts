/**
 * The Hopper forward (wgmma + TMA, sm_90a) with score/mask modifiers against itself without them,
 * device time (CUDA events, median of 20 after 10 settling calls), B=4 T=S=8192 N=16 H=128 bf16 by
 * default:
 *
 *   masks    causal written as a mask modifier with its block mask, against the built-in causal mask
 *            (goal ≥ 0.95×); a document mask of 8 equal packed documents per sequence with its block
 *            mask, against dense causal (goal ≥ 5× faster);
 *   alibi    ALiBi (a per-head slope times kv − q) on the built-in causal mask, against causal;
 *   softcap  logit soft-capping 30·tanh(s/30), causal and not, against the same without it (goal ≥ 0.9×).
 *
 *   node --import tsx benchmarks/harnesses/variants-hopper-speed.ts masks|alibi|softcap [B T N H] [--profile]
 *
 * --profile runs each case's forward once, untimed, so that a profiler sees one launch per case in order
 * (e.g. `ncu -k regex:attnlab_hopper_fwd -c 4 node --import tsx … softcap --profile`).
 *
 * (One part a process: each compiles two or three kernels, which the disk cache keeps for the next.)
 *
 * Prints one JSON line per measurement (ms, TFLOP/s over the pairs the masks keep, the variant that
 * ran) and one per ratio. The modifier sets are hand-written in the variants code generator's shape
 * (test/support/modifier-cases.ts); benchmarks/harnesses/flex-attention-forward.py times PyTorch's
 * flex_attention on the same masks and modifiers.
 */
import { runAttention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import type { AttentionOptions, AttentionProblem } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import { reloadConfig } from '../../src/config.js';
import { Tensor } from '../../src/tensor/tensor.js';
import {
  blockMaskFrom,
  causalCase,
  compiledModifiers,
  type ModifierCase,
  modifierSource,
} from '../../test/support/modifier-cases.js';

const profile = process.argv.includes('--profile');
const args = process.argv.slice(2).filter((a) => a !== '--profile');
const part = args[0] ?? 'masks';
const [B, T, N, H] = args.length >= 5 ? args.slice(1, 5).map(Number) : [4, 8192, 16, 128];
const DOCS = 8;

process.env.ATTNLAB_FLASH_KERNEL = 'wgmma';
reloadConfig();

const [q, k, v] = [0, 1, 2].map((i) => seededInput([B, T, N, H], 31 + i, 'bfloat16').to('cuda'));

interface Timed {
  readonly ms: number;
  readonly tflops: number;
  readonly variant: string;
}

/** Median device ms of the forward of `p` on the flash backend; TFLOP/s over `pairs` kept (q, kv) pairs per head. */
function time(p: AttentionProblem, pairs: number): Timed {
  const forced = { ...p, implementation: 'flash' } as AttentionProblem;
  const first = runAttention(forced);
  first.output.dispose();
  if (profile) return { ms: Number.NaN, tflops: Number.NaN, variant: first.variant };
  const { median } = timeOnStream(() => runAttention(forced).output.dispose(), {
    iterations: 20,
    warmup: 10,
  });
  return { ms: median, tflops: (4 * B * N * pairs * H) / (median * 1e-3) / 1e12, variant: first.variant };
}

const causalPairs = (T * (T + 1)) / 2;

function plain(options: AttentionOptions, pairs: number): Timed {
  return time(validateAttention(q, k, v, options), pairs);
}

/**
 * The modifier set `m` on the problem (captures on the device) with the block mask `kinds` (one per
 * (query block, key block) of 128 × 128, the same for every batch and head) when given.
 */
function modified(
  m: ModifierCase,
  options: AttentionOptions,
  pairs: number,
  kinds: Uint8Array | null,
): Timed {
  const captures = m.captures.map((c) => ({ ...c, tensor: c.tensor.to('cuda') }));
  const modifiers = compiledModifiers(m, captures);
  const nb = Math.ceil(T / 128);
  const onDevice = kinds ? Tensor.fromRaw(kinds, [1, 1, nb, nb], 'bool').to('cuda') : null;
  const blockMask = onDevice
    ? blockMaskFrom({ Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 }, { B, T, S: T, N }, onDevice, m.key)
    : undefined;
  try {
    return time({ ...validateAttention(q, k, v, options), modifiers, blockMask } as AttentionProblem, pairs);
  } finally {
    for (const c of captures) c.tensor.dispose();
    onDevice?.dispose();
  }
}

/** Block kinds of 128 × 128 blocks for a mask that keeps [lo(q), q] per row (causal within a segment). */
function segmentKinds(lo: (q: number) => number): Uint8Array {
  const nb = Math.ceil(T / 128);
  const kinds = new Uint8Array(nb * nb);
  for (let i = 0; i < nb; i++)
    for (let j = 0; j < nb; j++) {
      let kept = 0;
      let all = 0;
      for (let row = i * 128; row < Math.min(T, (i + 1) * 128); row++) {
        const a = Math.max(lo(row), j * 128);
        const b = Math.min(row, Math.min(T, (j + 1) * 128) - 1);
        kept += Math.max(0, b - a + 1);
        all += Math.min(T, (j + 1) * 128) - j * 128;
      }
      kinds[i * nb + j] = kept === 0 ? 0 : kept === all ? 2 : 1;
    }
  return kinds;
}

function report(row: Record<string, unknown>): void {
  console.log(JSON.stringify({ B, T, N, H, ...row }));
}
const ratio = (base: Timed, other: Timed) => Number((base.ms / other.ms).toFixed(3));

if (part === 'masks') {
  const causal = plain({ isCausal: true }, causalPairs);
  report({ case: 'built-in causal', ...causal });
  const asMask = modified(
    causalCase(),
    {},
    causalPairs,
    segmentKinds(() => 0),
  );
  report({
    case: 'causal as maskMod + block mask',
    ...asMask,
    speedOverBuiltIn: ratio(causal, asMask),
    goal: 0.95,
  });
  // Equal documents: document d holds rows [d·T/8, (d + 1)·T/8), each sees its document's keys up to itself.
  const length = T / DOCS;
  const ids = new Int32Array(B * T).map((_, i) => Math.floor((i % T) / length));
  const docs: ModifierCase = {
    ...causalCase(),
    name: `document mask (${DOCS} equal documents)`,
    key: `doc${DOCS}eq`,
    source: modifierSource({
      mask: 'const int* d = static_cast<const int*>(c.ptr[0]); return kv <= q && d[b * c.stride[0][0] + q * c.stride[0][1]] == d[b * c.stride[0][0] + kv * c.stride[0][1]];',
    }),
    captures: [
      { name: 'docIds', tensor: Tensor.fromArray(ids, [B, T], 'int32'), dtype: 'int32', needsGrad: false },
    ],
    blockMask: true,
  };
  const docPairs = DOCS * ((length * (length + 1)) / 2);
  const doc = modified(
    docs,
    {},
    docPairs,
    segmentKinds((row) => Math.floor(row / length) * length),
  );
  report({ case: docs.name, ...doc, speedOverCausal: ratio(causal, doc), goal: 5 });
} else {
  const slopes = Tensor.fromArray(
    Float32Array.from({ length: N }, (_, h) => 2 ** ((-8 * (h + 1)) / N)),
    [N],
    'float32',
  );
  const alibi: ModifierCase = {
    ...causalCase(),
    name: 'ALiBi',
    key: 'alibi-score',
    source: modifierSource({
      score:
        'return s + static_cast<const float*>(c.ptr[0])[h * c.stride[0][0]] * static_cast<float>(kv - q);',
      scoreGrad: 'return g;',
      needsScore: false,
    }),
    hasMaskMod: false,
    hasScoreMod: true,
    captures: [{ name: 'slopes', tensor: slopes, dtype: 'float32', needsGrad: false }],
    blockMask: false,
  };
  const softcap: ModifierCase = {
    ...alibi,
    name: 'softcap 30',
    key: 'softcap-30',
    source: modifierSource({
      score: 'return 30.0f * tanhf(s * (1.0f / 30.0f));',
      scoreGrad: 'const float t = tanhf(s * (1.0f / 30.0f)); return g * (1.f - t * t);',
    }),
    captures: [],
  };
  const causal = plain({ isCausal: true }, causalPairs);
  report({ case: 'built-in causal', ...causal });
  if (part === 'alibi') {
    const a = modified(alibi, { isCausal: true }, causalPairs, null);
    report({ case: 'ALiBi + built-in causal', ...a, speedOverUnmodified: ratio(causal, a), goal: 0.9 });
  } else {
    const full = plain({}, T * T);
    report({ case: 'no mask', ...full });
    const s = modified(softcap, {}, T * T, null);
    report({ case: 'softcap 30', ...s, speedOverUnmodified: ratio(full, s), goal: 0.9 });
    const sc = modified(softcap, { isCausal: true }, causalPairs, null);
    report({
      case: 'softcap 30 + built-in causal',
      ...sc,
      speedOverUnmodified: ratio(causal, sc),
      goal: 0.9,
    });
  }
}
for (const x of [q, k, v]) x.dispose();
