/** The subgroup-matrix shape and subgroup size the sgmat kernel (sgmat-source.ts) is built for. */
export interface MatrixShape {
  readonly M: number;
  readonly N: number;
  readonly K: number;
  /** Invocations a subgroup: the adapter's subgroupMinSize, equal to its subgroupMaxSize. */
  readonly sg: number;
  /** The most keys a tile (timings compare 32 with the default 64); unset: 64. */
  readonly keys?: number;
  /** Subgroups a workgroup; unset: SGMAT_SUBGROUPS. */
  readonly subgroups?: number;
  /** Bytes each workgroup tile row is padded by: 16 unless the device check chose another (0, 64). */
  readonly pad?: number;
  /**
   * q's rows in a workgroup tile, each left matrix loaded where a product takes it, instead of
   * held in variables across the key loop (the device check's second choice: sgmat-check.ts).
   */
  readonly qTile?: boolean;
  /**
   * K's and V's tiles in two halves of workgroup memory that trade places every key tile, so no
   * matrix load reads the same address in consecutive iterations of the key loop (a device check
   * choice: sgmat-check.ts).
   */
  readonly pingPong?: boolean;
  /**
   * The accumulator in a workgroup tile, loaded, multiplied into and stored back every key tile,
   * instead of result matrices held across the key loop (a device check choice).
   */
  readonly oTile?: boolean;
  /**
   * Each score block's chain starts with a plain product (subgroupMatrixMultiply) instead of a
   * multiply-accumulate into a zero matrix made in the key loop.
   */
  readonly mulFirst?: boolean;
  /**
   * The workgroup's key range computed by every invocation over the query rows, with no atomics,
   * no branch on the invocation and no workgroupUniformLoad before the first matrix operation.
   */
  readonly flatPrologue?: boolean;
  /**
   * The barrier before each phase's matrix loads is a workgroupUniformLoad of an always-zero
   * variable whose value the loads' offsets add, so no load can be issued before that barrier.
   */
  readonly fence?: boolean;
  /** K's tile stored transposed (kᵀ: H rows of keys) and read as a row-major right matrix. */
  readonly kTransposed?: boolean;
  /**
   * The softmax's row reductions through workgroup memory instead of subgroupShuffleXor: no
   * subgroup operation in the kernel besides the matrices (as in the single-operation checks).
   */
  readonly noShuffle?: boolean;
  /**
   * Every workgroup variable a multiple of 16 bytes (the one-word variables grouped in 16-byte
   * arrays, the tiles rounded up to 128 bytes) and the tiles declared last, so no tile can start off
   * a 16-byte boundary, which the matrix loads and stores of NVIDIA's Vulkan driver assume
   * (sgmat-source.ts: sgmatWords).
   */
  readonly alignedTiles?: boolean;
}

/** The decode kernel's layout (decode-source.ts): invocations a key row, query rows a workgroup. */
export interface DecodeShape {
  /** Subgroup size (subgroupMinSize = subgroupMaxSize). */
  readonly sg: number;
  /** Invocations that share one key row. */
  readonly lk: number;
  /** Query rows a workgroup: (t, g) pairs of one KV head. */
  readonly rows: number;
  /**
   * Two keys a group each pass of the key loop (j and j + NG, both prefetched a pass ahead): their
   * scores' dot products and shuffle chains are independent, so each hides the other's latency.
   */
  readonly pairs?: boolean;
}

/**
 * The forward kernel's variant: what specialises its WGSL (dtype, head dims, tiles, masking
 * features, split-KV, vector width, layouts, lanes), its key (names the kernel in results, keys the
 * pipeline cache) and the binding order the launcher follows.
 */
export interface ForwardVariant {
  /**
   * 'rows': one query row per invocation (two with subgroups), forward-source.ts; the split-KV
   * decode path and head dims the tiled layout does not divide. 'tiled': register blocks of
   * scores and output over a 32-row query tile, tiled-source.ts. 'sgmat': the tiled loop with its
   * two products on subgroup matrices (tensor cores through Vulkan's cooperative matrices),
   * float16 only, where the device has them, sgmat-source.ts.
   */
  readonly kernel: 'rows' | 'tiled' | 'sgmat' | 'decode';
  /** The subgroup-matrix shape and subgroup size ('sgmat' only). */
  readonly matrix?: MatrixShape;
  /**
   * 'decode' (decode-source.ts): a few query rows, every row of one KV head in a workgroup, each key
   * row read by `lk` invocations; always split-KV. `rows` is the query rows a workgroup, `bc` is lk.
   */
  readonly decode?: DecodeShape;
  readonly dtype: 'float32' | 'float16' | 'bfloat16';
  readonly H: number;
  readonly Hv: number;
  /** Query rows per workgroup (one invocation each). */
  readonly rows: number;
  /** Keys per tile in workgroup memory. */
  readonly bc: number;
  readonly bias: 'float32' | 'float16' | 'bfloat16' | null;
  readonly mask: boolean;
  readonly causal: boolean;
  readonly window: boolean;
  readonly lengths: boolean;
  readonly lse: boolean;
  /**
   * Split-KV: the keys are cut into Params.splits chunks, each workgroup writes its chunk's
   * unnormalised accumulator, max and sum to scratch, and combineSource's kernel merges them. For
   * few query rows (decode) it is what gives the GPU enough workgroups.
   */
  readonly split: boolean;
  /**
   * Values per register: 4 (vec4f q, K/V tiles and accumulator: one 16-byte workgroup load and a
   * dot() per 4 products) where H and Hv are multiples of 4, else 1.
   */
  readonly vec: 4 | 1;
  /** Key and value are pools read through a block table (Params.paged: block size, table width). */
  readonly paged: boolean;
  /**
   * The tiled kernel: 4 where its softmax phase spreads each row over 4 invocations combined by
   * subgroupShuffleXor (tiled-source.ts), else 1. The row kernel: invocations per query row, 2 with subgroups (each holds half of q and of the accumulator, and
   * a score is its half-dot plus its partner's through subgroupShuffleXor: 2·H/2·4 bytes of
   * registers instead of 2·H·4, which at H=128 no longer spills past 255 registers), else 1.
   */
  readonly lanes: 1 | 2 | 4;
  /** Packed sequences: the query (and output) rows, and the key/value rows, start at OFFS entries. */
  readonly packedQuery: boolean;
  readonly packedKv: boolean;
}

/** The variant key: it names the kernel in results and keys the pipeline cache. */
export function variantKey(v: ForwardVariant): string {
  const flags = [
    v.causal ? 'causal' : '',
    v.window ? 'window' : '',
    v.lengths ? 'lengths' : '',
    v.bias ? `bias-${v.bias}` : '',
    v.mask ? 'mask' : '',
    v.lse ? 'lse' : '',
    v.split ? 'split' : '',
    v.vec === 4 ? 'v4' : '',
    v.paged ? 'paged' : '',
    v.packedQuery ? 'packedq' : '',
    v.packedKv ? 'packedkv' : '',
  ].filter(Boolean);
  const kernel =
    v.kernel === 'decode' && v.decode
      ? `decode-s${v.decode.sg}${v.decode.pairs ? 'k2' : ''}`
      : v.kernel === 'sgmat' && v.matrix
        ? `sgmat${v.matrix.M}x${v.matrix.N}x${v.matrix.K}s${v.matrix.sg}${v.matrix.pad !== undefined && v.matrix.pad !== 16 ? `p${v.matrix.pad}` : ''}${v.matrix.qTile ? 'q' : ''}${v.matrix.pingPong ? 'x' : ''}${v.matrix.oTile ? 'o' : ''}${v.matrix.mulFirst ? 'm' : ''}${v.matrix.flatPrologue ? 'f' : ''}${v.matrix.fence ? 'b' : ''}${v.matrix.kTransposed ? 't' : ''}${v.matrix.noShuffle ? 'w' : ''}${v.matrix.alignedTiles ? 'a' : ''}`
        : v.kernel === 'tiled'
          ? v.lanes === 4
            ? 'tiled-subgroups'
            : 'tiled'
          : v.lanes === 2
            ? 'subgroups'
            : 'plain';
  return `webgpu-flash-${kernel}-${v.dtype}-h${v.H}-hv${v.Hv}-r${v.rows}-c${v.bc}${flags.length ? `-${flags.join('-')}` : ''}`;
}

/** The binding numbers, in the order the launcher binds them. */
export function bindings(v: ForwardVariant): string[] {
  const outputs = v.split ? ['part_o', 'part_ml'] : ['o', ...(v.lse ? ['lse'] : [])];
  return [
    'params',
    'q',
    'k',
    'v',
    ...outputs,
    ...(v.bias ? ['bias'] : []),
    ...(v.mask ? ['mask'] : []),
    ...(v.lengths ? ['lengths'] : []),
    ...(v.paged ? ['table'] : []),
    ...(v.packedQuery || v.packedKv ? ['offsets'] : []),
  ];
}

/** The combine kernel's bindings (split variants only). */
export function combineBindings(v: ForwardVariant): string[] {
  return [
    'params',
    'part_o',
    'part_ml',
    'o',
    ...(v.lse ? ['lse'] : []),
    ...(v.packedQuery ? ['offsets'] : []),
  ];
}

/** Invocations of the combine kernel's workgroup, one workgroup a row; and the most splits a row has. */
export const COMBINE_WG = 64;
export const MAX_SPLITS = 64;
