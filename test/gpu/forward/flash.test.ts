/**
 * The CUDA flash kernel through the correctness suite (src/check/suite.ts, run by
 * test/support/backend-suite.ts): every case (hand-picked, several tiles long, random) in bfloat16,
 * float16, float32 and tf32 (float32 runs the FMA kernel: true float32 products for both), against
 * the float64 reference with FlashAttention's rule, fresh inputs per run (the seed is printed;
 * ATTNLAB_TEST_SEED replays one) and poisoned device memory, so an element the kernel forgot to
 * write reads as NaN. The tile configurations beside the table's (ATTNLAB_FLASH_TILES) run a few
 * cases through the same suite. Also: the compiled kernels state the shared memory the launcher asks
 * for, peak device memory is O(T), and float64 is refused with a reason.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import { cudaFlashBackend, flashModule } from '../../../src/backends/cuda/flash/backend.js';
import { chooseFlashTiles } from '../../../src/backends/cuda/flash/sm80/tiles.js';
import {
  type FlashVariant,
  flashKernelSource,
  flashVariant,
  flashVariantKey,
  flashVariantSharedBytes,
} from '../../../src/backends/cuda/flash/sm80/variant.js';
import { readModuleGlobal } from '../../../src/backends/cuda/runtime/compile.js';
import { cudaAvailable, synchronize, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import {
  memoryStats,
  resetPeakMemory,
  roundAllocationSize,
  setAllocationPoison,
} from '../../../src/backends/cuda/runtime/memory.js';
import { CASES, LONG_CASES } from '../../../src/check/cases.js';
import { type CheckRow, DEVICE_PRECISIONS, OracleCache, PRECISIONS } from '../../../src/check/suite.js';
import { reloadConfig } from '../../../src/config.js';
import { UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { defineBackendSuite, testSeed as seed, seedLine } from '../../support/backend-suite.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

/**
 * Every row: the variant names the kernel that ran (the forward kernel, or for short 16-bit queries
 * without bias or mask the decode kernel, decode.ts); float32 and tf32 ran the FMA kernel.
 */
function expectVariant(row: CheckRow): void {
  assert.match(
    row.variant ?? '',
    /^flash-(fwd\.sm_\d+a?\.(bf16|f16|f32)\.d\d+(v\d+)?\.\d+x\d+x\d+|decode\.sm_\d+a?\.(bf16|f16)\.d\d+)/,
  );
  if (row.precision === 'float32' || row.precision === 'tf32') {
    assert.match(row.variant ?? '', /\.f32\.d\d+\.32x32x8\.fma/, `${row.precision} runs the FMA kernel`);
  }
}

/** Runs a check with ATTNLAB_FLASH_TILES set, and restores the table afterwards. */
function withTiles(tiles: string) {
  return (run: () => CheckRow): CheckRow => {
    process.env.ATTNLAB_FLASH_TILES = tiles;
    reloadConfig();
    try {
      return run();
    } finally {
      delete process.env.ATTNLAB_FLASH_TILES;
      reloadConfig();
    }
  };
}

/** Every suite below runs on poisoned device memory (an unwritten element reads as NaN). */
function poisonedMemory(): void {
  before(() => setAllocationPoison(0xff));
  after(() => setAllocationPoison(null));
}

const oracles = new OracleCache();
if (!skip) console.log(seedLine());

// One top-level suite per precision: node's reporters print a top-level suite when it ends, so a run
// cut short on the GPU machine (140 s and 170 s caps, one suite of ~340 tests, nothing
// printed) still shows every precision that finished; `--test-name-pattern` picks one per process.
for (const precision of DEVICE_PRECISIONS.cuda) {
  describe(`cuda flash kernel · ${precision.label}`, { skip }, () => {
    poisonedMemory();
    defineBackendSuite(cudaFlashBackend, { oracles, precisions: [precision], expect: expectVariant });
  });
}

describe('cuda flash kernel · other tile configurations', { skip }, () => {
  poisonedMemory();
  // The table picks one configuration per head dim; the others (two K/V stages, 8 warps at small
  // D, one m-tile per warp) are reachable through ATTNLAB_FLASH_TILES and must be as correct.
  const tileCaseNames = [
    'T=S=1000 causal (tiles skipped, diagonal masked)',
    'T=300 S=330 window [64,0] bottom-right + padding',
    'bias broadcast over B,N (1,1,T,S) + causal',
    'T=113 S=203 causal',
    'mask (B,1,T,S) with a fully masked row',
  ];
  const tileCases = [...CASES, ...LONG_CASES].filter((c) => tileCaseNames.includes(c.name));
  assert.equal(tileCases.length, tileCaseNames.length, 'every tile case is in the case lists');
  for (const tiles of ['64x64x4', '128x32x4', '128x64x4s2', '128x128x8s2']) {
    defineBackendSuite(cudaFlashBackend, {
      cases: tileCases,
      precisions: [PRECISIONS.bfloat16],
      label: `, tiles ${tiles}`,
      around: withTiles(tiles),
      oracles,
      expect: (row) => assert.match(row.variant ?? '', new RegExp(`\\.${tiles}(\\.|$)`)),
    });
  }
});

describe('cuda flash kernel', { skip }, () => {
  poisonedMemory();

  it('refuses float64 with the reason', () => {
    const x = randomNormal([1, 8, 1, 32], { seed, dtype: 'float64' }).to('cuda');
    assert.throws(
      () => attention(x, x, x, { implementation: 'flash' }),
      (e: unknown) => e instanceof UnsupportedError && /float64/.test(e.message),
    );
  });

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
      const options = { implementation: 'flash', isCausal: true, returnLogSumExp: true } as const;
      // One warm call first: state kept per device across calls (the dynamic grid's 4-byte work counter,
      // one 512-byte allocation, is made by the first dynamic launch — T=8192 here) is not per-call memory.
      const warm = attention(q, q, q, options);
      warm.output.dispose();
      warm.logSumExp?.dispose();
      synchronize();
      resetPeakMemory();
      const before = memoryStats().currentBytes;
      const r = attention(q, q, q, options);
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
