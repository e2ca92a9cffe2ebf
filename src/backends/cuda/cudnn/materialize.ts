/**
 * GraphSpec → cuDNN backend descriptors: every tensor, every operation, then the operation graph,
 * each finalized as it is made so that a malformed piece fails at its own call (with cuDNN's reason)
 * rather than later at plan time.
 */

import { createDescriptor, destroyDescriptor, finalize, set } from '../ffi/cudnn.js';
import {
  ATTR,
  ATTR_TYPE,
  DATA_TYPE,
  DESCRIPTOR,
  POINTWISE_MODE,
  REDUCTION_OPERATOR,
} from '../ffi/cudnn-constants.js';
import type { GraphDType, GraphSpec, OpSpec, PointwiseMode, TensorSpec } from './graph-spec.js';

const DATA_TYPES: Record<GraphDType, number> = {
  float: DATA_TYPE.FLOAT,
  half: DATA_TYPE.HALF,
  bfloat16: DATA_TYPE.BFLOAT16,
  int32: DATA_TYPE.INT32,
  int64: DATA_TYPE.INT64,
  boolean: DATA_TYPE.BOOLEAN,
  fp8_e4m3: DATA_TYPE.FP8_E4M3,
  fp8_e5m2: DATA_TYPE.FP8_E5M2,
};

const MODES: Record<PointwiseMode, number> = {
  add: POINTWISE_MODE.ADD,
  mul: POINTWISE_MODE.MUL,
  div: POINTWISE_MODE.DIV,
  sub: POINTWISE_MODE.SUB,
  exp: POINTWISE_MODE.EXP,
  log: POINTWISE_MODE.LOG,
  identity: POINTWISE_MODE.IDENTITY,
  cmp_gt: POINTWISE_MODE.CMP_GT,
  cmp_ge: POINTWISE_MODE.CMP_GE,
  cmp_lt: POINTWISE_MODE.CMP_LT,
  logical_and: POINTWISE_MODE.LOGICAL_AND,
  gen_index: POINTWISE_MODE.GEN_INDEX,
  binary_select: POINTWISE_MODE.BINARY_SELECT,
};

/** A finalized operation graph and every descriptor behind it (destroyed together). */
export interface MaterializedGraph {
  readonly graph: bigint;
  readonly descriptors: readonly bigint[];
}

export function materializeGraph(spec: GraphSpec, handle: bigint): MaterializedGraph {
  const owned: bigint[] = [];
  const make = (type: number) => {
    const d = createDescriptor(type);
    owned.push(d);
    return d;
  };
  try {
    const tensors = new Map<number, bigint>();
    const desc = (uid: number) => {
      const d = tensors.get(uid);
      if (d === undefined) throw new Error(`cuDNN graph: operation refers to unknown tensor uid ${uid}`);
      return d;
    };
    // In uid order: a ragged tensor's offsets tensor is made (and finalized) before it.
    for (const t of spec.tensors) tensors.set(t.uid, tensorDescriptor(t, make, desc));
    const ops = spec.ops.map((op, index) => operationDescriptor(op, index, desc, make));
    const graph = make(DESCRIPTOR.OPERATIONGRAPH);
    set.handle(graph, ATTR.OPERATIONGRAPH_HANDLE, handle);
    set.descriptors(graph, ATTR.OPERATIONGRAPH_OPS, ops);
    finalize(graph, `operation graph of ${ops.length} ops`);
    return { graph, descriptors: owned };
  } catch (error) {
    destroyAll(owned);
    throw error;
  }
}

/** Destroys descriptors, newest first (an op graph before the ops and tensors it refers to). */
export function destroyAll(descriptors: readonly bigint[]): void {
  for (let i = descriptors.length - 1; i >= 0; i--) destroyDescriptor(descriptors[i]);
}

function tensorDescriptor(
  t: TensorSpec,
  make: (type: number) => bigint,
  desc: (uid: number) => bigint,
): bigint {
  const d = make(DESCRIPTOR.TENSOR);
  set.enumValue(d, ATTR.TENSOR_DATA_TYPE, ATTR_TYPE.DATA_TYPE, DATA_TYPES[t.dtype]);
  set.int64(d, ATTR.TENSOR_DIMENSIONS, t.dims);
  set.int64(d, ATTR.TENSOR_STRIDES, t.strides);
  set.int64(d, ATTR.TENSOR_UNIQUE_ID, [t.uid]);
  // 16-byte alignment lets the tensor-core engines run; attnlab's pool hands out 256-byte blocks.
  set.int64(d, ATTR.TENSOR_BYTE_ALIGNMENT, [16]);
  if (t.virtual) set.boolean(d, ATTR.TENSOR_IS_VIRTUAL, true);
  if (t.byValue) set.boolean(d, ATTR.TENSOR_IS_BY_VALUE, true);
  if (t.raggedOffset !== undefined)
    set.descriptors(d, ATTR.TENSOR_RAGGED_OFFSET_DESC, [desc(t.raggedOffset)]);
  finalize(d, `tensor ${t.name} (uid ${t.uid})`);
  return d;
}

function operationDescriptor(
  op: OpSpec,
  index: number,
  desc: (uid: number) => bigint,
  make: (type: number) => bigint,
): bigint {
  switch (op.kind) {
    case 'matmul': {
      const matmul = make(DESCRIPTOR.MATMUL);
      set.enumValue(matmul, ATTR.MATMUL_COMP_TYPE, ATTR_TYPE.DATA_TYPE, DATA_TYPE.FLOAT);
      finalize(matmul, `matmul descriptor of op ${index}`);
      const d = make(DESCRIPTOR.OPERATION_MATMUL);
      set.descriptors(d, ATTR.OPERATION_MATMUL_ADESC, [desc(op.a)]);
      set.descriptors(d, ATTR.OPERATION_MATMUL_BDESC, [desc(op.b)]);
      set.descriptors(d, ATTR.OPERATION_MATMUL_CDESC, [desc(op.c)]);
      set.descriptors(d, ATTR.OPERATION_MATMUL_DESC, [matmul]);
      if (op.mOverride !== undefined)
        set.descriptors(d, ATTR.OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, [desc(op.mOverride)]);
      if (op.nOverride !== undefined)
        set.descriptors(d, ATTR.OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, [desc(op.nOverride)]);
      if (op.kOverride !== undefined)
        set.descriptors(d, ATTR.OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, [desc(op.kOverride)]);
      finalize(d, `matmul op ${index}`);
      return d;
    }
    case 'pointwise': {
      const pw = make(DESCRIPTOR.POINTWISE);
      set.enumValue(pw, ATTR.POINTWISE_MODE, ATTR_TYPE.POINTWISE_MODE, MODES[op.mode]);
      set.enumValue(pw, ATTR.POINTWISE_MATH_PREC, ATTR_TYPE.DATA_TYPE, DATA_TYPES[op.precision]);
      if (op.axis !== undefined) set.int64(pw, ATTR.POINTWISE_AXIS, [op.axis]);
      finalize(pw, `pointwise descriptor of op ${index} (${op.mode})`);
      const d = make(DESCRIPTOR.OPERATION_POINTWISE);
      set.descriptors(d, ATTR.OPERATION_POINTWISE_PW_DESCRIPTOR, [pw]);
      set.descriptors(d, ATTR.OPERATION_POINTWISE_XDESC, [desc(op.x)]);
      if (op.b !== undefined) set.descriptors(d, ATTR.OPERATION_POINTWISE_BDESC, [desc(op.b)]);
      if (op.t !== undefined) set.descriptors(d, ATTR.OPERATION_POINTWISE_TDESC, [desc(op.t)]);
      set.descriptors(d, ATTR.OPERATION_POINTWISE_YDESC, [desc(op.y)]);
      set.float(d, ATTR.OPERATION_POINTWISE_ALPHA1, 1);
      set.float(d, ATTR.OPERATION_POINTWISE_ALPHA2, 1);
      finalize(d, `pointwise op ${index} (${op.mode})`);
      return d;
    }
    case 'reduction': {
      const reduction = make(DESCRIPTOR.REDUCTION);
      const operator = {
        max: REDUCTION_OPERATOR.MAX,
        add: REDUCTION_OPERATOR.ADD,
        amax: REDUCTION_OPERATOR.AMAX,
      }[op.operator];
      set.enumValue(reduction, ATTR.REDUCTION_OPERATOR, ATTR_TYPE.REDUCTION_OPERATOR_TYPE, operator);
      set.enumValue(reduction, ATTR.REDUCTION_COMP_TYPE, ATTR_TYPE.DATA_TYPE, DATA_TYPE.FLOAT);
      finalize(reduction, `reduction descriptor of op ${index}`);
      const d = make(DESCRIPTOR.OPERATION_REDUCTION);
      set.descriptors(d, ATTR.OPERATION_REDUCTION_XDESC, [desc(op.x)]);
      set.descriptors(d, ATTR.OPERATION_REDUCTION_YDESC, [desc(op.y)]);
      set.descriptors(d, ATTR.OPERATION_REDUCTION_DESC, [reduction]);
      finalize(d, `reduction op ${index} (${op.operator})`);
      return d;
    }
    case 'paged_cache_load': {
      const d = make(DESCRIPTOR.OPERATION_PAGED_CACHE_LOAD);
      set.descriptors(d, ATTR.OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, [desc(op.container)]);
      set.descriptors(d, ATTR.OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, [desc(op.pageTable)]);
      set.descriptors(d, ATTR.OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, [desc(op.sequence)]);
      set.descriptors(d, ATTR.OPERATION_PAGED_CACHE_LOAD_YDESC, [desc(op.y)]);
      finalize(d, `paged cache load op ${index}`);
      return d;
    }
    case 'reshape': {
      const d = make(DESCRIPTOR.OPERATION_RESHAPE);
      set.descriptors(d, ATTR.OPERATION_RESHAPE_XDESC, [desc(op.x)]);
      set.descriptors(d, ATTR.OPERATION_RESHAPE_YDESC, [desc(op.y)]);
      finalize(d, `reshape op ${index}`);
      return d;
    }
    case 'sdpa': {
      const d = make(DESCRIPTOR.OPERATION_SDPA_FWD);
      set.descriptors(d, ATTR.OPERATION_SDPA_FWD_QDESC, [desc(op.q)]);
      set.descriptors(d, ATTR.OPERATION_SDPA_FWD_KDESC, [desc(op.k)]);
      set.descriptors(d, ATTR.OPERATION_SDPA_FWD_VDESC, [desc(op.v)]);
      set.descriptors(d, ATTR.OPERATION_SDPA_FWD_ODESC, [desc(op.o)]);
      set.descriptors(d, ATTR.OPERATION_SDPA_FWD_SCALEDESC, [desc(op.scale)]);
      if (op.stats !== undefined) set.descriptors(d, ATTR.OPERATION_SDPA_FWD_STATSDESC, [desc(op.stats)]);
      if (op.seqLenQ !== undefined)
        set.descriptors(d, ATTR.OPERATION_SDPA_FWD_SEQ_LEN_QDESC, [desc(op.seqLenQ)]);
      if (op.seqLenKv !== undefined)
        set.descriptors(d, ATTR.OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, [desc(op.seqLenKv)]);
      if (op.pageTableK !== undefined)
        set.descriptors(d, ATTR.OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, [desc(op.pageTableK)]);
      if (op.pageTableV !== undefined)
        set.descriptors(d, ATTR.OPERATION_SDPA_FWD_PAGE_TABLE_VDESC, [desc(op.pageTableV)]);
      finalize(d, 'SDPA_FWD op');
      return d;
    }
  }
}
