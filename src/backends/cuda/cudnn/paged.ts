/**
 * The cudnn backend's paged KV cache and packed (ragged, THD) sequences, as cuDNN's composite SDPA
 * graph takes them (cudnn-frontend lowers its `paged_attention_k_table` / `set_ragged_offset` the
 * same way):
 *
 * - paged: key and value stay in their pools, declared as containers [numBlocks, K, blockSize, H]
 *   over attnlab's (numBlocks, blockSize, K, H) memory; a PAGED_CACHE_LOAD op gathers each into the
 *   virtual Kᵀ [B, K, H, S] (before Q·Kᵀ) and V [B, K, S, Hv] (before P·V) through an int32 page
 *   table [B, 1, maxBlocksPerSeq, 1] and the key/value lengths, with S = maxBlocksPerSeq·blockSize;
 * - packed: Q, O (and K, V when packed) carry a RAGGED_OFFSET tensor of B+1 element offsets
 *   (offsets[b]·heads·headDim), so batch b starts there instead of at b·strides[0].
 *
 * Both need the padding mask and its sequence lengths (cudnn-frontend refuses them without), which
 * describeSdpa turns on for every such problem. This file holds the support rules of the loaded
 * cuDNN and the graph's tensors; paged-call.ts the device buffers of one call.
 */
import type { AttentionProblem, ProblemSize } from '../../problem.js';
import type { GraphBuilder, GraphDType } from './graph-spec.js';

/** cuDNN 9.5.0 added the paged cache load (cudnn-frontend: "below 9.5.0, paged caches are not supported"). */
export const CUDNN_PAGED_VERSION = 90500;
/** Paged K/V beside a packed query: 9.7 (cudnn-frontend's support surface; its sample asks 9.8). */
export const CUDNN_PAGED_RAGGED_VERSION = 90700;
/** Head dims above 128 with a paged cache: after 9.9. */
export const CUDNN_PAGED_WIDE_HEADS_VERSION = 91000;
/** Ragged offsets before Hopper: 9.18.1. */
export const CUDNN_RAGGED_PRE_HOPPER_VERSION = 91801;
/** int64 ragged offsets from 9.6 (cudnn-frontend's tests switch there); int32 before. */
export const CUDNN_RAGGED_INT64_VERSION = 90600;
/** The unified SDPA_FWD op takes page tables (attributes 2807/2808) from 9.15. */
export const CUDNN_UNIFIED_PAGED_VERSION = 91500;

/**
 * Whether the unified op can run this layout: a paged cache with a dense query on cuDNN 9.15+ (the
 * caller adds the op's own limits: no bias, no mask bound beyond what a decode step drops). Only
 * when asked (ATTNLAB_CUDNN_GRAPH=unified): both pass test/gpu/decode/cudnn-paged.test.ts on the H200, but
 * only the composite graph's engine is known (sm80 wmma); the unified one's speed is unmeasured.
 */
export function unifiedTakesLayout(layout: LayoutFeatures, version: number): boolean {
  return layout.paged !== undefined && layout.ragged === undefined && version >= CUDNN_UNIFIED_PAGED_VERSION;
}

/** features.ts's CudnnEnvironment, structurally (features.ts imports this file). */
interface Environment {
  readonly version: number;
  readonly computeCapability: { readonly major: number; readonly minor: number };
  readonly gpuName: string;
}

/** How a paged or packed problem appears in the graph (part of the plan-cache key). */
export interface LayoutFeatures {
  readonly paged?: {
    readonly numBlocks: number;
    readonly blockSize: number;
    readonly maxBlocksPerSeq: number;
  };
  readonly ragged?: {
    readonly query: boolean;
    readonly keyValue: boolean;
    readonly offsets: 'int32' | 'int64';
  };
}

export type LayoutDescription = { ok: true; layout: LayoutFeatures } | { ok: false; reason: string };

const INT32_MAX = 2 ** 31 - 1;

/** The layout of `p` on this cuDNN, or why cuDNN cannot run it. `{}` for dense problems. */
export function describeLayout(p: AttentionProblem, env: Environment): LayoutDescription {
  const no = (reason: string): LayoutDescription => ({ ok: false, reason });
  if (!p.paged && !p.packed) return { ok: true, layout: {} };
  const packedQuery = p.packed?.querySeqOffsets != null;
  const packedKv = p.packed?.keyValueSeqOffsets != null;
  const v = env.version;
  const { major, minor } = env.computeCapability;
  if (p.paged && v < CUDNN_PAGED_VERSION) {
    return no(`cuDNN ${v} has no paged attention (PAGED_CACHE_LOAD needs 9.5.0 or later)`);
  }
  if (p.paged && (p.H > 128 || p.Hv > 128) && v < CUDNN_PAGED_WIDE_HEADS_VERSION) {
    return no(
      `cuDNN ${v} takes a paged KV cache with H, Hv ≤ 128 only (9.10 and later: ≤ 256), got H=${p.H}, Hv=${p.Hv}`,
    );
  }
  if (p.packed && major < 9 && v < CUDNN_RAGGED_PRE_HOPPER_VERSION) {
    return no(
      `packed (ragged) sequences need a Hopper GPU before cuDNN 9.18.1; ${env.gpuName} is ${major}.${minor} and cuDNN is ${v}`,
    );
  }
  if (p.paged && packedQuery && v < CUDNN_PAGED_RAGGED_VERSION) {
    return no(`cuDNN ${v} cannot read a paged KV cache with a packed query (9.7 and later can)`);
  }
  if (packedQuery && p.mask) {
    // The pass that writes zeros into rows a mask empties (masks.ts) indexes (B,T,N,Hv) rows.
    return no(
      'a boolean mask with a packed query: the empty-row pass after cuDNN indexes (B, T, N, Hv) rows only',
    );
  }
  if (p.B * p.T === 0 || p.S === 0) {
    return no(`no ${p.S === 0 ? 'key' : 'query'} row in any sequence: nothing for cuDNN to run`);
  }
  let ragged: LayoutFeatures['ragged'];
  if (p.packed) {
    const queryTotal = packedQuery ? (p.packed.querySeqOffsets as Int32Array)[p.B] : 0;
    const kvTotal = packedKv ? (p.packed.keyValueSeqOffsets as Int32Array)[p.B] : 0;
    const largest = Math.max(queryTotal * p.N * Math.max(p.H, p.Hv), kvTotal * p.K * Math.max(p.H, p.Hv));
    const wide = v >= CUDNN_RAGGED_INT64_VERSION;
    if (!wide && largest > INT32_MAX) {
      return no(`cuDNN ${v} takes int32 ragged offsets only; the packed tensors hold ${largest} elements`);
    }
    ragged = { query: packedQuery, keyValue: packedKv, offsets: wide ? 'int64' : 'int32' };
  }
  const paged = p.paged
    ? { numBlocks: p.paged.numBlocks, blockSize: p.paged.blockSize, maxBlocksPerSeq: p.paged.maxBlocksPerSeq }
    : undefined;
  return { ok: true, layout: { ...(paged ? { paged } : {}), ...(ragged ? { ragged } : {}) } };
}

/** What graphOperands needs of SdpaFeatures (structural: features.ts imports this file). */
interface Sizes extends ProblemSize, LayoutFeatures {
  readonly graph: 'unified' | 'composite';
  readonly Hv: number;
}

/** The graph's Q, K, V and O operands: dense, packed or paged. */
export interface GraphOperands {
  readonly query: number;
  readonly output: number;
  /**
   * The key for the first matmul (Kᵀ [B,K,H,S] in the composite graph, K [B,K,S,H] in the unified
   * op); with a paged cache this emits the K load, so call it just before Q·Kᵀ.
   */
  readonly key: (kvLengths: number | undefined) => number;
  /** V [B,K,S,Hv]; with a paged cache this emits the V load, so call it just before P·V. */
  readonly value: (kvLengths: number | undefined) => number;
  /** The unified op on a paged cache: key and value are the containers, read through these. */
  readonly pageTables?: { readonly k: number; readonly v: number };
}

/**
 * Declares Q, K, V and O in `g`, in that order (a dense problem gets the uids 1–4 it always had),
 * each packed tensor's offsets just before it, a paged cache's two page tables after O. Memory is
 * (B,T,N,H)-style, declared [b,h,s,d] with strides [s·h·d, d, h·d, 1]: a view, no copy.
 */
export function graphOperands(g: GraphBuilder, f: Sizes, io: GraphDType): GraphOperands {
  const { B, T, S, N, K, H, Hv } = f;
  const offsetsDtype: GraphDType = f.ragged?.offsets ?? 'int32';
  const offsets = (packed: boolean | undefined, name: string, kind: RaggedBinding) =>
    packed ? g.io(name, offsetsDtype, [B + 1, 1, 1, 1], [1, 1, 1, 1], { kind }) : undefined;
  const packedQuery = f.ragged?.query;
  const packedKv = f.ragged?.keyValue;
  const query = g.io(
    'Q',
    io,
    [B, N, T, H],
    [T * N * H, H, N * H, 1],
    { kind: 'query' },
    offsets(packedQuery, 'Q_offsets', 'raggedQuery'),
  );
  const paged = f.paged;
  if (!paged) {
    const kOffsets = offsets(packedKv, 'K_offsets', 'raggedKey');
    // The composite graph multiplies by Kᵀ, declared as a transposed view of the same memory.
    const k =
      f.graph === 'composite'
        ? g.io('K^T', io, [B, K, H, S], [S * K * H, H, 1, K * H], { kind: 'key' }, kOffsets)
        : g.io('K', io, [B, K, S, H], [S * K * H, H, K * H, 1], { kind: 'key' }, kOffsets);
    const vOffsets = offsets(packedKv, 'V_offsets', 'raggedValue');
    const v = g.io('V', io, [B, K, S, Hv], [S * K * Hv, Hv, K * Hv, 1], { kind: 'value' }, vOffsets);
    const output = declareOutput(g, f, io, offsets(packedQuery, 'O_offsets', 'raggedOutput'));
    return { query, output, key: () => k, value: () => v };
  }
  // Containers over the pools' (numBlocks, blockSize, K, X) memory, declared [numBlocks, K, blockSize, X].
  const { numBlocks, blockSize, maxBlocksPerSeq: M } = paged;
  const container = (name: string, X: number, kind: 'key' | 'value') =>
    g.io(name, io, [numBlocks, K, blockSize, X], [blockSize * K * X, X, K * X, 1], { kind });
  const keyContainer = container('K_container', H, 'key');
  const valueContainer = container('V_container', Hv, 'value');
  const output = declareOutput(g, f, io, offsets(packedQuery, 'O_offsets', 'raggedOutput'));
  // cudnn-frontend declares a table per cache; both are bound to the one uploaded table.
  const table = (name: string) => g.io(name, 'int32', [B, 1, M, 1], [M, M, 1, 1], { kind: 'pageTable' });
  const keyTable = table('page_table_k');
  const valueTable = table('page_table_v');
  if (f.graph === 'unified') {
    return {
      query,
      output,
      key: () => keyContainer,
      value: () => valueContainer,
      pageTables: { k: keyTable, v: valueTable },
    };
  }
  const load = (name: string, from: number, pageTable: number, dims: number[], strides: number[]) => {
    return (kvLengths: number | undefined) => {
      if (kvLengths === undefined) throw new Error('a paged cache load needs the key/value lengths tensor');
      const y = g.virtual(name, io, dims, strides);
      g.op({ kind: 'paged_cache_load', container: from, pageTable, sequence: kvLengths, y });
      return y;
    };
  };
  // The virtual layouts cudnn-frontend gives the loaded caches: Kᵀ in BHDS order, V in BHSD order.
  return {
    query,
    output,
    key: load('K^T_loaded', keyContainer, keyTable, [B, K, H, S], [H * S * K, H * S, 1, H]),
    value: load('V_loaded', valueContainer, valueTable, [B, K, S, Hv], [Hv * S * K, Hv * S, Hv, 1]),
  };
}

type RaggedBinding = 'raggedQuery' | 'raggedKey' | 'raggedValue' | 'raggedOutput';

function declareOutput(g: GraphBuilder, f: Sizes, io: GraphDType, raggedOffset: number | undefined): number {
  const { B, T, N, Hv } = f;
  return g.io('O', io, [B, N, T, Hv], [T * N * Hv, Hv, N * Hv, 1], { kind: 'output' }, raggedOffset);
}
