/**
 * cuBLASLt through koffi: the descriptor calls and cublasLtMatmul, each checked (DeviceError with the
 * cublasStatus name). Enum values are those of cublasLt.h and library_types.h (CUDA 12 and 13 agree).
 */
import { checked } from './driver.js';
import { loadLibrary } from './libraries.js';

export const CUDA_DATA_TYPE = { R_32F: 0, R_64F: 1, R_16F: 2, R_16BF: 14 } as const;
export const CUBLAS_COMPUTE = { F32: 68, F32_PEDANTIC: 69, F32_FAST_TF32: 77 } as const;
export const CUBLAS_OP = { N: 0, T: 1 } as const;
export const MATMUL_DESC = { COMPUTE_TYPE: 0, SCALE_TYPE: 1, POINTER_MODE: 2, TRANSA: 3, TRANSB: 4 } as const;
export const MATRIX_LAYOUT = {
  TYPE: 0,
  ORDER: 1,
  ROWS: 2,
  COLS: 3,
  LD: 4,
  BATCH_COUNT: 5,
  BATCH_STRIDE: 6,
} as const;
export const MATMUL_PREF = {
  SEARCH_MODE: 0,
  MAX_WORKSPACE_BYTES: 1,
  MIN_ALIGNMENT_A_BYTES: 5,
  MIN_ALIGNMENT_B_BYTES: 6,
  MIN_ALIGNMENT_C_BYTES: 7,
  MIN_ALIGNMENT_D_BYTES: 8,
} as const;

/** sizeof(cublasLtMatmulHeuristicResult_t): algo (8 × uint64), workspaceSize, state, wavesCount, int[4]. */
export const HEURISTIC_RESULT_BYTES = 96;
/** sizeof(cublasLtMatmulAlgo_t), the first field of a heuristic result. */
export const ALGO_BYTES = 64;

/** cublasStatus_t names, for libraries too old to have cublasLtGetStatusName. */
const STATUS_NAMES: Record<number, string> = {
  1: 'CUBLAS_STATUS_NOT_INITIALIZED',
  3: 'CUBLAS_STATUS_ALLOC_FAILED',
  7: 'CUBLAS_STATUS_INVALID_VALUE',
  8: 'CUBLAS_STATUS_ARCH_MISMATCH',
  11: 'CUBLAS_STATUS_MAPPING_ERROR',
  13: 'CUBLAS_STATUS_EXECUTION_FAILED',
  14: 'CUBLAS_STATUS_INTERNAL_ERROR',
  15: 'CUBLAS_STATUS_NOT_SUPPORTED',
  16: 'CUBLAS_STATUS_LICENSE_ERROR',
};

const PROTOTYPES = {
  cublasLtCreate: 'int cublasLtCreate(void *handle)',
  cublasLtMatmulDescCreate: 'int cublasLtMatmulDescCreate(void *desc, int computeType, int scaleType)',
  cublasLtMatmulDescSetAttribute:
    'int cublasLtMatmulDescSetAttribute(void *desc, int attribute, void *value, size_t bytes)',
  cublasLtMatrixLayoutCreate:
    'int cublasLtMatrixLayoutCreate(void *layout, int type, uint64_t rows, uint64_t cols, int64_t ld)',
  cublasLtMatrixLayoutSetAttribute:
    'int cublasLtMatrixLayoutSetAttribute(void *layout, int attribute, void *value, size_t bytes)',
  cublasLtMatmulPreferenceCreate: 'int cublasLtMatmulPreferenceCreate(void *pref)',
  cublasLtMatmulPreferenceSetAttribute:
    'int cublasLtMatmulPreferenceSetAttribute(void *pref, int attribute, void *value, size_t bytes)',
  cublasLtMatmulPreferenceDestroy: 'int cublasLtMatmulPreferenceDestroy(void *pref)',
  cublasLtMatmulAlgoGetHeuristic:
    'int cublasLtMatmulAlgoGetHeuristic(void *handle, void *op, void *a, void *b, void *c, void *d, ' +
    'void *pref, int requested, void *results, void *returned)',
  cublasLtMatmul:
    'int cublasLtMatmul(void *handle, void *op, void *alpha, uint64_t A, void *Adesc, uint64_t B, ' +
    'void *Bdesc, void *beta, uint64_t C, void *Cdesc, uint64_t D, void *Ddesc, void *algo, ' +
    'uint64_t workspace, size_t workspaceBytes, void *stream)',
} as const;

type CublasLtName = keyof typeof PROTOTYPES;

export interface CublasLt extends Record<CublasLtName, (...args: unknown[]) => void> {
  readonly path: string;
  /** cublasLtGetVersion(), e.g. 130100 for 13.1.0. */
  readonly version: number;
}

let cublasLt: CublasLt | undefined;

/** The cuBLASLt functions, bound on first use. */
export function lt(): CublasLt {
  if (cublasLt) return cublasLt;
  const { lib, path } = loadLibrary('cublasLt');
  let statusName: (status: number) => string = (s) => STATUS_NAMES[s] ?? `cublasStatus ${s}`;
  let statusText: (status: number) => string = () => '';
  try {
    const name = lib.func('const char *cublasLtGetStatusName(int status)');
    const text = lib.func('const char *cublasLtGetStatusString(int status)');
    statusName = (s) => String(name(s));
    statusText = (s) => String(text(s));
  } catch {
    // Older cuBLASLt: the table above names the status; there is no text.
  }
  const describe = (status: number): [string, string] => [statusName(status), statusText(status)];
  const bound: Record<string, unknown> = { path };
  for (const [name, prototype] of Object.entries(PROTOTYPES)) {
    bound[name] = checked('cuBLASLt', name, lib.func(prototype), describe);
  }
  bound.version = Number(lib.func('size_t cublasLtGetVersion()')());
  cublasLt = bound as unknown as CublasLt;
  return cublasLt;
}

/** `value` as the bytes of one C scalar, for the SetAttribute calls (which copy it). */
export function int32Bytes(value: number): Int32Array {
  return Int32Array.of(value);
}
export function int64Bytes(value: number | bigint): BigInt64Array {
  return BigInt64Array.of(BigInt(value));
}
export function uint64Bytes(value: number | bigint): BigUint64Array {
  return BigUint64Array.of(BigInt(value));
}
