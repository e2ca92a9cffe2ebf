/**
 * What shapes a cuDNN attention graph, read off a validated problem: the graph kind, sizes, dtype,
 * mask bounds, bias layout, padding and the statistics output. The same object keys the plan cache
 * (its JSON is the graph key), so everything that changes the graph is in it and nothing else:
 * the scale is a by-value scalar passed at execute time, and sequence-length values live on the device.
 *
 * It also says, in words, why cuDNN cannot run a problem; the backend's `plan()` returns that reason.
 */
import { config } from '../../../config.js';
import type { AttentionProblem, CausalAlignment, ProblemSize } from '../../problem.js';
import { CUDNN_UNIFIED_SEQ_LEN_VERSION } from '../ffi/cudnn-constants.js';
import { describeLayout, type LayoutFeatures, unifiedTakesLayout } from './paged.js';

export type GraphKind = 'unified' | 'composite';

/**
 * Where the log-sum-exp goes: 'btn' writes attnlab's (B,T,N) layout directly through the Stats
 * tensor's strides; 'bnt' is cuDNN's default [B,N,T,1] layout, transposed afterwards.
 */
export type StatsLayout = 'none' | 'btn' | 'bnt';

/** `paged` and `ragged` (paged.ts) are absent for dense problems, so their keys are as they were. */
export interface SdpaFeatures extends ProblemSize, LayoutFeatures {
  readonly graph: GraphKind;
  readonly dtype: 'float16' | 'bfloat16';
  readonly Hv: number;
  /** Sequence lengths given (both tensors go in; a missing side is filled with T or S). */
  readonly padding: boolean;
  /** Keys j ≤ i + d + right stay (causal is right = 0); null when unbounded. */
  readonly right: number | null;
  /** Keys j ≥ i + d − left stay; null when unbounded. */
  readonly left: number | null;
  /** d = 0 ('top_left') or S_b − T_b ('bottom_right'); normalised to top_left when d is always 0. */
  readonly alignment: CausalAlignment;
  /** The bias as cuDNN sees it: dims (1|B, 1|N, T, S) and element strides. */
  readonly bias: { readonly dims: readonly number[]; readonly strides: readonly number[] } | null;
  readonly stats: StatsLayout;
}

/** What the backend knows about the machine when it judges a problem. */
export interface CudnnEnvironment {
  readonly version: number;
  readonly computeCapability: { readonly major: number; readonly minor: number };
  readonly gpuName: string;
}

export interface DescribeOptions {
  /** Force a graph kind (tests, benchmarks); an impossible choice is reported as a reason. */
  readonly graph?: GraphKind;
  readonly statsLayout?: Exclude<StatsLayout, 'none'>;
  /** Leave rows that see no key as cuDNN writes them (to observe what it does with them). */
  readonly rawEmptyRows?: boolean;
}

/**
 * Device work around cuDNN that does not change the graph (masks.ts): `convertBias` builds the bias
 * tensor from a boolean mask and/or a bias broadcast over T or S; `fixEmptyRows` writes the rule's
 * zeros and −inf into rows that may see no key (always with a mask, whose contents the host never reads).
 */
export interface Preparation {
  readonly convertBias: boolean;
  readonly fixEmptyRows: boolean;
  /** A bottom-right right bound applied by the bias conversion instead of the graph, or null. */
  readonly foldedRight: number | null;
}

export type Description =
  | { ok: true; features: SdpaFeatures; key: string; prepare: Preparation }
  | { ok: false; reason: string };

const MAX_HEAD_DIM = 256;

/** The default layout of the log-sum-exp output (see StatsLayout). */
export const DEFAULT_STATS_LAYOUT: Exclude<StatsLayout, 'none'> = 'btn';

/** The features of `p` on this machine, or the reason cuDNN cannot run it. Cheap: O(B). */
export function describeSdpa(
  p: AttentionProblem,
  env: CudnnEnvironment,
  options: DescribeOptions = {},
): Description {
  const no = (reason: string): Description => ({ ok: false, reason });
  if (p.dtype !== 'float16' && p.dtype !== 'bfloat16') {
    return no(`cuDNN fused attention takes float16 or bfloat16 inputs, got ${p.dtype}`);
  }
  const { major, minor } = env.computeCapability;
  if (major < 8)
    return no(
      `cuDNN fused attention needs compute capability 8.0 or newer; ${env.gpuName} is ${major}.${minor}`,
    );
  if (p.H % 8 !== 0 || p.Hv % 8 !== 0 || p.H > MAX_HEAD_DIM || p.Hv > MAX_HEAD_DIM) {
    return no(`head dims must be multiples of 8 and at most ${MAX_HEAD_DIM}, got H=${p.H}, Hv=${p.Hv}`);
  }
  const layout = describeLayout(p, env);
  if (!layout.ok) return no(layout.reason);
  const laidOut = p.paged !== null || p.packed !== null;
  // Paged and packed problems always carry lengths (a paged cache's, or the offsets'): padding is on.
  const given = p.querySeqLengths !== null || p.keyValueSeqLengths !== null;
  const windowRight = p.window ? p.window.right : Number.POSITIVE_INFINITY;
  const rightValue = p.causal ? Math.min(windowRight, 0) : windowRight;
  // A bound of max(T, S) or more masks nothing (|i + d − j| < max(T, S) for every valid pair), so it
  // is dropped: fewer mask ops, and a window-free graph may take the unified op.
  const reach = Math.max(p.T, p.S);
  let right = rightValue < reach ? rightValue : null;
  // Bottom-right with right ≥ T − 1 keeps every key below S_b for every row: a paged or packed
  // decode step needs no causal mask ops (i + S_b − T_b + right ≥ S_b − 1 for all i ≥ 0).
  if (laidOut && p.alignment === 'bottom_right' && right !== null && right >= p.T - 1) right = null;
  const leftValue = p.window ? p.window.left : Number.POSITIVE_INFINITY;
  const left = leftValue < reach ? leftValue : null;
  if (right !== null && right < 0) return no(`the window's right bound must be ≥ 0 for cuDNN, got ${right}`);
  if (left !== null && left < 0) return no(`the window's left bound must be ≥ 0 for cuDNN, got ${left}`);
  const bounded = right !== null || left !== null;
  const alignment: CausalAlignment = bounded && (given || p.T !== p.S) ? p.alignment : 'top_left';
  // cuDNN runs a bottom-right diagonal or a left bound with T > S only through sequence lengths
  // (cudnn-frontend refuses them without): full lengths T and S are passed then, ~7% slower.
  const padding = given || (p.T > p.S && ((bounded && alignment === 'bottom_right') || left !== null));
  if (left !== null && right === null && env.version === 91400 && p.S > 1024) {
    return no('cuDNN 9.14.0 computes a non-causal window wrongly when S > 1024 (fixed in 9.14.1)');
  }
  let bias: SdpaFeatures['bias'] = null;
  let convertBias = false;
  if (p.bias && p.bias.tensor.dtype !== p.dtype) {
    return no(`the bias must have the inputs' dtype ${p.dtype}, got ${p.bias.tensor.dtype}`);
  }
  // cuDNN takes no bias beside a bottom-right right bound: the bound then goes into the converted
  // bias (fill where j > i + S_b − T_b + right) and leaves the graph, which then skips no tiles.
  const foldedRight = (p.bias || p.mask) && right !== null && alignment === 'bottom_right' ? right : null;
  if (p.bias || p.mask) {
    const converted = biasLayout(p, foldedRight !== null, foldedRight !== null && given);
    convertBias = converted.convert;
    bias = converted.bias;
  }
  const fixEmptyRows =
    !options.rawEmptyRows && (p.mask !== null || firstEmptyRow(p, right, left, alignment) !== null);
  const unifiedOk =
    (!laidOut || unifiedTakesLayout(layout.layout, env.version)) &&
    !bias &&
    !bounded &&
    (!padding || env.version >= CUDNN_UNIFIED_SEQ_LEN_VERSION);
  // Paged and packed inputs take the composite graph (the one verified on the H200) unless the
  // unified op is asked for and can run them (a paged cache on 9.15+, see unifiedTakesLayout).
  const configured = config().experimental.cudnnGraph ?? undefined;
  const layoutGraph = configured === 'unified' && unifiedOk ? 'unified' : 'composite';
  const wanted = options.graph ?? (laidOut ? layoutGraph : configured);
  if (wanted === 'unified' && !unifiedOk) {
    return no(
      `the unified SDPA op of cuDNN ${env.version} cannot take bias, causal, windows, packed inputs or (before 9.15) padding or a paged cache`,
    );
  }
  const features: SdpaFeatures = {
    graph: wanted ?? (unifiedOk ? 'unified' : 'composite'),
    dtype: p.dtype,
    B: p.B,
    T: p.T,
    S: p.S,
    N: p.N,
    K: p.K,
    H: p.H,
    Hv: p.Hv,
    padding,
    right: foldedRight !== null ? null : right,
    left,
    alignment,
    bias,
    // A packed query's log-sum-exp is written (B,T,N) and packed afterwards (paged-call.ts).
    stats: p.returnLogSumExp ? (laidOut ? 'btn' : (options.statsLayout ?? DEFAULT_STATS_LAYOUT)) : 'none',
    ...layout.layout,
  };
  return {
    ok: true,
    features,
    key: JSON.stringify(features),
    prepare: { convertBias, fixEmptyRows, foldedRight },
  };
}

/**
 * The bias as cuDNN reads it. cuDNN takes dims (1|B, 1|N, T, S) with T and S in memory; a bias of
 * the inputs' dtype broadcast only over B or N is read in place, with the packed stride of the dims
 * inside for each size-1 dim. A mask, or a bias broadcast over T or S, is converted (masks.ts) into
 * a packed (1|B, 1|N, T, S) tensor, B and N kept where either operand varies along them (B also
 * when `perBatch`: a folded bottom-right bound that moves with each batch's lengths); so is any
 * bias when `mustConvert` (a bound folded into it).
 */
function biasLayout(
  p: AttentionProblem,
  mustConvert: boolean,
  perBatch: boolean,
): { bias: NonNullable<SdpaFeatures['bias']>; convert: boolean } {
  const varies = (d: 0 | 1) =>
    (d === 0 && perBatch) || (p.bias?.strides[d] ?? 0) !== 0 || (p.mask?.strides[d] ?? 0) !== 0;
  const dims = [varies(0) ? p.B : 1, varies(1) ? p.N : 1, p.T, p.S];
  const inPlace =
    !mustConvert &&
    p.bias &&
    !p.mask &&
    (p.bias.strides[2] !== 0 || p.T === 1) &&
    (p.bias.strides[3] !== 0 || p.S === 1);
  const strides = inPlace && p.bias ? [...p.bias.strides] : [0, 0, 0, 0];
  for (let d = 3; d >= 0; d--) {
    if (!inPlace || dims[d] === 1 || strides[d] === 0)
      strides[d] = d === 3 ? 1 : strides[d + 1] * dims[d + 1];
  }
  return { bias: { dims, strides }, convert: !inPlace };
}

/**
 * The first valid row (i < T_b) whose key range is empty, or null. Per batch only the first and
 * the last valid row need checking: the range [i + d − left, i + d + right] ∩ [0, S_b) slides with i.
 */
export function firstEmptyRow(
  p: AttentionProblem,
  right: number | null,
  left: number | null,
  alignment: CausalAlignment,
): { batch: number; row: number } | null {
  for (let b = 0; b < p.B; b++) {
    const Tb = p.querySeqLengths ? p.querySeqLengths[b] : p.T;
    const Sb = p.keyValueSeqLengths ? p.keyValueSeqLengths[b] : p.S;
    if (Tb === 0) continue;
    if (Sb === 0) return { batch: b, row: 0 };
    const d = alignment === 'bottom_right' ? Sb - Tb : 0;
    if (right !== null && d + right < 0) return { batch: b, row: 0 };
    if (left !== null && Tb - 1 + d - left >= Sb) return { batch: b, row: Tb - 1 };
  }
  return null;
}
