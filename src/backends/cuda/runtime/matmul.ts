/**
 * Strided-batched matmuls through cuBLASLt, planned once per shape.
 *
 * cuBLASLt is column-major: a row-major (r × c) matrix with row stride ld is, to it, a (c × r)
 * column-major matrix with the same ld. The naive backend states its two products that way
 * (see backend.ts); this module only turns a MatmulShape into descriptors, layouts and the best
 * heuristic algorithm, keeps them in a table keyed by the shape, and runs them on attnlab's stream.
 */
import { DeviceError } from '../../../errors.js';
import {
  ALGO_BYTES,
  CUBLAS_OP,
  HEURISTIC_RESULT_BYTES,
  int32Bytes,
  int64Bytes,
  lt,
  MATMUL_DESC,
  MATMUL_PREF,
  MATRIX_LAYOUT,
  uint64Bytes,
} from '../ffi/cublaslt.js';
import { outBigInt } from '../ffi/driver.js';
import { currentDeviceOrdinal, getCudaContext } from './context.js';
import { allocDevice } from './memory.js';

/** One operand as cuBLASLt sees it: stored (rows × cols) column-major, with ld and a batch stride. */
export interface OperandLayout {
  readonly type: number;
  readonly rows: number;
  readonly cols: number;
  readonly ld: number;
  /** Elements between consecutive matrices of the batch; 0 reuses one matrix for all (GQA). */
  readonly batchStride: number;
  /** Largest power of two (≤ 256) dividing every address this operand will be used at, in bytes. */
  readonly alignment: number;
}

/** D = alpha · op(A) · op(B), batched; C is not read (beta = 0) and shares D's layout. */
export interface MatmulShape {
  readonly transA: boolean;
  readonly transB: boolean;
  readonly a: OperandLayout;
  readonly b: OperandLayout;
  readonly d: OperandLayout;
  readonly batch: number;
  readonly computeType: number;
  readonly scaleType: number;
}

/** A shape's descriptors, layouts and chosen algorithm (kept for the process). */
export interface MatmulPlan {
  readonly op: bigint;
  readonly a: bigint;
  readonly b: bigint;
  readonly d: bigint;
  /** The chosen cublasLtMatmulAlgo_t (64 bytes), passed by address to every cublasLtMatmul. */
  readonly algo: Uint8Array;
  readonly workspaceBytes: number;
}

/**
 * 32 MiB of workspace: cuBLASLt's own recommendation for Hopper, where some split-K and stream-K
 * kernels need it; held for the life of the process like cuBLAS's handle workspace.
 */
const WORKSPACE_BYTES = 32 << 20;
let handle: bigint | undefined;
let workspace: { ptr: bigint } | undefined;
let handleDevice: number | undefined;
const perDevice = new Map<number, { handle: bigint; workspace: { ptr: bigint } }>();
const plans = new Map<string, MatmulPlan>();
let planBuilds = 0;

/** How many plans were built (heuristic queries made); flat across repeated calls of one shape. */
export function matmulPlanBuilds(): number {
  return planBuilds;
}

function getHandle(): bigint {
  // One handle and workspace per device: the workspace must be memory of the device that runs.
  const device = currentDeviceOrdinal();
  if (handleDevice !== device) {
    getCudaContext();
    const made = perDevice.get(device) ?? {
      handle: outBigInt((slot) => lt().cublasLtCreate(slot)),
      workspace: allocDevice(WORKSPACE_BYTES),
    };
    perDevice.set(device, made);
    ({ handle, workspace } = made);
    handleDevice = device;
  }
  return handle!;
}

/** Largest power of two ≤ 256 dividing every one of `byteOffsets` (0 divides by anything). */
export function commonAlignment(byteOffsets: readonly number[]): number {
  let alignment = 256;
  for (const offset of byteOffsets) {
    while (alignment > 1 && offset % alignment !== 0) alignment /= 2;
  }
  return alignment;
}

function createLayout(o: OperandLayout, batch: number): bigint {
  const l = lt();
  const layout = outBigInt((slot) =>
    l.cublasLtMatrixLayoutCreate(slot, o.type, BigInt(o.rows), BigInt(o.cols), BigInt(o.ld)),
  );
  l.cublasLtMatrixLayoutSetAttribute(layout, MATRIX_LAYOUT.BATCH_COUNT, int32Bytes(batch), 4);
  l.cublasLtMatrixLayoutSetAttribute(layout, MATRIX_LAYOUT.BATCH_STRIDE, int64Bytes(o.batchStride), 8);
  return layout;
}

function buildPlan(shape: MatmulShape): MatmulPlan {
  const l = lt();
  const h = getHandle();
  const op = outBigInt((slot) => l.cublasLtMatmulDescCreate(slot, shape.computeType, shape.scaleType));
  l.cublasLtMatmulDescSetAttribute(
    op,
    MATMUL_DESC.TRANSA,
    int32Bytes(shape.transA ? CUBLAS_OP.T : CUBLAS_OP.N),
    4,
  );
  l.cublasLtMatmulDescSetAttribute(
    op,
    MATMUL_DESC.TRANSB,
    int32Bytes(shape.transB ? CUBLAS_OP.T : CUBLAS_OP.N),
    4,
  );
  const a = createLayout(shape.a, shape.batch);
  const b = createLayout(shape.b, shape.batch);
  const d = createLayout(shape.d, shape.batch);
  const pref = outBigInt((slot) => l.cublasLtMatmulPreferenceCreate(slot));
  try {
    l.cublasLtMatmulPreferenceSetAttribute(
      pref,
      MATMUL_PREF.MAX_WORKSPACE_BYTES,
      uint64Bytes(WORKSPACE_BYTES),
      8,
    );
    // The default assumes 256-byte-aligned operands; per-head offsets are often less aligned.
    const alignments: Array<[number, OperandLayout]> = [
      [MATMUL_PREF.MIN_ALIGNMENT_A_BYTES, shape.a],
      [MATMUL_PREF.MIN_ALIGNMENT_B_BYTES, shape.b],
      [MATMUL_PREF.MIN_ALIGNMENT_C_BYTES, shape.d],
      [MATMUL_PREF.MIN_ALIGNMENT_D_BYTES, shape.d],
    ];
    for (const [attribute, operand] of alignments) {
      l.cublasLtMatmulPreferenceSetAttribute(pref, attribute, Uint32Array.of(operand.alignment), 4);
    }
    const results = new Uint8Array(HEURISTIC_RESULT_BYTES);
    const returned = new Int32Array(1);
    l.cublasLtMatmulAlgoGetHeuristic(h, op, a, b, d, d, pref, 1, results, returned);
    if (returned[0] === 0) {
      throw new DeviceError(
        'cuBLASLt',
        'cublasLtMatmulAlgoGetHeuristic',
        'no algorithm',
        JSON.stringify(shape),
      );
    }
    const view = new DataView(results.buffer);
    planBuilds++;
    return {
      op,
      a,
      b,
      d,
      algo: results.slice(0, ALGO_BYTES),
      workspaceBytes: Number(view.getBigUint64(ALGO_BYTES, true)),
    };
  } finally {
    l.cublasLtMatmulPreferenceDestroy(pref);
  }
}

/** The plan for `shape`, built on first use. */
export function matmulPlan(shape: MatmulShape): MatmulPlan {
  const key = JSON.stringify(shape);
  let plan = plans.get(key);
  if (!plan) {
    plan = buildPlan(shape);
    plans.set(key, plan);
  }
  return plan;
}

/** Enqueues D = alpha · op(A) · op(B) with `plan` at the given device addresses. */
export function runMatmul(plan: MatmulPlan, alpha: number, a: bigint, b: bigint, d: bigint): void {
  const h = getHandle();
  const alphaValue = Float32Array.of(alpha);
  const beta = Float32Array.of(0);
  lt().cublasLtMatmul(
    h,
    plan.op,
    alphaValue,
    a,
    plan.a,
    b,
    plan.b,
    beta,
    d,
    plan.d,
    d,
    plan.d,
    plan.algo,
    workspace?.ptr ?? 0n,
    BigInt(WORKSPACE_BYTES),
    getCudaContext().stream,
  );
}
