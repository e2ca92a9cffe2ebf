/**
 * A cuDNN operation graph as plain data: tensors (by uid) and operations, in the order cuDNN wants
 * them. Building the description is pure TypeScript, so the SDPA graphs can be checked on a machine
 * without cuDNN (test/unit/backends/cuda/cudnn/graph.test.ts evaluates them in float64); materialize.ts turns a
 * description into backend descriptors.
 */

/** The cuDNN data types a graph here uses. */
export type GraphDType =
  | 'float'
  | 'half'
  | 'bfloat16'
  | 'int32'
  | 'int64'
  | 'boolean'
  | 'fp8_e4m3'
  | 'fp8_e5m2';

export interface TensorSpec {
  readonly uid: number;
  readonly name: string;
  readonly dtype: GraphDType;
  readonly dims: readonly number[];
  readonly strides: readonly number[];
  /** Intermediate only: never in memory, never in the variant pack. */
  readonly virtual: boolean;
  /** A host scalar whose value is passed at execute time (scale, −inf, window offsets). */
  readonly byValue: boolean;
  /**
   * A packed (ragged, THD) tensor: the uid of its (B+1) offsets tensor, where batch b starts at
   * element offsets[b] instead of b · strides[0].
   */
  readonly raggedOffset?: number;
}

export type PointwiseMode =
  | 'add'
  | 'mul'
  | 'div'
  | 'sub'
  | 'exp'
  | 'log'
  | 'identity'
  | 'cmp_gt'
  | 'cmp_ge'
  | 'cmp_lt'
  | 'logical_and'
  | 'gen_index'
  | 'binary_select';

export type OpSpec =
  | {
      readonly kind: 'matmul';
      readonly a: number;
      readonly b: number;
      readonly c: number;
      /** Per-batch row / column / inner-dimension limits (sequence-length tensors), for padding. */
      readonly mOverride?: number;
      readonly nOverride?: number;
      readonly kOverride?: number;
    }
  | {
      readonly kind: 'pointwise';
      readonly mode: PointwiseMode;
      /** The precision the op computes in (MATH_PREC). */
      readonly precision: GraphDType;
      readonly x: number;
      readonly b?: number;
      /** BINARY_SELECT's condition: y = t ? x : b. */
      readonly t?: number;
      readonly y: number;
      readonly axis?: number;
    }
  | {
      readonly kind: 'reduction';
      readonly operator: 'max' | 'add' | 'amax';
      readonly x: number;
      readonly y: number;
    }
  | {
      /**
       * y (virtual [B, K, H, S] Kᵀ or [B, K, S, Hv] V) gathered from a paged container
       * [numBlocks, K, blockSize, H] through pageTable [B, 1, maxBlocksPerSeq, 1], `sequence` tokens
       * per batch (the key/value lengths).
       */
      readonly kind: 'paged_cache_load';
      readonly container: number;
      readonly pageTable: number;
      readonly sequence: number;
      readonly y: number;
    }
  | {
      /** y is x re-viewed through y's dims and strides (the same elements, e.g. a transpose). */
      readonly kind: 'reshape';
      readonly x: number;
      readonly y: number;
    }
  | {
      readonly kind: 'sdpa';
      readonly q: number;
      readonly k: number;
      readonly v: number;
      readonly o: number;
      readonly scale: number;
      readonly stats?: number;
      readonly seqLenQ?: number;
      readonly seqLenKv?: number;
      /** A paged cache: k and v are its containers, read through these page tables (9.15+). */
      readonly pageTableK?: number;
      readonly pageTableV?: number;
    };

/**
 * The device tensors a graph can read or write. The forward writes output and stats; the backward
 * reads them with dOutput and writes dQuery, dKey, dValue, dBias and two float32 scratch tensors
 * (softmaxSum = rowsum(dO∘O), dQueryAccum) that live in the call's memory.
 */
export type MemoryBinding =
  | 'query'
  | 'key'
  | 'value'
  | 'output'
  | 'stats'
  | 'bias'
  | 'seqLenQ'
  | 'seqLenKv'
  | 'pageTable'
  | 'raggedQuery'
  | 'raggedKey'
  | 'raggedValue'
  | 'raggedOutput'
  | 'dOutput'
  | 'dQuery'
  | 'dKey'
  | 'dValue'
  | 'dBias'
  | 'softmaxSum'
  | 'dQueryAccum';

/** What a non-virtual tensor is bound to at execute time. */
export type Binding =
  | { readonly kind: MemoryBinding }
  | { readonly kind: 'scale' }
  | { readonly kind: 'constant'; readonly dtype: 'float' | 'int32'; readonly value: number };

export interface GraphSpec {
  readonly tensors: readonly TensorSpec[];
  readonly ops: readonly OpSpec[];
  /** uid → what goes into the variant pack for it; every non-virtual tensor has one. */
  readonly bindings: ReadonlyMap<number, Binding>;
}

/** Collects tensors and ops; uids are handed out in order, so the same problem gives the same graph. */
export class GraphBuilder {
  readonly #tensors: TensorSpec[] = [];
  readonly #ops: OpSpec[] = [];
  readonly #bindings = new Map<number, Binding>();
  #nextUid = 1;

  /**
   * A tensor in memory (an input or output), bound to `binding` at execute time; `raggedOffset`
   * (an offsets tensor made before it) makes it packed.
   */
  io(
    name: string,
    dtype: GraphDType,
    dims: readonly number[],
    strides: readonly number[],
    binding: Binding,
    raggedOffset?: number,
  ): number {
    const spec = { name, dtype, dims, strides, virtual: false, byValue: false };
    const uid = this.#add(raggedOffset === undefined ? spec : { ...spec, raggedOffset });
    this.#bindings.set(uid, binding);
    return uid;
  }

  /** An intermediate the engine keeps on chip. */
  virtual(name: string, dtype: GraphDType, dims: readonly number[], strides: readonly number[]): number {
    return this.#add({ name, dtype, dims, strides, virtual: true, byValue: false });
  }

  /**
   * A host scalar. `rank` is 4 in the composite graph (its pointwise ops need operands of equal rank:
   * a 1-D scalar fails with "xDesc.getNbDims() != bDesc.getNbDims()") and 1 for the unified op.
   */
  scalar(name: string, binding: Binding, rank = 4): number {
    const dtype = binding.kind === 'constant' ? binding.dtype : 'float';
    const ones = new Array<number>(rank).fill(1);
    const uid = this.#add({ name, dtype, dims: ones, strides: ones, virtual: false, byValue: true });
    this.#bindings.set(uid, binding);
    return uid;
  }

  op(op: OpSpec): void {
    this.#ops.push(op);
  }

  tensor(uid: number): TensorSpec {
    const found = this.#tensors.find((t) => t.uid === uid);
    if (!found) throw new Error(`graph builder: no tensor with uid ${uid}`);
    return found;
  }

  build(): GraphSpec {
    return { tensors: [...this.#tensors], ops: [...this.#ops], bindings: new Map(this.#bindings) };
  }

  #add(spec: Omit<TensorSpec, 'uid'>): number {
    const uid = this.#nextUid++;
    this.#tensors.push({ uid, ...spec });
    return uid;
  }
}

/** Row-major strides of `dims`. */
export function contiguousStrides(dims: readonly number[]): number[] {
  const strides = new Array<number>(dims.length);
  let stride = 1;
  for (let d = dims.length - 1; d >= 0; d--) {
    strides[d] = stride;
    stride *= dims[d];
  }
  return strides;
}
