/**
 * Reading the sgmat kernel's trace (sgmat-source.ts: TRACE_SECTIONS) against what it should hold
 * (sgmat-check.ts: traceExpectation): each section's worst error, how many values are wrong and
 * the first, and for a wrong M×N score block, the partial products it holds. The scores of the
 * check's problem are sums over head blocks h of q(rows, h)·k(keys, h)ᵀ, each exact in f32, so a
 * block that a driver fault leaves wrong is, more often than not, a sum of the wrong such products
 * (an accumulator not cleared, q's staged rows read where K's should be, a block transposed): a
 * least-squares fit over those candidates names them (benchmarks/harnesses/webgpu-sgmat-trace.ts).
 */
import type { TraceSection } from './sgmat-source.js';

/** Per section, the difference below which a value counts as right (f16 weights, f32 sums). */
export const TRACE_BOUND: Record<TraceSection, number> = {
  ids: 0,
  q: 0,
  kTile: 0,
  kMat: 0,
  sDirect: 0,
  sTile: 0,
  p: 2e-3,
  acc: 2e-2,
};

export interface SectionComparison {
  readonly maxError: number;
  readonly wrong: number;
  readonly of: number;
  readonly first: { index: number; row: number; col: number; got: number; want: number } | null;
  /** The (row block, column block) pairs of M×N blocks with a wrong value, the first 32. */
  readonly badBlocks: string[];
}

/** A section (rows × cols, row-major) against what it should hold. */
export function compareSection(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  cols: number,
  bound: number,
  block: { M: number; N: number },
): SectionComparison {
  let worst = 0;
  let wrong = 0;
  let first: SectionComparison['first'] = null;
  const blocks = new Set<string>();
  for (let e = 0; e < want.length; e++) {
    const d = Math.abs(got[e] - want[e]);
    if (!(d <= worst)) worst = d;
    if (!(d <= bound)) {
      wrong++;
      blocks.add(`${Math.floor(e / cols / block.M)},${Math.floor((e % cols) / block.N)}`);
      if (!first) first = { index: e, row: Math.floor(e / cols), col: e % cols, got: got[e], want: want[e] };
    }
  }
  return { maxError: worst, wrong, of: want.length, first, badBlocks: [...blocks].slice(0, 32) };
}

/** The least-squares solution of X·β ≈ y (X: y.length × cols, row-major), by the normal equations. */
export function leastSquares(X: Float64Array, y: Float64Array, cols: number): Float64Array {
  const w = cols + 1;
  const A = new Float64Array(cols * w);
  for (let i = 0; i < cols; i++) {
    for (let j = 0; j < cols; j++) {
      let s = 0;
      for (let r = 0; r < y.length; r++) s += X[r * cols + i] * X[r * cols + j];
      A[i * w + j] = s;
    }
    let s = 0;
    for (let r = 0; r < y.length; r++) s += X[r * cols + i] * y[r];
    A[i * w + cols] = s;
  }
  for (let c = 0; c < cols; c++) {
    let pivot = c;
    for (let r = c + 1; r < cols; r++) if (Math.abs(A[r * w + c]) > Math.abs(A[pivot * w + c])) pivot = r;
    for (let j = 0; j < w; j++) [A[c * w + j], A[pivot * w + j]] = [A[pivot * w + j], A[c * w + j]];
    const d = A[c * w + c];
    if (Math.abs(d) < 1e-9) continue;
    for (let r = 0; r < cols; r++) {
      if (r === c) continue;
      const f = A[r * w + c] / d;
      if (f !== 0) for (let j = c; j < w; j++) A[r * w + j] -= f * A[c * w + j];
    }
  }
  return Float64Array.from({ length: cols }, (_, c) =>
    Math.abs(A[c * w + c]) < 1e-9 ? 0 : A[c * w + cols] / A[c * w + c],
  );
}

export interface BlockFit {
  readonly block: string;
  /** Candidate → coefficient, for coefficients off zero by more than 0.02. */
  readonly terms: Record<string, number>;
  /** The fit's residual relative to the block's norm: near 0 where the terms explain the block. */
  readonly residualRel: number;
  /** Exact zeros among the block's values. */
  readonly zeros: number;
}

/**
 * What wrong score block (rb, cb) of `got` (rows × cols scores, row-major) holds, as a sum of
 * candidate partial products over key blocks c and head blocks h (each M×N; q and k are the check's
 * T×H rows): "qk c h" = q(rb, h)·k(c, h)ᵀ, the right products of every key block; "qq c h" =
 * q(rb, h)·q(c, h)ᵀ, q's rows where K's should be (q is staged through K's tile); "kqT c h" = the
 * transpose of q(c, h)·k(rb, h)ᵀ, a block stored or loaded transposed; "qkB c h" and "qkA c h" =
 * the product with K's (or q's) K×K operand block transposed, a load that ignored its col_major flag.
 * The last two need square blocks (M = N = K).
 */
export function explainScoreBlock(
  got: ArrayLike<number>,
  cols: number,
  rb: number,
  cb: number,
  inputs: { q: Float64Array; k: Float64Array; H: number; M: number; N: number; K: number },
): BlockFit {
  const { q, k, H, M, N, K } = inputs;
  const kinds = ['qk', 'qq', 'kqT', 'qkB', 'qkA'] as const;
  const keyBlocks = cols / N;
  const width = kinds.length * keyBlocks * (H / K);
  const names: string[] = [];
  const X = new Float64Array(M * N * width);
  let col = 0;
  for (const kind of kinds)
    for (let c = 0; c < keyBlocks; c++)
      for (let h = 0; h < H / K; h++, col++) {
        names.push(`${kind} ${c} ${h}`);
        for (let i = 0; i < M; i++)
          for (let j = 0; j < N; j++) {
            let x = 0;
            for (let d = h * K; d < (h + 1) * K; d++) {
              if (kind === 'qk') x += q[(rb * M + i) * H + d] * k[(c * N + j) * H + d];
              else if (kind === 'qq') x += q[(rb * M + i) * H + d] * q[(c * N + j) * H + d];
              else if (kind === 'kqT') x += q[(c * M + j) * H + d] * k[(rb * N + i) * H + d];
              else if (kind === 'qkB') x += q[(rb * M + i) * H + d] * k[(c * N + d - h * K) * H + h * K + j];
              else x += q[(rb * M + d - h * K) * H + h * K + i] * k[(c * N + j) * H + d];
            }
            X[(i * N + j) * width + col] = x;
          }
      }
  const y = new Float64Array(M * N);
  for (let i = 0; i < M; i++)
    for (let j = 0; j < N; j++) y[i * N + j] = got[(rb * M + i) * cols + cb * N + j];
  const beta = leastSquares(X, y, width);
  let residual = 0;
  let norm = 0;
  for (let e = 0; e < y.length; e++) {
    let fit = 0;
    for (let c = 0; c < width; c++) fit += X[e * width + c] * beta[c];
    residual += (y[e] - fit) ** 2;
    norm += y[e] ** 2;
  }
  const terms: Record<string, number> = {};
  names.forEach((name, c) => {
    if (Math.abs(beta[c]) > 0.02) terms[name] = Math.round(beta[c] * 1000) / 1000;
  });
  return {
    block: `${rb},${cb}`,
    terms,
    residualRel: norm > 0 ? Number(Math.sqrt(residual / norm).toPrecision(3)) : 0,
    zeros: y.filter((x) => x === 0).length,
  };
}

/**
 * The element shift s in [−range, range] for which got[e] = ref[e − s] over the most values (each
 * section flattened row by row, `cols` a row; ref's values outside a row count as zero), with the
 * share of values it explains: a matrix load or store that addresses its tile a few elements off
 * shows as a shift of 1 with every value explained (the H100's traced K matrices: 4, or 6 with
 * fenced loads, against K's tile as scalar loads read it).
 */
export function bestShift(
  got: ArrayLike<number>,
  ref: ArrayLike<number>,
  cols: number,
  range = 16,
): { shift: number; explained: number } {
  let best = { shift: 0, explained: -1 };
  for (let s = -range; s <= range; s++) {
    let hits = 0;
    for (let e = 0; e < got.length; e++) {
      const c = (e % cols) - s;
      const want = c >= 0 && c < cols ? ref[e - s] : 0;
      if (got[e] === want) hits++;
    }
    const explained = got.length ? hits / got.length : 1;
    if (explained > best.explained) best = { shift: s, explained: Math.round(explained * 1000) / 1000 };
  }
  return best;
}
