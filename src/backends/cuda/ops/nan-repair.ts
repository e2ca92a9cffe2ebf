/**
 * The NaN repair of backends whose P·V multiplies masked keys (naive: cuBLASLt over all S keys;
 * cudnn: cuDNN's fused kernel, measured on the H200: benchmarks/results/h200/forward/2026-12-01-nan-inf-inputs; the FP8 path:
 * cuDNN's FP8 graph): src/kernels/ops/nan_repair.cu recomputes every NaN output element over the
 * keys its row sees, so that a masked, padded or out-of-window key's NaN or Inf value (times its
 * weight 0: NaN) stays out, as the NaN rule in docs/guide/attention.md says. Without NaN in the output it is one read of
 * O; attnlab's own flash kernels do the same inside their epilogue and need no extra launch.
 *
 * It reuses the flash kernel's parameters (FlashParams) and its visibility and recompute code, so
 * this room (cuda/ops) sits above the flash backend; the registry's entries for the naive and cudnn
 * backends declare it as a post-op (nanRepair), which the registry runs after their run
 * (docs/internals/architecture.md).
 *
 * On the hot path it costs one launch and nothing else: the kernel, its packed parameters and the
 * uploaded sequence lengths are kept per problem signature (repairLaunch), so a repeated call only
 * writes its seven operand pointers into the packed bytes (benchmarks/results/h200/forward/2026-12-01-cudnn-vs-peers-nan-repair has
 * the numbers), and problems in which no key is hidden from any row skip it (canHideKeys).
 */
import { type AttentionBackend, type PostOp, withPostOps } from '../../backend.js';
import {
  type AttentionProblem,
  type BackendOutput,
  type ShapeFields,
  sameShapeFields,
  shapeFields,
} from '../../problem.js';
import { buildFlashParams, marshalFlashParams } from '../flash/params.js';
import { FLASH_BIAS_CODES, type FlashBiasType } from '../flash/sm80/variant.js';
import { loadKernels } from '../runtime/compile.js';
import { currentDeviceOrdinal } from '../runtime/context.js';
import { launchKernel, packStruct } from '../runtime/launch.js';
import { copyInt32ToDevice } from '../runtime/memory.js';

const ELEM = { bfloat16: 0, float16: 1, float32: 2 } as const;
const THREADS = 256;
/** Enough blocks to fill an H200 (132 SMs × 8 resident blocks of 256 threads) several times. */
const MAX_BLOCKS = 132 * 8 * 8;
/** Problem signatures kept (least recently used dropped): a model's few shapes and lengths. */
const MAX_SIGNATURES = 32;

/**
 * Whether some row of `p` does not see a key that P·V still multiplies: a mask or a bias (which may
 * hold −inf), padded keys, a window narrower than the problem, or a causal diagonal that hides
 * something (top-left: any S > 1; bottom-right: any T > 1, so decoding one token hides nothing).
 * Without one, no weight is 0 by masking and the repair cannot change anything.
 */
export function canHideKeys(p: AttentionProblem): boolean {
  if (p.mask !== null || p.bias !== null) return true;
  if (p.keyValueSeqLengths?.some((length) => length < p.S)) return true;
  const reach = p.S + p.T; // a window side this wide covers every key of every row
  if (p.window !== null && (p.window.left < reach || p.window.right < reach)) return true;
  if (p.causal) return p.alignment === 'bottom_right' ? p.T > 1 : p.S > 1;
  return false;
}

/** The repair as a post-op: the registry runs it after each run of an entry declaring it that can hide keys. */
export const nanRepair: PostOp<AttentionProblem, BackendOutput> = {
  name: 'nan-repair',
  applies: canHideKeys,
  run: (p, result) => repairOutput(p, result.output.buffer.ptr, result.logSumExp?.buffer.ptr ?? 0n),
};

/** `backend` declaring the repair after its own post-ops; name, device, plan and run unchanged. */
export function withNanRepair<Plan>(backend: AttentionBackend<Plan>): AttentionBackend<Plan> {
  return withPostOps(backend, [nanRepair]);
}

/** What a repair launch of one problem signature needs besides the operand pointers. */
interface RepairLaunch {
  /** Its signature (the key it is kept under in `launches`). */
  readonly key: string;
  readonly fn: bigint;
  readonly blocks: number;
  /** FlashParams packed once; its first seven fields (q, k, v, o, lse, bias, mask) change per call. */
  readonly params: { readonly bytes: Uint8Array; readonly view: DataView; readonly offsets: number[] };
  /** The uploaded lengths the params point at (released when the signature is dropped). */
  readonly lengths: readonly { release(): void }[];
}

const launches = new Map<string, RepairLaunch>();

/** Everything of `p` the repair's kernel and parameters depend on, except the operand pointers. */
function signature(p: AttentionProblem): string {
  const { bias, mask, window } = p;
  return [
    // A launch holds a module's function and uploaded lengths of one device.
    currentDeviceOrdinal(),
    p.dtype,
    p.B,
    p.T,
    p.S,
    p.N,
    p.K,
    p.H,
    p.Hv,
    p.scale,
    p.causal,
    p.alignment,
    window ? `${window.left},${window.right}` : '',
    bias ? `${bias.tensor.dtype}:${bias.strides}` : '',
    mask ? `${mask.strides}` : '',
    p.querySeqLengths ?? '',
    p.keyValueSeqLengths ?? '',
  ].join('|');
}

/**
 * The launch of the last plain problem (no bias, mask or lengths) with the fields its signature read:
 * a repeated call compares them instead of joining the signature (~300 B and ~1 µs a call).
 */
let lastPlain: {
  readonly shape: ShapeFields;
  readonly device: number;
  readonly launch: RepairLaunch;
} | null = null;

function isPlain(p: AttentionProblem): boolean {
  return !p.bias && !p.mask && p.querySeqLengths === null && p.keyValueSeqLengths === null;
}

function sameAsLast(p: AttentionProblem): RepairLaunch | null {
  if (lastPlain === null || !isPlain(p) || launches.get(lastPlain.launch.key) !== lastPlain.launch)
    return null;
  return lastPlain.device === currentDeviceOrdinal() && sameShapeFields(lastPlain.shape, p)
    ? lastPlain.launch
    : null;
}

function repairLaunch(p: AttentionProblem, elem: 0 | 1 | 2): RepairLaunch {
  const same = sameAsLast(p);
  if (same) return same;
  const found = repairLaunchByKey(p, elem);
  lastPlain = isPlain(p)
    ? { shape: shapeFields(p), device: currentDeviceOrdinal(), launch: found }
    : lastPlain;
  return found;
}

function repairLaunchByKey(p: AttentionProblem, elem: 0 | 1 | 2): RepairLaunch {
  const key = signature(p);
  const known = launches.get(key);
  if (known) {
    // Most recently used last, so the first entry is the one to drop.
    launches.delete(key);
    launches.set(key, known);
    return known;
  }
  const bias = (p.bias ? p.bias.tensor.dtype : 'none') as FlashBiasType;
  const defines = {
    REPAIR_ELEM: elem,
    FLASH_BIAS: FLASH_BIAS_CODES[bias],
    FLASH_MASK: p.mask ? 1 : 0,
  };
  const name = 'attnlab_nan_repair';
  const fn = loadKernels({ file: 'ops/nan_repair.cu', kernels: [name], defines }).functions.get(name)!;
  const queryLengths = p.querySeqLengths ? copyInt32ToDevice(p.querySeqLengths) : null;
  const keyValueLengths = p.keyValueSeqLengths ? copyInt32ToDevice(p.keyValueSeqLengths) : null;
  const fields = marshalFlashParams(
    buildFlashParams(p, {
      q: 0n,
      k: 0n,
      v: 0n,
      o: 0n,
      lse: 0n,
      bias: 0n,
      mask: 0n,
      qLens: queryLengths?.ptr ?? 0n,
      kvLens: keyValueLengths?.ptr ?? 0n,
    }),
  );
  if (fields.type !== 'struct') throw new Error('marshalFlashParams gives a struct');
  // Threads scan O 16 bytes at a time (8 elements, 4 in float32), several loads in flight each.
  const work = Math.ceil((p.B * p.T * p.N * p.Hv) / (elem === 2 ? 4 : 8));
  const entry: RepairLaunch = {
    key,
    fn,
    blocks: Math.min(MAX_BLOCKS, Math.ceil(work / THREADS)),
    params: packStruct(fields.fields),
    lengths: [queryLengths, keyValueLengths].filter((b) => b !== null),
  };
  launches.set(key, entry);
  if (launches.size > MAX_SIGNATURES) {
    const [oldest, dropped] = launches.entries().next().value!;
    launches.delete(oldest);
    // Stream-ordered pool: a later user of these blocks runs after every repair enqueued on them.
    for (const buffer of dropped.lengths) buffer.release();
  }
  return entry;
}

/**
 * Enqueues, on attnlab's stream, the repair of `output` (B,T,N,Hv, contiguous, in p.dtype) and of
 * `logSumExp` (B,T,N float32; 0n when none was asked for).
 */
export function repairOutput(p: AttentionProblem, output: bigint, logSumExp = 0n): void {
  const elem = ELEM[p.dtype as keyof typeof ELEM];
  // Dense (B,S,K,H) K/V and (B,T,N,Hv) O only: no GPU backend runs paged or packed problems yet; the
  // one that does must index them here too.
  if (elem === undefined || p.paged || p.packed || p.B * p.T * p.N * p.Hv === 0) return;
  const launch = repairLaunch(p, elem);
  const { view, offsets } = launch.params;
  const pointers = [
    p.query.buffer.ptr,
    p.key.buffer.ptr,
    p.value.buffer.ptr,
    output,
    logSumExp,
    p.bias?.tensor.buffer.ptr ?? 0n,
    p.mask?.tensor.buffer.ptr ?? 0n,
  ];
  for (let i = 0; i < pointers.length; i++) view.setBigUint64(offsets[i], pointers[i], true);
  launchKernel(launch.fn, { grid: [launch.blocks, 1, 1], block: [THREADS, 1, 1], sharedBytes: 0 }, [
    { type: 'bytes', bytes: launch.params.bytes },
  ]);
}
