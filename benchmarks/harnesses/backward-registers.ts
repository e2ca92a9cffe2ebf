/**
 * ptxas's register and spill report for the flash backward modules as NVRTC builds them (the kernels
 * attnlab runs), which can differ from `nvcc -Xptxas -v` on the same source: ncu saw
 * local-memory traffic in the mma.sync dK/dV loop under NVRTC while nvcc reported no spills. Compiles
 * each module once more with `--ptxas-options=-v` (its own cache key) and prints ptxas's lines.
 *
 *   ATTNLAB_CACHE_DIR=$(mktemp -d) node --import tsx benchmarks/harnesses/backward-registers.ts [D ...]   (default: 64 128)
 *
 * (an empty cache folder: a module found on disk is not compiled, so ptxas prints nothing for it).
 */

import { FLASH_BACKWARD_KERNELS } from '../../src/backends/cuda/flash/sm80/backward.js';
import {
  FLASH_BACKWARD_TILES,
  type FlashBackwardVariant,
  flashBackwardDefines,
  flashBackwardFile,
  flashBackwardVariantKey,
  HOPPER_BACKWARD_HEAD_DIMS,
  HOPPER_BACKWARD_TILES,
  HOPPER_BACKWARD_WS_TILES,
} from '../../src/backends/cuda/flash/sm80/backward-variant.js';
import { compileHistory, loadKernels } from '../../src/backends/cuda/runtime/compile.js';
import { targetArch } from '../../src/backends/cuda/runtime/context.js';
import { reloadConfig } from '../../src/config.js';

// ATTNLAB_DEBUG=2 prints the NVRTC log, where ptxas writes its report.
process.env.ATTNLAB_DEBUG = '2';
reloadConfig();

const dims = process.argv.slice(2).map(Number);
const arch = targetArch();
const variants: FlashBackwardVariant[] = [];
for (const headDim of dims.length ? dims : [64, 128]) {
  const base = { arch, dtype: 'bfloat16' as const, headDim, deterministic: false };
  variants.push({ ...base, kernel: 'mma', tiles: FLASH_BACKWARD_TILES });
  if (arch === 'sm_90a' && HOPPER_BACKWARD_HEAD_DIMS.includes(headDim)) {
    variants.push({ ...base, kernel: 'wgmma', tiles: HOPPER_BACKWARD_TILES });
    variants.push({ ...base, kernel: 'wgmma-ws', tiles: HOPPER_BACKWARD_WS_TILES });
    // The ordered dQ adds of deterministic mode (FLASH_BWD_DETERMINISTIC).
    variants.push({ ...base, kernel: 'wgmma', tiles: HOPPER_BACKWARD_TILES, deterministic: true });
    variants.push({ ...base, kernel: 'wgmma-ws', tiles: HOPPER_BACKWARD_WS_TILES, deterministic: true });
  }
}
for (const v of variants) {
  const spec = {
    file: flashBackwardFile(v),
    kernels: [...FLASH_BACKWARD_KERNELS],
    defines: flashBackwardDefines(v),
    options: ['--ptxas-options=-v'],
  };
  loadKernels(spec);
  const stats = compileHistory().at(-1);
  console.log(`== ${flashBackwardVariantKey(v)}: ${stats?.source} ${stats?.milliseconds.toFixed(0)} ms`);
}
