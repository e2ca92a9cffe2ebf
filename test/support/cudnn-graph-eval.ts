/**
 * A float64 interpreter of attnlab's cuDNN graph descriptions, for testing them without cuDNN.
 *
 * Each op is evaluated literally with the semantics cuDNN documents: pointwise ops broadcast size-1
 * dims, GEN_INDEX yields the index along its axis, BINARY_SELECT is `t ? x : b`, reductions reduce
 * the dims where the output has size 1, matmuls map a batch/head index onto an operand with fewer
 * heads by floor(i · dimOperand / dimOut) (GQA), and the GEMM overrides limit M/N/K per batch.
 * Inputs and outputs are read and written through the declared strides, so a wrong layout shows up
 * as a wrong answer. With `roundP` the tensor feeding the second matmul is rounded to its dtype.
 * A ragged tensor's batch b starts at element offsets[b] (its rows past its sequence's length are
 * neither read nor written: they belong to the next sequence), and a paged cache load
 * gathers pages through the table, reading 1000 (finite garbage only the mask can hide) past each
 * sequence's length.
 */

import type { CudnnEnvironment } from '../../src/backends/cuda/cudnn/features.js';
import type {
  GraphSpec,
  MemoryBinding,
  OpSpec,
  TensorSpec,
} from '../../src/backends/cuda/cudnn/graph-spec.js';
import { roundTo } from '../../src/tensor/dtype.js';

/** The machine the graph tests describe problems for (cuDNN 9.19 on an H200). */
export const H200: CudnnEnvironment = {
  version: 91900,
  computeCapability: { major: 9, minor: 0 },
  gpuName: 'NVIDIA H200',
};

export function maxError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i] - b[i]));
  return max;
}

export interface EvalInputs {
  /** Raw memory of each bound tensor, in attnlab's layout, decoded to float64. */
  readonly memory: Partial<Record<MemoryBinding, Float64Array>>;
  readonly scale: number;
  readonly roundP?: boolean;
  /** Elements of an output's memory where its dims do not say (a packed output: totalT·N·Hv). */
  readonly outputElements?: Partial<Record<MemoryBinding, number>>;
}

export interface EvalOutputs {
  /** Memory written for the output and stats bindings (zeros where the graph wrote nothing). */
  readonly output: Float64Array;
  readonly stats: Float64Array | null;
  /** Memory of every bound tensor some op writes (the backward's dQuery, dKey, …), by binding. */
  readonly written: Partial<Record<MemoryBinding, Float64Array>>;
}

type Values = Float64Array;

const size = (dims: readonly number[]) => dims.reduce((a, b) => a * b, 1);

function unravel(index: number, dims: readonly number[], out: number[]): void {
  for (let d = dims.length - 1; d >= 0; d--) {
    out[d] = index % dims[d];
    index = Math.floor(index / dims[d]);
  }
}

export function evaluateGraph(spec: GraphSpec, inputs: EvalInputs): EvalOutputs {
  const tensors = new Map<number, TensorSpec>(spec.tensors.map((t) => [t.uid, t]));
  const values = new Map<number, Values>();
  const written: Partial<Record<MemoryBinding, Float64Array>> = {};
  const lengths = (kind: 'seqLenQ' | 'seqLenKv') => inputs.memory[kind] ?? null;
  // A bound tensor that some op writes is an output; every other bound tensor is read from memory.
  const outputs = new Set(
    spec.ops.map((op) => (op.kind === 'matmul' ? op.c : op.kind === 'sdpa' ? op.o : op.y)),
  );

  /** Batch b's first element and row count of a ragged tensor, or null for a dense one. */
  const raggedOf = (t: TensorSpec): Ragged | null => {
    if (t.raggedOffset === undefined) return null;
    const kind = spec.bindings.get(t.raggedOffset)?.kind;
    const offsets = kind && kind !== 'scale' && kind !== 'constant' ? inputs.memory[kind] : undefined;
    if (!offsets) throw new Error(`no offsets for ragged tensor ${t.name}`);
    // The sequence dim is the one with the largest stride inside a batch (dim 3 of a transposed Kᵀ).
    const rowDim = [1, 2, 3].reduce((best, d) => (t.strides[d] > t.strides[best] ? d : best), 1);
    return { offsets, rowDim, rowStride: t.strides[rowDim] };
  };
  for (const t of spec.tensors) {
    const binding = spec.bindings.get(t.uid);
    if (!binding) continue;
    if (binding.kind === 'scale') values.set(t.uid, Float64Array.of(inputs.scale));
    else if (binding.kind === 'constant') values.set(t.uid, Float64Array.of(binding.value));
    else if (outputs.has(t.uid)) {
      const extent =
        inputs.outputElements?.[binding.kind] ??
        t.dims.reduce((end, d, i) => end + (d - 1) * t.strides[i], 1);
      written[binding.kind] = new Float64Array(extent).fill(binding.kind === 'stats' ? Number.NaN : 0);
    } else {
      const memory = inputs.memory[binding.kind];
      if (!memory) throw new Error(`no memory for ${binding.kind}`);
      values.set(t.uid, gather(t, memory, raggedOf(t)));
    }
  }
  const get = (uid: number) => {
    const v = values.get(uid);
    if (!v) throw new Error(`uid ${uid} read before it was written`);
    return v;
  };
  const put = (uid: number, v: Values) => {
    const t = tensors.get(uid) as TensorSpec;
    const binding = spec.bindings.get(uid);
    values.set(uid, v);
    const memory =
      binding && binding.kind !== 'scale' && binding.kind !== 'constant' ? written[binding.kind] : undefined;
    if (memory) scatter(t, v, memory, raggedOf(t));
  };

  for (const op of spec.ops) {
    if (op.kind === 'matmul') {
      const limits = (uid: number | undefined) => {
        const kind = uid === undefined ? undefined : spec.bindings.get(uid)?.kind;
        return kind === 'seqLenQ' || kind === 'seqLenKv' ? lengths(kind) : null;
      };
      put(op.c, matmul(op, tensors, get, limits));
    } else if (op.kind === 'pointwise') {
      const y = tensors.get(op.y) as TensorSpec;
      const out = pointwise(op, tensors, get);
      if (inputs.roundP && (y.dtype === 'half' || y.dtype === 'bfloat16')) {
        const dtype = y.dtype === 'half' ? 'float16' : 'bfloat16';
        for (let i = 0; i < out.length; i++) out[i] = roundTo(out[i], dtype);
      }
      put(op.y, out);
    } else if (op.kind === 'reduction') put(op.y, reduce(op, tensors, get));
    else if (op.kind === 'reshape')
      put(op.y, reshape(tensors.get(op.x) as TensorSpec, tensors.get(op.y) as TensorSpec, get(op.x)));
    else if (op.kind === 'paged_cache_load') put(op.y, pagedLoad(op, tensors, get));
    else throw new Error('the unified SDPA op is not interpreted here; test the composite graph');
  }
  return { output: written.output ?? new Float64Array(0), stats: written.stats ?? null, written };
}

/** A ragged tensor's B+1 element offsets, its sequence dim and that dim's stride. */
interface Ragged {
  readonly offsets: Float64Array;
  readonly rowDim: number;
  readonly rowStride: number;
}

/** The memory offset of logical `index` of `t`, or −1 for a ragged row past its sequence. */
function elementOffset(t: TensorSpec, index: readonly number[], ragged: Ragged | null): number {
  let offset = ragged ? ragged.offsets[index[0]] : index[0] * t.strides[0];
  const count = ragged ? ragged.offsets[index[0] + 1] - ragged.offsets[index[0]] : 0;
  if (ragged && index[ragged.rowDim] * ragged.rowStride >= count) return -1;
  for (let d = 1; d < index.length; d++) offset += index[d] * t.strides[d];
  return offset;
}

/** Logical [dims] values of a bound tensor read from memory through its strides (1000 past a ragged row's end). */
function gather(t: TensorSpec, memory: Float64Array, ragged: Ragged | null = null): Values {
  const out = new Float64Array(size(t.dims));
  const index: number[] = [];
  for (let i = 0; i < out.length; i++) {
    unravel(i, t.dims, index);
    const offset = elementOffset(t, index, ragged);
    out[i] = offset < 0 ? 1000 : memory[offset];
  }
  return out;
}

/** y[b, h, s, d] (or its transpose, strides[2] = 1) = container[table[b][s / blockSize], h, s % blockSize, d]. */
function pagedLoad(
  op: Extract<OpSpec, { kind: 'paged_cache_load' }>,
  tensors: Map<number, TensorSpec>,
  get: (uid: number) => Values,
): Values {
  const [c, y, table] = [op.container, op.y, op.pageTable].map((u) => tensors.get(u) as TensorSpec);
  const [container, pages, lengths] = [get(op.container), get(op.pageTable), get(op.sequence)];
  const [, heads, blockSize, width] = c.dims;
  const M = table.dims[2];
  const transposed = y.strides[2] === 1;
  const out = new Float64Array(size(y.dims));
  const at: number[] = [];
  for (let i = 0; i < out.length; i++) {
    unravel(i, y.dims, at);
    const [b, h] = at;
    const [s, d] = transposed ? [at[3], at[2]] : [at[2], at[3]];
    if (s >= lengths[b]) {
      out[i] = 1000;
      continue;
    }
    const block = pages[b * M + Math.floor(s / blockSize)];
    out[i] = container[((block * heads + h) * blockSize + (s % blockSize)) * width + d];
  }
  return out;
}

/** y's logical values: x written to memory through x's strides, read back through y's. */
function reshape(x: TensorSpec, y: TensorSpec, xv: Values): Values {
  const extent = x.dims.reduce((end, d, i) => end + (d - 1) * x.strides[i], 1);
  const memory = new Float64Array(extent);
  scatter(x, xv, memory);
  return gather(y, memory);
}

function scatter(t: TensorSpec, values: Values, memory: Float64Array, ragged: Ragged | null = null): void {
  const index: number[] = [];
  for (let i = 0; i < values.length; i++) {
    unravel(i, t.dims, index);
    const offset = elementOffset(t, index, ragged);
    if (offset >= 0) memory[offset] = values[i];
  }
}

/** Flat index into `dims` of the element that output index `at` (of `outDims`) reads. */
function broadcastIndex(at: readonly number[], outDims: readonly number[], dims: readonly number[]): number {
  let flat = 0;
  for (let d = 0; d < dims.length; d++) flat = flat * dims[d] + Math.floor((at[d] * dims[d]) / outDims[d]);
  return flat;
}

function pointwise(
  op: Extract<OpSpec, { kind: 'pointwise' }>,
  tensors: Map<number, TensorSpec>,
  get: (uid: number) => Values,
): Values {
  const y = tensors.get(op.y) as TensorSpec;
  const out = new Float64Array(size(y.dims));
  const operand = (uid: number | undefined) =>
    uid === undefined ? null : { t: tensors.get(uid) as TensorSpec, v: get(uid) };
  const [x, b, t] = [operand(op.x), operand(op.b), operand(op.t)];
  const at: number[] = [];
  const read = (o: { t: TensorSpec; v: Values } | null) =>
    o ? o.v[broadcastIndex(at, y.dims, o.t.dims)] : Number.NaN;
  for (let i = 0; i < out.length; i++) {
    unravel(i, y.dims, at);
    const [xv, bv] = [read(x), read(b)];
    switch (op.mode) {
      case 'add':
        out[i] = xv + bv;
        break;
      case 'sub':
        out[i] = xv - bv;
        break;
      case 'mul':
        out[i] = xv * bv;
        break;
      case 'div':
        out[i] = xv / bv;
        break;
      case 'exp':
        out[i] = Math.exp(xv);
        break;
      case 'log':
        out[i] = Math.log(xv);
        break;
      case 'identity':
        out[i] = xv;
        break;
      case 'cmp_gt':
        out[i] = xv > bv ? 1 : 0;
        break;
      case 'cmp_ge':
        out[i] = xv >= bv ? 1 : 0;
        break;
      case 'cmp_lt':
        out[i] = xv < bv ? 1 : 0;
        break;
      case 'logical_and':
        out[i] = xv && bv ? 1 : 0;
        break;
      case 'gen_index':
        out[i] = at[op.axis as number];
        break;
      case 'binary_select':
        out[i] = read(t) ? xv : bv;
        break;
    }
  }
  return out;
}

function reduce(
  op: Extract<OpSpec, { kind: 'reduction' }>,
  tensors: Map<number, TensorSpec>,
  get: (uid: number) => Values,
): Values {
  const x = tensors.get(op.x) as TensorSpec;
  const y = tensors.get(op.y) as TensorSpec;
  const out = new Float64Array(size(y.dims)).fill(op.operator === 'max' ? Number.NEGATIVE_INFINITY : 0);
  const combine =
    op.operator === 'max'
      ? Math.max
      : op.operator === 'amax'
        ? (a: number, x: number) => Math.max(a, Math.abs(x))
        : (a: number, x: number) => a + x;
  const xv = get(op.x);
  const at: number[] = [];
  for (let i = 0; i < xv.length; i++) {
    unravel(i, x.dims, at);
    // Dims of size 1 in y are summed over; a smaller head count sums each group (GQA's dK, dV).
    const j = broadcastIndex(
      at.map((a, d) => Math.floor((a * y.dims[d]) / x.dims[d])),
      y.dims,
      y.dims,
    );
    out[j] = combine(out[j], xv[i]);
  }
  return out;
}

function matmul(
  op: Extract<OpSpec, { kind: 'matmul' }>,
  tensors: Map<number, TensorSpec>,
  get: (uid: number) => Values,
  limits: (uid: number | undefined) => Float64Array | null,
): Values {
  const [a, b, c] = [op.a, op.b, op.c].map((u) => tensors.get(u) as TensorSpec);
  const [av, bv] = [get(op.a), get(op.b)];
  const [M, Kd, Nn] = [a.dims[2], a.dims[3], b.dims[3]];
  const limit = (uid: number | undefined, batch: number, full: number) => limits(uid)?.[batch] ?? full;
  const out = new Float64Array(size(c.dims));
  for (let n0 = 0; n0 < c.dims[0]; n0++)
    for (let n1 = 0; n1 < c.dims[1]; n1++) {
      const aBase = broadcastIndex([n0, n1, 0, 0], c.dims, a.dims);
      const bBase = broadcastIndex([n0, n1, 0, 0], c.dims, b.dims);
      const [mEnd, nEnd, kEnd] = [
        limit(op.mOverride, n0, M),
        limit(op.nOverride, n0, Nn),
        limit(op.kOverride, n0, Kd),
      ];
      for (let m = 0; m < mEnd; m++)
        for (let n = 0; n < nEnd; n++) {
          let acc = 0;
          for (let k = 0; k < kEnd; k++) acc += av[aBase + m * Kd + k] * bv[bBase + k * Nn + n];
          out[((n0 * c.dims[1] + n1) * M + m) * Nn + n] = acc;
        }
    }
  return out;
}
