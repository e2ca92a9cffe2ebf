/**
 * The cuDNN 9 backend-API enum values attnlab uses, as C ints.
 *
 * Every value was read from the installed headers on the H200 (cudnn_graph_v9.h of 9.14 and of 9.19
 * agree on all of them), except the paged-cache-load and ragged-offset values (descriptor 35,
 * attributes 913 and 1950–1953, INT64 10), taken from cuDNN 9.13.1's cudnn_graph.h as published in
 * bindings and then found equal in the H200's 9.14 header (and run by its 9.19 library:
 * benchmarks/results/h200/decode/README.md). They are ABI: cuDNN keeps them
 * stable within major version 9, so they are written here rather than parsed from a header the
 * user's machine may not have.
 */

/** cudnnBackendDescriptorType_t. */
export const DESCRIPTOR = {
  POINTWISE: 0,
  ENGINE: 2,
  ENGINECFG: 3,
  ENGINEHEUR: 4,
  EXECUTION_PLAN: 5,
  OPERATION_POINTWISE: 13,
  OPERATIONGRAPH: 15,
  VARIANT_PACK: 16,
  TENSOR: 17,
  MATMUL: 18,
  OPERATION_MATMUL: 19,
  REDUCTION: 21,
  OPERATION_REDUCTION: 22,
  /** A re-view of a tensor with other dims/strides (the backward graph's Pᵀ, dSᵀ and K). */
  OPERATION_RESHAPE: 31,
  /** Gathers a paged K or V cache through its page table into a virtual tensor (cuDNN 9.5+). */
  OPERATION_PAGED_CACHE_LOAD: 35,
  OPERATION_SDPA_FWD: 41,
} as const;

/** cudnnBackendAttributeType_t: how the value array of an attribute is typed. */
export const ATTR_TYPE = {
  HANDLE: 0,
  DATA_TYPE: 1,
  BOOLEAN: 2,
  INT64: 3,
  FLOAT: 4,
  DOUBLE: 5,
  VOID_PTR: 6,
  HEUR_MODE: 8,
  NUMERICAL_NOTE: 11,
  POINTWISE_MODE: 14,
  BACKEND_DESCRIPTOR: 15,
  REDUCTION_OPERATOR_TYPE: 18,
  BEHAVIOR_NOTE: 19,
  INT32: 23,
  CHAR: 24,
} as const;

/** cudnnBackendAttributeName_t, grouped by the descriptor they belong to. */
export const ATTR = {
  POINTWISE_MODE: 0,
  POINTWISE_MATH_PREC: 1,
  POINTWISE_AXIS: 9,

  ENGINEHEUR_MODE: 200,
  ENGINEHEUR_OPERATION_GRAPH: 201,
  ENGINEHEUR_RESULTS: 202,

  ENGINECFG_ENGINE: 300,

  EXECUTION_PLAN_HANDLE: 400,
  EXECUTION_PLAN_ENGINE_CONFIG: 401,
  EXECUTION_PLAN_WORKSPACE_SIZE: 402,
  EXECUTION_PLAN_JSON_REPRESENTATION: 405,

  OPERATION_POINTWISE_PW_DESCRIPTOR: 750,
  OPERATION_POINTWISE_XDESC: 751,
  OPERATION_POINTWISE_BDESC: 752,
  OPERATION_POINTWISE_YDESC: 753,
  OPERATION_POINTWISE_ALPHA1: 754,
  OPERATION_POINTWISE_ALPHA2: 755,
  OPERATION_POINTWISE_TDESC: 758,

  OPERATIONGRAPH_HANDLE: 800,
  OPERATIONGRAPH_OPS: 801,

  TENSOR_BYTE_ALIGNMENT: 900,
  TENSOR_DATA_TYPE: 901,
  TENSOR_DIMENSIONS: 902,
  TENSOR_STRIDES: 903,
  TENSOR_UNIQUE_ID: 906,
  TENSOR_IS_VIRTUAL: 907,
  TENSOR_IS_BY_VALUE: 908,
  /** The (B+1) element offsets of a packed (ragged, THD) tensor's batches. */
  TENSOR_RAGGED_OFFSET_DESC: 913,

  VARIANT_PACK_UNIQUE_IDS: 1000,
  VARIANT_PACK_DATA_POINTERS: 1001,
  VARIANT_PACK_WORKSPACE: 1003,

  ENGINE_GLOBAL_INDEX: 1301,

  MATMUL_COMP_TYPE: 1500,
  OPERATION_MATMUL_ADESC: 1520,
  OPERATION_MATMUL_BDESC: 1521,
  OPERATION_MATMUL_CDESC: 1522,
  OPERATION_MATMUL_DESC: 1523,
  OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC: 1525,
  OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC: 1526,
  OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC: 1527,

  REDUCTION_OPERATOR: 1600,
  REDUCTION_COMP_TYPE: 1601,
  OPERATION_REDUCTION_XDESC: 1610,
  OPERATION_REDUCTION_YDESC: 1611,
  OPERATION_REDUCTION_DESC: 1612,

  OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC: 1950,
  OPERATION_PAGED_CACHE_LOAD_YDESC: 1951,
  OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC: 1952,
  OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC: 1953,

  OPERATION_RESHAPE_XDESC: 2200,
  OPERATION_RESHAPE_YDESC: 2201,

  OPERATION_SDPA_FWD_QDESC: 2800,
  OPERATION_SDPA_FWD_KDESC: 2801,
  OPERATION_SDPA_FWD_VDESC: 2802,
  OPERATION_SDPA_FWD_ODESC: 2803,
  OPERATION_SDPA_FWD_STATSDESC: 2804,
  OPERATION_SDPA_FWD_SCALEDESC: 2805,
  /** 9.15 and later: the unified op reads paged K/V containers through these tables. */
  OPERATION_SDPA_FWD_PAGE_TABLE_KDESC: 2807,
  OPERATION_SDPA_FWD_PAGE_TABLE_VDESC: 2808,
  /** 9.15 and later only (9.14's header stops at 2806). */
  OPERATION_SDPA_FWD_SEQ_LEN_QDESC: 2809,
  OPERATION_SDPA_FWD_SEQ_LEN_KVDESC: 2810,
} as const;

/** cudnnDataType_t. */
export const DATA_TYPE = {
  FLOAT: 0,
  HALF: 2,
  INT32: 4,
  BFLOAT16: 9,
  /** Ragged offsets from cuDNN 9.6 (cudnn-frontend's tests switch to int64 there). */
  INT64: 10,
  BOOLEAN: 11,
  /** FP8 with 4 exponent and 3 mantissa bits (the FP8 SDPA graph's Q, K, V, P and O). */
  FP8_E4M3: 12,
  /** FP8 with 5 exponent and 2 mantissa bits (the FP8 backward graph's gradients under HYBRID). */
  FP8_E5M2: 13,
} as const;

/** cudnnPointwiseMode_t (sparse: families start at 0, 100, 200, 300, 400, 500, 600). */
export const POINTWISE_MODE = {
  ADD: 0,
  MUL: 1,
  DIV: 6,
  SUB: 9,
  EXP: 13,
  LOG: 15,
  IDENTITY: 21,
  CMP_GT: 302,
  CMP_GE: 303,
  CMP_LT: 304,
  LOGICAL_AND: 400,
  GEN_INDEX: 501,
  BINARY_SELECT: 601,
} as const;

/** cudnnReduceTensorOp_t. */
export const REDUCTION_OPERATOR = { ADD: 0, MAX: 3, AMAX: 4 } as const;

/** cudnnBackendHeurMode_t. */
export const HEUR_MODE = { INSTANT: 0, B: 1, FALLBACK: 2, A: 3 } as const;

/** The first version whose unified SDPA_FWD op takes sequence lengths (attributes 2809/2810). */
export const CUDNN_UNIFIED_SEQ_LEN_VERSION = 91500;

/**
 * cuDNN 9 status codes are categories (2000 BAD_PARAM…, 3000 NOT_SUPPORTED…); the library's own
 * cudnnGetErrorString gives the exact name, this table is for when the library is not loaded.
 */
export function statusCategory(status: number): string {
  const base = Math.floor(status / 1000) * 1000;
  const names: Record<number, string> = {
    0: 'CUDNN_STATUS_SUCCESS',
    1000: 'CUDNN_STATUS_NOT_INITIALIZED',
    2000: 'CUDNN_STATUS_BAD_PARAM',
    3000: 'CUDNN_STATUS_NOT_SUPPORTED',
    4000: 'CUDNN_STATUS_INTERNAL_ERROR',
    5000: 'CUDNN_STATUS_EXECUTION_FAILED',
  };
  return names[base] ?? `cudnnStatus ${status}`;
}
