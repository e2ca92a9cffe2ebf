/**
 * The CUDA flash kernel against the float64 CPU reference over the shared correctness matrix plus
 * kernel-specific cases (multi-tile causal, windows with padding, padded head dims, H ≠ Hv, float32
 * bias), with FlashAttention's accuracy rule, fresh random inputs per run (the seed is printed;
 * ATTNLAB_TEST_SEED replays one) and poisoned device memory, so an element the kernel forgot to
 * write reads as NaN. float32 inputs run the FMA kernel against the float32 tolerance. Also: peak
 * device memory is O(T), and float64 is refused with a reason.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { readModuleGlobal } from '../../src/backends/cuda/compile.js';
import { cudaAvailable, synchronize, targetArch } from '../../src/backends/cuda/context.js';
import { flashModule } from '../../src/backends/cuda/flash/backend.js';
import { chooseFlashTiles } from '../../src/backends/cuda/flash/tiles.js';
import {
  type FlashVariant,
  flashKernelSource,
  flashVariant,
  flashVariantKey,
  flashVariantSharedBytes,
} from '../../src/backends/cuda/flash/variant.js';
import {
  memoryStats,
  resetPeakMemory,
  roundAllocationSize,
  setAllocationPoison,
} from '../../src/backends/cuda/memory.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { reloadConfig } from '../../src/config.js';
import { UnsupportedError } from '../../src/errors.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import { type AttentionCase, buildInputs, CASES, WINDOW_CASES } from '../support/cases.js';
import { checkAgainstOracle } from '../support/oracle.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

/** Cases that exercise what the shared matrix does not: several tiles, skipping, padding of D. */
const FLASH_CASES: readonly AttentionCase[] = [
  {
    name: 'T=S=1000 causal (tiles skipped, diagonal masked)',
    shape: { B: 1, T: 1000, S: 1000, N: 1, K: 1, H: 32 },
    options: { isCausal: true },
  },
  { name: 'T=1000 S=203', shape: { B: 1, T: 1000, S: 203, N: 2, K: 1, H: 32 } },
  ...WINDOW_CASES,
  {
    name: 'GQA N=8 K=2 causal T=200 S=333',
    shape: { B: 1, T: 200, S: 333, N: 8, K: 2, H: 64 },
    options: { isCausal: true },
  },
  { name: 'H=40 (padded to 48)', shape: { B: 2, T: 70, S: 90, N: 2, K: 2, H: 40 } },
  { name: 'H=64 Hv=32', shape: { B: 1, T: 50, S: 77, N: 2, K: 1, H: 64, Hv: 32 } },
  { name: 'H=200 causal', shape: { B: 1, T: 150, S: 150, N: 1, K: 1, H: 200 }, options: { isCausal: true } },
  { name: 'T=1 S=203 decode step', shape: { B: 3, T: 1, S: 203, N: 4, K: 1, H: 128 } },
  {
    name: 'bias broadcast over B,N (1,1,T,S) + causal',
    shape: { B: 2, T: 130, S: 140, N: 2, K: 2, H: 64 },
    biasShape: [1, 1, 130, 140],
    options: { isCausal: true },
  },
];

function onDevice(options: AttentionOptions, biasDType?: FloatDType): AttentionOptions {
  const bias = options.bias && biasDType ? options.bias.astype(biasDType) : options.bias;
  return { ...options, bias: bias?.to('cuda'), mask: options.mask?.to('cuda') };
}

function runCase(c: AttentionCase, dtype: FloatDType, caseSeed: number, biasDType?: FloatDType): void {
  const { q, k, v, options } = buildInputs(c, dtype, caseSeed);
  const result = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
    ...onDevice(options, biasDType),
    implementation: 'flash',
    returnLogSumExp: true,
  });
  assert.equal(result.backend, 'flash');
  assert.equal(result.device, 'cuda');
  assert.match(result.variant, /^flash-fwd\.sm_\d+a?\.(bf16|f16|f32)\.d\d+\.\d+x\d+x\d+/);
  // The oracle reads the bias in the dtype the kernel read it in.
  const bias = biasDType && options.bias ? options.bias.astype(biasDType) : options.bias;
  // Logits are float32 sums of exact products; 1e-3 leaves room for ex2/lg2.approx, not for a bug.
  checkAgainstOracle(
    result,
    { q, k, v, options: { ...options, bias } },
    dtype,
    `${c.name} ${dtype} (seed ${caseSeed}, ${result.variant})`,
    1e-3,
  );
}

describe('cuda flash kernel', { skip }, () => {
  before(() => {
    console.log(`# seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays this run)`);
    setAllocationPoison(0xff);
  });
  after(() => setAllocationPoison(null));

  const all = [...CASES, ...FLASH_CASES];
  for (const dtype of ['bfloat16', 'float16'] as const) {
    all.forEach((c, index) => {
      it(`${c.name} (${dtype})`, () => runCase(c, dtype, seed + 16 * index));
    });
  }

  it('reads a float32 bias beside bfloat16 inputs', () => {
    const c = CASES.find((x) => x.biasShape && x.options?.isCausal) ?? FLASH_CASES[FLASH_CASES.length - 1];
    runCase(c, 'bfloat16', seed + 7, 'float32');
  });

  // float32 runs the FMA kernel (true float32 products), for 'highest' and 'tf32' alike.
  const float32Cases = [...CASES, ...FLASH_CASES.filter((c) => /1000 causal|padding|Hv=32/.test(c.name))];
  float32Cases.forEach((c, index) => {
    it(`${c.name} (float32)`, () => runCase(c, 'float32', seed + 1000 + 16 * index));
  });

  it("runs float32Precision 'tf32' at float32 precision and says so in the variant", () => {
    const c = FLASH_CASES[0];
    const { q, k, v } = buildInputs(c, 'float32', seed + 5);
    const r = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
      implementation: 'flash',
      isCausal: true,
      float32Precision: 'tf32',
      returnLogSumExp: true,
    });
    assert.match(r.variant, /\.f32\..*\.fma$/);
    checkAgainstOracle(r, { q, k, v, options: { isCausal: true } }, 'float32', `tf32 (${r.variant})`, 1e-3);
  });

  it('refuses float64 with the reason', () => {
    const x = randomNormal([1, 8, 1, 32], { seed, dtype: 'float64' }).to('cuda');
    assert.throws(
      () => attention(x, x, x, { implementation: 'flash' }),
      (e: unknown) => e instanceof UnsupportedError && /float64/.test(e.message),
    );
  });

  // The table picks one configuration per head dim; the others (two K/V stages, 8 warps at small
  // D, one m-tile per warp) are reachable through ATTNLAB_FLASH_TILES and must be as correct.
  const tileCases = [
    ...FLASH_CASES.filter((c) => /1000 causal|padding|bias/.test(c.name)),
    ...CASES.filter((c) => /T=113 S=203 causal|mask/.test(c.name)),
  ];
  for (const tiles of ['64x64x4', '128x32x4', '128x64x4s2', '128x128x8s2']) {
    tileCases.forEach((c, index) => {
      it(`${c.name} (bfloat16, tiles ${tiles})`, () => {
        process.env.ATTNLAB_FLASH_TILES = tiles;
        reloadConfig();
        try {
          runCase(c, 'bfloat16', seed + 2000 + 16 * index);
        } finally {
          delete process.env.ATTNLAB_FLASH_TILES;
          reloadConfig();
        }
      });
    });
  }

  it('every compiled variant states the shared memory the launcher asks for', () => {
    const arch = targetArch();
    const variants: FlashVariant[] = [];
    // Variants the correctness cases compile anyway (this test adds no NVRTC compile).
    for (const H of [64, 128, 256]) {
      for (const dtype of ['bfloat16', 'float16', 'float32'] as const) {
        const x = randomNormal([1, 8, 1, H], { seed, dtype });
        variants.push(flashVariant(validateAttention(x, x, x), arch));
      }
    }
    const bf16 = variants[0];
    for (const tiles of ['64x64x4', '128x32x4', '128x64x4s2', '128x128x8s2']) {
      variants.push({ ...bf16, tiles: chooseFlashTiles(bf16.headDim, tiles) });
    }
    for (const variant of variants) {
      const bytes = readModuleGlobal(flashModule(variant), flashKernelSource(variant).sharedBytesSymbol);
      const stated = new DataView(bytes.buffer).getUint32(0, true);
      assert.equal(
        flashVariantSharedBytes(variant),
        stated,
        `${flashVariantKey(variant)}: launcher vs kernel`,
      );
    }
  });

  it('keeps peak device memory O(T): output and log-sum-exp only, never T·S scores', () => {
    for (const T of [2048, 8192]) {
      const [B, N, H] = [1, 8, 64];
      const q = randomNormal([B, T, N, H], { seed, dtype: 'bfloat16' }).to('cuda');
      synchronize();
      resetPeakMemory();
      const before = memoryStats().currentBytes;
      const r = attention(q, q, q, { implementation: 'flash', isCausal: true, returnLogSumExp: true });
      synchronize();
      const grown = memoryStats().peakBytes - before;
      const allowed = roundAllocationSize(B * T * N * H * 2) + roundAllocationSize(B * T * N * 4);
      const scores = B * N * T * T * 2;
      console.log(
        `# T=${T}: peak +${grown} B (output+lse ${allowed} B; a (B,N,T,S) bf16 score tensor ${scores} B)`,
      );
      assert.ok(grown <= allowed, `T=${T}: peak grew ${grown} B, more than output+lse (${allowed} B)`);
      r.output.dispose();
      r.logSumExp?.dispose();
      q.dispose();
    }
  });
});
