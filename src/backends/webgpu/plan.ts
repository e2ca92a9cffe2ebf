/**
 * The forward kernel's plan for a problem: its variant (tiles included) or why it cannot run, with
 * every WebGPU limit checked before a dispatch, so a case past a limit is a typed refusal that names
 * the limit, never a wrong result.
 */
import { itemSize } from '../../tensor/dtype.js';
import type { AttentionProblem } from '../problem.js';
import {
  DECODE_MAX_ROWS,
  DECODE_SUBGROUPS,
  type DecodeShape,
  decodeStorageBytes,
  decodeUnrolls,
  lanesPerKey,
} from './decode-source.js';
import { paddedBytes } from './memory.js';
import type { WebgpuInfo, WebgpuLimits } from './runtime.js';
import { type MatrixShape, sgmatKeys, sgmatSubgroups } from './sgmat-source.js';
import { outputBlock, TILED_ROWS, TILED_WG, tiledStorageBytes } from './tiled-source.js';
import { bindings, type ForwardVariant, MAX_SPLITS } from './variant.js';

/** Query rows from which the tiled kernel runs unsplit rather than the row kernel split-KV. */
export const TILED_MIN_T = 128;

/** Why the WGSL kernels refuse scoreMod, maskMod and blockMask. */
export const MODIFIERS_REASON =
  'score/mask modifiers (scoreMod, maskMod, blockMask): the WGSL kernels have no code generation for them (cpu and cuda do)';

/** Query rows per workgroup: 64 (×2 lanes with subgroups) is within every adapter's 256-invocation minimum. */
export const ROWS = 64;
/**
 * Rows per workgroup for a few queries (T ≤ 16: decode and speculative steps): a 64-row workgroup
 * would keep 63 rows idle at T=1; 16 rows make the workgroup one NVIDIA warp with two lanes, and
 * four times as many fit an SM.
 */
export const FEW_ROWS = 16;

/** Query rows per workgroup for a problem's T. */
export function rowsFor(T: number): number {
  return T <= FEW_ROWS ? FEW_ROWS : ROWS;
}
/**
 * Head dims up to 256 (q and the accumulator live in each invocation's private memory: 2·256 f32
 * is what FlashAttention's kernels stop at too).
 */
export const MAX_HEAD_DIM = 256;
/** Keys per tile, largest first: 16 keys of H=Hv=64 take 8 KiB of the 16 KiB every adapter offers. */
const TILE_KEYS = [16, 8, 4, 2, 1];
/** Workgroup bytes besides the tiles: two atomics and two i32 copies. */
const WORKGROUP_EXTRA = 16;

/** The variant, and how many chunks the keys are cut into (1: no split; a run-time value). */
export type Plan =
  | { readonly ok: true; readonly variant: ForwardVariant; readonly splits: number }
  | { readonly ok: false; readonly reason: string };

/**
 * Query rows worth of workgroups that fill the GPU: an H100 has 132 SMs, each keeping ~8 workgroups
 * of 64 rows resident, so ~1,000 such workgroups (64k rows' worth) make one wave; fewer leave SMs
 * idle (a decode step at B=8, N=32 has 256 (b, n) workgroups).
 */
const TARGET_ROWS = 1024 * ROWS;
/** Keys a split keeps at the least: below ~256 the combine's extra pass costs more than it saves. */
const MIN_KEYS_PER_SPLIT = 256;

/** Splits for a problem: enough workgroups for one wave, within the combine's MAX_SPLITS. */
export function chooseSplits(p: Pick<AttentionProblem, 'B' | 'T' | 'S' | 'N'>): number {
  const rows = rowsFor(p.T);
  const workgroups = Math.ceil(p.T / rows) * p.N * p.B;
  const wanted = Math.ceil(TARGET_ROWS / rows / workgroups);
  return Math.max(1, Math.min(MAX_SPLITS, wanted, Math.floor(p.S / MIN_KEYS_PER_SPLIT)));
}

/** Query and output rows: totalT for a packed query, else B·T. */
export function queryRows(p: AttentionProblem): number {
  const offsets = p.packed?.querySeqOffsets;
  return offsets ? offsets[offsets.length - 1] : p.B * p.T;
}

type KernelDType = ForwardVariant['dtype'];
function isKernelDType(dtype: string): dtype is KernelDType {
  return dtype === 'float32' || dtype === 'float16' || dtype === 'bfloat16';
}

function refuse(reason: string): Plan {
  return { ok: false, reason };
}

/**
 * Keys per tile of the tiled kernel, or null where it does not apply: 32 keys where they fit the
 * workgroup storage (H=Hv=64: 23 KiB; H=Hv=128: 38 KiB, past the 32 KiB SwiftShader offers),
 * else 16 (H=Hv=128: 30 KiB). Larger tiles halve the barriers per key and give each invocation
 * 2×4 scores instead of 2×2.
 */
export function tiledKeys(p: Pick<AttentionProblem, 'H' | 'Hv' | 'T'>, limits: WebgpuLimits): number | null {
  if (p.T <= FEW_ROWS || p.H % 4 !== 0 || p.Hv % 4 !== 0 || outputBlock(p.Hv) === null) return null;
  if (TILED_WG > limits.maxComputeInvocationsPerWorkgroup) return null;
  return (
    [32, 16].find((bc) => tiledStorageBytes(p.H, p.Hv, bc) <= limits.maxComputeWorkgroupStorageSize) ?? null
  );
}

/**
 * The subgroup-matrix shape the device offers the sgmat kernel: an f16 → f32 configuration, and one
 * subgroup size (subgroupMinSize = subgroupMaxSize, 32 on NVIDIA), so that a workgroup's subgroups
 * and each one's rows are known when the WGSL is written. Null otherwise.
 */
export function matrixShape(info: Pick<WebgpuInfo, 'subgroupMatrix' | 'subgroupSizes'>): MatrixShape | null {
  const { subgroupMatrix, subgroupSizes } = info;
  if (!subgroupMatrix || subgroupSizes.min <= 0 || subgroupSizes.min !== subgroupSizes.max) return null;
  return { ...subgroupMatrix, sg: subgroupSizes.min };
}

/**
 * Head dims up to which the sgmat kernel runs: its accumulator (Hv/N result matrices) and q (H/K
 * left matrices) stay in registers for the whole loop, 96 registers an invocation at H = Hv = 128
 * with 16×16×16 matrices on 32-invocation subgroups.
 */
export const SGMAT_MAX_HEAD_DIM = 128;

/** Keys a tile of the sgmat kernel, or null where it does not apply (a reason is not needed: the tiled kernel runs). */
function sgmatTile(p: AttentionProblem, limits: WebgpuLimits, matrix: MatrixShape | null): number | null {
  if (!matrix || p.dtype !== 'float16' || p.T <= FEW_ROWS) return null;
  if (p.H > SGMAT_MAX_HEAD_DIM || p.Hv > SGMAT_MAX_HEAD_DIM) return null;
  if (sgmatSubgroups(matrix) * matrix.sg > limits.maxComputeInvocationsPerWorkgroup) return null;
  return sgmatKeys(p.H, p.Hv, matrix, limits.maxComputeWorkgroupStorageSize);
}

/**
 * The one subgroup size of a device with subgroups (subgroupMinSize = subgroupMaxSize ≥ 4: 32 on
 * NVIDIA, 4 on SwiftShader), which the decode kernel's layout needs; null otherwise.
 */
export function subgroupSize(info: Pick<WebgpuInfo, 'subgroups' | 'subgroupSizes'>): number | null {
  const { min, max } = info.subgroupSizes;
  return info.subgroups && min >= 4 && min === max ? min : null;
}

/**
 * Workgroups the decode kernel aims for: an H100's 132 SMs keep ~8 of its 128-invocation
 * workgroups each, so ~1,000 make one wave; the plan asks for two (B=8, K=8 gives 64 (b, kv head)
 * pairs: 32 key chunks). Measured with DECODE_MAX_LANES at B=8 S=32k K=8 N=32 H=128 float16 on an
 * H100 (benchmarks/results/h100-sxm/webgpu/2026-12-06-f9447fd-timing.jsonl): 32 chunks 488.2 GB/s,
 * 16 chunks 367.5.
 */
export const DECODE_TARGET_WORKGROUPS = 2048;

/**
 * Invocations a key row at the most (each then loads two 16-byte units of an H=128 float16 row a
 * key): at the shape above, 8 lanes and 32 chunks 488.2 GB/s (59% of Dawn's copy rate), 16 lanes
 * (the subgroup's widest that divides the row) 357.6 with 16 chunks and 357.4 with 32.
 */
export const DECODE_MAX_LANES = 8;

/**
 * The decode kernel's shape for a problem, or null where the row kernel runs it. `maxLanes` caps
 * the invocations a key row (default DECODE_MAX_LANES, and never past the subgroup size; timings
 * and tests compare others).
 */
function decodeShape(
  p: AttentionProblem,
  limits: WebgpuLimits,
  sg: number | null,
  maxLanes: number | undefined,
  pairs: boolean,
): DecodeShape | null {
  if (sg === null || p.T > FEW_ROWS || p.bias || p.mask || p.packed?.querySeqOffsets) return null;
  if (DECODE_SUBGROUPS * sg > limits.maxComputeInvocationsPerWorkgroup) return null;
  const lk = lanesPerKey(
    p.H,
    p.Hv,
    p.dtype as ForwardVariant['dtype'],
    Math.min(sg, maxLanes ?? DECODE_MAX_LANES),
  );
  if (lk === null) return null;
  let rows = Math.min(DECODE_MAX_ROWS, p.T * (p.N / p.K));
  while (rows > 1 && decodeStorageBytes(p.Hv, rows) > limits.maxComputeWorkgroupStorageSize) {
    rows = Math.ceil(rows / 2);
  }
  if (decodeStorageBytes(p.Hv, rows) > limits.maxComputeWorkgroupStorageSize) return null;
  // Two keys a pass only where the loop is written out (its arrays then stay in registers).
  const paired = pairs && decodeUnrolls(p.H, p.Hv, p.dtype as ForwardVariant['dtype'], lk, rows);
  return { sg, lk, rows, ...(paired ? { pairs: true } : {}) };
}

/** Key chunks for the decode kernel: DECODE_TARGET_WORKGROUPS workgroups, ≥ MIN_KEYS_PER_SPLIT keys each. */
function decodeSplits(p: AttentionProblem, d: DecodeShape): number {
  const workgroups = Math.ceil((p.T * (p.N / p.K)) / d.rows) * p.K * p.B;
  const wanted = Math.ceil(DECODE_TARGET_WORKGROUPS / workgroups);
  return Math.max(1, Math.min(MAX_SPLITS, wanted, Math.floor(p.S / MIN_KEYS_PER_SPLIT)));
}

/**
 * `given` overrides the splits (tests run the split path on small cases with it; undefined: the
 * tiled kernel where it applies from TILED_MIN_T rows, else chooseSplits); `subgroups`:
 * the device has the subgroups feature (WebgpuInfo.subgroups), for the two-lane kernel; `tiled`
 * false keeps the row kernel where the tiled one would run (tests and timings compare the two).
 * The tiled kernel runs where it applies (tiledKeys) and the keys are not split.
 */
export function planForward(
  p: AttentionProblem,
  limits: WebgpuLimits,
  given: number | undefined = undefined,
  subgroups = false,
  tiled = true,
  matrix: MatrixShape | null = null,
  sg: number | null = null,
  decodeLanes: number | undefined = undefined,
  decodePairs = false,
): Plan {
  // The registry refuses them too (the backend's layouts do not list 'modifiers'); a direct
  // runForward must not drop them silently either.
  if (p.modifiers || p.blockMask) return refuse(MODIFIERS_REASON);
  const dtype = p.dtype;
  if (!isKernelDType(dtype))
    return refuse(`${dtype} inputs (the kernel reads float32, float16 and bfloat16)`);
  const biasType = p.bias ? p.bias.tensor.dtype : null;
  if (biasType !== null && !isKernelDType(biasType)) {
    return refuse(`a ${biasType} bias (the kernel reads float32, float16 and bfloat16)`);
  }
  if (p.dtype !== 'float32' && p.Hv % 2 !== 0) {
    return refuse(`${p.dtype} stores two values to a 32-bit word, so Hv must be even (Hv=${p.Hv})`);
  }
  if (p.H > MAX_HEAD_DIM || p.Hv > MAX_HEAD_DIM) {
    return refuse(`head dims up to ${MAX_HEAD_DIM} (H=${p.H}, Hv=${p.Hv})`);
  }
  if (p.N % p.K !== 0) return refuse(`N=${p.N} is not a multiple of K=${p.K}`);
  const bc = TILE_KEYS.find(
    (c) => c * (p.H + p.Hv) * 4 + WORKGROUP_EXTRA <= limits.maxComputeWorkgroupStorageSize,
  );
  if (bc === undefined) {
    return refuse(
      `one key of H=${p.H} and Hv=${p.Hv} in f32 needs ${(p.H + p.Hv) * 4 + WORKGROUP_EXTRA} bytes of workgroup storage; ` +
        `maxComputeWorkgroupStorageSize is ${limits.maxComputeWorkgroupStorageSize}`,
    );
  }
  // The tiled kernel where it applies and the keys are not split: split-KV is the row kernel's, and
  // pays where few query rows leave the GPU idle (T < TILED_MIN_T); from TILED_MIN_T rows the tiled
  // kernel's 2× workgroups (32 rows each) and its faster loop beat splitting the row kernel.
  // A few query rows without bias or mask: the decode kernel, always split (given, or decodeSplits).
  const decode = p.N % p.K === 0 ? decodeShape(p, limits, sg, decodeLanes, decodePairs) : null;
  if (decode !== null) return planDecode(p, limits, decode, given ?? decodeSplits(p, decode));
  // The sgmat kernel before the tiled one where the device has subgroup matrices (its products run
  // on the tensor cores); both only unsplit.
  const sgmatBc = tiled ? sgmatTile(p, limits, matrix) : null;
  const tiledKeysHere = tiled ? (sgmatBc ?? tiledKeys(p, limits)) : null;
  const auto = given === undefined ? chooseSplits(p) : given;
  const tiledBc =
    tiledKeysHere !== null && (auto === 1 || (given === undefined && p.T >= TILED_MIN_T))
      ? tiledKeysHere
      : null;
  const sgmat = tiledBc !== null && sgmatBc !== null && matrix !== null;
  const splits = tiledBc !== null ? 1 : auto;
  const rows = sgmat ? sgmatSubgroups(matrix) * matrix.M : tiledBc !== null ? TILED_ROWS : rowsFor(p.T);
  const invocations = sgmat ? sgmatSubgroups(matrix) * matrix.sg : rows;
  if (invocations > limits.maxComputeInvocationsPerWorkgroup) {
    return refuse(
      `${invocations} invocations per workgroup exceed maxComputeInvocationsPerWorkgroup (${limits.maxComputeInvocationsPerWorkgroup})`,
    );
  }
  if (!Number.isInteger(splits) || splits < 1 || splits > MAX_SPLITS) {
    return refuse(`splits must be an integer in [1, ${MAX_SPLITS}] (got ${splits})`);
  }
  const grid = {
    [`query tiles (T/${rows})`]: Math.ceil(p.T / rows),
    'heads N': p.N,
    'batch B × key splits': p.B * splits,
  };
  for (const [what, count] of Object.entries(grid)) {
    if (count > limits.maxComputeWorkgroupsPerDimension) {
      return refuse(
        `${count} ${what} exceed maxComputeWorkgroupsPerDimension (${limits.maxComputeWorkgroupsPerDimension})`,
      );
    }
  }
  const size = itemSize(p.dtype);
  const buffers: [string, number][] = [
    ['query', p.query.byteLength],
    ['key', p.key.byteLength],
    ['value', p.value.byteLength],
    ['output', queryRows(p) * p.N * p.Hv * size],
    ['logSumExp', queryRows(p) * p.N * 4],
  ];
  if (splits > 1) buffers.push(['the split-KV scratch', p.B * p.T * p.N * splits * (p.Hv + 2) * 4]);
  if (p.bias) buffers.push(['bias', p.bias.tensor.byteLength]);
  if (p.paged) buffers.push(['blockTable', p.paged.blockTable.byteLength]);
  if (p.mask) buffers.push(['mask', p.mask.tensor.byteLength]);
  for (const [name, bytes] of buffers) {
    const padded = paddedBytes(bytes);
    if (padded > limits.maxStorageBufferBindingSize) {
      return refuse(
        `${name} takes ${padded} bytes, past maxStorageBufferBindingSize (${limits.maxStorageBufferBindingSize})`,
      );
    }
    if (padded > limits.maxBufferSize) {
      return refuse(`${name} takes ${padded} bytes, past maxBufferSize (${limits.maxBufferSize})`);
    }
  }
  const variant: ForwardVariant = {
    kernel: sgmat ? 'sgmat' : tiledBc !== null ? 'tiled' : 'rows',
    ...(sgmat ? { matrix } : {}),
    dtype,
    H: p.H,
    Hv: p.Hv,
    rows,
    bc: tiledBc ?? bc,
    bias: biasType,
    mask: p.mask !== null,
    causal: p.causal,
    window: p.window !== null,
    lengths: p.querySeqLengths !== null || p.keyValueSeqLengths !== null,
    lse: p.returnLogSumExp,
    split: splits > 1,
    vec: p.H % 4 === 0 && p.Hv % 4 === 0 ? 4 : 1,
    paged: p.paged !== null,
    packedQuery: p.packed?.querySeqOffsets != null,
    packedKv: p.packed?.keyValueSeqOffsets != null,
    // Two lanes a row where the device has subgroups and each lane's half of H and Hv is whole vec4s
    // (a float16 lane writes whole 32-bit words of its half).
    // The tiled kernel's softmax takes 4 invocations a row where the device has subgroups.
    lanes: sgmat
      ? 1
      : tiledBc !== null
        ? subgroups
          ? 4
          : 1
        : subgroups && p.H % 8 === 0 && p.Hv % 8 === 0 && 2 * rows <= limits.maxComputeInvocationsPerWorkgroup
          ? 2
          : 1,
  };
  return checkBindings(variant, limits, splits);
}

function checkBindings(variant: ForwardVariant, limits: WebgpuLimits, splits: number): Plan {
  const storage = bindings(variant).length - 1;
  if (storage > limits.maxStorageBuffersPerShaderStage) {
    return refuse(
      `${storage} storage buffers exceed maxStorageBuffersPerShaderStage (${limits.maxStorageBuffersPerShaderStage})`,
    );
  }
  return { ok: true, variant, splits };
}

/** The decode kernel's plan: its grid and buffers checked against the limits as planForward's. */
function planDecode(p: AttentionProblem, limits: WebgpuLimits, d: DecodeShape, splits: number): Plan {
  if (!Number.isInteger(splits) || splits < 1 || splits > MAX_SPLITS) {
    return refuse(`splits must be an integer in [1, ${MAX_SPLITS}] (got ${splits})`);
  }
  const grid = {
    [`query row groups (T·N/K/${d.rows})`]: Math.ceil((p.T * (p.N / p.K)) / d.rows),
    'KV heads K': p.K,
    'batch B × key splits': p.B * splits,
  };
  for (const [what, count] of Object.entries(grid)) {
    if (count > limits.maxComputeWorkgroupsPerDimension) {
      return refuse(
        `${count} ${what} exceed maxComputeWorkgroupsPerDimension (${limits.maxComputeWorkgroupsPerDimension})`,
      );
    }
  }
  const size = itemSize(p.dtype);
  const buffers: [string, number][] = [
    ['query', p.query.byteLength],
    ['key', p.key.byteLength],
    ['value', p.value.byteLength],
    ['output', queryRows(p) * p.N * p.Hv * size],
    ['the split-KV scratch', p.B * p.T * p.N * splits * (p.Hv + 2) * 4],
  ];
  if (p.paged) buffers.push(['blockTable', p.paged.blockTable.byteLength]);
  for (const [name, bytes] of buffers) {
    const padded = paddedBytes(bytes);
    if (padded > limits.maxStorageBufferBindingSize) {
      return refuse(
        `${name} takes ${padded} bytes, past maxStorageBufferBindingSize (${limits.maxStorageBufferBindingSize})`,
      );
    }
    if (padded > limits.maxBufferSize) {
      return refuse(`${name} takes ${padded} bytes, past maxBufferSize (${limits.maxBufferSize})`);
    }
  }
  const variant: ForwardVariant = {
    kernel: 'decode',
    decode: d,
    dtype: p.dtype as ForwardVariant['dtype'],
    H: p.H,
    Hv: p.Hv,
    rows: d.rows,
    bc: d.lk,
    bias: null,
    mask: false,
    causal: p.causal,
    window: p.window !== null,
    lengths: p.querySeqLengths !== null || p.keyValueSeqLengths !== null,
    lse: p.returnLogSumExp,
    split: true,
    vec: 4,
    paged: p.paged !== null,
    packedQuery: false,
    packedKv: p.packed?.keyValueSeqOffsets != null,
    lanes: 1,
  };
  return checkBindings(variant, limits, splits);
}
