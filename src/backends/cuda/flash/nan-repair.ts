/**
 * The NaN repair of backends whose P·V multiplies masked keys (naive: cuBLASLt over all S keys;
 * cudnn: cuDNN's fused kernel, measured on the H200: bench/results/2026-12-01-nan):
 * src/kernels/flash/nan_repair.cu recomputes every NaN output element over the keys its row sees, so
 * that a masked, padded or out-of-window key's NaN or Inf value (times its weight 0: NaN) stays out,
 * as the README's rule says. Without NaN in the output it is one read of O; attnlab's own flash
 * kernels do the same inside their epilogue and need no extra launch.
 *
 * It lives with the flash kernel because it reuses its parameters (FlashParams) and its visibility
 * and recompute code; the registry wraps the naive and cudnn backends with it (withNanRepair), since
 * backends of one layer import nothing of each other (docs/architecture.md).
 */
import type { AttentionBackend } from '../../backend.js';
import type { AttentionProblem, BackendOutput } from '../../problem.js';
import { loadKernels } from '../compile.js';
import { launchKernel } from '../launch.js';
import { copyInt32ToDevice } from '../memory.js';
import { buildFlashParams, marshalFlashParams } from './params.js';
import { FLASH_BIAS_CODES, type FlashBiasType } from './variant.js';

const ELEM = { bfloat16: 0, float16: 1, float32: 2 } as const;
const THREADS = 256;
/** Enough blocks to fill an H200 (132 SMs × 8 resident blocks of 256 threads) several times. */
const MAX_BLOCKS = 132 * 8 * 8;

/**
 * Whether `p` has a key some row does not see while another row (or the same P·V) multiplies it:
 * causality, a window, padding, a mask, or a bias (which may hold −inf). Without any, no weight is
 * 0 by masking and no repair is needed.
 */
export function canHideKeys(p: AttentionProblem): boolean {
  return p.causal || p.window !== null || p.keyValueSeqLengths !== null || p.mask !== null || p.bias !== null;
}

/** `backend` with the repair after each run that can hide keys; name, device and supports unchanged. */
export function withNanRepair(backend: AttentionBackend): AttentionBackend {
  return {
    ...backend,
    run(p: AttentionProblem): BackendOutput {
      const result = backend.run(p);
      if (canHideKeys(p)) repairOutput(p, result.output.buffer.ptr, result.logSumExp?.buffer.ptr ?? 0n);
      return result;
    },
  };
}

/**
 * Uploads the lengths and enqueues the repair of `output` (B,T,N,Hv, contiguous, in p.dtype) and of
 * `logSumExp` (B,T,N float32; 0n when none was asked for).
 */
export function repairOutput(p: AttentionProblem, output: bigint, logSumExp = 0n): void {
  const upload = (values: Int32Array | null) => (values ? copyInt32ToDevice(values) : null);
  const queryLengths = upload(p.querySeqLengths);
  const keyValueLengths = upload(p.keyValueSeqLengths);
  try {
    repairMaskedNaN(p, {
      output,
      logSumExp,
      queryLengths: queryLengths?.ptr ?? 0n,
      keyValueLengths: keyValueLengths?.ptr ?? 0n,
    });
  } finally {
    // Stream-ordered pool: a later user of these blocks is enqueued after the repair.
    queryLengths?.release();
    keyValueLengths?.release();
  }
}

/** Device addresses the repair reads: the output (rewritten in place) and the int32 lengths, if any. */
export interface RepairPointers {
  readonly output: bigint;
  /** (B,T,N) float32 log-sum-exp rewritten where NaN, or 0n. */
  readonly logSumExp?: bigint;
  readonly queryLengths: bigint;
  readonly keyValueLengths: bigint;
}

/** Enqueues the repair of `p`'s output (B,T,N,Hv, contiguous, in p.dtype) on attnlab's stream. */
export function repairMaskedNaN(p: AttentionProblem, at: RepairPointers): void {
  const elem = ELEM[p.dtype as keyof typeof ELEM];
  // Dense (B,S,K,H) K/V and (B,T,N,Hv) O only: no GPU backend runs paged or packed problems yet; the
  // one that does must index them here too.
  if (elem === undefined || p.paged || p.packed || p.B * p.T * p.N * p.Hv === 0) return;
  const lanes = elem === 2 ? 4 : 8;
  const vec = p.Hv % lanes === 0 ? lanes : 1;
  const bias = (p.bias ? p.bias.tensor.dtype : 'none') as FlashBiasType;
  const defines = {
    REPAIR_ELEM: elem,
    REPAIR_VEC: vec,
    FLASH_BIAS: FLASH_BIAS_CODES[bias],
    FLASH_MASK: p.mask ? 1 : 0,
  };
  const name = 'attnlab_nan_repair';
  const fn = loadKernels({ file: 'flash/nan_repair.cu', kernels: [name], defines }).functions.get(name)!;
  const params = buildFlashParams(p, {
    q: p.query.buffer.ptr,
    k: p.key.buffer.ptr,
    v: p.value.buffer.ptr,
    o: at.output,
    lse: at.logSumExp ?? 0n,
    bias: p.bias?.tensor.buffer.ptr ?? 0n,
    mask: p.mask?.tensor.buffer.ptr ?? 0n,
    qLens: at.queryLengths,
    kvLens: at.keyValueLengths,
  });
  const work = (p.B * p.T * p.N * p.Hv) / vec;
  const blocks = Math.min(MAX_BLOCKS, Math.ceil(work / THREADS));
  launchKernel(fn, { grid: [blocks, 1, 1], block: [THREADS, 1, 1], sharedBytes: 0 }, [
    marshalFlashParams(params),
  ]);
}
